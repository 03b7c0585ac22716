// SPDX-License-Identifier: BSD-2-Clause
// Size parsing, deterministic data and verification of the tools.
#include "tool_common.h"

#include <gtest/gtest.h>

using namespace incxdp;
using namespace incxdp::tools;

// The text forms are util's (tests/util/test_size.cpp); the tools add
// that a size is whole int32/float32 elements.
TEST(ToolCommon, SizesAreWholeElements) {
    EXPECT_EQ(parse_size("64M"), 64u << 20);
    EXPECT_THROW(parse_size("6"), std::invalid_argument);
    EXPECT_EQ(parse_size_list("4K,8"), (std::vector<uint64_t>{4096, 8}));
    EXPECT_THROW(parse_size_list("4K,6"), std::invalid_argument);
    EXPECT_EQ(format_size(64u << 20), "64 MiB");
}

TEST(ToolCommon, DataIsDeterministicAndRankDependent) {
    EXPECT_EQ(gen_int32(1, 0, 5), gen_int32(1, 0, 5));
    EXPECT_NE(gen_int32(1, 0, 5), gen_int32(1, 1, 5));
    EXPECT_NE(gen_int32(2, 0, 5), gen_int32(1, 0, 5));
    for (uint64_t i = 0; i < 5000; ++i) {
        float f = gen_float32(3, 1, i);
        EXPECT_TRUE(std::isfinite(f));
        EXPECT_LT(std::fabs(f), 256.0f);
    }
}

TEST(ToolCommon, VerifyInt32DetectsWrongElement) {
    const uint32_t world = 3;
    std::vector<int32_t> sum(100);
    for (size_t i = 0; i < sum.size(); ++i) {
        uint32_t s = 0;
        for (uint32_t r = 0; r < world; ++r)
            s += uint32_t(gen_int32(9, r, i));
        sum[i] = int32_t(s);
    }
    EXPECT_TRUE(verify_int32(sum, 9, world, ReduceOp::Sum).ok);
    sum[42] ^= 1;
    auto v = verify_int32(sum, 9, world, ReduceOp::Sum);
    EXPECT_FALSE(v.ok);
    EXPECT_EQ(v.mismatches, 1u);
    EXPECT_EQ(v.first_bad, 42u);
}

TEST(ToolCommon, VerifyFloat32AcceptsExactAndRejectsFar) {
    const uint32_t world = 4;
    std::vector<float> sum(1000);
    for (size_t i = 0; i < sum.size(); ++i) {
        double s = 0;
        for (uint32_t r = 0; r < world; ++r)
            s += gen_float32(5, r, i);
        sum[i] = float(s);
    }
    EXPECT_TRUE(verify_float32(sum, 5, world, ReduceOp::Sum, 256).ok);
    sum[7] += 0.01f;
    EXPECT_FALSE(verify_float32(sum, 5, world, ReduceOp::Sum, 256).ok);
}

TEST(ToolCommon, PublishQpnCommandNamesTheQpnRankAndJob) {
    EXPECT_EQ(expand_publish_qpn("set {qpn} r{rank} j{job} again {qpn}", 0x1234, 2, 7),
              "set 4660 r2 j7 again 4660");
    EXPECT_EQ(expand_publish_qpn("no fields", 1, 0, 1), "no fields");
}

TEST(ToolCommon, VerbsTransportIsForRoceTreeJobsAndPublishesThroughTheShell) {
    const std::string dir = INCXDP_SOURCE_DIR "/topo/topologies/";
    BootstrapOptions o;
    o.topo = dir + "tree124.yaml";
    o.rank = 1;
    o.transport = "verbs";
    o.publish_qpn = "test {qpn} = 4660 && test {rank} = 1";
    CommConfig c = make_config(o);
    EXPECT_EQ(c.carrier, Carrier::Verbs);
    EXPECT_TRUE(c.roce_tree());
    ASSERT_TRUE(c.verbs.publish_qpn);
    EXPECT_NO_THROW(c.verbs.publish_qpn(0x1234));
    try {
        c.verbs.publish_qpn(0x99);
        FAIL() << "a failing command must throw";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("exit status 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("0x99"), std::string::npos) << e.what();
    }
    o.transport = "roce"; // the device options need the device
    EXPECT_THROW(make_config(o), std::invalid_argument);
    o.publish_qpn.clear();
    o.transport = "verbs";
    o.topo = dir + "star.yaml"; // a star job has no RC connection
    EXPECT_THROW(make_config(o), std::invalid_argument);
}
