// SPDX-License-Identifier: BSD-2-Clause
// The chunk -> (slot, set) schedule, including set parity across calls.
#include "collectives.h"
#include "schedule.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace incxdp;
using namespace incxdp::detail;

TEST(Schedule, Int32Layout) {
    auto s = Schedule::make(10 * 832 + 5, 832, 4, false);
    EXPECT_EQ(s.chunks, 11u);
    EXPECT_EQ(s.lanes, 4u);
    EXPECT_EQ(s.warmup, 0u);
    EXPECT_EQ(s.steps, 11u);
    for (uint64_t j = 0; j < s.steps; ++j) {
        EXPECT_EQ(s.lane_of(j), j % 4);
        EXPECT_EQ(*s.chunk_of(j), j);
        EXPECT_EQ(s.set_of(j, 0), (j / 4) & 1);
        EXPECT_EQ(s.set_of(j, 1), 1 - ((j / 4) & 1));
    }
    EXPECT_EQ(s.chunk_elems(0), 832u);
    EXPECT_EQ(s.chunk_elems(10), 5u);
    EXPECT_EQ(s.uses_of_lane(0), 3u);
    EXPECT_EQ(s.uses_of_lane(2), 3u);
    EXPECT_EQ(s.uses_of_lane(3), 2u);
}

TEST(Schedule, SmallCallsUseFewerSlots) {
    auto s = Schedule::make(1, 832, 64, false);
    EXPECT_EQ(s.chunks, 1u);
    EXPECT_EQ(s.lanes, 1u);
    auto f = Schedule::make(833, 832, 64, true);
    EXPECT_EQ(f.chunks, 2u);
    EXPECT_EQ(f.lanes, 2u);
    EXPECT_EQ(f.warmup, 2u);
    EXPECT_EQ(f.steps, 4u);
    auto z = Schedule::make(0, 832, 64, true);
    EXPECT_EQ(z.steps, 0u);
}

TEST(Schedule, FloatWarmupAnnouncesEachLanesNextChunk) {
    auto s = Schedule::make(20 * 256, 256, 8, true);
    ASSERT_EQ(s.warmup, 8u);
    for (uint64_t j = 0; j < s.warmup; ++j) {
        EXPECT_FALSE(s.chunk_of(j));
        EXPECT_EQ(*s.announced_chunk(j), j); // lane j's first chunk
    }
    for (uint64_t c = 0; c < s.chunks; ++c) {
        uint64_t step = s.warmup + c;
        EXPECT_EQ(*s.chunk_of(step), c);
        EXPECT_EQ(s.lane_of(step), c % 8); // chunk c uses slot c % W
        auto next = s.announced_chunk(step);
        if (c + 8 < s.chunks) {
            ASSERT_TRUE(next);
            EXPECT_EQ(*next, c + 8);
            EXPECT_EQ(s.lane_of(step + 8), s.lane_of(step));
        } else {
            EXPECT_FALSE(next);
        }
    }
}

TEST(Schedule, WireElems) {
    EXPECT_EQ(wire_elems(Wire::Native, 1, 832), 16u);
    EXPECT_EQ(wire_elems(Wire::Native, 15, 832), 16u);
    EXPECT_EQ(wire_elems(Wire::Native, 16, 832), 16u);
    EXPECT_EQ(wire_elems(Wire::Native, 17, 832), 32u);
    EXPECT_EQ(wire_elems(Wire::Native, 832, 832), 832u);
    EXPECT_EQ(wire_elems(Wire::SwitchML, 1, 256), 256u);
    EXPECT_EQ(wire_elems(Wire::SwitchML, 64, 64), 64u);
}

// Property: over a sequence of calls of random sizes and kinds, every use of
// a slot flips its set (what the switch's shadow sets require), chunks tile
// the buffer exactly, and each lane's steps are in order.
TEST(Schedule, PropertySetsAlternateAcrossCalls) {
    std::mt19937_64 rng(7);
    const uint32_t window = 16;
    std::vector<uint8_t> next_set(window, 0); // what the Communicator keeps
    std::vector<int> last_set(window, -1);    // what a switch would see
    for (int call = 0; call < 300; ++call) {
        size_t count = 1 + rng() % 40000;
        uint32_t per = (rng() % 2) ? 832 : 16 * uint32_t(1 + rng() % 52);
        bool flt = rng() % 2;
        auto s = Schedule::make(count, per, window, flt);
        size_t covered = 0;
        for (uint64_t j = 0; j < s.steps; ++j) {
            uint32_t lane = s.lane_of(j); // lane == slot for data calls
            uint8_t set = s.set_of(j, next_set[lane]);
            ASSERT_NE(int(set), last_set[lane]) << "call " << call << " step " << j;
            last_set[lane] = set;
            if (auto c = s.chunk_of(j)) {
                ASSERT_EQ(s.chunk_begin(*c), covered);
                covered += s.chunk_elems(*c);
            }
        }
        ASSERT_EQ(covered, count);
        for (uint32_t l = 0; l < s.lanes; ++l)
            next_set[l] ^= uint8_t(s.uses_of_lane(l) & 1);
        for (uint32_t l = 0; l < s.lanes; ++l)
            ASSERT_EQ(int(next_set[l]), 1 - last_set[l]);
    }
}
