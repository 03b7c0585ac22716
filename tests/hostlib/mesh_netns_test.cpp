// SPDX-License-Identifier: BSD-2-Clause
// incxdp-p2p between the hosts of full3, ring4, line4 and mesh6 brought up with
// `incxdp topo up`, one `incxdp mesh run` per node: every pair exchanges
// 1 B .. 64 MiB bit-exact, direct or relayed; a ring link cut mid-transfer
// is survived the other way round; relaying off and a dead relay end in
// clear errors; ring AllReduce is exact. Needs root.
#include "../common/mesh_cluster.h"

#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <queue>
#include <thread>

namespace {

using namespace incxdp;
using nlohmann::json;
namespace proc = incxdp::topo::detail;
using Clock = std::chrono::steady_clock;

// A mesh cluster and runs of the p2p tool between its hosts.
struct Cluster : incxdp::test::MeshCluster {
    std::vector<std::string> p2p_argv(size_t rank, size_t peer, const std::string &size,
                                      std::vector<std::string> extra = {}) const {
        auto argv = in(hosts[rank], {INCXDP_P2P, "--topo", file, "--rank", std::to_string(rank),
                                     "--peer", std::to_string(peer), "--size", size, "--verify",
                                     "-j", "--pin-dir", pin(hosts[rank])});
        argv.insert(argv.end(), extra.begin(), extra.end());
        return argv;
    }

    // Both ranks at once; returns their results.
    std::pair<proc::ProcResult, proc::ProcResult>
    exchange(size_t a, size_t b, const std::string &size, std::vector<std::string> extra = {}) {
        auto fa =
            std::async(std::launch::async, [&] { return proc::run(p2p_argv(a, b, size, extra)); });
        auto fb =
            std::async(std::launch::async, [&] { return proc::run(p2p_argv(b, a, size, extra)); });
        return {fa.get(), fb.get()};
    }
};

// The JSON line of a successful verified run.
void expect_verified(const proc::ProcResult &r, uint64_t bytes, const std::string &who) {
    ASSERT_EQ(r.status, 0) << who << ": " << r.err << r.out;
    json j = json::parse(r.out);
    EXPECT_EQ(j["bytes"].get<uint64_t>(), bytes) << who;
    EXPECT_TRUE(j["verified"].get<bool>()) << who << ": " << r.out;
}

void ring_allreduce(Cluster &c) {
    ASSERT_EQ(c.error, "");
    for (std::string dtype : {"int32", "float32"}) {
        std::vector<std::future<proc::ProcResult>> fs;
        for (size_t r = 0; r < c.hosts.size(); r++)
            fs.push_back(std::async(std::launch::async, [&, r] {
                return proc::run(
                    c.in(c.hosts[r], {INCXDP_P2P, "--topo", c.file, "--rank", std::to_string(r),
                                      "--coll", "allreduce", "--dtype", dtype, "--size", "4M",
                                      "--verify", "-j", "--pin-dir", c.pin(c.hosts[r])}));
            }));
        for (size_t r = 0; r < fs.size(); r++) {
            auto res = fs[r].get();
            ASSERT_EQ(res.status, 0) << "rank " << r << ": " << res.err;
            json j = json::parse(res.out);
            EXPECT_TRUE(j["verified"].get<bool>()) << res.out;
            EXPECT_TRUE(j["neighbours_only"].get<bool>())
                << res.out; // a ring is a cycle of neighbours
        }
    }
}

class MeshP2pNetns : public ::testing::Test {
  protected:
    static inline std::map<std::string, Cluster *> clusters_;
    static Cluster &cluster(const std::string &name) {
        auto &c = clusters_[name];
        if (!c) {
            c = new Cluster;
            c->bring_up(name, "p2p" + name.substr(0, 1) + name.substr(name.size() - 1));
        }
        return *c;
    }
    static void TearDownTestSuite() {
        for (auto &[n, c] : clusters_) {
            c->take_down();
            delete c;
        }
        clusters_.clear();
    }
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: network namespaces, XDP";
    }
    void every_pair(const std::string &topo_name, const std::vector<std::string> &sizes) {
        Cluster &c = cluster(topo_name);
        ASSERT_EQ(c.error, "");
        for (size_t a = 0; a < c.hosts.size(); a++)
            for (size_t b = a + 1; b < c.hosts.size(); b++)
                for (auto &s : sizes) {
                    uint64_t bytes = s == "1"    ? 1
                                     : s == "4K" ? 4096
                                     : s == "1M" ? 1 << 20
                                                 : 64 << 20;
                    auto [ra, rb] = c.exchange(a, b, s);
                    std::string who =
                        topo_name + " " + std::to_string(a) + "<->" + std::to_string(b) + " " + s;
                    expect_verified(ra, bytes, who);
                    expect_verified(rb, bytes, who);
                }
    }
};

TEST_F(MeshP2pNetns, Full3EveryPairEverySize) {
    every_pair("full3", {"1", "4K", "1M", "64M"});
}

TEST_F(MeshP2pNetns, Ring4EveryPairEverySize) {
    every_pair("ring4", {"1", "4K", "1M", "64M"});
}

// The partial mesh (a 6-ring with chords 0-3 and 1-4): 1 and 2 hops,
// equal-cost pairs among them.
TEST_F(MeshP2pNetns, Mesh6EveryPairEverySize) {
    every_pair("mesh6", {"1", "4K", "1M", "64M"});
}

TEST_F(MeshP2pNetns, Ring4LinkCutMidTransferCompletesTheOtherWay) {
    Cluster &c = cluster("ring4");
    ASSERT_EQ(c.error, "");
    // n0 <-> n2 is 2 hops either way; cut n0-n1 while 4 x 64 MiB move.
    std::string ifc = c.iface_to("n0", "n1");
    ASSERT_FALSE(ifc.empty());
    auto fut = std::async(std::launch::async, [&] {
        return c.exchange(0, 2, "64M", {"--iters", "4", "--timeout", "10"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto cut = proc::run(c.in("n0", {"ip", "link", "set", "dev", ifc, "down"}));
    auto [ra, rb] = fut.get();
    proc::run(c.in("n0", {"ip", "link", "set", "dev", ifc, "up"}));
    ASSERT_EQ(cut.status, 0) << cut.err;
    expect_verified(ra, 64 << 20, "ring4 cut n0");
    expect_verified(rb, 64 << 20, "ring4 cut n2");
    ASSERT_TRUE(c.converged(Clock::now() + std::chrono::seconds(30)));
}

TEST_F(MeshP2pNetns, Ring4AllReduce) {
    ring_allreduce(cluster("ring4"));
}

TEST_F(MeshP2pNetns, Ring8AllReduce) {
    ring_allreduce(cluster("ring8"));
}

TEST_F(MeshP2pNetns, Line4EveryPairEverySize) {
    every_pair("line4", {"1", "4K", "1M", "64M"});
}

TEST_F(MeshP2pNetns, Line4RelayOffNonNeighbourFailsClearly) {
    Cluster &c = cluster("line4");
    ASSERT_EQ(c.error, "");
    for (auto &h : c.hosts)
        c.stop_daemon(h);
    for (auto &h : c.hosts)
        c.start_daemon(h, {"--relay", "off"});
    ASSERT_TRUE(c.converged(Clock::now() + std::chrono::seconds(30)));
    auto [ra, rb] = c.exchange(0, 2, "4K", {"--timeout", "2", "--connect-timeout", "5"});
    for (auto *r : {&ra, &rb}) {
        EXPECT_EQ(r->status, 1) << r->out;
        EXPECT_NE(r->err.find("relay"), std::string::npos) << r->err;
    }
    // Neighbours still talk.
    auto [na, nb] = c.exchange(0, 1, "4K");
    expect_verified(na, 4096, "line4 relay off 0<->1");
    expect_verified(nb, 4096, "line4 relay off 1<->0");
    for (auto &h : c.hosts)
        c.stop_daemon(h);
    for (auto &h : c.hosts)
        c.start_daemon(h);
    ASSERT_TRUE(c.converged(Clock::now() + std::chrono::seconds(30)));
}

TEST_F(MeshP2pNetns, Line4DeadRelayEndsInAClearErrorNamingThePeer) {
    Cluster &c = cluster("line4");
    ASSERT_EQ(c.error, "");
    auto fut = std::async(std::launch::async, [&] {
        return c.exchange(0, 3, "16M", {"--iters", "200", "--timeout", "3"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    c.stop_daemon("n1", SIGKILL);
    proc::run(c.in("n1", {"ip", "link", "set", "dev", c.iface_to("n1", "n2"), "down"}));
    auto [ra, rb] = fut.get();
    EXPECT_EQ(ra.status, 1) << ra.out;
    EXPECT_NE(ra.err.find("no progress"), std::string::npos) << ra.err;
    auto show3 = c.show("n3"); // n3's node id, as the error names it
    ASSERT_TRUE(show3.contains("node_id")) << show3.dump();
    EXPECT_NE(ra.err.find(show3["node_id"].get<std::string>()), std::string::npos)
        << ra.err << " / " << show3.dump();
    EXPECT_EQ(rb.status, 1) << rb.out;
}

} // namespace
