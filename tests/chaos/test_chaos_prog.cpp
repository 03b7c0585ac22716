// SPDX-License-Identifier: BSD-2-Clause
// The fault injector's tc programs under bpf_prog_test_run_opts, on frames
// from tests/common/frames.h: verdicts, output bytes and counters at the
// extremes (0%, 100%) and, statistically, at realistic rates. No timing.
//
// The test process moves into a private network namespace first: a
// duplicate is a real clone sent through the test device (loopback), and
// it must not reach the machine's stack.
#include "../common/frames.h"
#include "../common/percpu.h"
#include "incxdp_chaos.skel.h"

#include <incxdp/chaos.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <linux/pkt_cls.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace incxdp::test {
namespace {

const Endpoint kSrc{{0x02, 0x49, 0x58, 0x01, 0x00, 0x00}, 0x0a4d0001, 4000};
const Endpoint kDst{{0x02, 0x49, 0x58, 0x00, 0x00, 0x00}, 0x0a4d00fe, 0xBEF0};

Bytes payload(size_t n) {
    Bytes p(n);
    for (size_t i = 0; i < n; i++)
        p[i] = uint8_t(i * 37 + 11);
    return p;
}

// A private namespace with lo up: clones go there and die in its stack.
std::string enter_private_netns() {
    if (unshare(CLONE_NEWNET) != 0)
        return std::string("unshare(CLONE_NEWNET): ") + strerror(errno);
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return std::string("socket: ") + strerror(errno);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    int err = ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    if (!err)
        err = ioctl(s, SIOCSIFFLAGS, &ifr);
    close(s);
    return err ? std::string("bring lo up: ") + strerror(errno) : "";
}

struct Outcome {
    int verdict = 0;
    Bytes out;
    uint32_t mark_out = 0;
};

class ChaosProg : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() == 0)
            netns_error_ = enter_private_netns();
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs needs root";
        ASSERT_TRUE(netns_error_.empty()) << netns_error_;
        skel_ = incxdp_chaos__open();
        ASSERT_NE(skel_, nullptr) << "open incxdp_chaos: " << strerror(errno);
        // Unpinned maps: the test must not touch anyone's attachments.
        bpf_map *m;
        bpf_object__for_each_map(m, skel_->obj) bpf_map__set_pin_path(m, nullptr);
        ASSERT_EQ(incxdp_chaos__load(skel_), 0) << "load incxdp_chaos: " << strerror(errno);
        egress_ = bpf_program__fd(skel_->progs.ixchaos_egress);
        ingress_ = bpf_program__fd(skel_->progs.ixchaos_ingress);
    }

    void TearDown() override {
        if (skel_)
            incxdp_chaos__destroy(skel_);
    }

    void configure(uint32_t loss, uint32_t dup, uint32_t corrupt, uint32_t enabled = 1) {
        incxdp_chaos_config c{enabled, loss, dup, corrupt};
        uint32_t zero = 0;
        ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(skel_->maps.chaos_config), &zero, &c, BPF_ANY),
                  0);
    }

    // One frame through the program `repeat` times (on the same skb: a
    // corruption stays in it); the verdict and bytes of the last run.
    Outcome run(const Bytes &frame, uint32_t repeat = 1, int prog = -1, uint32_t mark = 0) {
        Outcome r;
        r.out.resize(frame.size() + 256);
        __sk_buff ctx_in{}, ctx_out{};
        ctx_in.mark = mark;
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(r.out.size()), .ctx_in = &ctx_in,
                    .ctx_out = &ctx_out, .ctx_size_in = sizeof(ctx_in),
                    .ctx_size_out = sizeof(ctx_out), .repeat = static_cast<int>(repeat));
        int err = bpf_prog_test_run_opts(prog < 0 ? egress_ : prog, &opts);
        EXPECT_EQ(err, 0) << "bpf_prog_test_run_opts: " << strerror(errno);
        r.verdict = static_cast<int>(opts.retval);
        r.out.resize(opts.data_size_out);
        r.mark_out = ctx_out.mark;
        return r;
    }

    uint64_t stat(incxdp_chaos_stat s) { return percpu_sum(bpf_map__fd(skel_->maps.chaos_stats), s); }

    void expect_consistent() {
        EXPECT_EQ(stat(INCXDP_CHAOS_SEEN), stat(INCXDP_CHAOS_DROPPED) + stat(INCXDP_CHAOS_PASSED));
        EXPECT_LE(stat(INCXDP_CHAOS_DUPLICATED) + stat(INCXDP_CHAOS_DUP_FAILED),
                  stat(INCXDP_CHAOS_PASSED));
        EXPECT_LE(stat(INCXDP_CHAOS_CORRUPTED), stat(INCXDP_CHAOS_PASSED));
    }

    // |k - n p| within 6 standard deviations (+1 for tiny n p): a false
    // alarm is a ~1e-9 event, a broken rate (2x off) is still caught.
    static void expect_binomial(uint64_t k, uint64_t n, double p, const char *what) {
        const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
        EXPECT_NEAR(double(k), mean, 6 * sd + 1)
            << what << ": " << k << " of " << n << " at p=" << p;
    }

    static inline std::string netns_error_;
    incxdp_chaos *skel_ = nullptr;
    int egress_ = -1, ingress_ = -1;
};

TEST_F(ChaosProg, ZeroRatesPassEveryFrameUntouched) {
    configure(0, 0, 0);
    const Bytes f = udp_frame(kSrc, kDst, payload(1000));
    for (int i = 0; i < 200; i++) {
        Outcome r = run(f);
        ASSERT_EQ(r.verdict, TC_ACT_UNSPEC);
        ASSERT_EQ(r.out, f);
    }
    EXPECT_EQ(stat(INCXDP_CHAOS_SEEN), 200u);
    EXPECT_EQ(stat(INCXDP_CHAOS_PASSED), 200u);
    EXPECT_EQ(stat(INCXDP_CHAOS_DROPPED), 0u);
    EXPECT_EQ(stat(INCXDP_CHAOS_DUPLICATED), 0u);
    EXPECT_EQ(stat(INCXDP_CHAOS_CORRUPTED), 0u);
}

TEST_F(ChaosProg, NoConfigOrDisabledPassesEverything) {
    const Bytes f = udp_frame(kSrc, kDst, payload(64));
    Outcome r = run(f, 100); // never configured: the zeroed entry is "disabled"
    EXPECT_EQ(r.verdict, TC_ACT_UNSPEC);
    configure(INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM, /*enabled=*/0);
    r = run(f, 100);
    EXPECT_EQ(r.verdict, TC_ACT_UNSPEC);
    EXPECT_EQ(r.out, f);
    EXPECT_EQ(stat(INCXDP_CHAOS_PASSED), 200u);
    EXPECT_EQ(stat(INCXDP_CHAOS_DROPPED), 0u);
}

TEST_F(ChaosProg, FullLossDropsEveryFrame) {
    // Egress loses silently (STOLEN: the sender is told "sent", as by a
    // wire); ingress drops (SHOT).
    configure(INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM);
    for (const Bytes &f : {udp_frame(kSrc, kDst, payload(1)), udp_frame(kSrc, kDst, payload(3000)),
                           udp_frame(kSrc, kDst, payload(40), 6)}) {
        for (int i = 0; i < 100; i++) {
            ASSERT_EQ(run(f, 1, egress_).verdict, TC_ACT_STOLEN);
            ASSERT_EQ(run(f, 1, ingress_).verdict, TC_ACT_SHOT);
        }
    }
    EXPECT_EQ(stat(INCXDP_CHAOS_DROPPED), 600u);
    EXPECT_EQ(stat(INCXDP_CHAOS_PASSED), 0u);
    // Lost frames are neither corrupted nor duplicated.
    EXPECT_EQ(stat(INCXDP_CHAOS_CORRUPTED), 0u);
    EXPECT_EQ(stat(INCXDP_CHAOS_DUPLICATED), 0u);
    expect_consistent();
}

TEST_F(ChaosProg, FullCorruptionFlipsExactlyOnePayloadBit) {
    configure(0, 0, INCXDP_CHAOS_PPM);
    for (size_t len : {size_t(1), size_t(2), size_t(33), size_t(3400)}) {
        const Bytes f = udp_frame(kSrc, kDst, payload(len));
        std::vector<int> hits(len, 0);
        const int runs = len < 100 ? 400 : 2000;
        for (int i = 0; i < runs; i++) {
            Outcome r = run(f);
            ASSERT_EQ(r.verdict, TC_ACT_UNSPEC);
            ASSERT_EQ(r.out.size(), f.size());
            int bits = 0;
            for (size_t b = 0; b < f.size(); b++) {
                uint8_t d = r.out[b] ^ f[b];
                if (!d)
                    continue;
                ASSERT_GE(b, kL4) << "payload " << len << ": header byte " << b << " changed";
                bits += __builtin_popcount(d);
                hits[b - kL4]++;
            }
            ASSERT_EQ(bits, 1) << "payload " << len;
        }
        // The first and last payload byte can be hit (offset scaling spans
        // the payload), checked where the chance to miss is negligible.
        if (len <= 33) {
            EXPECT_GT(hits.front(), 0) << "payload " << len;
            EXPECT_GT(hits.back(), 0) << "payload " << len;
        }
    }
    EXPECT_EQ(stat(INCXDP_CHAOS_CORRUPTED), stat(INCXDP_CHAOS_SEEN));
    expect_consistent();
}

TEST_F(ChaosProg, CorruptionSparesFramesWithoutUdpPayload) {
    configure(0, 0, INCXDP_CHAOS_PPM);
    Bytes tcp = udp_frame(kSrc, kDst, payload(100), 6);
    Bytes empty = udp_frame(kSrc, kDst, {});
    Bytes later_fragment = udp_frame(kSrc, kDst, payload(100));
    later_fragment[kEth + 6] = 0x00; // fragment offset 8 bytes
    later_fragment[kEth + 7] = 0x01;
    Bytes arp = udp_frame(kSrc, kDst, payload(28));
    arp[12] = 0x08;
    arp[13] = 0x06;
    for (const Bytes &f : {tcp, empty, later_fragment, arp}) {
        Outcome r = run(f, 1);
        EXPECT_EQ(r.verdict, TC_ACT_UNSPEC);
        EXPECT_EQ(r.out, f);
    }
    EXPECT_EQ(stat(INCXDP_CHAOS_CORRUPTED), 0u);
    EXPECT_EQ(stat(INCXDP_CHAOS_PASSED), 4u);
}

TEST_F(ChaosProg, CorruptionStaysInsideTheIpDatagram) {
    // Ethernet padding past the IP total length is not payload.
    configure(0, 0, INCXDP_CHAOS_PPM);
    Bytes f = udp_frame(kSrc, kDst, payload(4));
    f.resize(f.size() + 20, 0xEE);
    for (int i = 0; i < 300; i++) {
        Outcome r = run(f);
        for (size_t b = kL4 + 4; b < f.size(); b++)
            ASSERT_EQ(r.out[b], 0xEE) << "padding byte " << b << " changed";
    }
}

TEST_F(ChaosProg, FullDuplicationClonesEveryFrameOnBothHooks) {
    configure(0, INCXDP_CHAOS_PPM, 0);
    const Bytes f = udp_frame(kSrc, kDst, payload(500));
    for (int prog : {egress_, ingress_}) {
        Outcome r = run(f, 100, prog);
        EXPECT_EQ(r.verdict, TC_ACT_UNSPEC);
        EXPECT_EQ(r.out, f);       // the original goes on unchanged
        EXPECT_EQ(r.mark_out, 0u); // and keeps its own mark
    }
    EXPECT_EQ(stat(INCXDP_CHAOS_DUPLICATED), 200u);
    EXPECT_EQ(stat(INCXDP_CHAOS_DUP_FAILED), 0u);
    expect_consistent();
}

TEST_F(ChaosProg, OurCloneIsPassedUncountedAndUnmarked) {
    configure(INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM, INCXDP_CHAOS_PPM);
    const Bytes f = udp_frame(kSrc, kDst, payload(64));
    Outcome r = run(f, 1, egress_, INCXDP_CHAOS_CLONE_MARK);
    EXPECT_EQ(r.verdict, TC_ACT_UNSPEC);
    EXPECT_EQ(r.out, f);
    EXPECT_EQ(r.mark_out, 0u);
    EXPECT_EQ(stat(INCXDP_CHAOS_SEEN), 0u);
    // Any other mark is the sender's business and survives.
    r = run(f, 1, egress_, 0x77);
    EXPECT_EQ(r.verdict, TC_ACT_STOLEN);
    EXPECT_EQ(r.mark_out, 0x77u);
}

TEST_F(ChaosProg, RatesHoldStatistically) {
    // 5% loss, 1% duplication, 2% corruption over 20000 frames; duplication
    // and corruption apply to the frames that were not lost.
    constexpr uint32_t n = 20000;
    configure(50000, 10000, 20000);
    run(udp_frame(kSrc, kDst, payload(1000)), n);
    EXPECT_EQ(stat(INCXDP_CHAOS_SEEN), n);
    const uint64_t passed = stat(INCXDP_CHAOS_PASSED);
    expect_binomial(stat(INCXDP_CHAOS_DROPPED), n, 0.05, "dropped");
    expect_binomial(stat(INCXDP_CHAOS_DUPLICATED), passed, 0.01, "duplicated");
    expect_binomial(stat(INCXDP_CHAOS_CORRUPTED), passed, 0.02, "corrupted");
    EXPECT_EQ(stat(INCXDP_CHAOS_DUP_FAILED), 0u);
    expect_consistent();
}

TEST_F(ChaosProg, RatesChangeWithoutReload) {
    const Bytes f = udp_frame(kSrc, kDst, payload(100));
    configure(0, 0, 0);
    run(f, 1000);
    EXPECT_EQ(stat(INCXDP_CHAOS_DROPPED), 0u);
    configure(500000, 0, 0);
    run(f, 10000);
    expect_binomial(stat(INCXDP_CHAOS_DROPPED), 10000, 0.5, "dropped at 50%");
    configure(INCXDP_CHAOS_PPM, 0, 0);
    EXPECT_EQ(run(f).verdict, TC_ACT_STOLEN);
}

} // namespace
} // namespace incxdp::test
