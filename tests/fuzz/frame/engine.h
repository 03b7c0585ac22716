// SPDX-License-Identifier: BSD-2-Clause
// The engine under test: incxdp_switch (and the hosts' incxdp_pass) loaded
// privately, as tests/bpf/engine_fixture.h does it (no pins, no attach, so a
// running engine is never touched), with the fuzz world installed in its
// maps. Reads counters and the whole slot array in one syscall each.
#pragma once

#include "world.h"

#include <incxdp/maps.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct incxdp_switch;
struct incxdp_pass;

namespace incxdp::fuzz {

struct EngineError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct RunOut {
    int verdict = -1;
    Bytes out;
};

// Counter values summed over CPUs, index = enum incxdp_stat.
using Counters = std::array<uint64_t, INCXDP_STAT_MAX>;

class Engine {
  public:
    // percpu_stats: keep incxdp_stats the per-CPU array the engine defines
    // and read it with a batch lookup per frame. Otherwise it becomes a
    // plain mmapped array before load (the program is unchanged; test runs
    // are sequential, so no increment is lost), which halves the cost of a
    // frame.
    explicit Engine(bool percpu_stats); // throws EngineError (with errno text)
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    RunOut run_switch(const Bytes &frame);
    RunOut run_pass(const Bytes &frame);
    // bpf_prog_test_run refuses BPF_XDP_DEVMAP programs (EINVAL), so the
    // egress rewrite is covered by tests/e2e; this asks the kernel again,
    // and returns the errno (0 if a kernel ever allows it).
    int probe_egress();
    Counters counters();
    // All kSlotEntries slots (the lock word reads as 0).
    void read_slots(std::vector<incxdp_slot> &out);
    // Zeroes one job's pool, as `incxdp job reset` does.
    void reset_pool(const JobDef &j);

  private:
    RunOut run(int prog_fd, const Bytes &frame);

    incxdp_switch *sw_ = nullptr;
    incxdp_pass *pass_ = nullptr;
    int sw_fd_ = -1, pass_fd_ = -1, slots_fd_ = -1, stats_fd_ = -1;
    int ncpu_ = 1;
    bool percpu_stats_ = true;
    volatile const uint64_t *stats_mem_ = nullptr; // mmapped incxdp_stats
    size_t stats_mem_len_ = 0;
    std::vector<uint32_t> keys_;
    std::vector<uint64_t> stat_vals_;
};

} // namespace incxdp::fuzz
