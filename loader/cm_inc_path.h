// SPDX-License-Identifier: BSD-2-Clause
// Where replay's INC flows are aggregated (docs/CM.md §4). For now by the
// aggregator host: it folds what its UP flows deliver into its own vector,
// and its DOWN flows carry the result, each starting only once every UP flow
// of its (fid, rid, cid) has arrived. The in-switch path replaces this class:
// UP flows end at the switches, DOWN flows are the switches' results.
#pragma once

#include "cm_parse.h"
#include "cm_payload.h"

#include <cstddef>
#include <cstdint>
#include <map>
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

class IncPath {
  public:
    /// Throws std::runtime_error if the INC flows of one (fid, rid, cid)
    /// differ in size or agg_op: host aggregation needs one vector per key.
    explicit IncPath(const Matrix &m);

    /// Whether DOWN flow `down` may start: every UP flow of its key arrived.
    bool ready(const Flow &down);
    /// Parks DOWN flow number `idx` until up_done() releases it.
    void hold(const Flow &down, size_t idx);
    /// Bytes [off, off + len) the sender of INC flow f puts on the wire.
    void payload(const Flow &f, uint64_t off, uint8_t *out, size_t len);
    /// Bytes [off, off + len) the receiver of f must see, from the matrix alone.
    void expected(const Flow &f, uint64_t off, uint8_t *out, size_t len);
    /// Element i of UP flow `up` arrived at its aggregator.
    void fold(const Flow &up, uint64_t i, int32_t v);
    /// UP flow `up` is complete; returns the held DOWN flows it releases.
    std::vector<size_t> up_done(const Flow &up);

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
