// SPDX-License-Identifier: BSD-2-Clause
// Block quantisation: exponents, overflow freedom of the n-way sum, and the
// documented error bound, over random data of every magnitude.
#include <incxdp/quantize.h>

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace incxdp;
using namespace incxdp::quant;

TEST(Quantize, BlockExponent) {
    auto e = [](std::vector<float> v) { return int(block_exponent(v)); };
    EXPECT_EQ(e({}), -128);
    EXPECT_EQ(e({0.0f, -0.0f}), -128);
    EXPECT_EQ(e({1.0f}), 0);
    EXPECT_EQ(e({1.5f, -0.25f}), 0);
    EXPECT_EQ(e({-2.0f}), 1);
    EXPECT_EQ(e({0.75f}), -1);
    EXPECT_EQ(e({FLT_MAX, 1.0f}), 127);
    EXPECT_EQ(e({-FLT_MAX}), 127);
    EXPECT_EQ(e({std::ldexp(1.0f, -127)}), -127);
    EXPECT_EQ(e({std::ldexp(1.0f, -128)}), -128);
    EXPECT_EQ(e({std::ldexp(1.0f, -149)}), -128); // smallest subnormal, clamped
    EXPECT_EQ(e({FLT_MIN}), -126);
}

TEST(Quantize, FirstNonFinite) {
    std::vector<float> v{1, 2, 3};
    EXPECT_EQ(first_non_finite(v), 3u);
    v[1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(first_non_finite(v), 1u);
    v[1] = 0;
    v[2] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(first_non_finite(v), 2u);
}

TEST(Quantize, HeadroomBits) {
    EXPECT_EQ(headroom_bits(1, ReduceOp::Sum), 0);
    EXPECT_EQ(headroom_bits(2, ReduceOp::Sum), 1);
    EXPECT_EQ(headroom_bits(3, ReduceOp::Sum), 2);
    EXPECT_EQ(headroom_bits(4, ReduceOp::Sum), 2);
    EXPECT_EQ(headroom_bits(5, ReduceOp::Sum), 3);
    EXPECT_EQ(headroom_bits(32, ReduceOp::Sum), 5);
    EXPECT_EQ(headroom_bits(32, ReduceOp::Max), 0);
    EXPECT_EQ(headroom_bits(32, ReduceOp::Min), 0);
}

TEST(Quantize, RoundsHalfToEvenAndClamps) {
    EXPECT_EQ(quantize(2.5f, 1.0, 100), 2);
    EXPECT_EQ(quantize(3.5f, 1.0, 100), 4);
    EXPECT_EQ(quantize(-2.5f, 1.0, 100), -2);
    EXPECT_EQ(quantize(1000.0f, 1.0, 100), 100);
    EXPECT_EQ(quantize(-1000.0f, 1.0, 100), -100);
    EXPECT_EQ(quantize(FLT_MAX, pow2(158), INT32_MAX), INT32_MAX);
}

namespace {

// One simulated collective over one block: n workers' data, the switch's
// int32 reduction, and the check of the result against the exact answer.
struct BlockCase {
    std::vector<std::vector<float>> data; // [worker][element]
    ReduceOp op;
};

void check_block(const BlockCase &c, double *worst_ratio) {
    uint32_t n = uint32_t(c.data.size());
    size_t len = c.data[0].size();
    int8_t agreed = int8_t(kMinExpField);
    for (const auto &w : c.data)
        agreed = std::max(agreed, block_exponent(w));
    int L = headroom_bits(n, c.op);
    int k = scale_shift(agreed, L);
    double scale = pow2(k), inv = pow2(-k);
    int32_t limit = quant_limit(L);

    for (size_t i = 0; i < len; ++i) {
        int64_t wide = c.op == ReduceOp::Sum ? 0 : c.op == ReduceOp::Max ? INT64_MIN : INT64_MAX;
        double exact = c.op == ReduceOp::Sum ? 0.0 : c.op == ReduceOp::Max ? -INFINITY : INFINITY;
        for (uint32_t w = 0; w < n; ++w) {
            float x = c.data[w][i];
            int32_t v = quantize(x, scale, limit);
            ASSERT_LE(std::abs(int64_t(v)), int64_t(limit));
            if (c.op == ReduceOp::Sum) {
                wide += v;
                exact += double(x);
            } else if (c.op == ReduceOp::Max) {
                wide = std::max<int64_t>(wide, v);
                exact = std::max(exact, double(x));
            } else {
                wide = std::min<int64_t>(wide, v);
                exact = std::min(exact, double(x));
            }
        }
        // The switch's wrapping int32 sum must not have wrapped.
        ASSERT_LE(wide, int64_t(INT32_MAX));
        ASSERT_GE(wide, -int64_t(INT32_MAX));
        float y = dequantize(int32_t(wide), inv);
        if (std::fabs(exact) >= 0x1.ffffffp127) { // beyond float: +-inf, like float addition
            ASSERT_TRUE(std::isinf(y) && (y > 0) == (exact > 0)) << "exact=" << exact;
            continue;
        }
        double err = std::fabs(double(y) - exact);
        double bound = result_bound(agreed, n, c.op, exact);
        ASSERT_LE(err, bound) << "n=" << n << " op=" << int(c.op) << " field=" << int(agreed)
                              << " exact=" << exact << " got=" << y;
        // Before the final float rounding the quantisation error alone holds.
        double z = double(wide) * inv;
        ASSERT_LE(std::fabs(z - exact), error_bound(agreed, n, c.op));
        if (worst_ratio && bound > 0)
            *worst_ratio = std::max(*worst_ratio, err / bound);
    }
}

float random_value(std::mt19937_64 &rng, int exp) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    return float(std::ldexp(u(rng), exp));
}

} // namespace

TEST(Quantize, PropertyRandomBlocksWithinBound) {
    std::mt19937_64 rng(12345);
    double worst = 0;
    const uint32_t ns[] = {1, 2, 3, 4, 5, 7, 8, 16, 32};
    const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
    for (int trial = 0; trial < 1500; ++trial) {
        uint32_t n = ns[trial % 9];
        BlockCase c{{}, ops[trial % 3]};
        size_t len = 1 + rng() % 64;
        // Magnitude class per worker: tiny (subnormal), huge, zero, ordinary.
        for (uint32_t w = 0; w < n; ++w) {
            int cls = int(rng() % 6);
            int base = cls == 0   ? -149 + int(rng() % 20) // subnormal range
                       : cls == 1 ? 100 + int(rng() % 20)  // huge, sum of 32 < FLT_MAX
                       : cls == 2 ? 0                      // zeros below
                                  : int(rng() % 120) - 60;
            std::vector<float> v(len);
            for (auto &x : v) {
                x = cls == 2 ? 0.0f : random_value(rng, base);
                if (cls == 3 && rng() % 4 == 0)
                    x = -std::fabs(x); // negative-heavy
                if (rng() % 17 == 0)
                    x = 0.0f;
            }
            c.data.push_back(std::move(v));
        }
        check_block(c, &worst);
    }
    EXPECT_LE(worst, 1.0);
}

TEST(Quantize, WorstCaseNoOverflowAtPowerOfTwoWorkers) {
    // Every worker at the largest magnitude below 2^E with the same sign:
    // the clamp keeps the 2^L-way sum inside int32.
    for (uint32_t n : {1u, 2u, 4u, 8u, 32u}) {
        for (int e : {-100, 0, 20, 127}) {
            float top = std::nextafter(std::ldexp(1.0f, e), 0.0f);
            for (float sign : {1.0f, -1.0f}) {
                BlockCase c{std::vector<std::vector<float>>(n, std::vector<float>(3, sign * top)),
                            ReduceOp::Sum};
                check_block(c, nullptr);
            }
        }
    }
}

TEST(Quantize, AllZeroAndMixedZeroBlocks) {
    BlockCase zeros{std::vector<std::vector<float>>(4, std::vector<float>(5, 0.0f)), ReduceOp::Sum};
    check_block(zeros, nullptr);
    BlockCase mixed{{{0, 0, 0}, {1e-30f, -2e-30f, 0}, {0, 0, 0}, {3.0f, 0, -1.0f}}, ReduceOp::Max};
    check_block(mixed, nullptr);
}

TEST(Quantize, BoundIsRelativeToBlockMax) {
    // Unclamped: bound <= n^2 * M * 2^-29 with M the block's max magnitude.
    for (uint32_t n : {1u, 2u, 3u, 4u, 32u}) {
        for (int f = -120; f <= 127; f += 7) {
            double M = std::ldexp(1.0, f); // smallest M with this field
            EXPECT_LE(error_bound(int8_t(f), n, ReduceOp::Sum), double(n) * n * M * pow2(-29));
            EXPECT_LE(error_bound(int8_t(f), n, ReduceOp::Max), M * pow2(-30));
        }
    }
}
