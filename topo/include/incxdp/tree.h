// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 aggregation trees (docs/ROCE.md): from a topology and one of its
// `kind: roce-tree` jobs, every RC connection of the job's tree (one per
// link, child below, parent above) and what each switch of the tree must
// know: its children, its parent, its fan-in and its slot pool. Pure and
// deterministic, so `incxdp rules apply`, the hosts (hostlib) and the tests
// derive the same QPNs and PSNs from the file alone.
#pragma once

#include <incxdp/topology.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::topo {

/// One RC connection on one link of the tree, seen from both ends.
struct RoceConn {
    std::string child, parent;             ///< node names (child: host or switch)
    std::string child_iface, parent_iface; ///< interfaces of the link
    Mac child_mac{}, parent_mac{};
    std::string child_ip, parent_ip; ///< node addresses
    uint32_t child_qpn = 0;          ///< QPN at the child (destination of down frames)
    uint32_t parent_qpn = 0;         ///< QPN at the parent (destination of up frames)
    uint32_t up_base = 0;            ///< PSN of idx 0, child -> parent
    uint32_t down_base = 0;          ///< PSN of idx 0, parent -> child
    uint16_t child_sport = 0;        ///< UDP source port of the child's frames
    uint16_t parent_sport = 0;       ///< UDP source port of the parent's frames
    bool child_is_switch = false;
    uint64_t subtree_ranks = 0; ///< bit r: rank r is the child or below it
};

/// What one switch of the tree installs for the job.
struct TreeSwitch {
    std::string name;
    bool root = false;
    std::optional<size_t> parent_conn; ///< index into TreePlan::conns; none at the root
    std::vector<size_t> child_conns;   ///< index into TreePlan::conns, in rank/DFS order
    uint32_t pool_base = 0;            ///< first slot of the job's pool on this switch
    uint32_t pool_size = 0;            ///< = the job's slots (a power of two)
};

struct TreePlan {
    uint32_t job = 0;
    std::string root;                  ///< root switch
    std::vector<std::string> ranks;    ///< host per rank (the job's workers)
    std::vector<RoceConn> conns;       ///< every connection of the tree
    std::vector<TreeSwitch> switches;  ///< root first, then breadth-first
    std::vector<size_t> host_conn;     ///< rank -> index into conns
    HostOrder host_order = HostOrder::Strict; ///< the job's (topology.h)

    const TreeSwitch &sw(const std::string &name) const; ///< throws TopologyError
    const RoceConn &conn_of_rank(uint32_t rank) const;   ///< throws TopologyError
};

/// The job's tree is build_agg_tree()'s (fattree_plan.h), the one planner
/// of every job kind: a breadth-first spanning tree of the switches
/// reachable from the job's root switch (cycles and parallel paths are
/// cut), each worker below the reachable switch it is linked to nearest the
/// root, switches without workers below them left out. This adds the RC
/// connections (children in rank order) on top. Throws TopologyError naming
/// the file's job and the problem (not a roce-tree job, a worker not
/// reachable, more than 64 ranks, ...).
TreePlan plan_tree(const Topology &t, uint32_t job_id);

/// Where the engine of switch `sw` keeps its pins when the topology is up
/// with `prefix`: <pin_root>/<netns name>, pin_root defaulting to
/// /sys/fs/bpf/incxdp (or $INCXDP_PIN_DIR).
std::string switch_pin_dir(const std::string &pin_root, const std::string &prefix,
                           const std::string &sw);

} // namespace incxdp::topo
