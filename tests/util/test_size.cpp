// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/util/size.h>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using namespace incxdp::util;

TEST(Size, ParsesBinaryMultiples) {
    EXPECT_EQ(parse_size("4096"), 4096u);
    EXPECT_EQ(parse_size("4K"), 4096u);
    EXPECT_EQ(parse_size("4k"), 4096u);
    EXPECT_EQ(parse_size("64M"), 64u << 20);
    EXPECT_EQ(parse_size("64MiB"), 64u << 20);
    EXPECT_EQ(parse_size("16kB"), 16u << 10);
    EXPECT_EQ(parse_size("1G"), 1ull << 30);
    EXPECT_EQ(parse_size("8B"), 8u);
    EXPECT_EQ(parse_size("1"), 1u);
    EXPECT_EQ(parse_size_list("4K,1M"), (std::vector<uint64_t>{4096, 1u << 20}));
}

TEST(Size, RefusalsNameTheText) {
    for (const char *bad : {"", "M", "12X", "4KK", "-4K", "99999999999999999999"})
        EXPECT_THROW(parse_size(bad), std::invalid_argument) << bad;
    EXPECT_THROW(parse_size("17179869184G"), std::invalid_argument); // 2^64
    try {
        parse_size("6", 4);
        FAIL() << "no throw";
    } catch (const std::invalid_argument &e) {
        EXPECT_EQ(std::string(e.what()), "size '6': not a multiple of 4 bytes");
    }
    EXPECT_EQ(parse_size("8", 4), 8u);
    EXPECT_THROW(parse_size_list("4K,,1M"), std::invalid_argument);
    EXPECT_THROW(parse_size_list("4K,6", 4), std::invalid_argument);
}

TEST(Size, FormatsTheLargestExactUnit) {
    EXPECT_EQ(format_size(0), "0 B");
    EXPECT_EQ(format_size(1000), "1000 B");
    EXPECT_EQ(format_size(4096), "4 KiB");
    EXPECT_EQ(format_size(6144), "6 KiB");
    EXPECT_EQ(format_size(64u << 20), "64 MiB");
    EXPECT_EQ(format_size(3ull << 30), "3 GiB");
    EXPECT_EQ(format_size(1ull << 50), "1024 TiB");
}

TEST(Size, Bandwidth) {
    EXPECT_DOUBLE_EQ(algbw_mbps(2'000'000, 2.0), 1.0);
    EXPECT_EQ(algbw_mbps(1, 0), 0.0);
}
