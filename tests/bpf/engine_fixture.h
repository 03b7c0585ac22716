// SPDX-License-Identifier: BSD-2-Clause
// Loads the switch object without attaching or pinning it, installs a job
// directly into its maps, and runs crafted frames through the ingress
// program with bpf_prog_test_run_opts.
#pragma once

#include "../common/frames.h"
#include "../common/percpu.h"
#include "incxdp_switch.skel.h"

#include <incxdp/xdp_frags.h>

#include <incxdp/maps.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>

namespace incxdp::test {

constexpr uint32_t kJob = 7;
constexpr uint32_t kPoolBase = 10;
constexpr uint32_t kPoolSize = 8;
constexpr uint32_t kSwitchIp = 0x0a4d00fe; // 10.77.0.254

inline Endpoint worker_ep(uint16_t rank)
{
    return Endpoint{{0x02, 0x49, 0x58, 0x01, uint8_t(rank), 0x00}, 0x0a4d0001u + rank, 4000};
}

inline Endpoint switch_ep(uint16_t port)
{
    return Endpoint{{0x02, 0x49, 0x58, 0x00, 0x00, 0x00}, kSwitchIp, port};
}

struct RunResult {
    int verdict = -1;
    Bytes out;
};

// The switch object loaded with private, unpinned maps (a test must not
// touch a running engine) and `slots` slot entries; nullptr after a failed
// ASSERT. As `incxdp load` in driver mode: frames above one buffer come in
// fragments.
inline void open_private_switch(incxdp_switch *&skel, uint32_t slots = 64)
{
    skel = incxdp_switch__open();
    ASSERT_NE(skel, nullptr) << "open incxdp_switch: " << strerror(errno);
    bpf_map *m;
    bpf_object__for_each_map(m, skel->obj) bpf_map__set_pin_path(m, nullptr);
    bpf_map__set_max_entries(skel->maps.incxdp_slots, slots);
    ASSERT_EQ(set_xdp_frags({skel->progs.incxdp_ingress, skel->progs.incxdp_egress_rewrite}, true), 0);
    ASSERT_EQ(incxdp_switch__load(skel), 0) << "load incxdp_switch: " << strerror(errno);
}

// One frame through the ingress program. With `linear`, only the first
// `linear` bytes are in the buffer's linear part and the rest in fragments
// (a NIC's small receive buffers); with `ingress_ifindex`, the frame
// arrives on that device (else on loopback).
inline RunResult run_ingress(int prog_fd, const Bytes &frame, size_t linear = 0, uint32_t ingress_ifindex = 0)
{
    RunResult r;
    r.out.resize(frame.size() + 256);
    xdp_md ctx{};
    ctx.data_end = static_cast<__u32>(linear ? linear : frame.size());
    ctx.ingress_ifindex = ingress_ifindex;
    const bool with_ctx = linear || ingress_ifindex;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.out.data(),
                .data_size_in = static_cast<__u32>(frame.size()),
                .data_size_out = static_cast<__u32>(r.out.size()), .ctx_in = with_ctx ? &ctx : nullptr,
                .ctx_size_in = static_cast<__u32>(with_ctx ? sizeof(ctx) : 0), .repeat = 1);
    int err = bpf_prog_test_run_opts(prog_fd, &opts);
    EXPECT_EQ(err, 0) << "bpf_prog_test_run_opts: " << strerror(errno);
    r.verdict = static_cast<int>(opts.retval);
    r.out.resize(opts.data_size_out);
    return r;
}

class EngineTest : public ::testing::Test {
  protected:
    void SetUp() override
    {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs needs root";
        open_private_switch(skel_);
        if (HasFatalFailure())
            return;
        prog_fd_ = bpf_program__fd(skel_->progs.incxdp_ingress);
    }

    void TearDown() override
    {
        if (skel_)
            incxdp_switch__destroy(skel_);
    }

    int map_fd(bpf_map *m) { return bpf_map__fd(m); }

    void install_job(uint32_t nworkers, uint32_t max_elems = INCXDP_MAX_ELEMS)
    {
        incxdp_job j{};
        j.active = 1;
        j.nworkers = nworkers;
        j.pool_base = kPoolBase;
        j.pool_size = kPoolSize;
        j.max_elems = max_elems;
        j.switch_ip = htonl(kSwitchIp);
        uint32_t id = kJob;
        ASSERT_EQ(bpf_map_update_elem(map_fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
        for (uint16_t r = 0; r < nworkers; r++)
            register_worker(worker_ep(r), kJob, r);
    }

    // bpf_prog_test_run without a context runs on the loopback device.
    static constexpr uint32_t kTestIfindex = 1;

    void register_worker(const Endpoint &ep, uint32_t job, uint16_t rank, uint32_t ifindex = kTestIfindex)
    {
        incxdp_worker_key k{};
        std::memcpy(k.mac, ep.mac.data(), 6);
        k.ip = htonl(ep.ip);
        k.port = htons(ep.port);
        incxdp_worker v{job, rank, 0, ifindex};
        ASSERT_EQ(bpf_map_update_elem(map_fd(skel_->maps.incxdp_workers), &k, &v, BPF_ANY), 0);
    }

    // With `linear`, only the first `linear` bytes are in the buffer's
    // linear part and the rest in fragments (a NIC's small receive buffers).
    RunResult run(const Bytes &frame, size_t linear = 0) { return run_ingress(prog_fd_, frame, linear); }

    incxdp_slot slot(uint32_t window_slot)
    {
        auto s = std::make_unique<incxdp_slot>();
        uint32_t idx = kPoolBase + window_slot;
        EXPECT_EQ(bpf_map_lookup_elem(map_fd(skel_->maps.incxdp_slots), &idx, s.get()), 0);
        return *s;
    }

    uint64_t stat(incxdp_stat s) { return percpu_sum(map_fd(skel_->maps.incxdp_stats), s); }

    // Contributions of every rank for one SwitchML slot/set; returns the
    // run result of each.
    Bytes switchml(uint16_t rank, uint16_t pool_index, const std::vector<int32_t> &vals, int8_t e0 = 0,
                   int8_t e1 = 0, uint8_t size = 1, uint16_t dport = 0xBEE0)
    {
        return udp_frame(worker_ep(rank), switch_ep(dport),
                         switchml_payload(0, size, 3, 0xAABBCC00u + rank, pool_index, e0, e1, vals));
    }

    Bytes native(uint16_t rank, NativeFields f, const std::vector<int32_t> &vals)
    {
        f.rank = rank;
        if (!f.job)
            f.job = kJob;
        return udp_frame(worker_ep(rank), switch_ep(INCXDP_UDP_PORT), native_payload(f, vals));
    }

    incxdp_switch *skel_ = nullptr;
    int prog_fd_ = -1;
};

} // namespace incxdp::test
