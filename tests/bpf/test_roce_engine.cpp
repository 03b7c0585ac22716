// SPDX-License-Identifier: BSD-2-Clause
// The RoCEv2 path of the engine (docs/ROCE.md §3) on crafted frames:
// verdicts, output frames byte by byte (with a zlib ICRC), connection and
// slot state, counters.
#include "roce_fixture.h"
#include "../common/kernel_btf.h"

#include <algorithm>
#include <climits>

namespace incxdp::test::roce {
namespace {

constexpr uint16_t kSport0 = 0xd000; // the switch's source port toward host 0 (child_conn)

size_t data_len(size_t nelems) {
    return ROCE_MIN_IMM_FRAME + 4 * nelems;
}

// Host 0's first SEND with and without ImmDt for every payload of 16
// elements up to the largest: every shape the ICRC walk (0-3 words of 8 B,
// 0-13 blocks of 256 B) and the piecewise UDP sum (512 B chunks, 256 ... 4 B
// pieces) can meet. `what` names it for failure messages.
struct ShapedFrame {
    std::string what;
    Bytes frame;
};
std::vector<ShapedFrame> frames_of_every_shape() {
    std::vector<ShapedFrame> out;
    for (uint8_t opcode : {uint8_t(ROCE_OP_SEND_ONLY_IMM), uint8_t(ROCE_OP_SEND_ONLY)}) {
        for (size_t n = 16; n <= ROCE_MAX_ELEMS; n += 16) {
            RoceFields g;
            g.opcode = opcode;
            g.dqpn = child_qpn(0);
            g.psn = child_rx_base(0);
            g.word = allreduce(ROCE_OPR_SUM);
            g.vals = ramp(n, int32_t(n), 7);
            out.push_back({std::to_string(n) + " elements, opcode " + std::to_string(opcode),
                           roce_frame(host_ep(0), switch_ep(), g)});
        }
    }
    return out;
}

// A second real interface, for frames on "another port" (the kernel resolves
// ingress_ifindex), or 0 when there is none.
uint32_t other_ifindex() {
    uint32_t found = 0;
    if (auto *ifs = if_nameindex()) {
        for (auto *i = ifs; i->if_index; i++)
            if (i->if_index != kLo && !found)
                found = i->if_index;
        if_freenameindex(ifs);
    }
    return found;
}

TEST_F(RoceEngineTest, InOrderWithAckReqGetsAnExactAck) {
    install(2, true);
    auto r = run(from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1), /*ackreq*/ true));
    ASSERT_EQ(r.verdict, XDP_TX);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_ACK);
    expect_sent(r.out, switch_ep(), host_ep(0), kSport0, ROCE_ACK_FRAME);
    auto o = parse_out(r.out);
    EXPECT_EQ(o.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.dqpn, host_qpn(0));
    EXPECT_EQ(o.psn, child_rx_base(0)) << "ACK names the PSN taken";
    EXPECT_FALSE(o.ackreq);
    EXPECT_EQ(o.word, ROCE_AETH_ACK | 1) << "AETH: ACK, MSN 1";
    EXPECT_EQ(r.out.size(), 62u);

    auto c = conn(child_qpn(0));
    EXPECT_EQ(c.epsn, child_rx_base(0) + 1);
    EXPECT_EQ(c.msn, 1u);
    EXPECT_EQ(c.imm, allreduce(ROCE_OPR_SUM));
    auto r2 = run(from_host(0, 1, allreduce(ROCE_OPR_SUM), ramp(16, 1), true));
    ASSERT_EQ(r2.verdict, XDP_TX);
    EXPECT_EQ(parse_out(r2.out).word, ROCE_AETH_ACK | 2);
    EXPECT_EQ(parse_out(r2.out).psn, child_rx_base(0) + 1);
}

TEST_F(RoceEngineTest, InOrderWithoutAckReqIsAbsorbed) {
    install(2, true);
    auto r = run(from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(32, 5)));
    EXPECT_EQ(r.verdict, XDP_DROP);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_ABSORBED);
    auto s = slot(0);
    EXPECT_EQ(s.set[0].bitmap, 1u);
    EXPECT_EQ(s.set[0].remaining, 1u);
    EXPECT_EQ(s.set[0].chunk, 0u) << "the set is tagged with idx";
    EXPECT_EQ(s.set[0].round, allreduce(ROCE_OPR_SUM)) << "... and ImmDt";
    EXPECT_EQ(s.set[0].nelems, 32);
    EXPECT_EQ(s.vals[0][31], 5 + 31);
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0) + 1);
}

TEST_F(RoceEngineTest, AheadGetsOneNakThenAheadDropsThenGoBackNIsTaken) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    ASSERT_EQ(run(from_host(0, 0, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_ABSORBED);
    // idx 1 is lost; 2 and 3 arrive.
    auto nak = run(from_host(0, 2, op, ramp(16, 1)));
    ASSERT_EQ(nak.verdict, XDP_TX);
    EXPECT_EQ(nak.stat, INCXDP_STAT_ROCE_NAK);
    expect_sent(nak.out, switch_ep(), host_ep(0), kSport0, ROCE_ACK_FRAME);
    auto o = parse_out(nak.out);
    EXPECT_EQ(o.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.psn, child_rx_base(0) + 1) << "NAK names the expected PSN";
    EXPECT_EQ(o.word, ROCE_AETH_NAK_SEQ | 1);
    auto again = run(from_host(0, 3, op, ramp(16, 1)));
    EXPECT_EQ(again.verdict, XDP_DROP);
    EXPECT_EQ(again.stat, INCXDP_STAT_ROCE_AHEAD_DROP) << "one NAK per gap";
    EXPECT_EQ(slot(2).set[0].bitmap, 0u) << "ahead frames are not aggregated";
    // Go back N from 1.
    for (uint32_t idx = 1; idx <= 3; idx++)
        EXPECT_EQ(run(from_host(0, idx, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_ABSORBED) << idx;
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0) + 4);
    EXPECT_EQ(conn(child_qpn(0)).nak_sent, 0u);
    // A new gap gets a new NAK.
    auto nak2 = run(from_host(0, 5, op, ramp(16, 1)));
    EXPECT_EQ(nak2.stat, INCXDP_STAT_ROCE_NAK);
    EXPECT_EQ(parse_out(nak2.out).psn, child_rx_base(0) + 4);
    EXPECT_EQ(parse_out(nak2.out).word, ROCE_AETH_NAK_SEQ | 4);
}

TEST_F(RoceEngineTest, DuplicateOfAnIncompleteSlotGetsADupAck) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    run(from_host(0, 0, op, ramp(16, 1)));
    run(from_host(0, 1, op, ramp(16, 1)));
    auto r = run(from_host(0, 0, op, ramp(16, 1000)));
    ASSERT_EQ(r.verdict, XDP_TX);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_DUP_ACK);
    expect_sent(r.out, switch_ep(), host_ep(0), kSport0, ROCE_ACK_FRAME);
    auto o = parse_out(r.out);
    EXPECT_EQ(o.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.psn, child_rx_base(0) + 1) << "epsn - 1";
    EXPECT_EQ(o.word, ROCE_AETH_ACK | 2);
    EXPECT_EQ(slot(0).vals[0][0], 1) << "a duplicate is not added";
    EXPECT_EQ(slot(0).set[0].remaining, 1u);
}

struct OpCase {
    uint8_t roce_op;
    int32_t (*f)(int32_t, int32_t);
};

// A nonzero UDP checksum is checked instead of the ICRC (bpf/lib/udp_csum.h):
// right, the frame is taken whatever its ICRC says (what the switch emits is
// still right, as the other tests check); wrong, it is dropped as
// roce_bad_csum and changes nothing; 0, the ICRC is checked.
TEST_F(RoceEngineTest, UdpChecksumStandsInForTheIcrc) {
    install(2, true);
    auto f = from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1));
    set_udp_csum(f);
    auto bad = f;
    bad[kPayloadImm + 5] ^= 0x40; // payload changed, checksum and ICRC not
    EXPECT_EQ(run(bad).stat, INCXDP_STAT_ROCE_BAD_CSUM);
    auto bad_addr = f;
    bad_addr[kEth + 12] ^= 1; // pseudo header: the source address
    fix_ip_checksum(bad_addr);
    EXPECT_EQ(run(bad_addr).stat, INCXDP_STAT_ROCE_BAD_CSUM);
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0));

    auto wrong_icrc = f;
    wrong_icrc.back() ^= 1;
    set_udp_csum(wrong_icrc); // a sender whose checksum covers its ICRC as sent
    EXPECT_EQ(run(wrong_icrc).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(slot(0).set[0].bitmap, 1u);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_CSUM), 2u);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_ICRC), 0u);

    auto none = from_host(1, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1));
    none.back() ^= 1;
    EXPECT_EQ(run(none).stat, INCXDP_STAT_ROCE_BAD_ICRC) << "checksum 0: the ICRC is checked";
}

// Every length the piecewise sum can meet (512 B chunks, then 256 ... 4 B
// pieces): each frame right is taken, each with a bit flipped in its last
// payload byte or in its checksum is a bad checksum.
TEST_F(RoceEngineTest, UdpChecksumIsCheckedForEveryLength) {
    install(2, true);
    uint64_t flipped = 0;
    for (auto &[what, f] : frames_of_every_shape()) {
        set_udp_csum(f);
        auto bad = f;
        bad[bad.size() - ROCE_ICRC_LEN - 1] ^= 0x10;
        EXPECT_EQ(run(bad).stat, INCXDP_STAT_ROCE_BAD_CSUM) << what;
        auto bad_sum = f;
        bad_sum[kEth + kIp + 7] ^= 0x01;
        EXPECT_EQ(run(bad_sum).stat, INCXDP_STAT_ROCE_BAD_CSUM) << what;
        auto r = run(f);
        EXPECT_NE(r.stat, INCXDP_STAT_ROCE_BAD_CSUM) << what;
        EXPECT_NE(r.stat, INCXDP_STAT_ROCE_MALFORMED) << what;
        flipped += 2;
    }
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_CSUM), flipped);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_ICRC), 0u);
}

// RFC 768: a checksum that computes to 0 goes as 0xffff (0 is "none"). The
// up frame of idx 1 is predicted from idx 0's (only its PSN differs), and
// the last result word is searched for one whose frame sums to exactly
// that: ~1 in 65536 does, ICRC included.
TEST_F(RoceEngineTest, AChecksumThatComputesToZeroGoesAsAllOnes) {
    install(2, false);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    const std::vector<int32_t> a = ramp(16, 1000, 7), b = ramp(16, -5, 3);
    ASSERT_EQ(run(from_host(0, 0, op, a)).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto first = run(from_host(1, 0, op, b));
    ASSERT_EQ(first.stat, INCXDP_STAT_ROCE_UP);
    expect_sent(first.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(16));

    Bytes want = first.out;
    const size_t psn_at = kBth + 8, last_at = want.size() - ROCE_ICRC_LEN - 4;
    const size_t csum_at = kEth + kIp + 6;
    set32(want, psn_at, (kParentTxBase + 1) & ROCE_PSN_MASK); // no AckReq toward a parent
    std::optional<uint32_t> hit;
    for (uint32_t y = 0; y < (1u << 22) && !hit; y++) {
        set32(want, last_at, y);
        set_icrc(want);
        want[csum_at] = want[csum_at + 1] = 0;
        if (udp_sum(want) == 0xffff) // ~sum == 0
            hit = y;
    }
    ASSERT_TRUE(hit) << "no result word in 2^22 makes the checksum 0";
    want[csum_at] = want[csum_at + 1] = 0xff;

    auto b1 = b;
    b1.back() = int32_t(*hit - uint32_t(a.back()));
    ASSERT_EQ(run(from_host(0, 1, op, a)).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto r = run(from_host(1, 1, op, b1));
    ASSERT_EQ(r.stat, INCXDP_STAT_ROCE_UP);
    EXPECT_EQ(get16(r.out, csum_at), 0xffff) << "a computed 0 is sent as all ones";
    EXPECT_EQ(r.out, want);
    expect_sent(r.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(16));
}

TEST_F(RoceEngineTest, TwoChildLeafSendsItsAggregateToTheParent) {
    install(2, false);
    const OpCase cases[] = {
        {ROCE_OPR_SUM, [](int32_t a, int32_t b) { return int32_t(uint32_t(a) + uint32_t(b)); }},
        {ROCE_OPR_MAX, [](int32_t a, int32_t b) { return std::max(a, b); }},
        {ROCE_OPR_MIN, [](int32_t a, int32_t b) { return std::min(a, b); }},
    };
    std::vector<int32_t> a = ramp(64, INT32_MAX - 20), b = ramp(64, -30, 3);
    a[0] = INT32_MIN, b[0] = INT32_MAX, a[1] = -1, b[1] = 0, a[2] = INT32_MIN, b[2] = INT32_MIN + 1;
    uint32_t idx = 0;
    for (const auto &c : cases) {
        const uint32_t op = allreduce(c.roce_op);
        ASSERT_EQ(run(from_host(0, idx, op, a)).stat, INCXDP_STAT_ROCE_ABSORBED);
        auto r = run(from_host(1, idx, op, b));
        ASSERT_EQ(r.verdict, XDP_REDIRECT) << "op " << int(c.roce_op);
        EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_UP);
        expect_sent(r.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(64));
        auto o = parse_out(r.out);
        EXPECT_EQ(o.opcode, ROCE_OP_SEND_ONLY_IMM);
        EXPECT_EQ(o.dqpn, kParentQpn);
        EXPECT_EQ(o.psn, kParentTxBase + idx) << "our up stream: tx_base + idx";
        EXPECT_FALSE(o.ackreq);
        EXPECT_EQ(o.word, op) << "ImmDt goes up";
        ASSERT_EQ(o.vals.size(), 64u);
        for (size_t i = 0; i < 64; i++)
            EXPECT_EQ(o.vals[i], c.f(a[i], b[i])) << "op " << int(c.roce_op) << " elem " << i;
        idx++;
    }
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_UP), 3u);
    EXPECT_EQ(stat(INCXDP_STAT_REDIRECT_FAIL), 0u);
    EXPECT_EQ(slot(0).set[0].flags & INCXDP_SET_RESULT, 0) << "an aggregate is not the result";
}

// Path MTU 2048 and 4096 payloads, and one that is not a whole number of the
// ICRC walk's 256 B blocks (its 8 B words): checked in and computed out.
TEST_F(RoceEngineTest, FullSizePayloadGoesUpWithItsIcrc) {
    install(2, false);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    uint32_t idx = 0;
    for (size_t n : {size_t(512), size_t(ROCE_MAX_ELEMS), size_t(272)}) {
        auto a = ramp(n, 3), b = ramp(n, -1, 7);
        ASSERT_EQ(run(from_host(0, idx, op, a)).stat, INCXDP_STAT_ROCE_ABSORBED) << n;
        auto r = run(from_host(1, idx, op, b));
        ASSERT_EQ(r.verdict, XDP_REDIRECT) << n;
        expect_sent(r.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(n));
        auto o = parse_out(r.out);
        ASSERT_EQ(o.vals.size(), n);
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(o.vals[i], a[i] + b[i]) << n << " elements, " << i;
        idx++;
    }
}

TEST_F(RoceEngineTest, RootCompletionRedirectsTheMulticastTemplate) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    run(from_host(0, 0, op, ramp(16, 10)));
    auto r = run(from_host(1, 0, op, ramp(16, 20)));
    ASSERT_EQ(r.verdict, XDP_REDIRECT);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_DOWN);
    ASSERT_EQ(r.out.size(), data_len(16));
    auto o = parse_out(r.out);
    EXPECT_EQ(o.opcode, ROCE_OP_SEND_ONLY_IMM);
    EXPECT_EQ(o.dqpn, 0u) << "template: no connection has QPN 0";
    EXPECT_EQ(o.psn, 0u) << "template: idx in the PSN field";
    EXPECT_EQ(o.word, op);
    EXPECT_EQ(get16(r.out, kEth + 4), kJob) << "template: the job in the IPv4 ID";
    EXPECT_EQ(o.vals, ramp(16, 30, 2));
    EXPECT_EQ(icrc_in(r.out), tail_crc(r.out))
        << "template: its tail's CRC where the ICRC goes, for the egress program to combine";
    auto s = slot(0);
    EXPECT_TRUE(s.set[0].flags & INCXDP_SET_RESULT) << "at the root the aggregate is the result";
    EXPECT_EQ(s.set[0].remaining, 0u);
    EXPECT_EQ(s.set[0].rounds, 1u);
}

TEST_F(RoceEngineTest, ParentResultIsStoredAndMulticast) {
    install(2, false);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    run(from_host(0, 0, op, ramp(16, 1)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_UP);
    auto result = ramp(16, 500, 5);
    auto r = run(from_parent(0, op, result));
    ASSERT_EQ(r.verdict, XDP_REDIRECT);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_DOWN);
    auto o = parse_out(r.out);
    EXPECT_EQ(o.dqpn, 0u);
    EXPECT_EQ(o.psn, 0u);
    EXPECT_EQ(get16(r.out, kEth + 4), kJob);
    EXPECT_EQ(o.vals, result);
    EXPECT_EQ(icrc_in(r.out), tail_crc(r.out)) << "template: its tail's CRC";
    auto s = slot(0);
    EXPECT_TRUE(s.set[0].flags & INCXDP_SET_RESULT);
    EXPECT_EQ(std::vector<int32_t>(s.vals[0], s.vals[0] + 16), result)
        << "the result replaces the aggregate";
    EXPECT_EQ(conn(kParentConnQpn).epsn, kParentRxBase + 1);
    // The parent answers a re-sent aggregate with the result again: multicast again.
    EXPECT_EQ(run(from_parent(0, op, result)).stat, INCXDP_STAT_ROCE_DOWN);
    // A result for an idx this switch has not completed.
    auto stale = run(from_parent(2, op, result));
    EXPECT_EQ(stale.verdict, XDP_DROP);
    EXPECT_EQ(stale.stat, INCXDP_STAT_ROCE_STALE);
}

TEST_F(RoceEngineTest, DuplicatesAfterCompletion) {
    install(2, false);
    const uint32_t op = allreduce(ROCE_OPR_MAX);
    run(from_host(0, 0, op, ramp(16, 1)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(16, 2))).stat, INCXDP_STAT_ROCE_UP);
    // No result yet: the aggregate goes up again (the up frame may be lost).
    auto up = run(from_host(0, 0, op, ramp(16, 77)));
    ASSERT_EQ(up.verdict, XDP_REDIRECT);
    EXPECT_EQ(up.stat, INCXDP_STAT_ROCE_DUP_UP);
    expect_sent(up.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(16));
    EXPECT_EQ(parse_out(up.out).psn, kParentTxBase + 0);
    EXPECT_EQ(parse_out(up.out).vals, ramp(16, 2));
    // The result came down: a duplicate gets it, addressed to that child.
    auto result = ramp(16, -8);
    ASSERT_EQ(run(from_parent(0, op, result)).stat, INCXDP_STAT_ROCE_DOWN);
    for (uint16_t h = 0; h < 2; h++) {
        auto r = run(from_host(h, 0, op, ramp(16, 9)));
        ASSERT_EQ(r.verdict, XDP_TX);
        EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_DUP_RESULT);
        expect_sent(r.out, switch_ep(), host_ep(h), uint16_t(kSport0 + h), data_len(16));
        auto o = parse_out(r.out);
        EXPECT_EQ(o.opcode, ROCE_OP_SEND_ONLY_IMM);
        EXPECT_EQ(o.dqpn, host_qpn(h));
        EXPECT_EQ(o.psn, child_tx_base(h) + 0) << "the child's down stream: tx_base + idx";
        EXPECT_TRUE(o.ackreq) << "an RC device ACKs only what asks for it";
        EXPECT_EQ(o.word, op);
        EXPECT_EQ(o.vals, result);
    }
}

TEST_F(RoceEngineTest, ReduceResultIsCutForAChildWithoutTheRootRank) {
    install(2, true);
    const uint32_t op = imm(1, ROCE_PRIM_REDUCE, ROCE_OPR_SUM); // root rank 1
    run(from_host(0, 0, op, ramp(32, 1)));
    auto done = run(from_host(1, 0, op, ramp(32, 100)));
    ASSERT_EQ(done.verdict, XDP_REDIRECT);
    EXPECT_EQ(parse_out(done.out).vals.size(), 32u) << "the template holds the values; egress cuts";
    auto r0 = run(from_host(0, 0, op, ramp(32, 1)));
    ASSERT_EQ(r0.verdict, XDP_TX);
    EXPECT_EQ(r0.stat, INCXDP_STAT_ROCE_DUP_RESULT);
    expect_sent(r0.out, switch_ep(), host_ep(0), kSport0, ROCE_MIN_IMM_FRAME);
    EXPECT_EQ(parse_out(r0.out).word, op);
    EXPECT_TRUE(parse_out(r0.out).vals.empty()) << "rank 0 gets the 0-payload completion";
    auto r1 = run(from_host(1, 0, op, ramp(32, 100)));
    ASSERT_EQ(r1.verdict, XDP_TX);
    expect_sent(r1.out, switch_ep(), host_ep(1), kSport0 + 1, data_len(32));
    EXPECT_EQ(parse_out(r1.out).vals, ramp(32, 101, 2)) << "the root rank gets the values";
}

TEST_F(RoceEngineTest, BroadcastTakesTheRootsPayload) {
    install(3, true);
    const uint32_t op = imm(2, ROCE_PRIM_BROADCAST, ROCE_OPR_SUM); // root rank 2
    auto p = ramp(48, -1000, 13);
    // idx 0: the root is in the middle; idx 1: first.
    EXPECT_EQ(run(from_host(0, 0, op, {})).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(run(from_host(2, 0, op, p)).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto r = run(from_host(1, 0, op, {}));
    ASSERT_EQ(r.verdict, XDP_REDIRECT);
    ASSERT_EQ(r.out.size(), data_len(48)) << "a 0-payload frame grows into the result";
    EXPECT_EQ(parse_out(r.out).vals, p);
    EXPECT_EQ(run(from_host(2, 1, op, p)).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(run(from_host(0, 1, op, {})).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto r1 = run(from_host(1, 1, op, {}));
    ASSERT_EQ(r1.verdict, XDP_REDIRECT);
    EXPECT_EQ(parse_out(r1.out).vals, p);
    // Payloads from outside the root rank's subtree are padding (hosts
    // whose frames cannot grow pad theirs): ignored, whichever comes first,
    // and the padded frame that completes the set carries the data.
    EXPECT_EQ(run(from_host(0, 2, op, ramp(48, 7))).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(run(from_host(2, 2, op, p)).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto r2 = run(from_host(1, 2, op, ramp(48, 9)));
    ASSERT_EQ(r2.verdict, XDP_REDIRECT);
    EXPECT_EQ(r2.out.size(), data_len(48));
    EXPECT_EQ(parse_out(r2.out).vals, p);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_MISMATCH), 0u);
}

TEST_F(RoceEngineTest, BarrierCompletesWithoutPayload) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_BARRIER);
    EXPECT_EQ(run(from_host(0, 0, op, {})).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto r = run(from_host(1, 0, op, {}));
    ASSERT_EQ(r.verdict, XDP_REDIRECT);
    EXPECT_EQ(r.out.size(), size_t(ROCE_MIN_IMM_FRAME));
    EXPECT_EQ(parse_out(r.out).word, op);
    EXPECT_EQ(parse_out(r.out).psn, 0u);
    // A Barrier with a payload is no collective we know.
    auto bad = run(from_host(0, 1, op, ramp(16, 1)));
    EXPECT_EQ(bad.stat, INCXDP_STAT_ROCE_MALFORMED);
}

TEST_F(RoceEngineTest, PsnWrapAt24BitsKeepsConsecutiveIdx) {
    install(2, true);
    const uint32_t base[2] = {0xFFFFF0, 0xFFFFF8};
    for (uint16_t h = 0; h < 2; h++) {
        auto c = child_conn(h);
        c.rx_base = c.epsn = base[h];
        c.tx_base = 0xFFFFFC - h;
        put_conn(child_qpn(h), c);
    }
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    auto frame = [&](uint16_t h, uint32_t idx, int32_t v) {
        RoceFields f;
        f.dqpn = child_qpn(h);
        f.psn = (base[h] + idx) & ROCE_PSN_MASK;
        f.word = op;
        f.vals = std::vector<int32_t>(16, v);
        return roce_frame(host_ep(h), switch_ep(), f);
    };
    for (uint32_t idx = 0; idx < 40; idx++) {
        ASSERT_EQ(run(frame(0, idx, int32_t(idx))).stat, INCXDP_STAT_ROCE_ABSORBED) << idx;
        auto r = run(frame(1, idx, 1000));
        ASSERT_EQ(r.verdict, XDP_REDIRECT) << idx;
        EXPECT_EQ(parse_out(r.out).psn, idx) << "idx, not the wrapped PSN";
        EXPECT_EQ(parse_out(r.out).vals[0], int32_t(idx) + 1000) << idx;
        EXPECT_EQ(slot(idx % kPoolSize).set[(idx / kPoolSize) & 1].chunk, idx);
    }
    EXPECT_EQ(conn(child_qpn(0)).epsn, (base[0] + 40) & ROCE_PSN_MASK);
    // A duplicate of the last idx: its result on the down stream, wrapped too.
    auto dup = run(frame(0, 39, 0));
    ASSERT_EQ(dup.stat, INCXDP_STAT_ROCE_DUP_RESULT);
    EXPECT_EQ(parse_out(dup.out).psn, (0xFFFFFCu + 39) & ROCE_PSN_MASK);
    EXPECT_EQ(parse_out(dup.out).vals[0], 39 + 1000);
}

TEST_F(RoceEngineTest, StalePsnOfAReusedSetIsDropped) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx <= 2 * kPoolSize; idx++) {
        run(from_host(0, idx, op, ramp(16, 1)));
        ASSERT_EQ(run(from_host(1, idx, op, ramp(16, 1))).verdict, XDP_REDIRECT);
    }
    // idx 0's set (slot 0, set 0) now holds idx 8.
    auto r = run(from_host(0, 0, op, ramp(16, 1)));
    EXPECT_EQ(r.verdict, XDP_DROP);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_STALE);
    // idx 4 (slot 0, set 1) still holds its result.
    EXPECT_EQ(run(from_host(0, kPoolSize, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_DUP_RESULT);
    EXPECT_EQ(slot(0).set[0].chunk, 2 * kPoolSize);
    EXPECT_EQ(slot(0).set[0].rounds, 2u);
}

TEST_F(RoceEngineTest, FramesWithoutImmDtUseTheConnectionsLast) {
    install(2, true);
    // Before any ImmDt the connection's is 0: an AllReduce Barrier, which
    // cannot carry values.
    auto early = run(from_host(0, 0, 0, ramp(16, 1), false, ROCE_OP_SEND_ONLY));
    EXPECT_EQ(early.stat, INCXDP_STAT_ROCE_MALFORMED);
    const uint32_t op = allreduce(ROCE_OPR_MIN);
    run(from_host(0, 0, op, ramp(16, 10)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(16, 20))).verdict, XDP_REDIRECT);
    // SEND_ONLY and SEND_LAST carry no ImmDt: MIN still applies.
    EXPECT_EQ(run(from_host(0, 1, 0, ramp(16, 50), false, ROCE_OP_SEND_ONLY)).stat,
              INCXDP_STAT_ROCE_ABSORBED);
    auto r = run(from_host(1, 1, 0, ramp(16, 40, 2), false, ROCE_OP_SEND_LAST));
    ASSERT_EQ(r.verdict, XDP_REDIRECT);
    EXPECT_EQ(r.out.size(), data_len(16)) << "the result is a SEND_ONLY_IMM: 4 B longer";
    auto o = parse_out(r.out);
    EXPECT_EQ(o.opcode, ROCE_OP_SEND_ONLY_IMM);
    EXPECT_EQ(o.word, op) << "ImmDt from the connection";
    for (size_t i = 0; i < 16; i++)
        EXPECT_EQ(o.vals[i], std::min(50 + int32_t(i), 40 + 2 * int32_t(i)));
}

TEST_F(RoceEngineTest, BadIcrcIsDroppedAndCounted) {
    install(2, true);
    auto f = from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1));
    auto bad = f;
    bad[kPayloadImm + 5] ^= 0x40; // payload changed, ICRC not
    auto r = run(bad);
    EXPECT_EQ(r.verdict, XDP_DROP);
    EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_BAD_ICRC);
    auto bad2 = f;
    bad2.back() ^= 1;
    EXPECT_EQ(run(bad2).stat, INCXDP_STAT_ROCE_BAD_ICRC);
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0));
    // TTL and the IP checksum are outside the ICRC (masked): a router may change them.
    auto routed = f;
    routed[kEth + 8] = 17;
    fix_ip_checksum(routed);
    EXPECT_EQ(run(routed).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_ICRC), 2u);
}

// Every shape of the ICRC walk that a frame which parses can have: with or
// without the ImmDt word in front, then 0-3 words of 8 B and 0-13 blocks of
// 256 B (payloads of 64 B steps up to the largest). Each frame with one bit
// flipped in its last payload byte is a bad ICRC; the right one is not.
TEST_F(RoceEngineTest, IcrcIsCheckedForEveryShapeOfTheWalk) {
    install(2, true);
    uint64_t flipped = 0;
    for (const auto &[what, f] : frames_of_every_shape()) {
        auto bad = f;
        bad[bad.size() - ROCE_ICRC_LEN - 1] ^= 0x10;
        EXPECT_EQ(run(bad).stat, INCXDP_STAT_ROCE_BAD_ICRC) << what;
        EXPECT_NE(run(f).stat, INCXDP_STAT_ROCE_BAD_ICRC) << what;
        flipped++;
    }
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_ICRC), flipped);
}

TEST_F(RoceEngineTest, UnknownQpWrongMacWrongIpAndWrongPortAreRefused) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    RoceFields f;
    f.dqpn = 0x777;
    f.psn = child_rx_base(0);
    f.word = op;
    f.vals = ramp(16, 1);
    EXPECT_EQ(run(roce_frame(host_ep(0), switch_ep(), f)).stat, INCXDP_STAT_ROCE_UNKNOWN_QP);
    f.dqpn = 0; // the template's QPN is nobody's
    EXPECT_EQ(run(roce_frame(host_ep(0), switch_ep(), f)).stat, INCXDP_STAT_ROCE_UNKNOWN_QP);
    f.dqpn = child_qpn(0);
    auto mac = host_ep(0);
    mac.mac[5] = 0x55;
    EXPECT_EQ(run(roce_frame(mac, switch_ep(), f)).stat, INCXDP_STAT_ROCE_UNKNOWN_QP);
    auto ip = host_ep(0);
    ip.ip += 9;
    EXPECT_EQ(run(roce_frame(ip, switch_ep(), f)).stat, INCXDP_STAT_ROCE_UNKNOWN_QP);
    // Host 1 using host 0's QPN.
    f.psn = child_rx_base(1);
    EXPECT_EQ(run(roce_frame(host_ep(1), switch_ep(), f)).stat, INCXDP_STAT_ROCE_UNKNOWN_QP);
    // The right addresses on another port.
    uint32_t other = other_ifindex();
    auto right = from_host(0, 0, op, ramp(16, 1));
    if (other) {
        auto c = child_conn(0);
        c.ifindex = other;
        put_conn(child_qpn(0), c);
        EXPECT_EQ(run(right, kLo).stat, INCXDP_STAT_ROCE_UNKNOWN_QP)
            << "host 0 lives behind port " << other;
        EXPECT_EQ(slot(0).set[0].bitmap, 0u);
        EXPECT_EQ(run(right, other).stat, INCXDP_STAT_ROCE_ABSORBED) << "on its port";
    } else {
        auto c = child_conn(0);
        c.ifindex = 4242;
        put_conn(child_qpn(0), c);
        EXPECT_EQ(run(right, kLo).stat, INCXDP_STAT_ROCE_UNKNOWN_QP)
            << "no second interface: port 4242";
    }
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_UNKNOWN_QP), 6u);
}

TEST_F(RoceEngineTest, MalformedFramesAreDroppedAndCounted) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    auto good = from_host(0, 0, op, ramp(16, 1));
    std::vector<Bytes> bad;
    RoceFields f;
    f.dqpn = child_qpn(0);
    f.psn = child_rx_base(0);
    f.word = op;
    f.vals = ramp(16, 1);
    auto with = [&](auto change) {
        RoceFields g = f;
        change(g);
        return roce_frame(host_ep(0), switch_ep(), g);
    };
    bad.push_back(with([](RoceFields &g) { g.opcode = 0x0a; }));        // RDMA WRITE ONLY
    bad.push_back(with([](RoceFields &g) { g.flags = 0x30; }));         // PadCnt 3
    bad.push_back(with([](RoceFields &g) { g.flags = 0x01; }));         // TVer 1
    bad.push_back(with([](RoceFields &g) { g.vals.resize(20); }));      // not whole 64 B blocks
    bad.push_back(with([](RoceFields &g) { g.vals = ramp(ROCE_MAX_ELEMS + 16, 1); })); // too long
    bad.push_back(with([](RoceFields &g) { g.opcode = ROCE_OP_ACK; })); // an ACK with a payload
    auto trailing = good;                                               // bytes past the datagram
    trailing.push_back(0);
    bad.push_back(trailing);
    auto short_ip = good; // IPv4 length short of the frame
    short_ip[kEth + 3] -= 4;
    bad.push_back(short_ip);
    auto udp_len = good;
    udp_len[kEth + 25] += 4;
    bad.push_back(udp_len);
    auto runt = good;
    runt.resize(kBth + 8); // no whole BTH
    runt[kEth + 2] = 0;
    runt[kEth + 3] = uint8_t(runt.size() - kEth);
    bad.push_back(runt);
    for (size_t i = 0; i < bad.size(); i++) {
        auto r = run(bad[i]);
        EXPECT_EQ(r.verdict, XDP_DROP) << i;
        EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_MALFORMED) << "frame " << i;
    }
    // ImmDt checked after the connection: primitive 3, dtype 2, reserved bits.
    for (uint32_t w : {op | 3u << 14, imm(0xffff, 0, ROCE_OPR_SUM, 2), op | 0x5u}) {
        RoceFields g = f;
        g.word = w;
        EXPECT_EQ(run(roce_frame(host_ep(0), switch_ep(), g)).stat, INCXDP_STAT_ROCE_MALFORMED)
            << std::hex << w;
    }
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0));
    EXPECT_EQ(run(good).stat, INCXDP_STAT_ROCE_ABSORBED);
}

// On a jumbo link the engine (xdp.frags) also sees frames larger than one
// XDP buffer, whose data goes on in fragments it does not read: an RC
// device's path MTU 4096 SEND there. bpf_prog_test_run builds such a frame
// from anything above a page less headroom and tailroom (3520 B). It is
// counted too_long and dropped before any state is touched; other traffic
// of that size passes, all of it.
TEST_F(RoceEngineTest, FramesInMoreThanOneBufferAreCountedTooLong) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    auto big = from_host(0, 0, op, ramp(4096 / 4, 1));
    ASSERT_GT(big.size(), 4096u - 256 - 320) << "test bug: the frame fits one buffer";
    auto r = run(big);
    EXPECT_EQ(r.verdict, XDP_DROP);
    EXPECT_EQ(r.stat, INCXDP_STAT_TOO_LONG);
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0));

    Endpoint other = switch_ep();
    other.port = 9999;
    auto jumbo = udp_frame(host_ep(0), other, Bytes(8000, 0x5a));
    r = run(jumbo);
    EXPECT_EQ(r.verdict, XDP_PASS);
    EXPECT_EQ(r.stat, INCXDP_STAT_PASS);
    EXPECT_EQ(r.out, jumbo);

    // The largest payload that fits one buffer is taken as before.
    EXPECT_EQ(run(from_host(0, 0, op, ramp(ROCE_MAX_ELEMS, 1))).stat, INCXDP_STAT_ROCE_ABSORBED);
}

// A NIC whose receive buffers are smaller than a frame (virtio_net's
// mergeable buffers, i40e/ice's 3 KB ones) hands the engine (xdp.frags in
// driver mode) a path MTU 2048 SEND in pieces, even its headers. Where the
// kernel has bpf_xdp_pull_data the engine makes it linear first and takes
// it as it takes a linear one: the same aggregate, with its ICRC, counted
// `pulled`. Without the kfunc the frame stays too_long, as before.
TEST_F(RoceEngineTest, FramesSplitBelowOneBufferArePulledWhole) {
    install(2, false);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    const bool can_pull = incxdp::test::kernel_has_func("bpf_xdp_pull_data");
    uint32_t idx = 0;
    // Linear parts: inside the Ethernet header, inside the BTH, inside the payload.
    for (size_t linear : {size_t(8), size_t(48), size_t(1500)}) {
        auto a = ramp(512, 7, 3), b = ramp(512, -100, 11);
        auto first = run(from_host(0, idx, op, a), kLo, linear);
        if (!can_pull) {
            EXPECT_EQ(first.stat, INCXDP_STAT_TOO_LONG) << linear;
            continue;
        }
        EXPECT_EQ(first.stat, INCXDP_STAT_ROCE_ABSORBED) << linear;
        auto r = run(from_host(1, idx, op, b), kLo, linear);
        ASSERT_EQ(r.verdict, XDP_REDIRECT) << linear;
        EXPECT_EQ(r.stat, INCXDP_STAT_ROCE_UP) << linear;
        expect_sent(r.out, switch_up_ep(), parent_ep(), switch_up_ep().port, data_len(512));
        auto o = parse_out(r.out);
        EXPECT_EQ(o.psn, kParentTxBase + idx);
        ASSERT_EQ(o.vals.size(), 512u);
        for (size_t i = 0; i < 512; i++)
            ASSERT_EQ(o.vals[i], a[i] + b[i]) << "linear " << linear << ", elem " << i;
        idx++;
    }
    if (!can_pull)
        GTEST_SKIP() << "this kernel has no bpf_xdp_pull_data (Linux 6.18): split frames stay "
                        "too_long, checked";
    EXPECT_EQ(stat(INCXDP_STAT_PULLED), 6u);
    EXPECT_EQ(stat(INCXDP_STAT_TOO_LONG), 0u);
    // Frames too large for the buffer's room stay in fragments: too_long.
    auto big = run(from_host(0, idx, op, ramp(4096 / 4, 1)));
    EXPECT_EQ(big.stat, INCXDP_STAT_TOO_LONG);
    EXPECT_EQ(stat(INCXDP_STAT_PULLED), 6u);
}

TEST_F(RoceEngineTest, PeerAckIsConsumedAndPeerNakGetsTheResult) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    run(from_host(0, 0, op, ramp(32, 1)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(32, 1))).verdict, XDP_REDIRECT);
    RoceFields a;
    a.opcode = ROCE_OP_ACK;
    a.dqpn = child_qpn(0);
    a.psn = child_tx_base(0);
    a.word = ROCE_AETH_ACK | 1;
    // Host 0's SEND was taken without an ACK (it asked for none): its first
    // ACK of our stream gets one, cumulative; the next is only consumed.
    auto ack = run(roce_frame(host_ep(0), switch_ep(), a));
    ASSERT_EQ(ack.verdict, XDP_TX);
    EXPECT_EQ(ack.stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(parse_out(ack.out).opcode, ROCE_OP_ACK);
    EXPECT_EQ(parse_out(ack.out).dqpn, host_qpn(0));
    EXPECT_EQ(parse_out(ack.out).psn, child_rx_base(0));
    ack = run(roce_frame(host_ep(0), switch_ep(), a));
    EXPECT_EQ(ack.verdict, XDP_DROP);
    EXPECT_EQ(ack.stat, INCXDP_STAT_ROCE_PEER_ACK);
    // The host expects idx 0 on the down stream: the held result, grown
    // from the 62 B NAK.
    a.word = ROCE_AETH_NAK_SEQ | 1;
    auto nak = run(roce_frame(host_ep(0), switch_ep(), a));
    ASSERT_EQ(nak.verdict, XDP_TX);
    EXPECT_EQ(nak.stat, INCXDP_STAT_ROCE_PEER_NAK);
    expect_sent(nak.out, switch_ep(), host_ep(0), kSport0, data_len(32));
    EXPECT_EQ(parse_out(nak.out).psn, child_tx_base(0));
    EXPECT_EQ(parse_out(nak.out).vals, ramp(32, 2, 2));
    // Nothing held for idx 1.
    a.psn = child_tx_base(0) + 1;
    auto none = run(roce_frame(host_ep(0), switch_ep(), a));
    EXPECT_EQ(none.verdict, XDP_DROP);
    EXPECT_EQ(none.stat, INCXDP_STAT_ROCE_PEER_NAK);
}

// An RC device resends a SEND nobody ACKed until it is ACKed, or its QP
// fails; the one that completes a set is answered with the result, not an
// ACK. Once the host ACKed that result on the down stream, its duplicate
// gets the ACK; before, the result again (the result may be what was lost).
TEST_F(RoceEngineTest, DuplicateWhoseResultTheHostAckedGetsAnAck) {
    install(2, true);
    make_rc_device(1); // host 1's QP is a device's (`rules set-qpn`); host 0's is hostlib's
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    run(from_host(0, 0, op, ramp(32, 1)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(32, 1))).verdict, XDP_REDIRECT);
    EXPECT_EQ(run(from_host(1, 0, op, ramp(32, 1))).stat, INCXDP_STAT_ROCE_DUP_RESULT);

    RoceFields a;
    a.opcode = ROCE_OP_ACK;
    a.dqpn = child_qpn(1);
    a.psn = child_tx_base(1) - 1; // an ACK of nothing of ours moves nothing
    a.word = ROCE_AETH_ACK | 1;
    EXPECT_EQ(run(roce_frame(host_ep(1), switch_ep(), a)).stat, INCXDP_STAT_ROCE_PEER_ACK);
    EXPECT_EQ(run(from_host(1, 0, op, ramp(32, 1))).stat, INCXDP_STAT_ROCE_DUP_RESULT);

    a.psn = child_tx_base(1); // host 1 has the result of idx 0: owed the ACK of SEND 0
    EXPECT_EQ(run(roce_frame(host_ep(1), switch_ep(), a)).stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(conn(child_qpn(1)).peer_acked, 1u); // idx 0 + 1
    auto d = run(from_host(1, 0, op, ramp(32, 1)));
    ASSERT_EQ(d.verdict, XDP_TX);
    EXPECT_EQ(d.stat, INCXDP_STAT_ROCE_DUP_ACK);
    auto o = parse_out(d.out);
    EXPECT_EQ(o.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.dqpn, host_qpn(1));
    EXPECT_EQ(o.psn, child_rx_base(1) + 0) << "cumulative: the last PSN taken";
    // An older ACK does not take it back.
    a.psn = child_tx_base(1) - 5;
    run(roce_frame(host_ep(1), switch_ep(), a));
    EXPECT_EQ(conn(child_qpn(1)).peer_acked, 1u); // idx 0 + 1
    // Not a device: whatever it sends, a duplicate gets the result.
    a.dqpn = child_qpn(0);
    a.psn = child_tx_base(0);
    run(roce_frame(host_ep(0), switch_ep(), a));
    EXPECT_EQ(run(from_host(0, 0, op, ramp(32, 1))).stat, INCXDP_STAT_ROCE_DUP_RESULT);
}

// A device's SENDs are ACKed only as far as it has their results (its
// timer resends the rest, and each duplicate fetches its result), and it
// gets no sequence NAK while ACKs are held back, since a NAK ACKs all
// before its PSN. hostlib's hosts get both as always.
TEST_F(RoceEngineTest, DeviceAcksStopAtItsResultsAndItGetsNoNakThen) {
    install(2, true);
    make_rc_device(0);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    // Idx 0 completes (host 1 last); host 0's SEND 1 asks for an ACK.
    run(from_host(0, 0, op, ramp(16, 1)));
    ASSERT_EQ(run(from_host(1, 0, op, ramp(16, 1))).verdict, XDP_REDIRECT);
    auto r = run(from_host(0, 1, op, ramp(16, 1), /*ackreq*/ true));
    ASSERT_EQ(r.stat, INCXDP_STAT_ROCE_ACK);
    EXPECT_EQ(parse_out(r.out).psn, (child_rx_base(0) - 1) & ROCE_PSN_MASK)
        << "no result ACKed yet: nothing of its SENDs";
    auto h1 = run(from_host(1, 1, op, ramp(16, 1), true)); // completes idx 1: no ACK
    ASSERT_EQ(h1.verdict, XDP_REDIRECT);
    // SEND 3 of host 0 arrives ahead (2 lost): dropped, not NAKed.
    EXPECT_EQ(run(from_host(0, 3, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_AHEAD_DROP);
    // Host 1 is hostlib's: a gap there gets the NAK.
    EXPECT_EQ(run(from_host(1, 3, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_NAK);
    // Once host 0 has both results, its ACKs cover both SENDs, and a gap
    // gets the NAK again.
    RoceFields a;
    a.opcode = ROCE_OP_ACK;
    a.dqpn = child_qpn(0);
    a.psn = child_tx_base(0) + 1;
    a.word = ROCE_AETH_ACK | 2;
    auto late = run(roce_frame(host_ep(0), switch_ep(), a));
    ASSERT_EQ(late.stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(parse_out(late.out).psn, child_rx_base(0) + 1);
    auto nak = run(from_host(0, 3, op, ramp(16, 1)));
    ASSERT_EQ(nak.stat, INCXDP_STAT_ROCE_NAK);
    EXPECT_EQ(parse_out(nak.out).psn, child_rx_base(0) + 2);
}

// An RC device drops every result after a gap and NAKs once. One frame out
// per frame in: the NAK gets the first missing result, and each ACK after
// it the next held one, until the live edge (nothing held) ends it.
TEST_F(RoceEngineTest, AfterAPeerNakItsAcksClockTheHeldResultsOut) {
    install(2, true);
    make_rc_device(0); // host 0's QP is a device's (`rules set-qpn`)
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx < 3; idx++) {
        run(from_host(0, idx, op, ramp(16, int32_t(idx))));
        ASSERT_EQ(run(from_host(1, idx, op, ramp(16, 100))).verdict, XDP_REDIRECT) << idx;
    }
    RoceFields a;
    a.opcode = ROCE_OP_ACK;
    a.dqpn = child_qpn(0);
    auto from_peer = [&](uint32_t syndrome, uint32_t idx) {
        a.word = syndrome | 1;
        a.psn = (child_tx_base(0) + idx) & ROCE_PSN_MASK;
        return run(roce_frame(host_ep(0), switch_ep(), a));
    };
    // Results 1 and 2 were lost: the host took 0 and NAKs at 1. Its SENDs
    // were taken without an ACK (it asked for none); it is owed one, but
    // only for the SENDs whose results it has: the rest stay unACKed, so
    // that its timer resends them and each duplicate fetches its result.
    auto late = from_peer(ROCE_AETH_ACK, 0);
    ASSERT_EQ(late.verdict, XDP_TX);
    EXPECT_EQ(late.stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(parse_out(late.out).psn, child_rx_base(0) + 0) << "idx 0 only";
    auto nak = from_peer(ROCE_AETH_NAK_SEQ, 1);
    ASSERT_EQ(nak.verdict, XDP_TX);
    EXPECT_EQ(nak.stat, INCXDP_STAT_ROCE_PEER_NAK);
    EXPECT_EQ(parse_out(nak.out).psn, child_tx_base(0) + 1);
    EXPECT_EQ(parse_out(nak.out).vals, ramp(16, 101, 2));
    auto next = from_peer(ROCE_AETH_ACK, 1);
    ASSERT_EQ(next.verdict, XDP_TX);
    EXPECT_EQ(next.stat, INCXDP_STAT_ROCE_PEER_RESEND);
    EXPECT_EQ(parse_out(next.out).psn, child_tx_base(0) + 2);
    EXPECT_EQ(parse_out(next.out).vals, ramp(16, 102, 2));
    // Idx 3 is not held: caught up, and later ACKs are only ACKs.
    auto edge = from_peer(ROCE_AETH_ACK, 2);
    EXPECT_EQ(edge.verdict, XDP_DROP);
    EXPECT_EQ(edge.stat, INCXDP_STAT_ROCE_PEER_ACK);
    EXPECT_EQ(conn(child_qpn(0)).peer_resend, 0u);
    // It has every result now: the ACK it is owed covers all its SENDs.
    auto owed = from_peer(ROCE_AETH_ACK, 2);
    EXPECT_EQ(owed.stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(parse_out(owed.out).psn, child_rx_base(0) + 2);
    EXPECT_EQ(from_peer(ROCE_AETH_ACK, 1).stat, INCXDP_STAT_ROCE_PEER_ACK);
    EXPECT_EQ(conn(child_qpn(0)).peer_acked, 3u);
    // Host 1 never NAKed: its ACKs never resend (the first gets the ACK
    // owed for its completing SENDs: all of them, not being a device's).
    a.dqpn = child_qpn(1);
    a.word = ROCE_AETH_ACK | 1;
    a.psn = child_tx_base(1);
    auto all = run(roce_frame(host_ep(1), switch_ep(), a));
    EXPECT_EQ(all.stat, INCXDP_STAT_ROCE_LATE_ACK);
    EXPECT_EQ(parse_out(all.out).psn, child_rx_base(1) + 2);
    EXPECT_EQ(run(roce_frame(host_ep(1), switch_ep(), a)).stat, INCXDP_STAT_ROCE_PEER_ACK);
}

TEST_F(RoceEngineTest, SwitchChildIsTakenInAnyOrderWithinTheWindow) {
    install(2, false);
    auto c = child_conn(0);
    c.strict = 0; // a switch below: no go-back-N, the bitmap finds duplicates
    put_conn(child_qpn(0), c);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx : {2u, 0u, 3u, 1u})
        EXPECT_EQ(run(from_host(0, idx, op, ramp(16, int32_t(idx)))).stat,
                  INCXDP_STAT_ROCE_ABSORBED)
            << idx;
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0) + 4) << "highest + 1";
    EXPECT_EQ(conn(child_qpn(0)).msn, 4u);
    auto dup = run(from_host(0, 2, op, ramp(16, 2)));
    EXPECT_EQ(dup.stat, INCXDP_STAT_ROCE_DUP_ACK) << "its bit is set";
    auto far = run(from_host(0, 4 + kPoolSize, op, ramp(16, 1)));
    EXPECT_EQ(far.stat, INCXDP_STAT_ROCE_AHEAD_DROP) << "beyond the window: no NAK to a switch";
    auto r = run(from_host(1, 0, op, ramp(16, 100)));
    ASSERT_EQ(r.stat, INCXDP_STAT_ROCE_UP);
    EXPECT_EQ(parse_out(r.out).vals, ramp(16, 100, 2));
}

TEST_F(RoceEngineTest, OtherUdpStillPassesAndJobChecks) {
    install(2, true);
    // The UDP paths are untouched: a non-aggregation port passes.
    Endpoint dns = switch_ep();
    dns.port = 53;
    EXPECT_EQ(run(udp_frame(host_ep(0), dns, Bytes(20, 1))).stat, INCXDP_STAT_PASS);
    // A connection of an inactive job, or of a STAR job.
    incxdp_job j{};
    uint32_t id = kJob;
    ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
    EXPECT_EQ(run(from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1))).stat, INCXDP_STAT_BAD_JOB);
    install(2, true);
    ASSERT_EQ(bpf_map_lookup_elem(fd(skel_->maps.incxdp_jobs), &id, &j), 0);
    j.kind = INCXDP_JOB_STAR;
    ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
    EXPECT_EQ(run(from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(16, 1))).stat, INCXDP_STAT_BAD_JOB);
}

// Per-packet cost (bpf_prog_test_run's own timer, JITed). Run with
// --gtest_also_run_disabled_tests; prints, asserts nothing.
// The hosts' frames as INC_Emulation sends them (UDP checksum 0: the ICRC is
// checked) and as hostlib does (the checksum is checked instead).
// Consecutive runs (docs/ROCE.md "Consecutive runs"): a new host process
// asks where its connection stands, and the leaf answers with the PSN it
// expects next and the PSN of its next result, both at the index the
// previous run ended at; what that run left on the connection (a NAK out)
// goes. The start check, a Barrier whose ImmDt has ROCE_IMM_START, then
// completes there, and data follows on fresh sets.
TEST_F(RoceEngineTest, StartHandshakeAnswersWhereTheConnectionStands) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx < 6; idx++) {
        run(from_host(0, idx, op, ramp(16, 1)));
        ASSERT_EQ(run(from_host(1, idx, op, ramp(16, 2))).verdict, XDP_REDIRECT) << idx;
    }
    // The old process left a NAK out (its idx 7 came before 6).
    ASSERT_EQ(run(from_host(0, 7, op, ramp(16, 1))).stat, INCXDP_STAT_ROCE_NAK);
    ASSERT_EQ(conn(child_qpn(0)).nak_sent, 1u);

    RoceFields q;
    q.opcode = ROCE_OP_ACK;
    q.dqpn = child_qpn(0);
    q.word = ROCE_AETH_SYNC_REQ;
    auto a = run(roce_frame(host_ep(0), switch_ep(), q));
    ASSERT_EQ(a.verdict, XDP_TX);
    EXPECT_EQ(a.stat, INCXDP_STAT_ROCE_SYNC);
    expect_sent(a.out, switch_ep(), host_ep(0), kSport0, ROCE_ACK_FRAME);
    auto o = parse_out(a.out);
    EXPECT_EQ(o.opcode, ROCE_OP_ACK);
    EXPECT_EQ(o.dqpn, host_qpn(0));
    EXPECT_EQ(o.psn, child_rx_base(0) + 6) << "the PSN expected next: idx 6 of the up stream";
    EXPECT_EQ(o.word, ROCE_AETH_SYNC_ANS | (child_tx_base(0) + 6))
        << "the next result's PSN: idx 6 of the down stream";
    EXPECT_EQ(conn(child_qpn(0)).nak_sent, 0u) << "the old process's NAK is forgotten";
    EXPECT_EQ(conn(child_qpn(0)).epsn, child_rx_base(0) + 6) << "the handshake moves nothing";

    // Both hosts' start check at idx 6, then data at 7 on a fresh set.
    const uint32_t start = allreduce(ROCE_OPR_BARRIER) | ROCE_IMM_START;
    EXPECT_EQ(run(from_host(0, 6, start, {})).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto done = run(from_host(1, 6, start, {}));
    ASSERT_EQ(done.verdict, XDP_REDIRECT);
    EXPECT_EQ(done.stat, INCXDP_STAT_ROCE_DOWN);
    EXPECT_EQ(parse_out(done.out).word, start) << "the result carries the check's ImmDt";
    EXPECT_EQ(parse_out(done.out).psn, 6u);
    run(from_host(0, 7, op, ramp(16, 10)));
    auto data = run(from_host(1, 7, op, ramp(16, 20)));
    ASSERT_EQ(data.verdict, XDP_REDIRECT);
    EXPECT_EQ(parse_out(data.out).vals, ramp(16, 30, 2));

    // Only the parent's child answers: the parent connection's peer is a switch.
    install(2, false);
    RoceFields p;
    p.opcode = ROCE_OP_ACK;
    p.dqpn = kParentConnQpn;
    p.psn = kParentRxBase;
    p.word = ROCE_AETH_SYNC_REQ;
    auto fromp = run(roce_frame(parent_ep(), switch_up_ep(), p));
    EXPECT_EQ(fromp.verdict, XDP_DROP);
    EXPECT_EQ(fromp.stat, INCXDP_STAT_ROCE_PEER_ACK);
}

// A run stopped in the middle: host 1 had sent idx 3 (its leaf took it),
// host 0 had not. Host 0's new process learns idx 3, host 1's idx 4; host
// 0's start check at 3 meets host 1's old contribution and is refused
// (mismatch), host 1's at 4 waits for host 0 forever: no set completes with
// what the stopped run left, and the hosts time out (docs/ROCE.md).
TEST_F(RoceEngineTest, StartCheckNeverCompletesWithAStoppedRunsContribution) {
    install(2, true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx < 3; idx++) {
        run(from_host(0, idx, op, ramp(16, 1)));
        ASSERT_EQ(run(from_host(1, idx, op, ramp(16, 2))).verdict, XDP_REDIRECT) << idx;
    }
    ASSERT_EQ(run(from_host(1, 3, op, ramp(16, 2))).stat, INCXDP_STAT_ROCE_ABSORBED);
    RoceFields q;
    q.opcode = ROCE_OP_ACK;
    q.word = ROCE_AETH_SYNC_REQ;
    uint32_t learnt[2];
    for (uint16_t h = 0; h < 2; h++) {
        q.dqpn = child_qpn(h);
        auto a = run(roce_frame(host_ep(h), switch_ep(), q));
        ASSERT_EQ(a.stat, INCXDP_STAT_ROCE_SYNC);
        learnt[h] = (parse_out(a.out).psn - child_rx_base(h)) & ROCE_PSN_MASK;
    }
    EXPECT_EQ(learnt[0], 3u);
    EXPECT_EQ(learnt[1], 4u);
    const uint32_t start = allreduce(ROCE_OPR_BARRIER) | ROCE_IMM_START;
    auto c0 = run(from_host(0, 3, start, {}));
    EXPECT_EQ(c0.verdict, XDP_DROP);
    EXPECT_EQ(c0.stat, INCXDP_STAT_ROCE_MISMATCH);
    EXPECT_EQ(run(from_host(1, 4, start, {})).stat, INCXDP_STAT_ROCE_ABSORBED);
    EXPECT_EQ(slot(3).set[0].remaining, 1u) << "idx 3 still waits: nothing went down";
    EXPECT_EQ(slot(0).set[1].remaining, 1u) << "idx 4 waits for host 0";
    // The marker belongs to a payload-less Barrier only.
    auto bad = run(from_host(1, 5, op | ROCE_IMM_START, ramp(16, 1)));
    EXPECT_EQ(bad.stat, INCXDP_STAT_ROCE_MALFORMED);
}

TEST_F(RoceEngineTest, DISABLED_PerPacketCost) {
    constexpr uint32_t kN = 4000;
    auto frame = [](bool csum, Bytes f) {
        if (csum)
            set_udp_csum(f);
        return f;
    };
    for (bool csum : {false, true}) {
        for (bool root : {true, false}) {
            for (size_t n : {size_t(256), size_t(512), size_t(ROCE_MAX_ELEMS)}) {
                TearDown();
                SetUp();
                install(2, root);
                const uint32_t op = allreduce(ROCE_OPR_SUM);
                double absorbed = 0, completing = 0;
                for (uint32_t idx = 0; idx < kN; idx++) {
                    absorbed += time_ns(frame(csum, from_host(0, idx, op, ramp(n, int32_t(idx)))), 1);
                    completing += time_ns(frame(csum, from_host(1, idx, op, ramp(n, 1))), 1);
                }
                std::printf("%s, %4zu B payload, %s: in-order absorbed %6.0f ns, completing (%s) %6.0f ns\n",
                            root ? "root " : "leaf ", n * 4, csum ? "UDP checksum" : "ICRC        ",
                            absorbed / kN, root ? "template down" : "up + ICRC", completing / kN);
            }
        }
        auto probe = from_host(0, 0, allreduce(ROCE_OPR_SUM), ramp(256, 1));
        probe[kBth + 7] ^= 0x10; // unknown QPN: parse + integrity check + lookup
        set_icrc(probe);
        probe = frame(csum, probe);
        double one = 0;
        for (uint32_t i = 0; i < kN; i++)
            one += time_ns(probe, 1);
        std::printf("unknown QP, 1 KB payload (parse + %s check + lookup): %6.0f ns (repeat 100000), "
                    "%6.0f ns (repeat 1: the timing overhead in the numbers above)\n",
                    csum ? "UDP checksum" : "ICRC", time_ns(probe, 100000), one / kN);
    }
}

} // namespace
} // namespace incxdp::test::roce
