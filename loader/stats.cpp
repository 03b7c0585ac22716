// SPDX-License-Identifier: BSD-2-Clause
#include "pinned_maps.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <iterator>
#include <cerrno>
#include <vector>

namespace incxdp::ctl {

namespace {
// A plain array, so that a counter added to maps.h without a name here
// fails the size check below.
constexpr const char *kNames[] = {
    "pass",      "malformed",    "unknown_sender", "wrong_port",    "bad_job",       "bad_slot",
    "mismatch",  "consumed",     "completed",      "retx_unicast",  "retx_drop",
    "stale",
    // RoCEv2 (docs/ROCE.md §3)
    "roce_malformed", "roce_bad_icrc", "roce_unknown_qp", "roce_absorbed", "roce_ack", "roce_nak",
    "roce_ahead_drop", "roce_up", "roce_down", "roce_dup_ack", "roce_dup_result", "roce_dup_up",
    "roce_stale", "roce_mismatch", "roce_peer_ack", "roce_peer_nak",
    "roce_peer_resend", "roce_late_ack",
    "chaos", // taken by `incxdp chaos --xdp` (docs/CHAOS.md)
    "too_long", // in more than one XDP buffer: a frame above ~3.5 KB on a jumbo link
    "roce_bad_csum", // a nonzero UDP checksum that does not add up (instead of the ICRC check)
    "redirect_fail", "egress_tx", "egress_drop",
    "pulled", // arrived in fragments (a driver's small receive buffers), made linear
};
static_assert(std::size(kNames) == INCXDP_STAT_MAX, "every counter in maps.h needs a name here");
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
