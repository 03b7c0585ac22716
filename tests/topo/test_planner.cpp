// SPDX-License-Identifier: BSD-2-Clause
// One planner for every job kind: plan_tree() (roce-tree) takes its tree
// from build_agg_tree() (tree), so both kinds get the same breadth-first
// spanning tree, also where the switches are cabled with cycles or several
// paths (topo/topologies/diamond.yaml, a ring of three). Pure, no kernel.
#include "../common/yaml_edit.h"

#include <incxdp/fattree_plan.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace incxdp {
namespace {

using topo::AggPlan;
using topo::Topology;
using topo::TreePlan;

std::string shipped(const char *name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

AggPlan agg_plan(const Topology &t, uint32_t job) {
    const topo::Job &j = t.job(job);
    return topo::build_agg_tree(t, j.switch_name, {j.id, j.workers, j.workers});
}

// Each switch's parent ("" at the root) in a roce-tree plan.
std::map<std::string, std::string> parents(const TreePlan &p) {
    std::map<std::string, std::string> out;
    for (const auto &s : p.switches)
        out[s.name] = s.parent_conn ? p.conns[*s.parent_conn].parent : "";
    return out;
}

std::map<std::string, std::string> parents(const AggPlan &p) {
    std::map<std::string, std::string> out;
    for (const auto &s : p.switches)
        out[s.name] = s.parent.value_or("");
    return out;
}

// A tree: every switch but the root has a parent in the plan, and walking
// up from any switch reaches the root without meeting a switch twice.
void expect_spanning_tree(const std::map<std::string, std::string> &parent,
                          const std::string &root) {
    ASSERT_EQ(parent.at(root), "");
    for (const auto &[sw, p] : parent) {
        std::set<std::string> seen;
        std::string at = sw;
        while (!parent.at(at).empty()) {
            ASSERT_TRUE(seen.insert(at).second) << "cycle through " << at;
            at = parent.at(at);
            ASSERT_TRUE(parent.count(at)) << at << " is a parent but not in the plan";
        }
        EXPECT_EQ(at, root) << sw;
    }
}

// The links the roce-tree plan connects, as unordered node pairs.
std::set<std::set<std::string>> conn_links(const TreePlan &p) {
    std::set<std::set<std::string>> out;
    for (const auto &c : p.conns)
        out.insert({c.child, c.parent});
    return out;
}

TEST(OnePlanner, DiamondRoceTreeAndTreeJobGetTheSameSpanningTree) {
    const Topology t = Topology::load_file(shipped("diamond"));
    ASSERT_EQ(t.job(1).kind, topo::JobKind::Tree);
    ASSERT_EQ(t.job(2).kind, topo::JobKind::RoceTree);
    const TreePlan roce = topo::plan_tree(t, 2); // a cycle is no longer an error
    const AggPlan udp = agg_plan(t, 1);

    // Breadth-first from s0 in link order: s1 reaches s3 before s2 does.
    const std::map<std::string, std::string> want{
        {"s0", ""}, {"s1", "s0"}, {"s2", "s0"}, {"s3", "s1"}};
    EXPECT_EQ(parents(roce), want);
    EXPECT_EQ(parents(udp), want);
    expect_spanning_tree(parents(roce), "s0");
    expect_spanning_tree(parents(udp), "s0");
    // Each worker below the same leaf in both plans.
    for (uint32_t r = 0; r < roce.ranks.size(); ++r)
        EXPECT_EQ(roce.conn_of_rank(r).parent, udp.leaf.at(roce.ranks[r])) << "rank " << r;
    EXPECT_EQ(roce.conn_of_rank(2).parent, "s3");
    // The cut link carries no connection; every tree edge carries one.
    const auto links = conn_links(roce);
    EXPECT_EQ(links.count({"s3", "s2"}), 0u);
    EXPECT_EQ(links.size(), 3u + 4u); // three switch links, four hosts
    EXPECT_EQ(links.count({"s3", "s1"}), 1u);
    EXPECT_EQ(roce.sw("s1").child_conns.size(), 2u); // h0 and s3
    EXPECT_EQ(roce.sw("s2").child_conns.size(), 1u); // h1 only
    EXPECT_EQ(udp.sw("s2").expected, 1u);
    EXPECT_EQ(udp.sw("s1").expected, 2u);
}

TEST(OnePlanner, DiamondQpnsFollowTheDocumentedDerivation) {
    // tree.cpp: connections root first then breadth-first, children in rank
    // order; child QPN = j << 16 | c << 4 | 1, up_base = start + 16 c.
    const Topology t = Topology::load_file(shipped("diamond"));
    const TreePlan p = topo::plan_tree(t, 2);
    const std::vector<std::pair<std::string, std::string>> order{
        {"s1", "s0"}, {"s2", "s0"}, {"h0", "s1"}, {"s3", "s1"},
        {"h1", "s2"}, {"h2", "s3"}, {"h3", "s3"}};
    ASSERT_EQ(p.conns.size(), order.size());
    const uint32_t start = 0x10000u * 3; // job 2 without start_psn
    for (uint32_t c = 0; c < order.size(); ++c) {
        SCOPED_TRACE(c);
        EXPECT_EQ(p.conns[c].child, order[c].first);
        EXPECT_EQ(p.conns[c].parent, order[c].second);
        EXPECT_EQ(p.conns[c].child_qpn, (2u << 16) | (c << 4) | 1);
        EXPECT_EQ(p.conns[c].parent_qpn, (2u << 16) | (c << 4) | 2);
        EXPECT_EQ(p.conns[c].up_base, start + 16 * c);
        EXPECT_EQ(p.conns[c].down_base, start + 16 * c + 8);
    }
    // The tree job 1 before it in the file holds 256 slots on every switch
    // of its tree, which is the same tree: job 2's pools start after them.
    ASSERT_EQ(p.switches.size(), 4u);
    for (const auto &s : p.switches)
        EXPECT_EQ(s.pool_base, 256u) << s.name;
}

// A ring of three switches with the root on it, and a host cabled to two
// switches: the spanning tree cuts the ring, the host hangs below the
// switch nearest the root (the first of its links on a tie).
const std::string kRing = R"(name: ring3
subnet: 10.9.0.0/24
switches:
  - {name: s0, ip: 10.9.0.250}
  - {name: s1, ip: 10.9.0.251}
  - {name: s2, ip: 10.9.0.252}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
  - {name: h2, ip: 10.9.0.3}
links:
  - [s0, s1]
  - [s1, s2]
  - [s2, s0]
  - [h0, s1]
  - [h1, s2]
  - [h2, s2]
  - [h2, s1]
jobs:
  - {id: 3, kind: roce-tree, switch: s0, workers: [h0, h1, h2], slots: 64}
  - {id: 4, kind: tree, switch: s0, workers: [h0, h1, h2], slots: 64}
)";

TEST(OnePlanner, RingOfThreeIsCutAndBothKindsAgree) {
    const Topology t = Topology::parse(kRing);
    const TreePlan roce = topo::plan_tree(t, 3);
    const AggPlan udp = agg_plan(t, 4);
    const std::map<std::string, std::string> want{{"s0", ""}, {"s1", "s0"}, {"s2", "s0"}};
    EXPECT_EQ(parents(roce), want);
    EXPECT_EQ(parents(udp), want);
    EXPECT_EQ(conn_links(roce).count({"s1", "s2"}), 0u);
    // h2 is linked to s2 first: both are one hop from s0.
    EXPECT_EQ(roce.conn_of_rank(2).parent, "s2");
    EXPECT_EQ(udp.leaf.at("h2"), "s2");
    EXPECT_EQ(roce.conn_of_rank(2).child_iface, t.host_iface_for("h2", "s2").name);

    // Rooted elsewhere on the ring, the same rule; s0 has no worker below
    // it there and is pruned from both.
    Topology r1 = Topology::parse(
        test::with(test::with(kRing, "switch: s0, workers: [h0, h1, h2], slots: 64}\n  - {id: 4",
                              "switch: s1, workers: [h0, h1, h2], slots: 64}\n  - {id: 4"),
                   "id: 4, kind: tree, switch: s0", "id: 4, kind: tree, switch: s1"));
    const std::map<std::string, std::string> want1{{"s1", ""}, {"s2", "s1"}};
    EXPECT_EQ(parents(topo::plan_tree(r1, 3)), want1);
    EXPECT_EQ(parents(agg_plan(r1, 4)), want1);
    EXPECT_EQ(topo::plan_tree(r1, 3).conn_of_rank(2).parent, "s1"); // h2: s1 is nearer now
    EXPECT_THROW(topo::plan_tree(r1, 3).sw("s0"), topo::TopologyError);
}

} // namespace
} // namespace incxdp
