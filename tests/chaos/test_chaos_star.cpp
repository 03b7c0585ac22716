// SPDX-License-Identifier: BSD-2-Clause
// AllReduce under loss: the star topology with 5% loss and 1% duplication
// on both directions of every link (`incxdp chaos --all-links`), four
// incxdp-worker processes, results verified bit-exact (int32) or within the
// documented bound (float32). The workers must have retransmitted and the
// injector must have dropped and duplicated frames on every link.
#include "star_fixture.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <map>

namespace incxdp::test {
namespace {

using nlohmann::json;

constexpr const char *kLoss = "5%";
constexpr const char *kDup = "1%";

struct RunSpec {
    std::string size;
    std::string dtype = "int32";
    std::string wire = "native";
};

struct RunOutcome {
    uint64_t retransmissions = 0, timeouts = 0, duplicates = 0;
};

class ChaosStar : public StarTopology {
  protected:
    static inline std::string chaos_root_;
    static inline bool chaos_on_ = false;
    static inline std::optional<CleanupOnInterrupt> chaos_interrupt_;

    static proc::ProcResult chaos(std::vector<std::string> args) {
        std::vector<std::string> argv = {INCXDP_CLI,    "chaos",     "--topo",
                                         star_file(),   "--prefix",  prefix_,
                                         "--all-links", "--pin-dir", chaos_root_};
        argv.insert(argv.end(), args.begin(), args.end());
        return proc::run(argv);
    }

    static void SetUpTestSuite() {
        StarTopology::SetUpTestSuite();
        if (!setup_error_.empty() || !up_)
            return;
        chaos_root_ = "/sys/fs/bpf/incxdp-chaos-e2e-" + std::to_string(getpid());
        chaos_on_ = true; // before: a half-applied plan is removed too
        // Registered after the topology's: runs before it.
        chaos_interrupt_.emplace([root = chaos_root_] { std::filesystem::remove_all(root); });
        auto r = chaos({"--loss", kLoss, "--dup", kDup});
        if (r.status != 0)
            setup_error_ = "incxdp chaos --all-links failed: " + r.err;
    }

    static void TearDownTestSuite() {
        // The injectors go before the namespaces: their pins would outlive them.
        if (chaos_on_) {
            auto r = chaos({"--off"});
            if (r.status != 0)
                ADD_FAILURE() << "incxdp chaos --off: " << r.err;
            proc::run({INCXDP_CLI, "chaos", "--prune", "--pin-dir", chaos_root_});
            rmdir(chaos_root_.c_str());
            chaos_on_ = false;
            chaos_interrupt_.reset();
        }
        StarTopology::TearDownTestSuite();
    }

    // The injector's state on every hook of the plan.
    static json chaos_status() {
        auto r = chaos({"-j"});
        EXPECT_EQ(r.status, 0) << r.err;
        return r.status == 0 ? json::parse(r.out) : json::array();
    }

    static std::string diagnostics() {
        auto st = chaos({});
        auto eng = cli({"stats"});
        return "chaos:\n" + st.out + st.err + "engine:\n" + eng.out + eng.err;
    }

    RunOutcome allreduce(const RunSpec &s) {
        reset_job();
        const std::string what = s.size + " " + s.dtype + " " + s.wire;
        auto res = on_all_workers([&](int r) {
            return std::vector<std::string>{INCXDP_WORKER, "--topo",   star_file(),       "--job",
                                            "1",           "--rank",   std::to_string(r), "--size",
                                            s.size,        "--dtype",  s.dtype,           "--wire",
                                            s.wire,        "--verify", "--deadline",      "300",
                                            // tc's injector sits on the stack's path, which
                                            // AF_XDP frames (the auto default) bypass
                                            "--transport", "udp", "-j"};
        });
        RunOutcome o;
        bool failed = false;
        for (size_t r = 0; r < res.size(); r++) {
            const auto &p = res[r];
            EXPECT_EQ(p.status, 0) << what << ", rank " << r << ":\n" << p.out << p.err;
            json j;
            try {
                j = json::parse(p.out);
            } catch (const std::exception &e) {
                ADD_FAILURE() << what << ", rank " << r << ": no JSON (" << e.what() << "):\n"
                              << p.out << p.err;
                failed = true;
                continue;
            }
            EXPECT_TRUE(j.value("ok", false)) << what << ", rank " << r << ": " << j.dump();
            if (!j.value("ok", false))
                failed = true;
            if (!j.contains("iterations") || j["iterations"].size() != 1) {
                ADD_FAILURE() << what << ", rank " << r << ": no iteration reported: " << j.dump();
                failed = true;
                continue;
            }
            const json &it = j["iterations"][0];
            EXPECT_EQ(it.value("verify", ""), "ok") << what << ", rank " << r << ": " << it.dump();
            o.retransmissions += it.value("retransmissions", uint64_t{0});
            o.timeouts += it.value("timeouts", uint64_t{0});
            o.duplicates += it.value("duplicates", uint64_t{0});
            std::printf(
                "[ chaos    ] %s rank %zu: %.3f s, %.1f MB/s, retx %llu, dup results %llu\n",
                what.c_str(), r, it.value("seconds", 0.0), it.value("algbw_MBps", 0.0),
                static_cast<unsigned long long>(it.value("retransmissions", uint64_t{0})),
                static_cast<unsigned long long>(it.value("duplicates", uint64_t{0})));
        }
        if (failed)
            ADD_FAILURE() << what << " failed; state after the run:\n" << diagnostics();
        return o;
    }
};

TEST_F(ChaosStar, InjectorIsOnEveryDirectionOfEveryLink) {
    json st = chaos_status();
    // star: four host-switch links, each faulted at the host's egress and ingress.
    ASSERT_EQ(st.size(), 8u) << st.dump(2);
    for (const auto &h : st) {
        EXPECT_TRUE(h["attached"].get<bool>()) << h.dump();
        EXPECT_EQ(h["loss"], kLoss) << h.dump();
        EXPECT_EQ(h["dup"], kDup) << h.dump();
        EXPECT_EQ(h["corrupt"], "0%") << h.dump();
    }
}

TEST_F(ChaosStar, Int32BitExactFromOneElementTo256MiB) {
    uint64_t retx_large = 0;
    for (const char *size : {"4", "1M", "64M", "256M"}) {
        RunOutcome o = allreduce({size});
        if (std::string(size) != "4") {
            // Hundreds of packets per rank or more at ~10% round-trip loss.
            EXPECT_GT(o.retransmissions, 0u)
                << size << ": no retransmission under " << kLoss << " loss";
            retx_large += o.retransmissions;
        }
    }
    EXPECT_GT(retx_large, 0u);

    // Every hook carried traffic and faulted it at the set rates: counts
    // within 6 standard deviations of the binomial mean (a false alarm is a
    // ~1e-9 event). Counted per skb: with UDP GSO/GRO one skb is a batch.
    auto expect_binomial = [](double k, double n, double p, const std::string &what) {
        EXPECT_NEAR(k, n * p, 6 * std::sqrt(n * p * (1 - p)) + 1) << what;
    };
    for (const auto &h : chaos_status()) {
        const auto &c = h["counters"];
        const std::string where = h["netns"].get<std::string>() + " " +
                                  h["iface"].get<std::string>() + " " +
                                  h["hook"].get<std::string>() + ": " + h.dump();
        const double seen = c["seen"].get<double>(), passed = c["passed"].get<double>();
        ASSERT_GT(seen, 1000) << where;
        EXPECT_GT(c["dropped"].get<uint64_t>(), 0u) << where;
        EXPECT_GT(c["duplicated"].get<uint64_t>(), 0u) << where;
        EXPECT_EQ(c["dup_failed"].get<uint64_t>(), 0u) << where;
        expect_binomial(c["dropped"].get<double>(), seen, 0.05, "dropped, " + where);
        expect_binomial(c["duplicated"].get<double>(), passed, 0.01, "duplicated, " + where);
    }
    // The engine saw the retransmissions: dropped into incomplete sets or
    // answered from completed ones.
    auto stats = cli({"stats", "-j"});
    ASSERT_EQ(stats.status, 0) << stats.err;
    json s = json::parse(stats.out);
    EXPECT_GT(s["retx_unicast"].get<uint64_t>() + s["retx_drop"].get<uint64_t>(), 0u) << s.dump(2);
}

TEST_F(ChaosStar, Float32WithinTheBound64MiB) {
    RunOutcome o = allreduce({"64M", "float32"});
    EXPECT_GT(o.retransmissions, 0u);
}

TEST_F(ChaosStar, SwitchmlWire1MiB) {
    RunOutcome o = allreduce({"1M", "int32", "switchml"});
    EXPECT_GT(o.retransmissions, 0u);
}

} // namespace
} // namespace incxdp::test
