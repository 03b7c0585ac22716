// SPDX-License-Identifier: BSD-2-Clause
// The fat-tree generator (htsim's numbering and link rules), up/down routes
// and the per-fid aggregation planner, checked against rules recomputed here
// from the topology alone.
#include <incxdp/fattree_gen.h>
#include <incxdp/fattree_plan.h>
#include <incxdp/fattree_routes.h>
#include <incxdp/topology.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace incxdp::topo;

namespace {

std::string source_file(const std::string &rel) {
    std::ifstream f(std::string(INCXDP_SOURCE_DIR) + "/" + rel);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

Topology fattree(int k, int tiers = 3) {
    FatTreeSpec s;
    s.k = k;
    s.tiers = tiers;
    return Topology::parse(generate_fattree_yaml(s));
}

std::set<std::string> peers(const Topology &t, const std::string &node) {
    std::set<std::string> p;
    for (const Iface &i : t.node(node).ifaces)
        p.insert(i.peer_node);
    return p;
}

std::string n(const char *kind, size_t i) {
    return kind + std::to_string(i);
}

std::vector<std::string> hosts_of(const Topology &t) {
    std::vector<std::string> h;
    for (const Node &x : t.nodes)
        if (x.kind == NodeKind::Host)
            h.push_back(x.name);
    return h;
}

std::string generate_error(int k, int tiers, const std::string &subnet = "10.80.0.0/16") {
    FatTreeSpec s;
    s.k = k;
    s.tiers = tiers;
    s.subnet = subnet;
    try {
        generate_fattree_yaml(s);
    } catch (const TopologyError &e) {
        return e.what();
    }
    return "";
}

} // namespace

class FatTreeGen : public ::testing::TestWithParam<int> {};

TEST_P(FatTreeGen, ThreeTiersFollowHtsimNumbering) {
    const int k = GetParam();
    const size_t half = k / 2;
    const Topology t = fattree(k);
    const FatTreeCounts c = fattree_counts(k, 3);
    EXPECT_EQ(c.hosts, size_t(k * k * k / 4));
    EXPECT_EQ(c.tors, size_t(k * k / 2));
    EXPECT_EQ(c.aggs, size_t(k * k / 2));
    EXPECT_EQ(c.cores, size_t(k * k / 4));
    EXPECT_EQ(t.nodes.size(), c.nodes());
    EXPECT_EQ(t.routing, Routing::UpDown);
    EXPECT_EQ(t.name, "fattree" + std::to_string(k));
    // Links: hosts + ToR->Agg (k/2 each) + Agg->core (k/2 each).
    EXPECT_EQ(t.links.size(), c.hosts + c.tors * half + c.aggs * half);

    const auto hosts = hosts_of(t);
    ASSERT_EQ(hosts.size(), c.hosts);
    for (size_t h = 0; h < c.hosts; ++h) {
        SCOPED_TRACE(hosts[h]);
        EXPECT_EQ(hosts[h], n("h", h)) << "host h of a .cm is the h-th host of the file";
        const Node &host = t.node(hosts[h]);
        ASSERT_EQ(host.ifaces.size(), 1u);
        EXPECT_EQ(host.ifaces[0].name, "eth0");
        EXPECT_EQ(host.ifaces[0].peer_node, n("tor", h / half));
    }
    for (size_t tor = 0; tor < c.tors; ++tor) {
        SCOPED_TRACE(n("tor", tor));
        std::set<std::string> want;
        for (size_t h = tor * half; h < (tor + 1) * half; ++h)
            want.insert(n("h", h));
        const size_t pod = tor / half;
        for (size_t j = 0; j < half; ++j)
            want.insert(n("agg", pod * half + j));
        EXPECT_EQ(peers(t, n("tor", tor)), want);
        EXPECT_EQ(t.node(n("tor", tor)).ifaces.size(), size_t(k));
    }
    for (size_t a = 0; a < c.aggs; ++a) {
        SCOPED_TRACE(n("agg", a));
        std::set<std::string> want;
        const size_t pod = a / half;
        for (size_t j = 0; j < half; ++j)
            want.insert(n("tor", pod * half + j));
        for (size_t l = 0; l < half; ++l)
            want.insert(n("core", a % half + half * l));
        EXPECT_EQ(peers(t, n("agg", a)), want);
    }
    for (size_t core = 0; core < c.cores; ++core) {
        SCOPED_TRACE(n("core", core));
        // One Agg per pod: the one at position core mod k/2.
        std::set<std::string> want;
        for (size_t pod = 0; pod < size_t(k); ++pod)
            want.insert(n("agg", pod * half + core % half));
        EXPECT_EQ(peers(t, n("core", core)), want);
    }
    const auto tiers = node_tiers(t);
    EXPECT_EQ(tiers.at("tor0"), 1);
    EXPECT_EQ(tiers.at("agg0"), 2);
    EXPECT_EQ(tiers.at("core0"), 3);
}

TEST_P(FatTreeGen, LeafSpine) {
    const int k = GetParam();
    const size_t half = k / 2;
    const Topology t = fattree(k, 2);
    EXPECT_EQ(t.name, "leafspine" + std::to_string(k));
    const auto hosts = hosts_of(t);
    ASSERT_EQ(hosts.size(), size_t(k * k / 2));
    for (size_t h = 0; h < hosts.size(); ++h)
        EXPECT_EQ(t.node(n("h", h)).ifaces.at(0).peer_node, n("tor", h / half));
    std::set<std::string> spines;
    for (size_t s = 0; s < half; ++s)
        spines.insert(n("spine", s));
    for (size_t tor = 0; tor < size_t(k); ++tor) {
        std::set<std::string> want = spines;
        for (size_t h = tor * half; h < (tor + 1) * half; ++h)
            want.insert(n("h", h));
        EXPECT_EQ(peers(t, n("tor", tor)), want) << tor;
    }
    for (size_t s = 0; s < half; ++s)
        EXPECT_EQ(peers(t, n("spine", s)).size(), size_t(k));
    EXPECT_EQ(t.nodes.size(), size_t(k * k / 2 + k + k / 2));
}

INSTANTIATE_TEST_SUITE_P(K, FatTreeGen, ::testing::Values(2, 4, 6, 8));

TEST(FatTreeGenErrors, NameTheBadOption) {
    EXPECT_NE(generate_error(3, 3).find("--k 3: the radix must be even"), std::string::npos);
    EXPECT_NE(generate_error(0, 3).find("--k 0"), std::string::npos);
    EXPECT_NE(generate_error(4, 4).find("--tiers 4"), std::string::npos);
    EXPECT_NE(generate_error(10, 3).find("375 nodes"), std::string::npos);
    EXPECT_NE(generate_error(4, 3, "10.80.0.0/24").find("bad --subnet '10.80.0.0/24'"),
              std::string::npos);
    EXPECT_NE(generate_error(4, 3, "10.80.1.0/16").find("host bits set"), std::string::npos);
    EXPECT_EQ(generate_error(20, 2), "");
    EXPECT_EQ(generate_error(4, 3, "172.20.0.0/15"), "");
}

TEST(FatTreeFiles, ShippedFilesAreTheGeneratorsOutput) {
    FatTreeSpec s;
    EXPECT_EQ(source_file("topo/topologies/fattree4.yaml"), generate_fattree_yaml(s));
    s.tiers = 2;
    EXPECT_EQ(source_file("topo/topologies/leafspine4.yaml"), generate_fattree_yaml(s));
    const Topology t =
        Topology::load_file(std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/fattree4.yaml");
    EXPECT_EQ(t.nodes.size(), 36u);
}

// ---- routes -----------------------------------------------------------------

namespace {

const SwitchRoutes &routes_of(const UpdownRoutes &r, const std::string &sw) {
    for (const SwitchRoutes &s : r.switches)
        if (s.sw == sw)
            return s;
    throw std::runtime_error("no switch " + sw);
}

// dst -> the set of "iface gateway" of its next hops.
std::map<std::string, std::set<std::string>> table(const SwitchRoutes &s) {
    std::map<std::string, std::set<std::string>> m;
    for (const Route &r : s.routes)
        for (const NextHop &h : r.via)
            m[r.dst].insert(h.iface + " " + h.gateway);
    return m;
}

} // namespace

TEST(FatTreeRoutes, UpDownAsHtsimRoutes) {
    const Topology t = fattree(4);
    const UpdownRoutes r = updown_routes(t);
    auto ip = [&](const std::string &node) { return t.node(node).ip; };

    // ToR: its hosts down through their port, the rest up over both Aggs.
    const auto tor0 = table(routes_of(r, "tor0"));
    EXPECT_EQ(tor0.size(), 3u);
    EXPECT_EQ(tor0.at(ip("h0") + "/32"), std::set<std::string>{"p-h0 "});
    EXPECT_EQ(tor0.at(ip("h1") + "/32"), std::set<std::string>{"p-h1 "});
    EXPECT_EQ(tor0.at("10.80.0.0/16"),
              (std::set<std::string>{"p-agg0 " + ip("agg0"), "p-agg1 " + ip("agg1")}));

    // Agg: the hosts of its pod via their ToR, the rest up over its cores.
    const auto agg1 = table(routes_of(r, "agg1"));
    EXPECT_EQ(agg1.size(), 5u);
    EXPECT_EQ(agg1.at(ip("h3") + "/32"), std::set<std::string>{"p-tor1 " + ip("tor1")});
    EXPECT_EQ(agg1.at("10.80.0.0/16"),
              (std::set<std::string>{"p-core1 " + ip("core1"), "p-core3 " + ip("core3")}));

    // Core: every host, down to the Agg of its pod it is linked to; no up route.
    for (const char *core : {"core0", "core1", "core2", "core3"}) {
        const auto tab = table(routes_of(r, core));
        EXPECT_EQ(tab.size(), 16u) << core;
        EXPECT_EQ(tab.count("10.80.0.0/16"), 0u) << core;
    }
    EXPECT_EQ(table(routes_of(r, "core2")).at(ip("h15") + "/32"),
              std::set<std::string>{"p-agg6 " + ip("agg6")});
    EXPECT_EQ(table(routes_of(r, "core3")).at(ip("h5") + "/32"),
              std::set<std::string>{"p-agg3 " + ip("agg3")});

    // Every port has a permanent neighbour: the peer's address and MAC.
    const SwitchRoutes &agg0 = routes_of(r, "agg0");
    ASSERT_EQ(agg0.neighbours.size(), 4u);
    EXPECT_EQ(agg0.neighbours[0].iface, "p-tor0");
    EXPECT_EQ(agg0.neighbours[0].ip, ip("tor0"));
    EXPECT_EQ(agg0.neighbours[0].mac, mac_to_string(t.node("tor0").ifaces.at(2).mac));

    ASSERT_EQ(r.hosts.size(), 16u);
    EXPECT_EQ(r.hosts[5].host, "h5");
    EXPECT_EQ(r.hosts[5].gateway, ip("tor2"));
    EXPECT_EQ(r.hosts[5].iface, "eth0");
}

TEST(FatTreeRoutes, LeafSpineSpinesRouteEveryHostDown) {
    const UpdownRoutes r = updown_routes(fattree(4, 2));
    EXPECT_EQ(routes_of(r, "spine1").routes.size(), 8u);
    EXPECT_EQ(table(routes_of(r, "tor3")).at("10.80.0.0/16").size(), 2u);
}

TEST(FatTreeRoutes, ParseRejectsWhatCannotRoute) {
    // Two switches, no link between them: sw0 cannot reach h1.
    const std::string two = R"(name: t
subnet: 10.9.0.0/24
routing: updown
switches:
  - {name: sw0, ip: 10.9.0.250}
  - {name: sw1, ip: 10.9.0.251}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
links:
  - [h0, sw0]
  - [h1, sw1]
)";
    try {
        Topology::parse(two);
        ADD_FAILURE() << "parsed";
    } catch (const TopologyError &e) {
        EXPECT_NE(std::string(e.what()).find("<topology>:3:10: routing: "), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("switch 'sw0' has no link to a higher tier, yet host "
                                             "'h1' is not below it"),
                  std::string::npos)
            << e.what();
    }
    std::string bad = two;
    bad.replace(bad.find("updown"), 6, "ospf");
    try {
        Topology::parse(bad);
        ADD_FAILURE() << "parsed";
    } catch (const TopologyError &e) {
        EXPECT_NE(std::string(e.what()).find("unknown routing 'ospf' (expected updown)"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(
        Topology::load_file(std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml").routing,
        Routing::None);
}

// ---- planner ----------------------------------------------------------------

namespace {

// Every structural rule of a plan, recomputed from the plan and the topology.
void check_plan(const Topology &t, const AggPlan &p, const std::set<std::string> &contrib,
                const std::set<std::string> &members) {
    SCOPED_TRACE("fid " + std::to_string(p.fid));
    std::map<std::string, const PlanSwitch *> sw;
    for (const PlanSwitch &s : p.switches) {
        EXPECT_EQ(t.node(s.name).kind, NodeKind::Switch) << s.name;
        EXPECT_TRUE(sw.emplace(s.name, &s).second) << "switch " << s.name << " twice";
    }
    ASSERT_TRUE(sw.count(p.root));
    EXPECT_EQ(p.switches.front().name, p.root);
    EXPECT_FALSE(sw.at(p.root)->parent.has_value());
    EXPECT_EQ(sw.at(p.root)->level, 0);

    // Connected tree: each switch's parent is in the plan, linked to it, one
    // level up, and lists it as a child; walking up always ends at the root.
    std::map<std::string, int> host_seen;
    for (const PlanSwitch &s : p.switches) {
        for (const std::string &c : s.children) {
            if (t.node(c).kind == NodeKind::Host) {
                ++host_seen[c];
                EXPECT_EQ(p.leaf.at(c), s.name);
                EXPECT_TRUE(peers(t, s.name).count(c)) << c << " not linked to " << s.name;
            } else {
                ASSERT_TRUE(sw.count(c)) << c;
                EXPECT_EQ(sw.at(c)->parent.value_or(""), s.name);
            }
        }
        if (s.name == p.root)
            continue;
        ASSERT_TRUE(s.parent && sw.count(*s.parent)) << s.name;
        const PlanSwitch &par = *sw.at(*s.parent);
        EXPECT_EQ(s.level, par.level + 1) << s.name;
        EXPECT_TRUE(peers(t, s.name).count(par.name));
        EXPECT_EQ(std::count(par.children.begin(), par.children.end(), s.name), 1);
        std::string at = s.name;
        for (size_t hops = 0; at != p.root; ++hops) {
            ASSERT_LT(hops, p.switches.size()) << "cycle above " << s.name;
            at = *sw.at(at)->parent;
        }
    }
    // Every member covered exactly once, nothing else.
    EXPECT_EQ(host_seen.size(), members.size());
    for (const std::string &h : members)
        EXPECT_EQ(host_seen[h], 1) << h;

    // Expected counts from contributor sets recomputed bottom-up.
    std::map<std::string, std::set<std::string>> under;
    for (auto it = p.switches.rbegin(); it != p.switches.rend(); ++it) {
        auto &u = under[it->name];
        for (const std::string &c : it->children) {
            if (contrib.count(c))
                u.insert(c);
            else if (sw.count(c))
                u.insert(under[c].begin(), under[c].end());
        }
    }
    uint32_t leaves_total = 0;
    for (const PlanSwitch &s : p.switches) {
        uint32_t want = 0, host_contrib = 0;
        for (const std::string &c : s.children) {
            const bool host = t.node(c).kind == NodeKind::Host;
            if (host ? contrib.count(c) > 0 : !under[c].empty())
                ++want;
            if (host && contrib.count(c))
                ++host_contrib;
        }
        EXPECT_EQ(s.expected, want) << s.name;
        EXPECT_EQ(s.contributors_below, under[s.name].size()) << s.name;
        EXPECT_GT(s.contributors_below + s.children.size(), 0u) << s.name << " is empty";
        leaves_total += host_contrib;
    }
    EXPECT_EQ(leaves_total, contrib.size());
    EXPECT_EQ(sw.at(p.root)->contributors_below, contrib.size());
    EXPECT_EQ(p.contributors.size(), contrib.size());
}

AggJob job_of(uint32_t fid, const std::set<std::string> &contrib,
              const std::set<std::string> &recv = {}) {
    return {fid, {contrib.begin(), contrib.end()}, {recv.begin(), recv.end()}};
}

} // namespace

class FatTreePlan : public ::testing::TestWithParam<int> {};

TEST_P(FatTreePlan, AllHostsOneJob) {
    const int k = GetParam();
    const Topology t = fattree(k);
    const auto hosts = hosts_of(t);
    const std::set<std::string> all(hosts.begin(), hosts.end());
    const auto plans = plan_agg_jobs(t, {job_of(7, all)});
    ASSERT_EQ(plans.size(), 1u);
    const AggPlan &p = plans[0];
    check_plan(t, p, all, all);
    EXPECT_EQ(p.root, "core0");
    // Hierarchical counts: a core waits for k pods, an Agg for k/2 ToRs, a
    // ToR for k/2 hosts; never N-1.
    EXPECT_EQ(p.sw("core0").expected, uint32_t(k));
    EXPECT_EQ(p.sw("agg0").expected, uint32_t(k / 2));
    EXPECT_EQ(p.sw("tor0").expected, uint32_t(k / 2));
    EXPECT_EQ(p.switches.size(), size_t(1 + k + k * k / 2));
    EXPECT_EQ(p.sw("tor0").level, 2);
}

TEST_P(FatTreePlan, PartialParticipationPicksTheLowestRoot) {
    const int k = GetParam();
    const size_t half = k / 2, per_pod = size_t(k) * k / 4;
    const Topology t = fattree(k);
    const auto hosts = hosts_of(t);
    std::mt19937 rng(1234 + k);
    std::vector<AggJob> jobs;
    std::vector<std::set<std::string>> contribs, members;
    // Under one ToR (the last one): root is that ToR.
    jobs.push_back(job_of(1, {n("h", hosts.size() - 1)}, {n("h", hosts.size() - half)}));
    // Within pod 1, two ToRs: root an Agg of pod 1.
    jobs.push_back(job_of(2, {n("h", per_pod), n("h", per_pod + half)}));
    // Random subsets across pods, receivers beyond the contributors.
    for (uint32_t fid = 3; fid < 9; ++fid) {
        std::set<std::string> c, r;
        for (const auto &h : hosts) {
            if (rng() % 3 == 0)
                c.insert(h);
            else if (rng() % 4 == 0)
                r.insert(h);
        }
        c.insert("h0");
        c.insert(hosts.back());
        jobs.push_back(job_of(fid, c, r));
    }
    const auto plans = plan_agg_jobs(t, jobs);
    ASSERT_EQ(plans.size(), jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
        std::set<std::string> c(jobs[i].contributors.begin(), jobs[i].contributors.end());
        std::set<std::string> m = c;
        m.insert(jobs[i].receivers.begin(), jobs[i].receivers.end());
        check_plan(t, plans[i], c, m);
    }
    EXPECT_EQ(plans[0].root, n("tor", k * k / 2 - 1));
    EXPECT_EQ(plans[0].switches.size(), 1u);
    EXPECT_EQ(plans[0].sw(plans[0].root).expected, 1u); // the receiver contributes nothing
    EXPECT_EQ(plans[1].root, n("agg", half));           // pod 1, least loaded, first
    EXPECT_EQ(plans[1].sw(plans[1].root).expected, 2u);
    for (size_t i = 2; i < plans.size(); ++i) {
        EXPECT_EQ(plans[i].sw(plans[i].root).tier, 3) << "fid " << plans[i].fid;
        EXPECT_EQ(plans[i].root, n("core", (i - 2) % (k * k / 4)));
    }
}

TEST_P(FatTreePlan, JobsSpreadOverCores) {
    const int k = GetParam();
    const Topology t = fattree(k);
    const size_t cores = size_t(k) * k / 4, per_pod = cores;
    std::vector<AggJob> jobs;
    // Each job: one host in pod 0 and one in the last pod, different hosts.
    for (uint32_t j = 0; j < cores; ++j)
        jobs.push_back(
            job_of(100 + j, {n("h", j % per_pod), n("h", (k - 1) * per_pod + j % per_pod)}));
    auto plans = plan_agg_jobs(t, jobs);
    std::set<std::string> roots;
    for (const auto &p : plans) {
        EXPECT_EQ(p.sw(p.root).tier, 3);
        roots.insert(p.root);
        // Only the pods with members: core, 2 Aggs, 2 ToRs.
        EXPECT_EQ(p.switches.size(), 5u);
        EXPECT_EQ(p.sw(p.root).expected, 2u);
    }
    EXPECT_EQ(roots.size(), cores) << "k^2/4 jobs on k^2/4 distinct cores";
    // One more job goes to the first core again.
    jobs.push_back(job_of(999, {"h0", n("h", k * k * k / 4 - 1)}));
    plans = plan_agg_jobs(t, jobs);
    EXPECT_EQ(plans.back().root, "core0");
    // Single-pod jobs spread over the pod's Aggs.
    std::vector<AggJob> pod;
    for (uint32_t j = 0; j < uint32_t(k / 2); ++j)
        pod.push_back(job_of(j + 1, {"h0", n("h", k / 2)}));
    std::set<std::string> aggs;
    for (const auto &p : plan_agg_jobs(t, pod))
        aggs.insert(p.root);
    EXPECT_EQ(aggs.size(), size_t(k / 2));
}

INSTANTIATE_TEST_SUITE_P(K, FatTreePlan, ::testing::Values(4, 6, 8));

TEST(AggPlanGeneric, LeafSpineAndTrees) {
    const Topology ls = fattree(4, 2);
    const auto p = plan_agg_jobs(ls, {job_of(1, {"h0", "h7"}), job_of(2, {"h1", "h6"})});
    EXPECT_EQ(p[0].root, "spine0");
    EXPECT_EQ(p[1].root, "spine1");
    check_plan(ls, p[0], {"h0", "h7"}, {"h0", "h7"});

    // tree124: the generic rule finds the one root with every host below.
    const Topology tree =
        Topology::load_file(std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/tree124.yaml");
    const std::set<std::string> all{"h0", "h1", "h2", "h3"};
    const auto tp = plan_agg_jobs(tree, {job_of(1, all), job_of(2, {"h2", "h3"})});
    EXPECT_EQ(tp[0].root, "s0");
    EXPECT_EQ(tp[0].sw("s0").expected, 2u);
    EXPECT_EQ(tp[1].root, "s2");
    check_plan(tree, tp[0], all, all);

    // A ring of switches has no tiers to go by: breadth-first from any root
    // still gives a tree, and the root chosen is nearest every member.
    const std::string ring = R"(name: ring
subnet: 10.9.0.0/24
switches:
  - {name: s0, ip: 10.9.0.250}
  - {name: s1, ip: 10.9.0.251}
  - {name: s2, ip: 10.9.0.252}
  - {name: s3, ip: 10.9.0.253}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
  - {name: h2, ip: 10.9.0.3}
links:
  - [s0, s1]
  - [s1, s2]
  - [s2, s3]
  - [s3, s0]
  - [h0, s0]
  - [h1, s1]
  - [h2, s2]
)";
    const Topology rt = Topology::parse(ring);
    const auto rp = plan_agg_jobs(rt, {job_of(1, {"h0", "h2"}), job_of(2, {"h0", "h1", "h2"})});
    EXPECT_EQ(rp[0].root, "s3"); // tier 2: h0 and h2 both below it
    check_plan(rt, rp[0], {"h0", "h2"}, {"h0", "h2"});
    EXPECT_EQ(rp[1].root, "s1"); // none has all below: the one nearest s0, s1, s2
    check_plan(rt, rp[1], {"h0", "h1", "h2"}, {"h0", "h1", "h2"});
    const AggPlan from_s0 = build_agg_tree(rt, "s0", job_of(1, {"h0", "h1", "h2"}));
    check_plan(rt, from_s0, {"h0", "h1", "h2"}, {"h0", "h1", "h2"});
    EXPECT_EQ(from_s0.sw("s2").parent.value_or(""), "s1"); // first discovery wins
}

TEST(AggPlanGeneric, Errors) {
    const Topology t = fattree(4);
    auto err = [&](const AggJob &j, const std::string &root = "") {
        try {
            if (root.empty())
                plan_agg_jobs(t, {j});
            else
                build_agg_tree(t, root, j);
        } catch (const TopologyError &e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(err(job_of(3, {"h99"})).find("plan fid 3: contributor 'h99' is not a node"),
              std::string::npos);
    EXPECT_NE(err(job_of(3, {"tor0"})).find("'tor0' is a switch, not a host"), std::string::npos);
    EXPECT_NE(err(job_of(3, {}, {"h1"})).find("no contributing host"), std::string::npos);
    EXPECT_NE(err(job_of(3, {"h1"}), "h0").find("root 'h0' is not a switch"), std::string::npos);
}
