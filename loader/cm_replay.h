// SPDX-License-Identifier: BSD-2-Clause
// `incxdp replay`: runs every flow of a connection matrix with real bytes
// between the host namespaces of a topology that is up (docs/CM.md §5).
// One process, one epoll loop: each host's sockets are created after
// setns() into its namespace, so one loop drives all of them. One TCP
// connection per flow; triggers fire as htsim fires them (plus recv_done,
// which htsim never fires).
//
// Where INC flows are aggregated is an `IncPath` (cm_inc_path.h): by
// default the aggregator hosts (INC flows run as TCP flows, each DOWN flow
// waiting for every UP flow of its (fid, rid, cid) into its sender); the
// switch path (cm_inc_switch.h) has the switches reduce them.
#pragma once

#include "cm_counters.h"
#include "cm_inc_path.h"
#include "cm_parse.h"

#include <incxdp/topology.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::cm {

struct ReplayOptions {
    std::string prefix = "ix-";
    /// Wall-clock picoseconds per matrix picosecond of `start` times:
    /// 1 = real time, 1000 = a thousand times slower.
    double scale_start = 1.0;
    double timeout_s = 300; ///< the whole replay; 0 = none
    uint16_t port = 47000;  ///< every host's listening TCP port
    bool progress = false;  ///< a line on stderr every second
    bool counters = true;   ///< read link counters before and after
    /// Run a file with `failure` lines without failing its links (they are
    /// refused otherwise: docs/CM.md §4, "Failures").
    bool ignore_failures = false;
};

struct FlowResult {
    uint32_t id = 0, src = 0, dst = 0;
    std::string src_host, dst_host;
    uint64_t size = 0, received = 0;
    std::optional<Semantics> semantics;
    std::string state = "waiting"; ///< waiting, held, running, done, failed
    /// Seconds since the replay started; negative = never.
    double released_s = -1;  ///< start time reached / trigger fired
    double start_s = -1;     ///< connection opened
    double recv_done_s = -1; ///< receiver had every byte
    double send_done_s = -1; ///< sender had the receiver's ack
    bool verified = false;   ///< every byte was what the matrix implies
    bool held = false;       ///< a DOWN flow waited for its UP inputs after release
    std::string error;
};

struct TriggerResult {
    uint32_t id = 0;
    TriggerKind kind = TriggerKind::Oneshot;
    uint32_t count = 0;
    std::vector<double> firings_s;
    uint32_t ignored = 0; ///< firings that started nothing (flaws, docs/CM.md)
};

struct ReplayResult {
    std::vector<FlowResult> flows; ///< file order
    std::vector<TriggerResult> triggers;
    double job_s = 0; ///< last send_done
    uint64_t total_bytes = 0, up_bytes = 0, down_bytes = 0;
    size_t inc_flows = 0;
    bool aggregated = false;          ///< in-switch aggregation
    std::string aggregation = "none"; ///< "none" (no INC flow), "host", "switch"
    nlohmann::json inc_report;        ///< IncPath::finish(): per-switch counters
    bool timed_out = false;
    std::vector<LinkBytes> links;
    std::map<std::string, uint64_t> tiers; ///< both directions summed
    std::vector<std::string> errors;
    bool ok() const; ///< every flow done and verified, no error
};

/// Throws std::runtime_error for what stops it from starting (a host index
/// beyond the topology, a missing namespace, size 0, INC flows of one key
/// with different sizes, `failure` lines); flow failures are reported in
/// the result. `inc` null: host aggregation (HostIncPath).
ReplayResult replay(const Matrix &m, const topo::Topology &t, const ReplayOptions &o,
                    std::unique_ptr<IncPath> inc = nullptr);

nlohmann::json to_json(const ReplayResult &r);

} // namespace incxdp::cm
