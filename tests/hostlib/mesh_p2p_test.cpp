// SPDX-License-Identifier: BSD-2-Clause
// The mesh p2p transport without a network: the header codec, and two or
// more Endpoints over an in-memory link that drops, duplicates and reorders
// frames (hostlib/src/mesh_link.h's Link), for the reliability rules of
// docs/MESH.md §Point-to-point and the ring collectives.
#include "mesh_conn.h"
#include "mesh_link.h"

#include <incxdp/mesh.h>
#include <incxdp/relay.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace incxdp::mesh {
namespace {

// Frames between in-memory nodes; faults applied on send.
struct Wire {
    std::mutex mu;
    std::mt19937 rng{1};
    double drop = 0, dup = 0, reorder = 0;
    bool cut = false; // everything dropped: a dead path
    struct Frame {
        uint32_t src;
        uint8_t kind, path;
        uint32_t session;
        std::vector<uint8_t> data;
    };
    std::map<uint32_t, std::deque<Frame>> queues;
    uint64_t sent = 0, dropped = 0;

    bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; }
    void put(uint32_t dst, Frame f) {
        std::lock_guard lk(mu);
        sent++;
        if (cut || chance(drop)) {
            dropped++;
            return;
        }
        auto &q = queues[dst];
        int copies = chance(dup) ? 2 : 1;
        for (int i = 0; i < copies; i++) {
            if (!q.empty() && chance(reorder)) {
                size_t at = std::uniform_int_distribution<size_t>(0, q.size() - 1)(rng);
                q.insert(q.begin() + static_cast<long>(at), f);
            } else {
                q.push_back(f);
            }
        }
    }
};

class MemLink final : public Link {
  public:
    MemLink(Wire &w, std::vector<uint32_t> addrs, size_t mtu_payload = 1000)
        : wire_(w), addrs_(std::move(addrs)), node_(node_id_of(addrs_)), payload_(mtu_payload) {}
    uint32_t self_node() const override { return node_; }
    std::vector<uint32_t> addresses() const override { return addrs_; }
    size_t send(std::span<const OutFrame> frames) override {
        for (const auto &f : frames) {
            Wire::Frame wf{node_, f.kind, f.path, f.session, {}};
            auto *h = static_cast<const uint8_t *>(f.head);
            auto *b = static_cast<const uint8_t *>(f.body);
            wf.data.insert(wf.data.end(), h, h + f.head_len);
            if (f.body_len)
                wf.data.insert(wf.data.end(), b, b + f.body_len);
            EXPECT_LE(wf.data.size(), payload_);
            wire_.put(f.dst_node, std::move(wf));
        }
        return frames.size();
    }
    size_t recv(std::span<InFrame> out) override {
        std::lock_guard lk(wire_.mu);
        auto &q = wire_.queues[node_];
        held_.clear();
        size_t n = 0;
        while (n < out.size() && !q.empty()) {
            held_.push_back(std::move(q.front()));
            q.pop_front();
            n++;
        }
        for (size_t i = 0; i < n; i++) {
            auto &f = held_[i];
            out[i] = InFrame{f.src, f.kind, 0, f.path, f.session, f.data.data(), f.data.size()};
        }
        return n;
    }
    PathInfo path(uint32_t, uint8_t, bool) override {
        PathInfo p;
        p.found = true;
        p.hops = 1;
        p.nnexthops = 1;
        p.iface = "mem0";
        p.via = "memory";
        return p;
    }
    size_t max_payload(uint32_t) override { return payload_; }

  private:
    Wire &wire_;
    std::vector<uint32_t> addrs_;
    uint32_t node_;
    size_t payload_;
    std::deque<Wire::Frame> held_;
};

Options fast_opts(double timeout = 5) {
    Options o;
    o.timeout_s = timeout;
    o.rto_s = 0.005;
    o.window = 64;
    o.linger_s = 0;
    return o;
}

// Loops in these tests give up at a deadline far beyond what they need:
// the timers they wait for run on the clock, not per call.
bool before_deadline(std::chrono::steady_clock::time_point start) {
    return std::chrono::steady_clock::now() - start < std::chrono::seconds(30);
}

uint8_t pattern(uint32_t from, size_t msg, size_t i) {
    return static_cast<uint8_t>((from * 131 + msg * 31 + i * 7 + (i >> 8)) & 0xff);
}

struct Pair {
    Wire wire;
    std::vector<uint32_t> addr_a{0x0a5a0001}, addr_b{0x0a5a0002};
    Endpoint a{std::make_unique<MemLink>(wire, addr_a), fast_opts()};
    Endpoint b{std::make_unique<MemLink>(wire, addr_b), fast_opts()};
    Comm *ca = nullptr, *cb = nullptr; // a connected to b's listener

    explicit Pair(double drop = 0, double dup = 0, double reorder = 0) {
        wire.drop = drop;
        wire.dup = dup;
        wire.reorder = reorder;
    }
    void connect() {
        Listen *l = b.listen(7);
        Handle h = b.handle(l);
        auto start = std::chrono::steady_clock::now();
        while ((!ca || !cb) && before_deadline(start)) {
            if (!ca)
                ca = a.connect(h);
            else
                a.progress(); // b may still need our answers
            if (!cb)
                cb = b.accept(l);
            else
                b.progress();
        }
        ASSERT_TRUE(ca && cb) << "handshake did not complete";
    }
    // Drives both endpoints until every request is done (each once). Both
    // progress every round, as two processes would: an end whose own
    // requests are all done must still answer the other's resends (its
    // last ACK may have been lost).
    void finish(std::vector<std::pair<Endpoint *, Request *>> reqs,
                std::map<Request *, std::vector<size_t>> *sizes = nullptr) {
        auto start = std::chrono::steady_clock::now();
        while (!reqs.empty() && before_deadline(start)) {
            a.progress();
            b.progress();
            for (auto it = reqs.begin(); it != reqs.end();) {
                std::vector<size_t> s(kMaxRecvs);
                if (it->first->test(it->second, s.data())) {
                    if (sizes)
                        (*sizes)[it->second] = s;
                    it = reqs.erase(it);
                } else {
                    ++it;
                }
            }
            std::this_thread::yield();
        }
        ASSERT_TRUE(reqs.empty()) << reqs.size() << " requests never completed";
    }
};

TEST(MeshP2pCodec, HeaderRoundTripAndLayout) {
    P2pHeader h;
    h.type = INCXDP_P2P_DATA;
    h.window = 0x1234;
    h.dst_conn = 0x01020304;
    h.src_conn = 0x05060708;
    h.seq = 0x090a0b0c;
    h.msg_id = 0x0d0e0f10;
    h.tag = -2;
    h.msg_off = 0x1112131415161718ull;
    h.msg_len = 0x2122232425262728ull;
    incxdp_p2p_hdr w = encode(h);
    uint8_t bytes[INCXDP_P2P_HDR_LEN];
    memcpy(bytes, &w, sizeof bytes);
    EXPECT_EQ(bytes[0], INCXDP_P2P_DATA);
    EXPECT_EQ(bytes[1], INCXDP_P2P_VERSION);
    EXPECT_EQ(bytes[2], 0x12); // big-endian fields
    EXPECT_EQ(bytes[4], 0x01);
    EXPECT_EQ(bytes[8], 0x05);
    EXPECT_EQ(bytes[12], 0x09);
    EXPECT_EQ(bytes[16], 0x0d);
    EXPECT_EQ(bytes[20], 0xff);
    EXPECT_EQ(bytes[24], 0x11);
    EXPECT_EQ(bytes[32], 0x21);
    EXPECT_EQ(bytes[39], 0x28);
    auto d = decode(bytes);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->type, h.type);
    EXPECT_EQ(d->window, h.window);
    EXPECT_EQ(d->dst_conn, h.dst_conn);
    EXPECT_EQ(d->src_conn, h.src_conn);
    EXPECT_EQ(d->seq, h.seq);
    EXPECT_EQ(d->msg_id, h.msg_id);
    EXPECT_EQ(d->tag, h.tag);
    EXPECT_EQ(d->msg_off, h.msg_off);
    EXPECT_EQ(d->msg_len, h.msg_len);

    EXPECT_FALSE(decode(std::span<const uint8_t>(bytes, INCXDP_P2P_HDR_LEN - 1)));
    bytes[1] = INCXDP_P2P_VERSION + 1;
    EXPECT_FALSE(decode(bytes));
}

TEST(MeshP2pCodec, HandleCarriesNodeListenIdAndAddresses) {
    std::vector<uint32_t> addrs = {0x0a5a0102, 0x0a5a0001}; // unsorted on purpose
    Handle h = Endpoint::make_handle(addrs, 42);
    incxdp_p2p_handle raw;
    memcpy(&raw, h.data(), sizeof raw);
    std::vector<uint32_t> sorted = {0x0a5a0001, 0x0a5a0102};
    EXPECT_EQ(Endpoint::handle_node(h), incxdp_mesh_node_id(sorted.data(), 2));
    EXPECT_EQ(ntohl(raw.listen_id), 42u);
    EXPECT_EQ(raw.naddrs, 2);
    EXPECT_EQ(ntohl(raw.addrs[0]), 0x0a5a0001u);
    EXPECT_EQ(raw.local_cookie, 0u);
    Handle bad{};
    EXPECT_THROW(Endpoint::handle_node(bad), Error);
}

TEST(MeshP2p, ConnectAndAcceptNeverBlockAndAreRetried) {
    Pair p(0.3, 0.1, 0.2);
    Handle h = Endpoint::make_handle(p.addr_b, 9); // b does not listen yet
    for (int i = 0; i < 50; i++)
        ASSERT_EQ(p.a.connect(h), nullptr); // returns at once, "not yet"
    Listen *l = p.b.listen(9);
    EXPECT_EQ(Endpoint::handle_node(p.b.handle(l)), Endpoint::handle_node(h));
    Comm *ca = nullptr, *cb = nullptr;
    auto start = std::chrono::steady_clock::now();
    while ((!ca || !cb) && before_deadline(start)) {
        if (!ca)
            ca = p.a.connect(h);
        else
            p.a.progress();
        if (!cb)
            cb = p.b.accept(l);
        else
            p.b.progress();
    }
    ASSERT_NE(ca, nullptr);
    ASSERT_NE(cb, nullptr);
    EXPECT_EQ(p.a.peer_node(ca), p.b.node_id());
    EXPECT_EQ(p.b.peer_node(cb), p.a.node_id());
    EXPECT_EQ(p.b.accept(l), nullptr); // one connection, accepted once
}

// Every byte arrives, in both directions at once, through drops,
// duplicates and reordering; sizes are the real ones; 40 requests in flight.
class MeshP2pLossy : public ::testing::TestWithParam<std::tuple<double, double, double>> {};

TEST_P(MeshP2pLossy, EveryByteArrivesInPostingOrder) {
    auto [drop, dup, reorder] = GetParam();
    Pair p(drop, dup, reorder);
    p.connect();
    constexpr size_t kMsgs = 40;
    std::vector<std::vector<uint8_t>> out_a(kMsgs), out_b(kMsgs), in_a(kMsgs), in_b(kMsgs);
    std::vector<std::pair<Endpoint *, Request *>> reqs;
    std::map<Request *, size_t> recv_index;
    std::vector<Request *> recv_a(kMsgs), recv_b(kMsgs);
    for (size_t m = 0; m < kMsgs; m++) {
        size_t len = m == 0 ? 0 : m == 1 ? 1 : (m * 7919) % 20000;
        out_a[m].resize(len);
        out_b[m].resize(len + 3);
        for (size_t i = 0; i < len; i++)
            out_a[m][i] = pattern(1, m, i);
        for (size_t i = 0; i < len + 3; i++)
            out_b[m][i] = pattern(2, m, i);
        in_a[m].assign(30000, 0xee); // larger than any message: the real size is reported
        in_b[m].assign(30000, 0xee);
        Request *s1 = p.a.isend(p.ca, out_a[m].data(), out_a[m].size(), 0);
        Request *s2 = p.b.isend(p.cb, out_b[m].data(), out_b[m].size(), 0);
        ASSERT_TRUE(s1 && s2) << "send " << m << " refused with " << m << " in flight";
        reqs.push_back({&p.a, s1});
        reqs.push_back({&p.b, s2});
    }
    for (size_t m = 0; m < kMsgs; m++) {
        void *da = in_a[m].data(), *db = in_b[m].data();
        size_t cap = 30000;
        int tag = 0;
        recv_a[m] = p.a.irecv(p.ca, 1, &da, &cap, &tag);
        recv_b[m] = p.b.irecv(p.cb, 1, &db, &cap, &tag);
        ASSERT_TRUE(recv_a[m] && recv_b[m]);
        reqs.push_back({&p.a, recv_a[m]});
        reqs.push_back({&p.b, recv_b[m]});
    }
    std::map<Request *, std::vector<size_t>> sizes;
    p.finish(reqs, &sizes);
    for (size_t m = 0; m < kMsgs; m++) {
        ASSERT_EQ(sizes[recv_b[m]][0], out_a[m].size()) << "message " << m;
        ASSERT_EQ(sizes[recv_a[m]][0], out_b[m].size()) << "message " << m;
        EXPECT_TRUE(std::equal(out_a[m].begin(), out_a[m].end(), in_b[m].begin())) << m;
        EXPECT_TRUE(std::equal(out_b[m].begin(), out_b[m].end(), in_a[m].begin())) << m;
        EXPECT_EQ(in_b[m][out_a[m].size()], 0xee) << "written past the message " << m;
    }
    auto st = p.a.stats(p.ca);
    if (drop > 0) {
        EXPECT_GT(st.retransmissions, 0u); // losses were recovered by resending
    }
    EXPECT_EQ(p.b.stats(p.cb).bytes_received, st.bytes_sent);
}

INSTANTIATE_TEST_SUITE_P(Faults, MeshP2pLossy,
                         ::testing::Values(std::make_tuple(0.0, 0.0, 0.0),
                                           std::make_tuple(0.1, 0.0, 0.0),
                                           std::make_tuple(0.0, 0.2, 0.0),
                                           std::make_tuple(0.0, 0.0, 0.3),
                                           std::make_tuple(0.15, 0.1, 0.2)));

TEST(MeshP2p, ReceivesPostedLateStillMatchInPostingOrder) {
    Pair p(0.05, 0.05, 0.1);
    p.connect();
    std::vector<std::vector<uint8_t>> msgs = {std::vector<uint8_t>(5000, 1),
                                              std::vector<uint8_t>(17, 2), std::vector<uint8_t>(0),
                                              std::vector<uint8_t>(3000, 4)};
    std::vector<std::pair<Endpoint *, Request *>> sends;
    for (auto &m : msgs)
        sends.push_back({&p.a, p.a.isend(p.ca, m.data(), m.size(), 0)});
    // Let the data arrive before any receive is posted: it is held.
    for (auto start = std::chrono::steady_clock::now();
         std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200);) {
        p.a.progress();
        p.b.progress();
    }
    std::vector<std::vector<uint8_t>> in(msgs.size(), std::vector<uint8_t>(6000, 0));
    std::vector<std::pair<Endpoint *, Request *>> recvs;
    for (auto &b : in) {
        void *d = b.data();
        size_t cap = b.size();
        recvs.push_back({&p.b, p.b.irecv(p.cb, 1, &d, &cap, nullptr)});
    }
    std::map<Request *, std::vector<size_t>> sizes;
    p.finish(recvs, &sizes);
    p.finish(sends);
    for (size_t m = 0; m < msgs.size(); m++) {
        EXPECT_EQ(sizes[recvs[m].second][0], msgs[m].size());
        EXPECT_TRUE(std::equal(msgs[m].begin(), msgs[m].end(), in[m].begin()));
    }
}

TEST(MeshP2p, GroupedReceiveChoosesBuffersByTag) {
    Pair p(0.1, 0, 0.2);
    p.connect();
    std::vector<uint8_t> x(3000, 0x77), y(10, 0x33);
    auto *s1 = p.a.isend(p.ca, x.data(), x.size(), 7);
    auto *s2 = p.a.isend(p.ca, y.data(), y.size(), 3);
    std::vector<uint8_t> b3(4000, 0), b7(4000, 0);
    void *bufs[2] = {b3.data(), b7.data()};
    size_t caps[2] = {b3.size(), b7.size()};
    int tags[2] = {3, 7};
    Request *r = p.b.irecv(p.cb, 2, bufs, caps, tags);
    std::map<Request *, std::vector<size_t>> sizes;
    p.finish({{&p.a, s1}, {&p.a, s2}, {&p.b, r}}, &sizes);
    EXPECT_EQ(sizes[r][0], 10u);
    EXPECT_EQ(sizes[r][1], 3000u);
    EXPECT_EQ(b3[9], 0x33);
    EXPECT_EQ(b3[10], 0);
    EXPECT_EQ(b7[2999], 0x77);
}

TEST(MeshP2p, MessageLargerThanTheReceiveIsAnError) {
    Pair p;
    p.connect();
    std::vector<uint8_t> big(5000, 1), small(100);
    p.a.isend(p.ca, big.data(), big.size(), 0);
    void *d = small.data();
    size_t cap = small.size();
    Request *r = p.b.irecv(p.cb, 1, &d, &cap, nullptr);
    try {
        for (auto start = std::chrono::steady_clock::now(); before_deadline(start);) {
            p.a.progress();
            if (p.b.test(r))
                FAIL() << "a truncated receive completed";
        }
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.kind, ErrorKind::InvalidUsage);
        EXPECT_NE(std::string(e.what()).find("5000 bytes"), std::string::npos) << e.what();
    }
}

TEST(MeshP2p, RequestsBeyondTheLimitAreRefusedNotQueued) {
    Pair p;
    p.connect();
    std::vector<uint8_t> buf(10);
    Options o = fast_opts();
    for (uint32_t i = 0; i < o.max_requests; i++)
        ASSERT_NE(p.a.isend(p.ca, buf.data(), buf.size(), 0), nullptr) << i;
    EXPECT_GE(o.max_requests, 32u);
    EXPECT_EQ(p.a.isend(p.ca, buf.data(), buf.size(), 0), nullptr); // try later
}

TEST(MeshP2p, NoProgressEndsInAnErrorNamingThePeerAndPath) {
    Wire wire;
    std::vector<uint32_t> aa{0x0a5a0001}, bb{0x0a5a0002};
    Endpoint a(std::make_unique<MemLink>(wire, aa), fast_opts(0.3));
    Endpoint b(std::make_unique<MemLink>(wire, bb), fast_opts(0.3));
    Listen *l = b.listen(1);
    Handle h = b.handle(l);
    Comm *ca = nullptr, *cb = nullptr;
    for (auto start = std::chrono::steady_clock::now(); (!ca || !cb) && before_deadline(start);) {
        if (!ca)
            ca = a.connect(h);
        else
            a.progress();
        if (!cb)
            cb = b.accept(l);
        else
            b.progress();
    }
    {
        std::lock_guard lk(wire.mu);
        wire.cut = true; // the path dies
    }
    std::vector<uint8_t> data(50000, 9);
    Request *r = a.isend(ca, data.data(), data.size(), 0);
    std::string err;
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (err.empty() && std::chrono::steady_clock::now() < give_up) {
        try {
            if (a.test(r))
                FAIL() << "a send over a cut path completed";
        } catch (const Error &e) {
            EXPECT_EQ(e.kind, ErrorKind::System);
            err = e.what();
        }
        b.progress();
    }
    ASSERT_FALSE(err.empty()) << "no error after the no-progress timeout";
    char node[16];
    snprintf(node, sizeof node, "%#010x", b.node_id());
    EXPECT_NE(err.find("no progress"), std::string::npos) << err;
    EXPECT_NE(err.find(node), std::string::npos) << err;
    EXPECT_NE(err.find("via mem0"), std::string::npos) << err;
    EXPECT_GT(a.stats(ca).retransmissions, 0u);
}

TEST(MeshP2p, ConnectToNobodyEndsInAnError) {
    Wire wire;
    std::vector<uint32_t> aa{0x0a5a0001}, bb{0x0a5a0002};
    Endpoint a(std::make_unique<MemLink>(wire, aa), fast_opts(0.2));
    Handle h = Endpoint::make_handle(bb, 5);
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string err;
    while (err.empty() && std::chrono::steady_clock::now() < give_up) {
        try {
            ASSERT_EQ(a.connect(h), nullptr);
        } catch (const Error &e) {
            err = e.what();
        }
    }
    EXPECT_NE(err.find("no answer"), std::string::npos) << err;
    EXPECT_NE(err.find("listen id 5"), std::string::npos) << err;
}

TEST(MeshP2p, CloseIsAnsweredAndLingerEnds) {
    Pair p(0.2, 0.1, 0.1);
    p.connect();
    std::vector<uint8_t> x(9000, 5), y(9000);
    auto *s = p.a.isend(p.ca, x.data(), x.size(), 0);
    void *d = y.data();
    size_t cap = y.size();
    auto *r = p.b.irecv(p.cb, 1, &d, &cap, nullptr);
    p.finish({{&p.a, s}, {&p.b, r}});
    EXPECT_EQ(x, y);
    p.a.close(p.ca);
    p.b.close(p.cb);
    // Both ends close, through losses: each gets the other's CLOSE, so
    // neither waits out its linger.
    for (auto start = std::chrono::steady_clock::now();
         (p.a.open_comms() || p.b.open_comms()) && before_deadline(start);) {
        p.a.progress();
        p.b.progress();
    }
    EXPECT_EQ(p.a.open_comms(), 0u);
    EXPECT_EQ(p.b.open_comms(), 0u);
}

TEST(MeshRingOrder, HamiltonianCycleWhereThereIsOne) {
    bool direct = false;
    // ring4 in file order 0-1-2-3-0, but listed scrambled
    auto r = ring_order({{1, 3}, {2, 0}, {3, 1}, {0, 2}}, &direct);
    EXPECT_TRUE(direct);
    ASSERT_EQ(r.size(), 4u);
    for (size_t i = 0; i < 4; i++) {
        size_t a = r[i], b = r[(i + 1) % 4];
        EXPECT_TRUE((a + 1) % 4 == b || (b + 1) % 4 == a) << a << "-" << b;
    }
    // line4: no cycle, the ring runs through relays in rank order
    r = ring_order({{1}, {0, 2}, {1, 3}, {2}}, &direct);
    EXPECT_FALSE(direct);
    EXPECT_EQ(r, (std::vector<size_t>{0, 1, 2, 3}));
    // full3
    r = ring_order({{1, 2}, {0, 2}, {0, 1}}, &direct);
    EXPECT_TRUE(direct);
}

// Four ranks in threads over one lossy wire: ring AllReduce (both lanes),
// AllGather, ReduceScatter, Broadcast give the exact results.
TEST(MeshRing, CollectivesOverALossyWire) {
    Wire wire;
    wire.drop = 0.02;
    wire.reorder = 0.05;
    constexpr size_t P = 4, N = 10007;
    std::vector<std::vector<uint32_t>> addrs;
    std::vector<Handle> handles;
    for (uint32_t r = 0; r < P; r++) {
        addrs.push_back({0x0a5b0000u + r});
        handles.push_back(Endpoint::make_handle(addrs.back(), 77));
    }
    std::vector<size_t> order = {0, 2, 1, 3};
    std::vector<std::string> errors(P);
    std::vector<std::vector<int32_t>> ar(P), ag(P), rs(P), bc(P);
    std::vector<std::vector<float>> armax(P);
    std::vector<std::thread> th;
    for (size_t r = 0; r < P; r++)
        th.emplace_back([&, r] {
            try {
                Endpoint ep(std::make_unique<MemLink>(wire, addrs[r], 1400), fast_opts(10));
                Ring ring(ep, handles, order, r, 77, 30);
                ar[r].resize(N);
                for (size_t i = 0; i < N; i++)
                    ar[r][i] = int32_t(i * (r + 1)) - 5000;
                ring.allreduce(ar[r].data(), N, DType::Int32, ReduceOp::Sum);
                armax[r].resize(N);
                for (size_t i = 0; i < N; i++)
                    armax[r][i] = float((i + r * 13) % 101) - 50.f;
                ring.allreduce(armax[r].data(), N, DType::Float32, ReduceOp::Max);
                std::vector<int32_t> mine(333, int32_t(r * 1000));
                ag[r].resize(333 * P);
                ring.allgather(mine.data(), ag[r].data(), 333 * 4);
                std::vector<int32_t> in(P * 100);
                for (size_t i = 0; i < in.size(); i++)
                    in[i] = int32_t(i + r);
                rs[r].resize(100);
                ring.reduce_scatter(in.data(), rs[r].data(), 100, DType::Int32, ReduceOp::Min);
                bc[r].assign(100000, r == 2 ? 42 : 0);
                ring.broadcast(bc[r].data(), bc[r].size() * 4, 2);
            } catch (const std::exception &e) {
                errors[r] = e.what();
                fprintf(stderr, "rank %zu: %s\n", r, e.what()); // the others may wait on it
            }
        });
    for (auto &t : th)
        t.join();
    for (size_t r = 0; r < P; r++)
        ASSERT_EQ(errors[r], "") << "rank " << r;
    for (size_t r = 0; r < P; r++) {
        for (size_t i = 0; i < N; i++) {
            ASSERT_EQ(ar[r][i], int32_t(i * 10) - 20000) << r << " " << i;
            float want = -1e9f;
            for (size_t k = 0; k < P; k++)
                want = std::max(want, float((i + k * 13) % 101) - 50.f);
            ASSERT_EQ(armax[r][i], want);
        }
        for (size_t k = 0; k < P; k++)
            for (size_t i = 0; i < 333; i++)
                ASSERT_EQ(ag[r][k * 333 + i], int32_t(k * 1000));
        for (size_t i = 0; i < 100; i++)
            ASSERT_EQ(rs[r][i], int32_t(r * 100 + i)); // min over ranks: rank 0's
        for (auto v : bc[r])
            ASSERT_EQ(v, 42);
    }
}

} // namespace
} // namespace incxdp::mesh
