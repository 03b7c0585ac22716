// SPDX-License-Identifier: BSD-2-Clause
#include "incxdp/util/ipv4.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <stdexcept>

namespace incxdp::util {

std::optional<uint32_t> parse_ipv4_be(std::string_view text) {
    // inet_pton wants a terminated string; longer text is no address anyway.
    char buf[INET_ADDRSTRLEN];
    if (text.size() >= sizeof(buf))
        return std::nullopt;
    text.copy(buf, text.size());
    buf[text.size()] = '\0';
    in_addr a{};
    if (inet_pton(AF_INET, buf, &a) != 1)
        return std::nullopt;
    return a.s_addr;
}

std::optional<uint32_t> parse_ipv4(std::string_view text) {
    const auto be = parse_ipv4_be(text);
    if (!be)
        return std::nullopt;
    return ntohl(*be);
}

uint32_t ipv4_be_or_throw(std::string_view text, std::string_view what) {
    const auto be = parse_ipv4_be(text);
    if (!be)
        throw std::invalid_argument(fmt::format("{} '{}' is not an IPv4 address", what, text));
    return *be;
}

uint32_t ipv4_or_throw(std::string_view text, std::string_view what) {
    return ntohl(ipv4_be_or_throw(text, what));
}

std::string format_ipv4(uint32_t host_order) {
    return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 0xff,
                       (host_order >> 8) & 0xff, host_order & 0xff);
}

std::string format_ipv4_be(uint32_t net_order) {
    return format_ipv4(ntohl(net_order));
}

std::string Cidr::str() const {
    return fmt::format("{}/{}", format_ipv4(net), prefix);
}

std::optional<Cidr> parse_cidr(std::string_view text, int max_prefix, std::string *err) {
    const auto slash = text.find('/');
    const auto ip = parse_ipv4(text.substr(0, slash));
    if (slash == std::string_view::npos || !ip) {
        *err = fmt::format("bad CIDR '{}': expected a.b.c.d/len", text);
        return std::nullopt;
    }
    const std::string_view len = text.substr(slash + 1);
    int prefix = -1;
    if (!len.empty() && len.size() <= 2 && len.find_first_not_of("0123456789") == len.npos)
        prefix = std::stoi(std::string(len));
    if (prefix < 1 || prefix > max_prefix) {
        *err = fmt::format("bad CIDR '{}': prefix length must be 1..{}", text, max_prefix);
        return std::nullopt;
    }
    Cidr c;
    c.prefix = prefix;
    c.mask = ~uint32_t{0} << (32 - prefix);
    c.net = *ip & c.mask;
    if (c.net != *ip) {
        *err = fmt::format("bad CIDR '{}': host bits set (did you mean {}/{}?)", text,
                           format_ipv4(c.net), prefix);
        return std::nullopt;
    }
    return c;
}

} // namespace incxdp::util
