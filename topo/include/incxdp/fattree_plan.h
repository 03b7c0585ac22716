// SPDX-License-Identifier: BSD-2-Clause
// Aggregation trees for INC jobs (one per fid of a connection matrix) over
// a topology's switches: which switch is the root, each switch's parent and
// children, and how many contributions each switch must wait for, derived
// from the job's hosts and the topology (never N-1 everywhere). Pure and
// deterministic (docs/FATTREE.md "Planner").
#pragma once

#include <incxdp/topology.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::topo {

/// One INC job: the hosts that contribute (senders of the fid's UP flows)
/// and the hosts that receive the result (destinations of its UP and DOWN
/// flows). Host names; a host may be both.
struct AggJob {
    uint32_t fid = 0;
    std::vector<std::string> contributors;
    std::vector<std::string> receivers;
};

struct PlanSwitch {
    std::string name;
    int level = 0;                     ///< hops from the root (root 0)
    int tier = 0;                      ///< node_tiers(): ToR 1, Agg 2, core 3
    std::optional<std::string> parent; ///< none at the root
    /// Switches and hosts below it in the tree, ordered by the first host
    /// (file order) at or below each.
    std::vector<std::string> children;
    /// Children with at least one contributor at or below them: the number
    /// of partial results this switch combines before it sends up.
    uint32_t expected = 0;
    uint32_t contributors_below = 0; ///< contributors in its subtree
};

struct AggPlan {
    uint32_t fid = 0;
    std::string root;
    std::vector<PlanSwitch> switches;        ///< root first, then breadth-first
    std::map<std::string, std::string> leaf; ///< member host -> the switch it hangs below
    std::vector<std::string> contributors;   ///< file order, each once
    std::vector<std::string> receivers;      ///< file order, each once

    const PlanSwitch &sw(const std::string &name) const; ///< throws TopologyError
};

/// Breadth-first over switch-switch links from `root` (neighbours in link
/// order; the first switch to reach another becomes its parent): a spanning
/// tree of the switches reachable from `root`, even where the cabling has
/// cycles or several paths. The one walk every planner of the project uses.
struct SwitchSpan {
    std::vector<std::string> order;            ///< root first, then breadth-first
    std::map<std::string, int> level;          ///< hops from the root
    std::map<std::string, std::string> parent; ///< every reached switch but the root
};
SwitchSpan span_switches(const Topology &t, const std::string &root);

/// The generic tree over any topology: breadth-first from `root` through
/// switch-switch links (neighbours in link order; first discovery wins),
/// each member host below the reachable switch it is linked to that is
/// nearest the root, switches without members below pruned. Throws
/// TopologyError on an unknown or non-host member, a root that is not a
/// switch, a member no switch of the tree reaches, or a job without
/// contributors.
AggPlan build_agg_tree(const Topology &t, const std::string &root, const AggJob &job);

/// Plans jobs in the order given, each rooted at the lowest-tier switch
/// that has every member host below it (node_tiers(), up/down: a ToR for a
/// job under one ToR, an Agg for one pod, a core across pods); among those,
/// the one rooting fewest earlier jobs, then file order, so jobs spread over
/// the cores. Where no switch has them all below (a topology without tiers),
/// the switch nearest all members' leaves, same tie-breaks.
std::vector<AggPlan> plan_agg_jobs(const Topology &t, const std::vector<AggJob> &jobs);

} // namespace incxdp::topo
