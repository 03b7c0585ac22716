// SPDX-License-Identifier: BSD-2-Clause
// Per-frame cost of the ingress program as the kernel's BPF statistics see
// it (run_time_ns / run_cnt, what `bpftool prog show` prints with
// kernel.bpf_stats_enabled=1): a one-switch star's native aggregation and
// a RoCEv2 root's, each a steady stream of complete rounds. Prints the
// numbers; asserts only that the frames took the paths they are meant to.
#include "roce_fixture.h"

#include <cstdio>

namespace incxdp::test::roce {
namespace {

constexpr uint32_t kStarJob = 9;
constexpr uint32_t kStarBase = 40, kStarSlots = 8;
constexpr uint32_t kRounds = 20000; // two frames each
constexpr size_t kElems = 256;

class FrameCost : public RoceEngineTest {
  protected:
    struct Stats {
        uint64_t ns = 0, cnt = 0;
    };

    Stats stats() {
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        EXPECT_EQ(bpf_obj_get_info_by_fd(prog_fd_, &info, &len), 0) << strerror(errno);
        return {info.run_time_ns, info.run_cnt};
    }

    int run_once(const Bytes &frame) {
        Bytes out(frame.size() + 256);
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(out.size()), .repeat = 1);
        EXPECT_EQ(bpf_prog_test_run_opts(prog_fd_, &opts), 0) << strerror(errno);
        return static_cast<int>(opts.retval);
    }

    void install_star() {
        incxdp_job j{};
        j.active = 1;
        j.nworkers = 2;
        j.pool_base = kStarBase;
        j.pool_size = kStarSlots;
        j.max_elems = INCXDP_MAX_ELEMS;
        j.switch_ip = htonl(0x0a4d00fe);
        uint32_t id = kStarJob;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
        for (uint16_t r = 0; r < 2; r++) {
            incxdp_worker_key k{};
            std::memcpy(k.mac, star_ep(r).mac.data(), 6);
            k.ip = htonl(star_ep(r).ip);
            k.port = htons(star_ep(r).port);
            incxdp_worker v{kStarJob, r, 0, kLo};
            ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_workers), &k, &v, BPF_ANY), 0);
        }
    }

    static Endpoint star_ep(uint16_t r) {
        return {{0x02, 0x49, 0x58, 0x07, uint8_t(r), 0x00}, 0x0a4d0101u + r, 4000};
    }

    static Bytes star_frame(uint16_t r, uint32_t i) {
        NativeFields f;
        f.job = kStarJob;
        f.rank = r;
        f.nworkers = 2;
        f.round = i;
        f.slot = uint16_t((i % kStarSlots) | ((i / kStarSlots) & 1 ? 0x8000 : 0));
        Endpoint sw{{0x02, 0x49, 0x58, 0x00, 0x00, 0x00}, 0x0a4d00fe, INCXDP_UDP_PORT};
        return udp_frame(star_ep(r), sw, native_payload(f, ramp(kElems, int32_t(i + r))));
    }
};

TEST_F(FrameCost, StarNativeAndRoceRoot) {
    // Statistics on while the fd is open (kernel.bpf_stats_enabled without
    // leaving the sysctl changed).
    int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    ASSERT_GE(stats_fd, 0) << "bpf_enable_stats: " << strerror(errno);
    install_star();
    install(2, /*root*/ true);
    ASSERT_FALSE(HasFatalFailure());

    std::vector<std::pair<Bytes, Bytes>> star, roce;
    for (uint32_t i = 0; i < kRounds; i++) {
        star.emplace_back(star_frame(0, i), star_frame(1, i));
        roce.emplace_back(from_host(0, i, allreduce(ROCE_OPR_SUM), ramp(kElems, int32_t(i))),
                          from_host(1, i, allreduce(ROCE_OPR_SUM), ramp(kElems, 1)));
    }
    auto measure = [&](const char *what, const std::vector<std::pair<Bytes, Bytes>> &frames) {
        uint64_t redirected = 0;
        Stats a = stats();
        for (const auto &[first, completing] : frames) {
            run_once(first);
            redirected += run_once(completing) == XDP_REDIRECT;
        }
        Stats b = stats();
        EXPECT_EQ(redirected, frames.size()) << what << ": every round must complete";
        std::printf("%-34s %8.1f ns/frame over %llu frames (%u elements)\n", what,
                    double(b.ns - a.ns) / double(b.cnt - a.cnt),
                    (unsigned long long)(b.cnt - a.cnt), unsigned(kElems));
    };
    {
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        ASSERT_EQ(bpf_obj_get_info_by_fd(prog_fd_, &info, &len), 0) << strerror(errno);
        std::printf("incxdp_ingress: %u instructions, %u walked by the verifier\n",
                    info.xlated_prog_len / 8, info.verified_insns);
    }
    measure("star native (absorb + complete)", star);
    measure("RoCEv2 root (absorb + complete)", roce);
    close(stats_fd);
}

} // namespace
} // namespace incxdp::test::roce
