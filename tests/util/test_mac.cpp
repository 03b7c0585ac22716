// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/util/mac.h>

#include <gtest/gtest.h>

#include <stdexcept>

using namespace incxdp::util;

TEST(Mac, RoundTrips) {
    const Mac m{0x02, 0x49, 0x58, 0xab, 0x0c, 0x00};
    EXPECT_EQ(format_mac(m), "02:49:58:ab:0c:00");
    EXPECT_EQ(parse_mac("02:49:58:ab:0c:00"), m);
    EXPECT_EQ(parse_mac("02:49:58:AB:0C:00"), m);
    EXPECT_EQ(mac_or_throw("02:49:58:ab:0c:00"), m);
}

TEST(Mac, FormatsTheBytesOfAMapValue) {
    const uint8_t bytes[6] = {0x02, 0x49, 0x58, 0xab, 0x0c, 0xff};
    EXPECT_EQ(format_mac(bytes), "02:49:58:ab:0c:ff");
}

TEST(Mac, RefusesAnythingButSixHexBytes) {
    for (const char *bad :
         {"", "02:49:58", "02:49:58:ab:0c", "02:49:58:ab:0c:00:", "2:49:58:ab:c:0",
          "02-49-58-ab-0c-00", "02:49:58:ab:0c:0g", "02:49:58:ab:0c:00 "})
        EXPECT_FALSE(parse_mac(bad)) << bad;
    try {
        mac_or_throw("02:49");
        FAIL() << "no throw";
    } catch (const std::invalid_argument &e) {
        EXPECT_STREQ(e.what(),
                     "bad MAC address '02:49': expected six hex bytes like 02:49:58:00:01:00");
    }
}
