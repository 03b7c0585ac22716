// SPDX-License-Identifier: BSD-2-Clause
// SMI programs on CPU clusters (root): `incxdp smi run` brings SMI's 8-rank
// torus up in namespaces <tag><pid>-*, attaches the relay, installs the
// routes and runs tests/smi/smi_check.c (C, against incxdp/smi.h) once per
// rank; every element is checked by the program. Then the same binary on
// the re-cabled cluster (the chain), and a run whose ranks fail.
#include "shell_run.h"
#include "../common/interrupt_cleanup.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using incxdp::test::CleanupOnInterrupt;

const std::string kSmiDir = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/smi/";

using incxdp::test::CmdResult;
using incxdp::test::run;

class SmiCluster : public ::testing::Test {
  protected:
    SmiCluster()
        : prefix_("smi" + std::to_string(getpid()) + "-"), on_interrupt_([this] { take_down(); }) {}

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (network namespaces, XDP)";
    }
    void TearDown() override { take_down(); }

    // Whatever a run left behind: its namespaces and the relays' pins.
    void take_down() {
        for (const char *f : {"torus8.json", "chain8.json"})
            run(std::string(INCXDP_CLI) + " topo down " + kSmiDir + f + " --prefix " + prefix_);
        run("rm -rf /sys/fs/bpf/incxdp/smi-" + prefix_ + "*");
    }

    CmdResult smi_run(const std::string &file, const std::string &program, int timeout) {
        return run(std::string(INCXDP_CLI) + " smi run " + kSmiDir + file + " --prefix " + prefix_ +
                   " --timeout " + std::to_string(timeout) + " -- " + program);
    }

    void expect_all_ok(const CmdResult &r, const std::string &mode) {
        EXPECT_EQ(r.status, 0) << r.out;
        for (int rank = 0; rank < 8; rank++)
            EXPECT_NE(r.out.find("rank " + std::to_string(rank) + "/8 " + mode + " ok"),
                      std::string::npos)
                << "rank " << rank << "\n"
                << r.out;
        EXPECT_NE(r.out.find("smi run: all 8 ranks exited 0"), std::string::npos) << r.out;
    }

    // Nothing of the run is left: smi run took down what it brought up.
    void expect_gone() {
        CmdResult ns = run("ip netns list");
        EXPECT_EQ(ns.out.find(prefix_), std::string::npos) << ns.out;
        CmdResult pins = run("ls /sys/fs/bpf/incxdp/");
        EXPECT_EQ(pins.out.find("smi-" + prefix_), std::string::npos) << pins.out;
    }

    std::string prefix_;
    CleanupOnInterrupt on_interrupt_; // last: gone before what it takes down
};

TEST_F(SmiCluster, Torus8EveryOperationValueByValue) {
    CmdResult r = smi_run("torus8.json", std::string(SMI_CHECK) + " slow p2p coll pipeline", 150);
    expect_all_ok(r, "slow");
    // The slow receiver (rank 5) reports its high-water mark; the program
    // fails if it passed the channel's buffer.
    EXPECT_NE(r.out.find("rank 5: slow receiver: 20000 elements"), std::string::npos) << r.out;
    expect_gone();
}

TEST_F(SmiCluster, RecabledClusterSameBinary) {
    // The chain: the far rank is up to 7 hops away; only the tables change.
    CmdResult r = smi_run("chain8.json", std::string(SMI_CHECK) + " pipeline slow", 90);
    expect_all_ok(r, "pipeline");
    expect_gone();
}

// 3% of the frames every link's receiving end sees are dropped in its XDP
// program (`incxdp chaos --xdp`): the link layer resends, no element is lost.
TEST_F(SmiCluster, LossOnEveryLinkCostsResendsNotElements) {
    const std::string file = kSmiDir + "torus8.json";
    // Up, relays and routes, kept for the runs below (TearDown takes it down).
    CmdResult up = run(std::string(INCXDP_CLI) + " smi run " + file + " --prefix " + prefix_ +
                       " --keep -- true");
    ASSERT_EQ(up.status, 0) << up.out;
    CmdResult chaos = run(std::string(INCXDP_CLI) + " chaos --topo " + file + " --prefix " +
                          prefix_ + " --all-links --xdp --loss 3%");
    ASSERT_EQ(chaos.status, 0) << chaos.out;
    CmdResult r = smi_run("torus8.json", std::string(SMI_CHECK) + " slow coll pipeline", 150);
    expect_all_ok(r, "slow");
    EXPECT_EQ(r.out.find(" 0 resent"), std::string::npos) << "every rank lost and resent frames\n"
                                                          << r.out;
}

// tests/smi/smi_conformance.c, written from SMI's documentation alone (not
// from this project's checker): every type point to point between all pairs
// at once, the collectives with roots 0, 5 and 7, sleeping ends, flushes.
// rot=2 picks the buffer sizes per test; rot=0 (the program's default) gives
// float/1000 elements a 4-packet buffer, where all-pairs traffic can stall.
// Its default buffer sizes once hung all-pairs p2p (a message split by
// credits left its last element unsent); `rot=1` shifts them; `self` sends
// to the rank's own number.
TEST_F(SmiCluster, IndependentConformanceProgramOnTorus8) {
    CmdResult r = smi_run("torus8.json", std::string(SMI_CONFORMANCE) + " self", 120);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("smi_conformance: all checks passed on 8 ranks"), std::string::npos)
        << r.out;
    expect_gone();
    r = smi_run("torus8.json", std::string(SMI_CONFORMANCE) + " rot=1", 120);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("smi_conformance: all checks passed on 8 ranks"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("smi run: all 8 ranks exited 0"), std::string::npos) << r.out;
    expect_gone();
}

TEST_F(SmiCluster, FailedRanksAreNamed) {
    CmdResult r = smi_run("torus8.json",
                          "sh -c 'test $INCXDP_SMI_RANK -ne 3 && test $INCXDP_SMI_RANK -ne 6'", 30);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("2 of 8 ranks failed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rank 3 (fpga-0002:acl1): exit 1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rank 6 (fpga-0004:acl0): exit 1"), std::string::npos) << r.out;
    expect_gone();
}

} // namespace
