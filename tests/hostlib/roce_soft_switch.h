// SPDX-License-Identifier: BSD-2-Clause
// An in-process, one-level model of the RoCE tree engine (docs/ROCE.md §3)
// with N hosts below one root switch, and the loopback Transport that
// connects hostlib's roce engine to it. For the engine tests only: frames
// go from a rank's send_batch() straight into the switch (in that thread,
// under one lock) and the switch's frames into the ranks' inboxes, with
// deterministic loss, duplication, corruption and late delivery.
//
// The model: per connection a strict expected PSN (NAK once for a frame
// ahead, drop later ones until the expected one arrives) or, with
// any_order (a job's host_order: any), any PSN within the pool that the
// set has not seen from that rank; MSN, ACK on AckReq (strict: a host's
// own ACK is answered with the ACK it is owed, if the switch took SENDs
// since its last positive ACK, as the engine's roce_late_ack); per idx a slot (idx % pool) and set
// ((idx / pool) & 1) that aggregates int32 SUM/MAX/MIN, takes Broadcast's one payload, and sends
// the result down to every rank (Reduce: 0 payload except to the root);
// duplicates get the result if the set holds it, an ACK if it is still
// incomplete, nothing if the set moved on.
// The start handshake (docs/ROCE.md "Consecutive runs"): a host's sync
// request is answered with where its connection stands; sets compare the
// whole ImmDt, so the start check never joins a set of another use.
#pragma once

#include <incxdp/transport.h>

#include "roce_frame.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace incxdp::test {

struct SoftSwitchConfig {
    uint32_t ranks = 4;
    uint32_t pool = 64;     ///< slots, a power of two
    uint32_t start_psn = 0; ///< connection bases derive from it (near 2^24: wrap)
    // Faults, each a probability per frame, on the way up (host -> switch)
    // and down (switch -> host).
    double drop_up = 0, drop_down = 0;
    double dup_up = 0, dup_down = 0;
    double corrupt_down = 0; ///< flip a payload/header byte: the host must see a bad ICRC
    double corrupt_up = 0;   ///< the switch must drop it (bad ICRC)
    double late_down = 0;    ///< deliver late_by frames later (results out of order)
    uint32_t late_by = 16;   ///< frames to the same rank that overtake a late one
    uint64_t seed = 1;
    bool any_order = false; ///< take a host's SENDs in any order within the pool, never NAK
    // Targeted faults: the n-th frame from any host (1-based, 0: none), the
    // first drop_naks NAKs the switch sends.
    uint64_t drop_up_nth = 0;
    uint32_t drop_naks = 0;
};

struct SoftSwitchCounters {
    uint64_t rx = 0, lost = 0, bad_icrc = 0, malformed = 0, unknown_qp = 0, accepted = 0, nak = 0,
             ahead_drop = 0, ack = 0, absorbed = 0, down = 0, dup_result = 0, dup_ack = 0,
             stale = 0, mismatch = 0, peer_ack = 0, ackreq = 0, wraps = 0, corrupted = 0, late = 0,
             accepted_ahead = 0, ///< any_order: taken beyond the expected PSN
        late_ack = 0,            ///< a host's ACK answered with the ACK it was owed
        sync = 0;                ///< start handshakes answered
};

/// One rank's connection as the switch and the host see it.
struct SoftConn {
    uint32_t host_qpn = 0, switch_qpn = 0;
    uint32_t up_base = 0, down_base = 0;
    uint16_t host_sport = 0, switch_sport = 0;
    detail::Mac host_mac{}, switch_mac{};
    uint32_t host_ip = 0, switch_ip = 0; ///< network order
};

class SoftRoceNet {
  public:
    explicit SoftRoceNet(SoftSwitchConfig cfg);
    ~SoftRoceNet();

    /// The CommConfig fields of rank r's connection (transport Roce).
    const SoftConn &conn(uint32_t r) const { return conns_[r]; }
    /// The switch's side of rank r's connection, for frames toward the host.
    const detail::RoceEndpoint &down_endpoint(uint32_t r) const { return down_ep_[r]; }
    /// The transport of rank r (one per rank; the net must outlive it).
    std::unique_ptr<Transport> transport(uint32_t r);
    SoftSwitchCounters counters() const;
    /// Expected PSN of rank r's stream (the switch's receive state).
    uint32_t epsn(uint32_t r) const;

    // Used by the transports.
    void from_host(uint32_t r, std::span<const std::byte> frame);
    size_t take(uint32_t r, std::vector<std::vector<std::byte>> &out, size_t max);
    void wait_for(uint32_t r, std::chrono::nanoseconds t);

  private:
    struct Set {
        int64_t idx = -1; ///< 24-bit idx the set holds, -1 none
        uint64_t bitmap = 0;
        bool complete = false;
        uint32_t imm = 0;
        bool have_data = false;
        std::vector<int32_t> vals;
    };
    struct Rx {
        uint32_t epsn = 0, msn = 0;
        uint32_t acked = 0; ///< epsn when the last positive ACK went out
        bool nak_sent = false;
    };
    struct Late {
        uint64_t due;
        std::vector<std::byte> frame;
    };

    void ingress(uint32_t r, std::span<const std::byte> frame);
    void on_send(uint32_t r, const detail::RoceFrameView &v);
    void on_duplicate(uint32_t r, Rx &x, uint32_t idx24, const Set &s);
    void send_ack(uint32_t r, uint32_t psn, uint32_t aeth);
    void ack_taken(uint32_t r, Rx &x);
    void send_result(uint32_t r, uint32_t idx24, const Set &s);
    void deliver(uint32_t r, std::vector<std::byte> frame);
    bool chance(double p);

    SoftSwitchConfig cfg_;
    std::vector<SoftConn> conns_;
    std::vector<detail::RoceEndpoint> down_ep_; ///< switch -> host r
    std::vector<Rx> rx_;
    std::vector<std::array<Set, 2>> slots_;
    uint64_t draws_ = 0;
    uint32_t naks_dropped_ = 0;

    mutable std::mutex mu_;
    std::vector<std::condition_variable> cv_;
    std::vector<std::deque<std::vector<std::byte>>> inbox_;
    std::vector<std::vector<Late>> late_;
    std::vector<uint64_t> delivered_;
    SoftSwitchCounters c_;
};

} // namespace incxdp::test
