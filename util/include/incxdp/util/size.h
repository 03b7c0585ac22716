// SPDX-License-Identifier: BSD-2-Clause
// Byte sizes as the tools take and print them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace incxdp::util {

/// "4096", "4K", "64M", "1G", "64MiB", "16kB": binary multiples. The result
/// must be a multiple of `multiple_of` (e.g. 4: whole int32/float32
/// elements). Throws std::invalid_argument naming the text.
uint64_t parse_size(std::string_view text, uint64_t multiple_of = 1);
/// Comma-separated parse_size() values.
std::vector<uint64_t> parse_size_list(std::string_view text, uint64_t multiple_of = 1);
/// 4096 -> "4 KiB", 67108864 -> "64 MiB", 1000 -> "1000 B": the largest
/// binary unit that divides the size exactly.
std::string format_size(uint64_t bytes);
/// Bandwidth in MB/s (10^6 bytes per second); 0 when seconds <= 0.
double algbw_mbps(uint64_t bytes, double seconds);

} // namespace incxdp::util
