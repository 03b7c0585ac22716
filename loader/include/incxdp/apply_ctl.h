// SPDX-License-Identifier: BSD-2-Clause
// plan -> compile -> apply for every job kind (docs/APPLY.md). A job's tree
// is planned by topo::build_agg_tree() (the one planner: a star is its
// one-switch case, roce-tree plans build on it), compiled into every
// switch's incxdp_jobs / incxdp_workers / incxdp_egress / incxdp_parents
// entries (pure; a one-switch tree is a star, maps.h "fanin" 0), and
// applied all or nothing with one map journal, either on every switch of a
// topology brought up as namespaces or on the engine of the machine the
// caller runs on (`incxdp apply --node`). `incxdp job add` is the same
// compile and apply of a star given by addresses. roce-tree jobs are
// compiled and written by the RoCE installer (rules_ctl.h) through the same
// journal; apply_job_netns() and apply_job_here() are the one dispatch.
// Every function throws CtlError naming the job, the switch and the reason.
#pragma once

#include <incxdp/ctl.h>
#include <incxdp/fattree_plan.h>
#include <incxdp/maps.h>
#include <incxdp/proto.h>
#include <incxdp/topology.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::ctl {
class Journal; // map_journal.h
}

namespace incxdp::ctl::apply {

/// The UDP source port a switch sends a job's partials up from: unique per
/// job on that switch (the parent's worker table is keyed by mac/port/ip).
inline uint16_t partial_src_port(uint32_t job) {
    return static_cast<uint16_t>(0xC000 | job);
}

/// One tree job: who contributes (rank order) and who receives the result.
struct TreeJobSpec {
    uint32_t id = 0;
    std::vector<std::string> contributors; ///< host names, index = rank
    /// Host names; every receiver must also contribute (a receive-only host
    /// is not part of the native tree datapath).
    std::vector<std::string> receivers;
    uint16_t worker_port = 4000; ///< UDP source port of every host
    uint32_t slots = 256;        ///< pool size on every switch (>= the hosts' window)
    uint32_t max_elems = INCXDP_MAX_ELEMS;
    uint16_t native_port = INCXDP_UDP_PORT; ///< every switch's (`incxdp load --native-port`)
};

/// A kind-tree job of the file: contributors = receivers = its workers.
TreeJobSpec tree_spec(const topo::Topology &t, uint32_t job_id);

/// One incxdp_workers entry: a host or a switch below.
struct WorkerEntry {
    std::string peer; ///< node name
    bool is_switch = false;
    std::string iface; ///< this switch's port towards the peer
    incxdp_worker_key key{};
    incxdp_worker value{}; ///< ifindex left 0: only the running switch knows it
};

/// One incxdp_egress entry: how a result copy leaves towards a child.
struct EgressEntry {
    std::string peer;
    std::string iface;
    incxdp_egress value{};
};

/// A port the entries use, with the MAC the file gives it (checked at
/// apply). Without one (a star given by addresses, `job add --worker`) the
/// port's own MAC is the source of what the switch sends through it.
struct PortUse {
    std::string iface;
    std::optional<topo::Mac> mac;
};

/// Everything one switch installs for the job.
struct SwitchEntries {
    uint32_t job_id = 0;
    std::string sw;
    bool root = false;
    incxdp_job job{}; ///< pool_base left 0: picked at apply from the engine's free slots
    std::vector<WorkerEntry> workers; ///< in child (bit) order
    std::vector<EgressEntry> egress;  ///< one per child port
    std::string parent_iface;         ///< empty at the root
    std::string parent_node;          ///< empty at the root
    incxdp_parent parent{};           ///< ifindex left 0 (also at the root)
    std::vector<PortUse> ports;       ///< every port named above, once each
};

/// A job compiled for every switch of its tree.
struct CompiledJob {
    uint32_t id = 0;
    std::string root;
    std::vector<std::string> ranks;      ///< host per rank
    std::vector<SwitchEntries> switches; ///< root first, then breadth-first (the plan's order)

    const SwitchEntries &sw(const std::string &name) const; ///< throws CtlError
};

/// Pure: a star, the one-switch tree, from its workers' addresses (what
/// `incxdp job add` installs): fanin 0, bit = rank (maps.h). `sw` only
/// names the switch in the entries. Throws CtlError on what job add
/// refuses (ranks not 0..n-1 once each, two ranks on one address or one
/// port, slots, max elems or job id out of range, no switch address).
SwitchEntries compile_star(const JobSpec &job, const std::string &sw = "");

/// Pure: the entries of every switch of `plan` (build_agg_tree() of the
/// spec's hosts); a plan of one switch compiles to compile_star()'s star.
/// Throws CtlError on a receive-only host, more than INCXDP_MAX_WORKERS
/// ranks or children, or a plan that does not match.
CompiledJob compile_tree(const topo::Topology &t, const TreeJobSpec &spec,
                         const topo::AggPlan &plan);
/// Kind-tree job `job_id` of the file, planned from its `switch:` (the root).
CompiledJob compile_tree(const topo::Topology &t, uint32_t job_id);
/// A star or tree job of the file: planned from its `switch:` and compiled
/// (a star is the one-switch plan). CtlError for a roce-tree job, which
/// rules::compile() compiles.
CompiledJob compile_job(const topo::Topology &t, uint32_t job_id);

/// The switch each worker of job `job_id` hangs below, by host name, and
/// the switches of its tree (root first, breadth-first): the one planner's
/// answer for every job kind.
topo::AggPlan plan_job(const topo::Topology &t, uint32_t job_id);

/// What was installed on one switch.
struct SwitchApplied {
    std::string sw, netns, pin_dir;
    uint32_t pool_base = 0, pool_size = 0;
    bool replaced = false; ///< the job was there already: its old entries were replaced
    size_t workers = 0, egress = 0;
    size_t conns = 0; ///< roce-tree: RC connections installed
};

/// What to do when the job is installed on the engine already.
enum class Existing {
    Replace, ///< a fresh run: its entries replaced, slots zeroed (`apply`)
    Refuse,  ///< an error, "job N already exists" (`job add`)
};

/// Installs one switch's entries on the engine pinned in `pin_dir`, in the
/// calling thread's namespace (ports resolved by name and, where the
/// entries give one, checked against their MAC here). Every write is saved
/// in `journal` first; the caller commits.
SwitchApplied apply_switch(const SwitchEntries &e, const std::string &pin_dir, Journal &journal,
                           Existing existing = Existing::Replace);

/// Every switch of the compiled job, each in its namespace <prefix><switch>
/// with pins in topo::switch_pin_dir(pin_root, prefix, switch); the engine
/// must be loaded there (`incxdp load`). All or nothing across switches:
/// a failure on any switch restores every switch already written.
std::vector<SwitchApplied> apply_tree_netns(const topo::Topology &t, const std::string &prefix,
                                            const CompiledJob &job,
                                            const std::string &pin_root = "");

// ---- every job kind --------------------------------------------------------------

/// Where a topology's switches are: namespaces <prefix><switch>, pins in
/// topo::switch_pin_dir(pin_root, prefix, switch).
struct NetnsTarget {
    std::string prefix = "ix-";
    std::string pin_root;
    AttachMode mode = AttachMode::Native; ///< roce-tree: loading an engine where there is none
};

/// Job `job_id` of the file on every switch of its tree, whatever its kind:
/// star and tree compile_job() + apply_tree_netns(), roce-tree the RoCE
/// installer (rules::apply). Applying again replaces the job.
std::vector<SwitchApplied> apply_job_netns(const topo::Topology &t, uint32_t job_id,
                                           const NetnsTarget &where);
/// Removes job `job_id` from every switch of its tree, whatever its kind.
void remove_job_netns(const topo::Topology &t, uint32_t job_id, const NetnsTarget &where);
/// Switch `sw`'s part of job `job_id` on the engine pinned in `pin_dir` of
/// the calling thread's namespace (`incxdp apply --node`), whatever its kind.
SwitchApplied apply_job_here(const topo::Topology &t, uint32_t job_id, const std::string &sw,
                             const std::string &pin_dir, AttachMode mode = AttachMode::Native);

/// Removes job `job` from the engine in `pin_dir` (this namespace): entry,
/// workers, egress, parent; its slots zeroed. False if it was not there.
bool remove_here(uint32_t job, const std::string &pin_dir);
/// remove_here() on every switch of the compiled job's tree, in its
/// namespace; switches whose namespace or engine is gone are skipped.
size_t remove_tree_netns(const topo::Topology &t, const std::string &prefix, const CompiledJob &job,
                         const std::string &pin_root = "");

} // namespace incxdp::ctl::apply
