// SPDX-License-Identifier: BSD-2-Clause
#include "roce_collectives.h"

#include "packet.h"
#include "schedule.h"

#include <incxdp/proto.h>
#include <incxdp/quantize.h>
#include <incxdp/roce.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace incxdp::detail {
namespace {

uint8_t roce_op(ReduceOp op) {
    switch (op) {
    case ReduceOp::Max:
        return ROCE_OPR_MAX;
    case ReduceOp::Min:
        return ROCE_OPR_MIN;
    default:
        return ROCE_OPR_SUM;
    }
}

uint8_t roce_prim(Prim p) {
    switch (p) {
    case Prim::Reduce:
        return ROCE_PRIM_REDUCE;
    case Prim::Broadcast:
        return ROCE_PRIM_BROADCAST;
    default:
        return ROCE_PRIM_ALLREDUCE;
    }
}

void fill_be32(std::byte *p, uint32_t from, uint32_t to, int32_t v) {
    for (uint32_t i = from; i < to; ++i)
        store_be32(p + 4 * size_t(i), v);
}

} // namespace

RoceSteps::RoceSteps(const Call &c, uint32_t rank, uint32_t world, uint32_t per_packet,
                     std::vector<int8_t> &exps, bool pad_broadcast)
    : c_(c), rank_(rank), world_(world), per_(per_packet), pad_broadcast_(pad_broadcast),
      exps_(exps) {
    if (c_.prim == Prim::Barrier) {
        chunks_ = 1;
        return;
    }
    chunks_ = (c_.count + per_ - 1) / per_;
    if (float_sum()) {
        exp_packets_ = (chunks_ + per_ - 1) / per_;
        headroom_ = quant::headroom_bits(world_, ReduceOp::Sum);
    }
}

bool RoceSteps::float_sum() const {
    return c_.dtype == DType::Float32 && c_.op == ReduceOp::Sum &&
           (c_.prim == Prim::AllReduce || c_.prim == Prim::Reduce);
}

uint32_t RoceSteps::chunk_elems(uint64_t c) const {
    return uint32_t(std::min<uint64_t>(per_, c_.count - c * per_));
}

uint32_t RoceSteps::exps_in(uint64_t e) const {
    return uint32_t(std::min<uint64_t>(per_, chunks_ - e * per_));
}

void RoceSteps::prepare(const char *what) {
    bool reduces = c_.prim == Prim::AllReduce || c_.prim == Prim::Reduce;
    if (c_.dtype != DType::Float32 || !reduces)
        return; // Broadcast copies bits, Barrier has none
    const float *x = static_cast<const float *>(c_.send);
    size_t bad = quant::first_non_finite(std::span(x, c_.count));
    if (bad != c_.count)
        throw std::invalid_argument(fmt::format(
            "{} float32 {}: rank {}: input element {} is {}; NaN and infinity cannot be carried "
            "as int32",
            what, to_string(c_.op), rank_, bad, std::isnan(x[bad]) ? "NaN" : "infinite"));
    if (!float_sum())
        return;
    exps_.resize(chunks_);
    for (uint64_t c = 0; c < chunks_; ++c)
        exps_[c] = quant::block_exponent(std::span(x + c * per_, chunk_elems(c)));
    agreed_.assign(exp_packets_, 0);
}

bool RoceSteps::ready(uint64_t k) const {
    if (k < exp_packets_ || !float_sum())
        return true;
    return agreed_[(k - exp_packets_) / per_] != 0;
}

uint32_t RoceSteps::build(uint64_t k, std::span<std::byte> payload, uint32_t &imm) {
    std::byte *p = payload.data();
    uint8_t dtype = c_.dtype == DType::Float32 ? ROCE_DTYPE_FLOAT32 : ROCE_DTYPE_INT32;
    if (c_.prim == Prim::Barrier) {
        imm = roce_imm_make(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_BARRIER,
                            ROCE_DTYPE_INT32);
        return 0;
    }
    if (k < exp_packets_) {
        // The pre-pass: an int32 AllReduce-MAX of one exponent field per
        // data packet, per_packet of them in a packet.
        imm =
            roce_imm_make(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_MAX, ROCE_DTYPE_INT32);
        uint32_t m = exps_in(k), n = round_up(m, INCXDP_ELEM_QUANTUM);
        for (uint32_t i = 0; i < m; ++i)
            store_be32(p + 4 * size_t(i), exps_[k * per_ + i]);
        fill_be32(p, m, n, op_identity(ReduceOp::Max));
        return n;
    }
    uint64_t c = k - exp_packets_;
    uint32_t real = chunk_elems(c), n = round_up(real, INCXDP_ELEM_QUANTUM);
    uint16_t dest = c_.prim == Prim::AllReduce ? ROCE_IMM_ALL_RANKS : uint16_t(c_.root);
    uint8_t op = c_.prim == Prim::Broadcast ? uint8_t(ROCE_OPR_SUM) : roce_op(c_.op);
    imm = roce_imm_make(dest, roce_prim(c_.prim), op, dtype);
    const int32_t *bits = static_cast<const int32_t *>(c_.send) + c * per_;

    if (c_.prim == Prim::Broadcast) {
        if (rank_ != c_.root) {
            if (!pad_broadcast_)
                return 0;
            fill_be32(p, 0, n, 0);
            return n;
        }
        store_be32_n(p, bits, real);
        fill_be32(p, real, n, 0);
        return n;
    }
    int32_t identity = op_identity(c_.op);
    if (c_.dtype == DType::Int32) {
        store_be32_n(p, bits, real);
    } else if (c_.op == ReduceOp::Sum) {
        double scale = quant::pow2(quant::scale_shift(exps_[c], headroom_));
        int32_t limit = quant::quant_limit(headroom_);
        const float *x = static_cast<const float *>(c_.send) + c * per_;
        for (uint32_t i = 0; i < real; ++i)
            store_be32(p + 4 * size_t(i), quant::quantize(x[i], scale, limit));
    } else {
        for (uint32_t i = 0; i < real; ++i)
            store_be32(p + 4 * size_t(i), float_order_key(bits[i]));
    }
    fill_be32(p, real, n, identity);
    return n;
}

uint32_t RoceSteps::result_elems(uint64_t k) const {
    if (c_.prim == Prim::Barrier)
        return 0;
    if (k < exp_packets_)
        return round_up(exps_in(k), INCXDP_ELEM_QUANTUM);
    uint32_t n = round_up(chunk_elems(k - exp_packets_), INCXDP_ELEM_QUANTUM);
    if (c_.prim == Prim::Reduce && rank_ != c_.root)
        return 0; // a completion
    return n;
}

void RoceSteps::consume(uint64_t k, std::span<const std::byte> payload) {
    if (c_.prim == Prim::Barrier || payload.empty())
        return;
    const std::byte *p = payload.data();
    if (k < exp_packets_) {
        for (uint32_t i = 0; i < exps_in(k); ++i)
            exps_[k * per_ + i] = int8_t(
                std::clamp(load_be32(p + 4 * size_t(i)), quant::kMinExpField, quant::kMaxExpField));
        agreed_[k] = 1;
        return;
    }
    uint64_t c = k - exp_packets_;
    uint32_t real = chunk_elems(c);
    int32_t *out = static_cast<int32_t *>(c_.recv) + c * per_;
    if (c_.dtype == DType::Int32 || c_.prim == Prim::Broadcast) {
        load_be32_n(out, p, real);
    } else if (c_.op == ReduceOp::Sum) {
        double inv = quant::pow2(-quant::scale_shift(exps_[c], headroom_));
        float *y = static_cast<float *>(c_.recv) + c * per_;
        for (uint32_t i = 0; i < real; ++i)
            y[i] = quant::dequantize(load_be32(p + 4 * size_t(i)), inv);
    } else {
        for (uint32_t i = 0; i < real; ++i)
            out[i] = float_order_key(load_be32(p + 4 * size_t(i)));
    }
}

} // namespace incxdp::detail
