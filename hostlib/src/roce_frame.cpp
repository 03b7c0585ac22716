// SPDX-License-Identifier: BSD-2-Clause
#include "roce_frame.h"

#include <arpa/inet.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace incxdp::detail {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtoUdp = 17;
constexpr uint16_t kIpDf = 0x4000;
constexpr uint16_t kIpMfOffset = 0x3fff;
constexpr size_t kIpOff = kEthHdrLen;
constexpr size_t kUdpOff = kEthHdrLen + kIpv4HdrLen;
// Shortest frame with a BTH and an ICRC (an empty SEND_ONLY).
constexpr size_t kMinRoceFrame = kRoceHdrLen + ROCE_ICRC_LEN;

void put16(std::byte *p, uint16_t v) {
    p[0] = std::byte(v >> 8);
    p[1] = std::byte(v);
}

void put32(std::byte *p, uint32_t v) {
    p[0] = std::byte(v >> 24);
    p[1] = std::byte(v >> 16);
    p[2] = std::byte(v >> 8);
    p[3] = std::byte(v);
}

uint16_t get16(const std::byte *p) {
    return uint16_t(uint16_t(p[0]) << 8 | uint16_t(p[1]));
}

uint32_t get32(const std::byte *p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// Ethernet, IPv4 (lengths and checksum 0), UDP (length 0, checksum 0), BTH
// (PSN 0, no AckReq) for `opcode`.
void write_headers(std::byte *p, const RoceEndpoint &e, uint8_t opcode) {
    std::memcpy(p, e.dst_mac.data(), 6);
    std::memcpy(p + 6, e.src_mac.data(), 6);
    put16(p + 12, kEtherTypeIpv4);
    std::byte *ip = p + kIpOff;
    ip[0] = std::byte(0x45);
    ip[1] = std::byte(0);
    put16(ip + 2, 0);
    put16(ip + 4, 0); // ID 0 with DF: an atomic datagram (RFC 6864)
    put16(ip + 6, kIpDf);
    ip[8] = std::byte(64);
    ip[9] = std::byte(kProtoUdp);
    put16(ip + 10, 0);
    std::memcpy(ip + 12, &e.src_ip, 4);
    std::memcpy(ip + 16, &e.dst_ip, 4);
    std::byte *udp = p + kUdpOff;
    put16(udp, e.src_port);
    put16(udp + 2, INCXDP_ROCE_UDP_PORT);
    put16(udp + 4, 0);
    put16(udp + 6, 0); // RoceSendTemplate fills it in last (docs/ROCE.md §3)
    std::byte *bth = p + kRoceBthOff;
    bth[0] = std::byte(opcode);
    bth[1] = std::byte(ROCE_BTH_TVER);
    put16(bth + 2, ROCE_PKEY_DEFAULT);
    put32(bth + 4, e.dst_qpn & ROCE_QPN_MASK);
    put32(bth + 8, 0);
}

// Lengths and IPv4 checksum for a frame of `frame_len` bytes; `csum_base` is
// the one's complement sum of the header words with length and checksum 0.
void write_lengths(std::byte *p, size_t frame_len, uint32_t csum_base) {
    uint16_t ip_len = uint16_t(frame_len - kEthHdrLen);
    put16(p + kIpOff + 2, ip_len);
    put16(p + kIpOff + 10, uint16_t(~csum_fold(csum_base + ip_len)));
    put16(p + kUdpOff + 4, uint16_t(ip_len - kIpv4HdrLen));
}

uint32_t ip_csum_base(const std::byte *p) {
    uint32_t sum = 0;
    for (size_t i = 0; i < kIpv4HdrLen; i += 2)
        sum += get16(p + kIpOff + i);
    return sum;
}

void put_icrc(std::byte *end, uint32_t crc) {
    // Little-endian, as IBA and Soft-RoCE store it.
    end[-4] = std::byte(crc);
    end[-3] = std::byte(crc >> 8);
    end[-2] = std::byte(crc >> 16);
    end[-1] = std::byte(crc >> 24);
}

uint32_t get_icrc(const std::byte *end) {
    return uint32_t(end[-4]) | uint32_t(end[-3]) << 8 | uint32_t(end[-2]) << 16 |
           uint32_t(end[-1]) << 24;
}

#if defined(__x86_64__)
#define INCXDP_PCLMUL __attribute__((target("pclmul,sse4.1")))

INCXDP_PCLMUL inline __m128i load16(const std::byte *q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
}

// x folded forward by the distance k encodes (both halves), plus `next`.
INCXDP_PCLMUL inline __m128i fold16(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// CRC-32 (reflected 0xEDB88320) by carry-less multiplication (Gopal et al.,
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", Intel
// 2009): four 128-bit lanes fold 64 bytes per step (constants x^(512+32)
// and x^(512-32) mod P, bit-reflected), the lanes fold into one (x^(128+32),
// x^(128-32)), then 128 -> 64 -> 32 bits and a Barrett reduction (the
// constants are mathematical, as in every implementation of the paper).
// `crc` and the result are the raw register, not inverted; n >= 16 and a
// multiple of 16 (one lane below 64). Far faster than zlib's table-driven
// crc32 (docs/HOSTLIB.md §8).
INCXDP_PCLMUL uint32_t crc32_fold(uint32_t crc, const std::byte *p, size_t n) {
    const __m128i k_4lane = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k_1lane = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k_64 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i k_barrett = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_xor_si128(load16(p), _mm_cvtsi32_si128(int(crc)));
    if (n >= 64) {
        __m128i b = load16(p + 16), c = load16(p + 32), d = load16(p + 48);
        for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
            a = fold16(a, k_4lane, load16(p));
            b = fold16(b, k_4lane, load16(p + 16));
            c = fold16(c, k_4lane, load16(p + 32));
            d = fold16(d, k_4lane, load16(p + 48));
        }
        a = fold16(a, k_1lane, b);
        a = fold16(a, k_1lane, c);
        a = fold16(a, k_1lane, d);
    } else {
        p += 16;
        n -= 16;
    }
    for (; n >= 16; p += 16, n -= 16)
        a = fold16(a, k_1lane, load16(p));
    __m128i t = _mm_clmulepi64_si128(a, k_1lane, 0x10); // 128 -> 64 bits
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    t = _mm_srli_si128(a, 4); // 64 -> 32 bits
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k_64, 0x00), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), k_barrett, 0x10); // Barrett
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), k_barrett, 0x00);
    a = _mm_xor_si128(a, t);
    return uint32_t(_mm_extract_epi32(a, 1));
}

bool have_pclmul() {
    // Not a namespace-scope constant: static initialisers may run before
    // libgcc has probed the CPU, hence __builtin_cpu_init().
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }();
    return yes;
}
#endif

// ICRC of the frame [p, p + len), len from the IPv4 total length. The
// pseudo header (48 B, a masked copy) takes the first 16 bytes after the BTH
// along, so that both halves fold whole 16 B blocks (no byte-wise head).
uint32_t icrc_of(const std::byte *p, size_t len) {
    std::array<std::byte, ROCE_ICRC_PSEUDO_LEN + 16> ps;
    std::memset(ps.data(), 0xff, 8);
    std::memcpy(ps.data() + 8, p + kIpOff, kIpv4HdrLen + kUdpHdrLen + sizeof(roce_bth));
    ps[ROCE_ICRC_MASK_TOS] = std::byte(0xff);
    ps[ROCE_ICRC_MASK_TTL] = std::byte(0xff);
    ps[ROCE_ICRC_MASK_IPCSUM] = ps[ROCE_ICRC_MASK_IPCSUM + 1] = std::byte(0xff);
    ps[ROCE_ICRC_MASK_UDPCSUM] = ps[ROCE_ICRC_MASK_UDPCSUM + 1] = std::byte(0xff);
    ps[ROCE_ICRC_MASK_RESV8] = std::byte(0xff);
    size_t rest = len - kRoceHdrLen - ROCE_ICRC_LEN;
    size_t lead = std::min<size_t>(rest, 16);
    std::memcpy(ps.data() + ROCE_ICRC_PSEUDO_LEN, p + kRoceHdrLen, lead);
    uint32_t crc = crc32_ieee(0, std::span(ps).first(ROCE_ICRC_PSEUDO_LEN + lead));
    return crc32_ieee(crc, std::span(p + kRoceHdrLen + lead, rest - lead));
}

// One's complement sum of [p, p + n) in memory order (RFC 1071: byte order
// does not matter until the result is stored), unfolded.
uint64_t sum_mem(const std::byte *p, size_t n) {
    uint64_t a = 0, b = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint32_t x, y;
        std::memcpy(&x, p + i, 4);
        std::memcpy(&y, p + i + 4, 4);
        a += x;
        b += y;
    }
    for (; i + 2 <= n; i += 2) {
        uint16_t x;
        std::memcpy(&x, p + i, 2);
        a += x;
    }
    if (i < n) {
        uint16_t x = 0;
        std::memcpy(&x, p + i, 1);
        a += x;
    }
    return a + b;
}

// The folded sum over the UDP pseudo header and the datagram of a frame
// whose lengths are written (checksum field included): 0xffff if a nonzero
// checksum is right.
uint16_t udp_sum_of(const std::byte *p) {
    const std::byte *udp = p + kUdpOff;
    uint16_t ulen = get16(udp + 4);
    // Protocol and UDP length as they would lie in memory, like the rest.
    uint64_t pseudo = sum_mem(p + kIpOff + 12, 8) + htons(kProtoUdp) + htons(ulen);
    return csum_fold(pseudo + sum_mem(udp, ulen));
}

// The UDP checksum, written last: it covers the ICRC (docs/ROCE.md §3).
void put_udp_csum(std::byte *p) {
    std::byte *check = p + kUdpOff + 6;
    check[0] = check[1] = std::byte(0);
    uint16_t c = uint16_t(~udp_sum_of(p));
    if (c == 0)
        c = 0xffff; // 0 would mean "no checksum"
    std::memcpy(check, &c, 2);
}

// The frame cut to its IPv4 total length, or an empty span if that does not fit.
std::span<const std::byte> ip_trimmed(std::span<const std::byte> f) {
    if (f.size() < kMinRoceFrame)
        return {};
    size_t len = kEthHdrLen + get16(f.data() + kIpOff + 2);
    if (len < kMinRoceFrame || len > f.size())
        return {};
    return f.first(len);
}

} // namespace

uint32_t crc32_ieee(uint32_t crc, std::span<const std::byte> data) {
    const std::byte *p = data.data();
    size_t n = data.size();
#if defined(__x86_64__)
    if (n >= 16 && have_pclmul()) {
        size_t m = n & ~size_t(15);
        crc = ~crc32_fold(~crc, p, m);
        p += m;
        n -= m;
        // The < 16 bytes left a byte at a time through zlib's table:
        // crc32() itself costs more in its setup for such lengths.
        const z_crc_t *table = get_crc_table();
        crc = ~crc;
        for (; n; ++p, --n)
            crc = (crc >> 8) ^ uint32_t(table[(crc ^ uint32_t(*p)) & 0xff]);
        return ~crc;
    }
#endif
    return uint32_t(crc32(crc, reinterpret_cast<const Bytef *>(p), uInt(n)));
}

uint32_t roce_icrc(std::span<const std::byte> frame) {
    auto f = ip_trimmed(frame);
    return f.empty() ? 0 : icrc_of(f.data(), f.size());
}

bool roce_icrc_ok(std::span<const std::byte> frame) {
    auto f = ip_trimmed(frame);
    return !f.empty() && icrc_of(f.data(), f.size()) == get_icrc(f.data() + f.size());
}

RoceSendTemplate::RoceSendTemplate(const RoceEndpoint &e) : ep_(e) {
    write_headers(hdr_.data(), e, ROCE_OP_SEND_ONLY_IMM);
    csum_base_ = ip_csum_base(hdr_.data());
}

size_t RoceSendTemplate::finish(std::byte *frame, size_t payload_len, uint32_t psn, bool ackreq,
                                uint32_t imm) const {
    size_t len = frame_len(payload_len);
    std::memcpy(frame, hdr_.data(), kRoceHdrLen);
    write_lengths(frame, len, csum_base_);
    put32(frame + kRoceBthOff + 8, (ackreq ? ROCE_BTH_ACKREQ : 0u) | (psn & ROCE_PSN_MASK));
    put32(frame + kRoceHdrLen, imm);
    put_icrc(frame + len, icrc_of(frame, len));
    put_udp_csum(frame);
    return len;
}

bool roce_udp_csum_ok(std::span<const std::byte> frame) {
    auto f = ip_trimmed(frame);
    return !f.empty() && get16(f.data() + kUdpOff + 6) != 0 &&
           get16(f.data() + kUdpOff + 4) == f.size() - kUdpOff && udp_sum_of(f.data()) == 0xffff;
}

void roce_put_udp_csum(std::span<std::byte> frame) {
    if (frame.size() < kMinRoceFrame ||
        frame.size() < kEthHdrLen + get16(frame.data() + kIpOff + 2))
        return;
    put_udp_csum(frame.data());
}

void roce_set_ackreq(std::span<std::byte> frame, bool ackreq) {
    if (frame.size() < kMinRoceFrame)
        return;
    std::byte *apsn = frame.data() + kRoceBthOff + 8;
    uint32_t v = get32(apsn);
    v = ackreq ? (v | ROCE_BTH_ACKREQ) : (v & ~ROCE_BTH_ACKREQ);
    put32(apsn, v);
    size_t len = kEthHdrLen + get16(frame.data() + kIpOff + 2);
    if (len > frame.size() || len < kMinRoceFrame)
        return;
    put_icrc(frame.data() + len, icrc_of(frame.data(), len));
    if (get16(frame.data() + kUdpOff + 6) != 0)
        put_udp_csum(frame.data());
}

size_t build_roce_frame(std::span<std::byte> out, const RoceEndpoint &e, uint8_t opcode,
                        uint32_t psn, bool ackreq, std::optional<uint32_t> aeth,
                        std::optional<uint32_t> imm, std::span<const std::byte> payload) {
    size_t len = kRoceHdrLen + (aeth ? 4 : 0) + (imm ? 4 : 0) + payload.size() + ROCE_ICRC_LEN;
    std::byte *p = out.data();
    write_headers(p, e, opcode);
    write_lengths(p, len, ip_csum_base(p));
    put32(p + kRoceBthOff + 8, (ackreq ? ROCE_BTH_ACKREQ : 0u) | (psn & ROCE_PSN_MASK));
    size_t pos = kRoceHdrLen;
    if (aeth) {
        put32(p + pos, *aeth);
        pos += 4;
    }
    if (imm) {
        put32(p + pos, *imm);
        pos += 4;
    }
    if (!payload.empty())
        std::memcpy(p + pos, payload.data(), payload.size());
    put_icrc(p + len, icrc_of(p, len));
    return len;
}

RoceParse parse_roce(std::span<const std::byte> frame, RoceFrameView &out, bool verify_icrc) {
    if (frame.size() < kUdpOff + kUdpHdrLen || get16(frame.data() + 12) != kEtherTypeIpv4)
        return RoceParse::NotRoce;
    const std::byte *ip = frame.data() + kIpOff;
    size_t ihl = size_t(uint8_t(ip[0]) & 0x0f) * 4;
    if ((uint8_t(ip[0]) >> 4) != 4 || ihl < kIpv4HdrLen || uint8_t(ip[9]) != kProtoUdp ||
        frame.size() < kEthHdrLen + ihl + kUdpHdrLen)
        return RoceParse::NotRoce;
    const std::byte *udp = ip + ihl;
    if (get16(udp + 2) != INCXDP_ROCE_UDP_PORT)
        return RoceParse::NotRoce;
    // RoCE from here on: anything unexpected is malformed.
    if (ihl != kIpv4HdrLen || (get16(ip + 6) & kIpMfOffset) != 0)
        return RoceParse::Malformed;
    auto f = ip_trimmed(frame);
    if (f.empty() || get16(udp + 4) != f.size() - kUdpOff)
        return RoceParse::Malformed;
    const std::byte *bth = f.data() + kRoceBthOff;
    uint8_t op = uint8_t(bth[0]);
    uint8_t flags = uint8_t(bth[1]);
    bool is_ack = op == ROCE_OP_ACK;
    if (!(roce_opcode_is_send(op) || is_ack) || (flags & 0x0f) != ROCE_BTH_TVER)
        return RoceParse::Malformed;
    size_t pos = kRoceHdrLen;
    size_t end = f.size() - ROCE_ICRC_LEN;
    out = RoceFrameView{};
    if (is_ack) {
        if (end - pos != 4)
            return RoceParse::Malformed;
        out.aeth = get32(f.data() + pos);
        pos += 4;
    } else if (roce_opcode_has_imm(op)) {
        if (end - pos < 4)
            return RoceParse::Malformed;
        out.imm = get32(f.data() + pos);
        pos += 4;
    }
    out.pad = uint8_t((flags >> 4) & 3);
    if (end - pos < out.pad)
        return RoceParse::Malformed;
    std::memcpy(out.dst_mac.data(), f.data(), 6);
    std::memcpy(out.src_mac.data(), f.data() + 6, 6);
    std::memcpy(&out.src_ip, ip + 12, 4);
    std::memcpy(&out.dst_ip, ip + 16, 4);
    out.src_port = get16(udp);
    out.dst_port = get16(udp + 2);
    out.opcode = op;
    out.dqpn = get32(bth + 4) & ROCE_QPN_MASK;
    uint32_t apsn = get32(bth + 8);
    out.psn = apsn & ROCE_PSN_MASK;
    out.ackreq = (apsn & ROCE_BTH_ACKREQ) != 0;
    out.payload = f.subspan(pos, end - pos - out.pad);
    out.frame = f;
    if (verify_icrc && icrc_of(f.data(), f.size()) != get_icrc(f.data() + f.size()))
        return RoceParse::BadIcrc;
    return RoceParse::Ok;
}

const char *to_string(RoceParse p) {
    switch (p) {
    case RoceParse::Ok:
        return "ok";
    case RoceParse::NotRoce:
        return "not RoCE";
    case RoceParse::Malformed:
        return "malformed";
    case RoceParse::BadIcrc:
        return "bad ICRC";
    }
    return "?";
}

} // namespace incxdp::detail
