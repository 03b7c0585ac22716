// SPDX-License-Identifier: BSD-2-Clause
// Rule compilation without a kernel: a topology's job into the worker table,
// multicast ports and pool the switch gets; worker specs from the CLI.
#include <incxdp/ctl.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace incxdp::ctl {
namespace {

const std::string kStar = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml";

uint32_t ip(const char *s)
{
    return incxdp::util::ipv4_be_or_throw(s, "test address");
}

TEST(JobFromTopology, StarJobOneMapsEveryHostToItsRankAndPort)
{
    JobSpec job = job_from_topology(topo::Topology::load_file(kStar), 1);
    EXPECT_EQ(job.id, 1u);
    EXPECT_EQ(job.switch_ip, ip("10.77.0.254"));
    EXPECT_EQ(job.slots, 128u);
    ASSERT_EQ(job.workers.size(), 4u);
    for (uint16_t r = 0; r < 4; r++) {
        const WorkerSpec &w = job.workers[r];
        EXPECT_EQ(w.rank, r);
        // Hosts come after the one switch: node index r + 1, iface 0.
        EXPECT_EQ(topo::mac_to_string(w.mac), "02:49:58:0" + std::to_string(r + 1) + ":00:00");
        EXPECT_EQ(w.ip, ip(("10.77.0." + std::to_string(r + 1)).c_str()));
        EXPECT_EQ(w.port, 4000);
        EXPECT_EQ(w.iface, "p-w" + std::to_string(r));
    }
}

TEST(JobFromTopology, RankOrderIsTheJobsNotTheFiles)
{
    auto t = topo::Topology::parse(R"(
name: t
subnet: 10.9.0.0/24
switches: [{name: s, ip: 10.9.0.254}]
hosts: [{name: a, ip: 10.9.0.1}, {name: b, ip: 10.9.0.2}]
links: [[a, s], [b, s]]
jobs: [{id: 5, switch: s, workers: [b, a], worker_port: 4100, slots: 16}]
)");
    JobSpec job = job_from_topology(t, 5);
    ASSERT_EQ(job.workers.size(), 2u);
    EXPECT_EQ(job.workers[0].ip, ip("10.9.0.2"));
    EXPECT_EQ(job.workers[0].iface, "p-b");
    EXPECT_EQ(job.workers[1].iface, "p-a");
    EXPECT_EQ(job.workers[1].port, 4100);
    EXPECT_EQ(job.slots, 16u);
}

TEST(JobFromTopology, UnknownJobIsAnError)
{
    EXPECT_THROW(job_from_topology(topo::Topology::load_file(kStar), 9), topo::TopologyError);
}

TEST(WorkerSpec, Parses)
{
    WorkerSpec w = parse_worker_spec("3=02:aa:bb:cc:dd:0e/192.168.7.9:4001@p-x");
    EXPECT_EQ(w.rank, 3);
    EXPECT_EQ(topo::mac_to_string(w.mac), "02:aa:bb:cc:dd:0e");
    EXPECT_EQ(w.ip, ip("192.168.7.9"));
    EXPECT_EQ(w.port, 4001);
    EXPECT_EQ(w.iface, "p-x");
}

TEST(WorkerSpec, RejectsMalformedInputWithTheReason)
{
    struct Case {
        const char *spec, *reason;
    } cases[] = {
        {"02:aa:bb:cc:dd:0e/10.0.0.1:4000@p", "expected RANK=MAC/IP:PORT@IFACE"},
        {"0=02:aa:bb:cc:dd/10.0.0.1:4000@p", "expected RANK=MAC/IP:PORT@IFACE"},
        {"0=02:aa:bb:cc:dd:0e/10.0.0.1:4000", "expected RANK=MAC/IP:PORT@IFACE"},
        {"0=02:aa:bb:cc:dd:0e/10.0.0.300:4000@p", "not an IPv4 address"},
        {"0=02:aa:bb:cc:dd:0e/10.0.0.1:0@p", "UDP port 0 out of range"},
        {"0=02:aa:bb:cc:dd:0e/10.0.0.1:70000@p", "out of range"},
        {"32=02:aa:bb:cc:dd:0e/10.0.0.1:4000@p", "rank 32 out of range"},
        {"0=02:aa:bb:cc:dd:zz/10.0.0.1:4000@p", "expected RANK=MAC/IP:PORT@IFACE"},
        {"99999999999999999999999=02:aa:bb:cc:dd:0e/10.0.0.1:4000@p", "out of range"},
        {"0=02:aa:bb:cc:dd:0e/10.0.0.1:99999999999999999999999@p", "UDP port 99999999999999999999999 out of range"},
    };
    for (const auto &c : cases) {
        try {
            parse_worker_spec(c.spec);
            ADD_FAILURE() << c.spec << " was accepted";
        } catch (const CtlError &e) {
            EXPECT_NE(std::string(e.what()).find(c.reason), std::string::npos) << c.spec << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(c.spec), std::string::npos) << "the error must quote the input";
        }
    }
}

} // namespace
} // namespace incxdp::ctl
