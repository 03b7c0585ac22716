// SPDX-License-Identifier: BSD-2-Clause
// SMI's delivery path and tables (root): on the 8-rank torus every frame for
// a rank reaches it through its AF_XDP sockets (the relay's deliver_xsk
// counts them, deliver_stack stays 0); each rank's CK_S and CK_R are in its
// pinned maps, entry for entry what the cabling gives, with BTF field names;
// re-cabled to the chain, the same namespaces get the chain's tables. Then
// the text cabling format and the 16-rank torus run tests/smi/smi_check.c.
#include "../common/interrupt_cleanup.h"
#include "shell_run.h"
#include "smi_routes.h"

#include <incxdp/smi_topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace tsmi = incxdp::topo::smi;

const std::string kSmiDir = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/smi/";

using incxdp::test::CmdResult;
using incxdp::test::run;

// bpftool's JSON of an entry: the BTF-formatted value where it has one.
json formatted(const json &e) {
    return e.contains("formatted") ? e["formatted"] : e;
}

class SmiXdp : public ::testing::Test {
  protected:
    SmiXdp()
        : prefix_("sx" + std::to_string(getpid()) + "-"),
          text_file_("/tmp/smi-xdp-" + std::to_string(getpid()) + "-torus8.txt"),
          on_interrupt_([this] { take_down(); }) {}

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (network namespaces, XDP)";
    }
    void TearDown() override { take_down(); }

    void take_down() {
        for (const char *f : {"torus8.json", "chain8.json", "torus16.json"})
            run(std::string(INCXDP_CLI) + " topo down " + kSmiDir + f + " --prefix " + prefix_);
        run("rm -rf /sys/fs/bpf/incxdp/smi-" + prefix_ + "*");
        ::unlink(text_file_.c_str());
    }

    CmdResult smi_run(const std::string &file, const std::string &args, int timeout) {
        return run(std::string(INCXDP_CLI) + " smi run " + file + " --prefix " + prefix_ +
                   " --timeout " + std::to_string(timeout) + " " + args);
    }

    void expect_all_ok(const CmdResult &r, int n, const std::string &mode) {
        EXPECT_EQ(r.status, 0) << r.out;
        const std::string of = "/" + std::to_string(n) + " ";
        for (int rank = 0; rank < n; rank++)
            EXPECT_NE(r.out.find("rank " + std::to_string(rank) + of + mode + " ok"),
                      std::string::npos)
                << "rank " << rank << "\n"
                << r.out;
    }

    std::string pin_dir(const tsmi::Cabling &c, int rank) const {
        return "/sys/fs/bpf/incxdp/smi-" + prefix_ + tsmi::host_name(c.fpgas[rank]);
    }

    json dump(const std::string &path) {
        CmdResult r = run("bpftool -j map dump pinned " + path, false);
        EXPECT_EQ(r.status, 0) << path << ": " << r.out;
        return r.status == 0 ? json::parse(r.out) : json::array();
    }

    // Every rank's CK_S and CK_R maps hold the cabling's tables, field by
    // field as bpftool names them from the maps' BTF.
    void expect_tables(const std::string &file) {
        const tsmi::Cabling c = tsmi::load_cabling(file);
        const incxdp::smi::Routes routes = incxdp::smi::compute_routes(c);
        const auto ckr = incxdp::smi::ckr_map_entries();
        for (int rank = 0; rank < c.size(); rank++) {
            const auto cks = incxdp::smi::cks_map_entries(routes, rank);
            const json d = dump(pin_dir(c, rank) + "/" INCXDP_MAP_SMI_CKS);
            ASSERT_EQ(d.size(), cks.size()) << "rank " << rank;
            for (const json &e : d) {
                const json f = formatted(e);
                const size_t k = f["key"].get<size_t>();
                ASSERT_LT(k, cks.size());
                const json &v = f["value"];
                EXPECT_EQ(v["action"].get<int>(), cks[k].action)
                    << file << " rank " << rank << " key " << k;
                if (cks[k].action != INCXDP_SMI_CKS_UNREACHABLE) {
                    EXPECT_EQ(v["ch"].get<int>(), cks[k].ch) << "rank " << rank << " key " << k;
                    EXPECT_EQ(v["hops"].get<int>(), cks[k].hops) << "rank " << rank << " key " << k;
                    EXPECT_EQ(v["cost"].get<uint32_t>(), cks[k].cost)
                        << "rank " << rank << " key " << k;
                }
            }
            const json r = dump(pin_dir(c, rank) + "/" INCXDP_MAP_SMI_CKR);
            ASSERT_EQ(r.size(), ckr.size()) << "rank " << rank;
            for (const json &e : r) {
                const json f = formatted(e);
                const size_t k = f["key"].get<size_t>();
                ASSERT_LT(k, ckr.size());
                EXPECT_EQ(f["value"]["action"].get<int>(), ckr[k].action)
                    << "rank " << rank << " key " << k;
                EXPECT_EQ(f["value"]["ch"].get<int>(), ckr[k].ch)
                    << "rank " << rank << " key " << k;
            }
        }
    }

    // Every frame for every rank came through AF_XDP. `way`: how the ranks
    // sent (INCXDP_XSK_TX): "live", every rank's live frames ran through
    // its relay (bpf/lib/xsk_tx.h); "ring", none did (the tx ring's skbs
    // do not pass the sender's XDP program); else either.
    void expect_xsk_delivery(const std::string &file, const std::string &way = "auto") {
        const tsmi::Cabling c = tsmi::load_cabling(file);
        for (int rank = 0; rank < c.size(); rank++) {
            CmdResult r =
                run(std::string(INCXDP_CLI) + " mesh stats --json --pin-dir " + pin_dir(c, rank),
                    false);
            ASSERT_EQ(r.status, 0) << r.out;
            const json s = json::parse(r.out);
            EXPECT_GT(s["deliver_xsk"].get<uint64_t>(), 0u) << "rank " << rank << ": " << r.out;
            EXPECT_EQ(s["deliver_stack"].get<uint64_t>(), 0u) << "rank " << rank << ": " << r.out;
            if (way == "live") {
                EXPECT_GT(s["sent"].get<uint64_t>(), 0u) << "rank " << rank << ": " << r.out;
            } else if (way == "ring") {
                EXPECT_EQ(s["sent"].get<uint64_t>(), 0u) << "rank " << rank << ": " << r.out;
            }
            // The transport's start-up probe (an empty slot) only.
            EXPECT_EQ(s["tx_bad"].get<uint64_t>(), 1u) << "rank " << rank << ": " << r.out;
        }
    }

    std::string prefix_, text_file_;
    CleanupOnInterrupt on_interrupt_; // last: gone before what it takes down
};

TEST_F(SmiXdp, Torus8ThroughXskThenRecabledToTheChain) {
    const std::string torus = kSmiDir + "torus8.json", chain = kSmiDir + "chain8.json";
    CmdResult r = smi_run(
        torus, "--keep -- env INCXDP_SMI_VERBOSE=1 INCXDP_XSK_TX=live " SMI_CHECK " p2p", 100);
    expect_all_ok(r, 8, "p2p");
    for (int rank = 0; rank < 8; rank++)
        EXPECT_NE(
            r.out.find("SMI rank " + std::to_string(rank) + ": delivery af_xdp, sending af_xdp"),
            std::string::npos)
            << r.out;
    EXPECT_EQ(r.out.find("AF_XDP delivery unavailable"), std::string::npos) << r.out;
    expect_xsk_delivery(torus, "live");
    expect_tables(torus);

    // Re-cabled: the same eight namespaces, cabled as the chain; the same
    // binary runs on the new tables.
    take_down();
    r = smi_run(chain, "--keep -- env INCXDP_XSK_TX=ring " SMI_CHECK " pipeline", 60);
    expect_all_ok(r, 8, "pipeline");
    expect_xsk_delivery(chain, "ring");
    expect_tables(chain);
    // Rank 0 reaches rank 7 in 7 hops on the chain, not the torus's.
    const json d = dump(pin_dir(tsmi::load_cabling(chain), 0) + "/" INCXDP_MAP_SMI_CKS);
    bool seen = false;
    for (const json &e : d)
        if (formatted(e)["key"].get<uint32_t>() == incxdp_smi_cks_key(0, 7)) {
            EXPECT_EQ(formatted(e)["value"]["hops"].get<int>(), 7) << e.dump();
            seen = true;
        }
    EXPECT_TRUE(seen);
}

TEST_F(SmiXdp, TextCablingAndSixteenRanks) {
    // torus8.json's cables, one `A - B` per line.
    std::ifstream in(kSmiDir + "torus8.json");
    const json j = json::parse(in);
    {
        std::ofstream out(text_file_);
        for (const auto &[a, b] : j["connections"].items())
            out << a << " - " << b.get<std::string>() << "\n";
    }
    // INCXDP_MESH_XDP_TX=0: frames still arrive through AF_XDP but leave
    // through the UDP socket (neither the tx ring nor live frames).
    CmdResult r = smi_run(
        text_file_, "-- env INCXDP_SMI_VERBOSE=1 INCXDP_MESH_XDP_TX=0 " SMI_CHECK " pipeline", 60);
    expect_all_ok(r, 8, "pipeline");
    for (int rank = 0; rank < 8; rank++)
        EXPECT_NE(r.out.find("SMI rank " + std::to_string(rank) + ": delivery af_xdp, sending udp"),
                  std::string::npos)
            << r.out;

    r = smi_run(kSmiDir + "torus16.json", "--keep -- " SMI_CHECK " pipeline", 90);
    expect_all_ok(r, 16, "pipeline");
    expect_xsk_delivery(kSmiDir + "torus16.json");
}

} // namespace
