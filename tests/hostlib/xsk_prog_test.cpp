// SPDX-License-Identifier: BSD-2-Clause
// The hosts' incxdp_xsk program on frames that arrive in pieces: a NIC
// whose receive buffers are smaller than a frame (virtio_net's mergeable
// buffers, i40e/ice's 3 KB ones) hands an xdp.frags program a switch result
// in fragments, even its headers, and the AF_XDP socket (no XDP_USE_SG)
// takes only whole frames. bpf_prog_test_run builds such frames; the
// program runs as if on a veth of a private namespace (root).
#include "incxdp_xsk.skel.h"

#include <incxdp/xdp_frags.h>
#include <incxdp/xsk.h>

#include "../common/frames.h"
#include "../common/kernel_btf.h"
#include "../common/percpu.h"
#include "../common/private_netns.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>

namespace incxdp::test {
namespace {

constexpr uint16_t kPort = 4791;
const Endpoint kSwitch{{0x02, 0, 0, 0, 0, 0x01}, 0x0a620001, kPort}; // 10.98.0.1
const Endpoint kHost{{0x02, 0, 0, 0, 0, 0x02}, 0x0a620002, kPort};   // 10.98.0.2

class XskProgram : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        if (error_ = enter_private_netns(); error_.empty())
            error_ = add_veth_pair("xk0", "xk1");
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs and making namespaces needs root";
        ASSERT_TRUE(error_.empty()) << error_;
        ifindex_ = if_nametoindex("xk0");
        ASSERT_NE(ifindex_, 0u);
        skel_ = incxdp_xsk__open();
        ASSERT_NE(skel_, nullptr) << "open incxdp_xsk: " << std::strerror(errno);
        skel_->rodata->xsk_local_ip = htonl(kHost.ip);
        skel_->rodata->xsk_local_port = htons(kHost.port);
        skel_->rodata->xsk_tx_ifindex = ifindex_;
        // As the transport loads it in driver mode.
        ASSERT_EQ(set_xdp_frags({skel_->progs.incxdp_xsk}, true), 0);
        ASSERT_EQ(incxdp_xsk__load(skel_), 0) << "load incxdp_xsk: " << std::strerror(errno);
    }

    void TearDown() override { incxdp_xsk__destroy(skel_); }

    // The verdict of one frame arriving on xk0, its first `linear` bytes in
    // the buffer's linear part and the rest in fragments.
    int run(const Bytes &frame, size_t linear) {
        Bytes out(frame.size() + 256);
        xdp_md ctx{};
        ctx.data_end = static_cast<__u32>(linear);
        ctx.ingress_ifindex = ifindex_;
        LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(), .data_out = out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(out.size()), .ctx_in = &ctx,
                    .ctx_size_in = sizeof(ctx), .repeat = 1);
        EXPECT_EQ(bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.incxdp_xsk), &o), 0)
            << std::strerror(errno);
        return int(o.retval);
    }

    uint64_t stat(incxdp_xsk_stat s) { return percpu_sum(bpf_map__fd(skel_->maps.incxdp_xsk_stats), s); }

    static inline std::string error_;
    uint32_t ifindex_ = 0;
    incxdp_xsk *skel_ = nullptr;
};

// A 2 KB result whose IPv4 header is cut by the end of the first buffer is
// still recognised as the transport's: pulled whole and steered to the
// socket (none here, so passed and counted no_socket). Other traffic in
// pieces is passed as before.
TEST_F(XskProgram, AResultInPiecesIsPulledAndSteeredToTheSocket) {
    if (!kernel_has_func("bpf_xdp_pull_data"))
        GTEST_SKIP() << "this kernel has no bpf_xdp_pull_data (Linux 6.18)";
    const Bytes result = udp_frame(kSwitch, kHost, Bytes(2048 + 16, 0x5c));
    EXPECT_EQ(run(result, 24), XDP_PASS);
    EXPECT_EQ(stat(INCXDP_XSK_NO_SOCKET), 1u);
    EXPECT_EQ(stat(INCXDP_XSK_PULLED), 1u);
    EXPECT_EQ(stat(INCXDP_XSK_PASSED), 0u);

    Endpoint other = kHost;
    other.port = 9999;
    EXPECT_EQ(run(udp_frame(kSwitch, other, Bytes(2048, 0x11)), 24), XDP_PASS);
    EXPECT_EQ(stat(INCXDP_XSK_PASSED), 1u);
    EXPECT_EQ(stat(INCXDP_XSK_PULLED), 2u);
    EXPECT_EQ(stat(INCXDP_XSK_NO_SOCKET), 1u);
}

} // namespace
} // namespace incxdp::test
