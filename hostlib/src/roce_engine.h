// SPDX-License-Identifier: BSD-2-Clause
// The RoCE engine (docs/ROCE.md §4): one SEND_ONLY_IMM per index of the
// job's packet sequence on this rank's RC connection, a window of at most
// the job's slot pool, go-back-N on NAK and, on timeout, a probe that asks
// the leaf where to go back to (or, when the leaf takes our frames in any
// order, a resend of the overdue frames only),
// results matched by their PSN in the switch's stream. Knows nothing about dtypes or
// primitives: RocePackets fills payloads and takes results. Before its first call it asks
// the leaf where the connection stands and checks that every rank stands there too
// (docs/ROCE.md "Consecutive runs"), so a new process continues the job's sequence.
#pragma once

#include "roce_frame.h"
#include "roce_packets.h"
#include "rx_backlog.h"

#include <incxdp/communicator.h>
#include <incxdp/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace incxdp::detail {

class RoceEngine final : public RoceLink {
  public:
    /// cfg.roce must name the connection, with both MACs resolved. Buffers
    /// for cfg.window frames are allocated here, never per packet.
    RoceEngine(const CommConfig &cfg, Transport &transport);

    /// Send every packet of `call` at the next indices and wait for all
    /// results. Throws CommTimeout (naming rank, job and idx).
    void run(RocePackets &call, const char *what, CommStats &stats) override;

    /// Index the next call starts at (packets sent so far on the connection,
    /// by this process and, once the first call has started, those before it).
    uint64_t next_idx() const { return next_; }

  private:
    using Clock = std::chrono::steady_clock;

    struct Entry {
        std::byte *buf = nullptr;
        size_t len = 0;
        uint32_t imm = 0;
        uint32_t sends = 0;  ///< times handed to the transport
        uint32_t fast = 0;   ///< of those, fast retransmits
        uint64_t overtaken = 0; ///< later results already in when its own came
        Clock::time_point sent_at{}; ///< the last time
        bool sealed = false; ///< PSN, AckReq and ICRC written (at the first send)
        bool resulted = false;
    };

    Entry &entry(uint64_t idx) { return ring_[idx % ring_.size()]; }
    uint32_t up_psn(uint64_t idx) const;
    int32_t from_base(uint32_t psn, uint32_t stream_base) const;
    void fill_and_send(Clock::time_point now);
    bool can_build() const;
    bool build_next();
    void handle(std::span<const std::byte> frame, Clock::time_point now);
    void on_result(const RoceFrameView &v, Clock::time_point now);
    void on_ack(const RoceFrameView &v, Clock::time_point now);
    void go_back(uint64_t from, Clock::time_point now);
    void cut_in_flight(uint64_t lost);
    void probe(Clock::time_point now, Clock::duration waited);
    void on_probe_answer(const RoceFrameView &v, Clock::time_point now);
    void note_later_result(uint64_t idx);
    void note_duplicate_result(uint64_t idx);
    void learn_reorder(uint64_t overtaken);
    size_t send_singles(std::vector<uint64_t> &idxs, bool fast, Clock::time_point now);
    void collect_overdue(uint64_t from, uint64_t to, Clock::duration age, Clock::time_point now);
    void on_timer(Clock::time_point now);
    [[noreturn]] void fail_timeout(Clock::time_point now, bool retries) const;
    void start();
    std::optional<uint64_t> ask_where_we_stand();
    std::optional<uint64_t> where_we_stand(std::span<const std::byte> frame) const;

    const CommConfig &cfg_;
    Transport &transport_;
    RoceSendTemplate tmpl_;
    uint32_t per_packet_;
    size_t max_frame_;
    uint32_t window_;

    std::vector<std::byte> send_mem_; ///< window x max_frame
    std::vector<Entry> ring_;         ///< idx % window
    std::vector<std::span<const std::byte>> recv_views_, send_spans_;
    std::vector<uint64_t> send_idx_;

    // The connection's sequence, kept across calls.
    uint64_t base_ = 0; ///< oldest index without a result (== next_ between calls)
    uint64_t next_ = 0; ///< next index to build
    uint64_t tx_ = 0;   ///< next index to hand to the transport (< next_: going back)
    /// Later results that may come back before a missing one goes again
    /// (fast retransmit); grows with the reordering seen, never shrinks.
    uint64_t reorder_;
    /// Strict order: frames in flight beyond the oldest index without a
    /// result (<= window_). A loss sends us back over all of them, so a
    /// loss halves it, down to kMinLossWindow; every in_flight_ results add
    /// one back.
    uint64_t in_flight_;
    RxBacklog backlog_;
    uint64_t grown_ = 0;   ///< results since in_flight_ last grew
    uint64_t recover_ = 0; ///< next_ at the last cut: losses below it are the same one

    /// The start handshake and check ran (or the leaf did not answer it).
    bool started_ = false;
    /// The current call is the start check (its timeout says so).
    bool checking_ = false;

    // The current call.
    RocePackets *call_ = nullptr;
    CommStats *stats_ = nullptr;
    const char *what_ = "";
    uint64_t first_ = 0, end_ = 0; ///< the call's indices [first_, end_)
    uint64_t done_ = 0;            ///< results taken
    uint32_t retries_ = 0;         ///< timeouts since the oldest index last moved
    uint64_t newest_ = 0;          ///< highest index with a result (fast retransmit)
    uint64_t scan_ = 0;            ///< next index fast retransmit looks at
    std::vector<uint64_t> fast_;   ///< indices to resend now, one frame each
    std::vector<uint64_t> overdue_; ///< timeout: indices to resend, one frame each
    bool send_blocked_ = false;    ///< the transport took fewer frames than offered
    /// Strict order: a timeout's probe is out and no ACK has answered it yet.
    bool probing_ = false;
    Clock::time_point probe_before_{}; ///< the probe's time less the timeout it waited
    Clock::duration rto_{};
    Clock::time_point timer_ = Clock::time_point::max();
    Clock::time_point last_progress_;
};

} // namespace incxdp::detail
