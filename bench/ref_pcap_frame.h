// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 frames for the reference pcap switch (bench/ref_pcap_switch.cpp):
// built and parsed per packet in user space, as INC_Emulation's switch does,
// in the wire format of bpf/include/incxdp/roce.h (docs/ROCE.md §2). The ICRC
// is zlib's crc32 over the masked pseudo header, computed on every frame
// built and checked on every frame parsed.
#pragma once

#include <incxdp/roce.h>
#include <incxdp/util/mac.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace incxdp::refsw {

using util::Mac;

inline constexpr size_t kEthLen = 14;
inline constexpr size_t kIpOff = kEthLen;
inline constexpr size_t kUdpOff = kIpOff + 20;
inline constexpr size_t kBthOff = kUdpOff + 8;
inline constexpr size_t kHdrsLen = ROCE_HDRS_LEN; // 54
static_assert(kBthOff + sizeof(roce_bth) == kHdrsLen);
/// Largest frame this code builds or accepts: an *_IMM SEND with ROCE_MAX_PAYLOAD.
inline constexpr size_t kMaxFrame = kHdrsLen + ROCE_IMM_LEN + ROCE_MAX_PAYLOAD + ROCE_ICRC_LEN;

/// Our end of one connection as our frames to the peer name it.
struct Endpoint {
    Mac src_mac{}, dst_mac{};
    uint32_t src_ip = 0, dst_ip = 0; ///< network byte order
    uint16_t sport = 0;              ///< host order; the destination port is 4791
    uint32_t dqpn = 0;               ///< the peer's QPN
};

/// ICRC of frame[0, len) where len ends before the ICRC (IPv4 without options).
uint32_t icrc(const uint8_t *frame, size_t len);

/// SEND_ONLY_IMM: headers, ImmDt, `vals` (host order) written big-endian,
/// ICRC. `out` has room for kMaxFrame. Returns the frame length.
size_t build_send(uint8_t *out, const Endpoint &e, uint32_t psn, bool ackreq, uint32_t imm,
                  std::span<const int32_t> vals);

/// ACK (0x11) with AETH `syn_msn` (ROCE_AETH_ACK or ROCE_AETH_NAK_SEQ | msn).
size_t build_ack(uint8_t *out, const Endpoint &e, uint32_t psn, uint32_t syn_msn);

enum class Parse {
    Ok,
    NotRoce,   ///< not IPv4/UDP to 4791: not ours
    Malformed, ///< bad lengths, IPv4 options/fragments, unknown opcode
    BadIcrc,
};

struct View {
    Mac src_mac{}, dst_mac{};
    uint32_t src_ip = 0, dst_ip = 0; ///< network byte order
    uint16_t sport = 0;
    uint8_t opcode = 0;
    uint32_t dqpn = 0, psn = 0;
    bool ackreq = false;
    std::optional<uint32_t> aeth;     ///< ACK: syndrome:8 | MSN:24
    std::optional<uint32_t> imm;      ///< *_IMM SENDs, host order
    const uint8_t *payload = nullptr; ///< big-endian words, PadCnt already cut
    size_t payload_len = 0;
};

/// Parse one captured frame (caplen bytes; Ethernet padding is ignored).
Parse parse(const uint8_t *frame, size_t caplen, View &out);

const char *to_string(Parse p);

} // namespace incxdp::refsw
