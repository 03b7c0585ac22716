// SPDX-License-Identifier: BSD-2-Clause
// The injector's control library (loader/chaos_ctl.cpp, chaos_links.cpp):
// rate parsing, the --all-links plan, and (root) the life cycle of an
// attachment on a veth pair in a private network namespace with a private
// pin root: attach, change rates without reload, counters, detach, stale
// pins after the interface is gone.
#include <incxdp/chaos_ctl.h>

#include "../common/interrupt_cleanup.h"
#include "../common/private_netns.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

namespace incxdp::test {
namespace {

namespace chaos = ctl::chaos;
using chaos::Hook;

TEST(ChaosRates, ParsesPercentAndFractions) {
    EXPECT_EQ(chaos::parse_rate("5%", "--loss"), 50000u);
    EXPECT_EQ(chaos::parse_rate("0.5%", "--loss"), 5000u);
    EXPECT_EQ(chaos::parse_rate("0.05", "--loss"), 50000u);
    EXPECT_EQ(chaos::parse_rate("0", "--loss"), 0u);
    EXPECT_EQ(chaos::parse_rate("0%", "--loss"), 0u);
    EXPECT_EQ(chaos::parse_rate("100%", "--loss"), 1000000u);
    EXPECT_EQ(chaos::parse_rate("1", "--loss"), 1000000u);
    EXPECT_EQ(chaos::parse_rate("0.0001%", "--loss"), 1u);
}

TEST(ChaosRates, RefusesWhatIsNotARate) {
    for (const char *bad :
         {"120%", "1.5", "5", "abc", "", "%", "-1%", "5%%", "1e-2", "0.00001%", " 5%"})
        EXPECT_THROW(chaos::parse_rate(bad, "--dup"), ctl::CtlError) << "'" << bad << "'";
    try {
        chaos::parse_rate("5", "--loss");
    } catch (const ctl::CtlError &e) {
        EXPECT_STREQ(e.what(), "--loss '5': a fraction above 1 (for percent write '5%')");
    }
}

TEST(ChaosRates, FormatsShortest) {
    EXPECT_EQ(chaos::format_rate(0), "0%");
    EXPECT_EQ(chaos::format_rate(50000), "5%");
    EXPECT_EQ(chaos::format_rate(1500), "0.15%");
    EXPECT_EQ(chaos::format_rate(1), "0.0001%");
    EXPECT_EQ(chaos::format_rate(1000000), "100%");
}

TEST(ChaosPlan, StarFaultsBothDirectionsAtTheHosts) {
    auto t =
        topo::Topology::load_file(std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml");
    auto plan = chaos::all_links(t, "p-");
    EXPECT_TRUE(plan.unreachable.empty());
    ASSERT_EQ(plan.hooks.size(), 8u);
    for (int w = 0; w < 4; w++) {
        for (int k = 0; k < 2; k++) {
            const auto &h = plan.hooks[size_t(2 * w + k)];
            EXPECT_EQ(h.node, "w" + std::to_string(w));
            EXPECT_EQ(h.netns, "p-w" + std::to_string(w));
            EXPECT_EQ(h.iface, "eth0");
            EXPECT_EQ(h.peer, "sw");
            EXPECT_EQ(h.hook, k == 0 ? Hook::Egress : Hook::Ingress);
        }
    }
}

// h1 - s1 - s2: one host link, one switch-switch link.
topo::Topology two_switches() {
    return topo::Topology::parse(R"(
name: two
subnet: 10.9.0.0/24
switches:
  - {name: s1, ip: 10.9.0.253}
  - {name: s2, ip: 10.9.0.254}
hosts:
  - {name: h1, ip: 10.9.0.1}
links:
  - [h1, s1]
  - [s1, s2]
)");
}

TEST(ChaosPlan, SwitchToSwitchLinksAreUnreachable) {
    auto t = two_switches();
    auto plan = chaos::all_links(t, "x-");
    ASSERT_EQ(plan.unreachable, std::vector<std::string>{"s1-s2"});
    ASSERT_EQ(plan.hooks.size(), 2u);
    EXPECT_EQ(plan.hooks[0].netns, "x-h1");
}

TEST(ChaosPlan, XdpFaultsEveryLinkAtBothReceivingEnds) {
    auto t = two_switches();
    auto plan = chaos::all_links(t, "x-", true);
    EXPECT_TRUE(plan.unreachable.empty());
    ASSERT_EQ(plan.hooks.size(), 4u);
    std::set<std::pair<std::string, std::string>> ends; // (node, peer)
    for (const auto &h : plan.hooks) {
        EXPECT_EQ(h.hook, Hook::Xdp);
        EXPECT_EQ(h.netns, "x-" + h.node);
        ends.insert({h.node, h.peer});
    }
    EXPECT_EQ(ends, (std::set<std::pair<std::string, std::string>>{
                        {"h1", "s1"}, {"s1", "h1"}, {"s1", "s2"}, {"s2", "s1"}}));
}

// A veth pair in a namespace of this process alone: what the library does
// with interfaces, filters and pins, without touching the machine's.
class ChaosVeth : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        if (error_ = enter_private_netns(); !error_.empty())
            return;
        root_ = "/sys/fs/bpf/incxdp-chaos-ctltest-" + std::to_string(getpid());
        on_interrupt_.emplace([root = root_] { std::filesystem::remove_all(root); });
        error_ = add_veth_pair("veA", "veB");
    }

    static void TearDownTestSuite() {
        // The namespace dies with the process; the pins would not.
        std::error_code ec;
        std::filesystem::remove_all(root_, ec);
        on_interrupt_.reset();
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (tc, BPF, namespaces)";
        ASSERT_TRUE(error_.empty()) << error_;
    }

    void TearDown() override {
        for (const auto &s : chaos::status("", root_))
            if (s.attached)
                chaos::off(s.iface, s.hook, root_);
    }

    // Sends n raw Ethernet frames out of `iface` (AF_PACKET goes through
    // the qdisc layer, so through tc egress).
    static void send_frames(const std::string &iface, int n) {
        int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0) << strerror(errno);
        sockaddr_ll sa{};
        sa.sll_family = AF_PACKET;
        sa.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
        sa.sll_halen = ETH_ALEN;
        unsigned char frame[60] = {0x02, 0, 0, 0, 0, 2,    0x02,
                                   0,    0, 0, 0, 1, 0x88, 0xb5}; // local experimental
        for (int i = 0; i < n; i++)
            ASSERT_EQ(
                sendto(fd, frame, sizeof(frame), 0, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)),
                ssize_t(sizeof(frame)))
                << strerror(errno);
        close(fd);
    }

    static inline std::string error_, root_;
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;
};

TEST_F(ChaosVeth, AttachChangeRatesAndDetach) {
    chaos::RateUpdate u;
    u.loss_ppm = 50000;
    auto s = chaos::set("veA", Hook::Egress, u, root_);
    EXPECT_TRUE(s.attached);
    EXPECT_TRUE(s.enabled);
    EXPECT_NE(s.prog_id, 0u);
    EXPECT_EQ(s.rates.loss_ppm, 50000u);
    EXPECT_EQ(s.rates.dup_ppm, 0u);
    EXPECT_TRUE(std::filesystem::exists(root_)) << root_;

    // Rates not named keep their value; the program stays (no reload).
    chaos::RateUpdate u2;
    u2.dup_ppm = 10000;
    auto s2 = chaos::set("veA", Hook::Egress, u2, root_);
    EXPECT_EQ(s2.prog_id, s.prog_id);
    EXPECT_EQ(s2.rates.loss_ppm, 50000u);
    EXPECT_EQ(s2.rates.dup_ppm, 10000u);

    // The ingress hook is a separate instance.
    EXPECT_FALSE(chaos::hook_status("veA", Hook::Ingress, root_).attached);
    auto si = chaos::set("veA", Hook::Ingress, u, root_);
    EXPECT_NE(si.prog_id, s.prog_id);
    EXPECT_EQ(chaos::status("veA", root_).size(), 2u);

    chaos::off("veA", Hook::Egress, root_);
    EXPECT_FALSE(chaos::hook_status("veA", Hook::Egress, root_).attached);
    EXPECT_EQ(chaos::hook_status("veA", Hook::Egress, root_).prog_id, 0u);
    EXPECT_THROW(chaos::off("veA", Hook::Egress, root_), ctl::CtlError);
    chaos::off("veA", Hook::Ingress, root_);
    EXPECT_TRUE(chaos::status("", root_).empty());
}

TEST_F(ChaosVeth, CountsAndDropsRealFrames) {
    chaos::RateUpdate u;
    u.loss_ppm = 0;
    chaos::set("veA", Hook::Egress, u, root_);
    send_frames("veA", 50);
    auto s = chaos::hook_status("veA", Hook::Egress, root_);
    EXPECT_EQ(s.counters.seen, 50u);
    EXPECT_EQ(s.counters.passed, 50u);

    u.loss_ppm = INCXDP_CHAOS_PPM;
    chaos::set("veA", Hook::Egress, u, root_);
    send_frames("veA", 30);
    s = chaos::hook_status("veA", Hook::Egress, root_);
    EXPECT_EQ(s.counters.seen, 80u);
    EXPECT_EQ(s.counters.dropped, 30u);

    chaos::reset_counters("veA", Hook::Egress, root_);
    EXPECT_EQ(chaos::hook_status("veA", Hook::Egress, root_).counters.seen, 0u);
}

TEST_F(ChaosVeth, ClearErrors) {
    chaos::RateUpdate u;
    u.loss_ppm = 1;
    try {
        chaos::set("nosuch0", Hook::Egress, u, root_);
        ADD_FAILURE() << "no error";
    } catch (const ctl::CtlError &e) {
        EXPECT_STREQ(e.what(), "unknown interface 'nosuch0' (in this network namespace)");
    }
    try {
        chaos::off("veB", Hook::Ingress, root_);
        ADD_FAILURE() << "no error";
    } catch (const ctl::CtlError &e) {
        EXPECT_STREQ(e.what(), "chaos is not attached to veB ingress");
    }
}

TEST_F(ChaosVeth, PinsOfAVanishedInterfaceAreStaleAndReplaced) {
    ASSERT_EQ(std::system("ip link add veC type veth peer name veD"), 0);
    chaos::RateUpdate u;
    u.loss_ppm = 20000;
    chaos::set("veC", Hook::Egress, u, root_);
    ASSERT_EQ(std::system("ip link del veC"), 0); // takes veD, the filter and the program
    auto v = chaos::status("", root_);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].iface, "veC");
    EXPECT_FALSE(v[0].attached);
    EXPECT_EQ(v[0].rates.loss_ppm, 20000u); // the pinned config outlived it

    // Same name again: a fresh instance, rates from zero, then the update.
    ASSERT_EQ(std::system("ip link add veC type veth peer name veD"), 0);
    chaos::RateUpdate u2;
    u2.dup_ppm = 1000;
    auto s = chaos::set("veC", Hook::Egress, u2, root_);
    EXPECT_TRUE(s.attached);
    EXPECT_EQ(s.rates.loss_ppm, 0u);
    EXPECT_EQ(s.rates.dup_ppm, 1000u);

    // off() of an interface that is gone removes its pins.
    ASSERT_EQ(std::system("ip link del veC"), 0);
    chaos::off("veC", Hook::Egress, root_);
    EXPECT_TRUE(chaos::status("", root_).empty());
}

} // namespace
} // namespace incxdp::test
