// SPDX-License-Identifier: BSD-2-Clause
// A RoCEv2 aggregation tree (topo/topologies/tree*.yaml) brought up once per
// test suite under a private prefix and pin root, with the engine loaded and
// the tree rules installed on every switch by `incxdp rules apply`, as a
// user would. Torn down (engines, pins, namespaces) whatever happens.
#pragma once

#include "netns_fixture.h"

#include <incxdp/tree.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

namespace incxdp::test {

struct TreeRun {
    std::string prim = "allreduce"; // allreduce|reduce|broadcast|barrier
    std::string size = "1M";
    std::string dtype = "int32";
    std::string op = "sum";
    int root = 0;
    int iters = 1;
    uint32_t elems = 0; // elements per packet; 0 = the default
    bool apply = true;  // `incxdp rules apply` first: a fresh run of the job
    std::vector<std::string> args = {}; // more incxdp-worker options
};

inline std::string describe(const TreeRun &s)
{
    return s.prim + " " + s.size + " " + s.dtype + " " + s.op + " root " + std::to_string(s.root);
}

class TreeTopology : public ::testing::Test {
  protected:
    static inline std::string file_;
    static inline std::string prefix_;
    static inline std::string pin_root_;
    static inline bool up_ = false;
    static inline std::string setup_error_;
    static inline std::vector<std::string> switches_;
    static inline std::vector<std::string> ranks_; // host per rank
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;

    static std::string ns(const std::string &node) { return topo::netns_name(prefix_, node); }
    static std::string pin_dir(const std::string &sw) { return topo::switch_pin_dir(pin_root_, prefix_, sw); }

    static proc::ProcResult in_node(const std::string &node, std::vector<std::string> argv)
    {
        argv.insert(argv.begin(), "--net=/var/run/netns/" + ns(node));
        argv.insert(argv.begin(), "nsenter");
        return proc::run(argv);
    }

    static proc::ProcResult cli(std::vector<std::string> args)
    {
        args.insert(args.begin(), INCXDP_CLI);
        return proc::run(args);
    }

    static proc::ProcResult rules_apply()
    {
        return cli({"rules", "apply", file_, "--prefix", prefix_, "--pin-root", pin_root_, "--mode",
                    INCXDP_E2E_MODE});
    }

    static void bring_up(const std::string &name, const std::string &tag)
    {
        if (geteuid() != 0) {
            setup_error_ = "needs root (network namespaces, XDP)";
            return;
        }
        // A shipped topology by name, or a test's own file by path.
        file_ = name.find('/') == std::string::npos ? topology_file(name) : name;
        prefix_ = tag + std::to_string(getpid()) + "-";
        pin_root_ = "/sys/fs/bpf/incxdp-" + tag + std::to_string(getpid());
        try {
            auto t = topo::Topology::load_file(file_);
            auto plan = topo::plan_tree(t, 1);
            // Assigned, not appended: the members are shared by every suite
            // of this fixture and set up again under --gtest_repeat.
            switches_.clear();
            for (const auto &s : plan.switches)
                switches_.push_back(s.name);
            ranks_ = plan.ranks;
        } catch (const std::exception &e) {
            setup_error_ = std::string("tree plan failed: ") + e.what();
            return;
        }
        // Before the first namespace: a signal during `topo up` finds it.
        on_interrupt_.emplace([file = file_, prefix = prefix_, pins = pin_root_] {
            auto r = cli({"topo", "down", file, "--prefix", prefix, "--pin-root", pins});
            if (r.status != 0)
                std::fprintf(stderr, "incxdp topo down: %s\n", r.err.c_str());
            std::filesystem::remove_all(pins);
        });
        auto r = cli({"topo", "up", file_, "--prefix", prefix_});
        if (r.status != 0) {
            setup_error_ = "incxdp topo up failed: " + r.err;
            return;
        }
        up_ = true;
        r = rules_apply();
        if (r.status != 0)
            setup_error_ = "incxdp rules apply failed: " + r.out + r.err;
    }

    static void tear_down()
    {
        if (!up_) {
            on_interrupt_.reset(); // nothing of ours is up
            return;
        }
        auto r = cli({"topo", "down", file_, "--prefix", prefix_, "--pin-root", pin_root_});
        if (r.status != 0)
            ADD_FAILURE() << "incxdp topo down failed: " << r.err;
        // Engines unloaded, their pin directories and the private root gone.
        if (access(pin_root_.c_str(), F_OK) == 0)
            ADD_FAILURE() << "topo down left " << pin_root_ << " behind";
        up_ = false;
        on_interrupt_.reset();
    }

    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << setup_error_;
        ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    }

    // argv_of(rank) run in every rank's namespace at once; the results by
    // rank, unchecked.
    static std::vector<proc::ProcResult> run_ranks(const std::function<std::vector<std::string>(size_t)> &argv_of)
    {
        std::vector<std::future<proc::ProcResult>> futs;
        for (size_t rank = 0; rank < ranks_.size(); rank++)
            futs.push_back(std::async(std::launch::async, [&, rank] { return in_node(ranks_[rank], argv_of(rank)); }));
        std::vector<proc::ProcResult> res;
        for (auto &f : futs)
            res.push_back(f.get());
        return res;
    }

    // AllReduce 1M, Reduce `reduce_size` to `root`, AllReduce 1M again, each by
    // new workers on other data (seeds seed, seed + 1, seed + 2), none
    // preceded by `incxdp rules apply`.
    void run_without_reapply(const std::string &reduce_size, int root, int seed)
    {
        TreeRun a{"allreduce", "1M"};
        a.apply = false;
        a.args = {"--seed", std::to_string(seed)};
        run(a);
        TreeRun r{"reduce", reduce_size};
        r.root = root;
        r.apply = false;
        r.args = {"--seed", std::to_string(seed + 1)};
        run(r);
        a.args = {"--seed", std::to_string(seed + 2)};
        run(a);
    }

    // Every rank runs incxdp-worker over the RoCE transport; each must exit 0
    // having verified its result.
    std::vector<proc::ProcResult> run(const TreeRun &s)
    {
        if (s.apply) {
            auto r = rules_apply();
            EXPECT_EQ(r.status, 0) << r.err;
        }
        auto res = run_ranks([&](size_t rank) {
            std::vector<std::string> argv = {INCXDP_WORKER, "--topo", file_, "--job", "1", "--rank",
                                             std::to_string(rank), "--transport", "roce", "--prim", s.prim,
                                             "--root", std::to_string(s.root), "--size", s.size, "--dtype",
                                             s.dtype, "--op", s.op, "--iters", std::to_string(s.iters),
                                             "--verify", "--deadline", "120"};
            if (s.elems) {
                argv.push_back("--elems");
                argv.push_back(std::to_string(s.elems));
            }
            argv.insert(argv.end(), s.args.begin(), s.args.end());
            return argv;
        });
        expect_verified(res, describe(s));
        return res;
    }

    // Every worker exited 0 having verified its result.
    static void expect_verified(const std::vector<proc::ProcResult> &res, const std::string &what)
    {
        for (size_t r = 0; r < res.size(); r++) {
            EXPECT_EQ(res[r].status, 0) << what << ", rank " << r << ":\n" << res[r].out << res[r].err;
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos)
                << what << ", rank " << r << ": no verification reported:\n"
                << res[r].out << res[r].err;
        }
    }

    // The number after `key ` in the worker's line ("retx 3, rx drops 0").
    static uint64_t worker_count(const proc::ProcResult &r, const std::string &key)
    {
        auto at = r.out.find(key + " ");
        if (at == std::string::npos) {
            ADD_FAILURE() << "no `" << key << "` in the worker's output:\n" << r.out;
            return UINT64_MAX;
        }
        return std::stoull(r.out.substr(at + key.size() + 1));
    }

    // Counters of one switch's engine; with reset, zeroed after reading.
    std::map<std::string, uint64_t> stats(const std::string &sw, bool reset = false)
    {
        std::vector<std::string> argv = {INCXDP_CLI, "stats", "-j", "--pin-dir", pin_dir(sw)};
        if (reset)
            argv.push_back("--reset");
        auto r = in_node(sw, argv);
        EXPECT_EQ(r.status, 0) << r.err;
        std::map<std::string, uint64_t> out;
        if (r.status == 0) {
            auto j = nlohmann::json::parse(r.out);
            for (auto &[k, v] : j.items())
                if (v.is_number_unsigned())
                    out[k] = v.get<uint64_t>();
        }
        return out;
    }
};

} // namespace incxdp::test
