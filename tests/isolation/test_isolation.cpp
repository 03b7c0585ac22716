// SPDX-License-Identifier: BSD-2-Clause
// Two jobs on one switch never mix, and a host that is no worker cannot
// touch a job's slots however it forges its frames.
#include "../e2e/netns_fixture.h"

#include <nlohmann/json.hpp>

namespace incxdp::test {
namespace {

class TwoJobs : public NetnsTopology {
  protected:
    static void SetUpTestSuite() { bring_up(topology_file("twojobs"), "ixi"); }
    static void TearDownTestSuite() { tear_down(); }

    static std::vector<std::string> workers_of(char job)
    {
        std::vector<std::string> v;
        for (int r = 0; r < 4; r++)
            v.push_back(std::string(1, job) + std::to_string(r));
        return v;
    }

    // The worker command of `rank` in job `id`.
    static std::vector<std::string> worker(uint32_t id, int rank, const std::string &size, const std::string &dtype,
                                           int seed)
    {
        return {INCXDP_WORKER, "--topo", topo_file_, "--job", std::to_string(id), "--rank", std::to_string(rank),
                "--size", size, "--dtype", dtype, "--seed", std::to_string(seed), "--verify", "--deadline", "60"};
    }

    static void expect_verified(const std::vector<proc::ProcResult> &res, const std::string &what)
    {
        for (size_t r = 0; r < res.size(); r++) {
            EXPECT_EQ(res[r].status, 0) << what << " rank " << r << ":\n" << res[r].out << res[r].err;
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos) << what << " rank " << r << ":\n" << res[r].out;
        }
    }

    // Packets a worker run with -j sent in all (collectives, barriers, close).
    static uint64_t packets_sent(const proc::ProcResult &r)
    {
        auto j = nlohmann::json::parse(r.out);
        EXPECT_TRUE(j["ok"].get<bool>()) << r.out;
        return j["total"]["packets_sent"].get<uint64_t>();
    }

    nlohmann::json stats()
    {
        auto r = cli({"stats", "-j"});
        EXPECT_EQ(r.status, 0) << r.err;
        return nlohmann::json::parse(r.out);
    }
};

TEST_F(TwoJobs, PoolsAreDisjoint)
{
    auto r = cli({"job", "list", "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto jobs = nlohmann::json::parse(r.out);
    ASSERT_EQ(jobs.size(), 2u);
    uint32_t b1 = jobs[0]["pool_base"], s1 = jobs[0]["pool_size"], b2 = jobs[1]["pool_base"],
             s2 = jobs[1]["pool_size"];
    EXPECT_TRUE(b1 + s1 <= b2 || b2 + s2 <= b1) << r.out;
}

// Both jobs at once, different data (seeds) and dtypes: a single element
// taken from the other job would fail the workers' verification.
TEST_F(TwoJobs, RunningAtOnceTheyNeverMix)
{
    reset_job(1);
    reset_job(2);
    std::vector<std::string> nodes = workers_of('a');
    for (auto &n : workers_of('b'))
        nodes.push_back(n);
    auto res = on_nodes(nodes, [](int i) {
        return i < 4 ? worker(1, i, "16M", "int32", 11) : worker(2, i - 4, "16M", "int32", 22);
    });
    expect_verified({res.begin(), res.begin() + 4}, "job 1");
    expect_verified({res.begin() + 4, res.end()}, "job 2");
    reset_job(1);
    reset_job(2);
    res = on_nodes(nodes, [](int i) {
        return i < 4 ? worker(1, i, "8M", "float32", 33) : worker(2, i - 4, "8M", "int32", 44);
    });
    expect_verified({res.begin(), res.begin() + 4}, "job 1 float32");
    expect_verified({res.begin() + 4, res.end()}, "job 2 int32");
}

// Host m sends forged frames for every slot of job 1 while it runs: with
// its own MAC and a worker's IP and port, with the worker's MAC too (only
// the switch port differs), and native headers claiming rank 1.
TEST_F(TwoJobs, ForgedFramesFromANonWorkerNeverChangeAResult)
{
    auto t = topo::Topology::load_file(topo_file_);
    const std::string sw_mac = topo::mac_to_string(t.switch_port_for("sw", "m").mac);
    const std::string m_mac = topo::mac_to_string(t.host_iface_for("m", "sw").mac);
    const std::string a0_mac = topo::mac_to_string(t.host_iface_for("a0", "sw").mac);
    auto before = stats();
    reset_job(1);
    std::vector<std::string> nodes = workers_of('a');
    nodes.push_back("m");
    auto res = on_nodes(nodes, [&](int i) -> std::vector<std::string> {
        if (i < 4) {
            auto argv = worker(1, i, "32M", "int32", 55);
            argv.push_back("-j");
            return argv;
        }
        return {"python3", std::string(INCXDP_SOURCE_DIR) + "/tests/isolation/spoofer.py", "--own-mac", m_mac,
                "--switch-mac", sw_mac, "--switch-ip", t.node("sw").ip, "--own-ip", t.node("m").ip,
                "--victim-mac", a0_mac, "--victim-ip", t.node("a0").ip, "--victim-port", "4000", "--job", "1",
                "--seconds", "3"};
    });
    for (int r = 0; r < 4; r++) {
        EXPECT_EQ(res[r].status, 0) << "rank " << r << ":\n" << res[r].out << res[r].err;
        EXPECT_NE(res[r].out.find("\"ok\":true"), std::string::npos) << "rank " << r << ": " << res[r].out;
    }
    ASSERT_EQ(res[4].status, 0) << res[4].err;
    auto sent = nlohmann::json::parse(res[4].out);
    auto after = stats();
    auto grew = [&](const char *k) { return after[k].get<uint64_t>() - before[k].get<uint64_t>(); };
    // Forged frames end in the rejecting counters (a veth ring may drop some
    // on a busy machine, hence <=), and none was absorbed.
    const uint64_t full = sent["full"], others = sent["own-mac"].get<uint64_t>() + sent["claim"].get<uint64_t>();
    EXPECT_GT(grew("wrong_port"), 0u) << after.dump();
    EXPECT_LE(grew("wrong_port"), full) << after.dump();
    EXPECT_GT(grew("unknown_sender"), 0u) << after.dump();
    EXPECT_LE(grew("unknown_sender"), others) << after.dump();
    uint64_t worker_packets = 0;
    for (int r = 0; r < 4; r++)
        worker_packets += packets_sent(res[r]);
    // At most: a veth ring may drop a worker's packet too (it is resent).
    EXPECT_LE(grew("consumed") + grew("completed") + grew("retx_unicast") + grew("retx_drop") + grew("stale") +
                  grew("mismatch"),
              worker_packets)
        << "the engine took contributions nobody in job 1 sent: " << after.dump();
}

} // namespace
} // namespace incxdp::test
