// SPDX-License-Identifier: BSD-2-Clause
// Four workers AllReduce through the XDP switch on the star topology.
#include "star_fixture.h"

#include <nlohmann/json.hpp>

namespace incxdp::test {
namespace {

struct RunSpec {
    std::string size;
    std::string dtype = "int32";
    std::string op = "sum";
    std::string wire = "native";
    int iters = 1;
    bool reset = true; // `incxdp job reset` before the run
};

std::string describe(const RunSpec &s)
{
    return s.size + " " + s.dtype + " " + s.op + " " + s.wire;
}

class StarAllreduce : public StarTopology {
  protected:
    void allreduce(const RunSpec &s)
    {
        if (s.reset)
            reset_job();
        auto res = on_all_workers([&](int r) {
            return std::vector<std::string>{INCXDP_WORKER, "--topo", star_file(), "--job", "1", "--rank",
                                            std::to_string(r), "--size", s.size, "--dtype", s.dtype, "--op", s.op,
                                            "--wire", s.wire, "--iters", std::to_string(s.iters), "--verify",
                                            "--deadline", "60"};
        });
        for (size_t r = 0; r < res.size(); r++) {
            EXPECT_EQ(res[r].status, 0) << describe(s) << ", rank " << r << ":\n" << res[r].out << res[r].err;
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos)
                << describe(s) << ", rank " << r << ": no verification reported:\n" << res[r].out;
        }
    }
};

TEST_F(StarAllreduce, Int32SumFromOneElementTo64MiB)
{
    // 1, 15, 16, 833 elements (one over a full packet), 1 MiB, 64 MiB.
    for (const char *size : {"4", "60", "64", "3332", "1M", "64M"})
        allreduce({size});
}

TEST_F(StarAllreduce, Float32SumWithinTheDocumentedBound)
{
    for (const char *size : {"4", "3332", "64M"})
        allreduce({size, "float32"});
}

TEST_F(StarAllreduce, MaxAndMin)
{
    for (const char *op : {"max", "min"}) {
        allreduce({"100000", "int32", op});
        allreduce({"100000", "float32", op});
    }
}

TEST_F(StarAllreduce, SwitchmlWireFromHostlib)
{
    allreduce({"1M", "int32", "sum", "switchml"});
}

TEST_F(StarAllreduce, SeveralCollectivesInOneRun)
{
    allreduce({"256K", "int32", "sum", "native", 5});
}

// The collectives of issue 28 through the worker's default transport
// (Auto): as root in the host namespaces AF_XDP attaches, so no worker
// prints the fallback notice.
TEST_F(StarAllreduce, AllGatherReduceScatterAvgOverAuto)
{
    reset_job();
    const std::vector<std::vector<std::string>> runs = {
        {"--prim", "allgather", "--size", "1M", "--dtype", "float32"},
        {"--prim", "reduce-scatter", "--size", "1M", "--dtype", "int32", "--op", "max"},
        {"--prim", "reduce-scatter", "--size", "1M", "--dtype", "float32", "--op", "avg"},
        {"--size", "100000", "--dtype", "float32", "--op", "avg"},
    };
    for (const auto &extra : runs) {
        auto res = on_all_workers([&](int r) {
            std::vector<std::string> a{INCXDP_WORKER, "--topo", star_file(), "--job", "1", "--rank",
                                       std::to_string(r), "--verify", "--deadline", "60"};
            a.insert(a.end(), extra.begin(), extra.end());
            return a;
        });
        for (size_t r = 0; r < res.size(); r++) {
            EXPECT_EQ(res[r].status, 0) << extra[1] << ", rank " << r << ":\n" << res[r].out << res[r].err;
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos) << extra[1] << ", rank " << r << ":\n"
                                                                      << res[r].out;
            EXPECT_EQ(res[r].err.find("not available"), std::string::npos) << "rank " << r << ":\n" << res[r].err;
        }
    }
}

// Workers that close their communicators leave the slots as a fresh run
// expects them: runs follow each other without `incxdp job reset`, with
// sizes whose chunk counts leave slots used an odd number of times.
TEST_F(StarAllreduce, ConsecutiveRunsWithoutReset)
{
    allreduce({"300K", "int32"});
    for (const char *size : {"3332", "100000", "300K"}) {
        RunSpec s{size, "float32"};
        s.reset = false;
        allreduce(s);
    }
}

// A SwitchML client written from the wire spec alone, not with hostlib: the
// switch was set up only with `incxdp load` and `incxdp job add`.
TEST_F(StarAllreduce, IndependentSwitchmlWorkerWithLostResult)
{
    reset_job();
    cli({"stats", "--reset"});
    for (const char *size : {"1", "3"}) {
        reset_job();
        auto res = on_all_workers([&](int r) {
            std::vector<std::string> argv = {"python3", std::string(INCXDP_SOURCE_DIR) + "/tests/e2e/switchml_worker.py",
                                             "--rank", std::to_string(r), "--world", "4", "--local",
                                             "10.77.0." + std::to_string(r + 1) + ":4000", "--switch", "10.77.0.254",
                                             "--chunks", "300", "--size", size};
            if (r == 2) {
                argv.push_back("--drop-first-result");
                argv.push_back("7");
            }
            return argv;
        });
        for (size_t r = 0; r < res.size(); r++)
            EXPECT_EQ(res[r].status, 0) << "size " << size << " rank " << r << ":\n" << res[r].out << res[r].err;
    }
    auto stats = cli({"stats", "-j"});
    ASSERT_EQ(stats.status, 0) << stats.err;
    auto j = nlohmann::json::parse(stats.out);
    EXPECT_EQ(j["completed"].get<uint64_t>(), 600u) << stats.out;
    EXPECT_GE(j["retx_unicast"].get<uint64_t>(), 2u) << "the lost results must be unicast again:\n" << stats.out;
    EXPECT_EQ(j["egress_tx"].get<uint64_t>(), 4 * j["completed"].get<uint64_t>()) << stats.out;
    EXPECT_EQ(j["unknown_sender"].get<uint64_t>(), 0u) << stats.out;
}

TEST_F(StarAllreduce, BpftoolShowsNamedFields)
{
    auto jobs = in_node("sw", {"bpftool", "map", "dump", "pinned", pin_dir_ + "/incxdp_jobs"});
    ASSERT_EQ(jobs.status, 0) << jobs.err;
    for (const char *field : {"\"nworkers\": 4", "\"pool_base\"", "\"pool_size\": 128", "\"max_elems\": 832"})
        EXPECT_NE(jobs.out.find(field), std::string::npos) << field << " missing from:\n" << jobs.out.substr(0, 2000);
    auto workers = in_node("sw", {"bpftool", "map", "dump", "pinned", pin_dir_ + "/incxdp_workers"});
    ASSERT_EQ(workers.status, 0) << workers.err;
    EXPECT_NE(workers.out.find("\"rank\": 3"), std::string::npos) << workers.out;
    auto slots = in_node("sw", {"bpftool", "-j", "map", "lookup", "pinned", pin_dir_ + "/incxdp_slots", "key", "0",
                                "0", "0", "0"});
    ASSERT_EQ(slots.status, 0) << slots.err;
    for (const char *field : {"\"bitmap\"", "\"remaining\"", "\"vals\""})
        EXPECT_NE(slots.out.find(field), std::string::npos) << field << " missing";
}

} // namespace
} // namespace incxdp::test
