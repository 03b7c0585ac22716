// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using namespace incxdp::util;

TEST(Ipv4, ParsesHostAndNetworkOrder) {
    EXPECT_EQ(parse_ipv4("10.0.0.1"), 0x0a000001u);
    EXPECT_EQ(parse_ipv4("255.255.255.255"), 0xffffffffu);
    EXPECT_EQ(parse_ipv4_be("10.0.0.1"), htonl(0x0a000001u));
    // Only a view of the address is read, not what follows it.
    const std::string s = "10.1.2.3/24";
    EXPECT_EQ(parse_ipv4(std::string_view(s).substr(0, 8)), 0x0a010203u);
}

TEST(Ipv4, RefusesWhatIsNotADottedQuad) {
    for (const char *bad : {"", "10.0.0", "10.0.0.256", "10.0.0.1 ", "a.b.c.d", "10.0.0.1/24",
                            "1.2.3.4.5", "0x0a.0.0.1", "10.0.0.1.............."})
        EXPECT_FALSE(parse_ipv4(bad)) << bad;
}

TEST(Ipv4, ThrowingFormsNameTheTextAndWhatItWasFor) {
    EXPECT_EQ(ipv4_or_throw("192.168.1.2", "x"), 0xc0a80102u);
    EXPECT_EQ(ipv4_be_or_throw("192.168.1.2", "x"), htonl(0xc0a80102u));
    try {
        ipv4_be_or_throw("10.0.0.x", "--switch-ip");
        FAIL() << "no throw";
    } catch (const std::invalid_argument &e) {
        EXPECT_STREQ(e.what(), "--switch-ip '10.0.0.x' is not an IPv4 address");
    }
    EXPECT_THROW(ipv4_or_throw("", "local address"), std::invalid_argument);
}

TEST(Ipv4, FormatsBothOrders) {
    EXPECT_EQ(format_ipv4(0x0a4d0003u), "10.77.0.3");
    EXPECT_EQ(format_ipv4_be(htonl(0x0a4d0003u)), "10.77.0.3");
    EXPECT_EQ(format_ipv4(0), "0.0.0.0");
    for (const char *s : {"1.2.3.4", "255.0.128.7"})
        EXPECT_EQ(format_ipv4_be(*parse_ipv4_be(s)), s);
}

TEST(Ipv4, Cidr) {
    std::string err;
    const auto c = parse_cidr("10.9.0.0/24", 30, &err);
    ASSERT_TRUE(c) << err;
    EXPECT_EQ(c->net, 0x0a090000u);
    EXPECT_EQ(c->mask, 0xffffff00u);
    EXPECT_EQ(c->prefix, 24);
    EXPECT_EQ(c->str(), "10.9.0.0/24");
    EXPECT_TRUE(c->usable(0x0a090001u));
    EXPECT_FALSE(c->usable(0x0a090000u)); // network
    EXPECT_FALSE(c->usable(0x0a0900ffu)); // broadcast
    EXPECT_FALSE(c->contains(0x0a090100u));
    EXPECT_EQ(c->first_usable(), 0x0a090001u);

    const auto p2p = parse_cidr("10.9.0.0/31", 31, &err);
    ASSERT_TRUE(p2p) << err;
    EXPECT_TRUE(p2p->usable(0x0a090000u)); // RFC 3021
    EXPECT_EQ(p2p->first_usable(), 0x0a090000u);
    EXPECT_TRUE(c->overlaps(*p2p));
    EXPECT_FALSE(c->overlaps(*parse_cidr("10.9.1.0/24", 30, &err)));
}

TEST(Ipv4, CidrErrorsSayWhatIsWrong) {
    std::string err;
    EXPECT_FALSE(parse_cidr("10.9.0.0", 30, &err));
    EXPECT_EQ(err, "bad CIDR '10.9.0.0': expected a.b.c.d/len");
    EXPECT_FALSE(parse_cidr("10.9.0/24", 30, &err));
    EXPECT_EQ(err, "bad CIDR '10.9.0/24': expected a.b.c.d/len");
    EXPECT_FALSE(parse_cidr("10.9.0.0/31", 30, &err));
    EXPECT_EQ(err, "bad CIDR '10.9.0.0/31': prefix length must be 1..30");
    EXPECT_FALSE(parse_cidr("10.9.0.0/", 30, &err));
    EXPECT_FALSE(parse_cidr("10.9.0.0/0", 30, &err));
    EXPECT_FALSE(parse_cidr("10.9.0.0/2x", 30, &err));
    EXPECT_FALSE(parse_cidr("10.9.0.7/24", 30, &err));
    EXPECT_EQ(err, "bad CIDR '10.9.0.7/24': host bits set (did you mean 10.9.0.0/24?)");
}
