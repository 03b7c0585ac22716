// SPDX-License-Identifier: BSD-2-Clause
// The mesh relay program (bpf/incxdp_relay.bpf.c) on crafted frames, one
// row per rule (katran style): the frame, the node's config and routes, the
// verdict, the output bytes and the one counter the frame must end in.
// The relay's tx devmap needs real interfaces: a veth pair in a private
// network namespace stands for the node's two links.
#include "../common/frames.h"
#include "../common/percpu.h"
#include "../common/private_netns.h"
#include "incxdp_relay.skel.h"

#include <incxdp/capture.h>
#include <incxdp/chaos.h>
#include <incxdp/relay.h>
#include <incxdp/xdp_frags.h>
#include <incxdp/xsk.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace incxdp::test {
namespace {

constexpr uint32_t kSelf = 0x0b0b0002;    // this node (b)
constexpr uint32_t kDst = 0x0c0c0003;     // a node two hops away (c), routed
constexpr uint32_t kUnknown = 0x0d0d0004; // no route
constexpr size_t kRelay = kL4;            // relay header offset
constexpr size_t kHops = kRelay + 4;      // incxdp_relay_hdr.hops
const Bytes kData = {'r', 'e', 'l', 'a', 'y',  'e',  'd',  ' ',
                     'd', 'a', 't', 'a', 0xde, 0xad, 0xbe, 0xef};

// What the sender addressed: the link a-b, b's end.
const Endpoint kFrom{{0x02, 0x52, 0, 0, 0, 0xa1}, 0x0a010001, 40000};
const Endpoint kToSelf{{0x02, 0x52, 0, 0, 0, 0xb1}, 0x0a010002, INCXDP_RELAY_UDP_PORT};

struct RelayFields {
    uint16_t magic = INCXDP_RELAY_MAGIC;
    uint8_t version = INCXDP_RELAY_VERSION;
    uint8_t hops = 1, path = 0;
    uint32_t dst = kDst;
    int64_t payload_len = -1; // -1: the payload's size
};

// incxdp_relay_hdr, big-endian by hand (relay.h), then the payload.
Bytes relay_payload(const RelayFields &f, const Bytes &data = kData) {
    Bytes b;
    put16(b, f.magic);
    b.push_back(f.version);
    b.push_back(INCXDP_RELAY_KIND_P2P);
    b.push_back(f.hops);
    b.push_back(3); // total_hops
    b.push_back(f.path);
    b.push_back(0);
    put32(b, 0x0a0a0001); // src node
    put32(b, f.dst);
    put32(b, 0x5e55);
    put32(b, uint32_t(f.payload_len < 0 ? data.size() : size_t(f.payload_len)));
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

Bytes relay_frame(const RelayFields &f = {}) {
    return udp_frame(kFrom, kToSelf, relay_payload(f));
}

// The two links out of b: next hop 0 (to c) and next hop 1 (the other way
// round a ring). ifindex filled in once the interfaces exist.
struct Link {
    std::array<uint8_t, 6> src_mac, dst_mac;
    uint32_t src_ip, dst_ip; // host order
};
const Link kLinks[2] = {
    {{0x02, 0x52, 0, 0, 0, 0xb2}, {0x02, 0x52, 0, 0, 0, 0xc2}, 0x0a020001, 0x0a020002},
    {{0x02, 0x52, 0, 0, 0, 0xb3}, {0x02, 0x52, 0, 0, 0, 0xd3}, 0x0a030001, 0x0a030002}};

enum class Routes {
    None,
    One,      // kDst via link 0
    Two,      // kDst via link 0 or 1, by path
    DeadLink, // kDst via link 0's addresses on an interface outside the tx map
};

enum class Out {
    Same,     // untouched
    ViaLink0, // readdressed for link 0, hops + 1
    ViaLink1,
};

struct Row {
    const char *name;
    std::function<Bytes()> frame;
    Routes routes = Routes::One;
    bool relay_enabled = true;
    uint32_t max_hops = INCXDP_RELAY_DEFAULT_MAX_HOPS;
    int verdict;
    Out out;
    incxdp_relay_stat stat;
    size_t linear = 0; // > 0: only that many bytes linear, the rest in fragments
};

// gtest names a failing row by this, not by its bytes.
void PrintTo(const Row &r, std::ostream *os) {
    *os << r.name;
}

Bytes with(Bytes f, const std::function<void(Bytes &)> &edit) {
    edit(f);
    return f;
}

const Row kRows[] = {
    {"ForwardOneHop", [] { return relay_frame(); }, Routes::One, true, 4, XDP_REDIRECT,
     Out::ViaLink0, INCXDP_RELAY_STAT_FORWARD},
    {"ForwardLastAllowedHop", [] { return relay_frame({.hops = 3}); }, Routes::One, true, 4,
     XDP_REDIRECT, Out::ViaLink0, INCXDP_RELAY_STAT_FORWARD},
    {"OneNextHopTakesAnyPath", [] { return relay_frame({.path = 1}); }, Routes::One, true, 4,
     XDP_REDIRECT, Out::ViaLink0, INCXDP_RELAY_STAT_FORWARD},
    {"TwoNextHopsPath0", [] { return relay_frame({.path = 0}); }, Routes::Two, true, 4,
     XDP_REDIRECT, Out::ViaLink0, INCXDP_RELAY_STAT_FORWARD},
    {"TwoNextHopsPath1", [] { return relay_frame({.path = 1}); }, Routes::Two, true, 4,
     XDP_REDIRECT, Out::ViaLink1, INCXDP_RELAY_STAT_FORWARD},
    {"TwoNextHopsPathModulo", [] { return relay_frame({.path = 3}); }, Routes::Two, true, 4,
     XDP_REDIRECT, Out::ViaLink1, INCXDP_RELAY_STAT_FORWARD},
    {"ForwardFrameInFragments", [] { return relay_frame(); }, Routes::One, true, 4, XDP_REDIRECT,
     Out::ViaLink0, INCXDP_RELAY_STAT_FORWARD, /*linear=*/50},
    {"DeliverWithoutSocketPasses", [] { return relay_frame({.dst = kSelf}); }, Routes::One, true, 4,
     XDP_PASS, Out::Same, INCXDP_RELAY_STAT_DELIVER_STACK},
    {"DeliverWithRelayOff", [] { return relay_frame({.dst = kSelf}); }, Routes::One, false, 4,
     XDP_PASS, Out::Same, INCXDP_RELAY_STAT_DELIVER_STACK},
    {"DeliverPastHopLimit", [] { return relay_frame({.hops = 9, .dst = kSelf}); }, Routes::One,
     true, 4, XDP_PASS, Out::Same, INCXDP_RELAY_STAT_DELIVER_STACK},
    {"HopLimit", [] { return relay_frame({.hops = 4}); }, Routes::One, true, 4, XDP_DROP, Out::Same,
     INCXDP_RELAY_STAT_HOP_LIMIT},
    {"HopLimitZero", [] { return relay_frame({.hops = 0}); }, Routes::One, true, 0, XDP_DROP,
     Out::Same, INCXDP_RELAY_STAT_HOP_LIMIT},
    {"RelayOff", [] { return relay_frame(); }, Routes::One, false, 4, XDP_DROP, Out::Same,
     INCXDP_RELAY_STAT_RELAY_OFF},
    {"UnknownDestination", [] { return relay_frame({.dst = kUnknown}); }, Routes::One, true, 4,
     XDP_DROP, Out::Same, INCXDP_RELAY_STAT_NO_ROUTE},
    {"NoRoutes", [] { return relay_frame(); }, Routes::None, true, 4, XDP_DROP, Out::Same,
     INCXDP_RELAY_STAT_NO_ROUTE},
    // Rewritten, then refused by the devmap: the frame is dropped.
    {"NextHopInterfaceNotInTxMap", [] { return relay_frame(); }, Routes::DeadLink, true, 4,
     XDP_DROP, Out::ViaLink0, INCXDP_RELAY_STAT_REDIRECT_FAIL},
    {"BadMagic", [] { return relay_frame({.magic = 0x4D59}); }, Routes::One, true, 4, XDP_DROP,
     Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"BadVersion", [] { return relay_frame({.version = 2}); }, Routes::One, true, 4, XDP_DROP,
     Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"TruncatedHeader",
     [] {
         Bytes p = relay_payload({});
         p.resize(INCXDP_RELAY_HDR_LEN - 4);
         return udp_frame(kFrom, kToSelf, p);
     },
     Routes::One, true, 4, XDP_DROP, Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"PayloadLenBeyondUdpLength",
     [] { return relay_frame({.payload_len = int64_t(kData.size()) + 1}); }, Routes::One, true, 4,
     XDP_DROP, Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"UdpLengthBeyondIpLength",
     [] { return with(relay_frame(), [](Bytes &f) { f[kEth + kIp + 5] += 1; }); }, Routes::One,
     true, 4, XDP_DROP, Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"IpLengthBeyondFrame",
     [] { return with(relay_frame(), [](Bytes &f) { f.resize(f.size() - 2); }); }, Routes::One,
     true, 4, XDP_DROP, Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    {"IpLengthBelowHeaders",
     [] {
         return with(relay_frame(), [](Bytes &f) {
             f[kEth + 2] = 0;
             f[kEth + 3] = uint8_t(kIp + kUdp);
             fix_ip_checksum(f);
         });
     },
     Routes::One, true, 4, XDP_DROP, Out::Same, INCXDP_RELAY_STAT_MALFORMED},
    // The daemon's hellos and floods go to the stack, never relayed.
    {"MeshControlPortPasses",
     [] {
         Endpoint ctl = kToSelf;
         ctl.port = INCXDP_MESH_CTL_UDP_PORT;
         return udp_frame(kFrom, ctl, relay_payload({}));
     },
     Routes::One, true, 4, XDP_PASS, Out::Same, INCXDP_RELAY_STAT_PASS},
    {"TcpToRelayPortPasses", [] { return udp_frame(kFrom, kToSelf, relay_payload({}), 6); },
     Routes::One, true, 4, XDP_PASS, Out::Same, INCXDP_RELAY_STAT_PASS},
    {"NonIpPasses",
     [] {
         return with(relay_frame(), [](Bytes &f) {
             f[12] = 0x08;
             f[13] = 0x06; // ARP
         });
     },
     Routes::One, true, 4, XDP_PASS, Out::Same, INCXDP_RELAY_STAT_PASS},
    {"IpFragmentPasses",
     [] {
         return with(relay_frame(), [](Bytes &f) {
             f[kEth + 6] = 0x20; // MF
             fix_ip_checksum(f);
         });
     },
     Routes::One, true, 4, XDP_PASS, Out::Same, INCXDP_RELAY_STAT_PASS},
};

class RelayProg : public ::testing::TestWithParam<Row> {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        // Interfaces of our own, invisible to (and safe from) everyone else.
        setup_error_ = enter_private_netns();
        if (setup_error_.empty())
            setup_error_ = add_veth_pair("rl0", "rl1");
        if (!setup_error_.empty())
            return;
        link_ifindex_[0] = if_nametoindex("rl0");
        link_ifindex_[1] = if_nametoindex("rl1");
        skel_ = incxdp_relay__open();
        if (!skel_) {
            setup_error_ = std::string("open incxdp_relay: ") + strerror(errno);
            return;
        }
        // Private, unpinned maps: the test must not touch a running relay.
        bpf_map *m;
        bpf_object__for_each_map(m, skel_->obj) bpf_map__set_pin_path(m, nullptr);
        // As attach() in driver mode: frames above one buffer come in fragments.
        if (set_xdp_frags({skel_->progs.incxdp_relay}, true) != 0 ||
            incxdp_relay__load(skel_) != 0) {
            setup_error_ = std::string("load incxdp_relay: ") + strerror(errno);
            return;
        }
        for (uint32_t ifx : link_ifindex_)
            if (bpf_map_update_elem(bpf_map__fd(skel_->maps.incxdp_relay_tx), &ifx, &ifx,
                                    BPF_ANY) != 0)
                setup_error_ = std::string("add a link to incxdp_relay_tx: ") + strerror(errno);
    }

    static void TearDownTestSuite() {
        if (skel_)
            incxdp_relay__destroy(skel_);
        skel_ = nullptr;
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs needs root";
        ASSERT_EQ(setup_error_, "");
    }

    static int fd(bpf_map *m) { return bpf_map__fd(m); }

    void configure(const Row &row) {
        incxdp_relay_cfg cfg{kSelf, row.relay_enabled ? 1u : 0u, row.max_hops, 0};
        uint32_t key = 0;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_relay_cfg), &key, &cfg, BPF_ANY), 0);
        for (uint32_t dst : {kDst, kUnknown, kSelf})
            bpf_map_delete_elem(fd(skel_->maps.incxdp_relay_routes), &dst);
        if (row.routes == Routes::None)
            return;
        incxdp_relay_route r{};
        r.hops = 1;
        r.nnexthops = row.routes == Routes::Two ? 2 : 1;
        for (uint32_t i = 0; i < r.nnexthops; i++) {
            incxdp_relay_nexthop &nh = r.nh[i];
            nh.ifindex = row.routes == Routes::DeadLink ? 1 /* lo */ : link_ifindex_[i];
            std::memcpy(nh.src_mac, kLinks[i].src_mac.data(), 6);
            std::memcpy(nh.dst_mac, kLinks[i].dst_mac.data(), 6);
            nh.src_ip = htonl(kLinks[i].src_ip);
            nh.dst_ip = htonl(kLinks[i].dst_ip);
        }
        uint32_t dst = kDst;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_relay_routes), &dst, &r, BPF_ANY), 0);
    }

    std::array<uint64_t, INCXDP_RELAY_STAT_MAX> counters() {
        std::array<uint64_t, INCXDP_RELAY_STAT_MAX> c{};
        for (uint32_t i = 0; i < INCXDP_RELAY_STAT_MAX; i++)
            c[i] = percpu_sum(fd(skel_->maps.incxdp_relay_stats), i);
        return c;
    }

    // bpf_prog_test_run_opts; with `linear`, the rest of the frame in fragments.
    static std::pair<int, Bytes> run(const Bytes &frame, size_t linear) {
        Bytes out(frame.size() + 256);
        xdp_md ctx{};
        ctx.data_end = static_cast<__u32>(linear ? linear : frame.size());
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(out.size()),
                    .ctx_in = linear ? &ctx : nullptr,
                    .ctx_size_in = static_cast<__u32>(linear ? sizeof(ctx) : 0), .repeat = 1);
        int err = bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.incxdp_relay), &opts);
        EXPECT_EQ(err, 0) << "bpf_prog_test_run_opts: " << strerror(errno);
        out.resize(opts.data_size_out);
        return {static_cast<int>(opts.retval), out};
    }

    static inline incxdp_relay *skel_ = nullptr;
    static inline std::string setup_error_;
    static inline uint32_t link_ifindex_[2] = {};
};

// Readdressed for `link`, one more hop, everything else as it came.
void expect_forwarded(const Bytes &in, const Bytes &out, const Link &link) {
    ASSERT_EQ(out.size(), in.size());
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 6), Bytes(link.dst_mac.begin(), link.dst_mac.end()))
        << "eth dst";
    EXPECT_EQ(Bytes(out.begin() + 6, out.begin() + 12),
              Bytes(link.src_mac.begin(), link.src_mac.end()))
        << "eth src";
    EXPECT_EQ(get32(out, kEth + 12), link.src_ip) << "IP saddr: this node's address on the link";
    EXPECT_EQ(get32(out, kEth + 16), link.dst_ip) << "IP daddr: the next hop's";
    EXPECT_EQ(out[kEth + 8], 64) << "TTL reset";
    EXPECT_EQ(ip_checksum(&out[kEth]), 0) << "IP header checksum must add up";
    EXPECT_EQ(get16(out, kEth + kIp + 6), 0) << "UDP checksum cleared";
    EXPECT_EQ(out[kHops], in[kHops] + 1) << "hops + 1";
    // The rest: ethertype, IP fields other than TTL/checksum/addresses,
    // UDP ports and lengths, the relay header but hops, the payload.
    Bytes a = in, b = out;
    for (Bytes *f : {&a, &b}) {
        std::fill(f->begin(), f->begin() + 12, 0);
        for (size_t off : {kEth + 8, kEth + 10, kEth + 11, kEth + kIp + 6, kEth + kIp + 7, kHops})
            (*f)[off] = 0;
        std::fill(f->begin() + kEth + 12, f->begin() + kEth + 20, 0);
    }
    EXPECT_EQ(a, b) << "only the addresses, TTL, checksums and hops may change";
}

TEST_P(RelayProg, Verdict) {
    const Row &row = GetParam();
    configure(row);
    const Bytes in = row.frame();
    const auto before = counters();
    auto [verdict, out] = run(in, row.linear);
    const auto after = counters();

    EXPECT_EQ(verdict, row.verdict);
    for (uint32_t i = 0; i < INCXDP_RELAY_STAT_MAX; i++)
        EXPECT_EQ(after[i] - before[i], i == uint32_t(row.stat) ? 1u : 0u) << "counter " << i;
    switch (row.out) {
    case Out::Same:
        EXPECT_EQ(out, in) << "the frame must leave untouched";
        break;
    case Out::ViaLink0:
        expect_forwarded(in, out, kLinks[0]);
        break;
    case Out::ViaLink1:
        expect_forwarded(in, out, kLinks[1]);
        break;
    }
}

INSTANTIATE_TEST_SUITE_P(Rows, RelayProg, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row> &i) {
                             return std::string(i.param.name);
                         });

// The relay object loaded without pins (the test's maps are its own), with
// or without xdp.frags; *out stays null when a step failed.
void open_unpinned(bool frags, incxdp_relay **out) {
    incxdp_relay *s = incxdp_relay__open();
    ASSERT_NE(s, nullptr);
    bpf_map *m;
    bpf_object__for_each_map(m, s->obj) bpf_map__set_pin_path(m, nullptr);
    if (set_xdp_frags({s->progs.incxdp_relay}, frags) != 0 || incxdp_relay__load(s) != 0) {
        ADD_FAILURE() << "loading incxdp_relay (frags " << frags << "): " << strerror(errno);
        incxdp_relay__destroy(s);
        return;
    }
    *out = s;
}

// `attach(..., "skb")` loads it without xdp.frags: the verifier must take
// it that way too.
TEST(RelayLoad, LoadsWithoutFragsWithTheMapsOthersLookFor) {
    if (geteuid() != 0)
        GTEST_SKIP() << "loading BPF programs needs root";
    incxdp_relay *s = nullptr;
    open_unpinned(false, &s);
    ASSERT_NE(s, nullptr);
    // The map names are the contract's (relay.h): the loader and bpftool
    // users find them by these; and the ones `incxdp chaos --xdp` and
    // `incxdp capture` look for on an interface's program.
    for (const char *name : {INCXDP_MAP_RELAY_CFG, INCXDP_MAP_RELAY_ROUTES, INCXDP_MAP_RELAY_TX,
                             INCXDP_MAP_RELAY_XSKS, INCXDP_MAP_RELAY_STATS, INCXDP_CHAOS_XDP_CONFIG,
                             INCXDP_CHAOS_XDP_STATS, INCXDP_CHAOS_XDP_DUP, INCXDP_CAPTURE_MAP})
        EXPECT_NE(bpf_object__find_map_by_name(s->obj, name), nullptr) << name;
    incxdp_relay__destroy(s);
}

// The local endpoint sends through the relay (bpf/lib/xsk_tx.h): a run from
// loopback while the map is armed takes the slot the control slot names,
// redirects its frame out of the slot's interface and advances; a bad slot
// is dropped; unarmed, the same run is relayed like any frame.
TEST(RelayLiveTx, ArmedRunsSendTheNextSlot) {
    if (geteuid() != 0)
        GTEST_SKIP() << "loading BPF programs needs root";
    incxdp_relay *s = nullptr;
    open_unpinned(true, &s);
    ASSERT_NE(s, nullptr);
    const int tx = bpf_map__fd(s->maps.incxdp_tx_frames);
    const int stats = bpf_map__fd(s->maps.incxdp_relay_stats);
    auto run = [&](const Bytes &in) {
        Bytes out(4096);
        LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = in.data(), .data_out = out.data(),
                    .data_size_in = static_cast<__u32>(in.size()),
                    .data_size_out = static_cast<__u32>(out.size()), .repeat = 1);
        EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd(s->progs.incxdp_relay), &o), 0)
            << strerror(errno);
        out.resize(o.data_size_out);
        return std::pair<int, Bytes>{static_cast<int>(o.retval), out};
    };
    const Bytes frame = relay_frame();
    incxdp_xsk_tx_frame slot{};
    slot.len = static_cast<uint32_t>(frame.size());
    slot.ifindex = 1;
    std::memcpy(slot.data, frame.data(), frame.size());
    uint32_t key = 1 + 3; // frame slot 3
    ASSERT_EQ(bpf_map_update_elem(tx, &key, &slot, BPF_ANY), 0);
    incxdp_xsk_tx_frame ctl{};
    ctl.len = 3;
    ctl.ifindex = INCXDP_XSK_TX_ARMED;
    key = 0;
    ASSERT_EQ(bpf_map_update_elem(tx, &key, &ctl, BPF_ANY), 0);

    const Bytes tmpl(14, 0); // a live run's frame holds anything; the slot decides
    auto [verdict, out] = run(tmpl);
    EXPECT_EQ(verdict, XDP_REDIRECT);
    EXPECT_EQ(out, frame);
    EXPECT_EQ(percpu_sum(stats, INCXDP_RELAY_STAT_SENT), 1u);
    ASSERT_EQ(bpf_map_lookup_elem(tx, &key, &ctl), 0);
    EXPECT_EQ(ctl.len, 4u) << "the next run takes the next slot";

    // Frame slot 4 is empty.
    std::tie(verdict, out) = run(tmpl);
    EXPECT_EQ(verdict, XDP_DROP);
    EXPECT_EQ(percpu_sum(stats, INCXDP_RELAY_STAT_TX_BAD), 1u);

    // Unarmed: the relay frame is relayed (no relay config: node 0, relaying off).
    ctl = {};
    ASSERT_EQ(bpf_map_update_elem(tx, &key, &ctl, BPF_ANY), 0);
    std::tie(verdict, out) = run(frame);
    EXPECT_EQ(verdict, XDP_DROP);
    EXPECT_EQ(percpu_sum(stats, INCXDP_RELAY_STAT_RELAY_OFF), 1u);
    EXPECT_EQ(percpu_sum(stats, INCXDP_RELAY_STAT_SENT), 1u);
    incxdp_relay__destroy(s);
}

} // namespace
} // namespace incxdp::test
