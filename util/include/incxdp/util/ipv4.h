// SPDX-License-Identifier: BSD-2-Clause
// IPv4 addresses as text. "Host order" is a uint32_t with the first octet in
// its top byte, what subnet arithmetic wants; "network order" (_be) is
// in_addr::s_addr, what sockets, BPF maps and headers hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace incxdp::util {

/// "a.b.c.d" (inet_pton's strict form) in host order; nullopt if it is not one.
std::optional<uint32_t> parse_ipv4(std::string_view text);
/// The same in network order.
std::optional<uint32_t> parse_ipv4_be(std::string_view text);

/// Throw std::invalid_argument("<what> '<text>' is not an IPv4 address").
uint32_t ipv4_or_throw(std::string_view text, std::string_view what);
uint32_t ipv4_be_or_throw(std::string_view text, std::string_view what);

std::string format_ipv4(uint32_t host_order);
std::string format_ipv4_be(uint32_t net_order);

/// A CIDR block, host order.
struct Cidr {
    uint32_t net = 0, mask = 0;
    int prefix = 0;
    bool contains(uint32_t ip) const { return (ip & mask) == net; }
    /// The network and broadcast addresses are not usable by a node, except
    /// on a /31, a point-to-point link with just the two (RFC 3021).
    bool usable(uint32_t ip) const {
        return contains(ip) && (prefix == 31 || (ip != net && ip != (net | ~mask)));
    }
    uint32_t first_usable() const { return prefix == 31 ? net : net + 1; }
    bool overlaps(const Cidr &o) const {
        const uint32_t m = mask & o.mask; // the shorter prefix
        return (net & m) == (o.net & m);
    }
    std::string str() const;
};

/// "a.b.c.d/len" with len in 1..max_prefix and the host bits zero. On
/// failure returns nullopt and sets *err to what is wrong, quoting text.
std::optional<Cidr> parse_cidr(std::string_view text, int max_prefix, std::string *err);

} // namespace incxdp::util
