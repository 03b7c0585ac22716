// SPDX-License-Identifier: BSD-2-Clause
// Where replay's INC flows are aggregated (docs/CM.md §4): one interface,
// two implementations. The host path (here) runs INC flows as TCP flows:
// the aggregator host folds what its UP flows deliver into its own vector,
// and its DOWN flows carry the result, each starting only once every UP
// flow of its (fid, rid, cid) has arrived. The switch path
// (cm_inc_switch.h) takes INC flows off TCP: the hosts' contributions are
// reduced by the switches and the flows are completed by the path itself.
#pragma once

#include "cm_parse.h"
#include "cm_payload.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace incxdp::cm {

/// One (fid, rid, cid) at one aggregator host.
struct IncKey {
    uint32_t fid, rid, cid, agg;
    bool operator<(const IncKey &o) const {
        return std::tie(fid, rid, cid, agg) < std::tie(o.fid, o.rid, o.cid, o.agg);
    }
};

/// An INC flow's key: its receiver aggregates an UP flow, its sender a DOWN one.
IncKey inc_key(const Flow &f);

/// What replay does with an INC flow once its start time or trigger came.
enum class IncStart {
    Open,  ///< run it as a TCP flow (payload/expected/fold/up_done apply)
    Held,  ///< a DOWN flow waiting for its inputs: up_done() returns it later
    Taken, ///< the path completes it itself: done() reports it
};

/// A flow the path completed (IncStart::Taken).
struct IncDone {
    size_t flow = 0; ///< index in the matrix's flows
    double at = -1;  ///< replay seconds; negative = when done() returned it
    bool verified = false;
    std::string error; ///< non-empty: the flow failed
};

class IncPath {
  public:
    virtual ~IncPath() = default;
    /// "host" or "switch" (the JSON's `aggregation`).
    virtual const char *kind() const = 0;
    /// Called once, just before the replay's clock starts at t0.
    virtual void start(std::chrono::steady_clock::time_point t0) { (void)t0; }
    /// Flow number `idx` (file order) was released.
    virtual IncStart release(const Flow &f, size_t idx) = 0;

    // For flows released as IncStart::Open.
    /// Bytes [off, off + len) the sender of INC flow f puts on the wire.
    virtual void payload(const Flow &f, uint64_t off, uint8_t *out, size_t len);
    /// Bytes [off, off + len) the receiver of f must see, from the matrix alone.
    virtual void expected(const Flow &f, uint64_t off, uint8_t *out, size_t len);
    /// Element i of UP flow `up` arrived at its aggregator.
    virtual void fold(const Flow &up, uint64_t i, int32_t v);
    /// UP flow `up` is complete; returns the held DOWN flows it releases.
    virtual std::vector<size_t> up_done(const Flow &up);

    // For flows released as IncStart::Taken.
    /// Readable (epoll) when done() has something to return; -1 = never.
    virtual int fd() const { return -1; }
    virtual std::vector<IncDone> done() { return {}; }
    /// The replay is over: stop what still runs; what the path has to
    /// report (per-switch counters), null if nothing.
    virtual nlohmann::json finish() { return nullptr; }
};

/// Aggregation by the aggregator hosts, over TCP. Throws std::runtime_error
/// if the INC flows of one (fid, rid, cid) differ in size or agg_op: host
/// aggregation needs one vector per key.
class HostIncPath : public IncPath {
  public:
    explicit HostIncPath(const Matrix &m);

    const char *kind() const override { return "host"; }
    IncStart release(const Flow &f, size_t idx) override;
    void payload(const Flow &f, uint64_t off, uint8_t *out, size_t len) override;
    void expected(const Flow &f, uint64_t off, uint8_t *out, size_t len) override;
    void fold(const Flow &up, uint64_t i, int32_t v) override;
    std::vector<size_t> up_done(const Flow &up) override;

  private:
    struct State {
        State(uint32_t agg, const Semantics &s, uint64_t size) : agg_host(agg), acc(agg, s, size) {}
        uint32_t agg_host;
        Aggregate acc;
        uint32_t up_expected = 0, up_received = 0;
        std::string result, expected;
        std::vector<size_t> held;
    };
    State &state(const Flow &f);

    const Matrix &m_;
    std::map<IncKey, State> state_;
};

} // namespace incxdp::cm
