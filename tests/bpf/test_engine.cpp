// SPDX-License-Identifier: BSD-2-Clause
// The aggregation engine on crafted frames: verdicts, output bytes, slot
// state and counters (docs/PROTOCOLS.md §1-§2 semantics, native header).
#include "engine_fixture.h"
#include "../common/kernel_btf.h"

#include <linux/bpf.h>
#include <numeric>

namespace incxdp::test {
namespace {

constexpr size_t kSmlData = kL4 + 10; // SwitchML payload offset
constexpr size_t kNatData = kL4 + 32; // native payload offset

std::vector<int32_t> ramp(size_t n, int32_t base, int32_t step = 1)
{
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = base + int32_t(i) * step;
    return v;
}

TEST_F(EngineTest, SwitchmlCompletesAndMulticastsSum)
{
    install_job(4);
    std::vector<int32_t> expect(64, 0);
    for (uint16_t r = 0; r < 4; r++) {
        auto vals = ramp(64, 1000 * r, r + 1);
        for (size_t i = 0; i < 64; i++)
            expect[i] += vals[i];
        auto res = run(switchml(r, /*slot 3, set 0*/ 3, vals, int8_t(r), int8_t(-r)));
        if (r < 3) {
            EXPECT_EQ(res.verdict, XDP_DROP) << "rank " << r << " must be consumed";
        } else {
            ASSERT_EQ(res.verdict, XDP_REDIRECT);
            EXPECT_EQ(res.out[kL4] >> 4, 1) << "msg_type must be RESULT";
            EXPECT_EQ(res.out[kL4] & 7, 1) << "size echoed";
            EXPECT_EQ(res.out[kL4 + 1], 3) << "job_number echoed";
            EXPECT_EQ(get16(res.out, kL4 + 6), 3) << "pool_index echoed";
            EXPECT_EQ(int8_t(res.out[kL4 + 8]), 3) << "e0 = signed max";
            EXPECT_EQ(int8_t(res.out[kL4 + 9]), 0) << "e1 = signed max";
            EXPECT_EQ(values_at(res.out, kSmlData, 64), expect);
            EXPECT_EQ(get16(res.out, kEth + 4), kJob) << "IP ID carries the job to the egress stage";
        }
    }
    EXPECT_EQ(stat(INCXDP_STAT_CONSUMED), 3u);
    EXPECT_EQ(stat(INCXDP_STAT_COMPLETED), 1u);
    auto s = slot(3);
    EXPECT_EQ(s.set[0].bitmap, 0xfu);
    EXPECT_EQ(s.set[0].remaining, 0u);
    EXPECT_EQ(s.set[0].rounds, 1u);
}

TEST_F(EngineTest, Switchml256ElementsOnAnyPortInRange)
{
    install_job(2);
    auto a = ramp(256, -500), b = ramp(256, 7, 3);
    EXPECT_EQ(run(switchml(0, 0, a, 0, 0, 3, 0xBEE5)).verdict, XDP_DROP);
    auto res = run(switchml(1, 0, b, 0, 0, 3, 0xBEEF));
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    for (size_t i = 0; i < 256; i++)
        EXPECT_EQ(values_at(res.out, kSmlData, 256)[i], a[i] + b[i]);
}

TEST_F(EngineTest, DuplicateBeforeCompletionIsDroppedNotAdded)
{
    install_job(3);
    auto v = ramp(64, 5);
    EXPECT_EQ(run(switchml(0, 1, v)).verdict, XDP_DROP);
    EXPECT_EQ(run(switchml(0, 1, v)).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_RETX_DROP), 1u);
    EXPECT_EQ(run(switchml(1, 1, v)).verdict, XDP_DROP);
    auto res = run(switchml(2, 1, v));
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    for (size_t i = 0; i < 64; i++)
        EXPECT_EQ(values_at(res.out, kSmlData, 64)[i], 3 * v[i]) << "a duplicate was added at " << i;
}

TEST_F(EngineTest, RetransmissionToCompletedSlotIsUnicastBack)
{
    install_job(2);
    auto a = ramp(64, 1), b = ramp(64, 100);
    run(switchml(0, 2, a));
    ASSERT_EQ(run(switchml(1, 2, b)).verdict, XDP_REDIRECT);
    // Rank 0 lost the result and retransmits (with stale data: only read).
    auto retx = switchml(0, 2, ramp(64, 999999));
    auto res = run(retx);
    ASSERT_EQ(res.verdict, XDP_TX);
    EXPECT_EQ(stat(INCXDP_STAT_RETX_UNICAST), 1u);
    // Addressed back to the sender, from the switch.
    EXPECT_TRUE(std::equal(res.out.begin(), res.out.begin() + 6, retx.begin() + 6)) << "dst MAC = sender";
    EXPECT_TRUE(std::equal(res.out.begin() + 6, res.out.begin() + 12, retx.begin())) << "src MAC = switch";
    EXPECT_EQ(get32(res.out, kEth + 16), worker_ep(0).ip);
    EXPECT_EQ(get32(res.out, kEth + 12), kSwitchIp);
    EXPECT_EQ(get16(res.out, kEth + kIp + 2), 4000) << "UDP dst = worker port";
    EXPECT_EQ(get16(res.out, kEth + kIp), 0xBEE0) << "UDP src = switch port";
    EXPECT_EQ(ip_checksum(&res.out[kEth]), 0) << "IPv4 checksum must verify";
    EXPECT_EQ(res.out[kL4] >> 4, 1);
    for (size_t i = 0; i < 64; i++)
        EXPECT_EQ(values_at(res.out, kSmlData, 64)[i], a[i] + b[i]);
    EXPECT_EQ(slot(2).set[0].rounds, 1u) << "a retransmission must not complete the slot again";
}

TEST_F(EngineTest, ShadowSetsAlternateAndClearTheOtherBitmap)
{
    install_job(2);
    const uint16_t set1 = 0x8000;
    run(switchml(0, 4, ramp(64, 1)));
    ASSERT_EQ(run(switchml(1, 4, ramp(64, 1))).verdict, XDP_REDIRECT);
    // Next use of slot 4 goes to set 1; each sender's bit leaves set 0.
    EXPECT_EQ(run(switchml(0, 4 | set1, ramp(64, 10))).verdict, XDP_DROP);
    auto s = slot(4);
    EXPECT_EQ(s.set[0].bitmap, 0x2u) << "rank 0 cleared from set 0";
    EXPECT_EQ(s.set[1].bitmap, 0x1u);
    // Rank 1 still misses set 0's result: its retransmission gets it.
    auto res = run(switchml(1, 4, ramp(64, 1)));
    ASSERT_EQ(res.verdict, XDP_TX);
    EXPECT_EQ(values_at(res.out, kSmlData, 1)[0], 2);
    auto done = run(switchml(1, 4 | set1, ramp(64, 20)));
    ASSERT_EQ(done.verdict, XDP_REDIRECT);
    EXPECT_EQ(values_at(done.out, kSmlData, 1)[0], 30);
    EXPECT_EQ(get16(done.out, kL4 + 6), 4 | set1) << "set bit echoed";
    EXPECT_EQ(slot(4).set[0].bitmap, 0u);
    // Set 0 reused: the first contribution writes, it does not add.
    run(switchml(0, 4, ramp(64, 100)));
    auto third = run(switchml(1, 4, ramp(64, 200)));
    ASSERT_EQ(third.verdict, XDP_REDIRECT);
    EXPECT_EQ(values_at(third.out, kSmlData, 1)[0], 300);
}

TEST_F(EngineTest, UnknownSenderNeverTouchesSlots)
{
    install_job(2);
    Endpoint stranger = worker_ep(1);
    stranger.port = 4001; // same host, unregistered port
    auto f = udp_frame(stranger, switch_ep(0xBEE0), switchml_payload(0, 1, 3, 0, 0, 0, 0, ramp(64, 1)));
    EXPECT_EQ(run(f).verdict, XDP_DROP);
    Endpoint spoof_mac = worker_ep(1);
    spoof_mac.mac[5] = 0x77;
    f = udp_frame(spoof_mac, switch_ep(0xBEE0), switchml_payload(0, 1, 3, 0, 0, 0, 0, ramp(64, 1)));
    EXPECT_EQ(run(f).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_UNKNOWN_SENDER), 2u);
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
    EXPECT_EQ(slot(0).set[0].remaining, 0u);
}

TEST_F(EngineTest, RegisteredAddressesOnAnotherPortAreAForgery)
{
    install_job(2);
    register_worker(worker_ep(1), kJob, 1, /*another port*/ 4242);
    EXPECT_EQ(run(switchml(0, 0, ramp(64, 1))).verdict, XDP_DROP);
    EXPECT_EQ(run(switchml(1, 0, ramp(64, 1))).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_WRONG_PORT), 1u);
    EXPECT_EQ(stat(INCXDP_STAT_CONSUMED), 1u);
    EXPECT_EQ(slot(0).set[0].bitmap, 0x1u) << "the forged rank 1 must not count";
}

TEST_F(EngineTest, OtherTrafficPasses)
{
    install_job(2);
    Bytes arp(60, 0);
    arp[12] = 0x08;
    arp[13] = 0x06;
    EXPECT_EQ(run(arp).verdict, XDP_PASS);
    EXPECT_EQ(run(udp_frame(worker_ep(0), switch_ep(53), Bytes(20, 1))).verdict, XDP_PASS);
    EXPECT_EQ(run(udp_frame(worker_ep(0), switch_ep(0xBEE0), Bytes(40, 0), /*TCP*/ 6)).verdict, XDP_PASS);
    auto frag = switchml(0, 0, ramp(64, 1));
    frag[kEth + 6] = 0x20; // MF: a fragment is never aggregated
    EXPECT_EQ(run(frag).verdict, XDP_PASS);
    auto runt = switchml(0, 0, ramp(64, 1));
    runt.resize(kEth + 10); // IPv4 ethertype, truncated IP header
    EXPECT_EQ(run(runt).verdict, XDP_PASS);
    EXPECT_EQ(stat(INCXDP_STAT_PASS), 5u);
    for (int s = INCXDP_STAT_PASS + 1; s < INCXDP_STAT_MAX; s++)
        EXPECT_EQ(stat(incxdp_stat(s)), 0u) << "counter " << s << ": every frame gets exactly one verdict";
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
}

TEST_F(EngineTest, TruncatedAndGarbageFramesAreDroppedAndCounted)
{
    install_job(2);
    auto full = switchml(0, 0, ramp(64, 1));
    auto short_payload = full;
    short_payload.resize(full.size() - 4);
    EXPECT_EQ(run(short_payload).verdict, XDP_DROP);
    auto short_hdr = full;
    short_hdr.resize(kL4 + 5);
    EXPECT_EQ(run(short_hdr).verdict, XDP_DROP);
    auto result_type = full;
    result_type[kL4] = 0x11; // a RESULT sent to the switch
    EXPECT_EQ(run(result_type).verdict, XDP_DROP);
    auto size4 = full;
    size4[kL4] = 0x04; // size code 4 (512 elements) is not in the spec
    size4.resize(kL4 + 10 + 512 * 4);
    EXPECT_EQ(run(size4).verdict, XDP_DROP);
    auto short_udp = full;
    short_udp[kEth + kIp + 4] = 0; // UDP length 8: no datagram payload at all
    short_udp[kEth + kIp + 5] = 8;
    EXPECT_EQ(run(short_udp).verdict, XDP_DROP);
    auto short_ip = full;
    short_ip[kEth + 2] = 0; // IPv4 total length 28, UDP length unchanged
    short_ip[kEth + 3] = 28;
    EXPECT_EQ(run(short_ip).verdict, XDP_DROP);
    auto long_ip = full;
    long_ip[kEth + 2] = 0x7f; // claims more than the frame holds
    EXPECT_EQ(run(long_ip).verdict, XDP_DROP);
    auto bit14 = full;
    bit14[kL4 + 6] |= 0x40;
    EXPECT_EQ(run(bit14).verdict, XDP_DROP);

    NativeFields f;
    f.nworkers = 2;
    auto nat = native(0, f, ramp(32, 1));
    auto bad_magic = nat;
    bad_magic[kL4] = 0x55;
    EXPECT_EQ(run(bad_magic).verdict, XDP_DROP);
    NativeFields odd = f;
    odd.nelems = 20; // not a multiple of the quantum
    EXPECT_EQ(run(native(0, odd, ramp(20, 1))).verdict, XDP_DROP);
    NativeFields big = f;
    big.nelems = INCXDP_MAX_ELEMS + 16;
    EXPECT_EQ(run(native(0, big, ramp(32, 1))).verdict, XDP_DROP);
    NativeFields badop = f;
    badop.op = 9;
    EXPECT_EQ(run(native(0, badop, ramp(32, 1))).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_MALFORMED), 12u);
    for (uint32_t s = 0; s < kPoolSize; s++) {
        EXPECT_EQ(slot(s).set[0].bitmap, 0u) << "slot " << s;
        EXPECT_EQ(slot(s).set[1].bitmap, 0u) << "slot " << s;
    }
}

TEST_F(EngineTest, NativeSumMaxMinWithWrap)
{
    install_job(3);
    struct Case {
        uint8_t op;
        uint16_t slot;
    } cases[] = {{INCXDP_OP_SUM, 0}, {INCXDP_OP_MAX, 1}, {INCXDP_OP_MIN, 2}};
    std::vector<std::vector<int32_t>> in = {ramp(48, INT32_MAX - 10), ramp(48, -7, -3), ramp(48, 40, 2)};
    for (auto c : cases) {
        Bytes last;
        for (uint16_t r = 0; r < 3; r++) {
            NativeFields f;
            f.op = c.op;
            f.nworkers = 3;
            f.slot = c.slot;
            f.round = 42;
            f.chunk = c.slot;
            f.exp = int8_t(r * 2 - 3);
            auto res = run(native(r, f, in[r]));
            ASSERT_EQ(res.verdict, r < 2 ? XDP_DROP : XDP_REDIRECT) << "op " << int(c.op) << " rank " << r;
            last = res.out;
        }
        EXPECT_EQ(last[kL4 + 1] & 0xf, 1) << "RESULT type";
        EXPECT_EQ(int8_t(last[kL4 + 24]), 1) << "exp = signed max";
        EXPECT_EQ(get32(last, kL4 + 8), 42u) << "round echoed";
        EXPECT_EQ(get32(last, kL4 + 28), 0xC0FFEEu) << "tsi echoed";
        auto out = values_at(last, kNatData, 48);
        for (size_t i = 0; i < 48; i++) {
            int32_t a = in[0][i], b = in[1][i], d = in[2][i], want;
            if (c.op == INCXDP_OP_SUM)
                want = int32_t(uint32_t(a) + uint32_t(b) + uint32_t(d));
            else if (c.op == INCXDP_OP_MAX)
                want = std::max({a, b, d});
            else
                want = std::min({a, b, d});
            EXPECT_EQ(out[i], want) << "op " << int(c.op) << " elem " << i;
        }
    }
}

TEST_F(EngineTest, NativeFullSizePayload)
{
    install_job(2);
    NativeFields f;
    f.nworkers = 2;
    auto a = ramp(INCXDP_MAX_ELEMS, 3), b = ramp(INCXDP_MAX_ELEMS, -1, 5);
    EXPECT_EQ(run(native(0, f, a)).verdict, XDP_DROP);
    auto res = run(native(1, f, b));
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    auto out = values_at(res.out, kNatData, INCXDP_MAX_ELEMS);
    for (size_t i = 0; i < INCXDP_MAX_ELEMS; i++)
        ASSERT_EQ(out[i], a[i] + b[i]) << i;
}

// A jumbo link's frame larger than one XDP buffer (bpf_prog_test_run puts
// what is above 3520 B into fragments), on the native and the SwitchML
// ports: too_long, dropped, no slot touched. A full-size one passes on.
TEST_F(EngineTest, FramesInMoreThanOneBufferAreCountedTooLong)
{
    install_job(2);
    NativeFields f;
    f.nworkers = 2;
    f.nelems = INCXDP_MAX_ELEMS;
    auto big = native(0, f, ramp(2048, 1));
    auto ml = switchml(0, 0, ramp(2048, 1), 0, 0, 3);
    ASSERT_GT(big.size(), 4096u - 256 - 320) << "test bug: the frame fits one buffer";
    ASSERT_GT(ml.size(), 4096u - 256 - 320) << "test bug: the frame fits one buffer";
    EXPECT_EQ(run(big).verdict, XDP_DROP);
    EXPECT_EQ(run(ml).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_TOO_LONG), 2u);
    EXPECT_EQ(stat(INCXDP_STAT_MALFORMED), 0u);
    for (uint32_t s = 0; s < kPoolSize; s++)
        EXPECT_EQ(slot(s).set[0].bitmap | slot(s).set[1].bitmap, 0u) << "slot " << s;

    auto other = udp_frame(worker_ep(0), switch_ep(9999), Bytes(8000, 0x5a));
    auto r = run(other);
    EXPECT_EQ(r.verdict, XDP_PASS);
    EXPECT_EQ(r.out, other);
    EXPECT_EQ(stat(INCXDP_STAT_PASS), 1u);
}

// A NIC with receive buffers smaller than the frame hands the engine a
// full-size SwitchML or native packet in pieces; where the kernel has
// bpf_xdp_pull_data it is pulled whole and aggregated as a linear one.
TEST_F(EngineTest, FramesSplitBelowOneBufferArePulledWhole)
{
    if (!incxdp::test::kernel_has_func("bpf_xdp_pull_data"))
        GTEST_SKIP() << "this kernel has no bpf_xdp_pull_data (Linux 6.18)";
    install_job(2);
    NativeFields f;
    f.nworkers = 2;
    f.nelems = INCXDP_MAX_ELEMS;
    auto a = ramp(INCXDP_MAX_ELEMS, 3), b = ramp(INCXDP_MAX_ELEMS, -1, 5);
    EXPECT_EQ(run(native(0, f, a), 20).verdict, XDP_DROP);
    auto res = run(native(1, f, b), 300);
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    auto out = values_at(res.out, kNatData, INCXDP_MAX_ELEMS);
    for (size_t i = 0; i < INCXDP_MAX_ELEMS; i++)
        ASSERT_EQ(out[i], a[i] + b[i]) << i;

    // Another slot: the native packets took the first.
    auto ml0 = switchml(0, 2, ramp(256, 1), 0, 0, 3), ml1 = switchml(1, 2, ramp(256, 9), 0, 0, 3);
    EXPECT_EQ(run(ml0, 60).verdict, XDP_DROP);
    auto ml = run(ml1, 60);
    ASSERT_EQ(ml.verdict, XDP_REDIRECT);
    EXPECT_EQ(values_at(ml.out, kSmlData, 256), ramp(256, 10, 2));
    EXPECT_EQ(stat(INCXDP_STAT_PULLED), 4u);
    EXPECT_EQ(stat(INCXDP_STAT_COMPLETED), 2u);
    EXPECT_EQ(stat(INCXDP_STAT_TOO_LONG), 0u);
}

TEST_F(EngineTest, NativeHeaderMustAgreeWithRegistration)
{
    install_job(2);
    NativeFields f;
    f.nworkers = 2;
    auto v = ramp(16, 1);
    // Rank 0's address claiming to be rank 1.
    auto spoof = native(1, f, v);
    auto ep0 = worker_ep(0);
    std::copy(ep0.mac.begin(), ep0.mac.end(), spoof.begin() + 6);
    spoof[kEth + 12 + 3] = uint8_t(ep0.ip);
    EXPECT_EQ(run(spoof).verdict, XDP_DROP);
    NativeFields other_job = f;
    other_job.job = kJob + 1;
    EXPECT_EQ(run(native(0, other_job, v)).verdict, XDP_DROP);
    NativeFields wrong_n = f;
    wrong_n.nworkers = 3;
    EXPECT_EQ(run(native(0, wrong_n, v)).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_BAD_JOB), 3u);
    NativeFields far = f;
    far.slot = kPoolSize; // outside the job's pool
    EXPECT_EQ(run(native(0, far, v)).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_BAD_SLOT), 1u);
    EXPECT_EQ(slot(0).set[0].bitmap, 0u);
}

TEST_F(EngineTest, NativeChunkMismatchAndStaleRetransmission)
{
    install_job(2);
    NativeFields f;
    f.nworkers = 2;
    f.round = 1;
    f.chunk = 5;
    auto v = ramp(16, 1);
    EXPECT_EQ(run(native(0, f, v)).verdict, XDP_DROP);
    NativeFields other = f;
    other.chunk = 6; // another chunk while chunk 5 is in progress
    EXPECT_EQ(run(native(1, other, v)).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_MISMATCH), 1u);
    ASSERT_EQ(run(native(1, f, v)).verdict, XDP_REDIRECT);
    NativeFields old = f;
    old.round = 0; // a late retransmission of an earlier round's chunk
    EXPECT_EQ(run(native(0, old, v)).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_STALE), 1u);
    EXPECT_EQ(run(native(0, f, v)).verdict, XDP_TX);
}

TEST_F(EngineTest, SingleWorkerJobCompletesImmediately)
{
    install_job(1);
    NativeFields f;
    f.nworkers = 1;
    auto res = run(native(0, f, ramp(16, 9)));
    ASSERT_EQ(res.verdict, XDP_REDIRECT);
    EXPECT_EQ(values_at(res.out, kNatData, 16), ramp(16, 9));
}

TEST_F(EngineTest, InactiveJobDropsEverything)
{
    install_job(2);
    incxdp_job none{};
    uint32_t id = kJob;
    ASSERT_EQ(bpf_map_update_elem(map_fd(skel_->maps.incxdp_jobs), &id, &none, BPF_ANY), 0);
    EXPECT_EQ(run(switchml(0, 0, ramp(64, 1))).verdict, XDP_DROP);
    EXPECT_EQ(stat(INCXDP_STAT_BAD_JOB), 1u);
}

} // namespace
} // namespace incxdp::test
