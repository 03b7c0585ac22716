// SPDX-License-Identifier: BSD-2-Clause
#include "ref_pcap_frame.h"

#include <arpa/inet.h>
#include <zlib.h>

#include <cstring>

namespace incxdp::refsw {
namespace {

void put16(uint8_t *p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t *p, uint32_t v) {
    put16(p, static_cast<uint16_t>(v >> 16));
    put16(p + 2, static_cast<uint16_t>(v));
}
uint16_t get16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t get32(const uint8_t *p) {
    return uint32_t{get16(p)} << 16 | get16(p + 2);
}

uint16_t ip_csum(const uint8_t *ip) {
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += get16(ip + i);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

// Ethernet, IPv4 (ID 0, DF, TTL 64), UDP (checksum 0) and the BTH of a frame
// whose part after the BTH is `rest` bytes long, ICRC included.
void put_headers(uint8_t *f, const Endpoint &e, uint8_t opcode, uint32_t psn, bool ackreq,
                 size_t rest) {
    std::memcpy(f, e.dst_mac.data(), 6);
    std::memcpy(f + 6, e.src_mac.data(), 6);
    put16(f + 12, 0x0800);

    uint8_t *ip = f + kIpOff;
    const size_t tot = 20 + 8 + sizeof(roce_bth) + rest;
    ip[0] = 0x45;
    ip[1] = 0;
    put16(ip + 2, static_cast<uint16_t>(tot));
    put16(ip + 4, 0);
    put16(ip + 6, 0x4000); // DF
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    put16(ip + 10, 0);
    std::memcpy(ip + 12, &e.src_ip, 4);
    std::memcpy(ip + 16, &e.dst_ip, 4);
    put16(ip + 10, ip_csum(ip));

    uint8_t *udp = f + kUdpOff;
    put16(udp, e.sport);
    put16(udp + 2, INCXDP_ROCE_UDP_PORT);
    put16(udp + 4, static_cast<uint16_t>(tot - 20));
    put16(udp + 6, 0);

    uint8_t *bth = f + kBthOff;
    bth[0] = opcode;
    bth[1] = ROCE_BTH_TVER;
    put16(bth + 2, ROCE_PKEY_DEFAULT);
    put32(bth + 4, e.dqpn & ROCE_QPN_MASK);
    put32(bth + 8, (psn & ROCE_PSN_MASK) | (ackreq ? ROCE_BTH_ACKREQ : 0));
}

void put_icrc(uint8_t *f, size_t len) {
    const uint32_t c = icrc(f, len);
    // Little-endian on the wire (IBA A17.3.3: the CRC's first byte out is its low byte).
    f[len] = static_cast<uint8_t>(c);
    f[len + 1] = static_cast<uint8_t>(c >> 8);
    f[len + 2] = static_cast<uint8_t>(c >> 16);
    f[len + 3] = static_cast<uint8_t>(c >> 24);
}

} // namespace

uint32_t icrc(const uint8_t *f, size_t len) {
    std::array<uint8_t, ROCE_ICRC_PSEUDO_LEN> ps;
    std::memset(ps.data(), 0xff, 8);
    std::memcpy(ps.data() + 8, f + kIpOff, ROCE_ICRC_PSEUDO_LEN - 8);
    ps[ROCE_ICRC_MASK_TOS] = 0xff;
    ps[ROCE_ICRC_MASK_TTL] = 0xff;
    ps[ROCE_ICRC_MASK_IPCSUM] = ps[ROCE_ICRC_MASK_IPCSUM + 1] = 0xff;
    ps[ROCE_ICRC_MASK_UDPCSUM] = ps[ROCE_ICRC_MASK_UDPCSUM + 1] = 0xff;
    ps[ROCE_ICRC_MASK_RESV8] = 0xff;
    uLong c = crc32(0L, ps.data(), static_cast<uInt>(ps.size()));
    c = crc32(c, f + kHdrsLen, static_cast<uInt>(len - kHdrsLen));
    return static_cast<uint32_t>(c);
}

size_t build_send(uint8_t *out, const Endpoint &e, uint32_t psn, bool ackreq, uint32_t imm,
                  std::span<const int32_t> vals) {
    const size_t body = ROCE_IMM_LEN + vals.size() * 4;
    put_headers(out, e, ROCE_OP_SEND_ONLY_IMM, psn, ackreq, body + ROCE_ICRC_LEN);
    put32(out + kHdrsLen, imm);
    uint8_t *p = out + kHdrsLen + ROCE_IMM_LEN;
    for (int32_t v : vals) {
        put32(p, static_cast<uint32_t>(v));
        p += 4;
    }
    put_icrc(out, kHdrsLen + body);
    return kHdrsLen + body + ROCE_ICRC_LEN;
}

size_t build_ack(uint8_t *out, const Endpoint &e, uint32_t psn, uint32_t syn_msn) {
    put_headers(out, e, ROCE_OP_ACK, psn, false, sizeof(roce_aeth) + ROCE_ICRC_LEN);
    put32(out + kHdrsLen, syn_msn);
    put_icrc(out, kHdrsLen + sizeof(roce_aeth));
    return ROCE_ACK_FRAME;
}

Parse parse(const uint8_t *f, size_t caplen, View &v) {
    if (caplen < kUdpOff + 8 || get16(f + 12) != 0x0800)
        return Parse::NotRoce;
    const uint8_t *ip = f + kIpOff;
    if ((ip[0] >> 4) != 4 || ip[9] != IPPROTO_UDP)
        return Parse::NotRoce;
    const size_t ihl = (ip[0] & 0xf) * 4u;
    if (ihl < 20 || kIpOff + ihl + 8 > caplen || get16(ip + ihl + 2) != INCXDP_ROCE_UDP_PORT)
        return Parse::NotRoce;
    // RoCE from here on: every refusal is Malformed.
    const size_t tot = get16(ip + 2);
    if (ihl != 20 || (get16(ip + 6) & 0x3fff) != 0 || tot < 20 + 8 + 12 + ROCE_ICRC_LEN ||
        kIpOff + tot > caplen || get16(f + kUdpOff + 4) != tot - 20)
        return Parse::Malformed;
    const size_t end = kIpOff + tot - ROCE_ICRC_LEN; // where the ICRC starts
    const uint8_t *bth = f + kBthOff;
    v.opcode = bth[0];
    size_t off = kHdrsLen;
    v.aeth.reset();
    v.imm.reset();
    if (v.opcode == ROCE_OP_ACK) {
        if (off + 4 > end)
            return Parse::Malformed;
        v.aeth = get32(f + off);
        off += 4;
    } else if (roce_opcode_is_send(v.opcode)) {
        if (roce_opcode_has_imm(v.opcode)) {
            if (off + 4 > end)
                return Parse::Malformed;
            v.imm = get32(f + off);
            off += 4;
        }
    } else {
        return Parse::Malformed;
    }
    const size_t pad = (bth[1] >> 4) & 3;
    if (off + pad > end)
        return Parse::Malformed;

    std::memcpy(v.dst_mac.data(), f, 6);
    std::memcpy(v.src_mac.data(), f + 6, 6);
    std::memcpy(&v.src_ip, ip + 12, 4);
    std::memcpy(&v.dst_ip, ip + 16, 4);
    v.sport = get16(f + kUdpOff);
    v.dqpn = get32(bth + 4) & ROCE_QPN_MASK;
    const uint32_t apsn = get32(bth + 8);
    v.psn = apsn & ROCE_PSN_MASK;
    v.ackreq = (apsn & ROCE_BTH_ACKREQ) != 0;
    v.payload = f + off;
    v.payload_len = end - off - pad;

    const uint8_t *ic = f + end;
    const uint32_t got =
        uint32_t{ic[0]} | uint32_t{ic[1]} << 8 | uint32_t{ic[2]} << 16 | uint32_t{ic[3]} << 24;
    if (got != icrc(f, end))
        return Parse::BadIcrc;
    return Parse::Ok;
}

const char *to_string(Parse p) {
    switch (p) {
    case Parse::Ok:
        return "ok";
    case Parse::NotRoce:
        return "not-roce";
    case Parse::Malformed:
        return "malformed";
    case Parse::BadIcrc:
        return "bad-icrc";
    }
    return "?";
}

} // namespace incxdp::refsw
