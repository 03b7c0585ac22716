// SPDX-License-Identifier: BSD-2-Clause
#include "engine.h"

#include "incxdp_pass.skel.h"
#include "incxdp_switch.skel.h"

#include <incxdp/xdp_frags.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace incxdp::fuzz {
namespace {

std::string err(const std::string &what) {
    return what + ": " + std::strerror(errno);
}

void update(int fd, const void *k, const void *v, const char *what) {
    if (bpf_map_update_elem(fd, k, v, BPF_ANY) != 0)
        throw EngineError(err(std::string("update ") + what));
}

} // namespace

Engine::Engine(bool percpu_stats) : percpu_stats_(percpu_stats) {
    sw_ = incxdp_switch__open();
    if (!sw_)
        throw EngineError(err("open incxdp_switch"));
    // Private, unpinned maps: the fuzzer must not touch a running engine.
    bpf_map *m;
    bpf_object__for_each_map(m, sw_->obj) bpf_map__set_pin_path(m, nullptr);
    bpf_map__set_max_entries(sw_->maps.incxdp_slots, kSlotEntries);
    sw_->rodata->native_port = kNativePort;
    if (!percpu_stats_) {
        bpf_map__set_type(sw_->maps.incxdp_stats, BPF_MAP_TYPE_ARRAY);
        bpf_map__set_map_flags(sw_->maps.incxdp_stats, BPF_F_MMAPABLE);
    }
    // As `incxdp load` in driver mode: what is past 3520 B comes in fragments.
    if (set_xdp_frags({sw_->progs.incxdp_ingress, sw_->progs.incxdp_egress_rewrite}, true) != 0)
        throw EngineError(err("set xdp.frags on incxdp_switch"));
    if (incxdp_switch__load(sw_) != 0)
        throw EngineError(err("load incxdp_switch"));
    pass_ = incxdp_pass__open_and_load();
    if (!pass_)
        throw EngineError(err("load incxdp_pass"));
    sw_fd_ = bpf_program__fd(sw_->progs.incxdp_ingress);
    pass_fd_ = bpf_program__fd(pass_->progs.incxdp_pass);
    slots_fd_ = bpf_map__fd(sw_->maps.incxdp_slots);
    stats_fd_ = bpf_map__fd(sw_->maps.incxdp_stats);
    ncpu_ = libbpf_num_possible_cpus();
    if (ncpu_ <= 0)
        throw EngineError("libbpf_num_possible_cpus failed");
    keys_.resize(std::max<size_t>(kSlotEntries, INCXDP_STAT_MAX));
    stat_vals_.resize(size_t(INCXDP_STAT_MAX) * size_t(ncpu_));

    if (!percpu_stats_) {
        stats_mem_len_ = size_t(sysconf(_SC_PAGESIZE));
        void *p = mmap(nullptr, stats_mem_len_, PROT_READ, MAP_SHARED, stats_fd_, 0);
        if (p == MAP_FAILED)
            throw EngineError(err("mmap incxdp_stats"));
        stats_mem_ = static_cast<const uint64_t *>(p);
    }

    int jobs_fd = bpf_map__fd(sw_->maps.incxdp_jobs);
    for (const auto &j : kJobs) {
        incxdp_job e = job_entry(j);
        update(jobs_fd, &j.id, &e, "incxdp_jobs");
    }
    int workers_fd = bpf_map__fd(sw_->maps.incxdp_workers);
    for (const auto &s : registered_senders()) {
        incxdp_worker_key k{};
        std::memcpy(k.mac, s.ep.mac.data(), 6);
        k.ip = htonl(s.ep.ip);
        k.port = htons(s.ep.port);
        incxdp_worker v{s.job, s.rank, 0, s.ifindex};
        update(workers_fd, &k, &v, "incxdp_workers");
    }
}

Engine::~Engine() {
    if (stats_mem_)
        munmap(const_cast<uint64_t *>(stats_mem_), stats_mem_len_);
    if (pass_)
        incxdp_pass__destroy(pass_);
    if (sw_)
        incxdp_switch__destroy(sw_);
}

RunOut Engine::run(int prog_fd, const Bytes &frame) {
    RunOut r;
    r.out.resize(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.out.data(),
                .data_size_in = static_cast<__u32>(frame.size()),
                .data_size_out = static_cast<__u32>(r.out.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(prog_fd, &opts) != 0)
        throw EngineError(
            err("bpf_prog_test_run_opts (" + std::to_string(frame.size()) + " B frame)"));
    r.verdict = static_cast<int>(opts.retval);
    r.out.resize(opts.data_size_out);
    return r;
}

RunOut Engine::run_switch(const Bytes &frame) {
    return run(sw_fd_, frame);
}

RunOut Engine::run_pass(const Bytes &frame) {
    return run(pass_fd_, frame);
}

int Engine::probe_egress() {
    Bytes f(64, 0);
    f[12] = 0x08;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f.data(),
                .data_size_in = static_cast<__u32>(f.size()), .repeat = 1);
    if (bpf_prog_test_run_opts(bpf_program__fd(sw_->progs.incxdp_egress_rewrite), &opts) != 0)
        return errno;
    return 0;
}

Counters Engine::counters() {
    Counters c{};
    if (stats_mem_) {
        for (size_t s = 0; s < INCXDP_STAT_MAX; s++)
            c[s] = stats_mem_[s];
        return c;
    }
    // One batch lookup for every counter on every CPU. An array answers
    // ENOENT once the batch reaches its end.
    __u32 count = INCXDP_STAT_MAX, out_batch = 0;
    LIBBPF_OPTS(bpf_map_batch_opts, o);
    int rc = bpf_map_lookup_batch(stats_fd_, nullptr, &out_batch, keys_.data(), stat_vals_.data(),
                                  &count, &o);
    if ((rc != 0 && errno != ENOENT) || count != INCXDP_STAT_MAX)
        throw EngineError(err("batch lookup incxdp_stats"));
    for (size_t s = 0; s < INCXDP_STAT_MAX; s++)
        for (size_t cpu = 0; cpu < size_t(ncpu_); cpu++)
            c[s] += stat_vals_[s * size_t(ncpu_) + cpu];
    return c;
}

void Engine::read_slots(std::vector<incxdp_slot> &out) {
    out.resize(kSlotEntries);
    __u32 count = kSlotEntries, out_batch = 0;
    LIBBPF_OPTS(bpf_map_batch_opts, o);
    int rc =
        bpf_map_lookup_batch(slots_fd_, nullptr, &out_batch, keys_.data(), out.data(), &count, &o);
    if ((rc != 0 && errno != ENOENT) || count != kSlotEntries)
        throw EngineError(err("batch lookup incxdp_slots"));
}

void Engine::reset_pool(const JobDef &j) {
    auto zero = std::make_unique<incxdp_slot>();
    std::memset(zero.get(), 0, sizeof(incxdp_slot));
    for (uint32_t i = j.pool_base; i < j.pool_base + j.pool_size; i++)
        update(slots_fd_, &i, zero.get(), "incxdp_slots");
}

} // namespace incxdp::fuzz
