// SPDX-License-Identifier: BSD-2-Clause
// Parsing, derivations and every validation error of topology.h.
#include "../common/yaml_edit.h"

#include <incxdp/topology.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace incxdp::topo;
using incxdp::test::with;

namespace {

const std::string kStarPath = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml";

// A compact star: the base every validation case edits one piece of.
const std::string kBase = R"(name: t
subnet: 10.9.0.0/24
switches:
  - {name: sw, ip: 10.9.0.254}
hosts:
  - {name: h0, ip: 10.9.0.1}
  - {name: h1, ip: 10.9.0.2}
links:
  - [h0, sw]
  - [h1, sw]
jobs:
  - {id: 3, switch: sw, workers: [h1, h0]}
)";


#define EXPECT_ERROR(yaml, substr)                                                                 \
    do {                                                                                           \
        const std::string msg_ = incxdp::test::parse_error(yaml);                                  \
        EXPECT_NE(msg_.find(substr), std::string::npos)                                            \
            << "expected error containing: " << (substr) << "\n got: '" << msg_ << "'";            \
    } while (0)

} // namespace

TEST(Topology, ParsesStar) {
    const Topology t = Topology::load_file(kStarPath);
    EXPECT_EQ(t.name, "star");
    EXPECT_EQ(t.subnet, "10.77.0.0/24");
    EXPECT_EQ(t.prefix_len, 24);
    EXPECT_EQ(t.mtu, 3500);
    ASSERT_EQ(t.nodes.size(), 5u);
    const char *names[] = {"sw", "w0", "w1", "w2", "w3"};
    for (size_t i = 0; i < 5; ++i)
        EXPECT_EQ(t.nodes[i].name, names[i]);
    EXPECT_EQ(t.nodes[0].kind, NodeKind::Switch);
    EXPECT_EQ(t.nodes[0].ip, "10.77.0.254");
    EXPECT_EQ(t.nodes[3].kind, NodeKind::Host);
    EXPECT_EQ(t.nodes[3].ip, "10.77.0.3");
    ASSERT_EQ(t.links.size(), 4u);
    EXPECT_EQ(t.links[1].a, "w1");
    EXPECT_EQ(t.links[1].b, "sw");

    const Node &sw = t.node("sw");
    ASSERT_EQ(sw.ifaces.size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(sw.ifaces[k].name, "p-w" + std::to_string(k));
        EXPECT_EQ(mac_to_string(sw.ifaces[k].mac), "02:49:58:00:0" + std::to_string(k) + ":00");
        EXPECT_EQ(sw.ifaces[k].peer_node, "w" + std::to_string(k));
        EXPECT_EQ(sw.ifaces[k].peer_iface, "eth0");
    }
    const Node &w2 = t.node("w2");
    ASSERT_EQ(w2.ifaces.size(), 1u);
    EXPECT_EQ(w2.ifaces[0].name, "eth0");
    EXPECT_EQ(mac_to_string(w2.ifaces[0].mac), "02:49:58:03:00:00");
    EXPECT_EQ(w2.ifaces[0].peer_node, "sw");
    EXPECT_EQ(w2.ifaces[0].peer_iface, "p-w2");

    ASSERT_EQ(t.jobs.size(), 1u);
    const Job &j = t.job(1);
    EXPECT_EQ(j.switch_name, "sw");
    EXPECT_EQ(j.workers, (std::vector<std::string>{"w0", "w1", "w2", "w3"}));
    EXPECT_EQ(j.worker_port, 4000);
    EXPECT_EQ(j.slots, 128u);

    EXPECT_EQ(t.switch_port_for("sw", "w3").name, "p-w3");
    EXPECT_EQ(&t.host_iface_for("w1", "sw"), &t.node("w1").ifaces[0]);
}

TEST(Topology, LookupErrors) {
    const Topology t = Topology::load_file(kStarPath);
    EXPECT_THROW(t.node("w9"), TopologyError);
    EXPECT_THROW(t.job(2), TopologyError);
    EXPECT_THROW(t.switch_port_for("w0", "sw"), TopologyError); // w0 is a host
    EXPECT_THROW(t.host_iface_for("w0", "w1"), TopologyError);  // no such link
}

TEST(Topology, Defaults) {
    const Topology t = Topology::parse(kBase);
    EXPECT_EQ(t.mtu, 3500);
    EXPECT_EQ(t.job(3).worker_port, 4000);
    EXPECT_EQ(t.job(3).slots, 256u);
    EXPECT_EQ(t.job(3).workers, (std::vector<std::string>{"h1", "h0"})); // rank order kept
    EXPECT_EQ(Topology::parse(with(kBase, "subnet:", "mtu: 3506\nsubnet:")).mtu, 3506);
    EXPECT_TRUE(
        Topology::parse(with(kBase, "jobs:\n  - {id: 3, switch: sw, workers: [h1, h0]}\n", ""))
            .jobs.empty());
}

TEST(Topology, SwitchToSwitchAndMultiHomedHosts) {
    const Topology t = Topology::parse(R"(name: tree
subnet: 10.8.0.0/16
switches:
  - {name: root, ip: 10.8.255.1}
  - {name: leaf-a, ip: 10.8.255.2}
  - {name: leaf_b, ip: 10.8.255.3}
hosts:
  - {name: h0, ip: 10.8.0.1}
  - {name: h1, ip: 10.8.0.2}
links:
  - [leaf-a, root]
  - [root, leaf_b]
  - [h0, leaf-a]
  - [h0, leaf_b]
  - [h1, leaf_b]
jobs:
  - {id: 0, switch: leaf_b, workers: [h0, h1], worker_port: 5000, slots: 16384}
)");
    const Node &root = t.node("root");
    ASSERT_EQ(root.ifaces.size(), 2u);
    EXPECT_EQ(root.ifaces[0].name, "p-leaf-a");
    EXPECT_EQ(root.ifaces[0].peer_iface, "p-root");
    EXPECT_EQ(root.ifaces[1].name, "p-leaf_b");
    const Node &h0 = t.node("h0");
    ASSERT_EQ(h0.ifaces.size(), 2u);
    EXPECT_EQ(h0.ifaces[0].name, "eth0");
    EXPECT_EQ(h0.ifaces[1].name, "eth1");
    EXPECT_EQ(mac_to_string(h0.ifaces[1].mac), "02:49:58:03:01:00"); // node 3, iface 1
    EXPECT_EQ(t.host_iface_for("h0", "leaf_b").name, "eth1");
    EXPECT_EQ(t.switch_port_for("leaf_b", "h0").name, "p-h0");
    EXPECT_EQ(t.job(0).worker_port, 5000);
    EXPECT_EQ(t.job(0).slots, 16384u);
}

TEST(Topology, Mac) {
    const Mac m{0x02, 0x49, 0x58, 0xab, 0x0c, 0x00};
    EXPECT_EQ(mac_to_string(m), "02:49:58:ab:0c:00");
    EXPECT_EQ(mac_from_string("02:49:58:AB:0c:00"), m);
    for (const char *bad :
         {"", "02:49:58:ab:0c", "02:49:58:ab:0c:00:11", "02-49-58-ab-0c-00", "02:49:58:ab:0c:0g"})
        EXPECT_THROW(mac_from_string(bad), TopologyError) << bad;
}

TEST(Topology, NetnsName) {
    EXPECT_EQ(netns_name("ix-", "sw"), "ix-sw");
    EXPECT_EQ(netns_name("ixt123-", "worker-00001"), "ixt123-worker-00001");
    EXPECT_THROW(netns_name("", "sw"), TopologyError);
    EXPECT_THROW(netns_name("a/b", "sw"), TopologyError);
    EXPECT_THROW(netns_name("x y", "sw"), TopologyError);
    EXPECT_THROW(netns_name(std::string(25, 'p'), "abcdefgh"), TopologyError); // 33 chars
    EXPECT_EQ(netns_name(std::string(24, 'p'), "abcdefgh").size(), 32u);
}

TEST(Topology, SyntaxErrorHasPosition) {
    EXPECT_ERROR("name: t\nsubnet: [10.0.0.0/8\n", "<topology>:3:1: YAML syntax error");
    EXPECT_ERROR("", "<topology>: empty topology file");
    EXPECT_ERROR("- a\n- b\n", "expected a mapping");
}

TEST(Topology, FileErrorsNameTheFile) {
    EXPECT_THROW(
        {
            try {
                Topology::load_file("/nonexistent/x.yaml");
            } catch (const TopologyError &e) {
                EXPECT_STREQ(e.what(),
                             "cannot read topology file /nonexistent/x.yaml: No such file or "
                             "directory");
                throw;
            }
        },
        TopologyError);
    const std::string path = "/tmp/incxdp_test_topology_" + std::to_string(getpid()) + ".yaml";
    std::ofstream(path) << with(kBase, "  - [h1, sw]", "  - [h1, sw9]");
    std::string msg;
    try {
        Topology::load_file(path);
    } catch (const TopologyError &e) {
        msg = e.what();
    }
    std::remove(path.c_str());
    EXPECT_EQ(msg, path + ":10:10: links[1]: unknown node 'sw9'");
}

TEST(Topology, MissingKeys) {
    EXPECT_ERROR(with(kBase, "name: t\n", ""), "<topology>:1:1: missing required key 'name'");
    EXPECT_ERROR(with(kBase, "subnet: 10.9.0.0/24\n", ""), "missing required key 'subnet'");
    EXPECT_ERROR(with(kBase, "switches:\n  - {name: sw, ip: 10.9.0.254}\n", ""),
                 "missing required key 'switches'");
    EXPECT_ERROR(with(kBase, "links:\n  - [h0, sw]\n  - [h1, sw]\n", ""),
                 "missing required key 'links'");
    EXPECT_ERROR(with(kBase, "{name: h1, ip: 10.9.0.2}", "{name: h1}"),
                 ":7:5: hosts[1] (h1): missing required key 'ip'");
    EXPECT_ERROR(with(kBase, "{name: sw, ip", "{nme: sw, ip"),
                 "switches[0]: unknown key 'nme' (expected one of: name, ip)");
    EXPECT_ERROR(with(kBase, "id: 3, ", ""), "jobs[0]: missing required key 'id'");
    EXPECT_ERROR(with(kBase, "switch: sw, ", ""), "jobs[0] (id 3): missing required key 'switch'");
    EXPECT_ERROR(with(kBase, ", workers: [h1, h0]", ""),
                 "jobs[0] (id 3): missing required key 'workers'");
    EXPECT_ERROR(with(kBase, "switches:\n  - {name: sw, ip: 10.9.0.254}\n", "switches: []\n"),
                 "switches: at least one entry is required");
}

TEST(Topology, UnknownAndDuplicateKeys) {
    EXPECT_ERROR(with(kBase, "subnet:", "colour: red\nsubnet:"),
                 "<topology>:2:1: unknown key 'colour'");
    EXPECT_ERROR(with(kBase, "workers:", "worker_prot: 1, workers:"),
                 "jobs[0]: unknown key 'worker_prot'");
    EXPECT_ERROR(with(kBase, "subnet:", "name: u\nsubnet:"), "duplicate key 'name'");
}

TEST(Topology, Mtu) {
    EXPECT_EQ(Topology::parse(with(kBase, "subnet:", "mtu: 9000\nsubnet:")).mtu, 9000);
    EXPECT_ERROR(with(kBase, "subnet:", "mtu: 9001\nsubnet:"),
                 "mtu: 9001 is above 9000, the largest (jumbo) MTU incxdp supports");
    EXPECT_ERROR(with(kBase, "subnet:", "mtu: 60\nsubnet:"), "mtu: 60 is out of range [68,");
    EXPECT_ERROR(with(kBase, "subnet:", "mtu: big\nsubnet:"), "mtu: 'big' is not an integer");
}

TEST(Topology, Subnet) {
    EXPECT_ERROR(with(kBase, "10.9.0.0/24", "10.9.0/24"), "bad CIDR '10.9.0/24'");
    EXPECT_ERROR(with(kBase, "10.9.0.0/24", "10.9.0.0"), "bad CIDR '10.9.0.0'");
    EXPECT_ERROR(with(kBase, "10.9.0.0/24", "10.9.0.0/33"), "prefix length must be 1..30");
    EXPECT_ERROR(with(kBase, "10.9.0.0/24", "10.9.0.0/x"), "prefix length must be 1..30");
    EXPECT_ERROR(with(kBase, "10.9.0.0/24", "10.9.0.7/24"),
                 "<topology>:2:9: subnet: bad CIDR '10.9.0.7/24': host bits set (did you mean "
                 "10.9.0.0/24?)");
}

TEST(Topology, Addresses) {
    EXPECT_ERROR(with(kBase, "10.9.0.2}", "10.9.1.2}"),
                 "hosts[1] (h1): address 10.9.1.2 is not a usable address of subnet 10.9.0.0/24");
    EXPECT_ERROR(with(kBase, "10.9.0.254}", "10.9.0.255}"), "not a usable address");
    EXPECT_ERROR(with(kBase, "10.9.0.2}", "10.9.0.x}"), "hosts[1] (h1): bad IPv4 address");
    EXPECT_ERROR(with(kBase, "10.9.0.2}", "10.9.0.1}"),
                 "hosts[1] (h1): duplicate address 10.9.0.1 (also used by 'h0')");
    EXPECT_ERROR(with(kBase, "10.9.0.2}", "10.9.0.254}"), "(also used by 'sw')");
}

TEST(Topology, NodeNames) {
    EXPECT_ERROR(with(kBase, "{name: h1,", "{name: h0,"),
                 "hosts[1] (h0): duplicate node name 'h0'");
    EXPECT_ERROR(with(kBase, "{name: h1,", "{name: sw,"), "duplicate node name 'sw'");
    EXPECT_ERROR(with(kBase, "{name: h1,", "{name: abcdefghijklm,"),
                 "hosts[1]: bad node name 'abcdefghijklm': use 1-12 characters from [a-z0-9_-]");
    EXPECT_ERROR(with(kBase, "{name: h1,", "{name: H1,"), "bad node name 'H1'");
    EXPECT_ERROR(with(kBase, "{name: h1,", "{name: h.1,"), "bad node name 'h.1'");
    EXPECT_ERROR(with(kBase, "name: t\n", "name: T\n"), "bad topology name 'T'");
}

TEST(Topology, Links) {
    EXPECT_ERROR(with(kBase, "[h1, sw]", "[h1, sw9]"), ":10:10: links[1]: unknown node 'sw9'");
    EXPECT_ERROR(with(kBase, "[h1, sw]", "[h1]"), "links[1]: expected a pair of node names");
    EXPECT_ERROR(with(kBase, "[h1, sw]", "[sw, sw]"), "links[1]: node 'sw' is linked to itself");
    EXPECT_ERROR(with(kBase, "[h1, sw]", "[h1, h0]"),
                 "links[1]: hosts 'h1' and 'h0' cannot be linked directly");
    EXPECT_ERROR(with(kBase, "[h1, sw]", "[sw, h0]"),
                 "links[1]: duplicate link between 'sw' and 'h0'");
}

TEST(Topology, Jobs) {
    EXPECT_ERROR(with(kBase, "switch: sw,", "switch: sx,"), "jobs[0] (id 3): unknown node 'sx'");
    EXPECT_ERROR(with(kBase, "switch: sw,", "switch: h0,"), "'h0' is a host, not a switch");
    EXPECT_ERROR(with(kBase, "[h1, h0]}", "[h1, h7]}"), "jobs[0] (id 3): unknown node 'h7'");
    EXPECT_ERROR(with(kBase, "[h1, h0]}", "[h1, sw]}"), "worker 'sw' is a switch, not a host");
    EXPECT_ERROR(with(kBase, "[h1, h0]}", "[h1, h1]}"), "worker 'h1' is listed twice");
    EXPECT_ERROR(with(kBase, "[h1, h0]}", "[]}"), "expected a non-empty list of host names");
    EXPECT_ERROR(with(kBase, "id: 3", "id: 256"), "jobs[0].id: 256 is out of range [0, 255]");
    EXPECT_ERROR(with(kBase, "h0]}", "h0], worker_port: 0}"), "worker_port: 0 is out of range");
    EXPECT_ERROR(with(kBase, "h0]}", "h0], slots: 16385}"), "slots: 16385 is out of range");
    EXPECT_ERROR(with(kBase, "h0]}\n", "h0]}\n  - {id: 3, switch: sw, workers: [h0]}\n"),
                 "jobs[1] (id 3): duplicate job id 3");
}

TEST(Topology, WorkerMustBeLinkedToTheJobSwitch) {
    const std::string yaml =
        with(with(kBase, "  - {name: sw, ip: 10.9.0.254}\n",
                  "  - {name: sw, ip: 10.9.0.254}\n  - {name: sw2, ip: 10.9.0.253}\n"),
             "  - [h1, sw]\n", "  - [h1, sw2]\n  - [sw2, sw]\n");
    EXPECT_ERROR(yaml, "jobs[0] (id 3): worker 'h1' is not directly linked to switch 'sw'");
}

TEST(Topology, AtMost32Workers) {
    std::string hosts, links, workers;
    for (int i = 0; i < 33; ++i) {
        hosts +=
            "  - {name: h" + std::to_string(i) + ", ip: 10.9.0." + std::to_string(i + 1) + "}\n";
        links += "  - [h" + std::to_string(i) + ", sw]\n";
        workers += (i ? ", h" : "h") + std::to_string(i);
    }
    const std::string head = "name: t\nsubnet: 10.9.0.0/24\nswitches:\n  - {name: sw, ip: "
                             "10.9.0.254}\nhosts:\n" +
                             hosts + "links:\n" + links;
    const std::string last = workers.substr(0, workers.rfind(','));
    EXPECT_NO_THROW(
        Topology::parse(head + "jobs:\n  - {id: 1, switch: sw, workers: [" + last + "]}\n"));
    EXPECT_ERROR(head + "jobs:\n  - {id: 1, switch: sw, workers: [" + workers + "]}\n",
                 "jobs[0] (id 1).workers: 33 workers; at most 32 are supported");
}
