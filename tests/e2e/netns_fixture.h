// SPDX-License-Identifier: BSD-2-Clause
// A topology brought up once per test suite under a private prefix and pin
// directory, with incxdp loaded on every port of its switch `sw` and every
// job of the file installed, all through the `incxdp` CLI as a user would.
// Torn down whatever happens.
#pragma once

#include <incxdp/netns.h>
#include <incxdp/topology.h>
#include "process.h"
#include "../common/interrupt_cleanup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace incxdp::test {

namespace proc = incxdp::topo::detail;

#ifndef INCXDP_E2E_MODE
#define INCXDP_E2E_MODE "native"
#endif

inline std::string topology_file(const std::string &name)
{
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

// A worker that gave up with the library's timeout error (exit 1, the
// message naming the job), as it must when its peers or switch go away.
inline bool timed_out_clearly(const proc::ProcResult &r, uint32_t job = 1)
{
    return r.status == 1 && r.err.find("timed out") != std::string::npos &&
           r.err.find("job " + std::to_string(job)) != std::string::npos;
}

class NetnsTopology : public ::testing::Test {
  protected:
    static inline std::string topo_file_;
    static inline std::string prefix_;
    static inline std::string pin_dir_;
    static inline bool up_ = false;
    static inline std::string setup_error_;
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;

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

    // Runs argv_of(i) in the namespace of nodes[i], all concurrently.
    static std::vector<proc::ProcResult> on_nodes(const std::vector<std::string> &nodes,
                                                  const std::function<std::vector<std::string>(int)> &argv_of)
    {
        std::vector<std::future<proc::ProcResult>> futs;
        for (size_t i = 0; i < nodes.size(); i++)
            futs.push_back(std::async(std::launch::async, [i, &nodes, &argv_of] {
                return in_node(nodes[i], argv_of(static_cast<int>(i)));
            }));
        std::vector<proc::ProcResult> out;
        for (auto &f : futs)
            out.push_back(f.get());
        return out;
    }

    // Brings `file` up as namespaces "<tag><pid>-<node>", loads the engine
    // on every port of `sw` and installs every job of the file.
    static void bring_up(const std::string &file, const std::string &tag)
    {
        if (geteuid() != 0) {
            setup_error_ = "needs root (network namespaces, XDP)";
            return;
        }
        topo_file_ = file;
        prefix_ = tag + std::to_string(getpid()) + "-";
        pin_dir_ = "/sys/fs/bpf/incxdp-" + tag + std::to_string(getpid());
        std::vector<std::string> load = {"load", "--mode", INCXDP_E2E_MODE};
        std::vector<uint32_t> jobs;
        try {
            auto t = topo::Topology::load_file(file);
            for (const auto &i : t.node("sw").ifaces) {
                load.push_back("--iface");
                load.push_back(i.name);
            }
            for (const auto &j : t.jobs)
                jobs.push_back(j.id);
            // Before the first namespace: a signal during `up` finds it.
            on_interrupt_.emplace([t, prefix = prefix_, pins = pin_dir_] {
                topo::down(t, prefix);
                std::filesystem::remove_all(pins);
            });
            topo::up(t, prefix_);
            up_ = true;
        } catch (const std::exception &e) {
            setup_error_ = std::string("topology up failed: ") + e.what();
            return;
        }
        auto r = cli(load);
        if (r.status != 0) {
            setup_error_ = "incxdp load failed: " + r.err;
            return;
        }
        for (uint32_t id : jobs) {
            r = cli({"job", "add", "--topo", file, "--job", std::to_string(id)});
            if (r.status != 0) {
                setup_error_ = "incxdp job add failed: " + r.err;
                return;
            }
        }
    }

    static void tear_down()
    {
        if (!up_) {
            on_interrupt_.reset(); // nothing of ours is up
            return;
        }
        cli({"unload"});
        topo::down(topo::Topology::load_file(topo_file_), prefix_);
        up_ = false;
        on_interrupt_.reset();
    }

    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << setup_error_;
        ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    }

    // A fresh run of a job: its workers start from reset slots.
    void reset_job(uint32_t id = 1)
    {
        auto r = cli({"job", "reset", std::to_string(id)});
        ASSERT_EQ(r.status, 0) << r.err;
    }
};

} // namespace incxdp::test
