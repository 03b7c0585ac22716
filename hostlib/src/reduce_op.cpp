// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/reduce_op.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace incxdp {

std::string_view to_string(DType t) {
    return t == DType::Float32 ? "float32" : "int32";
}

std::string_view to_string(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum:
        return "sum";
    case ReduceOp::Max:
        return "max";
    case ReduceOp::Min:
        return "min";
    case ReduceOp::Avg:
        return "avg";
    }
    return "?";
}

std::string_view to_string(Wire w) {
    return w == Wire::SwitchML ? "switchml" : "native";
}

DType parse_dtype(std::string_view s) {
    if (s == "int32")
        return DType::Int32;
    if (s == "float32")
        return DType::Float32;
    throw std::invalid_argument("unknown dtype '" + std::string(s) + "' (int32, float32)");
}

ReduceOp parse_op(std::string_view s) {
    if (s == "sum")
        return ReduceOp::Sum;
    if (s == "max")
        return ReduceOp::Max;
    if (s == "min")
        return ReduceOp::Min;
    if (s == "avg")
        return ReduceOp::Avg;
    throw std::invalid_argument("unknown op '" + std::string(s) + "' (sum, max, min, avg)");
}

Wire parse_wire(std::string_view s) {
    if (s == "native")
        return Wire::Native;
    if (s == "switchml")
        return Wire::SwitchML;
    throw std::invalid_argument("unknown wire '" + std::string(s) + "' (native, switchml)");
}

int32_t op_identity(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
        return 0;
    case ReduceOp::Max:
        return std::numeric_limits<int32_t>::min();
    case ReduceOp::Min:
        return std::numeric_limits<int32_t>::max();
    }
    return 0;
}

} // namespace incxdp
