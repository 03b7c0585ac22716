// SPDX-License-Identifier: BSD-2-Clause
// Native UDP trees (docs/ENGINE.md, "Trees"): one switch object per tree
// node, frames carried between them by the test. A node's ports are veth
// devices of the test's own network namespace (a frame's ingress port must
// be a device); the egress rewrite of a multicast copy, which a devmap
// program cannot be test-run for, is applied by egress_copy().
#include "../common/private_netns.h"
#include "engine_fixture.h"

#include <linux/bpf.h>
#include <net/if.h>

namespace incxdp::test {
namespace {

constexpr size_t kNatData = kL4 + 32; // native payload offset
constexpr uint16_t kNative = INCXDP_UDP_PORT;
constexpr uint16_t kUpPort = 0xC000 | kJob; // a switch's partials leave from it

// One end of a switch-to-switch link (index 1..): the child's and the
// parent's addresses on it.
Endpoint child_side(uint8_t link) {
    return {{0x02, 0x49, 0x58, 0x10, link, 0x01}, 0x0a4e0001u + (link << 8), kUpPort};
}
Endpoint parent_side(uint8_t link) {
    return {{0x02, 0x49, 0x58, 0x20, link, 0x02}, 0x0a4e00feu + (link << 8), kNative};
}

void set16(Bytes &b, size_t off, uint16_t v) {
    b.at(off) = uint8_t(v >> 8);
    b.at(off + 1) = uint8_t(v);
}

// What incxdp_egress_rewrite makes of a multicast copy for one port.
Bytes egress_copy(const Bytes &in, const incxdp_egress &rw) {
    Bytes f = in;
    std::memcpy(&f[0], rw.dst_mac, 6);
    std::memcpy(&f[6], rw.src_mac, 6);
    set32(f, kEth + 12, ntohl(rw.src_ip));
    set32(f, kEth + 16, ntohl(rw.dst_ip));
    set16(f, kEth + 4, 0);
    f[kEth + 8] = 64;
    fix_ip_checksum(f);
    set16(f, kEth + kIp, get16(f, kEth + kIp + 2));
    set16(f, kEth + kIp + 2, ntohs(rw.dst_port));
    set16(f, kEth + kIp + 6, 0);
    return f;
}

std::vector<int32_t> ramp(size_t n, int32_t base, int32_t step = 1) {
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = base + int32_t(i) * step;
    return v;
}

std::vector<int32_t> sum(const std::vector<std::vector<int32_t>> &parts) {
    std::vector<int32_t> s(parts.at(0).size(), 0);
    for (const auto &p : parts)
        for (size_t i = 0; i < s.size(); i++)
            s[i] += p[i];
    return s;
}

// One switch of a tree: its own object and maps.
class Node {
  public:
    Node() = default;
    Node(const Node &) = delete;
    Node &operator=(const Node &) = delete;
    ~Node() {
        if (skel_)
            incxdp_switch__destroy(skel_);
    }

    void load() {
        open_private_switch(skel_);
        if (skel_)
            prog_ = bpf_program__fd(skel_->progs.incxdp_ingress);
    }

    void job(uint32_t nworkers, uint32_t fanin) {
        incxdp_job j{};
        j.active = 1;
        j.nworkers = nworkers;
        j.pool_base = kPoolBase;
        j.pool_size = kPoolSize;
        j.max_elems = INCXDP_MAX_ELEMS;
        j.switch_ip = htonl(kSwitchIp);
        j.fanin = fanin;
        uint32_t id = kJob;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
    }

    // A child: a host (its results go to `ep`) or a switch (to `results_port`).
    void child(const Endpoint &ep, uint16_t rank, uint16_t child, uint32_t ifindex,
               const Endpoint &own, uint16_t results_port) {
        incxdp_worker_key k{};
        std::memcpy(k.mac, ep.mac.data(), 6);
        k.ip = htonl(ep.ip);
        k.port = htons(ep.port);
        incxdp_worker v{kJob, rank, child, ifindex};
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_workers), &k, &v, BPF_ANY), 0);
        incxdp_egress_key ek{kJob, ifindex};
        incxdp_egress ev{};
        std::memcpy(ev.dst_mac, ep.mac.data(), 6);
        std::memcpy(ev.src_mac, own.mac.data(), 6);
        ev.dst_ip = htonl(ep.ip);
        ev.src_ip = htonl(own.ip);
        ev.dst_port = htons(results_port);
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_egress), &ek, &ev, BPF_ANY), 0);
        egress_[ifindex] = ev;
    }

    void parent(uint32_t ifindex, const Endpoint &us, const Endpoint &them, uint16_t rank) {
        incxdp_parent p{};
        p.ifindex = ifindex;
        std::memcpy(p.dst_mac, them.mac.data(), 6);
        std::memcpy(p.src_mac, us.mac.data(), 6);
        p.dst_ip = htonl(them.ip);
        p.src_ip = htonl(us.ip);
        p.dst_port = htons(them.port);
        p.src_port = htons(us.port);
        p.rank = rank;
        uint32_t id = kJob;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_parents), &id, &p, BPF_ANY), 0);
    }

    RunResult run(const Bytes &frame, uint32_t ifindex) {
        return run_ingress(prog_, frame, 0, ifindex);
    }
    uint64_t stat(incxdp_stat s) { return percpu_sum(fd(skel_->maps.incxdp_stats), s); }
    const incxdp_egress &egress(uint32_t ifindex) { return egress_.at(ifindex); }

    incxdp_slot slot(uint32_t window_slot) {
        auto s = std::make_unique<incxdp_slot>();
        uint32_t idx = kPoolBase + window_slot;
        EXPECT_EQ(bpf_map_lookup_elem(fd(skel_->maps.incxdp_slots), &idx, s.get()), 0);
        return *s;
    }

  private:
    static int fd(bpf_map *m) { return bpf_map__fd(m); }
    incxdp_switch *skel_ = nullptr;
    int prog_ = -1;
    std::map<uint32_t, incxdp_egress> egress_;
};

class TreeTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        // The whole process, once: every node's ports are these devices.
        if (std::string err = enter_private_netns(); !err.empty()) {
            netns_error_ = err;
            return;
        }
        for (const char *pair : {"1", "3"}) {
            const std::string a = std::string("ixtree") + pair,
                              b = std::string("ixtree") + char(pair[0] + 1);
            if (std::string err = add_veth_pair(a, b); !err.empty()) {
                netns_error_ = err;
                return;
            }
        }
        for (int i = 1; i <= 3; i++)
            port_[i] = if_nametoindex(("ixtree" + std::to_string(i)).c_str());
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs needs root";
        ASSERT_TRUE(netns_error_.empty()) << netns_error_;
    }

    // A host frame to its leaf switch.
    static Bytes host_frame(uint16_t rank, uint16_t nworkers, const std::vector<int32_t> &vals,
                            uint32_t round = 1, uint16_t slot = 3) {
        NativeFields f;
        f.job = kJob;
        f.rank = rank;
        f.nworkers = nworkers;
        f.round = round;
        f.chunk = 5;
        f.slot = slot;
        return udp_frame(worker_ep(rank), switch_ep(kNative), native_payload(f, vals));
    }

    static inline std::string netns_error_;
    static inline uint32_t port_[4] = {};
};

// Checks a frame is a native header (a multicast copy before the egress
// stage, which completes its IPv4 header, or a frame leaving as it is) of `type` from `rank`
// carrying `vals`.
void expect_native(const Bytes &f, int type, uint16_t rank, uint16_t nworkers,
                   const std::vector<int32_t> &vals) {
    EXPECT_EQ(f.at(kL4 + 1) & 0xf, type) << "message type";
    EXPECT_EQ(get32(f, kL4 + 4), kJob);
    EXPECT_EQ(get32(f, kL4 + 8), 1u) << "round echoed";
    EXPECT_EQ(get32(f, kL4 + 12), 5u) << "chunk echoed";
    EXPECT_EQ(get16(f, kL4 + 16), rank) << "rank";
    EXPECT_EQ(get16(f, kL4 + 18), nworkers) << "nworkers";
    EXPECT_EQ(get16(f, kL4 + 20), 3) << "slot echoed";
    EXPECT_EQ(values_at(f, kNatData, vals.size()), vals);
}

void expect_addressed(const Bytes &f, const Endpoint &from, const Endpoint &to) {
    EXPECT_TRUE(std::equal(to.mac.begin(), to.mac.end(), f.begin())) << "dst MAC";
    EXPECT_TRUE(std::equal(from.mac.begin(), from.mac.end(), f.begin() + 6)) << "src MAC";
    EXPECT_EQ(get32(f, kEth + 12), from.ip) << "src IP";
    EXPECT_EQ(get32(f, kEth + 16), to.ip) << "dst IP";
    EXPECT_EQ(get16(f, kEth + kIp), from.port) << "UDP src";
    EXPECT_EQ(get16(f, kEth + kIp + 2), to.port) << "UDP dst";
    EXPECT_EQ(ip_checksum(&f.at(kEth)), 0) << "IPv4 checksum must verify";
}

// Two levels, fan-in 2 at both: leaves A (ranks 0, 1) and B (ranks 2, 3)
// under root R. On every leaf, ports 1 and 2 face the hosts, port 3 the
// root; on R, port 1 faces A (link 1), port 2 faces B (link 2).
class TwoLevel : public TreeTest {
  protected:
    void SetUp() override {
        TreeTest::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        for (Node *n : {&a_, &b_, &r_}) {
            n->load();
            ASSERT_FALSE(HasFatalFailure());
            n->job(4, 2);
        }
        for (uint16_t i = 0; i < 2; i++) {
            a_.child(worker_ep(i), i, i, port_[1 + i], switch_ep(kNative), worker_ep(i).port);
            b_.child(worker_ep(2 + i), 2 + i, i, port_[1 + i], switch_ep(kNative),
                     worker_ep(2 + i).port);
        }
        a_.parent(port_[3], child_side(1), parent_side(1), 0);
        b_.parent(port_[3], child_side(2), parent_side(2), 2);
        r_.child(child_side(1), 0, 0 | INCXDP_CHILD_SWITCH, port_[1], parent_side(1), kNative);
        r_.child(child_side(2), 2, 1 | INCXDP_CHILD_SWITCH, port_[2], parent_side(2), kNative);
        ASSERT_FALSE(HasFatalFailure());
    }

    // Ranks 0 and 1 at leaf A: A's partial.
    Bytes partial_a() {
        EXPECT_EQ(a_.run(host_frame(0, 4, v_[0]), port_[1]).verdict, XDP_DROP);
        auto up = a_.run(host_frame(1, 4, v_[1]), port_[2]);
        EXPECT_EQ(up.verdict, XDP_REDIRECT) << "A's partial goes up";
        return up.out;
    }

    Bytes partial_b() {
        EXPECT_EQ(b_.run(host_frame(2, 4, v_[2]), port_[1]).verdict, XDP_DROP);
        auto up = b_.run(host_frame(3, 4, v_[3]), port_[2]);
        EXPECT_EQ(up.verdict, XDP_REDIRECT);
        return up.out;
    }

    Node a_, b_, r_;
    std::vector<std::vector<int32_t>> v_ = {ramp(64, 1), ramp(64, 1000, 3), ramp(64, -70, 7),
                                            ramp(64, 5, -2)};
};

TEST_F(TwoLevel, PartialGoesUpAddressedToTheParent) {
    auto up = partial_a();
    expect_native(up, INCXDP_MSG_DATA, 0, 4, sum({v_[0], v_[1]}));
    expect_addressed(up, child_side(1), parent_side(1));
    EXPECT_EQ(get16(up, kEth + kIp + 4), kUdp + 32 + 64 * 4) << "UDP length kept";
    EXPECT_EQ(a_.stat(INCXDP_STAT_UP), 1u);
    EXPECT_EQ(a_.stat(INCXDP_STAT_CONSUMED), 1u);
    EXPECT_EQ(a_.stat(INCXDP_STAT_COMPLETED), 0u) << "below the root nothing is a result";
    EXPECT_EQ(a_.slot(3).set[0].flags & INCXDP_SET_RESULT, 0) << "no result held yet";
}

TEST_F(TwoLevel, RootCompletesAndMulticasts) {
    EXPECT_EQ(r_.run(partial_a(), port_[1]).verdict, XDP_DROP);
    EXPECT_EQ(r_.stat(INCXDP_STAT_CONSUMED), 1u);
    auto res = r_.run(partial_b(), port_[2]);
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    expect_native(res.out, INCXDP_MSG_RESULT, 2, 4, sum(v_));
    EXPECT_EQ(get16(res.out, kEth + 4), kJob) << "IP ID carries the job to the egress stage";
    EXPECT_EQ(r_.stat(INCXDP_STAT_COMPLETED), 1u);
    EXPECT_EQ(r_.stat(INCXDP_STAT_UP), 0u);
    auto s = r_.slot(3);
    EXPECT_EQ(s.set[0].bitmap, 0x3u) << "one bit per child switch";
    EXPECT_NE(s.set[0].flags & INCXDP_SET_RESULT, 0);
}

TEST_F(TwoLevel, LeafStoresTheParentsResultAndMulticastsDown) {
    r_.run(partial_a(), port_[1]);
    auto res = r_.run(partial_b(), port_[2]);
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    auto down = egress_copy(res.out, r_.egress(port_[1]));
    expect_addressed(down, parent_side(1), {child_side(1).mac, child_side(1).ip, kNative});

    auto at_a = a_.run(down, port_[3]);
    ASSERT_EQ(at_a.verdict, XDP_REDIRECT);
    expect_native(at_a.out, INCXDP_MSG_RESULT, 2, 4, sum(v_));
    EXPECT_EQ(get16(at_a.out, kEth + 4), kJob) << "IP ID carries the job to the egress stage";
    EXPECT_EQ(a_.stat(INCXDP_STAT_DOWN), 1u);
    auto s = a_.slot(3);
    EXPECT_NE(s.set[0].flags & INCXDP_SET_RESULT, 0);
    EXPECT_EQ(std::vector<int32_t>(s.vals[0], s.vals[0] + 64), sum(v_))
        << "the result replaces the partial";

    // Each host's copy, as A's egress stage writes it.
    auto to_host = egress_copy(at_a.out, a_.egress(port_[2]));
    expect_addressed(to_host, switch_ep(kNative), worker_ep(1));
}

TEST_F(TwoLevel, HostRetransmissionGoesUpThenGetsTheResult) {
    auto up = partial_a();
    // Rank 0 lost its result (with other data: only the slot's is sent).
    auto dup = a_.run(host_frame(0, 4, ramp(64, 99999)), port_[1]);
    ASSERT_EQ(dup.verdict, XDP_REDIRECT);
    EXPECT_EQ(dup.out, up) << "the same partial re-sent up";
    EXPECT_EQ(a_.stat(INCXDP_STAT_DUP_UP), 1u);

    r_.run(up, port_[1]);
    auto res = r_.run(partial_b(), port_[2]);
    ASSERT_EQ(a_.run(egress_copy(res.out, r_.egress(port_[1])), port_[3]).verdict, XDP_REDIRECT);

    auto retx = a_.run(host_frame(0, 4, ramp(64, 99999)), port_[1]);
    ASSERT_EQ(retx.verdict, XDP_TX);
    expect_native(retx.out, INCXDP_MSG_RESULT, 0, 4, sum(v_));
    expect_addressed(retx.out, switch_ep(kNative), worker_ep(0));
    EXPECT_EQ(a_.stat(INCXDP_STAT_RETX_UNICAST), 1u);
    EXPECT_EQ(a_.stat(INCXDP_STAT_DUP_UP), 1u);
}

TEST_F(TwoLevel, ChildSwitchRetransmissionIsAnsweredAtItsNativePort) {
    auto up = partial_a();
    r_.run(up, port_[1]);
    ASSERT_EQ(r_.run(partial_b(), port_[2]).verdict, XDP_REDIRECT);
    auto retx = r_.run(up, port_[1]);
    ASSERT_EQ(retx.verdict, XDP_TX);
    EXPECT_EQ(r_.stat(INCXDP_STAT_RETX_UNICAST), 1u);
    expect_native(retx.out, INCXDP_MSG_RESULT, 0, 4, sum(v_));
    expect_addressed(retx.out, parent_side(1), {child_side(1).mac, child_side(1).ip, kNative});
    // ... which the leaf takes as the parent's result.
    EXPECT_EQ(a_.run(retx.out, port_[3]).verdict, XDP_REDIRECT);
    EXPECT_EQ(a_.stat(INCXDP_STAT_DOWN), 1u);
}

TEST_F(TwoLevel, ResultFromAnyoneButTheParentIsDropped) {
    auto up = partial_a();
    r_.run(up, port_[1]);
    auto res = r_.run(partial_b(), port_[2]);
    auto down = egress_copy(res.out, r_.egress(port_[1]));

    EXPECT_EQ(a_.run(down, port_[1]).verdict, XDP_DROP) << "the parent's addresses on a host port";
    auto forged = down;
    forged[11] ^= 1; // another source MAC
    fix_ip_checksum(forged);
    EXPECT_EQ(a_.run(forged, port_[3]).verdict, XDP_DROP);
    auto other_ip = down;
    set32(other_ip, kEth + 12, 0x0a4e0199);
    fix_ip_checksum(other_ip);
    EXPECT_EQ(a_.run(other_ip, port_[3]).verdict, XDP_DROP);
    EXPECT_EQ(r_.run(down, port_[1]).verdict, XDP_DROP) << "the root has no parent";
    EXPECT_EQ(a_.stat(INCXDP_STAT_NOT_PARENT), 3u);
    EXPECT_EQ(r_.stat(INCXDP_STAT_NOT_PARENT), 1u);
    EXPECT_EQ(a_.stat(INCXDP_STAT_DOWN), 0u);
    EXPECT_EQ(a_.slot(3).set[0].flags & INCXDP_SET_RESULT, 0);
}

TEST_F(TwoLevel, StaleResultIsDropped) {
    auto up = partial_a();
    r_.run(up, port_[1]);
    auto res = r_.run(partial_b(), port_[2]);
    auto down = egress_copy(res.out, r_.egress(port_[1]));
    auto old_round = down;
    set32(old_round, kL4 + 8, 0); // another round in the same set
    EXPECT_EQ(a_.run(old_round, port_[3]).verdict, XDP_DROP);
    auto other_set = down;
    other_set[kL4 + 20] |= 0x80; // set 1: nothing completed there
    EXPECT_EQ(a_.run(other_set, port_[3]).verdict, XDP_DROP);
    EXPECT_EQ(a_.stat(INCXDP_STAT_RESULT_STALE), 2u);
    EXPECT_EQ(a_.slot(3).set[0].flags & INCXDP_SET_RESULT, 0);
    // The host still waits: its retransmission asks the parent again.
    EXPECT_EQ(a_.run(host_frame(1, 4, v_[1]), port_[2]).verdict, XDP_REDIRECT);
    EXPECT_EQ(a_.stat(INCXDP_STAT_DUP_UP), 1u);
}

TEST_F(TwoLevel, UnknownChildSwitchIsRefused) {
    auto up = partial_a();
    set16(up, kEth + kIp, 0xC001); // another job's partial port
    EXPECT_EQ(r_.run(up, port_[1]).verdict, XDP_DROP);
    EXPECT_EQ(r_.stat(INCXDP_STAT_UNKNOWN_SENDER), 1u);
}

// A chain of single children: leaf C3 (rank 0) under C2 under root C1.
TEST_F(TreeTest, ThreeLevelChainOfSingleChildren) {
    Node c1, c2, c3;
    for (Node *n : {&c1, &c2, &c3}) {
        n->load();
        ASSERT_FALSE(HasFatalFailure());
        n->job(1, 1);
    }
    c3.child(worker_ep(0), 0, 0, port_[1], switch_ep(kNative), worker_ep(0).port);
    c3.parent(port_[3], child_side(3), parent_side(3), 0);
    c2.child(child_side(3), 0, INCXDP_CHILD_SWITCH, port_[1], parent_side(3), kNative);
    c2.parent(port_[3], child_side(2), parent_side(2), 0);
    c1.child(child_side(2), 0, INCXDP_CHILD_SWITCH, port_[1], parent_side(2), kNative);
    ASSERT_FALSE(HasFatalFailure());

    auto v = ramp(32, 40, -3);
    auto up3 = c3.run(host_frame(0, 1, v), port_[1]);
    ASSERT_EQ(up3.verdict, XDP_REDIRECT);
    expect_addressed(up3.out, child_side(3), parent_side(3));
    auto up2 = c2.run(up3.out, port_[1]);
    ASSERT_EQ(up2.verdict, XDP_REDIRECT);
    expect_native(up2.out, INCXDP_MSG_DATA, 0, 1, v);
    expect_addressed(up2.out, child_side(2), parent_side(2));
    auto res = c1.run(up2.out, port_[1]);
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    expect_native(res.out, INCXDP_MSG_RESULT, 0, 1, v);

    auto at2 = c2.run(egress_copy(res.out, c1.egress(port_[1])), port_[3]);
    ASSERT_EQ(at2.verdict, XDP_REDIRECT);
    auto at3 = c3.run(egress_copy(at2.out, c2.egress(port_[1])), port_[3]);
    ASSERT_EQ(at3.verdict, XDP_REDIRECT);
    auto to_host = egress_copy(at3.out, c3.egress(port_[1]));
    expect_native(to_host, INCXDP_MSG_RESULT, 0, 1, v);
    expect_addressed(to_host, switch_ep(kNative), worker_ep(0));
    for (Node *n : {&c3, &c2})
        EXPECT_EQ(n->stat(INCXDP_STAT_UP), 1u);
    for (Node *n : {&c3, &c2})
        EXPECT_EQ(n->stat(INCXDP_STAT_DOWN), 1u);
    EXPECT_EQ(c1.stat(INCXDP_STAT_COMPLETED), 1u);
    // Every level answers a retransmission now.
    EXPECT_EQ(c3.run(host_frame(0, 1, v), port_[1]).verdict, XDP_TX);
    EXPECT_EQ(c2.run(up3.out, port_[1]).verdict, XDP_TX);
}

// A one-switch star does not look at incxdp_parents for its decisions, and
// takes no RESULT frames.
TEST_F(TreeTest, StarTakesNoResultFrames) {
    Node s;
    s.load();
    ASSERT_FALSE(HasFatalFailure());
    s.job(2, 0);
    for (uint16_t r = 0; r < 2; r++)
        s.child(worker_ep(r), r, 0, port_[1 + r], switch_ep(kNative), worker_ep(r).port);
    ASSERT_FALSE(HasFatalFailure());
    s.run(host_frame(0, 2, ramp(16, 1)), port_[1]);
    auto res = s.run(host_frame(1, 2, ramp(16, 2)), port_[2]);
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    EXPECT_EQ(s.stat(INCXDP_STAT_COMPLETED), 1u);
    EXPECT_EQ(s.slot(3).set[0].flags, 0) << "a star's slots look as they always did";
    EXPECT_EQ(s.run(host_frame(0, 2, ramp(16, 1)), port_[1]).verdict, XDP_TX) << "its result is held";
    EXPECT_EQ(s.run(res.out, port_[1]).verdict, XDP_DROP) << "a result sent back to the switch";
    EXPECT_EQ(s.stat(INCXDP_STAT_NOT_PARENT), 1u);
}

} // namespace
} // namespace incxdp::test
