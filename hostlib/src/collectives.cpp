// SPDX-License-Identifier: BSD-2-Clause
#include "collectives.h"

#include <incxdp/proto.h>
#include <incxdp/quantize.h>

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace incxdp::detail {
namespace {

void fill_identity(std::byte *p, uint32_t from, uint32_t to, int32_t identity) {
    for (uint32_t i = from; i < to; ++i)
        store_be32(p + 4 * size_t(i), identity);
}

} // namespace

uint32_t wire_elems(Wire w, uint32_t real, uint32_t per_packet) {
    return w == Wire::Native ? round_up(real, INCXDP_ELEM_QUANTUM) : per_packet;
}

Int32Steps::Int32Steps(const Schedule &s, Wire w, ReduceOp op, const int32_t *send, int32_t *recv)
    : s_(s), wire_(w), identity_(op_identity(op)), send_(send), recv_(recv) {}

void Int32Steps::build(uint64_t step, uint32_t, std::span<std::byte> payload, uint16_t &nelems,
                       int8_t &exp) {
    uint64_t c = *s_.chunk_of(step);
    uint32_t real = s_.chunk_elems(c);
    uint32_t n = wire_elems(wire_, real, s_.per_packet);
    std::byte *p = payload.data();
    store_be32_n(p, send_ + s_.chunk_begin(c), real);
    fill_identity(p, real, n, identity_);
    nelems = uint16_t(n);
    exp = 0;
}

void Int32Steps::consume(uint64_t step, uint32_t, const ResultView &r) {
    uint64_t c = *s_.chunk_of(step);
    uint32_t real = s_.chunk_elems(c);
    load_be32_n(recv_ + s_.chunk_begin(c), r.payload.data(), real);
}

Float32Steps::Float32Steps(const Schedule &s, Wire w, ReduceOp op, uint32_t nworkers,
                           const float *send, float *recv, std::vector<int8_t> &local_exp,
                           std::vector<int8_t> &agreed)
    : s_(s), wire_(w), op_(op), identity_(op_identity(op)),
      headroom_(quant::headroom_bits(nworkers, op)), send_(send), recv_(recv),
      local_exp_(local_exp), agreed_(agreed) {}

void Float32Steps::prepare(uint32_t rank) {
    local_exp_.resize(s_.chunks);
    agreed_.assign(s_.lanes, int8_t(quant::kMinExpField));
    for (uint64_t c = 0; c < s_.chunks; ++c) {
        std::span<const float> block(send_ + s_.chunk_begin(c), s_.chunk_elems(c));
        size_t bad = quant::first_non_finite(block);
        if (bad != block.size()) {
            size_t idx = s_.chunk_begin(c) + bad;
            throw std::invalid_argument(fmt::format(
                "allreduce float32 {}: rank {}: input element {} is {}; NaN and infinity "
                "cannot be quantised to int32 (block exponents need finite values)",
                to_string(op_), rank, idx, std::isnan(block[bad]) ? "NaN" : "infinite"));
        }
        local_exp_[c] = quant::block_exponent(block);
    }
}

void Float32Steps::build(uint64_t step, uint32_t lane, std::span<std::byte> payload,
                         uint16_t &nelems, int8_t &exp) {
    std::byte *p = payload.data();
    auto next = s_.announced_chunk(step);
    exp = next ? local_exp_[*next] : int8_t(quant::kMinExpField);
    auto c = s_.chunk_of(step);
    if (!c) { // warm-up: the exponent is all that matters
        uint32_t n = wire_ == Wire::Native ? 0 : s_.per_packet;
        fill_identity(p, 0, n, identity_);
        nelems = uint16_t(n);
        return;
    }
    uint32_t real = s_.chunk_elems(*c);
    uint32_t n = wire_elems(wire_, real, s_.per_packet);
    double scale = quant::pow2(quant::scale_shift(agreed_[lane], headroom_));
    int32_t limit = quant::quant_limit(headroom_);
    const float *src = send_ + s_.chunk_begin(*c);
    for (uint32_t i = 0; i < real; ++i)
        store_be32(p + 4 * size_t(i), quant::quantize(src[i], scale, limit));
    fill_identity(p, real, n, identity_);
    nelems = uint16_t(n);
}

void Float32Steps::consume(uint64_t step, uint32_t lane, const ResultView &r) {
    if (auto c = s_.chunk_of(step)) {
        double inv = quant::pow2(-quant::scale_shift(agreed_[lane], headroom_));
        uint32_t real = s_.chunk_elems(*c);
        float *dst = recv_ + s_.chunk_begin(*c);
        const std::byte *p = r.payload.data();
        for (uint32_t i = 0; i < real; ++i)
            dst[i] = quant::dequantize(load_be32(p + 4 * size_t(i)), inv);
    }
    agreed_[lane] = r.exp; // the exponent of the lane's next chunk
}

void EmptySteps::build(uint64_t, uint32_t, std::span<std::byte> payload, uint16_t &nelems,
                       int8_t &exp) {
    // SwitchML has no element count field: a packet always carries a full payload.
    uint32_t n = wire_ == Wire::Native ? 0 : per_packet_;
    fill_identity(payload.data(), 0, n, 0);
    nelems = uint16_t(n);
    exp = int8_t(quant::kMinExpField);
}

} // namespace incxdp::detail
