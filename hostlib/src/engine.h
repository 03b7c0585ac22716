// SPDX-License-Identifier: BSD-2-Clause
// The window engine: keeps one step in flight per lane, matches results to
// steps, retransmits on per-lane timers with exponential backoff, and gives
// up after the no-progress deadline. Knows nothing about dtypes: a
// StepHandler fills payloads and consumes results.
#pragma once

#include "packet.h"
#include "rx_backlog.h"
#include "schedule.h"

#include <incxdp/communicator.h>
#include <incxdp/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace incxdp::detail {

/// What the engine asks of a collective.
class StepHandler {
  public:
    virtual ~StepHandler() = default;
    /// Fill `payload` (room for elems_per_packet big-endian int32) for `step`;
    /// set nelems (elements written) and exp.
    virtual void build(uint64_t step, uint32_t lane, std::span<std::byte> payload, uint16_t &nelems,
                       int8_t &exp) = 0;
    /// Take the switch's result for `step` (already matched and size-checked).
    virtual void consume(uint64_t step, uint32_t lane, const ResultView &r) = 0;
};

/// One call's identity on the wire.
struct CallInfo {
    uint32_t round = 0;
    ReduceOp op = ReduceOp::Sum;
    DType dtype = DType::Int32;
    const char *what = "allreduce"; ///< for error messages
};

class Engine {
  public:
    /// Buffers for `cfg.window` lanes are allocated here, never per packet.
    Engine(const CommConfig &cfg, Transport &transport);

    /// Run all steps of `sched`. lane_slots[l] is the slot of lane l and
    /// base_sets[l] its set for the lane's first step. Throws CommTimeout.
    void run(const Schedule &sched, std::span<const uint16_t> lane_slots,
             std::span<const uint8_t> base_sets, const CallInfo &call, StepHandler &handler,
             CommStats &stats);

  private:
    using Clock = std::chrono::steady_clock;
    static constexpr uint64_t kIdle = ~uint64_t(0);

    struct Lane {
        uint64_t step = kIdle; ///< step in flight
        uint8_t set = 0;
        uint16_t nelems = 0;
        bool queued = false;  ///< waiting in send_queue_
        uint32_t retries = 0; ///< of the step in flight
        Clock::duration timeout{};
        Clock::time_point deadline = Clock::time_point::max();
        size_t len = 0; ///< bytes of the packet in buf
        std::byte *buf = nullptr;
    };

    void start_step(uint32_t lane, uint64_t step);
    void flush(Clock::time_point now);
    void handle(std::span<const std::byte> pkt, Clock::time_point now);
    void check_timers(Clock::time_point now);
    [[noreturn]] void fail_timeout(Clock::time_point now, uint32_t lane_plus_one) const;

    const CommConfig &cfg_;
    Transport &transport_;
    Wire wire_;
    size_t hdr_len_;
    size_t max_packet_;
    RxBacklog backlog_;

    std::vector<std::byte> send_mem_;                    ///< window x max_packet
    size_t max_result_;                                  ///< longer datagrams are not ours
    std::vector<std::span<const std::byte>> recv_views_; ///< batch, into the transport's memory
    std::vector<Lane> lanes_;
    std::vector<uint32_t> send_queue_;
    std::vector<std::span<const std::byte>> send_spans_;
    std::vector<int32_t> lane_of_slot_; ///< slot -> lane of the current call, -1 if unused

    // State of the current run().
    const Schedule *sched_ = nullptr;
    const CallInfo *call_ = nullptr;
    StepHandler *handler_ = nullptr;
    CommStats *stats_ = nullptr;
    std::span<const uint16_t> lane_slots_;
    std::span<const uint8_t> base_sets_;
    uint64_t done_ = 0;
    Clock::time_point last_progress_;
    Clock::time_point next_timer_ = Clock::time_point::max();
};

} // namespace incxdp::detail
