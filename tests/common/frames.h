// SPDX-License-Identifier: BSD-2-Clause
// Builds test frames byte by byte from the wire tables (docs/PROTOCOLS.md), on
// purpose independent of hostlib's encoder, katran-style: Eth | IPv4 | UDP |
// payload. All multi-byte fields are written big-endian by hand.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace incxdp::test {

using Bytes = std::vector<uint8_t>;

struct Endpoint {
    std::array<uint8_t, 6> mac{};
    uint32_t ip = 0; // host order, e.g. 0x0a4d0001 for 10.77.0.1
    uint16_t port = 0;
};

inline void put16(Bytes &b, uint16_t v)
{
    b.push_back(uint8_t(v >> 8));
    b.push_back(uint8_t(v));
}
inline void put32(Bytes &b, uint32_t v)
{
    put16(b, uint16_t(v >> 16));
    put16(b, uint16_t(v));
}
// Overwrites 4 bytes at `off`, big-endian.
inline void set32(Bytes &b, size_t off, uint32_t v)
{
    for (size_t i = 0; i < 4; i++)
        b.at(off + i) = uint8_t(v >> (24 - 8 * i));
}
inline uint16_t get16(const Bytes &b, size_t off) { return uint16_t(b.at(off) << 8 | b.at(off + 1)); }
inline uint32_t get32(const Bytes &b, size_t off) { return uint32_t(get16(b, off)) << 16 | get16(b, off + 2); }

constexpr size_t kEth = 14, kIp = 20, kUdp = 8, kL4 = kEth + kIp + kUdp; // payload offset 42

inline uint16_t ip_checksum(const uint8_t *h)
{
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += uint32_t(h[i] << 8 | h[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

// Rewrites the IPv4 header checksum of an Ethernet | IPv4 frame.
inline void fix_ip_checksum(Bytes &f)
{
    f.at(kEth + 10) = f.at(kEth + 11) = 0;
    uint16_t c = ip_checksum(&f.at(kEth));
    f[kEth + 10] = uint8_t(c >> 8);
    f[kEth + 11] = uint8_t(c);
}

// RFC 768 over an Ethernet | IPv4 (no options) | UDP frame, 16-bit words
// byte by byte: the folded one's complement sum of the pseudo header and the
// datagram (the UDP length long), checksum field included. 0xffff when a
// nonzero checksum is right.
inline uint16_t udp_sum(const Bytes &f)
{
    const size_t ip = kEth, udp = kEth + kIp;
    size_t ulen = get16(f, udp + 4);
    uint64_t sum = 17 + ulen;
    for (size_t i = ip + 12; i < ip + 20; i += 2)
        sum += get16(f, i);
    for (size_t i = 0; i < ulen; i += 2)
        sum += uint32_t(f.at(udp + i) << 8 | (i + 1 < ulen ? f.at(udp + i + 1) : 0));
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
}

// Fills in the UDP checksum of such a frame (0 computed goes as 0xffff).
inline void set_udp_csum(Bytes &f)
{
    const size_t at = kEth + kIp + 6;
    f.at(at) = f.at(at + 1) = 0;
    uint16_t c = uint16_t(~udp_sum(f));
    if (c == 0)
        c = 0xffff;
    f[at] = uint8_t(c >> 8);
    f[at + 1] = uint8_t(c);
}

inline Bytes udp_frame(const Endpoint &src, const Endpoint &dst, const Bytes &payload, uint8_t ip_proto = 17)
{
    Bytes b;
    b.insert(b.end(), dst.mac.begin(), dst.mac.end());
    b.insert(b.end(), src.mac.begin(), src.mac.end());
    put16(b, 0x0800);
    size_t ip = b.size();
    b.push_back(0x45);
    b.push_back(0);
    put16(b, uint16_t(kIp + kUdp + payload.size()));
    put16(b, 0x1234); // id
    put16(b, 0);      // flags/frag
    b.push_back(64);
    b.push_back(ip_proto);
    put16(b, 0);
    put32(b, src.ip);
    put32(b, dst.ip);
    uint16_t c = ip_checksum(&b[ip]);
    b[ip + 10] = uint8_t(c >> 8);
    b[ip + 11] = uint8_t(c);
    put16(b, src.port);
    put16(b, dst.port);
    put16(b, uint16_t(kUdp + payload.size()));
    put16(b, 0);
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
}

// docs/PROTOCOLS.md §2: msg_type:4 unused:1 size:3 | job | tsi (LE) | pool_index | e0 | e1 | data
inline Bytes switchml_payload(uint8_t msg_type, uint8_t size, uint8_t job, uint32_t tsi, uint16_t pool_index,
                              int8_t e0, int8_t e1, const std::vector<int32_t> &vals)
{
    Bytes b;
    b.push_back(uint8_t(msg_type << 4 | (size & 7)));
    b.push_back(job);
    for (int i = 0; i < 4; i++)
        b.push_back(uint8_t(tsi >> (8 * i)));
    put16(b, pool_index);
    b.push_back(uint8_t(e0));
    b.push_back(uint8_t(e1));
    for (int32_t v : vals)
        put32(b, uint32_t(v));
    return b;
}

struct NativeFields {
    uint8_t magic = 0x1C;
    uint8_t version = 1;
    uint8_t type = 0; // DATA
    uint8_t op = 0, dtype = 0;
    uint32_t job = 0, round = 0, chunk = 0;
    uint16_t rank = 0, nworkers = 0, slot = 0; // slot includes the set bit
    int16_t nelems = -1;                       // -1: vals.size()
    int8_t exp = 0;
    uint32_t tsi = 0xC0FFEE;
};

// proto.h: magic | ver:4 type:4 | op | dtype | job | round | chunk | rank |
// nworkers | slot | nelems | exp | flags | reserved(2) | tsi | data
inline Bytes native_payload(const NativeFields &f, const std::vector<int32_t> &vals)
{
    Bytes b;
    b.push_back(f.magic);
    b.push_back(uint8_t(f.version << 4 | f.type));
    b.push_back(f.op);
    b.push_back(f.dtype);
    put32(b, f.job);
    put32(b, f.round);
    put32(b, f.chunk);
    put16(b, f.rank);
    put16(b, f.nworkers);
    put16(b, f.slot);
    put16(b, uint16_t(f.nelems < 0 ? vals.size() : size_t(f.nelems)));
    b.push_back(uint8_t(f.exp));
    b.push_back(0);
    put16(b, 0);
    put32(b, f.tsi);
    for (int32_t v : vals)
        put32(b, uint32_t(v));
    return b;
}

inline std::vector<int32_t> values_at(const Bytes &frame, size_t off, size_t n)
{
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = int32_t(get32(frame, off + 4 * i));
    return v;
}

} // namespace incxdp::test
