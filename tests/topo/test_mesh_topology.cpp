// SPDX-License-Identifier: BSD-2-Clause
// Mesh topologies (kind: mesh, build_mesh): derived and explicit link
// subnets, addresses, interface names and MACs, every validation error, the
// shipped files; and a switched host's explicit iface/mac.
#include "../common/yaml_edit.h"

#include <incxdp/topology.h>

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace incxdp::topo;
using incxdp::test::with;

namespace {

std::string shipped(const std::string &name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

// A 3-node line; every case edits one piece of it.
const std::string kLine = R"(name: m
kind: mesh
link_subnet: 10.91.0.0/16
hosts:
  - {name: n0}
  - {name: n1}
  - {name: n2}
links:
  - [n0, n1]
  - [n1, n2]
)";

#define EXPECT_ERROR(yaml, substr)                                                                 \
    do {                                                                                           \
        const std::string msg_ = incxdp::test::parse_error(yaml);                                  \
        EXPECT_NE(msg_.find(substr), std::string::npos)                                            \
            << "expected error containing: " << (substr) << "\n got: '" << msg_ << "'";            \
    } while (0)

const Iface &iface(const Topology &t, const std::string &node, const std::string &name) {
    for (const Iface &i : t.node(node).ifaces)
        if (i.name == name)
            return i;
    throw std::runtime_error(node + " has no iface " + name);
}

} // namespace

TEST(MeshTopology, DerivedSubnetsAddressesNamesMacs) {
    const Topology t = Topology::parse(kLine);
    EXPECT_EQ(t.kind, TopologyKind::Mesh);
    EXPECT_STREQ(topology_kind_name(t.kind), "mesh");
    EXPECT_EQ(t.link_subnet, "10.91.0.0/16");
    EXPECT_EQ(t.subnet, "");
    EXPECT_EQ(t.mtu, 3500);
    EXPECT_TRUE(t.jobs.empty());
    ASSERT_EQ(t.nodes.size(), 3u);
    for (const Node &n : t.nodes) {
        EXPECT_EQ(n.kind, NodeKind::Host);
        EXPECT_EQ(n.ip, "");
    }
    ASSERT_EQ(t.links.size(), 2u);
    EXPECT_EQ(t.links[1].a, "n1");
    EXPECT_EQ(t.links[1].b, "n2");
    EXPECT_EQ(t.links[1].a_iface, "m-n2");
    EXPECT_EQ(t.links[1].b_iface, "m-n1");
    EXPECT_EQ(t.links[1].subnet, "10.91.1.0/24");

    const Node &n1 = t.node("n1");
    ASSERT_EQ(n1.ifaces.size(), 2u);
    const Iface &to0 = n1.ifaces[0], &to2 = n1.ifaces[1];
    EXPECT_EQ(to0.name, "m-n0");
    EXPECT_EQ(to0.peer_node, "n0");
    EXPECT_EQ(to0.peer_iface, "m-n1");
    EXPECT_EQ(to0.ip, "10.91.0.2"); // end b of link 0
    EXPECT_EQ(to0.prefix_len, 24);
    EXPECT_EQ(mac_to_string(to0.mac), "02:49:58:01:00:00");
    EXPECT_EQ(to2.name, "m-n2");
    EXPECT_EQ(to2.ip, "10.91.1.1"); // end a of link 1
    EXPECT_EQ(mac_to_string(to2.mac), "02:49:58:01:01:00");
    EXPECT_EQ(t.node("n0").ifaces[0].ip, "10.91.0.1");
    EXPECT_EQ(t.node("n2").ifaces[0].ip, "10.91.1.2");
    EXPECT_EQ(mac_to_string(t.node("n2").ifaces[0].mac), "02:49:58:02:00:00");

    // Without link_subnet: 10.90.0.0/16.
    EXPECT_EQ(Topology::parse(with(kLine, "link_subnet: 10.91.0.0/16\n", "")).link_subnet,
              "10.90.0.0/16");
    EXPECT_EQ(Topology::parse(with(kLine, "10.91.0.0/16", "10.91.0.0/23")).link_subnet,
              "10.91.0.0/23");
}

TEST(MeshTopology, ParallelLinksGetAnIndex) {
    const Topology t = Topology::parse(
        with(kLine, "  - [n1, n2]\n", "  - [n1, n2]\n  - [n2, n1]\n  - [n1, n2]\n"));
    const Node &n1 = t.node("n1");
    ASSERT_EQ(n1.ifaces.size(), 4u);
    EXPECT_EQ(n1.ifaces[1].name, "m-n2");
    EXPECT_EQ(n1.ifaces[2].name, "m-n2-1");
    EXPECT_EQ(n1.ifaces[3].name, "m-n2-2");
    EXPECT_EQ(n1.ifaces[2].peer_iface, "m-n1-1");
    EXPECT_EQ(t.links[2].a_iface, "m-n1-1"); // [n2, n1]: a is n2
    EXPECT_EQ(t.links[3].subnet, "10.91.3.0/24");

    // Long names: the peer part is cut so the index still fits 15 chars.
    const std::string longer = with(
        with(with(kLine, "{name: n2}", "{name: abcdefghijkl}"), "[n1, n2]", "[n1, abcdefghijkl]"),
        "  - [n0, n1]\n", "  - [n0, n1]\n  - [abcdefghijkl, n1]\n");
    const Topology l = Topology::parse(longer);
    EXPECT_EQ(l.node("n1").ifaces[1].name, "m-abcdefghijkl");
    EXPECT_EQ(l.node("n1").ifaces[2].name, "m-abcdefghijk-1");
}

TEST(MeshTopology, ExplicitLink) {
    const Topology t = Topology::parse(
        with(kLine, "  - [n1, n2]\n",
             "  - {a: n1, b: n2, subnet: 10.97.3.0/30, a_ip: 10.97.3.2, b_ip: 10.97.3.1,\n"
             "     a_iface: ch1, b_iface: ch0, a_mac: 02:53:4d:01:01:00, b_mac: "
             "02:53:4D:02:00:00}\n"));
    const Iface &a = iface(t, "n1", "ch1"), &b = iface(t, "n2", "ch0");
    EXPECT_EQ(a.ip, "10.97.3.2");
    EXPECT_EQ(a.prefix_len, 30);
    EXPECT_EQ(a.peer_iface, "ch0");
    EXPECT_EQ(mac_to_string(a.mac), "02:53:4d:01:01:00");
    EXPECT_EQ(b.ip, "10.97.3.1");
    EXPECT_EQ(b.peer_iface, "ch1");
    EXPECT_EQ(mac_to_string(b.mac), "02:53:4d:02:00:00");
    EXPECT_EQ(t.links[1].subnet, "10.97.3.0/30");
    EXPECT_EQ(t.links[1].a_iface, "ch1");
    // Link 0 keeps its derived /24 number 0.
    EXPECT_EQ(t.node("n0").ifaces[0].ip, "10.91.0.1");

    // Each key alone; a /31 uses both its addresses (RFC 3021).
    const Topology p = Topology::parse(
        with(kLine, "  - [n1, n2]\n", "  - {a: n1, b: n2, subnet: 10.97.0.6/31}\n"));
    EXPECT_EQ(iface(p, "n1", "m-n2").ip, "10.97.0.6");
    EXPECT_EQ(iface(p, "n2", "m-n1").ip, "10.97.0.7");
    EXPECT_EQ(iface(p, "n2", "m-n1").prefix_len, 31);
    const Topology q =
        Topology::parse(with(kLine, "  - [n1, n2]\n", "  - {a: n1, b: n2, b_ip: 10.91.1.9}\n"));
    EXPECT_EQ(iface(q, "n1", "m-n2").ip, "10.91.1.1");
    EXPECT_EQ(iface(q, "n2", "m-n1").ip, "10.91.1.9");
}

TEST(MeshTopology, HostIfaceAndMacForItsSingleLink) {
    const Topology t = Topology::parse(
        with(kLine, "{name: n0}", "{name: n0, iface: enp1s0f0, mac: 02:00:00:00:00:01}"));
    const Iface &i = t.node("n0").ifaces[0];
    EXPECT_EQ(i.name, "enp1s0f0");
    EXPECT_EQ(mac_to_string(i.mac), "02:00:00:00:00:01");
    EXPECT_EQ(t.node("n1").ifaces[0].peer_iface, "enp1s0f0");
    EXPECT_EQ(t.links[0].a_iface, "enp1s0f0");

    EXPECT_ERROR(with(kLine, "{name: n1}", "{name: n1, iface: x}"),
                 ":6:23: hosts[1] (n1): iface on a host needs exactly one link; 'n1' has 2");
    EXPECT_ERROR(with(with(kLine, "{name: n0}", "{name: n0, mac: 02:00:00:00:00:01}"), "[n0, n1]",
                      "{a: n0, b: n1, a_mac: 02:00:00:00:00:02}"),
                 "hosts[0] (n0): mac is given twice: here and as links[0].a_mac");
    EXPECT_ERROR(with(kLine, "{name: n0}", "{name: n0, iface: a_very_long_name}"),
                 ":5:23: links[0]: bad interface name 'a_very_long_name'");
}

TEST(MeshTopology, Errors) {
    // Address outside the link's subnet, pointing at the key.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_ip: 10.91.2.1}"),
                 "<topology>:10:26: links[1]: address 10.91.2.1 is outside the link's subnet "
                 "10.91.1.0/24");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, subnet: 10.97.0.0/30, b_ip: 10.97.0.3}"),
                 "links[1]: address 10.97.0.3 is the network or broadcast address of subnet "
                 "10.97.0.0/30");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_ip: 10.91.1.x}"),
                 "links[1]: bad IPv4 address '10.91.1.x'");
    // Duplicate address.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, b_ip: 10.91.1.1}"),
                 ":10:26: links[1]: duplicate address 10.91.1.1: a_ip and b_ip must differ");
    // Duplicate interface name on one node.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_iface: m-n0}"),
                 "links[1]: interface name 'm-n0' on node 'n1' is used twice (links[0] and "
                 "links[1])");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_iface: ab/cd}"),
                 "links[1]: bad interface name 'ab/cd'");
    // Bad, multicast and duplicate MACs.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_mac: 02:49:58}"),
                 ":10:27: links[1]: bad MAC address '02:49:58'");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_mac: 01:00:5e:00:00:01}"),
                 "links[1]: MAC 01:00:5e:00:00:01 is a multicast address");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, a_mac: 00:00:00:00:00:00}"),
                 "is not an address");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, b_mac: 02:49:58:00:00:00}"),
                 "links[1]: duplicate MAC 02:49:58:00:00:00 (also on n0:m-n1)");
    // Unknown node, self-link.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "[n1, n7]"), ":10:10: links[1]: unknown node 'n7'");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n9, b: n2}"), "links[1]: unknown node 'n9'");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "[n2, n2]"), "links[1]: node 'n2' is linked to itself");
    // Switched keys in a mesh.
    EXPECT_ERROR(with(kLine, "hosts:", "switches:\n  - {name: sw, ip: 10.9.0.1}\nhosts:"),
                 "<topology>:4:1: 'switches' is not allowed in a mesh: a mesh has no switches");
    EXPECT_ERROR(with(kLine, "hosts:", "subnet: 10.9.0.0/24\nhosts:"),
                 "'subnet' is not allowed in a mesh");
    EXPECT_ERROR(kLine + "jobs: []\n", "'jobs' is not allowed in a mesh");
    EXPECT_ERROR(with(kLine, "{name: n0}", "{name: n0, ip: 10.9.0.1}"),
                 "hosts[0]: a mesh host has no single address");
    // Subnets.
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, subnet: 10.91.0.128/25}"),
                 "links[1]: subnet 10.91.0.128/25 overlaps links[0]'s subnet 10.91.0.0/24");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, subnet: 10.97.0.1/30}"),
                 "links[1]: bad CIDR '10.97.0.1/30': host bits set");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, subnet: 10.97.0.1/32}"),
                 "prefix length must be 1..31");
    EXPECT_ERROR(with(kLine, "10.91.0.0/16", "10.91.0.0/25"),
                 "<topology>:3:14: link_subnet: bad CIDR '10.91.0.0/25': prefix length must be "
                 "1..24");
    EXPECT_ERROR(with(kLine, "10.91.0.0/16", "10.91.0.0/24"),
                 "links[1]: no /24 left for this link: link_subnet 10.91.0.0/24 has 1");
    // Structure.
    EXPECT_ERROR(with(kLine, "  - [n1, n2]\n", ""), "hosts[2] (n2): host 'n2' has no link");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1, b: n2, speed: 100}"),
                 "links[1]: unknown key 'speed'");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "[n1]"), "links[1]: expected a pair of host names");
    EXPECT_ERROR(with(kLine, "[n1, n2]", "{a: n1}"), "links[1]: missing required key 'b'");
    EXPECT_ERROR(with(kLine, "kind: mesh", "kind: ring"),
                 "<topology>:2:7: kind: unknown topology kind 'ring' (expected switched or mesh)");
    EXPECT_ERROR(with(kLine, "{name: n2}", "{name: n1}"), "hosts[2] (n1): duplicate node name");
    EXPECT_ERROR(with(kLine, "links:\n  - [n0, n1]\n  - [n1, n2]\n", "links: []\n"),
                 "hosts[0] (n0): host 'n0' has no link");
    EXPECT_ERROR(with(kLine, "hosts:\n", "mtu: 9001\nhosts:\n"), "mtu: 9001 is above 9000");
}

TEST(MeshTopology, BuiltInCode) {
    MeshSpec s;
    s.name = "smi";
    s.link_subnet = "10.98.0.0/16";
    s.hosts = {"f0", "f1"};
    MeshLinkSpec l;
    l.a = "f0";
    l.b = "f1";
    l.a_iface = "ch1";
    l.b_iface = "ch0";
    l.subnet = "10.98.7.0/30";
    s.links = {l};
    l.a_iface = "ch2";
    l.b_iface = "ch3";
    l.subnet = "";
    s.links.push_back(l);
    const Topology t = build_mesh(s);
    EXPECT_EQ(t.kind, TopologyKind::Mesh);
    EXPECT_EQ(iface(t, "f0", "ch1").ip, "10.98.7.1");
    EXPECT_EQ(iface(t, "f1", "ch0").ip, "10.98.7.2");
    EXPECT_EQ(iface(t, "f1", "ch3").ip, "10.98.1.2"); // link 1: /24 number 1
    EXPECT_EQ(iface(t, "f1", "ch3").peer_iface, "ch2");
    // The same parsed from YAML gives the same topology.
    const Topology y = Topology::parse(R"(name: smi
kind: mesh
link_subnet: 10.98.0.0/16
hosts: [{name: f0}, {name: f1}]
links:
  - {a: f0, b: f1, a_iface: ch1, b_iface: ch0, subnet: 10.98.7.0/30}
  - {a: f0, b: f1, a_iface: ch2, b_iface: ch3}
)");
    for (size_t n = 0; n < 2; ++n)
        for (size_t k = 0; k < 2; ++k) {
            const Iface &a = t.nodes[n].ifaces[k], &b = y.nodes[n].ifaces[k];
            EXPECT_EQ(a.name, b.name);
            EXPECT_EQ(a.ip, b.ip);
            EXPECT_EQ(a.mac, b.mac);
            EXPECT_EQ(a.peer_iface, b.peer_iface);
        }

    // Errors name the mesh and the entry.
    s.links[1].b_iface = "ch0";
    try {
        build_mesh(s);
        ADD_FAILURE() << "duplicate iface accepted";
    } catch (const TopologyError &e) {
        EXPECT_STREQ(e.what(), "mesh smi: links[1]: interface name 'ch0' on node 'f1' is used "
                               "twice (links[0] and links[1])");
    }
    s.links[1].b_iface = "ch3";
    s.mtu = 9001;
    EXPECT_THROW(build_mesh(s), TopologyError);
    s.mtu = 9000;
    s.hosts.push_back("F2");
    try {
        build_mesh(s);
        ADD_FAILURE() << "bad name accepted";
    } catch (const TopologyError &e) {
        EXPECT_STREQ(e.what(), "mesh smi: hosts[2] (F2): bad node name 'F2': use 1-12 characters "
                               "from [a-z0-9_-]");
    }
}

TEST(MeshTopology, ShippedFiles) {
    // name -> expected degree of each host, in order.
    const std::map<std::string, std::vector<size_t>> want = {
        {"full3", {2, 2, 2}},          {"ring4", {2, 2, 2, 2}},
        {"line4", {1, 2, 2, 1}},       {"ring8", std::vector<size_t>(8, 2)},
        {"mesh6", {3, 3, 2, 3, 3, 2}}, {"torus3x3", std::vector<size_t>(9, 4)},
    };
    std::set<std::string> pools, addrs;
    for (const auto &[name, degrees] : want) {
        SCOPED_TRACE(name);
        const Topology t = Topology::load_file(shipped(name));
        EXPECT_EQ(t.name, name);
        EXPECT_EQ(t.kind, TopologyKind::Mesh);
        EXPECT_TRUE(pools.insert(t.link_subnet).second) << "link_subnet shared: " << t.link_subnet;
        ASSERT_EQ(t.nodes.size(), degrees.size());
        size_t ends = 0;
        for (size_t n = 0; n < degrees.size(); ++n) {
            const Node &node = t.nodes[n];
            EXPECT_EQ(node.ifaces.size(), degrees[n]) << node.name;
            std::set<std::string> peers;
            for (const Iface &i : node.ifaces) {
                EXPECT_TRUE(addrs.insert(i.ip).second) << i.ip << " used twice";
                EXPECT_TRUE(peers.insert(i.peer_node).second) << node.name << " double link";
                EXPECT_EQ(i.prefix_len, 24);
            }
            ends += node.ifaces.size();
        }
        EXPECT_EQ(ends, 2 * t.links.size());
    }
    // The torus: n4 (row 1, column 1) is linked to n1, n3, n5, n7.
    const Topology torus = Topology::load_file(shipped("torus3x3"));
    std::set<std::string> peers;
    for (const Iface &i : torus.node("n4").ifaces)
        peers.insert(i.peer_node);
    EXPECT_EQ(peers, (std::set<std::string>{"n1", "n3", "n5", "n7"}));
}

// A switched topology's host may name its single link's interface and MAC.
TEST(SwitchedTopology, HostIfaceAndMac) {
    const std::string base = R"(name: t
subnet: 10.9.0.0/24
switches:
  - {name: sw, ip: 10.9.0.254}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
links:
  - [h0, sw]
  - [h1, sw]
)";
    const Topology plain = Topology::parse(base);
    EXPECT_EQ(plain.kind, TopologyKind::Switched);
    EXPECT_EQ(plain.node("h1").ifaces[0].ip, "10.9.0.2");
    EXPECT_EQ(plain.node("h1").ifaces[0].prefix_len, 24);
    EXPECT_EQ(plain.switch_port_for("sw", "h1").ip, ""); // switches have no address
    EXPECT_EQ(plain.links[1].a_iface, "eth0");
    EXPECT_EQ(plain.links[1].b_iface, "p-h1");
    EXPECT_EQ(Topology::parse("kind: switched\n" + base).nodes.size(), 3u);

    const Topology t = Topology::parse(
        with(base, "ip: 10.9.0.2}", "ip: 10.9.0.2, iface: enp2s0, mac: 0a:00:00:00:00:02}"));
    const Iface &i = t.host_iface_for("h1", "sw");
    EXPECT_EQ(i.name, "enp2s0");
    EXPECT_EQ(mac_to_string(i.mac), "0a:00:00:00:00:02");
    EXPECT_EQ(t.switch_port_for("sw", "h1").peer_iface, "enp2s0");
    EXPECT_EQ(t.links[1].a_iface, "enp2s0");
    EXPECT_EQ(t.node("h0").ifaces[0].name, "eth0");

    EXPECT_ERROR(with(base, "ip: 10.9.0.2}", "ip: 10.9.0.2, mac: 02:49:58:00:00:00}"),
                 ":7:35: hosts[1] (h1): duplicate MAC 02:49:58:00:00:00 (also on sw:p-h0)");
    EXPECT_ERROR(with(base, "ip: 10.9.0.2}", "ip: 10.9.0.2, mac: 02:49}"),
                 "hosts[1] (h1): bad MAC address '02:49'");
    EXPECT_ERROR(with(base, "ip: 10.9.0.2}", "ip: 10.9.0.2, iface: \"a b\"}"),
                 "hosts[1] (h1): bad interface name 'a b'");
    EXPECT_ERROR(
        with(with(with(base, "ip: 10.9.0.254}", "ip: 10.9.0.254}\n  - {name: s2, ip: 10.9.0.253}"),
                  "  - [h1, sw]\n", "  - [h1, sw]\n  - [h1, s2]\n"),
             "ip: 10.9.0.2}", "ip: 10.9.0.2, iface: eno1}"),
        "hosts[1] (h1): iface/mac on a host need exactly one link; 'h1' has 2");
}
