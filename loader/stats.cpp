// SPDX-License-Identifier: BSD-2-Clause
#include "pinned_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <iterator>
#include <cerrno>
#include <vector>

namespace incxdp::ctl {

namespace {
// Generated from the counter list in maps.h (INCXDP_STATS), as the enum is,
// so a name cannot drift from its index.
#define INCXDP_STAT_NAME_(NAME, name, what) #name,
constexpr const char *kNames[] = {INCXDP_STATS(INCXDP_STAT_NAME_)};
#undef INCXDP_STAT_NAME_
static_assert(std::size(kNames) == INCXDP_STAT_MAX, "INCXDP_STATS and enum incxdp_stat disagree");
} // namespace

const char *stat_name(enum incxdp_stat s)
{
    return s < INCXDP_STAT_MAX ? kNames[s] : "?";
}

std::map<std::string, uint64_t> read_stats(const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0)
        throw CtlError(errno_msg("cannot count possible CPUs", ncpu));
    std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
    std::map<std::string, uint64_t> out;
    for (uint32_t i = 0; i < INCXDP_STAT_MAX; i++) {
        if (bpf_map_lookup_elem(m.stats.get(), &i, per_cpu.data()) != 0)
            throw CtlError(errno_msg("cannot read map " INCXDP_MAP_STATS, errno));
        uint64_t sum = 0;
        for (uint64_t v : per_cpu)
            sum += v;
        out[kNames[i]] = sum;
        if (i < INCXDP_STAT_INGRESS_VERDICTS)
            out["rx"] += sum; // every ingress frame gets exactly one verdict
    }
    return out;
}

void reset_stats(const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> zero(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    for (uint32_t i = 0; i < INCXDP_STAT_MAX; i++)
        if (bpf_map_update_elem(m.stats.get(), &i, zero.data(), BPF_ANY) != 0)
            throw CtlError(errno_msg("cannot reset map " INCXDP_MAP_STATS, errno));
}

} // namespace incxdp::ctl
