// SPDX-License-Identifier: BSD-2-Clause
// How the AF_XDP transport sends, on a veth pair in a private network
// namespace (root). Live frames leave through the interface's ndo_xdp_xmit,
// which veth offers only while its peer runs a native XDP program: with the
// peer in generic mode (a switch whose engine is loaded with --mode skb, or
// a NIC driver without XDP transmit) every live frame would vanish, so the
// transport must notice (netdev::xdp_features) and send through its tx ring.
// Each case sends frames out of veA and reads what veB's stack gets.
//
// The transport to several peers (make_afxdp_peers_transport, SMI's and the
// mesh's) has both senders at once: the tx ring of each interface's queue 0
// socket and live frames through the interface's program (here incxdp_xsk
// on veA, whose incxdp_xsk_stats count the live frames it sent), chosen per
// call by INCXDP_XSK_TX.
#include "incxdp_xsk.skel.h"

#include <incxdp/netdev_xdp.h>
#include <incxdp/transport.h>
#include <incxdp/util/iface.h>
#include <incxdp/xsk.h>

#include "../common/frames.h"
#include "../common/percpu.h"
#include "../common/private_netns.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <span>
#include <string>

namespace incxdp::test {
namespace {

constexpr uint16_t kPort = 4791;
constexpr uint32_t kIpA = 0x0a630001, kIpB = 0x0a630002; // 10.99.0.1, 10.99.0.2

std::array<uint8_t, 6> mac_of(const char *dev) {
    return util::iface_mac(dev).value_or(util::Mac{});
}

class AfXdpTxPath : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        if (error_ = enter_private_netns(); !error_.empty())
            return;
        if (error_ = add_veth_pair("veA", "veB"); !error_.empty())
            return;
        // XDP_PASS: r0 = 2; exit.
        const bpf_insn pass[] = {{BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, XDP_PASS},
                                 {BPF_JMP | BPF_EXIT, 0, 0, 0, 0}};
        prog_ = bpf_prog_load(BPF_PROG_TYPE_XDP, "pass", "GPL", pass, 2, nullptr);
        if (prog_ < 0)
            error_ = std::string("load an XDP_PASS program: ") + strerror(errno);
        a_ = int(if_nametoindex("veA"));
        b_ = int(if_nametoindex("veB"));
    }

    static void TearDownTestSuite() {
        // The namespace and its interfaces die with the process.
        if (prog_ >= 0)
            close(prog_);
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (XDP, namespaces)";
        ASSERT_TRUE(error_.empty()) << error_;
    }

    void TearDown() override {
        if (rx_ >= 0)
            close(rx_);
        for (uint32_t mode : {XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE}) {
            bpf_xdp_detach(b_, mode, nullptr);
        }
    }

    // XDP_PASS on veB in `mode` (0: none).
    static void peer_mode(uint32_t mode) {
        if (mode) {
            ASSERT_EQ(bpf_xdp_attach(b_, prog_, mode, nullptr), 0) << "attach XDP_PASS to veB";
        }
    }

    // A packet socket on veB: what its stack receives.
    void listen_on_b() {
        rx_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_IP));
        ASSERT_GE(rx_, 0) << strerror(errno);
        // Room for every frame at once: an skb of an XDP frame costs a page.
        int rcvbuf = 4 << 20;
        ASSERT_EQ(setsockopt(rx_, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)), 0)
            << strerror(errno);
        sockaddr_ll sa{};
        sa.sll_family = AF_PACKET;
        sa.sll_protocol = htons(ETH_P_IP);
        sa.sll_ifindex = b_;
        ASSERT_EQ(bind(rx_, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)), 0) << strerror(errno);
    }

    // The payload markers of the UDP frames to kPort veB's stack received,
    // once there are `want` of them or after 5 s.
    std::set<uint32_t> received(size_t want) {
        std::set<uint32_t> got;
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        Bytes buf(2048);
        while (got.size() < want && std::chrono::steady_clock::now() < until) {
            pollfd p{rx_, POLLIN, 0};
            if (poll(&p, 1, 50) <= 0)
                continue;
            for (ssize_t n; (n = recv(rx_, buf.data(), buf.size(), 0)) > 0;)
                if (size_t(n) >= kL4 + 4 && get16(buf, kEth + kIp + 2) == kPort)
                    got.insert(get32(buf, kL4));
        }
        return got;
    }

    static std::unique_ptr<Transport> transport(uint32_t queue = 0) {
        AfXdpTransportConfig c;
        c.queue = queue;
        c.local_ip = "10.99.0.1";
        c.local_port = kPort;
        c.remote_ip = "10.99.0.2";
        c.remote_port = kPort;
        c.ifname = "veA";
        c.raw_frames = true;  // our own frames: no neighbour lookup
        c.max_payload = 1400; // the veth's MTU is 1500
        return make_afxdp_transport(c);
    }

    // Sends frames with markers first..first+n-1 out of veA.
    static void send(Transport &t, uint32_t first, uint32_t n) {
        Endpoint src{mac_of("veA"), kIpA, kPort}, dst{mac_of("veB"), kIpB, kPort};
        std::vector<Bytes> frames;
        for (uint32_t i = 0; i < n; i++) {
            Bytes pl;
            put32(pl, first + i);
            pl.resize(256, 0xab);
            frames.push_back(udp_frame(src, dst, pl));
        }
        std::vector<std::span<const std::byte>> spans;
        for (const auto &f : frames)
            spans.push_back(std::as_bytes(std::span(f)));
        size_t sent = 0;
        for (int tries = 0; sent < spans.size() && tries < 1000; tries++) {
            sent += t.send_batch(std::span(spans).subspan(sent));
            if (sent < spans.size())
                t.wait(std::chrono::milliseconds(1), true);
        }
        ASSERT_EQ(sent, spans.size());
    }

    // With veB's XDP in `mode` (0: none), the transport on veA sends live
    // frames (`live`) or through its tx ring, and all 64 frames reach veB.
    void expect_delivered(uint32_t mode, bool live) {
        peer_mode(mode);
        listen_on_b();
        auto t = transport();
        EXPECT_EQ(t->frames_grow_at_switch(), live) << t->describe();
        EXPECT_EQ(t->describe().find("tx ring: no XDP transmit on veA") == std::string::npos, live)
            << t->describe();
        // Bound without XDP_COPY: veth has no zero-copy, so the kernel chose copy mode.
        EXPECT_EQ(t->describe().find("zero-copy"), std::string::npos) << t->describe();
        send(*t, 1000, 64);
        EXPECT_EQ(received(64).size(), 64u) << t->describe();
    }

    static inline std::string error_;
    static inline int prog_ = -1, a_ = 0, b_ = 0;
    int rx_ = -1;
};

// UDP frames to veB's stack with markers first..first+n-1, to leave by veA.
std::vector<Bytes> frames_to_b(uint32_t first, uint32_t n) {
    Endpoint src{mac_of("veA"), kIpA, kPort}, dst{mac_of("veB"), kIpB, kPort};
    std::vector<Bytes> frames;
    for (uint32_t i = 0; i < n; i++) {
        Bytes pl;
        put32(pl, first + i);
        pl.resize(256, 0xab);
        frames.push_back(udp_frame(src, dst, pl));
    }
    return frames;
}

class AfXdpPeersTxPath : public AfXdpTxPath {
  protected:
    void SetUp() override {
        AfXdpTxPath::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        skel_ = incxdp_xsk__open();
        ASSERT_NE(skel_, nullptr) << "open incxdp_xsk: " << strerror(errno);
        skel_->rodata->xsk_tx_ifindex = uint32_t(a_);
        ASSERT_EQ(incxdp_xsk__load(skel_), 0) << "load incxdp_xsk: " << strerror(errno);
        ASSERT_EQ(bpf_xdp_attach(a_, bpf_program__fd(skel_->progs.incxdp_xsk), XDP_FLAGS_DRV_MODE,
                                 nullptr),
                  0)
            << "attach incxdp_xsk to veA";
    }

    void TearDown() override {
        t_.reset(); // its sockets before the program's XSKMAP
        unsetenv("INCXDP_XSK_TX");
        bpf_xdp_detach(a_, XDP_FLAGS_DRV_MODE, nullptr);
        if (skel_)
            incxdp_xsk__destroy(skel_);
        AfXdpTxPath::TearDown();
    }

    // The transport on veA, sending the way `way` (INCXDP_XSK_TX) says.
    Transport &open(const char *way) {
        t_.reset(); // one socket per queue: the old one goes first
        setenv("INCXDP_XSK_TX", way, 1);
        AfXdpPeersConfig c;
        c.ifnames = {"veA"};
        c.xskmap_fd = bpf_map__fd(skel_->maps.incxdp_xsks);
        c.describe = "test";
        t_ = make_afxdp_peers_transport(c);
        return *t_;
    }

    // Sends `frames` out of veA, `per_call` at most per send_frames().
    void send(const std::vector<Bytes> &frames, size_t per_call) {
        std::vector<FrameOut> out;
        for (const auto &f : frames)
            out.push_back({std::as_bytes(std::span(f)), uint32_t(a_)});
        size_t sent = 0;
        for (int tries = 0; sent < out.size() && tries < 1000; tries++) {
            const size_t n = std::min(per_call, out.size() - sent);
            sent += t_->send_frames(std::span(out).subspan(sent, n));
            if (sent < out.size())
                t_->wait(std::chrono::milliseconds(1), true);
        }
        ASSERT_EQ(sent, out.size()) << t_->describe();
    }

    // Live frames incxdp_xsk sent out of veA.
    uint64_t live_sent() {
        return percpu_sum(bpf_map__fd(skel_->maps.incxdp_xsk_stats), INCXDP_XSK_SENT);
    }

    incxdp_xsk *skel_ = nullptr;
    std::unique_ptr<Transport> t_;
};

// Forced to the ring while live frames could go: every frame arrives and
// none was a live frame.
TEST_F(AfXdpPeersTxPath, TheRingDeliversEveryFrame) {
    peer_mode(XDP_FLAGS_DRV_MODE);
    listen_on_b();
    Transport &t = open("ring");
    EXPECT_NE(t.describe().find("(copy, tx ring)"), std::string::npos) << t.describe();
    EXPECT_EQ(t.max_frame(), 1514u) << "the MTU's frame fits a 4 KB umem frame";
    send(frames_to_b(100, 8), 1);
    send(frames_to_b(200, 200), 64); // more than the ring's 256 frames in flight, in the end
    EXPECT_EQ(received(208).size(), 208u) << t.describe();
    EXPECT_EQ(live_sent(), 0u);
}

TEST_F(AfXdpPeersTxPath, LiveFramesDeliverEveryFrame) {
    peer_mode(XDP_FLAGS_DRV_MODE);
    listen_on_b();
    Transport &t = open("live");
    EXPECT_NE(t.describe().find("(copy, live frames)"), std::string::npos) << t.describe();
    EXPECT_EQ(t.max_frame(), 1514u);
    send(frames_to_b(100, 8), 1);
    send(frames_to_b(200, 64), 64);
    EXPECT_EQ(received(72).size(), 72u) << t.describe();
    EXPECT_EQ(live_sent(), 72u);
}

// Auto: single frames through the ring, a batch as live frames.
TEST_F(AfXdpPeersTxPath, AutoSendsFewFramesThroughTheRingAndABatchLive) {
    peer_mode(XDP_FLAGS_DRV_MODE);
    listen_on_b();
    Transport &t = open("auto");
    EXPECT_NE(t.describe().find("tx ring up to"), std::string::npos) << t.describe();
    send(frames_to_b(100, 8), 1);
    EXPECT_EQ(received(8).size(), 8u) << t.describe();
    EXPECT_EQ(live_sent(), 0u) << "single frames go through the ring";
    send(frames_to_b(200, 64), 64);
    EXPECT_EQ(received(64).size(), 64u) << t.describe();
    EXPECT_EQ(live_sent(), 64u) << "a batch goes as live frames";
}

// veB runs no XDP program, so veA cannot transmit XDP frames: every way
// asked for sends through the ring, whose skbs take veB's normal rx path.
TEST_F(AfXdpPeersTxPath, TheRingSendsWhereLiveFramesCannotGo) {
    listen_on_b();
    for (const char *way : {"auto", "live"}) {
        Transport &t = open(way);
        EXPECT_NE(t.describe().find(std::string(way) == "live" ? "tx ring: no live frames here"
                                                               : "(copy, tx ring)"),
                  std::string::npos)
            << t.describe();
        EXPECT_EQ(t.max_frame(), 1514u) << t.describe();
        const uint32_t first = std::string(way) == "live" ? 1000 : 2000;
        send(frames_to_b(first, 8), 1);
        send(frames_to_b(first + 100, 64), 64);
        std::set<uint32_t> got = received(72);
        EXPECT_EQ(got.size(), 72u) << t.describe();
        EXPECT_EQ(got.count(first + 163), 1u) << "the batch's last frame";
        EXPECT_EQ(live_sent(), 0u) << t.describe();
    }
}

TEST_F(AfXdpPeersTxPath, AFrameForAnotherInterfaceOrAnUnknownWayIsRefused) {
    Transport &t = open("ring");
    const Bytes f = frames_to_b(1, 1).front();
    const FrameOut out{std::as_bytes(std::span(f)), uint32_t(b_)};
    try {
        t.send_frames(std::span(&out, 1));
        ADD_FAILURE() << "a frame for veB was sent out of a transport on veA";
    } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find("not one of this transport's"), std::string::npos)
            << e.what();
    }
    t_.reset();
    try {
        open("fast");
        ADD_FAILURE() << "INCXDP_XSK_TX=fast was accepted";
    } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find("want ring, live or auto"), std::string::npos)
            << e.what();
    }
}

TEST_F(AfXdpTxPath, TheKernelReportsXdpTransmitOnlyWhileThePeerRunsNativeXdp) {
    auto none = netdev::xdp_features(a_);
    ASSERT_TRUE(none.has_value()) << "no netdev generic netlink family (Linux < 6.3?)";
    EXPECT_TRUE(*none & netdev::kXdpActBasic);
    EXPECT_FALSE(*none & netdev::kXdpActNdoXmit);

    peer_mode(XDP_FLAGS_DRV_MODE);
    auto native = netdev::xdp_features(a_);
    ASSERT_TRUE(native.has_value());
    EXPECT_TRUE(*native & netdev::kXdpActNdoXmit);
    ASSERT_EQ(bpf_xdp_detach(b_, XDP_FLAGS_DRV_MODE, nullptr), 0);

    peer_mode(XDP_FLAGS_SKB_MODE);
    auto generic = netdev::xdp_features(a_);
    ASSERT_TRUE(generic.has_value());
    EXPECT_FALSE(*generic & netdev::kXdpActNdoXmit);

    EXPECT_FALSE(netdev::xdp_features(int(0x7ffffff0)).has_value())
        << "an interface that does not exist";
}

// The peer runs native XDP: live frames, each with room to grow at the switch.
TEST_F(AfXdpTxPath, LiveFramesReachANativeXdpPeer) {
    expect_delivered(XDP_FLAGS_DRV_MODE, true);
}

// Generic XDP on the peer, or none at all: veth cannot take live frames, so
// the transport sends through its tx ring (skb-built frames, which do not
// grow: RoCE Broadcasts pad theirs then).
TEST_F(AfXdpTxPath, FramesReachAGenericXdpPeerThroughTheTxRing) {
    expect_delivered(XDP_FLAGS_SKB_MODE, false);
}

TEST_F(AfXdpTxPath, FramesReachAPeerWithoutXdpThroughTheTxRing) {
    expect_delivered(0, false);
}

// incxdp_xsk's XSKMAP steers to queues 0 .. INCXDP_XSK_MAX_QUEUES - 1: a socket
// on a queue beyond would never get a frame.
TEST_F(AfXdpTxPath, AQueueBeyondTheProgramsMapIsRefused) {
    try {
        transport(INCXDP_XSK_MAX_QUEUES);
        ADD_FAILURE() << "a socket on rx queue " << INCXDP_XSK_MAX_QUEUES << " was accepted";
    } catch (const std::invalid_argument &e) {
        const std::string want =
            "incxdp_xsk steers to queues 0.." + std::to_string(INCXDP_XSK_MAX_QUEUES - 1);
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace incxdp::test
