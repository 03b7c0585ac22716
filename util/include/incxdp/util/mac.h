// SPDX-License-Identifier: BSD-2-Clause
// Ethernet addresses as text: six hex bytes separated by colons.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace incxdp::util {

using Mac = std::array<uint8_t, 6>;

/// "02:49:58:00:01:00" (lower case).
std::string format_mac(const Mac &mac);
/// The same for the six bytes a BPF map value or a header holds.
std::string format_mac(const uint8_t (&bytes)[6]);
/// Exactly "xx:xx:xx:xx:xx:xx", either case; nullopt otherwise.
std::optional<Mac> parse_mac(std::string_view text);
/// Throws std::invalid_argument("bad MAC address '<text>': expected six hex
/// bytes like 02:49:58:00:01:00").
Mac mac_or_throw(std::string_view text);

} // namespace incxdp::util
