// SPDX-License-Identifier: BSD-2-Clause
// Brings the shipped ring4 and line4 meshes up under unique prefixes and
// checks what the kernel has in each namespace (`ip -j addr` via nsenter):
// interface names, MACs, MTU, one address per link, no other address,
// no XDP program (the relay's to attach), rp_filter off; that every pair of neighbours pings over its
// link and a non-neighbour is unreachable; then down. Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <deque>
#include <mutex>
#include <tuple>
#include <unistd.h>

using namespace incxdp::topo;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace detail = incxdp::topo::detail;

namespace {

std::string shipped(const std::string &name) {
    return std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
}

bool ns_exists(const std::string &ns) {
    return access(("/var/run/netns/" + ns).c_str(), F_OK) == 0;
}

// Takes the meshes down however the test ends (also on SIGINT/SIGTERM).
class MeshGuard {
  public:
    MeshGuard() : on_interrupt_([this] { take_down(); }) {}
    ~MeshGuard() {
        try {
            take_down();
        } catch (const std::exception &e) {
            ADD_FAILURE() << "cleanup: " << e.what();
        }
    }
    // Registered before up(), so a half-done up() is covered too.
    const Topology &add(const std::string &name) { return add(Topology::load_file(shipped(name))); }
    const Topology &add(Topology t) {
        std::lock_guard<std::mutex> lock(mu_);
        const std::string prefix = "ixm" + std::to_string(getpid()) + t.name.substr(0, 1) + "-";
        up_.push_back({std::move(t), prefix});
        return up_.back().first;
    }
    std::string prefix(const Topology &t) const {
        for (const auto &[topo, p] : up_)
            if (&topo == &t)
                return p;
        return "";
    }

  private:
    void take_down() {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto &[t, p] : up_)
            down(t, p);
    }

    std::deque<std::pair<Topology, std::string>> up_; // add() hands out references
    std::mutex mu_;
    CleanupOnInterrupt on_interrupt_; // last: gone before what it takes down
};

// A command inside namespace ns, as an operator would run it.
detail::ProcResult in_ns(const std::string &ns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"nsenter", "--net=/var/run/netns/" + ns});
    return detail::run(argv);
}

bool pings(const std::string &ns, const std::string &iface, const std::string &addr) {
    // A second try covers a first ARP exchange lost while links settle.
    for (int attempt = 0; attempt < 2; ++attempt)
        if (in_ns(ns, {"ping", "-c1", "-W2", "-I", iface, addr}).status == 0)
            return true;
    return false;
}

// /proc/sys/net is the namespace of the process reading it.
std::string sysctl(const std::string &ns, const std::string &path) {
    const auto r = in_ns(ns, {"cat", path});
    EXPECT_EQ(r.status, 0) << path << ": " << r.err;
    return r.out.substr(0, r.out.find('\n'));
}

void check_mesh(const Topology &t, const std::string &prefix) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(status(t, prefix).state(), "up");
    for (const Node &n : t.nodes) {
        const std::string ns = netns_name(prefix, n.name);
        SCOPED_TRACE(ns);
        const auto r = in_ns(ns, {"ip", "-j", "addr", "show"});
        ASSERT_EQ(r.status, 0) << r.err;
        const json links = json::parse(r.out);
        // lo and exactly the topology's interfaces: no eth0, nothing else.
        EXPECT_EQ(links.size(), n.ifaces.size() + 1) << r.out;
        for (const Iface &want : n.ifaces) {
            SCOPED_TRACE(want.name);
            const json *got = nullptr;
            for (const json &l : links)
                if (l.value("ifname", "") == want.name)
                    got = &l;
            ASSERT_NE(got, nullptr) << r.out;
            EXPECT_EQ(got->value("address", ""), mac_to_string(want.mac));
            EXPECT_EQ(got->value("mtu", 0), t.mtu);
            EXPECT_EQ(got->value("operstate", ""), "UP");
            std::vector<std::string> addrs;
            for (const json &a : got->value("addr_info", json::array()))
                addrs.push_back(a.value("family", "") + " " + a.value("local", "") + "/" +
                                std::to_string(a.value("prefixlen", 0)));
            EXPECT_EQ(addrs, std::vector<std::string>{"inet " + want.ip + "/" +
                                                      std::to_string(want.prefix_len)});
            // Free for the relay: a program here would make `mesh run` fail.
            EXPECT_FALSE(got->contains("xdp")) << got->dump();
        }
        EXPECT_EQ(sysctl(ns, "/proc/sys/net/ipv4/conf/all/rp_filter"), "0");
        EXPECT_EQ(sysctl(ns, "/proc/sys/net/ipv4/conf/" + n.ifaces[0].name + "/rp_filter"), "0");
    }
    // Both directions of every link.
    for (const Link &l : t.links) {
        const Node &a = t.node(l.a), &b = t.node(l.b);
        for (const auto &[self, iface, peer, peer_iface] :
             {std::tuple{&a, l.a_iface, &b, l.b_iface}, std::tuple{&b, l.b_iface, &a, l.a_iface}}) {
            std::string peer_ip;
            for (const Iface &i : peer->ifaces)
                if (i.name == peer_iface)
                    peer_ip = i.ip;
            EXPECT_TRUE(pings(netns_name(prefix, self->name), iface, peer_ip))
                << self->name << ":" << iface << " -> " << peer->name << " " << peer_ip;
        }
    }
}

class NetnsMesh : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
    }
};

} // namespace

TEST_F(NetnsMesh, Ring4AndLine4UpPingDown) {
    MeshGuard g;
    const Topology &ring = g.add("ring4");
    const Topology &line = g.add("line4");
    ASSERT_NO_THROW(up(ring, g.prefix(ring)));
    ASSERT_NO_THROW(up(line, g.prefix(line)));
    check_mesh(ring, g.prefix(ring));
    check_mesh(line, g.prefix(line));

    // Not a neighbour: n0 has no route to the n2-n3 link (relaying is the
    // relay program's job), so this must fail.
    const std::string far = line.node("n3").ifaces[0].ip;
    EXPECT_NE(in_ns(netns_name(g.prefix(line), "n0"), {"ping", "-c1", "-W1", far}).status, 0);

    for (const Topology *t : {&ring, &line}) {
        EXPECT_EQ(down(*t, g.prefix(*t)), t->nodes.size());
        for (const Node &n : t->nodes)
            EXPECT_FALSE(ns_exists(netns_name(g.prefix(*t), n.name)));
    }
}

// A mesh built in code, as SMI builds its cabling: two cables between the
// same pair, explicit names and /30s; each pings over its own cable.
TEST_F(NetnsMesh, ParallelCablesWithExplicitNames) {
    MeshSpec spec;
    spec.name = "pair";
    spec.link_subnet = "10.99.0.0/16";
    spec.hosts = {"f0", "f1"};
    MeshLinkSpec l;
    l.a = "f0";
    l.b = "f1";
    l.a_iface = "ch2";
    l.b_iface = "ch3";
    l.subnet = "10.99.0.0/30";
    spec.links.push_back(l);
    l.a_iface = "ch3";
    l.b_iface = "ch2";
    l.subnet = "10.99.0.4/30";
    spec.links.push_back(l);
    MeshGuard g;
    const Topology &t = g.add(build_mesh(spec));
    ASSERT_NO_THROW(up(t, g.prefix(t)));
    check_mesh(t, g.prefix(t));
    EXPECT_EQ(down(t, g.prefix(t)), 2u);
}
