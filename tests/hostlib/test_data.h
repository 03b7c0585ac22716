// SPDX-License-Identifier: BSD-2-Clause
// Deterministic per-rank inputs for the collective tests (star and RoCE).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace incxdp::test {

inline std::vector<int32_t> int_data(uint32_t rank, size_t n, uint64_t salt)
{
    std::mt19937_64 rng(salt * 1000003 + rank);
    std::vector<int32_t> v(n);
    for (auto &x : v)
        x = int32_t(uint32_t(rng()));
    return v;
}

// Blocks of 64 share a magnitude in 2^[-30, 30]; some blocks are all zero,
// some negative only, some -0.0.
inline std::vector<float> float_data(uint32_t rank, size_t n, uint64_t salt)
{
    std::mt19937_64 rng(salt * 7919 + rank);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<float> v(n);
    for (size_t b = 0; b < n; b += 64) {
        int e = int(rng() % 61) - 30;
        int kind = int(rng() % 8);
        for (size_t i = b; i < std::min(n, b + 64); ++i) {
            double x = std::ldexp(u(rng), e);
            v[i] = kind == 0   ? 0.0f
                   : kind == 1 ? -float(std::fabs(x))
                   : kind == 2 ? -0.0f
                               : float(x);
        }
    }
    return v;
}

} // namespace incxdp::test
