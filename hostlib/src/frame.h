// SPDX-License-Identifier: BSD-2-Clause
// Ethernet/IPv4/UDP framing for the AF_XDP transport, which has no kernel
// stack to build and strip these headers, and the bookkeeping of its umem
// frames. Pure functions and plain classes, so they are unit-tested alone.
#pragma once

#include <incxdp/util/mac.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace incxdp::detail {

inline constexpr size_t kEthHdrLen = 14;
inline constexpr size_t kIpv4HdrLen = 20;
inline constexpr size_t kUdpHdrLen = 8;
inline constexpr size_t kFrameHdrLen = kEthHdrLen + kIpv4HdrLen + kUdpHdrLen; // 42

using util::Mac;

/// Both ends of the worker <-> switch flow. IPs in network byte order,
/// ports in host byte order.
struct FrameAddrs {
    Mac src_mac{}, dst_mac{};
    uint32_t src_ip = 0, dst_ip = 0;
    uint16_t src_port = 0, dst_port = 0;
};

/// A one's complement sum (RFC 1071) folded to 16 bits, not inverted.
inline uint16_t csum_fold(uint64_t sum) {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(sum);
}

/// RFC 1071 checksum over `hdr` (an IPv4 header with its checksum field as
/// it is: 0 to compute one, the stored value to verify one, which gives 0).
uint16_t ipv4_checksum(std::span<const std::byte> hdr);

/// The 42 header bytes of every frame the worker sends, prepared once: per
/// frame only the two lengths and the IPv4 checksum change. IPv4: DF set,
/// ID 0 (RFC 6864: atomic datagrams), TTL 64. UDP checksum 0 (none).
class FrameTemplate {
  public:
    explicit FrameTemplate(const FrameAddrs &a);
    /// Write the headers for a UDP payload of `payload_len` bytes at out[0..42).
    void write(std::byte *out, size_t payload_len) const;
    const FrameAddrs &addrs() const { return addrs_; }

  private:
    FrameAddrs addrs_;
    std::array<std::byte, kFrameHdrLen> hdr_{};
    uint32_t csum_base_ = 0; ///< one's complement sum of the constant IPv4 words
};

/// The UDP payload of `frame` if it is IPv4 (any header length, not a
/// fragment) carrying UDP to dst_ip (network order):dst_port (host order);
/// the UDP length field decides the payload's end (Ethernet padding is cut).
std::optional<std::span<const std::byte>> udp_payload_to(std::span<const std::byte> frame,
                                                         uint32_t dst_ip, uint16_t dst_port);

/// Umem frames not in use by the kernel or a caller: a stack of their
/// offsets, allocated once. Pop on send, push on completion.
class FrameStack {
  public:
    /// frames [first, first + count) of frame_size bytes each.
    FrameStack(uint64_t first_frame, uint32_t count, uint32_t frame_size);
    std::optional<uint64_t> pop() {
        if (free_.empty())
            return std::nullopt;
        uint64_t a = free_.back();
        free_.pop_back();
        return a;
    }
    /// Takes any address inside a frame (the kernel may report an offset).
    void push(uint64_t addr) { free_.push_back(addr & ~uint64_t(frame_size_ - 1)); }
    size_t available() const { return free_.size(); }
    uint32_t capacity() const { return capacity_; }

  private:
    std::vector<uint64_t> free_;
    uint32_t frame_size_, capacity_;
};

} // namespace incxdp::detail
