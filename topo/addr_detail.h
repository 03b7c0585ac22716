// SPDX-License-Identifier: BSD-2-Clause
// IPv4 addresses, CIDR blocks, node and interface names and MACs as the
// topology parsers check them (topology.cpp, mesh_topology.cpp).
// Internal to incxdp_topo.
#pragma once

#include "incxdp/topology.h"

#include <incxdp/util/ipv4.h>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace incxdp::topo::detail {

// "p-" + name (switch ports) and "m-" + name (mesh links) must fit
// IFNAMSIZ-1 = 15, and the MAC has one byte per node and interface index.
inline constexpr size_t kMaxNodeName = 12;
inline constexpr size_t kMaxIfName = 15;
inline constexpr size_t kMaxIndex = 256;
inline constexpr size_t kMaxNetnsName = 32;
// Jumbo frames. Every XDP program we attach is xdp.frags, which veth takes at
// any MTU (a plain one only up to 3506: frame, headroom and skb_shared_info
// in one 4 KiB page); what the engine handles is still one buffer (~3.5 KB
// frames), larger ones it counts as too_long. 9000 is what we test.
inline constexpr int kMaxMtu = 9000;
inline constexpr int kMinMtu = 68; // IPv4 minimum, also veth's min_mtu

inline bool valid_name(const std::string &s, size_t max_len) {
    if (s.empty() || s.size() > max_len)
        return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    return true;
}

// What the kernel takes (dev_valid_name: no '/', ':' or whitespace, not "."
// or ".."), narrowed to characters that never need quoting.
inline bool valid_ifname(const std::string &s) {
    if (s.empty() || s.size() > kMaxIfName || s == "." || s == "..")
        return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    return true;
}

using util::Cidr;
using util::format_ipv4;
using util::parse_cidr;
using util::parse_ipv4;

// Why a MAC cannot name one interface ("" if it can): a group address
// would be taken as multicast, and 00:00:00:00:00:00 is no address.
inline std::string mac_problem(const Mac &m) {
    if (m[0] & 1)
        return fmt::format("MAC {} is a multicast address (low bit of the first byte set)",
                           mac_to_string(m));
    if (m == Mac{})
        return "MAC 00:00:00:00:00:00 is not an address";
    return "";
}

} // namespace incxdp::topo::detail
