// SPDX-License-Identifier: BSD-2-Clause
// The mesh's pure parts: node ids (FNV-1a vectors), BFS routes with
// equal-cost first hops on the topologies the mesh runs on, classification
// and overrides, unreachable nodes, the LSDB's sequence and ageing rules,
// the control messages' encoding and the knobs' precedence. No kernel.
#include "mesh_config.h"
#include "mesh_graph.h"
#include "mesh_wire.h"

#include <incxdp/mesh_ctl.h>

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

namespace {

using namespace incxdp::mesh;
using Edges = std::vector<std::pair<NodeId, NodeId>>;

Graph make(const Edges &edges) {
    Graph g;
    for (auto [a, b] : edges)
        g.add_edge(a, b);
    return g;
}

Graph ring(NodeId n) {
    Edges e;
    for (NodeId i = 1; i <= n; i++)
        e.push_back({i, i % n + 1});
    return make(e);
}

Graph line(NodeId n) {
    Edges e;
    for (NodeId i = 1; i < n; i++)
        e.push_back({i, i + 1});
    return make(e);
}

Graph full(NodeId n) {
    Edges e;
    for (NodeId i = 1; i <= n; i++)
        for (NodeId j = i + 1; j <= n; j++)
            e.push_back({i, j});
    return make(e);
}

// 3x3 torus: node r*3+c+1, linked to its right and lower neighbours (wrapping).
NodeId tnode(int r, int c) {
    return NodeId(((r + 3) % 3) * 3 + (c + 3) % 3 + 1);
}
Graph torus3x3() {
    Edges e;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++) {
            e.push_back({tnode(r, c), tnode(r, c + 1)});
            e.push_back({tnode(r, c), tnode(r + 1, c)});
        }
    return make(e);
}

// Two triangles bridged twice: 1-2-3, 4-5-6, 2-4, 3-5 (mesh6.yaml's shape).
Graph mesh6() {
    return make({{1, 2}, {1, 3}, {2, 3}, {2, 4}, {3, 5}, {4, 5}, {4, 6}, {5, 6}});
}

using Path = std::vector<NodeId>;

TEST(MeshNodeId, Fnv1aKnownVectors) {
    EXPECT_EQ(fnv1a32(nullptr, 0), 0x811c9dc5u);
    EXPECT_EQ(fnv1a32(reinterpret_cast<const uint8_t *>("a"), 1), 0xe40c292cu);
    EXPECT_EQ(fnv1a32(reinterpret_cast<const uint8_t *>("foobar"), 6), 0xbf9cf968u);
}

TEST(MeshNodeId, AddressesHashedSortedInNetworkOrder) {
    EXPECT_EQ(node_id({}), 0x811c9dc5u);
    EXPECT_EQ(node_id({parse_ip("10.0.0.1")}), 0x6c506a2cu);
    const uint8_t bytes[] = {10, 0, 0, 1, 10, 0, 1, 1};
    EXPECT_EQ(node_id({parse_ip("10.0.0.1"), parse_ip("10.0.1.1")}), fnv1a32(bytes, 8));
    EXPECT_EQ(node_id({parse_ip("10.0.0.1"), parse_ip("10.0.1.1")}), 0x3f00df5cu);
    // Order and duplicates do not matter: every node computes the same id.
    EXPECT_EQ(node_id({parse_ip("10.0.1.1"), parse_ip("10.0.0.1"), parse_ip("10.0.1.1")}),
              0x3f00df5cu);
    EXPECT_NE(node_id({parse_ip("10.0.0.1")}), node_id({parse_ip("10.0.0.2")}));
    EXPECT_EQ(id_str(0x3f00df5c), "0x3f00df5c");
    EXPECT_EQ(ip_str(parse_ip("192.168.100.7")), "192.168.100.7");
    EXPECT_THROW(parse_ip("10.0.0"), MeshError);
}

TEST(MeshRoutes, Full3AllDirect) {
    const Graph g = full(3);
    for (NodeId self = 1; self <= 3; self++) {
        const RouteTable rt = compute_routes(g, self, 4);
        ASSERT_EQ(rt.routes.size(), 2u);
        for (const auto &[dst, r] : rt.routes) {
            EXPECT_EQ(r.hops, 1u);
            EXPECT_EQ(r.first_hops, std::vector<NodeId>{dst});
            EXPECT_EQ(r.paths, std::vector<Path>{Path({self, dst})});
        }
        EXPECT_TRUE(rt.errors().empty());
    }
}

TEST(MeshRoutes, Ring4TwoHopPeerHasBothWays) {
    const RouteTable rt = compute_routes(ring(4), 1, 4);
    ASSERT_EQ(rt.routes.size(), 3u);
    EXPECT_EQ(rt.routes.at(2).hops, 1u);
    EXPECT_EQ(rt.routes.at(4).hops, 1u);
    EXPECT_EQ(rt.routes.at(2).first_hops, std::vector<NodeId>{2});
    const Route &r = rt.routes.at(3);
    EXPECT_EQ(r.hops, 2u);
    EXPECT_EQ(r.first_hops, (std::vector<NodeId>{2, 4}));
    EXPECT_EQ(r.paths, (std::vector<Path>{{1, 2, 3}, {1, 4, 3}}));
}

TEST(MeshRoutes, Line4EndToEndThreeHops) {
    const Graph g = line(4);
    const RouteTable rt = compute_routes(g, 1, 4);
    EXPECT_EQ(rt.routes.at(2).hops, 1u);
    EXPECT_EQ(rt.routes.at(3).hops, 2u);
    const Route &r = rt.routes.at(4);
    EXPECT_EQ(r.hops, 3u);
    EXPECT_EQ(r.first_hops, std::vector<NodeId>{2});
    EXPECT_EQ(r.paths, std::vector<Path>{Path({1, 2, 3, 4})});
    const RouteTable from2 = compute_routes(g, 2, 4);
    EXPECT_EQ(from2.routes.at(4).first_hops, std::vector<NodeId>{3});
    EXPECT_EQ(from2.routes.at(1).first_hops, std::vector<NodeId>{1});
}

TEST(MeshRoutes, Ring8OppositeNodeBothWaysOthersOneWay) {
    const RouteTable rt = compute_routes(ring(8), 1, 4);
    ASSERT_EQ(rt.routes.size(), 7u);
    EXPECT_EQ(rt.routes.at(3).hops, 2u);
    EXPECT_EQ(rt.routes.at(3).first_hops, std::vector<NodeId>{2});
    EXPECT_EQ(rt.routes.at(7).first_hops, std::vector<NodeId>{8});
    const Route &r = rt.routes.at(5);
    EXPECT_EQ(r.hops, 4u);
    EXPECT_EQ(r.first_hops, (std::vector<NodeId>{2, 8}));
    EXPECT_EQ(r.paths, (std::vector<Path>{{1, 2, 3, 4, 5}, {1, 8, 7, 6, 5}}));
}

TEST(MeshRoutes, Mesh6PartialTwoWaysAcross) {
    const RouteTable rt = compute_routes(mesh6(), 1, 4);
    ASSERT_EQ(rt.routes.size(), 5u);
    EXPECT_EQ(rt.routes.at(4).hops, 2u);
    EXPECT_EQ(rt.routes.at(4).first_hops, std::vector<NodeId>{2});
    const Route &r = rt.routes.at(6);
    EXPECT_EQ(r.hops, 3u);
    EXPECT_EQ(r.first_hops, (std::vector<NodeId>{2, 3}));
    EXPECT_EQ(r.paths, (std::vector<Path>{{1, 2, 4, 6}, {1, 3, 5, 6}}));
}

TEST(MeshRoutes, Torus3x3EveryoneWithinTwoHops) {
    const Graph g = torus3x3();
    for (const auto &[self, nb] : g.adj) {
        ASSERT_EQ(nb.size(), 4u);
        const RouteTable rt = compute_routes(g, self, 4);
        ASSERT_EQ(rt.routes.size(), 8u);
        size_t two = 0;
        for (const auto &[dst, r] : rt.routes) {
            EXPECT_LE(r.hops, 2u);
            two += r.hops == 2;
            // Diagonal peers: one way along the row first, one along the column.
            if (r.hops == 2) {
                EXPECT_EQ(r.first_hops.size(), 2u) << id_str(self) << " -> " << id_str(dst);
            }
            for (const Path &p : r.paths)
                EXPECT_EQ(p.size(), r.hops + 1u);
        }
        EXPECT_EQ(two, 4u);
    }
    const Route r = compute_routes(g, tnode(0, 0), 4).routes.at(tnode(1, 1));
    EXPECT_EQ(r.first_hops, (std::vector<NodeId>{tnode(0, 1), tnode(1, 0)}));
}

TEST(MeshRoutes, StarAndTreeHaveOneWay) {
    const Graph star = make({{1, 2}, {1, 3}, {1, 4}, {1, 5}});
    const Route r = compute_routes(star, 2, 4).routes.at(5);
    EXPECT_EQ(r.hops, 2u);
    EXPECT_EQ(r.paths, std::vector<Path>{Path({2, 1, 5})});
    // Two levels: 1 -> {2, 3}, 2 -> {4, 5}, 3 -> {6, 7}.
    const Graph tree = make({{1, 2}, {1, 3}, {2, 4}, {2, 5}, {3, 6}, {3, 7}});
    const Route t = compute_routes(tree, 4, 4).routes.at(7);
    EXPECT_EQ(t.hops, 4u);
    EXPECT_EQ(t.paths, std::vector<Path>{Path({4, 2, 1, 3, 7})});
    EXPECT_EQ(classify(star), TopoType::Partial);
    EXPECT_EQ(classify(tree), TopoType::Partial);
}

TEST(MeshRoutes, EqualCostFirstHopsCappedLowestIdFirst) {
    const Graph g = make({{1, 4}, {1, 3}, {1, 2}, {2, 5}, {3, 5}, {4, 5}});
    EXPECT_EQ(compute_routes(g, 1, 4).routes.at(5).first_hops, (std::vector<NodeId>{2, 3}));
    EXPECT_EQ(compute_routes(g, 1, 4, 3).routes.at(5).first_hops, (std::vector<NodeId>{2, 3, 4}));
}

TEST(MeshRoutes, BeyondMaxHopsIsUnreachableWithAClearError) {
    const RouteTable rt = compute_routes(line(6), 1, 3);
    EXPECT_EQ(rt.routes.size(), 3u);
    ASSERT_EQ(rt.too_far.size(), 2u);
    EXPECT_EQ(rt.too_far.at(5), 4u);
    EXPECT_EQ(rt.too_far.at(6), 5u);
    try {
        rt.require_complete();
        FAIL() << "expected MeshError";
    } catch (const MeshError &e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("0x00000005 is unreachable from 0x00000001: 4 hops, more than max_hops 3"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("0x00000006"), std::string::npos) << m;
    }
    EXPECT_NO_THROW(compute_routes(line(6), 1, 5).require_complete());
}

TEST(MeshRoutes, DisconnectedGraphNamesTheUnreachableNodes) {
    Graph g = make({{1, 2}, {3, 4}});
    g.add_node(9);
    const RouteTable rt = compute_routes(g, 1, 4);
    EXPECT_EQ(rt.routes.size(), 1u);
    EXPECT_EQ(rt.disconnected, (std::vector<NodeId>{3, 4, 9}));
    try {
        rt.require_complete();
        FAIL() << "expected MeshError";
    } catch (const MeshError &e) {
        EXPECT_STREQ(e.what(), "the mesh is disconnected: no path from 0x00000001 to "
                               "0x00000003, 0x00000004, 0x00000009");
    }
    EXPECT_FALSE(g.connected());
    EXPECT_EQ(classify(g), TopoType::Partial);
}

TEST(MeshClassify, ByDegrees) {
    EXPECT_EQ(classify(full(3)), TopoType::Full);
    EXPECT_TRUE(is_type(full(3), TopoType::Ring)); // a triangle is both
    EXPECT_EQ(classify(full(4)), TopoType::Full);
    EXPECT_EQ(classify(ring(4)), TopoType::Ring);
    EXPECT_EQ(classify(ring(8)), TopoType::Ring);
    EXPECT_EQ(classify(line(4)), TopoType::Line);
    EXPECT_EQ(classify(line(2)), TopoType::Full); // two nodes: degree N-1
    EXPECT_EQ(classify(mesh6()), TopoType::Partial);
    EXPECT_EQ(classify(torus3x3()), TopoType::Partial);
    // Every degree 2 but two triangles: not one ring.
    EXPECT_EQ(classify(make({{1, 2}, {2, 3}, {3, 1}, {4, 5}, {5, 6}, {6, 4}})), TopoType::Partial);
    // Two of degree 1, the rest 2, but a line and a separate triangle.
    EXPECT_EQ(classify(make({{1, 2}, {3, 4}, {4, 5}, {5, 3}})), TopoType::Partial);
}

TEST(MeshClassify, OverridesAgreeingOrContradicting) {
    EXPECT_EQ(resolve_type(ring(4), TopoOverride::Auto), TopoType::Ring);
    EXPECT_EQ(resolve_type(ring(4), TopoOverride::Ring), TopoType::Ring);
    EXPECT_EQ(resolve_type(full(3), TopoOverride::Ring), TopoType::Ring);
    EXPECT_EQ(resolve_type(line(4), TopoOverride::Line), TopoType::Line);
    try {
        resolve_type(line(4), TopoOverride::Ring);
        FAIL() << "expected MeshError";
    } catch (const MeshError &e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("topology override 'ring' contradicts the graph, which is 'line'"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("0x00000001:1"), std::string::npos) << m;
    }
    EXPECT_THROW(resolve_type(ring(4), TopoOverride::Full), MeshError);
    EXPECT_THROW(resolve_type(mesh6(), TopoOverride::Line), MeshError);
    EXPECT_EQ(parse_topo_override("full"), TopoOverride::Full);
    EXPECT_THROW(parse_topo_override("star"), MeshError);
}

TEST(MeshLsdb, SequenceNumbersWrap) {
    EXPECT_TRUE(seq_newer(2, 1));
    EXPECT_FALSE(seq_newer(1, 2));
    EXPECT_FALSE(seq_newer(5, 5));
    EXPECT_TRUE(seq_newer(1, 0xffffffffu));
    EXPECT_FALSE(seq_newer(0xffffffffu, 1));
}

TEST(MeshLsdb, NewerWinsAndOnlyNewerRefreshes) {
    Lsdb db;
    Lsa a{7, 100, {1}, {{8, 1, 2}}};
    EXPECT_EQ(db.offer(a, 1000), Lsdb::Offer::Newer);
    EXPECT_EQ(db.offer(a, 1500), Lsdb::Offer::Same);
    EXPECT_EQ(db.find(7)->updated_ms, 1000u);
    Lsa old = a;
    old.seq = 99;
    old.links.clear();
    EXPECT_EQ(db.offer(old, 1600), Lsdb::Offer::Older);
    EXPECT_EQ(db.find(7)->lsa, a);
    Lsa newer = a;
    newer.seq = 101;
    newer.links.clear();
    EXPECT_EQ(db.offer(newer, 2000), Lsdb::Offer::Newer);
    EXPECT_TRUE(db.find(7)->lsa.links.empty());
    EXPECT_EQ(db.find(7)->updated_ms, 2000u);
}

TEST(MeshLsdb, AgesOutAllButSelf) {
    Lsdb db;
    db.offer({1, 1, {}, {}}, 0);
    db.offer({2, 1, {}, {}}, 0);
    db.offer({3, 1, {}, {}}, 3000);
    EXPECT_TRUE(db.age_out(4000, 4000, 1).empty());
    EXPECT_EQ(db.age_out(4001, 4000, 1), std::vector<NodeId>{2});
    EXPECT_NE(db.find(1), nullptr);
    EXPECT_EQ(db.find(2), nullptr);
    EXPECT_NE(db.find(3), nullptr);
    EXPECT_EQ(db.age_out(7001, 4000, 1), std::vector<NodeId>{3});
}

TEST(MeshLsdb, GraphTakesOnlyTwoWayLinks) {
    Lsdb db;
    db.offer({1, 1, {}, {{2, 0, 0}, {3, 0, 0}}}, 0);
    db.offer({2, 1, {}, {{1, 0, 0}}}, 0);
    db.offer({3, 1, {}, {}}, 0); // 3 no longer hears 1
    const Graph g = graph_of(db);
    EXPECT_EQ(g.adj.at(1), std::set<NodeId>{2});
    EXPECT_TRUE(g.adj.at(3).empty());
    // A link to a node without an LSA is no link either.
    db.offer({1, 2, {}, {{2, 0, 0}, {4, 0, 0}}}, 0);
    EXPECT_EQ(graph_of(db).adj.count(4), 0u);
}

TEST(MeshWire, HelloRoundTrip) {
    Hello h;
    h.sender = 0xdeadbeef;
    h.link_addr = parse_ip("10.1.0.1");
    h.mac = {2, 0x49, 0x58, 1, 2, 3};
    h.interval_ms = 100;
    h.dead_ms = 400;
    h.addrs = {parse_ip("10.1.0.1"), parse_ip("10.1.1.1")};
    const auto bytes = encode_hello(h);
    ASSERT_EQ(bytes.size(), size_t(INCXDP_MESH_HELLO_LEN));
    EXPECT_EQ(bytes[0], 0x4d); // magic, network order
    EXPECT_EQ(bytes[1], 0x43);
    EXPECT_EQ(bytes[3], INCXDP_MESH_MSG_HELLO);
    EXPECT_EQ(bytes[4], 0xde); // sender, network order
    const Message m = decode(bytes.data(), bytes.size());
    ASSERT_TRUE(m.hello);
    EXPECT_FALSE(m.lsa);
    EXPECT_EQ(*m.hello, h);
}

TEST(MeshWire, LsaRoundTripAndRejects) {
    Lsa lsa{0x11223344, 0xfffffffe, {parse_ip("10.0.0.1")}, {{5, 1, 2}, {6, 3, 4}}};
    const auto bytes = encode_lsa(lsa, 0x55667788);
    ASSERT_EQ(bytes.size(), size_t(INCXDP_MESH_LSA_LEN));
    const Message m = decode(bytes.data(), bytes.size());
    EXPECT_EQ(m.sender, 0x55667788u);
    ASSERT_TRUE(m.lsa);
    EXPECT_EQ(*m.lsa, lsa);

    EXPECT_THROW(decode(bytes.data(), 5), MeshError);
    EXPECT_THROW(decode(bytes.data(), bytes.size() - 1), MeshError);
    auto bad = bytes;
    bad[0] = 0;
    EXPECT_THROW(decode(bad.data(), bad.size()), MeshError);
    bad = bytes;
    bad[3] = 9;
    EXPECT_THROW(decode(bad.data(), bad.size()), MeshError);
    bad = bytes;
    bad[offsetof(incxdp_mesh_lsa, nlinks)] = INCXDP_MESH_MAX_NEIGHBOURS + 1;
    EXPECT_THROW(decode(bad.data(), bad.size()), MeshError);
    Lsa big = lsa;
    big.links.resize(INCXDP_MESH_MAX_NEIGHBOURS + 1);
    EXPECT_THROW(encode_lsa(big, 1), MeshError);
}

TEST(MeshConfig, FlagBeatsEnvBeatsFileBeatsDefault) {
    std::map<std::string, std::string> env = {{"INCXDP_MESH_MAX_HOPS", "6"},
                                              {"INCXDP_MESH_TOPOLOGY", "ring"}};
    const KnobSet e = knobs_from_env([&](const char *n) -> const char * {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
    });
    const KnobSet f = knobs_from_yaml("max-hops: 2\ntopology: line\nrelay: off\n"
                                      "ifaces: [eth0, eth1]\nmode: skb\n",
                                      "mesh.yaml");
    KnobSet flags;
    flags.topology = TopoOverride::Full;
    const Knobs k = resolve_knobs(flags, e, f, "/sys/fs/bpf/x");
    EXPECT_EQ(k.topology, TopoOverride::Full);
    EXPECT_EQ(k.source.at("topology"), "flag");
    EXPECT_EQ(k.max_hops, 6u);
    EXPECT_EQ(k.source.at("max_hops"), "env");
    EXPECT_FALSE(k.relay);
    EXPECT_EQ(k.source.at("relay"), "file");
    EXPECT_EQ(k.ifaces, (std::vector<std::string>{"eth0", "eth1"}));
    EXPECT_EQ(k.mode, "skb");
    EXPECT_EQ(k.pin_dir, "/sys/fs/bpf/x");
    EXPECT_EQ(k.source.at("pin_dir"), "default");

    const Knobs d = resolve_knobs({}, {}, {}, "/p");
    EXPECT_TRUE(d.relay);
    EXPECT_EQ(d.max_hops, 4u);
    EXPECT_EQ(d.topology, TopoOverride::Auto);
    EXPECT_TRUE(d.ifaces.empty());
    EXPECT_EQ(d.mode, "native");
}

TEST(MeshConfig, BadValuesNameTheirSource) {
    try {
        knobs_from_env([](const char *n) -> const char * {
            return std::string(n) == "INCXDP_MESH_RELAY" ? "maybe" : nullptr;
        });
        FAIL() << "expected MeshError";
    } catch (const MeshError &e) {
        EXPECT_STREQ(e.what(), "INCXDP_MESH_RELAY: 'maybe' is not on or off");
    }
    try {
        knobs_from_yaml("max-hop: 3\n", "mesh.yaml");
        FAIL() << "expected MeshError";
    } catch (const MeshError &e) {
        EXPECT_NE(std::string(e.what()).find("max-hop"), std::string::npos) << e.what();
    }
    EXPECT_THROW(knobs_from_yaml("max-hops: 0\n", "m"), MeshError);
    EXPECT_THROW(parse_max_hops("4x", "--max-hops"), MeshError);
    EXPECT_EQ(parse_iface_list("all"), std::vector<std::string>{});
    EXPECT_EQ(parse_iface_list("a,b"), (std::vector<std::string>{"a", "b"}));
}

} // namespace
