// SPDX-License-Identifier: BSD-2-Clause
// hostlib's RoCEv2 frame parser and CRC (hostlib/src/roce_frame.h): what the
// roce transport does with every frame its AF_XDP socket hands over.
//
// Input: one selector byte (bit 0: check the ICRC; bit 1: write a correct
// ICRC into the frame first, so that mutations get past that check), then
// the frame. Properties:
// - the PCLMUL CRC equals zlib's on the input;
// - a parsed view lies inside the frame, its lengths add up to the IPv4
//   length, and with the check on, its ICRC is right;
// - BadIcrc only ever comes with the check on and a wrong ICRC;
// - build_roce_frame(parse(x)) parses to the same fields and payload.
#include "check.h"
#include "roce_frame.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

using namespace incxdp::detail;

namespace {

bool inside(std::span<const std::byte> inner, std::span<const std::byte> outer) {
    return inner.empty() ||
           (inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const bool verify = data[0] & 1, fix_icrc = data[0] & 2;
    std::vector<std::byte> f(reinterpret_cast<const std::byte *>(data + 1),
                             reinterpret_cast<const std::byte *>(data + size));

    FUZZ_CHECK(crc32_ieee(0, f) ==
               uint32_t(crc32(0, reinterpret_cast<const Bytef *>(f.data()), uInt(f.size()))));

    RoceFrameView v;
    if (fix_icrc && f.size() >= kRoceHdrLen + 4 && parse_roce(f, v, false) == RoceParse::Ok) {
        uint32_t c = roce_icrc(v.frame);
        std::byte *end = f.data() + v.frame.size();
        for (int i = 0; i < 4; i++)
            end[i - 4] = std::byte(c >> (8 * i));
    }
    RoceParse p = parse_roce(f, v, verify);
    if (p == RoceParse::BadIcrc) {
        FUZZ_CHECK(verify);
        RoceFrameView raw;
        FUZZ_CHECK(parse_roce(f, raw, false) == RoceParse::Ok);
        FUZZ_CHECK(!roce_icrc_ok(raw.frame));
        return 0;
    }
    if (p != RoceParse::Ok)
        return 0;
    FUZZ_CHECK(inside(v.frame, f));
    FUZZ_CHECK(inside(v.payload, v.frame));
    FUZZ_CHECK(v.frame.data() == f.data());
    FUZZ_CHECK(v.frame.size() == kRoceHdrLen + (v.aeth ? 4 : 0) + (v.imm ? 4 : 0) +
                                     v.payload.size() + v.pad + ROCE_ICRC_LEN);
    FUZZ_CHECK(v.dqpn <= ROCE_QPN_MASK && v.psn <= ROCE_PSN_MASK);
    if (verify)
        FUZZ_CHECK(roce_icrc_ok(v.frame));

    // Round trip through the builder (which writes no padding).
    if (v.pad != 0)
        return 0;
    RoceEndpoint e;
    e.src_mac = v.src_mac;
    e.dst_mac = v.dst_mac;
    e.src_ip = v.src_ip;
    e.dst_ip = v.dst_ip;
    e.src_port = v.src_port;
    e.dst_qpn = v.dqpn;
    std::vector<std::byte> out(kRoceHdrLen + 8 + v.payload.size() + ROCE_ICRC_LEN);
    size_t n = build_roce_frame(out, e, v.opcode, v.psn, v.ackreq, v.aeth, v.imm, v.payload);
    FUZZ_CHECK(n <= out.size());
    out.resize(n);
    RoceFrameView w;
    FUZZ_CHECK(parse_roce(out, w, true) == RoceParse::Ok);
    FUZZ_CHECK(w.opcode == v.opcode && w.psn == v.psn && w.dqpn == v.dqpn && w.ackreq == v.ackreq);
    FUZZ_CHECK(w.aeth == v.aeth && w.imm == v.imm);
    FUZZ_CHECK(w.src_ip == v.src_ip && w.dst_ip == v.dst_ip && w.src_port == v.src_port);
    FUZZ_CHECK(w.payload.size() == v.payload.size() &&
               std::memcmp(w.payload.data(), v.payload.data(), v.payload.size()) == 0);
    return 0;
}
