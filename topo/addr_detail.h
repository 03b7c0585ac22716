// SPDX-License-Identifier: BSD-2-Clause
// IPv4 addresses, CIDR blocks, node and interface names and MACs as the
// topology parsers check them (topology.cpp, mesh_topology.cpp).
// Internal to incxdp_topo.
#pragma once

#include "incxdp/topology.h"

#include <arpa/inet.h>
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

inline std::optional<uint32_t> parse_ipv4(const std::string &s) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1)
        return std::nullopt;
    return ntohl(a.s_addr);
}

inline std::string format_ipv4(uint32_t host_order) {
    return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 0xff,
                       (host_order >> 8) & 0xff, host_order & 0xff);
}

struct Cidr {
    uint32_t net = 0, mask = 0;
    int prefix = 0;
    bool contains(uint32_t ip) const { return (ip & mask) == net; }
    // The network and broadcast addresses are not usable by a node, except
    // on a /31, a point-to-point link with just the two (RFC 3021).
    bool usable(uint32_t ip) const {
        return contains(ip) && (prefix == 31 || (ip != net && ip != (net | ~mask)));
    }
    uint32_t first_usable() const { return prefix == 31 ? net : net + 1; }
    bool overlaps(const Cidr &o) const {
        const uint32_t m = mask & o.mask; // the shorter prefix
        return (net & m) == (o.net & m);
    }
    std::string str() const { return fmt::format("{}/{}", format_ipv4(net), prefix); }
};

// Parses "a.b.c.d/len" with len in 1..max_prefix and the host bits zero.
// On failure returns nullopt and sets *err to what is wrong, quoting s.
inline std::optional<Cidr> parse_cidr(const std::string &s, int max_prefix, std::string *err) {
    const auto slash = s.find('/');
    const auto ip = parse_ipv4(s.substr(0, slash));
    if (slash == std::string::npos || !ip) {
        *err = fmt::format("bad CIDR '{}': expected a.b.c.d/len", s);
        return std::nullopt;
    }
    const std::string len = s.substr(slash + 1);
    int prefix = -1;
    if (!len.empty() && len.size() <= 2 && len.find_first_not_of("0123456789") == len.npos)
        prefix = std::stoi(len);
    if (prefix < 1 || prefix > max_prefix) {
        *err = fmt::format("bad CIDR '{}': prefix length must be 1..{}", s, max_prefix);
        return std::nullopt;
    }
    Cidr c;
    c.prefix = prefix;
    c.mask = ~uint32_t{0} << (32 - prefix);
    c.net = *ip & c.mask;
    if (c.net != *ip) {
        *err = fmt::format("bad CIDR '{}': host bits set (did you mean {}/{}?)", s,
                           format_ipv4(c.net), prefix);
        return std::nullopt;
    }
    return c;
}

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
