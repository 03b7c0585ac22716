// SPDX-License-Identifier: BSD-2-Clause
// Element types, reduction operators and wire formats of libincxdp.
#pragma once

#include <cstdint>
#include <string_view>

namespace incxdp {

/// Element type of an allreduce buffer. Both are 4 bytes wide.
enum class DType : uint8_t {
    Int32,   ///< exact, wrapping 32-bit arithmetic like the switch
    Float32, ///< quantised to int32 with a shared block exponent (docs/HOSTLIB.md §4)
};

/// Element-wise reduction. Avg is float32 only: the switch sums and the
/// host divides by world_size (int32 Avg is refused, as torch and NCCL do).
enum class ReduceOp : uint8_t { Sum, Max, Min, Avg };

/// Header the hosts speak to the switch.
enum class Wire : uint8_t {
    Native,   ///< incxdp_hdr (bpf/include/incxdp/proto.h), UDP dst port 0xBEF0
    SwitchML, ///< switchml_hdr (bpf/include/incxdp/switchml.h), UDP dst port 0xBEE0, SUM only
};

std::string_view to_string(DType t);
std::string_view to_string(ReduceOp op);
std::string_view to_string(Wire w);

/// Parse "int32"/"float32", "sum"/"max"/"min"/"avg", "native"/"switchml".
/// Throw std::invalid_argument naming the accepted values.
DType parse_dtype(std::string_view s);
ReduceOp parse_op(std::string_view s);
Wire parse_wire(std::string_view s);

/// Identity element of `op` in int32 (what pads the last chunk):
/// 0 for Sum and Avg, INT32_MIN for Max, INT32_MAX for Min.
int32_t op_identity(ReduceOp op);

} // namespace incxdp
