// SPDX-License-Identifier: BSD-2-Clause
// The RoCEv2 tree under hostile input and faults (docs/ROCE.md §3): INC_Emulation's
// 1-2-4 tree with one more host, x0, below leaf s1 that is no worker
// (tree124_intruder.yaml). Forged SENDs from x0 never change a result; a
// killed worker, the switches' engines reloaded mid-run, or a worker
// restarted alone give clear errors, never a hang or a wrong result; the
// job runs again once `incxdp rules apply` reset it.
#include "../e2e/tree_fixture.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <future>
#include <thread>
#include <utility>

namespace incxdp::test {
namespace {

class TreeIntruder : public TreeTopology {
  protected:
    static void SetUpTestSuite()
    {
        bring_up(std::string(INCXDP_SOURCE_DIR) + "/tests/isolation/tree124_intruder.yaml", "ixi");
    }
    static void TearDownTestSuite() { tear_down(); }

    // Waits (up to 30 s) until switch sw has sent 2000 aggregates up since
    // `before` (its roce_up then): the job is running.
    void wait_until_running(const std::string &sw, uint64_t before)
    {
        for (int i = 0; i < 600 && stats(sw)["roce_up"] < before + 2000; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_GE(stats(sw)["roce_up"], before + 2000) << "the job never got going";
    }

    void expect_the_job_runs_again()
    {
        ASSERT_EQ(rules_apply().status, 0);
        auto res = run_with([](size_t r) { return worker(r, "4M", "60"); });
        for (size_t r = 0; r < ranks_.size(); r++)
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos) << "rank " << r << ":\n"
                                                                      << res[r].out << res[r].err;
    }

    static std::vector<std::string> worker(size_t rank, const std::string &size, const std::string &deadline)
    {
        return {INCXDP_WORKER, "--topo", file_, "--job", "1", "--rank", std::to_string(rank), "--transport",
                "roce", "--size", size, "--dtype", "int32", "--verify", "--deadline", deadline};
    }

    // Ranks run in their namespaces, and `extra` (argv per node) alongside.
    std::vector<proc::ProcResult> run_with(const std::function<std::vector<std::string>(size_t)> &argv_of,
                                           const std::vector<std::pair<std::string, std::vector<std::string>>> &extra = {})
    {
        std::vector<std::future<proc::ProcResult>> futs;
        for (size_t r = 0; r < ranks_.size(); r++)
            futs.push_back(std::async(std::launch::async, [&, r] { return in_node(ranks_[r], argv_of(r)); }));
        for (const auto &[node, argv] : extra)
            futs.push_back(std::async(std::launch::async, [&, node, argv] { return in_node(node, argv); }));
        std::vector<proc::ProcResult> res;
        for (auto &f : futs)
            res.push_back(f.get());
        return res;
    }
};

// x0 forges h0's SENDs into s1 (own MAC + h0's IP/port/QPN; h0's MAC too;
// random BTHs) with correct ICRCs: first alone, right after the job was
// installed, at the PSNs in the order s1 expects them from h0 (taking any
// would put x0's values in place of h0's first contributions); then at
// random PSNs of the first 1024 messages while all four ranks run. Every
// rank's result stays exact, and s1 counts the forgeries as unknown
// connections (the frame's MAC/IP or port is not the QPN's peer).
TEST_F(TreeIntruder, ForgedRoceFramesFromANonWorkerNeverChangeAResult)
{
    ASSERT_EQ(rules_apply().status, 0);
    auto t = topo::Topology::load_file(file_);
    const auto plan = topo::plan_tree(t, 1);
    const topo::RoceConn &h0 = plan.conn_of_rank(0);
    ASSERT_EQ(h0.parent, "s1");
    const std::string s1_to_x0 = topo::mac_to_string(t.switch_port_for("s1", "x0").mac);
    const std::string x0_mac = topo::mac_to_string(t.host_iface_for("x0", "s1").mac);
    auto before = stats("s1");

    const std::vector<std::string> spoof = {
        "/usr/bin/python3", std::string(INCXDP_SOURCE_DIR) + "/tests/isolation/roce_spoofer.py", "--own-mac",
        x0_mac, "--own-ip", t.node("x0").ip, "--switch-mac", s1_to_x0, "--switch-ip", t.node("s1").ip,
        "--victim-mac", topo::mac_to_string(h0.child_mac), "--victim-ip", h0.child_ip, "--victim-sport",
        std::to_string(h0.child_sport), "--qpn", std::to_string(h0.parent_qpn), "--up-base",
        std::to_string(h0.up_base), "--seconds", "3"};
    auto in_order = spoof;
    in_order.back() = "1";
    in_order.push_back("--in-order");
    auto first = in_node("x0", in_order);
    ASSERT_EQ(first.status, 0) << first.out << first.err;
    auto mid = stats("s1");
    EXPECT_GT(mid["roce_unknown_qp"], before["roce_unknown_qp"]) << "x0's frames did not reach s1's check";
    EXPECT_EQ(mid["roce_absorbed"] + mid["roce_ack"] + mid["roce_up"],
              before["roce_absorbed"] + before["roce_ack"] + before["roce_up"])
        << "s1 took a forged SEND";

    auto res = run_with([](size_t r) { return worker(r, "64M", "60"); }, {{"x0", spoof}});
    for (size_t r = 0; r < ranks_.size(); r++) {
        EXPECT_EQ(res[r].status, 0) << "rank " << r << ":\n" << res[r].out << res[r].err;
        EXPECT_NE(res[r].out.find("verify OK"), std::string::npos) << "rank " << r << ":\n" << res[r].out;
    }
    const auto &sp = res.back();
    ASSERT_EQ(sp.status, 0) << sp.out << sp.err;
    auto sent = nlohmann::json::parse(sp.out), sent_first = nlohmann::json::parse(first.out);
    uint64_t forged = 0;
    for (const auto *j : {&sent, &sent_first})
        forged += (*j)["own-mac"].get<uint64_t>() + (*j)["full"].get<uint64_t>() + (*j)["random"].get<uint64_t>();
    ASSERT_GT(sent["full"].get<uint64_t>(), 0u) << sp.out;

    auto after = stats("s1");
    auto grew = [&](const char *k) { return after[k] - before[k]; };
    // Forged SENDs end as unknown connections (a veth ring may drop some on
    // a busy machine, hence <=); random BTHs anywhere among the refusals.
    EXPECT_GT(grew("roce_unknown_qp"), 0u);
    EXPECT_LE(grew("roce_unknown_qp"), forged);
}

// SIGKILL on rank 3 a moment into a 256 MiB AllReduce: the other ranks fail
// with a timeout naming the job (within --deadline, the test's own timeout
// catches a hang), none with a wrong result; after `incxdp rules apply` the
// job runs again.
TEST_F(TreeIntruder, KilledWorkerGivesTheOthersAClearErrorAndTheJobRunsAgain)
{
    ASSERT_EQ(rules_apply().status, 0);
    auto res = run_with([](size_t r) {
        auto argv = worker(r, "256M", "3");
        if (r == 3)
            argv.insert(argv.begin(), {"timeout", "-s", "KILL", "1"});
        return argv;
    });
    EXPECT_EQ(res[3].status, 128 + 9) << "rank 3 was not killed: " << res[3].out << res[3].err;
    for (size_t r : {0, 1, 2}) {
        EXPECT_TRUE(timed_out_clearly(res[r])) << "rank " << r << " status " << res[r].status << ":\n"
                                               << res[r].out << res[r].err;
        EXPECT_EQ(res[r].out.find("verify FAILED"), std::string::npos) << "rank " << r << ": " << res[r].out;
    }
    expect_the_job_runs_again();
}

// Every switch's engine unloaded and loaded again, with its rules, while a
// 256 MiB AllReduce runs: the connections restart at their first PSN and
// the slots are empty, so the hosts, far ahead, cannot go on. Every rank
// stops with a clear timeout (none hangs, none takes a wrong result); the
// job then runs again from the fresh state (docs/ROCE.md §4).
TEST_F(TreeIntruder, EnginesReloadedMidRunGiveClearErrorsNeverAWrongResult)
{
    ASSERT_EQ(rules_apply().status, 0);
    auto before = stats("s1")["roce_up"];
    auto workers = std::async(std::launch::async,
                              [this] { return run_with([](size_t r) { return worker(r, "256M", "3"); }); });
    // Once results flow (the workers first fill 256 MiB of data).
    wait_until_running("s1", before);
    auto clear = cli({"rules", "clear", file_, "--prefix", prefix_, "--pin-root", pin_root_, "--unload"});
    EXPECT_EQ(clear.status, 0) << clear.err;
    EXPECT_EQ(rules_apply().status, 0);
    auto res = workers.get();
    for (size_t r = 0; r < res.size(); r++) {
        EXPECT_EQ(res[r].out.find("verify FAILED"), std::string::npos) << "rank " << r << ": " << res[r].out;
        EXPECT_TRUE(timed_out_clearly(res[r])) << "rank " << r << " status " << res[r].status << ":\n"
                                               << res[r].out << res[r].err;
    }
    expect_the_job_runs_again();
}

// Documented behaviour (docs/ROCE.md §4): a worker restarted alone starts
// its connection over at idx 0, which the switch finished long ago; it
// cannot rejoin, and neither can the others go on without it. Everyone
// stops with a clear timeout; `incxdp rules apply` and all workers again.
TEST_F(TreeIntruder, RestartedWorkerAloneCannotRejoinTheRun)
{
    ASSERT_EQ(rules_apply().status, 0);
    auto before = stats("s2")["roce_up"];
    auto first = std::async(std::launch::async,
                            [this] { return run_with([](size_t r) { return worker(r, "256M", "3"); }); });
    // Rank 3 (below s2) is killed once results flow, then started again.
    wait_until_running("s2", before);
    proc::run({"pkill", "-KILL", "-f", "incxdp-worker --topo " + file_ + " --job 1 --rank 3 "});
    auto again = in_node(ranks_[3], worker(3, "256M", "3"));
    auto res = first.get();
    EXPECT_EQ(res[3].status, 128 + 9) << "rank 3 was not killed: " << res[3].out << res[3].err;
    res[3] = again;
    for (size_t r = 0; r < res.size(); r++) {
        EXPECT_EQ(res[r].out.find("verify FAILED"), std::string::npos) << "rank " << r << ": " << res[r].out;
        EXPECT_TRUE(timed_out_clearly(res[r])) << "rank " << r << " status " << res[r].status << ":\n"
                                               << res[r].out << res[r].err;
    }
    expect_the_job_runs_again();
}

} // namespace
} // namespace incxdp::test
