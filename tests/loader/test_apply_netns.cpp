// SPDX-License-Identifier: BSD-2-Clause
// `incxdp apply` of native UDP trees on namespaces, as a user would run it:
// (a) tree124_udp.yaml: `topo up`, `incxdp load` on every switch, one
// `incxdp apply` from the root namespace, then four incxdp-worker ranks
// (hostlib Communicators, UDP, CommConfig::from_topology) AllReduce int32
// and float32, verified, with partials going up at the leaves and results
// coming down; a second run in new processes without re-applying; `remove`.
// (b) tree124_real.yaml (explicit interface names and MACs on every link):
// `incxdp apply FILE --node NAME` run inside each node's namespace as if it
// were its own machine, then the same AllReduce. Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <future>
#include <optional>
#include <unistd.h>

namespace {

using namespace incxdp;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace proc = incxdp::topo::detail;

std::string shipped(const std::string &name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

// One topology up under a private prefix and pin root, engines loaded on
// every switch port; everything removed however the test ends.
class Cluster {
  public:
    Cluster(const std::string &file, const std::string &tag)
        : file_(file), t_(topo::Topology::load_file(file)),
          prefix_(tag + std::to_string(getpid()) + "-"),
          pin_root_("/sys/fs/bpf/incxdp-" + tag + std::to_string(getpid())) {
        on_interrupt_.emplace([this] { take_down(); });
    }
    ~Cluster() {
        take_down();
        on_interrupt_.reset();
    }

    void up() {
        const auto r = cli({"topo", "up", file_, "--prefix", prefix_});
        ASSERT_EQ(r.status, 0) << r.err;
        for (const auto &n : t_.nodes) {
            if (n.kind != topo::NodeKind::Switch)
                continue;
            std::vector<std::string> args = {"load", "--mode", "native", "--pin-dir",
                                             pin_dir(n.name)};
            for (const auto &i : n.ifaces) {
                args.push_back("-i");
                args.push_back(i.name);
            }
            const auto l = in_node(n.name, cli_argv(args));
            ASSERT_EQ(l.status, 0) << "load on " << n.name << ": " << l.err;
        }
    }

    void take_down() {
        cli({"topo", "down", file_, "--prefix", prefix_, "--pin-root", pin_root_});
        topo::down(t_, prefix_);
        std::error_code ec;
        std::filesystem::remove_all(pin_root_, ec);
    }

    static std::vector<std::string> cli_argv(std::vector<std::string> args) {
        args.insert(args.begin(), INCXDP_CLI);
        return args;
    }
    static proc::ProcResult cli(std::vector<std::string> args) { return proc::run(cli_argv(args)); }
    proc::ProcResult in_node(const std::string &node, std::vector<std::string> argv) const {
        argv.insert(argv.begin(), "--net=/var/run/netns/" + topo::netns_name(prefix_, node));
        argv.insert(argv.begin(), "nsenter");
        return proc::run(argv);
    }
    std::string pin_dir(const std::string &sw) const {
        return topo::switch_pin_dir(pin_root_, prefix_, sw);
    }

    // Every rank's incxdp-worker at once; each must verify its result.
    void allreduce(const std::string &dtype, const std::string &size) const {
        const auto &job = t_.job(1);
        std::vector<std::future<proc::ProcResult>> futs;
        for (size_t r = 0; r < job.workers.size(); ++r)
            futs.push_back(std::async(std::launch::async, [&, r] {
                return in_node(job.workers[r],
                               {INCXDP_WORKER, "--topo", file_, "--job", "1", "--rank",
                                std::to_string(r), "--dtype", dtype, "--size", size, "--verify"});
            }));
        for (size_t r = 0; r < futs.size(); ++r) {
            const auto res = futs[r].get();
            EXPECT_EQ(res.status, 0) << dtype << " rank " << r << ": " << res.out << res.err;
        }
    }

    // A switch's counters by name.
    json stats(const std::string &sw) const {
        const auto r = in_node(sw, cli_argv({"stats", "-j", "--pin-dir", pin_dir(sw)}));
        EXPECT_EQ(r.status, 0) << r.err;
        return r.status == 0 ? json::parse(r.out) : json();
    }
    static uint64_t counter(const json &s, const std::string &name) {
        if (s.is_object() && s.contains(name))
            return s.at(name).get<uint64_t>();
        if (s.is_object() && s.contains("counters") && s["counters"].contains(name))
            return s["counters"][name].get<uint64_t>();
        ADD_FAILURE() << "no counter " << name << " in " << s.dump();
        return 0;
    }
    json jobs(const std::string &sw) const {
        const auto r = in_node(sw, cli_argv({"job", "list", "-j", "--pin-dir", pin_dir(sw)}));
        EXPECT_EQ(r.status, 0) << r.err;
        return r.status == 0 ? json::parse(r.out) : json::array();
    }

    std::string file_;
    topo::Topology t_;
    std::string prefix_, pin_root_;
    std::optional<CleanupOnInterrupt> on_interrupt_;
};

class ApplyNetns : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
    }
};

TEST_F(ApplyNetns, Tree124UdpFromTheRootNamespace) {
    Cluster c(shipped("tree124_udp"), "tap");
    ASSERT_NO_FATAL_FAILURE(c.up());

    // --dry-run changes nothing and shows every switch's entries.
    auto r = Cluster::cli({"apply", c.file_, "--dry-run", "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json plan = json::parse(r.out);
    ASSERT_EQ(plan.at("jobs").size(), 1u);
    ASSERT_EQ(plan["jobs"][0]["switches"].size(), 3u);
    EXPECT_EQ(plan["jobs"][0]["switches"][0]["switch"], "s0");
    EXPECT_EQ(plan["jobs"][0]["switches"][0]["fanin"], 2);
    EXPECT_TRUE(c.jobs("s0").empty());

    r = Cluster::cli({"apply", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_, "-j"});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    for (const char *sw : {"s0", "s1", "s2"}) {
        const json j = c.jobs(sw);
        ASSERT_EQ(j.size(), 1u) << sw;
        EXPECT_EQ(j[0]["id"], 1);
        EXPECT_EQ(j[0]["workers"], 4) << sw << ": nworkers is the job's total";
        EXPECT_EQ(j[0]["ranks"].size(), 2u) << sw << ": two children each";
    }

    c.allreduce("int32", "1M");
    c.allreduce("float32", "1M");
    for (const char *leaf : {"s1", "s2"}) {
        const json s = c.stats(leaf);
        EXPECT_GT(Cluster::counter(s, "up"), 0u) << leaf;
        EXPECT_GT(Cluster::counter(s, "down"), 0u) << leaf;
    }
    EXPECT_GT(Cluster::counter(c.stats("s0"), "completed"), 0u);

    // New processes, new Communicators, no re-apply.
    c.allreduce("int32", "256K");

    r = Cluster::cli({"remove", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char *sw : {"s0", "s1", "s2"})
        EXPECT_TRUE(c.jobs(sw).empty()) << sw;
}

TEST_F(ApplyNetns, PerNodeWithExplicitNamesAndMacs) {
    Cluster c(shipped("tree124_real"), "tan");
    ASSERT_NO_FATAL_FAILURE(c.up());

    // A node's part where its interfaces are not: refused, nothing written.
    auto r = c.in_node(
        "s1", Cluster::cli_argv({"apply", c.file_, "--node", "s2", "--pin-dir", c.pin_dir("s1")}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("the topology says"), std::string::npos) << r.err;
    EXPECT_TRUE(c.jobs("s1").empty());

    for (const char *sw : {"s1", "s2", "s0"}) {
        r = c.in_node(
            sw, Cluster::cli_argv({"apply", c.file_, "--node", sw, "--pin-dir", c.pin_dir(sw)}));
        ASSERT_EQ(r.status, 0) << sw << ": " << r.out << r.err;
    }
    const char *hosts[] = {"h0", "h1", "h2", "h3"};
    for (int i = 0; i < 4; ++i) {
        r = c.in_node(hosts[i], Cluster::cli_argv({"apply", c.file_, "--node", hosts[i], "-j"}));
        ASSERT_EQ(r.status, 0) << hosts[i] << ": " << r.err;
        const json d = json::parse(r.out).at(0);
        EXPECT_EQ(d["rank"], i);
        EXPECT_EQ(d["iface"], "enp1s0");
        EXPECT_EQ(d["switch"], i < 2 ? "s1" : "s2");
    }
    // A host checked in the wrong machine: its interface is not there.
    r = c.in_node("s0", Cluster::cli_argv({"apply", c.file_, "--node", "h0"}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("enp1s0"), std::string::npos) << r.err;

    c.allreduce("int32", "1M");
    c.allreduce("float32", "256K");
    EXPECT_GT(Cluster::counter(c.stats("s1"), "up"), 0u);
    EXPECT_GT(Cluster::counter(c.stats("s2"), "down"), 0u);

    for (const char *sw : {"s0", "s1", "s2"}) {
        r = c.in_node(
            sw, Cluster::cli_argv({"remove", c.file_, "--node", sw, "--pin-dir", c.pin_dir(sw)}));
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_TRUE(c.jobs(sw).empty()) << sw;
    }
}

} // namespace
