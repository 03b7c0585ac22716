// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 frames as incxdp's hosts send and receive them (docs/ROCE.md §2,
// bpf/include/incxdp/roce.h): Ethernet | IPv4 | UDP 4791 | BTH | [AETH] |
// [ImmDt] | payload | ICRC. Built and parsed here, in user space, because the
// AF_XDP transport hands over whole frames and there is no RDMA stack.
#pragma once

#include "frame.h"

#include <incxdp/roce.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace incxdp::detail {

inline constexpr size_t kRoceBthOff = kFrameHdrLen;             // 42
inline constexpr size_t kRoceHdrLen = ROCE_HDRS_LEN;            // 54: Eth + IPv4 + UDP + BTH
inline constexpr size_t kRoceImmPayloadOff = kRoceHdrLen + 4;   // 58: payload of a *_IMM SEND
/// Default payload: path MTU 2048, what an RDMA device on a 3500 B link negotiates.
inline constexpr uint32_t kRoceDefaultElems = 512;
static_assert(kRoceHdrLen == kFrameHdrLen + sizeof(roce_bth));

/// This end of one RC connection as its outgoing frames name it.
struct RoceEndpoint {
    Mac src_mac{}, dst_mac{};
    uint32_t src_ip = 0, dst_ip = 0; ///< network byte order
    uint16_t src_port = 0;           ///< host order; the destination port is always 4791
    uint32_t dst_qpn = 0;            ///< the peer's QPN (< 2^24)
};

/// zlib's crc32(crc, data): CRC-32, reflected 0xEDB88320, init and final
/// xor 0xFFFFFFFF (crc = 0 to start). With PCLMULQDQ where the CPU has it,
/// zlib's tables otherwise and for the tail.
uint32_t crc32_ieee(uint32_t crc, std::span<const std::byte> data);

/// ICRC (roce.h) of a RoCEv2 frame with an option-less IPv4 header: the CRC
/// over the masked pseudo header and everything after the BTH, up to but
/// excluding the frame's last 4 bytes, which hold the ICRC itself. The frame
/// ends where the IPv4 total length says. Needs frame.size() >= 58.
uint32_t roce_icrc(std::span<const std::byte> frame);

/// Whether the last 4 bytes of the (length-trimmed) frame hold its ICRC.
bool roce_icrc_ok(std::span<const std::byte> frame);

/// Whether the frame has a nonzero UDP checksum and it is right (RFC 768).
bool roce_udp_csum_ok(std::span<const std::byte> frame);

/// The prepared headers of one connection's SEND_ONLY_IMM frames: per frame
/// only the lengths, the IPv4 checksum (incremental over the constant
/// words), PSN, AckReq, ImmDt, the ICRC and the UDP checksum are written.
/// RoCEv2 receivers ignore the UDP checksum; incxdp's switches check it
/// instead of the ICRC, which costs them far less (docs/ROCE.md §5).
class RoceSendTemplate {
  public:
    explicit RoceSendTemplate(const RoceEndpoint &e);

    /// Where the payload of a frame goes (the caller writes it first).
    static constexpr size_t payload_offset() { return kRoceImmPayloadOff; }
    /// Frame length for `payload_len` bytes of payload.
    static constexpr size_t frame_len(size_t payload_len) {
        return kRoceImmPayloadOff + payload_len + ROCE_ICRC_LEN;
    }

    /// Complete the frame whose payload is already at frame[58..58+len):
    /// headers, PSN (mod 2^24), AckReq, ImmDt (host order), ICRC, UDP
    /// checksum. Returns
    /// the frame length. `frame` has room for frame_len(payload_len).
    size_t finish(std::byte *frame, size_t payload_len, uint32_t psn, bool ackreq,
                  uint32_t imm) const;

    const RoceEndpoint &endpoint() const { return ep_; }

  private:
    RoceEndpoint ep_;
    std::array<std::byte, kRoceHdrLen> hdr_{};
    uint32_t csum_base_ = 0; ///< one's complement sum of the constant IPv4 words
};

/// Set or clear AckReq in a finished frame and recompute its ICRC (the BTH
/// is covered by it) and its UDP checksum if it has one.
void roce_set_ackreq(std::span<std::byte> frame, bool ackreq);

/// Write the UDP checksum of a finished frame (the switches check it instead
/// of the ICRC when it is nonzero). Frames shorter than their IPv4 length
/// are left alone.
void roce_put_udp_csum(std::span<std::byte> frame);

/// Any RoCEv2 frame this code knows (tests and the software switch use it
/// for ACK/NAK and results): `aeth` goes after the BTH (ACK), `imm` after
/// that (the *_IMM SENDs). Returns the length written to `out`, which must
/// have room for 54 + 4 + 4 + payload + 4 bytes.
size_t build_roce_frame(std::span<std::byte> out, const RoceEndpoint &e, uint8_t opcode,
                        uint32_t psn, bool ackreq, std::optional<uint32_t> aeth,
                        std::optional<uint32_t> imm, std::span<const std::byte> payload);

enum class RoceParse {
    Ok,
    NotRoce,   ///< not IPv4/UDP to port 4791 (not for the RoCE code at all)
    Malformed, ///< RoCE, but bad lengths, IPv4 options or fragments, unknown opcode
    BadIcrc,   ///< well-formed, wrong ICRC
};

/// A parsed frame; the spans point into the frame.
struct RoceFrameView {
    Mac src_mac{}, dst_mac{};
    uint32_t src_ip = 0, dst_ip = 0; ///< network byte order
    uint16_t src_port = 0, dst_port = 0;
    uint8_t opcode = 0;
    uint8_t pad = 0; ///< BTH PadCnt (already cut from the payload)
    uint32_t dqpn = 0;
    uint32_t psn = 0;
    bool ackreq = false;
    std::optional<uint32_t> aeth; ///< ACK: syndrome:8 | MSN:24
    std::optional<uint32_t> imm;  ///< *_IMM SENDs, host order
    std::span<const std::byte> payload;
    std::span<const std::byte> frame; ///< cut to the IPv4 length (no Ethernet padding)
};

/// Parse a SEND (0x00..0x05) or ACK (0x11) frame; with verify_icrc the ICRC
/// is checked last (a frame that is Malformed is never BadIcrc).
RoceParse parse_roce(std::span<const std::byte> frame, RoceFrameView &out, bool verify_icrc = true);

const char *to_string(RoceParse p);

} // namespace incxdp::detail
