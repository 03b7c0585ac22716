// SPDX-License-Identifier: BSD-2-Clause
// Brings star.yaml up under a unique prefix and checks what the kernel has:
// namespaces, veths, MACs, MTU, addresses, neighbours, XDP_PASS on hosts,
// frames in both directions; then rollback, refusal and down. Needs root.
#include "process.h"
#include "../common/interrupt_cleanup.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <linux/if_packet.h>
#include <mutex>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace incxdp::topo;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace detail = incxdp::topo::detail;

namespace {

const std::string kStarPath = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml";

bool ns_exists(const std::string &ns) {
    return access(("/var/run/netns/" + ns).c_str(), F_OK) == 0;
}

// Always takes the topology and any extra namespaces down, however the test ends.
class TopoGuard {
  public:
    TopoGuard()
        : t(Topology::load_file(kStarPath)), prefix("ixt" + std::to_string(getpid()) + "-"),
          on_interrupt([this] { take_down(); }) {}
    ~TopoGuard() {
        try {
            take_down();
        } catch (const std::exception &e) {
            ADD_FAILURE() << "cleanup: " << e.what();
        }
    }
    std::string ns(const std::string &node) const { return netns_name(prefix, node); }
    void add_extra(const std::string &name) {
        {
            std::lock_guard<std::mutex> lock(extra_mu);
            extra.push_back(name);
        }
        detail::run_ok({"ip", "netns", "add", name}, "test setup");
    }

    const Topology t;
    const std::string prefix;

  private:
    void take_down() {
        down(t, prefix);
        std::lock_guard<std::mutex> lock(extra_mu);
        for (const auto &ns : extra)
            detail::run({"ip", "netns", "del", ns});
    }

    std::vector<std::string> extra;
    std::mutex extra_mu; // add_extra and a cleanup after a signal
    CleanupOnInterrupt on_interrupt; // last: gone before what it takes down
};

json ip_json(const std::vector<std::string> &argv) {
    return json::parse(detail::run_ok(argv, "test query"));
}

uint64_t rx_bytes(const std::string &ns, const std::string &dev) {
    const json j = ip_json({"ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev});
    return j.at(0).at("stats64").at("rx").at("bytes").get<uint64_t>();
}

uint16_t ip_checksum(const void *data, size_t len) {
    uint32_t sum = 0;
    const auto *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return htons(static_cast<uint16_t>(~sum));
}

// An Ethernet/IPv4/UDP frame, the way the switch engine would address a
// result to a worker (UDP checksum 0 = none, valid for IPv4).
std::vector<uint8_t> udp_frame(const Mac &dst, const Mac &src, const std::string &sip,
                               const std::string &dip, uint16_t dport, const std::string &payload) {
    std::vector<uint8_t> f(sizeof(ether_header) + sizeof(iphdr) + sizeof(udphdr) + payload.size());
    auto *eth = reinterpret_cast<ether_header *>(f.data());
    std::memcpy(eth->ether_dhost, dst.data(), 6);
    std::memcpy(eth->ether_shost, src.data(), 6);
    eth->ether_type = htons(ETHERTYPE_IP);
    auto *ip = reinterpret_cast<iphdr *>(eth + 1);
    ip->version = 4;
    ip->ihl = 5;
    ip->tot_len = htons(static_cast<uint16_t>(f.size() - sizeof(ether_header)));
    ip->ttl = 64;
    ip->protocol = IPPROTO_UDP;
    inet_pton(AF_INET, sip.c_str(), &ip->saddr);
    inet_pton(AF_INET, dip.c_str(), &ip->daddr);
    ip->check = ip_checksum(ip, sizeof(*ip));
    auto *udp = reinterpret_cast<udphdr *>(ip + 1);
    udp->source = htons(48880);
    udp->dest = htons(dport);
    udp->len = htons(static_cast<uint16_t>(sizeof(udphdr) + payload.size()));
    std::memcpy(udp + 1, payload.data(), payload.size());
    return f;
}

class NetnsTopo : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
    }
};

} // namespace

TEST_F(NetnsTopo, UpStatusDown) {
    TopoGuard g;
    ASSERT_NO_THROW(up(g.t, g.prefix));

    const TopologyStatus s = status(g.t, g.prefix);
    EXPECT_EQ(s.state(), "up");
    EXPECT_EQ(s.namespaces_present(), 5u);
    for (size_t n = 0; n < s.nodes.size(); ++n) {
        const Node &want = g.t.nodes[n];
        const NodeStatus &got = s.nodes[n];
        EXPECT_TRUE(got.exists) << got.netns;
        ASSERT_EQ(got.ifaces.size(), want.ifaces.size());
        for (size_t k = 0; k < want.ifaces.size(); ++k) {
            const IfaceStatus &i = got.ifaces[k];
            SCOPED_TRACE(got.netns + " " + i.name);
            EXPECT_TRUE(i.exists);
            EXPECT_TRUE(i.up);
            EXPECT_EQ(i.operstate, "UP");
            EXPECT_EQ(i.mac, mac_to_string(want.ifaces[k].mac));
            EXPECT_EQ(i.mtu, 3500);
            if (want.kind == NodeKind::Host) {
                EXPECT_EQ(i.addrs, std::vector<std::string>{want.ip + "/24"});
                EXPECT_EQ(i.xdp.name, "incxdp_pass");
                EXPECT_EQ(i.xdp.mode, "native");
                EXPECT_NE(i.xdp.id, 0u);
            } else {
                EXPECT_TRUE(i.addrs.empty());
                EXPECT_EQ(i.xdp.id, 0u) << "topo must leave switch ports to `incxdp load`";
            }
        }
    }

    // Each host reaches the switch's service address without ARP.
    for (const char *h : {"w0", "w1", "w2", "w3"}) {
        SCOPED_TRACE(h);
        const json neigh = ip_json({"ip", "-n", g.ns(h), "-j", "neigh", "show", "dev", "eth0"});
        ASSERT_EQ(neigh.size(), 1u) << neigh.dump();
        EXPECT_EQ(neigh[0].value("dst", ""), "10.77.0.254");
        EXPECT_EQ(neigh[0].value("lladdr", ""), mac_to_string(g.t.switch_port_for("sw", h).mac));
        EXPECT_EQ(neigh[0].value("state", json::array()), json::array({"PERMANENT"}));
        // IPv6 is off: no link-local addresses, no router solicitations.
        EXPECT_TRUE(ip_json({"ip", "-n", g.ns(h), "-j", "-6", "addr", "show"}).empty());
    }
    detail::in_netns(
        g.ns("sw"),
        [] {
            std::ifstream f("/proc/sys/net/ipv6/conf/all/disable_ipv6");
            std::string v;
            f >> v;
            if (v != "1")
                throw std::runtime_error("disable_ipv6 is '" + v + "'");
        },
        "check sysctl");

    // Host -> switch: a full-size datagram arrives unfragmented at the port.
    const uint64_t before = rx_bytes(g.ns("sw"), "p-w1");
    detail::in_netns(
        g.ns("w1"),
        [] {
            const int fd = socket(AF_INET, SOCK_DGRAM, 0);
            sockaddr_in to{};
            to.sin_family = AF_INET;
            to.sin_port = htons(4000);
            inet_pton(AF_INET, "10.77.0.254", &to.sin_addr);
            const std::string payload(3400, 'x');
            const ssize_t n = sendto(fd, payload.data(), payload.size(), 0,
                                     reinterpret_cast<sockaddr *>(&to), sizeof(to));
            close(fd);
            if (n != static_cast<ssize_t>(payload.size()))
                throw std::runtime_error(std::string("sendto: ") + std::strerror(errno));
        },
        "send from w1");
    uint64_t after = before;
    for (int i = 0; i < 50 && after < before + 3400; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        after = rx_bytes(g.ns("sw"), "p-w1");
    }
    EXPECT_GE(after - before, 14u + 20 + 8 + 3400) << "datagram did not reach sw:p-w1";

    // Switch -> host: a frame sent out of a switch port goes through the
    // host's XDP_PASS program into its UDP stack. The receiver (a child in
    // w2's namespace) says when its socket is bound, and the frame goes
    // until it has it: a fixed number of tries before an unknown start
    // missed it once (CI, the receiver timed out after 25 frames in 2.5 s).
    int bound[2];
    ASSERT_EQ(pipe(bound), 0) << std::strerror(errno);
    std::atomic<bool> received{false};
    std::string recv_error;
    std::thread receiver([&] {
        try {
            detail::in_netns(
                g.ns("w2"),
                [&] {
                    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
                    sockaddr_in a{};
                    a.sin_family = AF_INET;
                    a.sin_port = htons(4000);
                    inet_pton(AF_INET, "10.77.0.3", &a.sin_addr);
                    timeval tv{20, 0};
                    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0)
                        throw std::runtime_error(std::string("bind: ") + std::strerror(errno));
                    if (write(bound[1], "b", 1) != 1)
                        throw std::runtime_error(std::string("write: ") + std::strerror(errno));
                    char buf[64] = {};
                    const ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
                    close(fd);
                    if (n < 0)
                        throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
                    if (std::string(buf) != "incxdp-topo-test")
                        throw std::runtime_error(std::string("payload '") + buf + "'");
                },
                "receive on w2");
        } catch (const std::exception &e) {
            recv_error = e.what();
        }
        received = true;
    });
    const auto frame =
        udp_frame(g.t.host_iface_for("w2", "sw").mac, g.t.switch_port_for("sw", "w2").mac,
                  "10.77.0.254", "10.77.0.3", 4000, "incxdp-topo-test");
    // Wait until the receiver's child has bound its socket, or the receiver
    // is done (it failed).
    char b = 0;
    pollfd pfd{bound[0], POLLIN, 0};
    for (int i = 0; i < 200 && !received && poll(&pfd, 1, 100) == 0; ++i) {
    }
    if (pfd.revents & POLLIN) {
        EXPECT_EQ(read(bound[0], &b, 1), 1);
    }
    // Resend until the receiver has it (a frame can still be lost while
    // the link settles); its own timeout ends this if none arrives.
    for (int i = 0; i < 150 && !received; ++i) {
        detail::in_netns(
            g.ns("sw"),
            [&] {
                const int fd = socket(AF_PACKET, SOCK_RAW, 0);
                sockaddr_ll ll{};
                ll.sll_family = AF_PACKET;
                ll.sll_ifindex = static_cast<int>(if_nametoindex("p-w2"));
                ll.sll_halen = 6;
                const ssize_t n = sendto(fd, frame.data(), frame.size(), 0,
                                         reinterpret_cast<sockaddr *>(&ll), sizeof(ll));
                close(fd);
                if (n != static_cast<ssize_t>(frame.size()))
                    throw std::runtime_error(std::string("sendto: ") + std::strerror(errno));
            },
            "send from sw:p-w2");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    receiver.join();
    close(bound[0]);
    close(bound[1]);
    EXPECT_EQ(b, 'b') << "the receiver never bound its socket";
    EXPECT_EQ(recv_error, "");

    EXPECT_EQ(down(g.t, g.prefix), 5u);
    EXPECT_EQ(status(g.t, g.prefix).state(), "down");
    for (const auto &n : g.t.nodes)
        EXPECT_FALSE(ns_exists(g.ns(n.name)));
}

TEST_F(NetnsTopo, RefusesWhenAlreadyUpAndChangesNothing) {
    TopoGuard g;
    g.add_extra(g.ns("w2"));
    try {
        up(g.t, g.prefix);
        ADD_FAILURE() << "up() succeeded over an existing namespace";
    } catch (const NetnsError &e) {
        EXPECT_NE(std::string(e.what()).find("topology star already up with prefix '" + g.prefix +
                                             "' (namespace " + g.ns("w2") + " exists)"),
                  std::string::npos)
            << e.what();
    }
    for (const char *n : {"sw", "w0", "w1", "w3"})
        EXPECT_FALSE(ns_exists(g.ns(n))) << n;
    EXPECT_TRUE(ns_exists(g.ns("w2")));
}

TEST_F(NetnsTopo, RollsBackOnFailure) {
    TopoGuard g;
    // Fail late: after every namespace and link exists, at the XDP step.
    std::vector<std::string> steps;
    const Progress fail_at_xdp = [&](const std::string &step) {
        steps.push_back(step);
        if (step.rfind("xdp w2", 0) == 0)
            throw NetnsError("injected failure at: " + step);
    };
    try {
        up(g.t, g.prefix, fail_at_xdp);
        ADD_FAILURE() << "up() ignored the failure";
    } catch (const NetnsError &e) {
        EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos);
    }
    EXPECT_GT(steps.size(), 10u);
    EXPECT_EQ(status(g.t, g.prefix).state(), "down");
    for (const auto &n : g.t.nodes)
        EXPECT_FALSE(ns_exists(g.ns(n.name))) << n.name;
}

TEST_F(NetnsTopo, DownTouchesOnlyItsOwnNamespaces) {
    TopoGuard g;
    g.add_extra(g.prefix + "other");    // same prefix, not a node
    g.add_extra("x" + g.prefix + "sw"); // a node name under another prefix
    ASSERT_NO_THROW(up(g.t, g.prefix));
    EXPECT_EQ(down(g.t, g.prefix), 5u);
    EXPECT_TRUE(ns_exists(g.prefix + "other"));
    EXPECT_TRUE(ns_exists("x" + g.prefix + "sw"));
    EXPECT_EQ(down(g.t, g.prefix), 0u); // already down: nothing to do, no error
}
