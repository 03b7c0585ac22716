// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/quantize.h>

#include <algorithm>
#include <bit>
#include <cfloat>

namespace incxdp::quant {

int8_t block_exponent(std::span<const float> block) {
    float m = 0.0f;
    for (float x : block)
        m = std::max(m, std::fabs(x));
    if (m == 0.0f)
        return int8_t(kMinExpField);
    // ilogb is floor(log2 m), subnormals included. Clamping up keeps |x| < 2^(f+1).
    return int8_t(std::clamp(std::ilogb(m), kMinExpField, kMaxExpField));
}

size_t first_non_finite(std::span<const float> v) {
    for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i]))
            return i;
    return v.size();
}

int headroom_bits(uint32_t nworkers, ReduceOp op) {
    if (op != ReduceOp::Sum || nworkers <= 1)
        return 0;
    return int(std::bit_width(nworkers - 1)); // ceil(log2 n)
}

double error_bound(int8_t exp_field, uint32_t nworkers, ReduceOp op) {
    int e = int(exp_field) + 1;
    if (op == ReduceOp::Sum)
        return double(nworkers) * pow2(e + headroom_bits(nworkers, op) - 31);
    return pow2(e - 31);
}

double result_bound(int8_t exp_field, uint32_t nworkers, ReduceOp op, double exact) {
    double q = error_bound(exp_field, nworkers, op);
    return q + pow2(-24) * (std::fabs(exact) + q) + pow2(-150);
}

} // namespace incxdp::quant
