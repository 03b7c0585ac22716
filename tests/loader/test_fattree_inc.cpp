// SPDX-License-Identifier: BSD-2-Clause
// In-switch aggregation of a connection matrix on fattree4 (36 namespaces,
// the engine on every switch, `incxdp topo up --engine`): the dedicated-pod
// INC AllReduce of `cm gen allreduce-inc` replayed with `--inc switch`,
// every worker's result checked by the replay against the value computed
// from the matrix, the switches' counters showing aggregation at ToR, Agg
// and core; the same under 2% loss on every link (the xdp hook); and the
// same job without INC (host aggregation over TCP) moving more bytes over
// the core tier. Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <unistd.h>

namespace {

using namespace incxdp;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace proc = incxdp::topo::detail;

class FatTreeInc : public ::testing::Test {
  protected:
    static inline std::string prefix_, pin_root_, dir_, yaml_, setup_error_;
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;

    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        prefix_ = "fti" + std::to_string(getpid()) + "-";
        pin_root_ = "/sys/fs/bpf/incxdp-fti" + std::to_string(getpid());
        char tmpl[] = "/tmp/incxdp-fti-XXXXXX";
        dir_ = ::mkdtemp(tmpl);
        yaml_ = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/fattree4.yaml";
        on_interrupt_.emplace(take_down);
        const auto r =
            cli({"topo", "up", yaml_, "--prefix", prefix_, "--engine", "--pin-root", pin_root_});
        if (r.status != 0)
            setup_error_ = "topo up --engine: " + r.err;
    }

    static void take_down() {
        if (prefix_.empty())
            return;
        cli({"chaos", "--topo", yaml_, "--prefix", prefix_, "--all-links", "--xdp", "--off"});
        cli({"topo", "down", yaml_, "--prefix", prefix_, "--pin-root", pin_root_});
    }

    static void TearDownTestSuite() {
        if (geteuid() != 0)
            return;
        take_down();
        on_interrupt_.reset();
        proc::run({"rm", "-rf", dir_});
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces";
        ASSERT_EQ(setup_error_, "");
    }

    static proc::ProcResult cli(std::vector<std::string> args) {
        args.insert(args.begin(), INCXDP_CLI);
        return proc::run(args);
    }

    static std::string gen(const std::string &name, std::vector<std::string> args) {
        const std::string path = dir_ + "/" + name;
        args.insert(args.begin(), {"cm", "gen", "allreduce-inc", "--k", "4", "--chunks", "4",
                                   "--iterations", "2", "--fid", "1"});
        args.insert(args.end(), {"-o", path});
        const auto r = cli(args);
        EXPECT_EQ(r.status, 0) << r.err;
        return path;
    }

    static std::pair<int, json> replay(const std::string &cm, const std::string &inc) {
        const auto r = cli({"replay", cm, "--topo", yaml_, "--prefix", prefix_, "--pin-root",
                            pin_root_, "--inc", inc, "-j", "--timeout", "90"});
        json j = json::parse(r.out, nullptr, false);
        return {r.status, j.is_discarded() ? json{{"stdout", r.out}, {"stderr", r.err}} : j};
    }
};

uint64_t counter(const json &r, const char *tier, const char *name) {
    const json &t = r["switches"]["tiers"];
    return t.contains(tier) ? t[tier].value(name, uint64_t(0)) : 0;
}

// Every flow done with its values checked, and every tier aggregated: ToRs
// and Aggs send partials up and the results down, the core completes.
void check_switch_replay(const json &r, size_t flows) {
    ASSERT_TRUE(r.contains("ok")) << r.dump();
    EXPECT_TRUE(r["ok"].get<bool>()) << r["errors"].dump();
    EXPECT_EQ(r["aggregation"], "switch");
    ASSERT_EQ(r["flows"].size(), flows);
    for (const json &f : r["flows"]) {
        EXPECT_EQ(f["state"], "done") << f.dump();
        EXPECT_TRUE(f["verified"].get<bool>()) << f.dump();
    }
    const json &jobs = r["switches"]["jobs"];
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0]["fid"], 1);
    EXPECT_EQ(jobs[0]["ranks"], 16);
    EXPECT_EQ(jobs[0]["root"].get<std::string>().rfind("core", 0), 0u) << jobs.dump();
    // 2 iterations x 4 chunks, each at least once per switch of the tree.
    EXPECT_GE(counter(r, "tor", "up"), 8u * 8) << r["switches"].dump();
    EXPECT_GE(counter(r, "agg", "up"), 8u * 4) << r["switches"].dump();
    EXPECT_GE(counter(r, "core", "completed"), 8u) << r["switches"].dump();
    EXPECT_GE(counter(r, "agg", "down"), 8u * 4) << r["switches"].dump();
    EXPECT_GE(counter(r, "tor", "down"), 8u * 8) << r["switches"].dump();
}

TEST_F(FatTreeInc, AllReduceAggregatedAtEveryTier) {
    const std::string cm = gen("inc.cm", {"--size", "64K"});
    const auto [status, r] = replay(cm, "switch");
    EXPECT_EQ(status, 0) << r.dump();
    check_switch_replay(r, 240);
}

TEST_F(FatTreeInc, LossOnEveryLinkCostsRetransmissionsNotSums) {
    const std::string cm = gen("inc-loss.cm", {"--size", "64K"});
    const auto c = cli(
        {"chaos", "--topo", yaml_, "--prefix", prefix_, "--all-links", "--xdp", "--loss", "2%"});
    ASSERT_EQ(c.status, 0) << c.err;
    const auto [status, r] = replay(cm, "switch");
    cli({"chaos", "--topo", yaml_, "--prefix", prefix_, "--all-links", "--xdp", "--off"});
    EXPECT_EQ(status, 0) << r.dump();
    check_switch_replay(r, 240);
    EXPECT_GT(r["switches"]["hosts"]["retransmissions"].get<uint64_t>(), 0u)
        << r["switches"].dump();
}

TEST_F(FatTreeInc, IncMovesFewerBytesOverTheCore) {
    const std::string inc = gen("cmp-inc.cm", {"--size", "256K"});
    const std::string plain = gen("cmp-plain.cm", {"--size", "256K", "--no-inc"});
    const auto [si, ri] = replay(inc, "switch");
    ASSERT_EQ(si, 0) << ri.dump();
    const auto [sp, rp] = replay(plain, "host");
    ASSERT_EQ(sp, 0) << rp.dump();
    EXPECT_EQ(rp["aggregation"], "none");
    const uint64_t core_inc = ri["tiers"].value("agg-core", uint64_t(0));
    const uint64_t core_plain = rp["tiers"].value("agg-core", uint64_t(0));
    // Per chunk, without INC the 12 senders outside pod 0 cross two
    // Agg-core links to their aggregator and their results two back (48
    // chunk copies); with INC one partial up and one result down per pod (8).
    EXPECT_GT(core_plain, 0u);
    EXPECT_LT(core_inc * 2, core_plain) << "INC " << core_inc << " vs plain " << core_plain;
}

} // namespace
