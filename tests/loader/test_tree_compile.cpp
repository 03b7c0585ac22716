// SPDX-License-Identifier: BSD-2-Clause
// Native UDP trees, compile step without a kernel: every switch's entries
// for tree124 (the shipped tree job) and for fattree4 (all 16 hosts, and a
// job of one pod), checked against the contract of maps.h: fan-ins that add
// up to the ranks, every rank and every child switch registered exactly once
// where its parent is, bits distinct and below the fan-in, parents and
// children that agree, source ports unique per (switch, job). Also the
// topology's tree kind, explicit link names/MACs, and the refusals.
#include "../common/yaml_edit.h"

#include <incxdp/apply_ctl.h>
#include <incxdp/fattree_plan.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

namespace incxdp {
namespace {

namespace apply = ctl::apply;
using test::read_text;
using test::with;
using topo::Topology;

std::string shipped(const char *name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

topo::Mac mac(const uint8_t *p) {
    topo::Mac m{};
    std::memcpy(m.data(), p, 6);
    return m;
}

// The contract's invariants over a compiled job.
void check_invariants(const Topology &t, const apply::CompiledJob &c, uint16_t worker_port) {
    const uint32_t n = static_cast<uint32_t>(c.ranks.size());
    std::map<std::string, int> registered; // child node -> times it is some switch's worker
    std::map<std::string, std::string> parent_of;
    std::map<std::string, uint16_t> rank_of;
    for (uint32_t r = 0; r < n; ++r)
        rank_of[c.ranks[r]] = static_cast<uint16_t>(r);
    uint32_t roots = 0, leaf_fanin = 0;
    for (const auto &e : c.switches) {
        SCOPED_TRACE("switch " + e.sw);
        EXPECT_EQ(e.job.active, 1u);
        EXPECT_EQ(e.job.kind, uint32_t{INCXDP_JOB_STAR});
        EXPECT_EQ(e.job.nworkers, n);
        EXPECT_EQ(e.job.switch_ip, util::ipv4_be_or_throw(t.node(e.sw).ip, "node ip"));
        EXPECT_EQ(e.job.fanin, e.workers.size());
        EXPECT_EQ(e.egress.size(), e.workers.size());
        std::set<uint16_t> bits;
        std::set<std::pair<std::string, uint16_t>> src; // (ip, port) of senders here
        for (size_t i = 0; i < e.workers.size(); ++i) {
            const auto &w = e.workers[i];
            const uint16_t bit = w.value.child & INCXDP_CHILD_BIT_MASK;
            EXPECT_LT(bit, e.job.fanin);
            EXPECT_TRUE(bits.insert(bit).second) << "bit " << bit << " twice";
            EXPECT_EQ(w.value.job, c.id);
            EXPECT_EQ(w.value.ifindex, 0u) << "ifindex is the running switch's";
            EXPECT_EQ((w.value.child & INCXDP_CHILD_SWITCH) != 0, w.is_switch);
            registered[w.peer]++;
            parent_of[w.peer] = e.sw;
            const topo::Iface &theirs = [&]() -> const topo::Iface & {
                for (const auto &f : t.node(w.peer).ifaces)
                    if (f.peer_node == e.sw)
                        return f;
                throw std::runtime_error("no link");
            }();
            EXPECT_EQ(mac(w.key.mac), theirs.mac);
            EXPECT_EQ(w.key.ip, util::ipv4_be_or_throw(t.node(w.peer).ip, "node ip"));
            EXPECT_EQ(w.iface, theirs.peer_iface);
            EXPECT_TRUE(src.insert({w.peer, ntohs(w.key.port)}).second);
            if (w.is_switch) {
                EXPECT_EQ(ntohs(w.key.port), apply::partial_src_port(c.id));
                EXPECT_EQ(ntohs(e.egress[i].value.dst_port), INCXDP_UDP_PORT);
            } else {
                ++leaf_fanin;
                EXPECT_EQ(w.value.rank, rank_of.at(w.peer));
                EXPECT_EQ(ntohs(w.key.port), worker_port);
                EXPECT_EQ(ntohs(e.egress[i].value.dst_port), worker_port);
            }
            EXPECT_EQ(e.egress[i].iface, w.iface);
            EXPECT_EQ(mac(e.egress[i].value.dst_mac), mac(w.key.mac));
            for (const auto &f : t.node(e.sw).ifaces) {
                if (f.peer_node == w.peer) {
                    EXPECT_EQ(mac(e.egress[i].value.src_mac), f.mac);
                }
            }
            EXPECT_EQ(e.egress[i].value.src_ip, e.job.switch_ip);
        }
        if (e.root) {
            ++roots;
            EXPECT_EQ(e.sw, c.root);
            EXPECT_TRUE(e.parent_iface.empty());
        } else {
            EXPECT_EQ(ntohs(e.parent.src_port), apply::partial_src_port(c.id));
            EXPECT_EQ(ntohs(e.parent.dst_port), INCXDP_UDP_PORT);
            EXPECT_EQ(e.parent.src_ip, e.job.switch_ip);
            EXPECT_EQ(e.parent.dst_ip, util::ipv4_be_or_throw(t.node(e.parent_node).ip, "node ip"));
        }
    }
    EXPECT_EQ(roots, 1u);
    // Every rank hangs below exactly one switch, every non-root switch too.
    EXPECT_EQ(leaf_fanin, n);
    for (const auto &r : c.ranks)
        EXPECT_EQ(registered[r], 1) << r;
    for (const auto &e : c.switches) {
        if (e.root) {
            EXPECT_EQ(registered.count(e.sw), 0u);
            continue;
        }
        EXPECT_EQ(registered[e.sw], 1) << e.sw;
        // Parent and child agree: the parent knows us by what we send from.
        EXPECT_EQ(parent_of.at(e.sw), e.parent_node);
        const auto &p = c.sw(e.parent_node);
        bool found = false;
        for (const auto &w : p.workers)
            if (w.peer == e.sw) {
                found = true;
                EXPECT_EQ(mac(w.key.mac), mac(e.parent.src_mac));
                EXPECT_EQ(w.key.ip, e.parent.src_ip);
                EXPECT_EQ(w.key.port, e.parent.src_port);
                EXPECT_EQ(w.value.rank, e.parent.rank);
            }
        EXPECT_TRUE(found) << e.sw << " not in its parent's workers";
    }
    // Fan-ins add up: leaves' host children plus one per child switch.
    uint32_t total = 0;
    for (const auto &e : c.switches)
        total += e.job.fanin;
    EXPECT_EQ(total, n + c.switches.size() - 1);
}

TEST(TreeCompile, Tree124) {
    const Topology t = Topology::load_file(shipped("tree124_udp"));
    ASSERT_EQ(t.job(1).kind, topo::JobKind::Tree);
    const auto c = apply::compile_tree(t, 1);
    ASSERT_EQ(c.switches.size(), 3u);
    EXPECT_EQ(c.root, "s0");
    EXPECT_EQ(c.switches[0].sw, "s0");
    EXPECT_EQ(c.sw("s0").job.fanin, 2u);
    EXPECT_EQ(c.sw("s1").job.fanin, 2u);
    // s2 writes the lowest rank below it (h2 = rank 2) into its partials.
    EXPECT_EQ(c.sw("s2").parent.rank, 2u);
    EXPECT_EQ(c.sw("s1").parent.rank, 0u);
    EXPECT_EQ(c.sw("s1").parent_iface, "p-s0");
    check_invariants(t, c, 4000);
}

TEST(TreeCompile, Fattree4AllHostsAndOnePod) {
    const Topology t = Topology::load_file(shipped("fattree4"));
    std::vector<std::string> all;
    for (int h = 0; h < 16; ++h)
        all.push_back("h" + std::to_string(15 - h)); // ranks not in file order
    for (const auto &hosts : {all, std::vector<std::string>{"h1", "h0", "h3", "h2"}}) {
        SCOPED_TRACE(hosts.size());
        const auto plans = topo::plan_agg_jobs(t, {{7, hosts, hosts}});
        apply::TreeJobSpec spec;
        spec.id = 7;
        spec.contributors = hosts;
        spec.receivers = hosts;
        spec.worker_port = 4100;
        const auto c = apply::compile_tree(t, spec, plans.at(0));
        EXPECT_EQ(c.ranks, hosts);
        check_invariants(t, c, 4100);
        if (hosts.size() == 16) {
            EXPECT_EQ(c.root.rfind("core", 0), 0u) << c.root;
            EXPECT_EQ(c.sw(c.root).job.fanin, 4u); // one Agg per pod
        } else {
            EXPECT_EQ(c.root.rfind("agg", 0), 0u) << c.root;
        }
    }
}

TEST(TreeCompile, Refusals) {
    const Topology t = Topology::load_file(shipped("tree124_udp"));
    const auto plan =
        topo::build_agg_tree(t, "s0", {1, {"h0", "h1", "h2"}, {"h0", "h1", "h2", "h3"}});
    apply::TreeJobSpec spec;
    spec.id = 1;
    spec.contributors = {"h0", "h1", "h2"};
    spec.receivers = {"h0", "h1", "h2", "h3"};
    try {
        apply::compile_tree(t, spec, plan);
        ADD_FAILURE() << "a receive-only host was accepted";
    } catch (const ctl::CtlError &e) {
        EXPECT_NE(std::string(e.what()).find("'h3' receives the result but contributes nothing"),
                  std::string::npos)
            << e.what();
    }
    spec.receivers = spec.contributors;
    spec.slots = 0;
    EXPECT_THROW(apply::compile_tree(t, spec, plan), ctl::CtlError);
    // Not a tree job.
    const Topology star = Topology::load_file(shipped("star"));
    EXPECT_THROW(apply::compile_tree(star, 1), ctl::CtlError);
}

// A star is the tree of one switch: `apply` of a star job compiles to the
// entries `job add` compiles from the same file (compile_star), fanin 0 and
// bit = rank; only the ports' MACs come from the file (job add takes them
// from the ports). A tree job whose workers all hang below its root is the
// same star.
TEST(TreeCompile, StarIsTheOneSwitchTree) {
    const Topology t = Topology::load_file(shipped("star"));
    const auto c = apply::compile_job(t, 1);
    ASSERT_EQ(c.switches.size(), 1u);
    const auto &e = c.switches[0];
    const auto s = apply::compile_star(ctl::job_from_topology(t, 1), "sw");
    EXPECT_EQ(e.sw, "sw");
    EXPECT_TRUE(e.root);
    EXPECT_EQ(std::memcmp(&e.job, &s.job, sizeof e.job), 0);
    EXPECT_EQ(e.job.fanin, 0u);
    EXPECT_EQ(e.job.nworkers, 4u);
    EXPECT_EQ(e.job.pool_size, 128u);
    EXPECT_EQ(std::memcmp(&e.parent, &s.parent, sizeof e.parent), 0);
    ASSERT_EQ(e.workers.size(), 4u);
    ASSERT_EQ(s.workers.size(), 4u);
    ASSERT_EQ(e.egress.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(e.workers[i].iface, s.workers[i].iface);
        EXPECT_EQ(std::memcmp(&e.workers[i].key, &s.workers[i].key, sizeof(incxdp_worker_key)), 0);
        EXPECT_EQ(std::memcmp(&e.workers[i].value, &s.workers[i].value, sizeof(incxdp_worker)), 0);
        EXPECT_EQ(e.workers[i].value.rank, i);
        EXPECT_EQ(e.workers[i].value.child, 0u);
        EXPECT_EQ(e.workers[i].peer, t.job(1).workers[i]);
        incxdp_egress a = e.egress[i].value, b = s.egress[i].value;
        EXPECT_EQ(mac(a.src_mac), t.switch_port_for("sw", t.job(1).workers[i]).mac);
        EXPECT_EQ(mac(b.src_mac), topo::Mac{}) << "job add: the port's own, at apply";
        std::memset(a.src_mac, 0, 6);
        EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
        EXPECT_EQ(e.egress[i].iface, s.egress[i].iface);
        ASSERT_TRUE(e.ports[i].mac);
        EXPECT_FALSE(s.ports[i].mac);
    }
    // The same job as `kind: tree`: the one-switch plan is the star.
    const Topology tt = Topology::parse(
        with(read_text(shipped("star")), "  - id: 1\n", "  - id: 1\n    kind: tree\n"));
    const auto ct = apply::compile_job(tt, 1);
    ASSERT_EQ(ct.switches.size(), 1u);
    EXPECT_EQ(std::memcmp(&ct.switches[0].job, &e.job, sizeof e.job), 0);
    // What job add refuses, compile_star refuses with its messages.
    ctl::JobSpec bad = ctl::job_from_topology(t, 1);
    bad.workers[1].iface = bad.workers[0].iface;
    try {
        apply::compile_star(bad);
        ADD_FAILURE() << "two workers behind one port were accepted";
    } catch (const ctl::CtlError &err) {
        EXPECT_NE(std::string(err.what()).find("one worker per port"), std::string::npos)
            << err.what();
    }
    bad = ctl::job_from_topology(t, 1);
    bad.workers[3].rank = 0;
    EXPECT_THROW(apply::compile_star(bad), ctl::CtlError);
}

TEST(TreeTopology, KindTreeParsesAndChecks) {
    const std::string base = read_text(shipped("tree124_udp"));
    const Topology t = Topology::parse(base);
    EXPECT_STREQ(topo::job_kind_name(t.job(1).kind), "tree");
    // A worker no switch of the tree reaches.
    const std::string cut = with(base, "  - [s2, s0]\n", "");
    const std::string err = test::parse_error(cut);
    EXPECT_NE(err.find("jobs[0]"), std::string::npos) << err;
    EXPECT_NE(err.find("reachable"), std::string::npos) << err;
    EXPECT_NE(
        test::parse_error(with(base, "kind: tree", "kind: trees")).find("star, roce-tree or tree"),
        std::string::npos);
}

TEST(TreeTopology, ExplicitLinkNamesAndMacs) {
    const Topology t = Topology::load_file(shipped("tree124_real"));
    EXPECT_EQ(t.switch_port_for("s1", "h0").name, "swp1");
    EXPECT_EQ(topo::mac_to_string(t.switch_port_for("s1", "h0").mac), "0a:00:00:01:00:11");
    EXPECT_EQ(t.host_iface_for("h0", "s1").name, "enp1s0");
    EXPECT_EQ(t.host_iface_for("h0", "s1").peer_iface, "swp1");
    const auto c = apply::compile_tree(t, 1);
    EXPECT_EQ(c.sw("s1").parent_iface, "uplink0");
    EXPECT_EQ(topo::mac_to_string(mac(c.sw("s1").parent.dst_mac)), "0a:00:00:00:00:01");
    check_invariants(t, c, 4000);
    const std::string base = read_text(shipped("tree124_real"));
    EXPECT_NE(test::parse_error(
                  with(base, "b_mac: \"0a:00:00:01:00:12\"", "b_mac: \"0a:00:00:01:00:11\""))
                  .find("duplicate MAC"),
              std::string::npos);
    EXPECT_NE(test::parse_error(with(base, "b_iface: swp2, b_mac: \"0a:00:00:01:00:12\"",
                                     "b_iface: swp1, b_mac: \"0a:00:00:01:00:12\""))
                  .find("used twice"),
              std::string::npos);
    EXPECT_NE(test::parse_error(with(base, "a_iface: enp1s0", "a_ifce: enp1s0")).find("a_ifce"),
              std::string::npos);
}

} // namespace
} // namespace incxdp
