// SPDX-License-Identifier: BSD-2-Clause
// Counters in per-CPU maps of __u64 (the engine's incxdp_stats, the
// injector's chaos_stats, incxdp_xsk_stats), summed over CPUs as the
// control plane reads them.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace incxdp::test {

// The sum over possible CPUs of the value at `key`; a failed lookup fails
// the test and counts 0.
inline uint64_t percpu_sum(int map_fd, uint32_t key) {
    const int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> v(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    EXPECT_EQ(bpf_map_lookup_elem(map_fd, &key, v.data()), 0) << "per-CPU map key " << key;
    uint64_t sum = 0;
    for (uint64_t x : v)
        sum += x;
    return sum;
}

} // namespace incxdp::test
