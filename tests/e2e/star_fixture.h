// SPDX-License-Identifier: BSD-2-Clause
// The star topology brought up once per test suite under a private prefix
// and pin directory, with incxdp loaded on the switch and job 1 installed,
// all through the `incxdp` CLI as a user would. Torn down whatever happens.
#pragma once

#include <incxdp/netns.h>
#include <incxdp/topology.h>
#include "process.h"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <unistd.h>
#include <vector>

namespace incxdp::test {

namespace proc = incxdp::topo::detail;

#ifndef INCXDP_E2E_MODE
#define INCXDP_E2E_MODE "native"
#endif

inline std::string star_file() { return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml"; }

class StarTopology : public ::testing::Test {
  protected:
    static inline std::string prefix_;
    static inline std::string pin_dir_;
    static inline bool up_ = false;
    static inline std::string setup_error_;

    static std::string ns(const std::string &node) { return topo::netns_name(prefix_, node); }

    // `incxdp ARGS --pin-dir D` inside the switch namespace.
    static proc::ProcResult cli(std::vector<std::string> args, bool with_pin_dir = true)
    {
        std::vector<std::string> argv = {"nsenter", "--net=/var/run/netns/" + ns("sw"), INCXDP_CLI};
        argv.insert(argv.end(), args.begin(), args.end());
        if (with_pin_dir) {
            argv.push_back("--pin-dir");
            argv.push_back(pin_dir_);
        }
        return proc::run(argv);
    }

    // Runs argv in the network namespace of `node`.
    static proc::ProcResult in_node(const std::string &node, std::vector<std::string> argv)
    {
        argv.insert(argv.begin(), "--net=/var/run/netns/" + ns(node));
        argv.insert(argv.begin(), "nsenter");
        return proc::run(argv);
    }

    // Runs one command per rank concurrently, each in its worker's namespace.
    static std::vector<proc::ProcResult> on_all_workers(const std::function<std::vector<std::string>(int)> &argv_of,
                                                        int nworkers = 4)
    {
        std::vector<std::future<proc::ProcResult>> futs;
        for (int r = 0; r < nworkers; r++)
            futs.push_back(std::async(std::launch::async, [r, &argv_of] {
                return in_node("w" + std::to_string(r), argv_of(r));
            }));
        std::vector<proc::ProcResult> out;
        for (auto &f : futs)
            out.push_back(f.get());
        return out;
    }

    static void SetUpTestSuite()
    {
        if (geteuid() != 0) {
            setup_error_ = "needs root (network namespaces, XDP)";
            return;
        }
        prefix_ = "ixe" + std::to_string(getpid()) + "-";
        pin_dir_ = "/sys/fs/bpf/incxdp-e2e-" + std::to_string(getpid());
        try {
            topo::up(topo::Topology::load_file(star_file()), prefix_);
            up_ = true;
        } catch (const std::exception &e) {
            setup_error_ = std::string("topology up failed: ") + e.what();
            return;
        }
        auto load = cli({"load", "--mode", INCXDP_E2E_MODE, "--iface", "p-w0", "--iface", "p-w1", "--iface", "p-w2",
                         "--iface", "p-w3"});
        if (load.status != 0) {
            setup_error_ = "incxdp load failed: " + load.err;
            return;
        }
        auto job = cli({"job", "add", "--topo", star_file(), "--job", "1"});
        if (job.status != 0)
            setup_error_ = "incxdp job add failed: " + job.err;
    }

    static void TearDownTestSuite()
    {
        if (!up_)
            return;
        cli({"unload"});
        topo::down(topo::Topology::load_file(star_file()), prefix_);
        up_ = false;
    }

    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << setup_error_;
        ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    }

    // A fresh run of the job: its workers start from reset slots.
    void reset_job()
    {
        auto r = cli({"job", "reset", "1"});
        ASSERT_EQ(r.status, 0) << r.err;
    }
};

} // namespace incxdp::test
