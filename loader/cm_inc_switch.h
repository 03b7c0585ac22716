// SPDX-License-Identifier: BSD-2-Clause
// Replay's in-switch aggregation (docs/CM.md §4, "In-switch aggregation"):
// every fid of the matrix becomes one native UDP tree job, planned by
// topo::plan_agg_jobs() (roots spread over the cores), compiled and applied
// on the switches' engines (ctl::apply). Its INC flows do not run over TCP:
// every host of the fid runs a hostlib Communicator from its namespace and
// allreduces each (rid, cid) in the same order, its contribution the
// vector its UP flow would carry, once that flow is released. The result a
// host receives is what its DOWN flows would have delivered; it is checked
// against the value computed from the matrix, and the host's UP and DOWN
// flows of that (rid, cid) complete (their triggers fire as on TCP).
#pragma once

#include "cm_inc_path.h"

#include <incxdp/topology.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace incxdp::cm {

struct SwitchPathOptions {
    std::string prefix = "ix-";
    std::string pin_root;              ///< "" = topo::switch_pin_dir()'s default
    uint16_t worker_port_base = 41000; ///< a host's UDP port for job j: base + j
    uint32_t window = 64;              ///< each Communicator's window
    uint32_t slots = 64;               ///< the job's pool on every switch (>= window)
    double deadline_s = 300;           ///< no progress for this long: the chunk fails
    bool verbose = false;              ///< the plan and job ids on stderr
    bool load_missing = false;         ///< load_engines() once the matrix was accepted
};

/// Whether the engine is loaded on every switch of `t` (pins under
/// topo::switch_pin_dir(pin_root, prefix, switch)).
bool engines_loaded(const topo::Topology &t, const std::string &prefix,
                    const std::string &pin_root = "");

/// Loads the engine (native XDP) on every port of every switch of `t` that
/// does not run it yet, each in its namespace. Returns the switches loaded.
/// Throws std::runtime_error naming the switch.
std::vector<std::string> load_engines(const topo::Topology &t, const std::string &prefix,
                                      const std::string &pin_root = "");

/// Checks the matrix, loads missing engines if asked, then plans, compiles
/// and applies every fid's tree before returning (all or
/// nothing per job; jobs applied earlier are removed again on failure).
/// Throws std::runtime_error when the matrix cannot run in the switches: a
/// (fid, rid, cid) whose contributors (UP senders and the aggregator) are
/// not the fid's, UP flows of one key into two aggregators, DOWN flows to a
/// host that does not contribute, more than 32 hosts in a fid, flows of one
/// key of different sizes or agg_op; or when apply fails (the switch's
/// reason). Removes the jobs again when destroyed.
std::unique_ptr<IncPath> make_switch_path(const Matrix &m, const topo::Topology &t,
                                          const SwitchPathOptions &o);

} // namespace incxdp::cm
