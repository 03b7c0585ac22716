// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 frames of the roce transport (hostlib/src/roce_frame.h): bytes and
// ICRC against frames built independently by scapy, parse round trips,
// ACK/NAK, the masked ICRC fields, rejections, PSN wrap.
#include "roce_frame.h"

#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace incxdp::detail;
using incxdp::util::ipv4_be_or_throw;

namespace {

std::vector<std::byte> from_hex(const std::string &hex) {
    std::vector<std::byte> out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(std::byte(std::stoul(hex.substr(i, 2), nullptr, 16)));
    return out;
}

// Produced once with Debian's python3-scapy 2.5.0 (scapy.contrib.roce, whose
// BTH.compute_icrc masks TOS/TTL/IP checksum/UDP checksum/resv8 and stores
// the CRC little-endian):
//
//   from scapy.all import Ether, IP, UDP, Raw, raw
//   from scapy.contrib.roce import BTH, AETH
//   import struct
//   imm = struct.pack("!I", (2 << 16) | (1 << 14) | (1 << 12))  # Reduce root 2, SUM, INT32
//   payload = b"".join(struct.pack("!i", i * 1000003 - 7) for i in range(16))
//   p = (Ether(src="02:49:58:04:00:00", dst="02:49:58:00:02:00") /
//        IP(src="10.80.0.1", dst="10.80.0.253", id=0, flags="DF", ttl=64) /
//        UDP(sport=0xC001, dport=4791, chksum=0) /
//        BTH(opcode=0x05, pkey=0xffff, dqpn=0x000123, ackreq=1, psn=0xFFFFFE) /
//        Raw(imm + payload))
//   print(raw(p).hex())
//   a = (Ether(src="02:49:58:00:02:00", dst="02:49:58:04:00:00") /
//        IP(src="10.80.0.253", dst="10.80.0.1", id=0, flags="DF", ttl=64) /
//        UDP(sport=0xC101, dport=4791, chksum=0) /
//        BTH(opcode=0x11, dqpn=0x000456, psn=0x000002) / AETH(syndrome=0x60, msn=7))
//   print(raw(a).hex())
//   p[UDP].chksum = None  # scapy's own UDP checksum, over the ICRC too
//   print(raw(p).hex())
const char *kScapySendOnlyImm =
    "02495800020002495804000008004500007000004000401124e00a5000010a5000fdc00112b7005c00000500"
    "ffff0000012380fffffe00025000fffffff9000f423c001e847f002dc6c2003d0905004c4b48005b8d8b006a"
    "cfce007a1211008954540098969700a7d8da00b71b1d00c65d6000d59fa300e4e1e6dc9a3170";
const uint32_t kScapySendIcrc = 0x70319adc; // last 4 bytes, little-endian
// The same SEND with its UDP checksum (0x1b91), as RoceSendTemplate sends it.
const char *kScapySendOnlyImmCsum =
    "02495800020002495804000008004500007000004000401124e00a5000010a5000fdc00112b7005c1b910500"
    "ffff0000012380fffffe00025000fffffff9000f423c001e847f002dc6c2003d0905004c4b48005b8d8b006a"
    "cfce007a1211008954540098969700a7d8da00b71b1d00c65d6000d59fa300e4e1e6dc9a3170";
const char *kScapyNak = "02495804000002495800020008004500003000004000401125200a5000fd0a500001c101"
                        "12b7001c00001100ffff000004560000000260000007ca7dfa23";

RoceEndpoint host_end() {
    RoceEndpoint e;
    e.src_mac = {0x02, 0x49, 0x58, 0x04, 0x00, 0x00};
    e.dst_mac = {0x02, 0x49, 0x58, 0x00, 0x02, 0x00};
    e.src_ip = ipv4_be_or_throw("10.80.0.1", "test address");
    e.dst_ip = ipv4_be_or_throw("10.80.0.253", "test address");
    e.src_port = 0xc001;
    e.dst_qpn = 0x123;
    return e;
}

RoceEndpoint switch_end() {
    RoceEndpoint e;
    e.src_mac = {0x02, 0x49, 0x58, 0x00, 0x02, 0x00};
    e.dst_mac = {0x02, 0x49, 0x58, 0x04, 0x00, 0x00};
    e.src_ip = ipv4_be_or_throw("10.80.0.253", "test address");
    e.dst_ip = ipv4_be_or_throw("10.80.0.1", "test address");
    e.src_port = 0xc101;
    e.dst_qpn = 0x456;
    return e;
}

const uint32_t kImm = roce_imm_make(2, ROCE_PRIM_REDUCE, ROCE_OPR_SUM, ROCE_DTYPE_INT32);

// The template's frame for the scapy vector: payload written first, as the
// engine does.
std::vector<std::byte> template_frame(uint32_t psn, bool ackreq) {
    std::vector<std::byte> f(RoceSendTemplate::frame_len(64));
    for (int i = 0; i < 16; ++i) {
        uint32_t v = htonl(uint32_t(i * 1000003 - 7));
        std::memcpy(f.data() + RoceSendTemplate::payload_offset() + 4 * i, &v, 4);
    }
    RoceSendTemplate t(host_end());
    EXPECT_EQ(t.finish(f.data(), 64, psn, ackreq, kImm), f.size());
    return f;
}

} // namespace

TEST(RoceFrame, SendOnlyImmMatchesScapyByteForByte) {
    auto want = from_hex(kScapySendOnlyImmCsum);
    auto got = template_frame(0xfffffe, true);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want);
    EXPECT_EQ(roce_icrc(want), kScapySendIcrc);
    EXPECT_TRUE(roce_icrc_ok(want));
    EXPECT_TRUE(roce_udp_csum_ok(want));
    // The template is reused: a second frame of another connection state
    // does not disturb the first's bytes when rebuilt.
    auto other = template_frame(5, false);
    EXPECT_NE(other, want);
    EXPECT_EQ(template_frame(0xfffffe, true), want);
}

TEST(RoceFrame, GenericBuilderMatchesScapyNakAndSend) {
    auto nak = from_hex(kScapyNak);
    std::vector<std::byte> f(128);
    size_t n =
        build_roce_frame(f, switch_end(), ROCE_OP_ACK, 2, false, 0x60000007, std::nullopt, {});
    ASSERT_EQ(n, size_t(ROCE_ACK_FRAME));
    f.resize(n);
    EXPECT_EQ(f, nak);

    auto send = from_hex(kScapySendOnlyImm);
    std::vector<std::byte> g(256);
    n = build_roce_frame(g, host_end(), ROCE_OP_SEND_ONLY_IMM, 0xfffffe, true, std::nullopt, kImm,
                         std::span(send).subspan(58, 64));
    g.resize(n);
    EXPECT_EQ(g, send);
}

TEST(RoceFrame, ParseSendAndNak) {
    auto send = from_hex(kScapySendOnlyImm);
    RoceFrameView v;
    ASSERT_EQ(parse_roce(send, v), RoceParse::Ok);
    EXPECT_EQ(v.opcode, ROCE_OP_SEND_ONLY_IMM);
    EXPECT_EQ(v.dqpn, 0x123u);
    EXPECT_EQ(v.psn, 0xfffffeu);
    EXPECT_TRUE(v.ackreq);
    ASSERT_TRUE(v.imm);
    EXPECT_EQ(*v.imm, kImm);
    EXPECT_EQ(roce_imm_dest(*v.imm), 2);
    EXPECT_EQ(roce_imm_prim(*v.imm), ROCE_PRIM_REDUCE);
    EXPECT_FALSE(v.aeth);
    ASSERT_EQ(v.payload.size(), 64u);
    uint32_t be;
    std::memcpy(&be, v.payload.data() + 4 * 3, 4);
    EXPECT_EQ(int32_t(ntohl(be)), 3 * 1000003 - 7);
    EXPECT_EQ(v.src_ip, ipv4_be_or_throw("10.80.0.1", "test address"));
    EXPECT_EQ(v.dst_ip, ipv4_be_or_throw("10.80.0.253", "test address"));
    EXPECT_EQ(v.src_port, 0xc001);
    EXPECT_EQ(v.dst_port, 4791);
    EXPECT_EQ(v.src_mac, host_end().src_mac);

    auto nak = from_hex(kScapyNak);
    ASSERT_EQ(parse_roce(nak, v), RoceParse::Ok);
    EXPECT_EQ(v.opcode, ROCE_OP_ACK);
    EXPECT_EQ(v.psn, 2u);
    EXPECT_EQ(v.dqpn, 0x456u);
    ASSERT_TRUE(v.aeth);
    EXPECT_EQ(*v.aeth & ROCE_AETH_SYNDROME_MASK, ROCE_AETH_NAK_SEQ);
    EXPECT_EQ(*v.aeth & ROCE_AETH_MSN_MASK, 7u);
    EXPECT_FALSE(v.imm);
    EXPECT_TRUE(v.payload.empty());
}

TEST(RoceFrame, BuildParseRoundTripsAllShapes) {
    RoceEndpoint e = host_end();
    std::vector<std::byte> payload(2048);
    for (size_t i = 0; i < payload.size(); ++i)
        payload[i] = std::byte(i * 7);
    struct Case {
        uint8_t op;
        std::optional<uint32_t> aeth, imm;
        size_t len;
    } cases[] = {
        {ROCE_OP_SEND_ONLY_IMM, std::nullopt, kImm, 0},    // Barrier / completion: 62 B
        {ROCE_OP_SEND_ONLY_IMM, std::nullopt, kImm, 2048}, // full payload
        {ROCE_OP_SEND_ONLY, std::nullopt, std::nullopt, 1024},
        {ROCE_OP_SEND_FIRST, std::nullopt, std::nullopt, 64},
        {ROCE_OP_SEND_LAST_IMM, std::nullopt, 0xffff0000u, 64},
        {ROCE_OP_ACK, ROCE_AETH_ACK | 0x123456, std::nullopt, 0},
    };
    for (const auto &c : cases) {
        std::vector<std::byte> f(4096);
        size_t n = build_roce_frame(f, e, c.op, 0x1000005, false, c.aeth, c.imm,
                                    std::span(payload).first(c.len));
        f.resize(n);
        RoceFrameView v;
        ASSERT_EQ(parse_roce(f, v), RoceParse::Ok) << int(c.op);
        EXPECT_EQ(v.opcode, c.op);
        EXPECT_EQ(v.psn, 5u) << "PSN is taken mod 2^24";
        EXPECT_EQ(v.aeth, c.aeth);
        EXPECT_EQ(v.imm, c.imm);
        ASSERT_EQ(v.payload.size(), c.len);
        EXPECT_TRUE(std::equal(v.payload.begin(), v.payload.end(), payload.begin()));
    }
    std::vector<std::byte> f(4096);
    EXPECT_EQ(build_roce_frame(f, e, ROCE_OP_SEND_ONLY_IMM, 0, false, std::nullopt, kImm, {}),
              size_t(ROCE_MIN_IMM_FRAME));
}

TEST(RoceFrame, IcrcIgnoresMaskedFieldsOnly) {
    auto base = from_hex(kScapySendOnlyImm);
    // Bytes the ICRC masks: TOS (15), TTL (22), IPv4 checksum (24-25), UDP
    // checksum (40-41), BTH resv8 (46). Changing them keeps it valid.
    for (size_t off : {15, 22, 24, 25, 40, 41, 46}) {
        auto f = base;
        f[off] ^= std::byte(0x5a);
        EXPECT_TRUE(roce_icrc_ok(f)) << "offset " << off;
    }
    // Anything else it covers breaks it: addresses, ports, BTH, ImmDt, payload.
    for (size_t off : {26, 33, 34, 37, 42, 45, 49, 53, 55, 80, 121}) {
        auto f = base;
        f[off] ^= std::byte(0x01);
        EXPECT_FALSE(roce_icrc_ok(f)) << "offset " << off;
        RoceFrameView v;
        EXPECT_NE(parse_roce(f, v), RoceParse::Ok) << "offset " << off;
    }
    auto f = base;
    f[100] ^= std::byte(0x80);
    RoceFrameView v;
    EXPECT_EQ(parse_roce(f, v), RoceParse::BadIcrc);
    EXPECT_EQ(parse_roce(f, v, false), RoceParse::Ok) << "without verification";
    // The Ethernet header is not covered (the ICRC is end to end above L2).
    f = base;
    f[0] ^= std::byte(0xff);
    EXPECT_TRUE(roce_icrc_ok(f));
}

TEST(RoceFrame, AckReqFlipRecomputesIcrc) {
    auto f = from_hex(kScapySendOnlyImmCsum);
    roce_set_ackreq(f, false);
    RoceFrameView v;
    ASSERT_EQ(parse_roce(f, v), RoceParse::Ok);
    EXPECT_FALSE(v.ackreq);
    EXPECT_EQ(v.psn, 0xfffffeu);
    EXPECT_TRUE(roce_udp_csum_ok(f));
    EXPECT_EQ(f, template_frame(0xfffffe, false));
    roce_set_ackreq(f, true);
    EXPECT_EQ(f, from_hex(kScapySendOnlyImmCsum));
    // A frame without a UDP checksum keeps none.
    auto g = from_hex(kScapySendOnlyImm);
    roce_set_ackreq(g, false);
    ASSERT_EQ(parse_roce(g, v), RoceParse::Ok);
    EXPECT_FALSE(v.ackreq);
    EXPECT_EQ(g[40], std::byte{0});
    EXPECT_EQ(g[41], std::byte{0});
}

// What the switches check instead of the ICRC (docs/ROCE.md §3): every byte
// of the datagram counts, a 0 checksum is "none", the addresses count through
// the pseudo header and the Ethernet header does not.
TEST(RoceFrame, UdpChecksumCoversTheDatagramAndThePseudoHeader) {
    const auto base = template_frame(0x1234, false);
    ASSERT_TRUE(roce_udp_csum_ok(base));
    for (size_t i = 26; i < base.size(); ++i) { // IPv4 addresses onwards
        auto f = base;
        f[i] ^= std::byte(0x10);
        EXPECT_FALSE(roce_udp_csum_ok(f)) << "byte " << i;
    }
    auto f = base;
    f[0] ^= std::byte(0xff);
    EXPECT_TRUE(roce_udp_csum_ok(f)) << "the Ethernet header is not covered";
    f = base;
    f[40] = f[41] = std::byte{0};
    EXPECT_FALSE(roce_udp_csum_ok(f)) << "no checksum is not a right one";
    EXPECT_TRUE(roce_icrc_ok(f)) << "the ICRC masks the UDP checksum";
}

// RFC 768: a checksum that computes to 0 is sent as 0xffff, 0 meaning "none".
// A folded sum of data that is not all zero is never 0, so check 0xffff
// appears only where the computed checksum was 0: about 1 in 65536 payloads.
TEST(RoceFrame, AChecksumThatComputesToZeroGoesAsAllOnes) {
    RoceSendTemplate t(host_end());
    std::vector<std::byte> f(RoceSendTemplate::frame_len(64));
    std::optional<uint32_t> hit;
    for (uint32_t y = 0; y < (1u << 22) && !hit; ++y) {
        uint32_t be = htonl(y);
        std::memcpy(f.data() + RoceSendTemplate::payload_offset() + 60, &be, 4);
        t.finish(f.data(), 64, 77, false, kImm);
        uint16_t check = uint16_t(uint16_t(f[40]) << 8 | uint16_t(f[41]));
        ASSERT_NE(check, 0) << "payload word " << y << ": 0 is \"no checksum\"";
        if (check == 0xffff)
            hit = y;
    }
    ASSERT_TRUE(hit) << "no payload word in 2^22 makes the checksum compute to 0";
    EXPECT_TRUE(roce_udp_csum_ok(f));
    EXPECT_TRUE(roce_icrc_ok(f));
}

TEST(RoceFrame, EthernetPaddingIsCut) {
    auto f = from_hex(kScapyNak);
    f.resize(f.size() + 10, std::byte{0}); // short frames padded below 64 B
    RoceFrameView v;
    ASSERT_EQ(parse_roce(f, v), RoceParse::Ok);
    EXPECT_EQ(v.frame.size(), size_t(ROCE_ACK_FRAME));
    EXPECT_TRUE(roce_icrc_ok(f));
}

TEST(RoceFrame, Rejections) {
    auto good = from_hex(kScapySendOnlyImm);
    RoceFrameView v;
    auto f = good;
    f[12] = std::byte(0x86); // not IPv4
    EXPECT_EQ(parse_roce(f, v), RoceParse::NotRoce);
    f = good;
    f[37] = std::byte(0x00); // UDP dst port not 4791
    EXPECT_EQ(parse_roce(f, v), RoceParse::NotRoce);
    f = good;
    f[23] = std::byte(6); // TCP
    EXPECT_EQ(parse_roce(f, v), RoceParse::NotRoce);
    EXPECT_EQ(parse_roce(std::span(good).first(40), v), RoceParse::NotRoce);
    // Truncated below the IPv4 length.
    EXPECT_EQ(parse_roce(std::span(good).first(good.size() - 1), v), RoceParse::Malformed);
    f = good;
    f[20] = std::byte(0x20); // MF: a fragment
    EXPECT_EQ(parse_roce(f, v), RoceParse::Malformed);
    f = good;
    f[39] ^= std::byte(1); // UDP length disagrees with IPv4's
    EXPECT_EQ(parse_roce(f, v), RoceParse::Malformed);
    f = good;
    f[42] = std::byte(0x0c); // RDMA READ request: not ours
    EXPECT_EQ(parse_roce(f, v), RoceParse::Malformed);
    f = good;
    f[43] = std::byte(0x01); // TVer 1
    EXPECT_EQ(parse_roce(f, v), RoceParse::Malformed);
    // IPv4 options shift the UDP header: RoCE, but not a shape we take.
    f = good;
    f.insert(f.begin() + 34, 4, std::byte{1});
    f[14] = std::byte(0x46);
    uint16_t tl = uint16_t(good.size() - 14 + 4);
    f[16] = std::byte(tl >> 8);
    f[17] = std::byte(tl);
    EXPECT_EQ(parse_roce(f, v), RoceParse::Malformed);
    // An ACK must carry exactly its AETH.
    std::vector<std::byte> a(128);
    size_t n =
        build_roce_frame(a, switch_end(), ROCE_OP_ACK, 1, false, std::nullopt, std::nullopt, {});
    a.resize(n);
    EXPECT_EQ(parse_roce(a, v), RoceParse::Malformed);
}

TEST(RoceFrame, PsnDistanceAcrossTheWrap) {
    EXPECT_EQ(roce_psn_diff(2, 0xfffffe), 4);
    EXPECT_EQ(roce_psn_diff(0xfffffe, 2), -4);
    EXPECT_EQ(roce_psn_diff(0, 0xffffff), 1);
    EXPECT_EQ(roce_psn_diff(0x7fffff, 0), 0x7fffff);
    EXPECT_EQ(roce_psn_diff(0x800000, 0), -0x800000);
    auto f = template_frame(0xffffff + 3, false);
    RoceFrameView v;
    ASSERT_EQ(parse_roce(f, v), RoceParse::Ok);
    EXPECT_EQ(v.psn, 2u);
}

TEST(RoceFrame, FastCrcEqualsZlib) {
    std::mt19937_64 rng(42);
    std::vector<std::byte> buf(5000);
    for (auto &b : buf)
        b = std::byte(rng());
    for (int it = 0; it < 20000; ++it) {
        size_t off = rng() % 64, n = rng() % 4200;
        uint32_t init = it % 3 == 0 ? 0 : uint32_t(rng());
        uint32_t want =
            uint32_t(crc32(init, reinterpret_cast<const Bytef *>(buf.data() + off), uInt(n)));
        ASSERT_EQ(crc32_ieee(init, std::span(buf).subspan(off, n)), want)
            << "offset " << off << " length " << n;
    }
    // Chained calls equal one call over the whole.
    uint32_t a = crc32_ieee(crc32_ieee(0, std::span(buf).first(100)), std::span(buf).subspan(100));
    EXPECT_EQ(a, crc32_ieee(0, buf));
}
