// SPDX-License-Identifier: BSD-2-Clause
// incxdp_egress_rewrite on RoCE frames, for real: the kernel refuses
// bpf_prog_test_run for devmap programs, so the ingress program runs with
// BPF_F_TEST_XDP_LIVE_FRAMES, its redirect goes through incxdp_ports and the
// egress program out of a veth, and the copy is read back on the peer.
// Each test process moves into its own network namespace first (ctest runs
// every test of this binary as a process of its own).
#include "roce_fixture.h"

#include <cstdlib>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>

namespace incxdp::test::roce {
namespace {

class RoceEgressTest : public RoceEngineTest {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root";
        static bool in_netns = false;
        if (!in_netns) {
            ASSERT_EQ(unshare(CLONE_NEWNET), 0) << strerror(errno);
            in_netns = true;
        }
        if (std::system("ip link add ixv0 type veth peer name ixv1 && ip link set ixv0 up && "
                        "ip link set ixv1 up && ip link set lo up") != 0)
            GTEST_SKIP() << "cannot create a veth pair";
        v0_ = if_nametoindex("ixv0");
        v1_ = if_nametoindex("ixv1");
        ASSERT_NE(v0_, 0u);
        RoceEngineTest::SetUp();
        // veth transmits XDP frames only to a peer with XDP (NAPI) on.
        bpf_insn pass[2] = {};
        pass[0].code = BPF_ALU64 | BPF_MOV | BPF_K;
        pass[0].imm = XDP_PASS;
        pass[1].code = BPF_JMP | BPF_EXIT;
        pass_fd_ = bpf_prog_load(BPF_PROG_TYPE_XDP, "pass", "GPL", pass, 2, nullptr);
        ASSERT_GE(pass_fd_, 0) << strerror(errno);
        ASSERT_EQ(bpf_xdp_attach(int(v1_), pass_fd_, XDP_FLAGS_DRV_MODE, nullptr), 0)
            << strerror(errno);
        // ixv0 is a switch port: in the devmap with the egress program.
        bpf_devmap_val v{};
        v.ifindex = v0_;
        v.bpf_prog.fd = bpf_program__fd(skel_->progs.incxdp_egress_rewrite);
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_ports), &v0_, &v, BPF_ANY), 0)
            << strerror(errno);
        sock_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
        ASSERT_GE(sock_, 0) << strerror(errno);
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = int(v1_);
        ASSERT_EQ(bind(sock_, reinterpret_cast<sockaddr *>(&sll), sizeof(sll)), 0)
            << strerror(errno);
        timeval tv{1, 0};
        setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }

    void TearDown() override {
        if (sock_ >= 0)
            close(sock_);
        RoceEngineTest::TearDown();
        if (pass_fd_ >= 0)
            close(pass_fd_);
        if (v0_)
            std::system("ip link del ixv0 2>/dev/null");
    }

    // Host 0 behind ixv0, host 1 behind lo; the egress rewrite for ixv0
    // names host 0's connection.
    void install_ports(bool root) {
        install(2, root);
        auto c = child_conn(0);
        c.ifindex = v0_;
        put_conn(child_qpn(0), c);
        incxdp_egress_key k{kJob, v0_};
        incxdp_egress e{};
        e.roce_qpn = child_qpn(0);
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_egress), &k, &e, BPF_ANY), 0);
    }

    // The frame as if received on `ifindex`, its XDP_TX/REDIRECT carried out.
    void run_live(const Bytes &frame, uint32_t ifindex) {
        xdp_md ctx{};
        ctx.data_end = static_cast<__u32>(frame.size());
        ctx.ingress_ifindex = ifindex;
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                    .data_size_in = static_cast<__u32>(frame.size()), .ctx_in = &ctx,
                    .ctx_size_in = sizeof(ctx), .repeat = 1, .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
        ASSERT_EQ(bpf_prog_test_run_opts(prog_fd_, &opts), 0) << strerror(errno);
    }

    // The next RoCE frame on ixv1, if one comes within a second.
    std::optional<Bytes> capture() {
        for (;;) {
            Bytes b(4096);
            ssize_t n = recv(sock_, b.data(), b.size(), 0);
            if (n < 0)
                return std::nullopt;
            b.resize(size_t(n));
            if (b.size() >= kBth && get16(b, 12) == 0x0800 && b[kEth + 9] == 17 &&
                get16(b, kEth + 22) == INCXDP_ROCE_UDP_PORT)
                return b;
        }
    }

    uint32_t v0_ = 0, v1_ = 0;
    int pass_fd_ = -1, sock_ = -1;
};

TEST_F(RoceEgressTest, ResultCopyIsAddressedToTheChildBehindThePort) {
    install_ports(true);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx < 3; idx++) {
        ASSERT_EQ(run(from_host(1, idx, op, ramp(64, 7))).stat, INCXDP_STAT_ROCE_ABSORBED);
        run_live(from_host(0, idx, op, ramp(64, 1, 3)), v0_);
        auto got = capture();
        ASSERT_TRUE(got) << "no copy on ixv1 for idx " << idx;
        expect_sent(*got, switch_ep(), host_ep(0), 0xd000, ROCE_MIN_IMM_FRAME + 64 * 4);
        auto o = parse_out(*got);
        EXPECT_EQ(o.opcode, ROCE_OP_SEND_ONLY_IMM);
        EXPECT_EQ(o.dqpn, host_qpn(0));
        EXPECT_EQ(o.psn, child_tx_base(0) + idx) << "down stream: tx_base + idx";
        EXPECT_TRUE(o.ackreq) << "an RC device ACKs only what asks for it";
        EXPECT_EQ(o.word, op);
        EXPECT_EQ(o.vals, ramp(64, 8, 4));
    }
    EXPECT_EQ(stat(INCXDP_STAT_EGRESS_TX), 3u);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_DOWN), 3u);
}

// A leaf forwards its parent's result: each copy's checksum is made from
// the result's own (checked) one without a pass, or from a pass over the
// tail when the parent sent none (ICRC only). Both come out right, and a
// result whose checksum does not add up goes nowhere.
TEST_F(RoceEgressTest, ParentResultCopiesGetTheirChecksumWithOrWithoutTheParents) {
    install_ports(false);
    const uint32_t op = allreduce(ROCE_OPR_SUM);
    for (uint32_t idx = 0; idx < 3; idx++) {
        const size_t n = 256 - 64 * idx; // 1 KB, 768 B, 512 B: whole and partial pieces
        ASSERT_EQ(run(from_host(1, idx, op, ramp(n, 7))).stat, INCXDP_STAT_ROCE_ABSORBED);
        ASSERT_EQ(run(from_host(0, idx, op, ramp(n, 1)), v0_).stat, INCXDP_STAT_ROCE_UP);
        auto result = from_parent(idx, op, ramp(n, 40 + int32_t(idx), 9));
        if (idx == 1)
            set_udp_csum(result);
        if (idx == 2) {
            auto bad = result;
            set_udp_csum(bad);
            bad[kPayloadImm + 9] ^= 0x20;
            run_live(bad, kLo);
            EXPECT_FALSE(capture()) << "a result with a bad checksum is not forwarded";
            set_udp_csum(result);
        }
        run_live(result, kLo);
        auto got = capture();
        ASSERT_TRUE(got) << "no copy on ixv1 for idx " << idx;
        expect_sent(*got, switch_ep(), host_ep(0), 0xd000, ROCE_MIN_IMM_FRAME + n * 4);
        EXPECT_EQ(parse_out(*got).vals, ramp(n, 40 + int32_t(idx), 9));
        EXPECT_EQ(parse_out(*got).psn, child_tx_base(0) + idx);
    }
    EXPECT_EQ(stat(INCXDP_STAT_EGRESS_TX), 3u);
    EXPECT_EQ(stat(INCXDP_STAT_ROCE_BAD_CSUM), 1u);
}

TEST_F(RoceEgressTest, ReduceCopyIsCutForAChildWithoutTheRootRank) {
    install_ports(true);
    const uint32_t op = imm(1, ROCE_PRIM_REDUCE, ROCE_OPR_MAX); // root rank 1, behind lo
    ASSERT_EQ(run(from_host(1, 0, op, ramp(128, 5))).stat, INCXDP_STAT_ROCE_ABSORBED);
    run_live(from_host(0, 0, op, ramp(128, 9)), v0_);
    auto got = capture();
    ASSERT_TRUE(got);
    expect_sent(*got, switch_ep(), host_ep(0), 0xd000, ROCE_MIN_IMM_FRAME);
    EXPECT_EQ(parse_out(*got).psn, child_tx_base(0));
    EXPECT_EQ(parse_out(*got).word, op);
    EXPECT_TRUE(parse_out(*got).vals.empty()) << "bpf_xdp_adjust_tail in the devmap program";
}

TEST_F(RoceEgressTest, UpFramePassesTheEgressProgramUnchanged) {
    install_ports(false);
    // The parent sits behind ixv0 too, where incxdp_ports sends the up frame.
    auto p = conn(kParentConnQpn);
    p.ifindex = v0_;
    put_conn(kParentConnQpn, p);
    const uint32_t op = allreduce(ROCE_OPR_MIN);
    ASSERT_EQ(run(from_host(1, 0, op, ramp(32, 100))).stat, INCXDP_STAT_ROCE_ABSORBED);
    auto want = from_host(0, 0, op, ramp(32, 50, 5));
    run_live(want, v0_);
    auto got = capture();
    ASSERT_TRUE(got);
    expect_sent(*got, switch_up_ep(), parent_ep(), switch_up_ep().port,
                ROCE_MIN_IMM_FRAME + 32 * 4);
    auto o = parse_out(*got);
    EXPECT_EQ(o.dqpn, kParentQpn);
    EXPECT_EQ(o.psn, kParentTxBase);
    for (size_t i = 0; i < 32; i++)
        EXPECT_EQ(o.vals[i], std::min(100 + int32_t(i), 50 + 5 * int32_t(i)));
    EXPECT_EQ(stat(INCXDP_STAT_EGRESS_TX), 0u) << "not a multicast copy";
    EXPECT_EQ(stat(INCXDP_STAT_EGRESS_DROP), 0u);
}

} // namespace
} // namespace incxdp::test::roce
