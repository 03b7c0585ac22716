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
#include <tuple>

namespace {

using namespace incxdp;
using nlohmann::json;
namespace proc = incxdp::topo::detail;
using Clock = std::chrono::steady_clock;

// A run of the p2p tool that hangs is ended after this many seconds (status
// 124, or 137 if SIGTERM did not end it) and fails the test that waited for
// it, rather than the whole executable at ctest's timeout with no word of
// which run hung.
constexpr int kP2pDeadlineS = 120;

proc::ProcResult run_p2p(std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"timeout", "-k", "5", std::to_string(kP2pDeadlineS)});
    auto r = proc::run(argv);
    if (r.status == 124 || r.status == 137)
        r.err += "\n[test] still running after " + std::to_string(kP2pDeadlineS) +
                 " s, killed: " + proc::join_argv(argv);
    return r;
}

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
            std::async(std::launch::async, [&] { return run_p2p(p2p_argv(a, b, size, extra)); });
        auto fb =
            std::async(std::launch::async, [&] { return run_p2p(p2p_argv(b, a, size, extra)); });
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
                return run_p2p(
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
            // A daemon a loaded host does not run for 400 ms (the default
            // dead interval) would flap its neighbours' routes mid-transfer.
            c->bring_up(name, "p2p" + name.substr(0, 1) + name.substr(name.size() - 1),
                        {"--dead-ms", "2000"});
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
    auto forwarded = [&] {
        auto r = proc::run({INCXDP_CLI, "mesh", "stats", "-j", "--pin-dir", c.pin("n1")});
        return r.status == 0 ? json::parse(r.out).value("forward", uint64_t(0)) : uint64_t(0);
    };
    const uint64_t before = forwarded();
    auto fut = std::async(std::launch::async, [&] {
        return c.exchange(0, 3, "16M", {"--iters", "200", "--timeout", "3"});
    });
    // The relay dies mid-transfer, once n1 forwards the exchange's frames: a
    // fixed sleep can end before a loaded host has even started both ranks.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (forwarded() - before < 1000 && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GE(forwarded() - before, 1000u) << "the exchange never went through n1";
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

// The endpoint's link: frames for a node reach its endpoint through the
// AF_XDP sockets the relay delivers into (deliver_xsk), none of its data
// through the stack (deliver_stack); INCXDP_MESH_AF_XDP=0 keeps the UDP
// socket, and then nothing leaves through the relay's program (sent); a
// second endpoint on a node fails clearly instead of taking the first one's
// frames.

// argv with `env VAR=VALUE` between nsenter and the command.
std::vector<std::string> with_env(std::vector<std::string> argv, const std::string &var) {
    argv.insert(argv.begin() + 2, {"env", var});
    return argv;
}

// host's relay counters, `incxdp mesh stats -j`.
json relay_stats(const Cluster &c, const std::string &host) {
    auto r = proc::run({INCXDP_CLI, "mesh", "stats", "-j", "--pin-dir", c.pin(host)});
    EXPECT_EQ(r.status, 0) << host << ": " << r.err;
    return r.status == 0 ? json::parse(r.out) : json::object();
}

// Frames of a connection's close that may still arrive after one end has gone.
constexpr uint64_t kClosingFrames = 8;

uint64_t grew(const json &after, const json &before, const char *counter) {
    return after.value(counter, uint64_t(0)) - before.value(counter, uint64_t(0));
}

// Whether host's endpoint has its AF_XDP sockets in the relay's maps: it
// sets the interfaces' slots once every socket is bound, and removes them
// when it closes.
bool xsks_bound(const Cluster &c, const std::string &host) {
    auto r = proc::run(
        {"bpftool", "-j", "map", "dump", "pinned", c.pin(host) + "/incxdp_relay_ifslots"});
    return r.status == 0 && !json::parse(r.out).empty();
}

// Waits (up to 30 s) until host's endpoint has bound its sockets.
::testing::AssertionResult wait_bound(const Cluster &c, const std::string &host) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
        if (xsks_bound(c, host))
            return ::testing::AssertionSuccess();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ::testing::AssertionFailure()
           << host << "'s endpoint never put its AF_XDP sockets into the relay's slots";
}

// The listening (lower) rank first, the connecting one once the listener's
// sockets are bound: then no frame of the exchange reaches a stack while
// both endpoints run.
std::pair<proc::ProcResult, proc::ProcResult> exchange_bound_first(Cluster &c, size_t lo, size_t hi,
                                                                   const std::string &size) {
    EXPECT_FALSE(xsks_bound(c, c.hosts[lo])) << "a previous endpoint's slots are left";
    auto fl = std::async(std::launch::async, [&] { return proc::run(c.p2p_argv(lo, hi, size)); });
    const bool bound = wait_bound(c, c.hosts[lo]);
    auto fh = std::async(std::launch::async, [&] { return proc::run(c.p2p_argv(hi, lo, size)); });
    auto rl = fl.get(), rh = fh.get();
    EXPECT_TRUE(bound) << rl.err;
    return {rl, rh};
}

TEST_F(MeshP2pNetns, Ring4EndpointDeliversThroughAfXdp) {
    Cluster &c = cluster("ring4");
    ASSERT_EQ(c.error, "");
    // n0 <-> n1 neighbours, n0 <-> n2 through a relay.
    for (size_t peer : {size_t(1), size_t(2)}) {
        const std::string &a = c.hosts[0], &b = c.hosts[peer];
        const json a0 = relay_stats(c, a), b0 = relay_stats(c, b);
        auto [ra, rb] = exchange_bound_first(c, 0, peer, "16M");
        const std::string who = "ring4 0<->" + std::to_string(peer);
        expect_verified(ra, 16 << 20, who);
        expect_verified(rb, 16 << 20, who);
        for (auto *r : {&ra, &rb})
            EXPECT_EQ(r->err.find("AF_XDP delivery unavailable"), std::string::npos) << r->err;
        const json a1 = relay_stats(c, a), b1 = relay_stats(c, b);
        for (auto [host, before, after] : {std::tuple{a, &a0, &a1}, std::tuple{b, &b0, &b1}}) {
            // At least the 16 MiB the peer sent, in segments of < 3500 B.
            EXPECT_GT(grew(*after, *before, "deliver_xsk"), (16u << 20) / 3500)
                << who << " " << host << ": " << after->dump();
            // Through the stack: at most the last closing frames (CLOSE, ACK)
            // that arrive once the endpoint has taken its slots out as it
            // ended; the data would be thousands.
            EXPECT_LE(grew(*after, *before, "deliver_stack"), kClosingFrames)
                << who << " " << host << ": " << after->dump();
        }
    }
}

TEST_F(MeshP2pNetns, Ring4AfXdpOffKeepsTheUdpSocket) {
    Cluster &c = cluster("ring4");
    ASSERT_EQ(c.error, "");
    const json a0 = relay_stats(c, "n0"), b0 = relay_stats(c, "n2");
    auto fa = std::async(std::launch::async, [&] {
        return proc::run(with_env(c.p2p_argv(0, 2, "4M"), "INCXDP_MESH_AF_XDP=0"));
    });
    auto fb = std::async(std::launch::async, [&] {
        return proc::run(with_env(c.p2p_argv(2, 0, "4M"), "INCXDP_MESH_AF_XDP=0"));
    });
    auto ra = fa.get(), rb = fb.get();
    expect_verified(ra, 4 << 20, "ring4 udp 0<->2");
    expect_verified(rb, 4 << 20, "ring4 udp 2<->0");
    const json a1 = relay_stats(c, "n0"), b1 = relay_stats(c, "n2");
    for (auto [before, after] : {std::pair{&a0, &a1}, std::pair{&b0, &b1}}) {
        EXPECT_EQ(grew(*after, *before, "deliver_xsk"), 0u) << after->dump();
        EXPECT_GT(grew(*after, *before, "deliver_stack"), (4u << 20) / 3500) << after->dump();
        EXPECT_EQ(grew(*after, *before, "sent"), 0u) << after->dump();
    }
}

TEST_F(MeshP2pNetns, Ring4SecondEndpointOnANodeFailsClearly) {
    Cluster &c = cluster("ring4");
    ASSERT_EQ(c.error, "");
    // n0's endpoint waits for n1; a second one on n0 (towards n3) must not
    // start, over AF_XDP or UDP, and the first still gets all its frames.
    auto first = std::async(std::launch::async, [&] { return proc::run(c.p2p_argv(0, 1, "1M")); });
    ASSERT_TRUE(wait_bound(c, "n0"));
    for (const std::string var : {"INCXDP_MESH_AF_XDP=1", "INCXDP_MESH_AF_XDP=0"}) {
        auto second = proc::run(with_env(c.p2p_argv(0, 3, "1M", {"--connect-timeout", "3"}), var));
        EXPECT_EQ(second.status, 1) << var << ": " << second.out;
        EXPECT_NE(second.err.find("one endpoint per node"), std::string::npos)
            << var << ": " << second.err;
    }
    EXPECT_TRUE(xsks_bound(c, "n0")); // the second took nothing of the first's
    auto peer = proc::run(c.p2p_argv(1, 0, "1M"));
    auto r0 = first.get();
    expect_verified(r0, 1 << 20, "ring4 first endpoint 0<->1");
    expect_verified(peer, 1 << 20, "ring4 first endpoint 1<->0");
}

// A peer that ends after one iteration while this rank runs two: the
// closing peer still acks this rank's second message, so only the receive
// is left, for a message that never comes. It ends in an error naming the
// peer, not in a wait without end.
TEST_F(MeshP2pNetns, Full3PeerThatStopsSendingEndsInAClearError) {
    Cluster &c = cluster("full3");
    ASSERT_EQ(c.error, "");
    auto fa = std::async(std::launch::async, [&] {
        return run_p2p(c.p2p_argv(0, 1, "4K", {"--iters", "1", "--timeout", "2"}));
    });
    auto fb = std::async(std::launch::async, [&] {
        return run_p2p(c.p2p_argv(1, 0, "4K", {"--iters", "2", "--timeout", "2"}));
    });
    auto ra = fa.get(), rb = fb.get();
    expect_verified(ra, 4096, "full3 0<->1, one iteration");
    EXPECT_EQ(rb.status, 1) << rb.out << rb.err;
    EXPECT_NE(rb.err.find("no progress"), std::string::npos) << rb.err;
    auto show0 = c.show("n0"); // n0's node id, as the error names it
    ASSERT_TRUE(show0.contains("node_id")) << show0.dump();
    EXPECT_NE(rb.err.find(show0["node_id"].get<std::string>()), std::string::npos)
        << rb.err << " / " << show0.dump();
}

} // namespace
