// SPDX-License-Identifier: BSD-2-Clause
// What the kernel says an interface's driver can do with XDP (the netdev
// generic netlink family, Linux 6.3+), for choices a mode alone cannot make:
// whether frames redirected to an interface (XDP_REDIRECT, BPF_PROG_RUN live
// frames) are transmitted, or dropped where it has no ndo_xdp_xmit. A veth
// transmits them only while its peer has a native XDP program (or GRO on).
#pragma once

#include <cstdint>
#include <optional>

namespace incxdp::netdev {

// NETDEV_XDP_ACT_* of uapi linux/netdev.h (Debian 12's headers predate it).
inline constexpr uint64_t kXdpActBasic = 1u << 0;
inline constexpr uint64_t kXdpActNdoXmit = 1u << 2;

// The NETDEV_XDP_ACT_* bits of `ifindex` in the calling thread's network
// namespace, or nullopt where the kernel cannot say (no netdev family before
// 6.3, no such interface): callers keep their default then.
std::optional<uint64_t> xdp_features(int ifindex);

} // namespace incxdp::netdev
