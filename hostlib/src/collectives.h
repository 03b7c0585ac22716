// SPDX-License-Identifier: BSD-2-Clause
// The step handlers of the engine: what goes into each packet and what is
// done with each result, per element type. See docs/HOSTLIB.md §3-4.
#pragma once

#include "engine.h"

#include <vector>

namespace incxdp::detail {

/// Elements a chunk of `real` elements occupies on the wire: native pads to
/// the 16-element quantum, SwitchML always carries the full per_packet.
uint32_t wire_elems(Wire w, uint32_t real, uint32_t per_packet);

/// int32: the payload is the data; the switch's result is the answer.
class Int32Steps final : public StepHandler {
  public:
    Int32Steps(const Schedule &s, Wire w, ReduceOp op, const int32_t *send, int32_t *recv);
    void build(uint64_t step, uint32_t lane, std::span<std::byte> payload, uint16_t &nelems,
               int8_t &exp) override;
    void consume(uint64_t step, uint32_t lane, const ResultView &r) override;

  private:
    const Schedule &s_;
    Wire wire_;
    int32_t identity_;
    const int32_t *send_;
    int32_t *recv_;
};

/// float32 through block exponents. Lane l first sends a warm-up step that
/// only announces the exponent of its first chunk; afterwards each data
/// step announces the exponent of the lane's next chunk, and its result
/// brings that chunk's agreed exponent (signed max over the workers).
class Float32Steps final : public StepHandler {
  public:
    /// local_exp and agreed are scratch vectors reused across calls.
    Float32Steps(const Schedule &s, Wire w, ReduceOp op, uint32_t nworkers, const float *send,
                 float *recv, std::vector<int8_t> &local_exp, std::vector<int8_t> &agreed);
    /// Check the input and compute each chunk's local exponent. Throws
    /// std::invalid_argument naming the first NaN/Inf element.
    void prepare(uint32_t rank);
    void build(uint64_t step, uint32_t lane, std::span<std::byte> payload, uint16_t &nelems,
               int8_t &exp) override;
    void consume(uint64_t step, uint32_t lane, const ResultView &r) override;

  private:
    const Schedule &s_;
    Wire wire_;
    ReduceOp op_;
    int32_t identity_;
    int headroom_;
    const float *send_;
    float *recv_;
    std::vector<int8_t> &local_exp_; ///< per chunk, this worker's field
    std::vector<int8_t> &agreed_;    ///< per lane, the field of its next chunk
};

/// One payload-free packet per lane and nothing to do with the result: used
/// by Communicator::close() to flip the parity of slots.
class EmptySteps final : public StepHandler {
  public:
    EmptySteps(Wire w, uint32_t per_packet) : wire_(w), per_packet_(per_packet) {}
    void build(uint64_t step, uint32_t lane, std::span<std::byte> payload, uint16_t &nelems,
               int8_t &exp) override;
    void consume(uint64_t, uint32_t, const ResultView &) override {}

  private:
    Wire wire_;
    uint32_t per_packet_;
};

} // namespace incxdp::detail
