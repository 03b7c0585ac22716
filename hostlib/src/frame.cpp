// SPDX-License-Identifier: BSD-2-Clause
#include "frame.h"

#include <cstring>
#include <stdexcept>

namespace incxdp::detail {
namespace {

void put16(std::byte *p, uint16_t v) {
    p[0] = std::byte(v >> 8);
    p[1] = std::byte(v);
}

uint16_t get16(const std::byte *p) {
    return uint16_t(uint16_t(p[0]) << 8 | uint16_t(p[1]));
}

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtoUdp = 17;
constexpr uint16_t kIpDf = 0x4000;
constexpr uint16_t kIpMfOffset = 0x3fff;

} // namespace

uint16_t ipv4_checksum(std::span<const std::byte> hdr) {
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < hdr.size(); i += 2)
        sum += get16(hdr.data() + i);
    return uint16_t(~csum_fold(sum));
}

FrameTemplate::FrameTemplate(const FrameAddrs &a) : addrs_(a) {
    std::byte *p = hdr_.data();
    std::memcpy(p, a.dst_mac.data(), 6);
    std::memcpy(p + 6, a.src_mac.data(), 6);
    put16(p + 12, kEtherTypeIpv4);
    std::byte *ip = p + kEthHdrLen;
    ip[0] = std::byte(0x45); // version 4, 5 words
    ip[1] = std::byte(0);    // DSCP/ECN
    put16(ip + 2, 0);        // total length: per frame
    put16(ip + 4, 0);        // ID
    put16(ip + 6, kIpDf);
    ip[8] = std::byte(64); // TTL
    ip[9] = std::byte(kProtoUdp);
    put16(ip + 10, 0);                  // checksum: per frame
    std::memcpy(ip + 12, &a.src_ip, 4); // already network order
    std::memcpy(ip + 16, &a.dst_ip, 4);
    std::byte *udp = ip + kIpv4HdrLen;
    put16(udp, a.src_port);
    put16(udp + 2, a.dst_port);
    put16(udp + 4, 0); // length: per frame
    put16(udp + 6, 0); // no checksum
    for (size_t i = 0; i < kIpv4HdrLen; i += 2)
        csum_base_ += get16(ip + i);
}

void FrameTemplate::write(std::byte *out, size_t payload_len) const {
    std::memcpy(out, hdr_.data(), kFrameHdrLen);
    uint16_t ip_len = uint16_t(kIpv4HdrLen + kUdpHdrLen + payload_len);
    std::byte *ip = out + kEthHdrLen;
    put16(ip + 2, ip_len);
    put16(ip + 10, uint16_t(~csum_fold(csum_base_ + ip_len)));
    put16(ip + kIpv4HdrLen + 4, uint16_t(kUdpHdrLen + payload_len));
}

std::optional<std::span<const std::byte>> udp_payload_to(std::span<const std::byte> frame,
                                                         uint32_t dst_ip, uint16_t dst_port) {
    if (frame.size() < kFrameHdrLen || get16(frame.data() + 12) != kEtherTypeIpv4)
        return std::nullopt;
    const std::byte *ip = frame.data() + kEthHdrLen;
    size_t ihl = size_t(uint8_t(ip[0]) & 0x0f) * 4;
    if ((uint8_t(ip[0]) >> 4) != 4 || ihl < kIpv4HdrLen || uint8_t(ip[9]) != kProtoUdp ||
        (get16(ip + 6) & kIpMfOffset) != 0 || std::memcmp(ip + 16, &dst_ip, 4) != 0)
        return std::nullopt;
    size_t udp_off = kEthHdrLen + ihl;
    if (frame.size() < udp_off + kUdpHdrLen)
        return std::nullopt;
    const std::byte *udp = frame.data() + udp_off;
    size_t udp_len = get16(udp + 4);
    if (get16(udp + 2) != dst_port || udp_len < kUdpHdrLen || udp_off + udp_len > frame.size())
        return std::nullopt;
    return frame.subspan(udp_off + kUdpHdrLen, udp_len - kUdpHdrLen);
}

FrameStack::FrameStack(uint64_t first_frame, uint32_t count, uint32_t frame_size)
    : frame_size_(frame_size), capacity_(count) {
    if (frame_size == 0 || (frame_size & (frame_size - 1)) != 0)
        throw std::invalid_argument("umem frame size must be a power of two");
    free_.reserve(count);
    for (uint32_t i = count; i-- > 0;)
        free_.push_back((first_frame + i) * frame_size);
}

} // namespace incxdp::detail
