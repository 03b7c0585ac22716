// SPDX-License-Identifier: BSD-2-Clause
// htsim's fat-tree (and its 2-tier leaf-spine variant) as a topology YAML,
// numbered exactly as htsim numbers it, so host h of a connection matrix
// (.cm) is host `h<h>` of the file (docs/FATTREE.md).
#pragma once

#include <cstddef>
#include <string>

namespace incxdp::topo {

struct FatTreeSpec {
    int k = 4;                           ///< switch radix: even, >= 2
    int tiers = 3;                       ///< 3: ToR/Agg/core; 2: leaf-spine
    std::string subnet = "10.80.0.0/16"; ///< prefix length 8..16, host bits zero
    std::string name;                    ///< empty: fattree<k> or leafspine<k>
};

/// Node counts of a fat-tree of radix k (CM.md §3).
struct FatTreeCounts {
    size_t hosts = 0, tors = 0, aggs = 0, cores = 0; ///< cores: spines when 2 tiers
    size_t switches() const { return tors + aggs + cores; }
    size_t nodes() const { return hosts + switches(); }
};

/// 3 tiers: k³/4 hosts, k²/2 ToR, k²/2 Agg, k²/4 cores (k pods).
/// 2 tiers: k²/2 hosts, k ToR, k/2 spines. Throws TopologyError on a bad k
/// or tier count.
FatTreeCounts fattree_counts(int k, int tiers);

/// The topology YAML (routing: updown, no jobs): switches tor<i>, agg<i>,
/// core<i> (spine<i>), hosts h<i>; host h under ToR h/(k/2); ToR t linked
/// to every Agg of its pod; Agg a to cores (a mod k/2) + (k/2)·l. Throws
/// TopologyError naming the bad option (k odd, too many nodes, subnet).
std::string generate_fattree_yaml(const FatTreeSpec &spec);

} // namespace incxdp::topo
