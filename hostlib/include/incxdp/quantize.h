// SPDX-License-Identifier: BSD-2-Clause
// Block floating point: how float32 travels through an int32 switch.
//
// A block (one packet's worth of elements) shares one exponent field f, the
// signed max over all workers of each worker's
//     f_i = floor(log2(max |x| over its block))   clamped to [-128, 127]
// (f_i = -128 for an all-zero block). With E = f + 1 every element of every
// worker satisfies |x| < 2^E. For a reduction over n workers let
//     L = ceil(log2 n) for Sum, L = 0 for Max/Min   (headroom bits)
//     k = 31 - E - L                                 (scale shift)
// Each worker sends v = clamp(round_half_even(x * 2^k), -(2^(31-L) - 1), 2^(31-L) - 1),
// so |v| <= 2^(31-L) - 1 and the n-way integer sum satisfies
// |sum v| <= n * (2^(31-L) - 1) < 2^31: the switch's int32 sum never wraps.
// The result is y = float(R * 2^-k) with R the switch's int32 result.
//
// Error bound (absolute, per element; x * 2^k and R * 2^-k are exact in double):
//   |v - x*2^k| <= 1/2, or < 1 when the clamp applied, hence
//   Sum:      |R*2^-k - sum x| <  n * 2^(E + L - 31)
//   Max/Min:  |R*2^-k - max x| <      2^(E - 31)        (rounding is monotone)
// plus the final rounding to float: |y - R*2^-k| <= 2^-24 |R*2^-k| + 2^-150.
// Since 2^(E-1) <= M = max|x| over all workers' block (unless clamped at
// f = -128), the Sum term is < 2n * 2^L * M * 2^-31 <= n^2 * M * 2^-29.
#pragma once

#include <incxdp/reduce_op.h>

#include <cmath>
#include <cstdint>
#include <span>

namespace incxdp::quant {

/// Exponent field of an all-zero block, and the lower clamp of every field.
inline constexpr int kMinExpField = -128;
inline constexpr int kMaxExpField = 127;

/// Exponent field of a block: floor(log2(max|x|)) clamped to [-128, 127],
/// -128 for an all-zero (or empty) block. Every |x| < 2^(field+1).
/// The caller guarantees finite input (see first_non_finite()).
int8_t block_exponent(std::span<const float> block);

/// Index of the first NaN or infinity in `v`, or v.size() if all are finite.
size_t first_non_finite(std::span<const float> v);

/// Headroom bits L: ceil(log2 n) for Sum, 0 for Max and Min.
int headroom_bits(uint32_t nworkers, ReduceOp op);

/// Scale shift k = 31 - (field + 1) - headroom: workers send x * 2^k.
inline int scale_shift(int8_t exp_field, int headroom) {
    return 31 - (int(exp_field) + 1) - headroom;
}

/// Largest magnitude a worker may send: 2^(31 - headroom) - 1.
inline int32_t quant_limit(int headroom) {
    return int32_t((int64_t(1) << (31 - headroom)) - 1);
}

/// Round x * scale (scale = 2^k, exact in double) half-to-even and clamp to
/// [-limit, limit]. Adding and subtracting 1.5 * 2^52 rounds a double of
/// magnitude < 2^51 to an integer in the current (default: to-nearest-even)
/// rounding mode without a libm call, so the loop vectorises.
inline int32_t quantize(float x, double scale, int32_t limit) {
    constexpr double kRound = 6755399441055744.0; // 1.5 * 2^52
    double y = double(x) * scale;
    double r = (y + kRound) - kRound;
    if (r > double(limit))
        r = double(limit);
    if (r < -double(limit))
        r = -double(limit);
    return int32_t(r);
}

/// Inverse scale: float(v * 2^-k), one rounding.
inline float dequantize(int32_t v, double inv_scale) {
    return float(double(v) * inv_scale);
}

/// 2^k as a double (k within [-1022, 1023]).
inline double pow2(int k) {
    return std::ldexp(1.0, k);
}

/// Absolute error bound per element before the final float rounding, for a
/// block whose agreed exponent field is `exp_field`:
/// Sum: n * 2^(E + L - 31); Max/Min: 2^(E - 31), with E = exp_field + 1.
double error_bound(int8_t exp_field, uint32_t nworkers, ReduceOp op);

/// Full bound on |y - exact| where y is the float result and `exact` the
/// exact reduction (e.g. computed in double): error_bound() plus the final
/// rounding to float, 2^-24 * (|exact| + error_bound()) + 2^-150.
double result_bound(int8_t exp_field, uint32_t nworkers, ReduceOp op, double exact);

} // namespace incxdp::quant
