// SPDX-License-Identifier: BSD-2-Clause
// `incxdp mesh run` on ring4 and line4 brought up as namespaces: one daemon
// per node, no controller. Every node must learn a route to every other with
// the hop counts and next hops BFS gives on the YAML's graph (ring4: 2-hop
// peers both ways; line4: end to end 3 hops), then follow a ring link going
// down and coming back. Needs root.
#include "../common/mesh_cluster.h"

#include "mesh_graph.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <map>
#include <optional>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

using namespace incxdp;
using nlohmann::json;
namespace proc = incxdp::topo::detail;
using Clock = std::chrono::steady_clock;

const std::string kTopoDir = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/";

// What every node should see: dst id -> {hops, first-hop ids}.
using Expected = std::map<mesh::NodeId, std::pair<uint32_t, std::set<mesh::NodeId>>>;

class MeshNetns : public ::testing::Test {
  protected:
    test::MeshCluster c_;
    const topo::Topology &t_ = c_.t;
    std::map<std::string, mesh::NodeId> ids_;

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
    }

    // Daemons started; the tests wait for the routes they expect themselves.
    void bring_up(const std::string &name, const std::string &tag) {
        c_.bring_up(name, tag, {"--mode", INCXDP_E2E_MODE}, false);
        ASSERT_EQ(c_.error, "");
        for (const topo::Node &n : t_.nodes) {
            std::vector<uint32_t> addrs;
            for (const topo::Iface &i : n.ifaces)
                addrs.push_back(mesh::parse_ip(i.ip));
            ids_[n.name] = mesh::node_id(addrs);
        }
    }

    std::string ns(const std::string &node) const { return c_.ns(node); }
    std::string pin_dir(const std::string &node) const { return c_.pin(node); }
    std::string daemon_log(const std::string &node) const { return c_.daemon_log(node); }
    json show(const std::string &node) const { return c_.show(node); }

    // BFS on the YAML's graph minus `cut` links, from every node.
    std::map<std::string, Expected>
    expected(const std::set<std::pair<std::string, std::string>> &cut = {}) const {
        mesh::Graph g;
        for (const topo::Node &n : t_.nodes)
            g.add_node(ids_.at(n.name));
        for (const topo::Link &l : t_.links)
            if (!cut.count({l.a, l.b}) && !cut.count({l.b, l.a}))
                g.add_edge(ids_.at(l.a), ids_.at(l.b));
        std::map<std::string, Expected> out;
        for (const topo::Node &n : t_.nodes)
            for (const auto &[dst, r] : mesh::compute_routes(g, ids_.at(n.name), 4).routes)
                out[n.name][dst] = {
                    r.hops, std::set<mesh::NodeId>(r.first_hops.begin(), r.first_hops.end())};
        return out;
    }

    static Expected seen(const json &s) {
        Expected e;
        if (!s.is_object() || !s.contains("routes"))
            return e;
        for (const auto &r : s.at("routes")) {
            std::set<mesh::NodeId> nh;
            for (const auto &h : r.at("next_hops"))
                nh.insert(std::stoul(h.at("node").get<std::string>(), nullptr, 16));
            e[std::stoul(r.at("dst").get<std::string>(), nullptr, 16)] = {
                r.at("hops").get<uint32_t>(), nh};
        }
        return e;
    }

    // Polls every node's `mesh show -j` until its routes are `want` (or the
    // deadline passes); returns how long it took, reports what differs.
    double wait_for(const std::map<std::string, Expected> &want, const std::string &what) {
        const auto start = Clock::now();
        const auto deadline = start + std::chrono::seconds(20);
        std::map<std::string, Expected> last;
        for (;;) {
            bool all = true;
            for (const topo::Node &n : t_.nodes) {
                last[n.name] = seen(show(n.name));
                all = all && last[n.name] == want.at(n.name);
            }
            if (all)
                return std::chrono::duration<double>(Clock::now() - start).count();
            if (Clock::now() > deadline)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        for (const topo::Node &n : t_.nodes)
            if (last[n.name] != want.at(n.name))
                ADD_FAILURE() << what << ": " << n.name << " (" << mesh::id_str(ids_.at(n.name))
                              << ") has " << last[n.name].size() << " routes, want "
                              << want.at(n.name).size() << "\nshow: " << show(n.name).dump(1)
                              << "\ndaemon log:\n"
                              << daemon_log(n.name);
        return -1;
    }

    // n's relay forwarding table, read back with bpftool: dst id -> nnexthops.
    std::map<mesh::NodeId, uint32_t> relay_routes(const std::string &node) const {
        std::map<mesh::NodeId, uint32_t> out;
        const auto r = proc::run(
            {"bpftool", "-j", "map", "dump", "pinned", pin_dir(node) + "/incxdp_relay_routes"});
        EXPECT_EQ(r.status, 0) << r.err;
        if (r.status != 0)
            return out;
        for (const auto &e : json::parse(r.out))
            out[e.at("formatted").at("key").get<mesh::NodeId>()] =
                e.at("formatted").at("value").at("nnexthops").get<uint32_t>();
        return out;
    }

    const topo::Iface &iface_towards(const std::string &node, const std::string &peer) const {
        for (const topo::Iface &i : t_.node(node).ifaces)
            if (i.peer_node == peer)
                return i;
        throw std::runtime_error(node + " has no link to " + peer);
    }
};

TEST_F(MeshNetns, Ring4RoutesBothWaysAndFollowsALinkDown) {
    bring_up("ring4", "mshr");
    const auto want = expected();
    // The graph's own rule, before the daemons are asked: 2-hop peers both ways.
    EXPECT_EQ(want.at("n0").at(ids_.at("n2")).first, 2u);
    EXPECT_EQ(want.at("n0").at(ids_.at("n2")).second,
              (std::set<mesh::NodeId>{ids_.at("n1"), ids_.at("n3")}));
    const double t_up = wait_for(want, "ring4 converged");
    ASSERT_GE(t_up, 0);
    std::printf("ring4: every node has every route after %.2f s\n", t_up);
    const json s0 = show("n0");
    EXPECT_EQ(s0.at("topology"), "ring");
    EXPECT_EQ(s0.at("node_id"), mesh::id_str(ids_.at("n0")));
    EXPECT_EQ(s0.at("neighbours").size(), 2u);
    EXPECT_EQ(s0.at("lsdb").size(), 4u);
    EXPECT_EQ(s0.at("relay_attached"), true);
    // The routes reached the relay: both ways to the 2-hop peer.
    EXPECT_EQ(relay_routes("n0"), (std::map<mesh::NodeId, uint32_t>{
                                      {ids_.at("n1"), 1}, {ids_.at("n2"), 2}, {ids_.at("n3"), 1}}));

    // n0's link to n1 down in n0's namespace: n0-n1 is now 3 hops the other way.
    const std::string ifname = iface_towards("n0", "n1").name;
    proc::run_ok({"ip", "-n", ns("n0"), "link", "set", ifname, "down"}, "link down");
    const auto cut = expected({{"n0", "n1"}});
    EXPECT_EQ(cut.at("n0").at(ids_.at("n1")).first, 3u);
    const double t_down = wait_for(cut, "ring4 with n0-n1 down");
    EXPECT_GE(t_down, 0);
    std::printf("ring4: routes around the down link after %.2f s\n", t_down);
    EXPECT_EQ(show("n0").at("topology"), "line");
    EXPECT_EQ(relay_routes("n0"), (std::map<mesh::NodeId, uint32_t>{
                                      {ids_.at("n1"), 1}, {ids_.at("n2"), 1}, {ids_.at("n3"), 1}}));

    proc::run_ok({"ip", "-n", ns("n0"), "link", "set", ifname, "up"}, "link up");
    const double t_back = wait_for(want, "ring4 with n0-n1 back");
    EXPECT_GE(t_back, 0);
    std::printf("ring4: routes back over the link after %.2f s\n", t_back);
}

TEST_F(MeshNetns, Line4EndToEndThreeHops) {
    bring_up("line4", "mshl");
    const auto want = expected();
    EXPECT_EQ(want.at("n0").at(ids_.at("n3")).first, 3u);
    const double t_up = wait_for(want, "line4 converged");
    ASSERT_GE(t_up, 0);
    std::printf("line4: every node has every route after %.2f s\n", t_up);
    const json s0 = show("n0");
    EXPECT_EQ(s0.at("topology"), "line");
    for (const auto &r : s0.at("routes"))
        if (r.at("dst") == mesh::id_str(ids_.at("n3"))) {
            EXPECT_EQ(r.at("hops"), 3);
            ASSERT_EQ(r.at("paths").size(), 1u);
            std::vector<std::string> path;
            for (const auto &n : r.at("paths")[0])
                path.push_back(n.at("node"));
            EXPECT_EQ(path, (std::vector<std::string>{
                                mesh::id_str(ids_.at("n0")), mesh::id_str(ids_.at("n1")),
                                mesh::id_str(ids_.at("n2")), mesh::id_str(ids_.at("n3"))}));
        }
}

} // namespace
