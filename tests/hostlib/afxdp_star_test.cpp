// SPDX-License-Identifier: BSD-2-Clause
// Four workers AllReduce through the XDP switch over the AF_XDP transport
// (root): results verified, the hosts' own XDP program (incxdp_pass) back on
// their interfaces afterwards, and the UDP transport working again there.
#include "star_fixture.h"

#include <nlohmann/json.hpp>

namespace incxdp::test {
namespace {

class AfXdpStar : public StarTopology {
  protected:
    // incxdp-worker on all ranks; extra args after the common ones.
    void run_all(const std::string &size, const std::string &dtype,
                 const std::vector<std::string> &extra, int iters = 1)
    {
        reset_job();
        auto res = on_all_workers([&](int r) {
            std::vector<std::string> argv = {INCXDP_WORKER, "--topo", star_file(), "--job", "1", "--rank",
                                             std::to_string(r), "--size", size, "--dtype", dtype, "--iters",
                                             std::to_string(iters), "--verify", "--deadline", "60"};
            argv.insert(argv.end(), extra.begin(), extra.end());
            return argv;
        });
        std::string what = size + " " + dtype;
        for (const auto &e : extra)
            what += " " + e;
        for (size_t r = 0; r < res.size(); r++) {
            EXPECT_EQ(res[r].status, 0) << what << ", rank " << r << ":\n" << res[r].out << res[r].err;
            EXPECT_NE(res[r].out.find("verify OK"), std::string::npos)
                << what << ", rank " << r << ": no verification reported:\n" << res[r].out << res[r].err;
            // The rx ring holds the window (HOSTLIB.md §5): the kernel drops nothing for us.
            EXPECT_NE(res[r].out.find("rx drops 0,"), std::string::npos)
                << what << ", rank " << r << ":\n" << res[r].out;
        }
    }

    // The XDP program attached to a worker's eth0, by name.
    static std::string host_prog(int rank)
    {
        auto r = in_node("w" + std::to_string(rank), {"ip", "-j", "-d", "link", "show", "dev", "eth0"});
        if (r.status != 0)
            return "?";
        auto j = nlohmann::json::parse(r.out);
        try {
            return j.at(0).at("xdp").at("prog").at("name").get<std::string>();
        } catch (const std::exception &) {
            return "none";
        }
    }

    void expect_pass_programs_back()
    {
        for (int r = 0; r < 4; r++)
            EXPECT_EQ(host_prog(r), "incxdp_pass") << "w" << r << "'s eth0 after the AF_XDP transport closed";
    }
};

TEST_F(AfXdpStar, Int32SumLiveFramesFromOneElementTo64MiB)
{
    // 1, 833 elements (one over a full packet), 1 MiB, 64 MiB.
    for (const char *size : {"4", "3332", "1M", "64M"})
        run_all(size, "int32", {"--transport", "afxdp"});
    expect_pass_programs_back();
}

TEST_F(AfXdpStar, Float32AndMaxThroughTheTxRing)
{
    run_all("1M", "float32", {"--transport", "afxdp", "--xdp-tx", "ring"});
    run_all("100000", "int32", {"--transport", "afxdp", "--xdp-tx", "ring", "--op", "max"});
    expect_pass_programs_back();
}

TEST_F(AfXdpStar, SeveralCollectivesSmallBatches)
{
    run_all("300K", "float32", {"--transport", "afxdp", "--batch", "4", "--op", "min"}, 3);
    expect_pass_programs_back();
}

// The transports interoperate per rank (the switch cannot tell), and after
// the AF_XDP runs the hosts' UDP path is intact.
TEST_F(AfXdpStar, MixedTransportsThenUdpAgain)
{
    reset_job();
    auto res = on_all_workers([&](int r) {
        std::vector<std::string> argv = {INCXDP_WORKER, "--topo", star_file(), "--job", "1", "--rank",
                                         std::to_string(r), "--size", "1M", "--verify", "--deadline", "60",
                                         "--transport", r % 2 ? "afxdp" : "udp"};
        return argv;
    });
    for (size_t r = 0; r < res.size(); r++)
        EXPECT_EQ(res[r].status, 0) << "rank " << r << ":\n" << res[r].out << res[r].err;
    run_all("1M", "int32", {"--transport", "udp"});
    run_all("1M", "int32", {"--transport", "udp", "--no-gso"});
    run_all("1M", "int32", {"--transport", "udp", "--udp-gro"});
    expect_pass_programs_back();
}

// The carrier names and the old transport names, mixed per rank: each rank's
// JSON names the pair it opened; a carrier the native protocol cannot use is
// refused before anything is opened, saying why.
TEST_F(AfXdpStar, CarrierNamesAndTheOpenedPair)
{
    const std::vector<std::vector<std::string>> flags = {
        {"--carrier", "socket"}, {"--carrier", "af_xdp"}, {"--transport", "udp"}, {"--transport", "afxdp"}};
    const char *opened[] = {"native/socket", "native/af_xdp", "native/socket", "native/af_xdp"};
    reset_job();
    auto res = on_all_workers([&](int r) {
        std::vector<std::string> argv = {INCXDP_WORKER, "--topo", star_file(), "--job", "1", "--rank",
                                         std::to_string(r), "--size", "1M", "--verify", "--deadline", "60", "-j"};
        argv.insert(argv.end(), flags[r].begin(), flags[r].end());
        return argv;
    });
    for (size_t r = 0; r < res.size(); r++) {
        ASSERT_EQ(res[r].status, 0) << "rank " << r << ":\n" << res[r].out << res[r].err;
        auto j = nlohmann::json::parse(res[r].out);
        EXPECT_EQ(j.value("transport", ""), opened[r]) << "rank " << r;
        EXPECT_EQ(j.value("ok", false), true) << "rank " << r;
    }
    auto refused = in_node("w0", {INCXDP_WORKER, "--topo", star_file(), "--rank", "0", "--carrier", "verbs"});
    EXPECT_EQ(refused.status, 1) << refused.out << refused.err;
    EXPECT_NE(refused.err.find("native/verbs: an RDMA device carries RoCEv2 RC connections only"),
              std::string::npos)
        << refused.err;
    expect_pass_programs_back();
}

} // namespace
} // namespace incxdp::test
