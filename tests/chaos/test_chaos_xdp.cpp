// SPDX-License-Identifier: BSD-2-Clause
// The injector's xdp hook (bpf/lib/chaos_xdp.h, loader/chaos_xdp.cpp) on a
// veth pair in a private network namespace, incxdp_pass on both ends as on
// a topology's hosts: frames sent out of veX arrive at veY's XDP program,
// which loses, duplicates (two copies around the peer), delays (one copy
// around the peer) or corrupts them; what veY passes to the stack is read
// back with a packet socket and compared frame by frame.
#include <incxdp/chaos_ctl.h>

#include "incxdp_pass.skel.h"
#include "../common/private_netns.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

namespace incxdp::test {
namespace {

namespace chaos = ctl::chaos;
using chaos::Hook;
using Bytes = std::vector<uint8_t>;

constexpr uint16_t kDport = 0x5eed;
constexpr size_t kPayload = 200;

// An IPv4/UDP frame whose payload starts with its sequence number.
Bytes frame(uint32_t seq) {
    Bytes f(14 + 20 + 8 + kPayload, 0);
    const uint8_t eth[14] = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00};
    std::memcpy(f.data(), eth, sizeof eth);
    uint8_t *ip = f.data() + 14;
    ip[0] = 0x45;
    uint16_t tot = uint16_t(20 + 8 + kPayload);
    ip[2] = uint8_t(tot >> 8), ip[3] = uint8_t(tot);
    ip[8] = 64, ip[9] = 17;
    const uint8_t addrs[8] = {10, 0, 0, 1, 10, 0, 0, 2};
    std::memcpy(ip + 12, addrs, 8);
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += uint32_t(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    ip[10] = uint8_t(~sum >> 8), ip[11] = uint8_t(~sum);
    uint8_t *udp = ip + 20;
    udp[0] = 0x12, udp[1] = 0x34, udp[2] = uint8_t(kDport >> 8), udp[3] = uint8_t(kDport);
    uint16_t ulen = uint16_t(8 + kPayload);
    udp[4] = uint8_t(ulen >> 8), udp[5] = uint8_t(ulen);
    uint8_t *pl = udp + 8;
    std::memcpy(pl, &seq, 4);
    for (size_t i = 4; i < kPayload; i++)
        pl[i] = uint8_t(seq * 31 + i);
    return f;
}

uint32_t seq_of(const Bytes &f) {
    uint32_t s;
    std::memcpy(&s, f.data() + 14 + 20 + 8, 4);
    return s;
}

constexpr uint32_t kAll = INCXDP_CHAOS_PPM;

class ChaosXdp : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        if (error_ = enter_private_netns(); !error_.empty())
            return;
        if (error_ = add_veth_pair("veX", "veY"); !error_.empty())
            return;
        if (error_ = add_veth_pair("veN", "veM"); !error_.empty())
            return;
        skel_ = incxdp_pass__open_and_load();
        if (!skel_) {
            error_ = std::string("load incxdp_pass: ") + strerror(errno);
            return;
        }
        for (const char *dev : {"veX", "veY"})
            if (int err = bpf_xdp_attach(int(if_nametoindex(dev)),
                                         bpf_program__fd(skel_->progs.incxdp_pass),
                                         XDP_FLAGS_DRV_MODE, nullptr)) {
                error_ = std::string("attach incxdp_pass to ") + dev + ": " + strerror(-err);
                return;
            }
    }

    static void TearDownTestSuite() {
        // The namespace, its interfaces and their programs die with the
        // process; nothing is pinned.
        if (skel_)
            incxdp_pass__destroy(skel_);
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (XDP, namespaces)";
        ASSERT_TRUE(error_.empty()) << error_;
        rx_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_IP));
        ASSERT_GE(rx_, 0) << strerror(errno);
        sockaddr_ll sa{};
        sa.sll_family = AF_PACKET;
        sa.sll_protocol = htons(ETH_P_IP);
        sa.sll_ifindex = int(if_nametoindex("veY"));
        ASSERT_EQ(bind(rx_, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0) << strerror(errno);
    }

    void TearDown() override {
        if (rx_ >= 0)
            close(rx_);
        for (const char *dev : {"veX", "veY"})
            for (const auto &s : chaos::status(dev))
                if (s.hook == Hook::Xdp && s.attached)
                    chaos::off(dev, Hook::Xdp);
        for (const char *dev : {"veX", "veY"})
            set_mode(dev, XDP_FLAGS_DRV_MODE);
    }

    // incxdp_pass on `dev` in driver (native) or skb (generic) mode.
    static void set_mode(const char *dev, uint32_t mode) {
        const int ifx = int(if_nametoindex(dev));
        LIBBPF_OPTS(bpf_xdp_query_opts, q);
        ASSERT_EQ(bpf_xdp_query(ifx, 0, &q), 0);
        const uint32_t now = q.attach_mode == XDP_ATTACHED_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
        if (now == mode && q.attach_mode != XDP_ATTACHED_NONE)
            return;
        if (q.attach_mode != XDP_ATTACHED_NONE) {
            ASSERT_EQ(bpf_xdp_detach(ifx, now, nullptr), 0) << dev;
        }
        ASSERT_EQ(bpf_xdp_attach(ifx, bpf_program__fd(skel_->progs.incxdp_pass), mode, nullptr), 0)
            << dev;
    }

    // Duplication, then reordering, of every frame veX sends to veY: each
    // copy arrives restored, duplicates twice and delayed ones once.
    void expect_detours_deliver(const char *detour) {
        chaos::set("veX", Hook::Xdp, rates(0, 0, 0, 0));
        auto s = chaos::set("veY", Hook::Xdp, rates(0, kAll, 0, 0));
        EXPECT_EQ(s.detour, detour);
        send(25);
        auto got = receive(50);
        ASSERT_EQ(got.size(), 50u);
        std::map<uint32_t, int> times;
        for (const auto &f : got) {
            times[seq_of(f)]++;
            EXPECT_EQ(f, frame(seq_of(f))) << "a copy must be the frame, EtherType restored";
        }
        for (uint32_t i = 0; i < 25; i++)
            EXPECT_EQ(times[i], 2) << "frame " << i;
        EXPECT_EQ(chaos::hook_status("veY", Hook::Xdp).counters.duplicated, 25u);
        EXPECT_EQ(chaos::hook_status("veY", Hook::Xdp).counters.seen, 25u)
            << "copies coming back are not faulted again";

        chaos::set("veY", Hook::Xdp, rates(0, 0, 0, kAll));
        chaos::reset_counters("veY", Hook::Xdp);
        send(25);
        got = receive(25);
        ASSERT_EQ(got.size(), 25u);
        times.clear();
        for (const auto &f : got) {
            times[seq_of(f)]++;
            EXPECT_EQ(f, frame(seq_of(f)));
        }
        EXPECT_EQ(times.size(), 25u);
        const auto c = chaos::hook_status("veY", Hook::Xdp).counters;
        EXPECT_EQ(c.reordered, 25u);
        EXPECT_EQ(c.passed, 25u);
    }

    // Sends frames 0..n-1 out of veX (AF_PACKET: they reach veY's XDP).
    static void send(uint32_t n) {
        int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0) << strerror(errno);
        sockaddr_ll sa{};
        sa.sll_family = AF_PACKET;
        sa.sll_ifindex = int(if_nametoindex("veX"));
        sa.sll_halen = ETH_ALEN;
        for (uint32_t i = 0; i < n; i++) {
            Bytes f = frame(i);
            ASSERT_EQ(sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr *>(&sa), sizeof sa),
                      ssize_t(f.size()))
                << strerror(errno);
        }
        close(fd);
    }

    // Our frames veY passed to the stack, in arrival order: read until
    // `expect` arrived, then until nothing more comes for a while (late
    // copies would show up as extras).
    std::vector<Bytes> receive(size_t expect) {
        std::vector<Bytes> got;
        for (;;) {
            pollfd p{rx_, POLLIN, 0};
            if (poll(&p, 1, got.size() >= expect ? 300 : 3000) <= 0)
                return got;
            uint8_t buf[2048];
            ssize_t n;
            while ((n = recv(rx_, buf, sizeof buf, 0)) > 0) {
                Bytes f(buf, buf + n);
                if (f.size() >= 14 + 28 && f[14 + 9] == 17 && f[14 + 22] == (kDport >> 8) &&
                    f[14 + 23] == (kDport & 0xff))
                    got.push_back(std::move(f));
            }
        }
    }

    static chaos::RateUpdate rates(uint32_t loss, uint32_t dup, uint32_t corrupt, uint32_t reorder) {
        chaos::RateUpdate u;
        u.loss_ppm = loss, u.dup_ppm = dup, u.corrupt_ppm = corrupt, u.reorder_ppm = reorder;
        return u;
    }

    int rx_ = -1;
    static inline std::string error_;
    static inline incxdp_pass *skel_ = nullptr;
};

TEST_F(ChaosXdp, NoRatesPassesEveryFrameUntouched) {
    auto s = chaos::set("veY", Hook::Xdp, rates(0, 0, 0, 0));
    EXPECT_TRUE(s.attached);
    EXPECT_TRUE(s.enabled);
    EXPECT_NE(s.prog_id, 0u);
    send(40);
    auto got = receive(40);
    ASSERT_EQ(got.size(), 40u);
    for (uint32_t i = 0; i < 40; i++)
        EXPECT_EQ(got[i], frame(i)) << "frame " << i;
    auto c = chaos::hook_status("veY", Hook::Xdp).counters;
    EXPECT_EQ(c.seen, 40u);
    EXPECT_EQ(c.passed, 40u);
    EXPECT_EQ(c.dropped, 0u);
}

TEST_F(ChaosXdp, FullLossDropsEveryFrameAndCountsIt) {
    chaos::set("veY", Hook::Xdp, rates(kAll, 0, 0, 0));
    send(30);
    EXPECT_TRUE(receive(0).empty());
    auto c = chaos::hook_status("veY", Hook::Xdp).counters;
    EXPECT_EQ(c.seen, 30u);
    EXPECT_EQ(c.dropped, 30u);
    EXPECT_EQ(c.passed, 0u);
    // Loss is decided first: a lost frame is neither duplicated nor delayed.
    chaos::set("veY", Hook::Xdp, rates(kAll, kAll, kAll, kAll));
    send(10);
    EXPECT_TRUE(receive(0).empty());
    c = chaos::hook_status("veY", Hook::Xdp).counters;
    EXPECT_EQ(c.dropped, 40u);
    EXPECT_EQ(c.duplicated + c.corrupted + c.reordered, 0u);
}

// Both ends native: two copies (or one, delayed) leave by the interface the
// frame came in on and the peer's program sends each straight back.
TEST_F(ChaosXdp, DetoursBetweenNativeEndsGoThroughThePeer) {
    expect_detours_deliver("peer");
    // The peer's rates are all 0, so its counters exist and show the
    // reflections; it faults nothing.
    const auto peer = chaos::hook_status("veX", Hook::Xdp).counters;
    EXPECT_EQ(peer.reflected, 75u);
    EXPECT_EQ(peer.seen, 0u) << "reflections are not the peer's own traffic";
}

// veth sends a native program's XDP_TX and redirects only to a peer with a
// native program: towards a generic one (a switch loaded with --mode skb)
// every detour was lost. It goes out through this end's stack instead, and
// the generic peer, which does not see a redirected skb in XDP, sends it
// back from its tc ingress (ixchaos_bounce on both ends).
TEST_F(ChaosXdp, DetoursFromANativeEndGoThroughItsStackToAGenericPeer) {
    set_mode("veX", XDP_FLAGS_SKB_MODE);
    expect_detours_deliver("stack-out");
    EXPECT_EQ(chaos::hook_status("veX", Hook::Xdp).detour, "none");
}

// Both ends generic: the peer's XDP_TX arrives (an skb no BPF program
// redirected), as between two native ends.
TEST_F(ChaosXdp, DetoursBetweenGenericEndsGoThroughThePeer) {
    set_mode("veX", XDP_FLAGS_SKB_MODE);
    set_mode("veY", XDP_FLAGS_SKB_MODE);
    expect_detours_deliver("peer");
    EXPECT_EQ(chaos::hook_status("veX", Hook::Xdp).counters.reflected, 75u);
}

// A generic end whose peer is native: nothing sent round would come back
// into its program, so it duplicates and delays nothing; it says so, counts
// the refused duplicates, and every frame arrives once. Off removes the tc
// program the generic end carries for its peer's copies.
TEST_F(ChaosXdp, AGenericEndWithANativePeerNeitherDuplicatesNorDelays) {
    set_mode("veY", XDP_FLAGS_SKB_MODE);
    auto s = chaos::set("veY", Hook::Xdp, rates(0, kAll, 0, kAll));
    EXPECT_EQ(s.detour, "none");
    EXPECT_EQ(std::system("tc filter show dev veY ingress | grep -q ixchaos_bounce"), 0);
    send(20);
    auto got = receive(20);
    ASSERT_EQ(got.size(), 20u);
    for (uint32_t i = 0; i < 20; i++)
        EXPECT_EQ(got[i], frame(i)) << "frame " << i;
    auto c = chaos::hook_status("veY", Hook::Xdp).counters;
    EXPECT_EQ(c.dup_failed, 20u);
    EXPECT_EQ(c.duplicated + c.reordered, 0u);
    chaos::off("veY", Hook::Xdp);
    EXPECT_NE(std::system("tc filter show dev veY ingress | grep -q ixchaos_bounce"), 0);
}

TEST_F(ChaosXdp, FullCorruptionFlipsExactlyOnePayloadBit) {
    chaos::set("veY", Hook::Xdp, rates(0, 0, kAll, 0));
    send(40);
    auto got = receive(40);
    ASSERT_EQ(got.size(), 40u);
    for (const auto &f : got) {
        // The sequence number may be the bit hit: find the frame by the
        // closest original instead.
        int best = 1 << 30;
        for (uint32_t i = 0; i < 40; i++) {
            Bytes o = frame(i);
            if (o.size() != f.size())
                continue;
            int bits = 0;
            for (size_t k = 0; k < o.size(); k++)
                bits += std::popcount(unsigned(o[k] ^ f[k]));
            if (bits < best) {
                best = bits;
                EXPECT_TRUE(std::equal(o.begin(), o.begin() + 42, f.begin()))
                    << "headers must stay intact";
            }
        }
        EXPECT_EQ(best, 1);
    }
    EXPECT_EQ(chaos::hook_status("veY", Hook::Xdp).counters.corrupted, 40u);
    chaos::reset_counters("veY", Hook::Xdp);
    auto c = chaos::hook_status("veY", Hook::Xdp);
    EXPECT_EQ(c.counters.seen + c.counters.corrupted, 0u);
    EXPECT_EQ(c.rates.corrupt_ppm, kAll) << "a reset keeps the rates";
}

TEST_F(ChaosXdp, StatusOffAndErrors) {
    EXPECT_FALSE(chaos::hook_status("veY", Hook::Xdp).attached);
    auto s = chaos::set("veY", Hook::Xdp, rates(50000, 0, 0, 0));
    // Rates not named keep their value.
    chaos::RateUpdate u;
    u.reorder_ppm = 10000;
    s = chaos::set("veY", Hook::Xdp, u);
    EXPECT_EQ(s.rates.loss_ppm, 50000u);
    EXPECT_EQ(s.rates.reorder_ppm, 10000u);
    bool listed = false;
    for (const auto &x : chaos::status(""))
        listed |= x.iface == "veY" && x.hook == Hook::Xdp && x.attached;
    EXPECT_TRUE(listed) << "status of the namespace lists the xdp hook";

    chaos::off("veY", Hook::Xdp);
    EXPECT_FALSE(chaos::hook_status("veY", Hook::Xdp).attached);
    try {
        chaos::off("veY", Hook::Xdp);
        ADD_FAILURE() << "no error";
    } catch (const ctl::CtlError &e) {
        EXPECT_STREQ(e.what(), "chaos is not set on veY xdp");
    }
    // No incxdp program on veN: nothing to write the rates into.
    try {
        chaos::set("veN", Hook::Xdp, rates(1, 0, 0, 0));
        ADD_FAILURE() << "no error";
    } catch (const ctl::CtlError &e) {
        EXPECT_NE(std::string(e.what()).find("veN: no incxdp XDP program runs here"),
                  std::string::npos)
            << e.what();
    }
    // Reordering needs the xdp hook; a tc hook cannot hold a frame.
    try {
        chaos::set("veN", Hook::Egress, u, "/sys/fs/bpf/incxdp-chaos-xdptest-unused");
        ADD_FAILURE() << "no error";
    } catch (const ctl::CtlError &e) {
        EXPECT_NE(std::string(e.what()).find("reordering needs the xdp hook"), std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists("/sys/fs/bpf/incxdp-chaos-xdptest-unused"));
}

} // namespace
} // namespace incxdp::test
