// SPDX-License-Identifier: BSD-2-Clause
// The transports' pieces that need no namespace or root: the AF_XDP
// transport's frames and umem accounting (frame.h), the bulk big-endian
// payload codecs, Transport::recv_views() over recv_batch(), and the UDP
// transport's GSO sends and GRO-enabled receives on 127.0.0.1.
#include "frame.h"
#include "packet.h"
#include "rx_backlog.h"

#include <incxdp/transport.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

using namespace incxdp;
using namespace incxdp::detail;

namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v)
        out.push_back(std::byte(b));
    return out;
}

uint32_t ip(const char *s) {
    return incxdp::util::ipv4_be_or_throw(s, "test address");
}

FrameAddrs sample_addrs() {
    FrameAddrs a;
    a.src_mac = {0x02, 0x49, 0x58, 0x01, 0x00, 0x00};
    a.dst_mac = {0x02, 0x49, 0x58, 0x00, 0x00, 0x01};
    a.src_ip = ip("10.77.0.1");
    a.dst_ip = ip("10.77.0.254");
    a.src_port = 4000;
    a.dst_port = 0xBEF0;
    return a;
}

// The headers of a 100-byte payload, written out by hand: Ethernet, IPv4
// (DF, TTL 64, UDP, checksum by RFC 1071), UDP (checksum 0).
const std::vector<std::byte> kHeaders100 = bytes({
    0x02, 0x49, 0x58, 0x00, 0x00, 0x01, 0x02, 0x49, 0x58, 0x01, 0x00, 0x00, 0x08, 0x00, // eth
    0x45, 0x00, 0x00, 0x80, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x24, 0xd5,             // ip
    10,   77,   0,    1,    10,   77,   0,    254,                                      //
    0x0f, 0xa0, 0xbe, 0xf0, 0x00, 0x6c, 0x00, 0x00,                                     // udp
});

TEST(Frame, TemplateWritesEthernetIpv4UdpByHand) {
    FrameTemplate t(sample_addrs());
    std::vector<std::byte> out(kFrameHdrLen);
    t.write(out.data(), 100);
    EXPECT_EQ(out, kHeaders100);
}

TEST(Frame, Ipv4ChecksumVerifiesForEveryLength) {
    FrameTemplate t(sample_addrs());
    std::vector<std::byte> out(kFrameHdrLen);
    for (size_t len : {0, 1, 32, 1000, 3360, 65507}) {
        t.write(out.data(), len);
        auto hdr = std::span<const std::byte>(out).subspan(kEthHdrLen, kIpv4HdrLen);
        EXPECT_EQ(ipv4_checksum(hdr), 0) << len; // a header with a right checksum sums to 0
        EXPECT_EQ(size_t(uint8_t(out[16])) << 8 | uint8_t(out[17]), 28 + len);
        EXPECT_EQ(size_t(uint8_t(out[38])) << 8 | uint8_t(out[39]), 8 + len);
    }
}

// A result as the switch sends it back: from the switch to the worker.
std::vector<std::byte> result_frame(size_t payload, size_t padding = 0) {
    FrameAddrs a = sample_addrs();
    std::swap(a.src_mac, a.dst_mac);
    std::swap(a.src_ip, a.dst_ip);
    std::swap(a.src_port, a.dst_port);
    std::vector<std::byte> f(kFrameHdrLen + payload + padding);
    FrameTemplate(a).write(f.data(), payload);
    for (size_t i = 0; i < payload; ++i)
        f[kFrameHdrLen + i] = std::byte(i);
    return f;
}

TEST(Frame, PayloadOfAResultToUs) {
    auto f = result_frame(64);
    auto p = udp_payload_to(f, ip("10.77.0.1"), 4000);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->data(), f.data() + kFrameHdrLen);
    EXPECT_EQ(p->size(), 64u);
}

TEST(Frame, EthernetPaddingIsCutByTheUdpLength) {
    auto f = result_frame(4, 14); // a 60-byte minimum frame
    auto p = udp_payload_to(f, ip("10.77.0.1"), 4000);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->size(), 4u);
}

TEST(Frame, Ipv4OptionsAreSkipped) {
    auto f = result_frame(8);
    // Insert 4 bytes of options (NOP x4): IHL 6.
    f.insert(f.begin() + kEthHdrLen + kIpv4HdrLen, 4, std::byte(1));
    f[kEthHdrLen] = std::byte(0x46);
    auto p = udp_payload_to(f, ip("10.77.0.1"), 4000);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->data(), f.data() + kFrameHdrLen + 4);
    EXPECT_EQ(p->size(), 8u);
}

TEST(Frame, OthersFramesAreRejected) {
    const uint32_t me = ip("10.77.0.1");
    auto ok = result_frame(16);
    ASSERT_TRUE(udp_payload_to(ok, me, 4000));
    EXPECT_FALSE(udp_payload_to(ok, me, 4001)) << "another port";
    EXPECT_FALSE(udp_payload_to(ok, ip("10.77.0.2"), 4000)) << "another host";
    auto arp = ok;
    arp[12] = std::byte(0x08), arp[13] = std::byte(0x06);
    EXPECT_FALSE(udp_payload_to(arp, me, 4000)) << "ARP";
    auto tcp = ok;
    tcp[kEthHdrLen + 9] = std::byte(6);
    EXPECT_FALSE(udp_payload_to(tcp, me, 4000)) << "TCP";
    auto frag = ok;
    frag[kEthHdrLen + 6] = std::byte(0x20); // MF
    EXPECT_FALSE(udp_payload_to(frag, me, 4000)) << "fragment";
    auto v6 = ok;
    v6[kEthHdrLen] = std::byte(0x65);
    EXPECT_FALSE(udp_payload_to(v6, me, 4000)) << "not version 4";
    auto longer = ok;
    longer[kEthHdrLen + kIpv4HdrLen + 5] = std::byte(8 + 17); // UDP length past the frame
    EXPECT_FALSE(udp_payload_to(longer, me, 4000)) << "UDP length beyond the frame";
    for (size_t cut : {0, 13, 33, 41})
        EXPECT_FALSE(udp_payload_to(std::span(ok).first(cut), me, 4000)) << "cut at " << cut;
}

TEST(FrameStack, EveryFrameOnceAndOffsetsMaskedOnReturn) {
    FrameStack s(/*first_frame*/ 8, /*count*/ 4, /*frame_size*/ 4096);
    EXPECT_EQ(s.available(), 4u);
    std::vector<uint64_t> got;
    while (auto a = s.pop())
        got.push_back(*a);
    EXPECT_EQ(got, (std::vector<uint64_t>{8 * 4096, 9 * 4096, 10 * 4096, 11 * 4096}));
    EXPECT_FALSE(s.pop());
    // The kernel may complete an address with an offset into the frame.
    s.push(9 * 4096 + 256);
    EXPECT_EQ(s.available(), 1u);
    EXPECT_EQ(s.pop(), std::optional<uint64_t>(9 * 4096));
    EXPECT_THROW(FrameStack(0, 1, 3000), std::invalid_argument);
}

TEST(Payload, BulkBigEndianMatchesTheScalarCodec) {
    for (size_t n : {0, 1, 3, 4, 5, 16, 831, 832}) {
        std::vector<int32_t> src(n), back(n);
        for (size_t i = 0; i < n; ++i)
            src[i] = int32_t(0x01020304u * uint32_t(i + 1) ^ 0x80000000u);
        std::vector<std::byte> bulk(4 * n), scalar(4 * n);
        store_be32_n(bulk.data(), src.data(), n);
        for (size_t i = 0; i < n; ++i)
            store_be32(scalar.data() + 4 * i, src[i]);
        EXPECT_EQ(bulk, scalar) << n;
        load_be32_n(back.data(), bulk.data(), n);
        EXPECT_EQ(back, src) << n;
    }
    std::byte b[4];
    store_be32(b, 0x11223344);
    EXPECT_EQ(b[0], std::byte(0x11));
    EXPECT_EQ(b[3], std::byte(0x44));
}

// A transport that only implements recv_batch(): recv_views() must hand
// out its datagrams, and mark one longer than max_len as too long.
class ScriptedTransport final : public Transport {
  public:
    std::deque<std::vector<std::byte>> inbox;
    size_t send_batch(std::span<const std::span<const std::byte>> p) override { return p.size(); }
    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        size_t n = 0;
        for (; n < bufs.size() && !inbox.empty(); ++n) {
            auto &d = inbox.front();
            sizes[n] = d.size();
            std::memcpy(bufs[n].data(), d.data(), std::min(d.size(), bufs[n].size()));
            inbox.pop_front();
        }
        return n;
    }
    void wait(std::chrono::nanoseconds, bool) override {}
    std::string describe() const override { return "scripted"; }
};

// The engines' timers run once a receive comes back short of a batch: the
// queue is read to the end (rx_backlog.h).
TEST(RxBacklog, TimersRunOnceAReceiveComesBackShort) {
    detail::RxBacklog b(64, 2 * 128 + 64);
    EXPECT_TRUE(b.drained(0));
    EXPECT_TRUE(b.drained(63));
    EXPECT_FALSE(b.drained(64)) << "a full batch: more may be queued";
    EXPECT_FALSE(b.drained(64));
    EXPECT_TRUE(b.drained(10));
}

// A peer that refills the queue as fast as it is read cannot hold the timers
// off for good: after more full batches in a row than the queue holds (320
// frames: 5 batches, so 6), the next one lets them run, and the count starts
// again.
TEST(RxBacklog, AQueueKeptFullCannotSilenceTheTimers) {
    detail::RxBacklog b(64, 2 * 128 + 64);
    for (int i = 0; i < 6; ++i)
        EXPECT_FALSE(b.drained(64)) << "full batch " << i + 1;
    EXPECT_TRUE(b.drained(64)) << "the 7th full batch in a row";
    EXPECT_FALSE(b.drained(64)) << "counted from 0 again";
}

TEST(Transport, DefaultRecvViewsOverRecvBatch) {
    ScriptedTransport t;
    t.inbox.push_back(bytes({1, 2, 3}));
    t.inbox.push_back(std::vector<std::byte>(200, std::byte(7)));
    t.inbox.push_back(bytes({9}));
    std::vector<std::span<const std::byte>> v(2);
    ASSERT_EQ(t.recv_views(v, 100), 2u);
    EXPECT_EQ(std::vector<std::byte>(v[0].begin(), v[0].end()), bytes({1, 2, 3}));
    EXPECT_GT(v[1].size(), 100u) << "too long stays recognisable";
    ASSERT_EQ(t.recv_views(v, 100), 1u);
    EXPECT_EQ(v[0][0], std::byte(9));
    EXPECT_EQ(t.recv_views(v, 100), 0u);
}

// A plain socket on 127.0.0.1 with the given port (0: any); returns its port.
int bound_socket(uint16_t &port) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0)
        return -1;
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    port = ntohs(a.sin_port);
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

// GSO sends runs of equal sizes as one message each; the receiver must
// still see every datagram alone, in order, with its own size and bytes.
TEST(UdpTransport, GsoSendsArriveAsSeparateDatagrams) {
    uint16_t peer_port = 0;
    int peer = bound_socket(peer_port);
    ASSERT_GE(peer, 0);
    UdpTransportConfig c;
    c.local_ip = "127.0.0.1";
    c.remote_ip = "127.0.0.1";
    c.remote_port = peer_port;
    c.batch = 64;
    c.gso = true;
    auto t = make_udp_transport(c);
    // 20 x 3360 (beyond one 64 KiB GSO message), a short tail, then other sizes.
    std::vector<size_t> sizes(20, 3360);
    for (size_t s : {1000, 48, 48, 48, 3360, 7})
        sizes.push_back(s);
    std::vector<std::vector<std::byte>> pkts;
    std::vector<std::span<const std::byte>> spans;
    for (size_t i = 0; i < sizes.size(); ++i) {
        pkts.emplace_back(sizes[i], std::byte(i));
        pkts.back()[0] = std::byte(0xA0 + i);
    }
    for (auto &p : pkts)
        spans.emplace_back(p);
    size_t sent = 0;
    for (int tries = 0; sent < spans.size() && tries < 100; ++tries)
        sent += t->send_batch(std::span(spans).subspan(sent));
    ASSERT_EQ(sent, spans.size());
    std::vector<std::byte> buf(70000);
    for (size_t i = 0; i < sizes.size(); ++i) {
        ssize_t n = recv(peer, buf.data(), buf.size(), 0);
        ASSERT_EQ(n, ssize_t(sizes[i])) << "datagram " << i;
        EXPECT_EQ(buf[0], std::byte(0xA0 + i)) << "datagram " << i;
        EXPECT_EQ(buf[size_t(n) - 1], n > 1 ? std::byte(i) : std::byte(0xA0 + i));
    }
    close(peer);
}

// With UDP_GRO on the socket, datagrams that were not coalesced (loopback
// has no GRO) come out one per view.
TEST(UdpTransport, GroSocketReceivesSingleDatagrams) {
    UdpTransportConfig c;
    c.local_ip = "127.0.0.1";
    c.remote_ip = "127.0.0.1";
    c.remote_port = 9; // unused: we only receive
    c.gro = true;
    c.batch = 8;
    // Learn the transport's port from a sender that it answers to: bind first.
    uint16_t port = 0;
    int probe = bound_socket(port); // pick a free port, then release it
    ASSERT_GE(probe, 0);
    close(probe);
    c.local_port = port;
    auto t = make_udp_transport(c);
    uint16_t sender_port = 0;
    int sender = bound_socket(sender_port);
    ASSERT_GE(sender, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    for (int i = 0; i < 12; ++i) {
        std::vector<std::byte> d(100 + size_t(i), std::byte(i));
        ASSERT_EQ(
            sendto(sender, d.data(), d.size(), 0, reinterpret_cast<sockaddr *>(&to), sizeof(to)),
            ssize_t(d.size()));
    }
    std::vector<std::span<const std::byte>> v(5);
    int seen = 0;
    for (int rounds = 0; seen < 12 && rounds < 1000; ++rounds) {
        size_t n = t->recv_views(v, 4096);
        for (size_t i = 0; i < n; ++i, ++seen) {
            EXPECT_EQ(v[i].size(), 100u + size_t(seen));
            EXPECT_EQ(v[i][0], std::byte(seen));
        }
        if (n == 0)
            t->wait(std::chrono::milliseconds(10), false);
    }
    EXPECT_EQ(seen, 12);
    close(sender);
}

} // namespace
