// SPDX-License-Identifier: BSD-2-Clause
// What each collective sends per packet on a RoCE tree and what it does
// with each result (docs/ROCE.md §2): AllReduce, Reduce, Broadcast, Barrier;
// int32 as it is, float32 SUM as fixed point after an exponent pre-pass,
// float32 MAX/MIN through an order-preserving int32 mapping.
#pragma once

#include "engine_backend.h"
#include "roce_packets.h"

#include <incxdp/reduce_op.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace incxdp::detail {

/// The int32 a float32's bits map to so that int32 order is float order
/// (`b < 0 ? b ^ 0x7fffffff : b`); the mapping is its own inverse.
inline int32_t float_order_key(int32_t bits) {
    return bits < 0 ? bits ^ 0x7fffffff : bits;
}

class RoceSteps final : public RocePackets {
  public:
    /// `exps` is scratch reused across calls (float32 SUM exponents).
    /// `pad_broadcast`: a Broadcast's non-root ranks send zeros of the
    /// packet's size instead of nothing, which the switches ignore: for
    /// hosts whose frames the switch cannot grow into the data (an RDMA
    /// device's skb-built frames on veth, docs/ROCE.md §6).
    RoceSteps(const Call &c, uint32_t rank, uint32_t world, uint32_t per_packet,
              std::vector<int8_t> &exps, bool pad_broadcast = false);
    /// Check float input (NaN/Inf) and compute the local exponents; throws
    /// std::invalid_argument naming the element before anything is sent.
    void prepare(const char *what);

    uint64_t count() const override { return exp_packets_ + chunks_; }
    bool ready(uint64_t k) const override;
    uint32_t build(uint64_t k, std::span<std::byte> payload, uint32_t &imm) override;
    uint32_t result_elems(uint64_t k) const override;
    void consume(uint64_t k, std::span<const std::byte> payload) override;

  private:
    uint32_t chunk_elems(uint64_t c) const;
    uint32_t exps_in(uint64_t e) const; ///< exponent fields in pre-pass packet e
    bool float_sum() const;

    Call c_;
    uint32_t rank_, world_, per_;
    bool pad_broadcast_;
    uint64_t chunks_ = 0;      ///< data packets (Barrier: 1, empty)
    uint64_t exp_packets_ = 0; ///< float32 SUM: the exponent pre-pass
    int headroom_ = 0;
    std::vector<int8_t> &exps_;   ///< per chunk: local field, then the agreed one
    std::vector<uint8_t> agreed_; ///< per pre-pass packet: result taken
};

} // namespace incxdp::detail
