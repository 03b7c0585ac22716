// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 tree rules without a kernel: topo::plan_tree() on the shipped
// trees and on edited ones (shape, QPNs, PSN bases, source ports, pools,
// every refusal), and the per-switch map values rules::compile() makes of it.
#include "../common/yaml_edit.h"

#include <incxdp/roce.h>
#include <incxdp/rules_ctl.h>
#include <incxdp/tree.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace incxdp {
namespace {

using topo::JobKind;
using topo::plan_tree;
using topo::Topology;
using topo::TopologyError;
using topo::TreePlan;
using test::parse_error;
using test::read_text;
using test::with;

std::string shipped(const char *name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

// 1-2-4 like tree124.yaml, small enough to edit per case.
const std::string kTree = R"(name: t
subnet: 10.9.0.0/24
switches:
  - {name: s0, ip: 10.9.0.250}
  - {name: s1, ip: 10.9.0.251}
  - {name: s2, ip: 10.9.0.252}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
  - {name: h2, ip: 10.9.0.3}
  - {name: h3, ip: 10.9.0.4}
links:
  - [s1, s0]
  - [s2, s0]
  - [h0, s1]
  - [h1, s1]
  - [h2, s2]
  - [h3, s2]
jobs:
  - {id: 1, kind: roce-tree, switch: s0, workers: [h0, h1, h2, h3], slots: 64}
)";

std::string plan_error(const Topology &t, uint32_t job) {
    try {
        plan_tree(t, job);
    } catch (const TopologyError &e) {
        return e.what();
    }
    return "";
}

#define EXPECT_CONTAINS(msg, substr)                                                               \
    EXPECT_NE(std::string(msg).find(substr), std::string::npos)                                    \
        << "expected: " << (substr) << "\n got: '" << (msg) << "'"

std::vector<std::string> names_of_children(const TreePlan &p, const std::string &sw) {
    std::vector<std::string> out;
    for (size_t c : p.sw(sw).child_conns)
        out.push_back(p.conns[c].child);
    return out;
}

uint32_t be(const char *ip) {
    return incxdp::util::ipv4_be_or_throw(ip, "test address");
}

// ---- shape -------------------------------------------------------------------

TEST(PlanTree, Tree124RootLeavesFanInAndChildOrder) {
    const Topology t = Topology::load_file(shipped("tree124"));
    ASSERT_EQ(t.job(1).kind, JobKind::RoceTree);
    const TreePlan p = plan_tree(t, 1);
    EXPECT_EQ(p.job, 1u);
    EXPECT_EQ(p.root, "s0");
    EXPECT_EQ(p.ranks, (std::vector<std::string>{"h0", "h1", "h2", "h3"}));
    ASSERT_EQ(p.switches.size(), 3u);
    EXPECT_EQ(p.switches[0].name, "s0");
    EXPECT_TRUE(p.switches[0].root);
    EXPECT_FALSE(p.switches[0].parent_conn);
    EXPECT_EQ(p.switches[1].name, "s1");
    EXPECT_EQ(p.switches[2].name, "s2");
    EXPECT_EQ(names_of_children(p, "s0"), (std::vector<std::string>{"s1", "s2"}));
    EXPECT_EQ(names_of_children(p, "s1"), (std::vector<std::string>{"h0", "h1"}));
    EXPECT_EQ(names_of_children(p, "s2"), (std::vector<std::string>{"h2", "h3"}));
    ASSERT_EQ(p.conns.size(), 6u);

    // Parent connections: the leaves' links to the root.
    const auto &c1 = p.conns[*p.sw("s1").parent_conn];
    EXPECT_EQ(c1.child, "s1");
    EXPECT_EQ(c1.parent, "s0");
    EXPECT_EQ(c1.child_iface, "p-s0");
    EXPECT_EQ(c1.parent_iface, "p-s1");
    EXPECT_EQ(c1.child_mac, t.node("s1").ifaces[0].mac);
    EXPECT_EQ(c1.parent_mac, t.node("s0").ifaces[0].mac);
    EXPECT_EQ(c1.child_ip, "10.79.0.251");
    EXPECT_EQ(c1.parent_ip, "10.79.0.250");
    EXPECT_TRUE(c1.child_is_switch);
    EXPECT_EQ(c1.subtree_ranks, 0b0011u);
    EXPECT_EQ(p.conns[*p.sw("s2").parent_conn].subtree_ranks, 0b1100u);

    for (uint32_t r = 0; r < 4; r++) {
        SCOPED_TRACE(r);
        const auto &c = p.conn_of_rank(r);
        EXPECT_EQ(c.child, p.ranks[r]);
        EXPECT_EQ(c.parent, r < 2 ? "s1" : "s2");
        EXPECT_EQ(c.child_iface, "eth0");
        EXPECT_EQ(c.parent_iface, "p-" + p.ranks[r]);
        EXPECT_EQ(c.child_mac, t.host_iface_for(p.ranks[r], c.parent).mac);
        EXPECT_EQ(c.parent_mac, t.switch_port_for(c.parent, p.ranks[r]).mac);
        EXPECT_FALSE(c.child_is_switch);
        EXPECT_EQ(c.subtree_ranks, uint64_t{1} << r);
    }
    EXPECT_THROW(p.conn_of_rank(4), TopologyError);
    EXPECT_THROW(p.sw("h0"), TopologyError);
    for (const auto &s : p.switches) {
        EXPECT_EQ(s.pool_base, 0u);
        EXPECT_EQ(s.pool_size, 2048u);
    }
}

TEST(PlanTree, Tree1248ThreeLevels) {
    const Topology t = Topology::load_file(shipped("tree1248"));
    const TreePlan p = plan_tree(t, 1);
    EXPECT_EQ(p.root, "r");
    std::vector<std::string> order;
    for (const auto &s : p.switches)
        order.push_back(s.name);
    EXPECT_EQ(order, (std::vector<std::string>{"r", "a0", "a1", "l0", "l1", "l2", "l3"}));
    EXPECT_EQ(p.ranks.size(), 8u);
    EXPECT_EQ(p.conns.size(), 14u); // 6 switch links + 8 hosts
    for (const auto &s : p.switches)
        EXPECT_EQ(s.child_conns.size(), 2u) << s.name;
    EXPECT_EQ(names_of_children(p, "r"), (std::vector<std::string>{"a0", "a1"}));
    EXPECT_EQ(names_of_children(p, "a1"), (std::vector<std::string>{"l2", "l3"}));
    EXPECT_EQ(names_of_children(p, "l2"), (std::vector<std::string>{"h4", "h5"}));
    // h5 -> l2 -> a1 -> r, with the ranks below each link.
    EXPECT_EQ(p.conn_of_rank(5).parent, "l2");
    const auto &l2 = p.conns[*p.sw("l2").parent_conn];
    EXPECT_EQ(l2.parent, "a1");
    EXPECT_EQ(l2.subtree_ranks, 0x30u);
    const auto &a1 = p.conns[*p.sw("a1").parent_conn];
    EXPECT_EQ(a1.parent, "r");
    EXPECT_EQ(a1.subtree_ranks, 0xF0u);
    EXPECT_EQ(p.conns[*p.sw("a0").parent_conn].subtree_ranks, 0x0Fu);
    // Every child connection of a switch sits on a distinct port.
    for (const auto &s : p.switches) {
        std::set<std::string> ports;
        for (size_t c : s.child_conns)
            EXPECT_TRUE(ports.insert(p.conns[c].parent_iface).second);
    }
}

TEST(PlanTree, ChildrenFollowRankOrderNotFileOrder) {
    const Topology t =
        Topology::parse(with(kTree, "workers: [h0, h1, h2, h3]", "workers: [h3, h2, h0, h1]"));
    const TreePlan p = plan_tree(t, 1);
    EXPECT_EQ(names_of_children(p, "s0"), (std::vector<std::string>{"s2", "s1"}));
    EXPECT_EQ(names_of_children(p, "s2"), (std::vector<std::string>{"h3", "h2"}));
    EXPECT_EQ(p.switches[1].name, "s2"); // breadth-first in child order
    EXPECT_EQ(p.conns[*p.sw("s2").parent_conn].subtree_ranks, 0b0011u);
    EXPECT_EQ(p.conn_of_rank(0).child, "h3");
}

TEST(PlanTree, SwitchesWithoutWorkersAreLeftOut) {
    std::string y = with(kTree, "  - {name: s2, ip: 10.9.0.252}\n",
                         "  - {name: s2, ip: 10.9.0.252}\n  - {name: s3, ip: 10.9.0.253}\n");
    y = with(y, "  - [s2, s0]\n", "  - [s2, s0]\n  - [s3, s2]\n");
    y = with(y, "workers: [h0, h1, h2, h3]", "workers: [h0, h1]");
    const TreePlan p = plan_tree(Topology::parse(y), 1);
    ASSERT_EQ(p.switches.size(), 2u);
    EXPECT_EQ(p.switches[1].name, "s1");
    EXPECT_EQ(p.conns.size(), 3u);
    EXPECT_EQ(p.sw("s0").child_conns.size(), 1u); // fan-in 1 at the root
}

TEST(PlanTree, HostOnTheRootIsAChildOfTheRoot) {
    std::string y = with(kTree, "  - {name: h3, ip: 10.9.0.4}\n",
                         "  - {name: h3, ip: 10.9.0.4}\n  - {name: h4, ip: 10.9.0.5}\n");
    y = with(y, "  - [h3, s2]\n", "  - [h3, s2]\n  - [h4, s0]\n");
    y = with(y, "workers: [h0, h1, h2, h3]", "workers: [h0, h1, h4, h2, h3]");
    const TreePlan p = plan_tree(Topology::parse(y), 1);
    EXPECT_EQ(names_of_children(p, "s0"), (std::vector<std::string>{"s1", "h4", "s2"}));
    EXPECT_EQ(p.conn_of_rank(2).parent, "s0");
    EXPECT_FALSE(p.conn_of_rank(2).child_is_switch);
}

// ---- QPNs, PSNs, ports -----------------------------------------------------------

// Two tree jobs over the same switches and hosts, and a star job.
Topology three_jobs() {
    std::string y = with(
        kTree, "  - {id: 1, kind: roce-tree, switch: s0, workers: [h0, h1, h2, h3], slots: 64}\n",
        "  - {id: 4, switch: s1, workers: [h0, h1], slots: 128}\n"
        "  - {id: 1, kind: roce-tree, switch: s0, workers: [h0, h1, h2, h3], slots: 64}\n"
        "  - {id: 2, kind: roce-tree, switch: s0, workers: [h2, h3], slots: 32}\n");
    return Topology::parse(y);
}

TEST(PlanTree, QpnsAreUniquePerNodeAcrossJobsNonZeroAnd24Bit) {
    for (const Topology &t : {three_jobs(), Topology::load_file(shipped("tree1248"))}) {
        std::map<std::string, std::set<uint32_t>> per_node;
        std::set<uint32_t> all;
        for (const auto &j : t.jobs) {
            if (j.kind != JobKind::RoceTree)
                continue;
            const TreePlan p = plan_tree(t, j.id);
            for (size_t c = 0; c < p.conns.size(); c++) {
                const auto &rc = p.conns[c];
                SCOPED_TRACE(t.name + " job " + std::to_string(j.id) + " conn " +
                             std::to_string(c));
                EXPECT_EQ(rc.child_qpn, j.id << 16 | c << 4 | 1);
                EXPECT_EQ(rc.parent_qpn, j.id << 16 | c << 4 | 2);
                for (uint32_t q : {rc.child_qpn, rc.parent_qpn}) {
                    EXPECT_NE(q, 0u);
                    EXPECT_LT(q, 1u << 24);
                    EXPECT_TRUE(all.insert(q).second) << q;
                }
                EXPECT_TRUE(per_node[rc.child].insert(rc.child_qpn).second);
                EXPECT_TRUE(per_node[rc.parent].insert(rc.parent_qpn).second);
            }
        }
        EXPECT_GT(all.size(), 10u);
    }
}

TEST(PlanTree, PsnBasesDeriveFromStartPsnDistinctPerConnectionAndDirection) {
    const Topology t = Topology::parse(with(kTree, "slots: 64}", "slots: 64, start_psn: 1000}"));
    ASSERT_EQ(t.job(1).start_psn, 1000u);
    const TreePlan p = plan_tree(t, 1);
    std::set<uint32_t> bases;
    for (size_t c = 0; c < p.conns.size(); c++) {
        EXPECT_EQ(p.conns[c].up_base, 1000 + 16 * c);
        EXPECT_EQ(p.conns[c].down_base, 1000 + 16 * c + 8);
        EXPECT_TRUE(bases.insert(p.conns[c].up_base).second);
        EXPECT_TRUE(bases.insert(p.conns[c].down_base).second);
    }
}

TEST(PlanTree, PsnBasesNearTheWrap) {
    const Topology t =
        Topology::parse(with(kTree, "slots: 64}", "slots: 64, start_psn: 0xFFFFF0}"));
    const TreePlan p = plan_tree(t, 1);
    EXPECT_EQ(p.conns[0].up_base, 0xFFFFF0u);
    EXPECT_EQ(p.conns[0].down_base, 0xFFFFF8u);
    EXPECT_EQ(p.conns[1].up_base, 0x000000u); // wrapped
    EXPECT_EQ(p.conns[5].down_base, 0x000048u);
    std::set<uint32_t> bases;
    for (const auto &c : p.conns)
        for (uint32_t b : {c.up_base, c.down_base}) {
            EXPECT_LT(b, 1u << 24);
            EXPECT_TRUE(bases.insert(b).second);
        }
    // Every stream is at most 16 x connections away from the wrap.
    for (uint32_t b : bases)
        EXPECT_TRUE(b >= 0xFFFFF0 || b < 16 * p.conns.size()) << b;
}

TEST(PlanTree, DefaultStartPsnDependsOnTheJob) {
    const Topology t = three_jobs();
    EXPECT_FALSE(t.job(1).start_psn);
    EXPECT_EQ(plan_tree(t, 1).conns[0].up_base, 0x20000u);
    EXPECT_EQ(plan_tree(t, 2).conns[0].up_base, 0x30000u);
    EXPECT_EQ(plan_tree(t, 2).conns[0].down_base, 0x30008u);
}

TEST(PlanTree, UdpSourcePortsAreInTheRoceRangeAndDistinctPerJob) {
    const TreePlan p = plan_tree(Topology::load_file(shipped("tree1248")), 1);
    std::set<uint16_t> ports;
    for (const auto &c : p.conns) {
        EXPECT_EQ(c.child_sport, 0xC000 | (c.child_qpn & 0x3FFF));
        EXPECT_EQ(c.parent_sport, 0xC000 | (c.parent_qpn & 0x3FFF));
        EXPECT_TRUE(ports.insert(c.child_sport).second);
        EXPECT_TRUE(ports.insert(c.parent_sport).second);
    }
}

// ---- pools -------------------------------------------------------------------

TEST(PlanTree, PoolBasesStackEarlierJobsOfTheFilePerSwitch) {
    const Topology t =
        three_jobs(); // job 4 (star, s1, 128), job 1 (tree, 64), job 2 (tree s0,s2; 32)
    const TreePlan p1 = plan_tree(t, 1);
    EXPECT_EQ(p1.sw("s0").pool_base, 0u);
    EXPECT_EQ(p1.sw("s1").pool_base, 128u); // after the star job
    EXPECT_EQ(p1.sw("s2").pool_base, 0u);
    EXPECT_EQ(p1.sw("s1").pool_size, 64u);
    const TreePlan p2 = plan_tree(t, 2);
    ASSERT_EQ(p2.switches.size(), 2u); // s1 holds none of its workers
    EXPECT_EQ(p2.sw("s0").pool_base, 64u);
    EXPECT_EQ(p2.sw("s2").pool_base, 64u);
    EXPECT_EQ(p2.sw("s0").pool_size, 32u);
}

// ---- refusals ------------------------------------------------------------------

TEST(PlanTree, StarJobAndUnknownJobAreRefused) {
    const Topology t = three_jobs();
    EXPECT_CONTAINS(plan_error(t, 4), "job 4 is a star job, not a roce-tree job");
    EXPECT_CONTAINS(plan_error(Topology::load_file(shipped("star")), 1), "is a star job");
    EXPECT_CONTAINS(plan_error(t, 9), "has no job 9");
}

// The one planner (build_agg_tree) cuts cycles: the extra link s1 - s2
// carries nothing and every connection keeps the QPNs and PSNs of the tree
// without it.
TEST(PlanTree, CycleGetsASpanningTree) {
    const std::string y = with(kTree, "  - [s2, s0]\n", "  - [s2, s0]\n  - [s1, s2]\n");
    EXPECT_EQ(parse_error(y), "");
    const TreePlan cyc = plan_tree(Topology::parse(y), 1);
    const TreePlan tree = plan_tree(Topology::parse(kTree), 1);
    ASSERT_EQ(cyc.conns.size(), tree.conns.size());
    for (size_t c = 0; c < cyc.conns.size(); ++c) {
        EXPECT_EQ(cyc.conns[c].child, tree.conns[c].child);
        EXPECT_EQ(cyc.conns[c].parent, tree.conns[c].parent);
        EXPECT_EQ(cyc.conns[c].child_qpn, tree.conns[c].child_qpn);
        EXPECT_EQ(cyc.conns[c].up_base, tree.conns[c].up_base);
        EXPECT_FALSE(cyc.conns[c].child == "s2" && cyc.conns[c].parent == "s1");
        EXPECT_FALSE(cyc.conns[c].child == "s1" && cyc.conns[c].parent == "s2");
    }
}

TEST(PlanTree, UnreachableWorkerIsRefused) {
    // s2 is cut off from the root: h2 and h3 hang below nothing of the tree.
    const std::string y = with(kTree, "  - [s2, s0]\n", "");
    EXPECT_CONTAINS(parse_error(y), "worker 'h2' (rank 2) is not reachable from root 's0' "
                                    "through switch-switch links (it is linked only to 's2')");
    Topology t = Topology::parse(with(y, "workers: [h0, h1, h2, h3]", "workers: [h0, h1]"));
    t.jobs[0].workers.push_back("h3");
    EXPECT_CONTAINS(plan_error(t, 1), "worker 'h3' (rank 2) is not reachable");
}

// A worker cabled to two switches hangs below the one nearest the root,
// the first of its links on a tie (s2 here), as for every job kind.
TEST(PlanTree, WorkerBelowTwoSwitchesHangsBelowOne) {
    const std::string y = with(kTree, "  - [h3, s2]\n", "  - [h3, s2]\n  - [h3, s1]\n");
    EXPECT_EQ(parse_error(y), "");
    const TreePlan p = plan_tree(Topology::parse(y), 1);
    EXPECT_EQ(p.conn_of_rank(3).parent, "s2");
    EXPECT_EQ(names_of_children(p, "s1"), (std::vector<std::string>{"h0", "h1"}));
    const std::string y1 = with(kTree, "  - [h3, s2]\n", "  - [h3, s1]\n  - [h3, s2]\n");
    EXPECT_EQ(plan_tree(Topology::parse(y1), 1).conn_of_rank(3).parent, "s1");
}

TEST(PlanTree, SlotsMustBeAPowerOfTwo) {
    EXPECT_CONTAINS(parse_error(with(kTree, "slots: 64", "slots: 96")),
                    "jobs[0] (id 1): slots 96 is not a power of two");
    Topology t = Topology::parse(kTree);
    t.jobs[0].slots = 100;
    EXPECT_CONTAINS(plan_error(t, 1), "slots 100 is not a power of two");
    // A star job keeps any size.
    EXPECT_EQ(
        parse_error(with(with(kTree, "kind: roce-tree, switch: s0", "switch: s1"),
                         "workers: [h0, h1, h2, h3], slots: 64", "workers: [h0, h1], slots: 96")),
        "");
}

TEST(PlanTree, FanInAboveTheSlotBitmapIsRefused) {
    std::string hosts, links, workers;
    for (int i = 0; i < 33; i++) {
        hosts +=
            "  - {name: x" + std::to_string(i) + ", ip: 10.9.0." + std::to_string(10 + i) + "}\n";
        links += "  - [x" + std::to_string(i) + ", s1]\n";
        workers += std::string(i ? ", " : "") + "x" + std::to_string(i);
    }
    std::string y =
        with(kTree, "  - {name: h0, ip: 10.9.0.1}\n", "  - {name: h0, ip: 10.9.0.1}\n" + hosts);
    y = with(y, "  - [h0, s1]\n", "  - [h0, s1]\n" + links);
    y = with(y, "workers: [h0, h1, h2, h3]", "workers: [" + workers + "]");
    EXPECT_CONTAINS(parse_error(y),
                    "switch 's1' has 33 children in the tree; a switch aggregates at most 32");
}

TEST(TopologyJobs, KindAndTreeKeysAreValidated) {
    EXPECT_CONTAINS(parse_error(with(kTree, "kind: roce-tree", "kind: ring")),
                    "unknown job kind 'ring' (expected star, roce-tree or tree)");
    EXPECT_CONTAINS(parse_error(with(kTree, "slots: 64", "slots: 64, worker_port: 4000")),
                    "worker_port does not apply to a roce-tree job");
    EXPECT_CONTAINS(parse_error(with(kTree, "slots: 64", "slots: 64, start_psn: 16777216")),
                    "16777216 is out of range [0, 16777215]");
    EXPECT_CONTAINS(
        parse_error(with(with(kTree, "kind: roce-tree, switch: s0", "switch: s1, start_psn: 5"),
                         "workers: [h0, h1, h2, h3]", "workers: [h0, h1]")),
        "start_psn applies only to a roce-tree job");
    EXPECT_CONTAINS(parse_error(with(kTree, "slots: 64", "slots: 64, host_order: sloppy")),
                    "unknown host_order 'sloppy' (expected strict");
    EXPECT_CONTAINS(
        parse_error(with(with(kTree, "kind: roce-tree, switch: s0", "switch: s1, host_order: any"),
                         "workers: [h0, h1, h2, h3]", "workers: [h0, h1]")),
        "host_order applies only to a roce-tree job");
    EXPECT_EQ(Topology::parse(with(kTree, "slots: 64", "slots: 64, host_order: strict")).job(1).host_order,
              topo::HostOrder::Strict);
    EXPECT_CONTAINS(parse_error(with(kTree, "switch: s0", "switch: h0")),
                    "'h0' is a host, not a switch");
    // Star jobs keep their rule: workers directly on the switch.
    EXPECT_CONTAINS(parse_error(with(kTree, "kind: roce-tree, ", "")),
                    "worker 'h0' is not directly linked to switch 's0'");
}

TEST(TopologyJobs, ShippedStarFilesAreStarJobs) {
    for (const char *name : {"star", "twojobs"})
        for (const auto &j : Topology::load_file(shipped(name)).jobs) {
            EXPECT_EQ(j.kind, JobKind::Star) << name;
            EXPECT_FALSE(j.start_psn);
        }
}

TEST(TopologyJobs, ShippedTreesUseTheirOwnSubnetsAndMtu) {
    for (const char *name : {"tree124", "tree1248"}) {
        const Topology t = Topology::load_file(shipped(name));
        EXPECT_NE(t.subnet, "10.77.0.0/24") << name;
        EXPECT_EQ(t.mtu, 3500);
        ASSERT_EQ(t.jobs.size(), 1u);
        EXPECT_EQ(t.jobs[0].id, 1u);
        EXPECT_EQ(t.jobs[0].slots, 2048u);
    }
    EXPECT_NE(Topology::load_file(shipped("tree124")).subnet,
              Topology::load_file(shipped("tree1248")).subnet);
}

// ---- pin directories -----------------------------------------------------------------

TEST(SwitchPinDir, UnderTheRootByNamespaceName) {
    EXPECT_EQ(topo::switch_pin_dir("/sys/fs/bpf/x", "p1-", "s0"), "/sys/fs/bpf/x/p1-s0");
    EXPECT_EQ(topo::switch_pin_dir("/sys/fs/bpf/x/", "p1-", "s0"), "/sys/fs/bpf/x/p1-s0");
    const char *saved = std::getenv("INCXDP_PIN_DIR");
    const std::string keep = saved ? saved : "";
    ::setenv("INCXDP_PIN_DIR", "/sys/fs/bpf/env", 1);
    EXPECT_EQ(topo::switch_pin_dir("", "ix-", "s1"), "/sys/fs/bpf/env/ix-s1");
    ::unsetenv("INCXDP_PIN_DIR");
    EXPECT_EQ(topo::switch_pin_dir("", "ix-", "s1"), std::string(INCXDP_PIN_DIR) + "/ix-s1");
    if (saved)
        ::setenv("INCXDP_PIN_DIR", keep.c_str(), 1);
    EXPECT_THROW(topo::switch_pin_dir("", "bad/prefix", "s1"), TopologyError);
}

// ---- what each switch installs -------------------------------------------------------

TEST(CompileRules, LeafSwitchOfTree124) {
    const Topology t = Topology::load_file(shipped("tree124"));
    const TreePlan p = plan_tree(t, 1);
    const auto r = ctl::rules::compile(t, p, "s2");
    const auto &up = p.conns[*p.sw("s2").parent_conn];
    EXPECT_EQ(r.job.active, 1u);
    EXPECT_EQ(r.job.kind, static_cast<uint32_t>(INCXDP_JOB_ROCE_TREE));
    EXPECT_EQ(r.job.nworkers, 2u);
    EXPECT_EQ(r.job.pool_base, 0u);
    EXPECT_EQ(r.job.pool_size, 2048u);
    EXPECT_EQ(r.job.max_elems, uint32_t(ROCE_MAX_ELEMS));
    EXPECT_EQ(r.job.switch_ip, be("10.79.0.252"));

    ASSERT_EQ(r.conns.size(), 3u);
    const auto &par = r.conns[0];
    EXPECT_EQ(par.qpn, up.child_qpn);
    EXPECT_EQ(par.iface, "p-s0");
    EXPECT_EQ(par.peer, "s0");
    EXPECT_EQ(par.value.role, INCXDP_ROCE_PARENT);
    EXPECT_EQ(par.value.job, 1u);
    EXPECT_EQ(par.value.peer_qpn, up.parent_qpn);
    EXPECT_EQ(par.value.rx_base, up.down_base); // results come down
    EXPECT_EQ(par.value.tx_base, up.up_base);   // aggregates go up
    EXPECT_EQ(par.value.epsn, up.down_base);
    EXPECT_EQ(par.value.udp_sport, htons(up.child_sport));
    EXPECT_EQ(par.value.peer_ip, be("10.79.0.250"));
    EXPECT_EQ(par.value.own_ip, be("10.79.0.252"));
    EXPECT_EQ(topo::Mac(std::to_array(par.value.peer_mac)), up.parent_mac);
    EXPECT_EQ(topo::Mac(std::to_array(par.value.own_mac)), up.child_mac);

    for (uint16_t i = 0; i < 2; i++) {
        SCOPED_TRACE(i);
        const auto &c = r.conns[1 + i];
        const auto &rc = p.conn_of_rank(2 + i);
        EXPECT_EQ(c.qpn, rc.parent_qpn);
        EXPECT_EQ(c.iface, "p-h" + std::to_string(2 + i));
        EXPECT_EQ(c.value.role, INCXDP_ROCE_CHILD);
        EXPECT_EQ(c.value.strict, 1); // a host
        EXPECT_EQ(c.value.child, i);
        EXPECT_EQ(c.value.peer_qpn, rc.child_qpn);
        EXPECT_EQ(c.value.rx_base, rc.up_base);
        EXPECT_EQ(c.value.tx_base, rc.down_base);
        EXPECT_EQ(c.value.epsn, rc.up_base);
        EXPECT_EQ(c.value.msn, 0u);
        EXPECT_EQ(c.value.nak_sent, 0u);
        EXPECT_EQ(c.value.udp_sport, htons(rc.parent_sport));
        EXPECT_EQ(c.value.subtree_ranks, uint64_t{1} << (2 + i));
        EXPECT_EQ(c.value.ifindex, 0u); // resolved on the switch
        EXPECT_EQ(r.egress[i], std::make_pair(c.iface, c.qpn));
    }
    EXPECT_EQ(r.egress.size(), 2u);
}

TEST(CompileRules, RootTakesSwitchChildrenOutOfOrder) {
    const Topology t = Topology::load_file(shipped("tree124"));
    const auto r = ctl::rules::compile(t, plan_tree(t, 1), "s0");
    ASSERT_EQ(r.conns.size(), 2u); // no parent connection: the root
    for (const auto &c : r.conns) {
        EXPECT_EQ(c.value.role, INCXDP_ROCE_CHILD);
        EXPECT_EQ(c.value.strict, 0); // a switch cannot go back N
    }
    EXPECT_EQ(r.conns[0].value.subtree_ranks, 0b0011u);
    EXPECT_EQ(r.conns[1].value.subtree_ranks, 0b1100u);
    EXPECT_EQ(r.conns[1].value.child, 1);
}

TEST(CompileRules, HostOrderAnyTakesHostsOutOfOrderToo) {
    const std::string text = read_text(shipped("tree124"));
    const Topology strict = Topology::parse(text);
    EXPECT_EQ(strict.job(1).host_order, topo::HostOrder::Strict) << "the default: RC requesters";
    const Topology any =
        Topology::parse(with(text, "    slots: 2048", "    host_order: any\n    slots: 2048"));
    ASSERT_EQ(any.job(1).host_order, topo::HostOrder::Any);
    for (const char *sw : {"s1", "s2"}) {
        SCOPED_TRACE(sw);
        const auto s = ctl::rules::compile(strict, plan_tree(strict, 1), sw);
        const auto a = ctl::rules::compile(any, plan_tree(any, 1), sw);
        ASSERT_EQ(a.conns.size(), s.conns.size());
        for (size_t i = 0; i < a.conns.size(); i++) {
            if (a.conns[i].value.role != INCXDP_ROCE_CHILD)
                continue;
            EXPECT_EQ(s.conns[i].value.strict, 1);
            EXPECT_EQ(a.conns[i].value.strict, 0);
        }
    }
}

TEST(CompileRules, TreeJobsOfAFile) {
    const Topology t = three_jobs();
    EXPECT_EQ(ctl::rules::tree_jobs(t), (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(ctl::rules::tree_jobs(t, 2), (std::vector<uint32_t>{2}));
    EXPECT_THROW(ctl::rules::tree_jobs(t, 4), ctl::CtlError);
    EXPECT_THROW(ctl::rules::tree_jobs(t, 7), ctl::CtlError);
    EXPECT_THROW(ctl::rules::tree_jobs(Topology::load_file(shipped("star"))), ctl::CtlError);
}

TEST(CompileRules, StarJobIsNotForJobAdd) {
    EXPECT_THROW(ctl::job_from_topology(Topology::load_file(shipped("tree124")), 1), ctl::CtlError);
}

} // namespace
} // namespace incxdp
