// SPDX-License-Identifier: BSD-2-Clause
// The rules of RoCEv2 aggregation trees (docs/ROCE.md): what `incxdp rules
// apply|show|clear` do, callable from tests. A topology's roce-tree job is
// planned by topo::plan_tree(), compiled per switch into the values of
// incxdp_jobs, incxdp_roce_conns and incxdp_egress, and installed on the
// engine of every switch of the tree, each in its own network namespace
// (<prefix><switch>) and pin directory (topo::switch_pin_dir()).
// Every function throws CtlError naming the job, the switch and the reason.
#pragma once

#include <incxdp/ctl.h>
#include <incxdp/maps.h>
#include <incxdp/tree.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::ctl::rules {

/// One entry of incxdp_roce_conns as a switch installs it.
struct ConnRule {
    size_t conn = 0;          ///< index into TreePlan::conns
    uint32_t qpn = 0;         ///< the key: this switch's QPN on the connection
    std::string iface;        ///< switch port the peer is behind
    std::string peer;         ///< the peer's node name
    incxdp_roce_conn value{}; ///< ifindex left 0: only the running switch knows it
};

/// Everything one switch installs for one job, compiled from the plan
/// alone (no kernel).
struct SwitchRules {
    uint32_t job_id = 0;
    std::string sw;
    incxdp_job job{};            ///< the incxdp_jobs entry; pool_base as planned
    std::vector<ConnRule> conns; ///< the parent connection first (none at the root), then
                                 ///< the children in child-index order
    /// The multicast group: every child's port and the QPN of its
    /// connection (incxdp_egress {job, port} -> roce_qpn).
    std::vector<std::pair<std::string, uint32_t>> egress;
};

SwitchRules compile(const topo::Topology &t, const topo::TreePlan &plan, const std::string &sw);

/// The roce-tree jobs of the file, or just `only` (an error if it is not
/// one). An error too if there are none.
std::vector<uint32_t> tree_jobs(const topo::Topology &t, std::optional<uint32_t> only = {});
/// topo::plan_tree() of roce-tree job `job` of the file; CtlError if it is
/// none or cannot be planned.
topo::TreePlan plan(const topo::Topology &t, uint32_t job);

struct Options {
    std::string prefix = "ix-";           ///< namespace of node N: <prefix>N
    std::string pin_root;                 ///< "" = the default (topo::switch_pin_dir())
    std::optional<uint32_t> job;          ///< only this job
    uint32_t slots = 0;                   ///< apply, loading an engine: slot map size (0 = default)
    AttachMode mode = AttachMode::Native; ///< apply, loading an engine
    bool unload = false; ///< clear: then unload each engine left without an active job
};

/// What apply() did on one switch for one job.
struct Applied {
    uint32_t job = 0;
    std::string sw, netns, pin_dir;
    std::vector<std::string> loaded_ports; ///< ports the engine was loaded on by this call
    bool reapplied = false;                ///< the job was already installed: state reset
    uint32_t pool_base = 0, pool_size = 0;
    uint32_t planned_pool_base = 0; ///< differs from pool_base if that range was taken
    size_t conns = 0, egress = 0;
};

/// For every switch of each roce-tree job (or Options::job): enters the
/// switch's namespace, loads the engine on every port of the switch where it
/// is not loaded, then installs the job all or nothing (per switch): job
/// entry, connections (receive state reset: epsn = rx_base), multicast
/// group, zeroed slots. Re-applying resets connection state and slots; a
/// connection of the job that the plan no longer has is removed. Stops at
/// the first switch that fails (its state unchanged); the error names the
/// switches already done.
std::vector<Applied> apply(const topo::Topology &t, const Options &o);

/// apply() of job `job` for one switch `sw` only, on the engine pinned in
/// `pin_dir` of the calling thread's namespace (a switch that is its own
/// machine: `incxdp apply --node`). Loads the engine on the switch's ports
/// where it is not loaded, as apply() does.
Applied apply_local(const topo::Topology &t, uint32_t job, const std::string &sw,
                    const std::string &pin_dir, const Options &o);

/// What clear() did on one switch for one job.
struct Cleared {
    uint32_t job = 0;
    std::string sw, pin_dir;
    bool engine = false;    ///< an engine is loaded there
    bool job_found = false; ///< the job was installed (as a roce-tree job)
    size_t conns = 0, egress = 0;
    bool unloaded = false; ///< Options::unload: the engine is gone
    std::string note;      ///< why the job or the engine was left alone
};

/// Removes each roce-tree job (or Options::job) from every switch of its
/// tree: job entry, connections, multicast group; zeroes its slots. With
/// Options::unload it then unloads every engine that has no active job left
/// (its ports detached, its pins removed); else the engines stay. Switches
/// whose namespace or engine is absent are skipped; a job installed there as
/// a star job is left alone.
std::vector<Cleared> clear(const topo::Topology &t, const Options &o);

/// What set_qpn() changed on a rank's leaf switch.
struct QpnSet {
    uint32_t job = 0, rank = 0;
    std::string host, sw, netns, pin_dir;
    uint32_t switch_qpn = 0; ///< the connection's key on the leaf
    uint32_t old_qpn = 0;    ///< the host QPN it had (the plan's child QPN after apply)
    uint32_t qpn = 0;        ///< the host QPN it has now
};
/// Tells the leaf switch of rank `rank` of roce-tree job `job` which QPN
/// the rank's host has: the destination QPN of the switch's frames to it.
/// A host whose RC QP is a device's (Carrier::Verbs) learns its QPN
/// only when it creates the QP, so its control plane calls this after
/// `rules apply` and before the host's first packet (the connection's
/// receive state is rewritten with it, so not during traffic). It also
/// marks the connection as a device's (rc_device: its SENDs are ACKed only
/// as far as it ACKed their results, docs/ROCE.md §6) until the next
/// apply. The job must be applied on that switch; `qpn` in 1..0xffffff.
QpnSet set_qpn(const topo::Topology &t, const Options &o, uint32_t job, uint32_t rank,
               uint32_t qpn);

/// What unload_switches() found on one switch.
struct Unloaded {
    std::string sw, netns, pin_dir;
    bool unloaded = false;
    std::string note; ///< why not, when not
};

/// Unloads the engine pinned in every switch's pin directory (what `incxdp
/// topo down` does before deleting the namespaces, or the pins would stay
/// behind). Switches whose namespace or pins are absent are skipped.
std::vector<Unloaded> unload_switches(const topo::Topology &t, const std::string &prefix,
                                      const std::string &pin_root = "");

// ---- one engine, in the calling thread's namespace ---------------------------

// (reset_conns and delete_conns live in job_ctl.cpp: `job reset|del` use them.)

/// Resets the receive state of job `job`'s connections (epsn = rx_base,
/// msn = imm = nak_sent = 0), as a new RC connection setup would. Returns
/// how many; 0 if the engine has no incxdp_roce_conns map.
size_t reset_conns(uint32_t job, const std::string &pin_dir);
/// Removes job `job`'s connections. Returns how many.
size_t delete_conns(uint32_t job, const std::string &pin_dir);

/// Runs fn with the calling thread in the network namespace
/// /var/run/netns/<netns>, and returns to the original one however fn ends.
/// Call it from the process's main thread: the pinned engine records the
/// namespace /proc/self/ns/net names.
void in_netns(const std::string &netns, const std::function<void()> &fn);

} // namespace incxdp::ctl::rules
