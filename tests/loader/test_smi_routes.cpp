// SPDX-License-Identifier: BSD-2-Clause
// SMI cabling files and routing tables (topo/smi_topology.h,
// loader/smi_routes.h): both formats and their errors, rank order, costs,
// CK_S/CK_R on SMI's 8-rank torus, the 8-rank chain and a 4x4 torus,
// checked against paths computed by hand. No kernel.
#include "smi_routes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using incxdp::smi::CkrAction;
using incxdp::smi::CksAction;
using incxdp::smi::compute_routes;
using incxdp::smi::rank_path;
using incxdp::topo::TopologyError;
using incxdp::topo::smi::Cabling;
using incxdp::topo::smi::load_cabling;
using incxdp::topo::smi::parse_cabling;

const std::string kDir = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/smi/";

std::string error_of(const std::string &text) {
    try {
        parse_cabling(text, "f");
    } catch (const TopologyError &e) {
        return e.what();
    }
    return "(no error)";
}

TEST(SmiCabling, TextFormatRanksBySortedName) {
    Cabling c = parse_cabling("# two nodes\n"
                              "fpga-0002:acl0:ch0 - fpga-0001:acl1:ch1\n"
                              "\n"
                              "fpga-0001:acl0:ch2 - fpga-0001:acl1:ch3  # in-node\n",
                              "t");
    ASSERT_EQ(c.size(), 3);
    EXPECT_EQ(c.fpgas,
              (std::vector<std::string>{"fpga-0001:acl0", "fpga-0001:acl1", "fpga-0002:acl0"}));
    ASSERT_EQ(c.cables.size(), 2u);
    EXPECT_EQ(c.peer(2, 0).rank, 1);
    EXPECT_EQ(c.peer(2, 0).ch, 1);
    EXPECT_EQ(c.peer(0, 2).rank, 1);
    EXPECT_EQ(c.peer(0, 2).ch, 3);
    EXPECT_EQ(c.peer(0, 0).rank, -1);
}

TEST(SmiCabling, JsonFormatKeepsUncabledFpgas) {
    Cabling c = parse_cabling(R"({"fpgas": {"n2:acl0": "p", "n1:acl0": "q", "n3:acl0": "r"},
                                  "connections": {"n1:acl0:ch1": "n2:acl0:ch0"}})",
                              "j");
    ASSERT_EQ(c.size(), 3);
    EXPECT_EQ(c.fpgas[0], "n1:acl0");
    EXPECT_EQ(c.programs[0], "q");
    EXPECT_EQ(c.programs[1], "p");
    EXPECT_EQ(c.peer(0, 1).rank, 1);
    auto r = compute_routes(c);
    EXPECT_EQ(r.ranks[0].hops[2], -1);
    EXPECT_EQ(r.ranks[0].cks[0][2].action, CksAction::Unreachable);
}

TEST(SmiCabling, ErrorsNameTheLineOrKey) {
    EXPECT_EQ(error_of("a:x:ch0 - b:x:ch0\na:x:ch0 - c:x:ch1\n"),
              "f: line 2: port a:x:ch0 is already cabled");
    EXPECT_EQ(error_of("a:x:ch0 - b:x:ch4\n"), "f: line 1: 'b:x:ch4': QSFP 'ch4' is not ch0..ch3");
    EXPECT_EQ(error_of("a:x:ch0 b:x:ch1\n"),
              "f: line 1: 'a:x:ch0 b:x:ch1' is not 'node:fpga:chN - node:fpga:chN'");
    EXPECT_EQ(error_of("ax:ch0 - b:x:ch1\n"),
              "f: line 1: 'ax:ch0' is not a port (expected node:fpga:chN)");
    EXPECT_EQ(error_of("a:x:ch1 - a:x:ch1\n"), "f: line 1: cable from a:x:ch1 to itself");
    EXPECT_EQ(error_of(R"({"fpgas": {"a:x": ""}, "connections": {"a:x:ch0": "b:x:ch0"}})"),
              "f: connections[\"a:x:ch0\"]: FPGA 'b:x' is not in \"fpgas\"");
    EXPECT_EQ(error_of(R"({"fpgas": {"a:x": "", "b:x": ""},
                          "connections": {"a:x:ch0": "b:x:ch0", "b:x:ch1": "a:x:ch0"}})"),
              "f: connections[\"b:x:ch1\"]: port a:x:ch0 is already cabled");
    EXPECT_EQ(error_of(R"({"fpgas": {"a:x": ""}, "cables": {}})"),
              "f: cables: unknown key (expected \"fpgas\" and \"connections\")");
    EXPECT_EQ(error_of(R"({"connections": {}})"),
              "f: fpgas: missing or not an object {\"node:fpga\": \"program\"}");
    EXPECT_EQ(
        error_of("a-very-long-node:acl0:ch0 - b:x:ch0\n"),
        "f: fpgas: FPGA 'a-very-long-node:acl0' makes the namespace name 'a-very-long-node-acl0', "
        "longer than 12 characters");
    EXPECT_NE(error_of("{ not json").find("f: JSON: "), std::string::npos);
    std::string many;
    for (int i = 0; i < 129; i++)
        many += "n" + std::to_string(i) + ":a:ch0 - m" + std::to_string(i) + ":a:ch0\n";
    EXPECT_EQ(error_of(many), "f: fpgas: 258 FPGAs: at most 256 ranks");
}

// SMI's cluster: rank = 2 * (node - 1) + acl. acl0:ch2-acl1:ch3 and
// acl0:ch3-acl1:ch2 in a node; each acl ring: ch1 -> next node's ch0.
TEST(SmiRoutes, Torus8AgainstHandComputedPaths) {
    Cabling c = load_cabling(kDir + "torus8.json");
    ASSERT_EQ(c.size(), 8);
    EXPECT_EQ(c.fpgas[3], "fpga-0002:acl1");
    auto r = compute_routes(c);
    const auto &r0 = r.ranks[0];
    // To its acl1: both rungs cost one cable; the lower QSFP wins.
    EXPECT_EQ(r0.out_ch[1], 2);
    EXPECT_EQ(r0.hops[1], 1);
    EXPECT_EQ(r0.cost[1], 100);
    EXPECT_EQ(r0.out_ch[2], 1); // next node's acl0, over ch1
    EXPECT_EQ(r0.out_ch[6], 0); // node 4's acl0 wraps to ch0
    // Two nodes away: both ways round the ring cost 201 (one transfer at
    // the middle rank); the lower QSFP wins, through node 4.
    EXPECT_EQ(r0.cost[4], 201);
    EXPECT_EQ(rank_path(c, r, 0, 4), (std::vector<int>{0, 6, 4}));
    // The far corner: 3 cables.
    EXPECT_EQ(r0.hops[5], 3);
    EXPECT_EQ(rank_path(c, r, 0, 5).size(), 4u);
    int max_hops = 0;
    for (int s = 0; s < 8; s++)
        for (int d = 0; d < 8; d++) {
            max_hops = std::max(max_hops, r.ranks[s].hops[d]);
            EXPECT_EQ(r.ranks[s].hops[d], r.ranks[d].hops[s]) << s << "->" << d;
        }
    EXPECT_EQ(max_hops, 3);
    // CK_S per QSFP: ch3 of rank 0 reaches rank 2 fastest by handing to ch1
    // (1 + 100) rather than its own cable to rank 1 (300).
    EXPECT_EQ(r0.cks[3][2].action, CksAction::Via);
    EXPECT_EQ(r0.cks[3][2].ch, 1);
    EXPECT_EQ(r0.cks[1][2].action, CksAction::Out);
    EXPECT_EQ(r0.cks[3][1].action, CksAction::Out); // its own rung
    EXPECT_EQ(r0.cks[2][0].action, CksAction::Local);
    // CK_R: port p belongs to QSFP p % 4's CK.
    EXPECT_EQ(incxdp::smi::ckr_entry(1, 5).action, CkrAction::Deliver);
    EXPECT_EQ(incxdp::smi::ckr_entry(0, 5).action, CkrAction::Via);
    EXPECT_EQ(incxdp::smi::ckr_entry(0, 5).ch, 1);
}

TEST(SmiRoutes, Chain8HasOnePathEachWay) {
    Cabling c = load_cabling(kDir + "chain8.json");
    auto r = compute_routes(c);
    EXPECT_EQ(r.ranks[0].hops[7], 7);
    EXPECT_EQ(r.ranks[0].cost[7], 700 + 6); // a transfer ch0 -> ch1 at each middle rank
    EXPECT_EQ(rank_path(c, r, 0, 7), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(rank_path(c, r, 5, 2), (std::vector<int>{5, 4, 3, 2}));
    EXPECT_EQ(r.ranks[3].out_ch[7], 1);
    EXPECT_EQ(r.ranks[3].out_ch[0], 0);
    // ch2 has no cable: its CK_S hands over to ch1's.
    EXPECT_EQ(r.ranks[3].cks[2][7].action, CksAction::Via);
    EXPECT_EQ(r.ranks[3].cks[2][7].ch, 1);
}

TEST(SmiRoutes, Torus16Distances) {
    Cabling c = load_cabling(kDir + "torus16.json");
    ASSERT_EQ(c.size(), 16);
    auto r = compute_routes(c);
    // Rank i is (i / 4, i % 4): hops = wrapped row + column distance.
    for (int s = 0; s < 16; s++)
        for (int d = 0; d < 16; d++) {
            int dr = std::abs(s / 4 - d / 4), dc = std::abs(s % 4 - d % 4);
            EXPECT_EQ(r.ranks[s].hops[d], std::min(dr, 4 - dr) + std::min(dc, 4 - dc))
                << s << "->" << d;
        }
    EXPECT_EQ(r.ranks[0].out_ch[1], 1);  // east
    EXPECT_EQ(r.ranks[0].out_ch[3], 0);  // west, wrapping
    EXPECT_EQ(r.ranks[0].out_ch[4], 3);  // south
    EXPECT_EQ(r.ranks[0].out_ch[12], 2); // north, wrapping
}

TEST(SmiTopology, MeshFromCabling) {
    Cabling c = load_cabling(kDir + "torus8.json");
    incxdp::topo::Topology t = incxdp::topo::smi::to_topology(c, "torus8");
    EXPECT_EQ(t.kind, incxdp::topo::TopologyKind::Mesh);
    ASSERT_EQ(t.nodes.size(), 8u);
    const incxdp::topo::Node &n = t.node("f0001-acl0");
    ASSERT_EQ(n.ifaces.size(), 4u);
    auto e = incxdp::topo::smi::link_end(c, 0, 1);
    EXPECT_EQ(e.iface, "ch1");
    bool found = false;
    for (const auto &i : n.ifaces)
        if (i.name == "ch1") {
            found = true;
            EXPECT_EQ(i.ip, e.ip);
            EXPECT_EQ(i.prefix_len, 30);
            EXPECT_EQ(i.peer_node, "f0002-acl0");
            EXPECT_EQ(i.peer_iface, "ch0");
        }
    EXPECT_TRUE(found);
}

// The map images `incxdp smi routes --install` writes (incxdp/smi_maps.h).
TEST(SmiRoutes, MapEntriesMirrorTheTables) {
    Cabling c = load_cabling(kDir + "chain8.json");
    const incxdp::smi::Routes r = compute_routes(c);
    const auto cks = incxdp::smi::cks_map_entries(r, 0);
    ASSERT_EQ(cks.size(), size_t(incxdp::smi::kQsfps) * INCXDP_SMI_CKS_RANKS);
    EXPECT_EQ(cks[incxdp_smi_cks_key(0, 0)].action, INCXDP_SMI_CKS_LOCAL);
    // Rank 0 of the chain leaves by ch1 for everyone, 7 cables to rank 7.
    EXPECT_EQ(cks[incxdp_smi_cks_key(1, 7)].action, INCXDP_SMI_CKS_OUT);
    EXPECT_EQ(cks[incxdp_smi_cks_key(1, 7)].hops, 7);
    EXPECT_EQ(cks[incxdp_smi_cks_key(1, 7)].cost, 706u); // 7 cables, 6 transfers
    EXPECT_EQ(cks[incxdp_smi_cks_key(0, 7)].action, INCXDP_SMI_CKS_VIA);
    EXPECT_EQ(cks[incxdp_smi_cks_key(0, 7)].ch, 1);
    EXPECT_EQ(cks[incxdp_smi_cks_key(0, 8)].action, INCXDP_SMI_CKS_UNREACHABLE); // no rank 8
    const auto ckr = incxdp::smi::ckr_map_entries();
    EXPECT_EQ(ckr[incxdp_smi_ckr_key(1, 5, INCXDP_SMI_CKR_DATA)].action, INCXDP_SMI_CKR_DELIVER);
    EXPECT_EQ(ckr[incxdp_smi_ckr_key(0, 5, INCXDP_SMI_CKR_CONTROL)].action, INCXDP_SMI_CKR_VIA);
    EXPECT_EQ(ckr[incxdp_smi_ckr_key(0, 5, INCXDP_SMI_CKR_CONTROL)].ch, 1);
}

} // namespace
