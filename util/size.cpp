// SPDX-License-Identifier: BSD-2-Clause
#include "incxdp/util/size.h"

#include <fmt/format.h>

#include <cctype>
#include <limits>
#include <stdexcept>

namespace incxdp::util {

uint64_t parse_size(std::string_view text, uint64_t multiple_of) {
    std::string s(text);
    for (char &c : s)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    size_t digits = 0;
    while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits])))
        ++digits;
    auto bad = [&](std::string_view why) {
        return std::invalid_argument(fmt::format("size '{}': {}", text, why));
    };
    if (digits == 0 || digits > 18)
        throw bad("expected a number of bytes with an optional K/M/G suffix, e.g. 64M");
    uint64_t n = std::stoull(s.substr(0, digits));
    std::string suffix = s.substr(digits);
    for (std::string_view tail : {"ib", "b", "i"}) {
        if (suffix.size() > 1 && suffix.ends_with(tail)) {
            suffix.resize(suffix.size() - tail.size());
            break;
        }
    }
    unsigned shift = 0;
    if (suffix == "k")
        shift = 10;
    else if (suffix == "m")
        shift = 20;
    else if (suffix == "g")
        shift = 30;
    else if (!(suffix.empty() || suffix == "b"))
        throw bad("unknown suffix (K, M, G: binary multiples)");
    if (n > (std::numeric_limits<uint64_t>::max() >> shift))
        throw bad("too large");
    n <<= shift;
    if (multiple_of > 1 && n % multiple_of != 0)
        throw bad(fmt::format("not a multiple of {} bytes", multiple_of));
    return n;
}

std::vector<uint64_t> parse_size_list(std::string_view text, uint64_t multiple_of) {
    std::vector<uint64_t> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t comma = text.find(',', pos);
        if (comma == std::string_view::npos)
            comma = text.size();
        out.push_back(parse_size(text.substr(pos, comma - pos), multiple_of));
        pos = comma + 1;
    }
    return out;
}

std::string format_size(uint64_t bytes) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (u + 1 < std::size(units) && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++u;
    }
    return fmt::format("{} {}", bytes, units[u]);
}

double algbw_mbps(uint64_t bytes, double seconds) {
    return seconds > 0 ? double(bytes) / seconds / 1e6 : 0.0;
}

} // namespace incxdp::util
