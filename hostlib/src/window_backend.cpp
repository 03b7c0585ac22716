// SPDX-License-Identifier: BSD-2-Clause
// The window backend: every collective is an allreduce through the window
// engine (engine.h), and the slots' set parity is kept in step with the
// switch across calls so that close() can park them (docs/HOSTLIB.md §3).
#include "collectives.h"
#include "engine.h"
#include "engine_backend.h"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

namespace incxdp::detail {
namespace {

class WindowBackend final : public EngineBackend {
  public:
    WindowBackend(const CommConfig &cfg, Transport &transport)
        : cfg_(cfg), engine_(cfg, transport) {
        next_set_.assign(cfg.window, 0);
        lane_slots_.reserve(cfg.window);
        base_sets_.reserve(cfg.window);
    }

    void run(const Call &c, const char *what, CommStats &stats) override {
        const bool is_root = cfg_.rank == c.root;
        switch (c.prim) {
        case Prim::AllReduce:
            allreduce(c.send, c.recv, c.count, c.dtype, c.op, what, stats);
            return;
        case Prim::Reduce:
            // An allreduce whose result only the root keeps.
            if (is_root) {
                allreduce(c.send, c.recv, c.count, c.dtype, c.op, what, stats);
                return;
            }
            scratch_.resize(c.count);
            allreduce(c.send, scratch_.data(), c.count, c.dtype, c.op, what, stats);
            return;
        case Prim::Broadcast:
            // The root's bits plus zeros from everyone else: exact for any dtype.
            if (is_root) {
                allreduce(c.recv, c.recv, c.count, DType::Int32, ReduceOp::Sum, what, stats);
                return;
            }
            scratch_.assign(c.count, 0);
            allreduce(scratch_.data(), c.recv, c.count, DType::Int32, ReduceOp::Sum, what, stats);
            return;
        case Prim::Barrier: {
            int32_t v = 0;
            allreduce(&v, &v, 1, DType::Int32, ReduceOp::Sum, what, stats);
            return;
        }
        }
    }

    // Slots used an odd number of times get one empty packet in set 1.
    void close(CommStats &stats) override {
        lane_slots_.clear();
        base_sets_.clear();
        for (uint32_t slot = 0; slot < cfg_.window; ++slot) {
            if (next_set_[slot]) {
                lane_slots_.push_back(uint16_t(slot));
                base_sets_.push_back(1);
            }
        }
        if (lane_slots_.empty())
            return;
        auto s = Schedule::single_steps(uint32_t(lane_slots_.size()));
        CallInfo call{round_ + 1, ReduceOp::Sum, DType::Int32, "close"};
        EmptySteps h(cfg_.wire, cfg_.effective_elems_per_packet());
        round_ = call.round;
        run_engine(s, call, h, stats);
    }

  private:
    void allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op,
                   const char *what, CommStats &stats) {
        if (cfg_.wire == Wire::SwitchML && op != ReduceOp::Sum)
            throw std::invalid_argument(fmt::format(
                "{} {}: the SwitchML header has no op field, the switch only sums; use the "
                "native wire for max/min",
                what, to_string(op)));
        auto s = Schedule::make(count, cfg_.effective_elems_per_packet(), cfg_.window,
                                dtype == DType::Float32);
        lane_slots_.clear();
        base_sets_.clear();
        for (uint32_t l = 0; l < s.lanes; ++l) {
            lane_slots_.push_back(uint16_t(l));
            base_sets_.push_back(next_set_[l]);
        }
        CallInfo call{round_ + 1, op, dtype, what};
        if (dtype == DType::Int32) {
            Int32Steps h(s, cfg_.wire, op, static_cast<const int32_t *>(send),
                         static_cast<int32_t *>(recv));
            round_ = call.round;
            run_engine(s, call, h, stats);
        } else {
            Float32Steps h(s, cfg_.wire, op, cfg_.world_size, static_cast<const float *>(send),
                           static_cast<float *>(recv), local_exp_, agreed_);
            h.prepare(cfg_.rank); // throws before anything is sent
            round_ = call.round;
            run_engine(s, call, h, stats);
        }
    }

    // Runs one call and keeps the slots' set parity in step with the switch.
    void run_engine(const Schedule &s, const CallInfo &call, StepHandler &handler,
                    CommStats &stats) {
        try {
            engine_.run(s, lane_slots_, base_sets_, call, handler, stats);
        } catch (...) {
            failed_ = true; // the slots' sets are now unknown
            throw;
        }
        for (uint32_t l = 0; l < s.lanes; ++l)
            next_set_[lane_slots_[l]] ^= uint8_t(s.uses_of_lane(l) & 1);
    }

    const CommConfig &cfg_;
    Engine engine_;
    std::vector<int32_t> scratch_;  ///< reduce/broadcast: what non-roots send or receive
    std::vector<uint8_t> next_set_; ///< per slot: set of its next use
    std::vector<uint16_t> lane_slots_;
    std::vector<uint8_t> base_sets_;
    std::vector<int8_t> local_exp_, agreed_;
    uint32_t round_ = 0; ///< rid of the last call; all ranks count alike
};

} // namespace

std::unique_ptr<EngineBackend> make_window_backend(const CommConfig &cfg, Transport &transport) {
    return std::make_unique<WindowBackend>(cfg, transport);
}

} // namespace incxdp::detail
