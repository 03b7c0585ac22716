// SPDX-License-Identifier: BSD-2-Clause
#include "incxdp/util/mac.h"

#include <fmt/format.h>

#include <stdexcept>

namespace incxdp::util {

std::string format_mac(const Mac &m) {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                       m[5]);
}

std::string format_mac(const uint8_t (&b)[6]) {
    return format_mac(Mac{b[0], b[1], b[2], b[3], b[4], b[5]});
}

std::optional<Mac> parse_mac(std::string_view s) {
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
            return c - 'A' + 10;
        return -1;
    };
    if (s.size() != 17)
        return std::nullopt;
    Mac m{};
    for (size_t i = 0; i < m.size(); ++i) {
        const int hi = hex(s[3 * i]), lo = hex(s[3 * i + 1]);
        if (hi < 0 || lo < 0 || (i < 5 && s[3 * i + 2] != ':'))
            return std::nullopt;
        m[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    return m;
}

Mac mac_or_throw(std::string_view text) {
    const auto m = parse_mac(text);
    if (!m)
        throw std::invalid_argument(fmt::format(
            "bad MAC address '{}': expected six hex bytes like 02:49:58:00:01:00", text));
    return *m;
}

} // namespace incxdp::util
