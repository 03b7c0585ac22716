// SPDX-License-Identifier: BSD-2-Clause
// `incxdp apply` of native UDP trees on namespaces, as a user would run it:
// (a) tree124_udp.yaml: `topo up`, `incxdp load` on every switch, one
// `incxdp apply` from the root namespace, then four incxdp-worker ranks
// (hostlib Communicators, UDP, CommConfig::from_topology) AllReduce int32
// and float32, verified, with partials going up at the leaves and results
// coming down; a second run in new processes without re-applying; `remove`.
// (b) tree124_real.yaml (explicit interface names and MACs on every link):
// `incxdp apply FILE --node NAME` run inside each node's namespace as if it
// were its own machine, then the same AllReduce. (c) star.yaml: `apply`
// writes what `job add` writes; a host's `--node` check. (d) diamond.yaml,
// switches cabled with a cycle: tree job planned over a spanning tree.
// (e) tree124_udp.yaml: no partial or result lost at a switch or a veth.
// Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <sstream>
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

// On lossless namespaces no partial or result of a native tree is lost at
// a switch (docs/BENCH.md "Native UDP trees"): every set a leaf sends up
// completes once at the root, the root hands each result to both leaves'
// ports, each leaf hands every result it takes to both hosts' ports, and
// nothing is refused as not from the parent, stale, or unredirectable.
TEST_F(ApplyNetns, Tree124UdpLosesNothingAtASwitch) {
    Cluster c(shipped("tree124_udp"), "tal");
    ASSERT_NO_FATAL_FAILURE(c.up());
    auto r = Cluster::cli({"apply", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.out << r.err;

    c.allreduce("float32", "4M");
    c.allreduce("int32", "4M");

    std::map<std::string, json> st;
    for (const char *sw : {"s0", "s1", "s2"})
        st[sw] = c.stats(sw);
    auto n = [&](const std::string &sw, const std::string &name) {
        return Cluster::counter(st[sw], name);
    };
    const uint64_t completed = n("s0", "completed");
    EXPECT_GT(completed, 2u * (4u << 20) / (4u * 832u)) << "at least one set per chunk";
    EXPECT_EQ(n("s0", "egress_tx"), 2 * completed) << "each result to both leaves";
    for (const char *leaf : {"s1", "s2"}) {
        EXPECT_EQ(n(leaf, "up"), completed) << leaf << ": a partial the root never completed";
        EXPECT_GE(n(leaf, "down"), n(leaf, "up")) << leaf << ": a set whose result never came";
        EXPECT_EQ(n(leaf, "egress_tx"), 2 * n(leaf, "down"))
            << leaf << ": each result to both hosts";
    }
    for (const char *sw : {"s0", "s1", "s2"})
        for (const char *bad : {"not_parent", "result_stale", "redirect_fail", "egress_drop",
                                "unknown_sender", "wrong_port", "mismatch", "stale"})
            EXPECT_EQ(n(sw, bad), 0u) << sw << " " << bad;
    // What the engine redirected, the kernel delivered: a veth counts a
    // frame it could not put into its peer's ring (full, or the peer runs
    // no XDP) as an xdp_xmit error, which no engine counter sees.
    for (const char *sw : {"s0", "s1", "s2"})
        for (const auto &i : c.t_.node(sw).ifaces) {
            const auto e = c.in_node(sw, {"ethtool", "-S", i.name});
            ASSERT_EQ(e.status, 0) << sw << " " << i.name << ": " << e.err;
            std::istringstream lines(e.out);
            for (std::string name, value; lines >> name >> value;)
                if (name.find("xdp_xmit_errors") != std::string::npos ||
                    name.find("xdp_tx_errors") != std::string::npos) {
                    EXPECT_EQ(value, "0") << sw << " " << i.name << " " << name;
                }
        }
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

// A star is the one-switch tree: `incxdp apply` of star.yaml writes exactly
// the entries `incxdp job add --topo` writes (both the same compile and
// apply_switch), and a re-apply replaces the job with the same entries.
TEST_F(ApplyNetns, StarApplyWritesWhatJobAddWrites) {
    Cluster c(shipped("star"), "tas");
    ASSERT_NO_FATAL_FAILURE(c.up());
    const std::string dir = c.pin_dir("sw");
    // Every entry of the maps a star job writes, each map's entries sorted.
    auto entries = [&] {
        json out;
        for (const char *map :
             {"incxdp_jobs", "incxdp_workers", "incxdp_egress", "incxdp_parents"}) {
            const auto r =
                c.in_node("sw", {"bpftool", "-j", "map", "dump", "pinned", dir + "/" + map});
            EXPECT_EQ(r.status, 0) << map << ": " << r.err;
            std::vector<std::string> rows;
            for (const auto &e : json::parse(r.status == 0 ? r.out : "[]"))
                rows.push_back(e.dump());
            std::sort(rows.begin(), rows.end());
            out[map] = rows;
        }
        return out;
    };
    const json none = entries();

    auto r = c.in_node(
        "sw", Cluster::cli_argv({"job", "add", "--topo", c.file_, "--job", "1", "--pin-dir", dir}));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("job 1 installed: 4 workers, 128 slots"), std::string::npos) << r.out;
    const json by_job_add = entries();
    EXPECT_NE(by_job_add, none);
    EXPECT_EQ(by_job_add["incxdp_workers"].size(), 4u);
    r = c.in_node(
        "sw", Cluster::cli_argv({"job", "add", "--topo", c.file_, "--job", "1", "--pin-dir", dir}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("job 1 already exists"), std::string::npos) << r.err;
    r = c.in_node("sw", Cluster::cli_argv({"job", "del", "1", "--pin-dir", dir}));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(entries(), none);

    r = Cluster::cli({"apply", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_EQ(entries(), by_job_add);
    c.allreduce("int32", "256K");
    // Applying again is a fresh run of the same job: the same entries.
    r = Cluster::cli({"apply", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_EQ(entries(), by_job_add);
    c.allreduce("int32", "256K");

    // --dry-run shows the star as a tree of one switch: fan-in 0.
    r = Cluster::cli({"apply", c.file_, "--dry-run", "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json plan = json::parse(r.out);
    ASSERT_EQ(plan["jobs"][0]["switches"].size(), 1u);
    EXPECT_EQ(plan["jobs"][0]["switches"][0]["fanin"], 0);
    EXPECT_EQ(plan["jobs"][0]["switches"][0]["workers"].size(), 4u);

    r = Cluster::cli({"remove", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(entries(), none);
}

// `incxdp apply --node HOST` checks the host's side: it passes where the
// file's interface exists with the file's MAC and address, and fails naming
// the interface when the MAC is another or the interface is missing.
TEST_F(ApplyNetns, HostNodeChecksItsInterfaceAndMac) {
    Cluster c(shipped("star"), "tah");
    ASSERT_NO_FATAL_FAILURE(c.up());
    const topo::Iface &ifc = c.t_.host_iface_for("w1", "sw");
    const std::string mac = topo::mac_to_string(ifc.mac);
    auto check = [&] {
        return c.in_node("w1", Cluster::cli_argv({"apply", c.file_, "--node", "w1", "-j"}));
    };
    auto ip = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "ip");
        const auto r = c.in_node("w1", args);
        EXPECT_EQ(r.status, 0) << r.err;
    };

    auto r = check();
    ASSERT_EQ(r.status, 0) << r.err;
    const json d = json::parse(r.out).at(0);
    EXPECT_EQ(d["rank"], 1);
    EXPECT_EQ(d["iface"], ifc.name);
    EXPECT_EQ(d["mac"], mac);
    EXPECT_EQ(d["switch"], "sw");
    EXPECT_EQ(d["switch_ip"], c.t_.node("sw").ip);
    EXPECT_EQ(d["local_port"], 4000);

    // Another MAC on the interface.
    ip({"link", "set", "dev", ifc.name, "address", "02:ee:00:00:00:01"});
    r = check();
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("interface " + ifc.name + " has MAC 02:ee:00:00:00:01"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(mac), std::string::npos) << r.err;
    ip({"link", "set", "dev", ifc.name, "address", mac});
    EXPECT_EQ(check().status, 0);

    // The interface under another name: the file's is not there.
    ip({"link", "set", "dev", ifc.name, "down"});
    ip({"link", "set", "dev", ifc.name, "name", "other0"});
    r = check();
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("interface " + ifc.name + " (towards sw) does not exist"),
              std::string::npos)
        << r.err;
    ip({"link", "set", "dev", "other0", "name", ifc.name});
    ip({"link", "set", "dev", ifc.name, "up"});
    r = check();
    EXPECT_EQ(r.status, 0) << r.err;
}

// Switches cabled with a cycle (diamond.yaml: two paths s0 -> s3): one
// `incxdp apply` installs the tree job and the roce-tree job over the same
// spanning tree (s3 below s1), and both AllReduce, verified.
TEST_F(ApplyNetns, DiamondWithACycleTreeAndRoceTree) {
    Cluster c(shipped("diamond"), "tad");
    ASSERT_NO_FATAL_FAILURE(c.up());
    auto r = Cluster::cli({"apply", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    for (const char *sw : {"s0", "s1", "s2", "s3"})
        EXPECT_EQ(c.jobs(sw).size(), 2u) << sw;

    auto run = [&](const std::string &job, std::vector<std::string> extra) {
        std::vector<std::future<proc::ProcResult>> futs;
        for (size_t rank = 0; rank < 4; ++rank)
            futs.push_back(std::async(std::launch::async, [&, rank] {
                std::vector<std::string> argv = {
                    INCXDP_WORKER,        "--topo", c.file_, "--job",   job, "--rank",
                    std::to_string(rank), "--size", "256K",  "--verify"};
                argv.insert(argv.end(), extra.begin(), extra.end());
                return c.in_node(c.t_.job(1).workers[rank], argv);
            }));
        for (size_t rank = 0; rank < 4; ++rank) {
            const auto res = futs[rank].get();
            EXPECT_EQ(res.status, 0)
                << "job " << job << " rank " << rank << ": " << res.out << res.err;
        }
    };
    run("1", {});
    // s3's partials go up to s1, its parent in the spanning tree; s2 has
    // one child and none of s3's traffic.
    EXPECT_GT(Cluster::counter(c.stats("s3"), "up"), 0u);
    EXPECT_GT(Cluster::counter(c.stats("s1"), "up"), 0u);
    EXPECT_GT(Cluster::counter(c.stats("s0"), "completed"), 0u);
    const json s1_jobs = c.jobs("s1");
    for (const auto &j : s1_jobs)
        if (j["id"] == 1) {
            EXPECT_EQ(j["ranks"].size(), 2u) << "s1's children: h0 and s3";
        }
    run("2", {"--transport", "roce", "--elems", "256", "--deadline", "60"});

    r = Cluster::cli({"remove", c.file_, "--prefix", c.prefix_, "--pin-root", c.pin_root_});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char *sw : {"s0", "s1", "s2", "s3"})
        EXPECT_TRUE(c.jobs(sw).empty()) << sw;
}

} // namespace
