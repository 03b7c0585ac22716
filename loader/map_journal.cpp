// SPDX-License-Identifier: BSD-2-Clause
// map_journal.h: the rollback journal and the shared slot-pool steps.
#include "map_journal.h"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace incxdp::ctl {

int Journal::keep(Fd fd) {
    kept_.push_back(std::move(fd));
    return kept_.back().get();
}

void Journal::rollback() {
    if (committed_)
        return;
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (it->old)
            bpf_map_update_elem(it->fd, it->key.data(), it->old->data(), BPF_ANY);
        else
            bpf_map_delete_elem(it->fd, it->key.data());
    }
    entries_.clear();
}

uint32_t choose_pool(const PinnedMaps &m, uint32_t job, uint32_t planned, uint32_t size) {
    std::vector<std::pair<uint32_t, uint32_t>> used;
    for (const auto &[id, j] : m.active_jobs())
        if (id != job)
            used.emplace_back(j.pool_base, j.pool_base + j.pool_size);
    std::sort(used.begin(), used.end());
    const uint32_t total = m.slot_entries();
    auto free_at = [&](uint32_t b) {
        if (uint64_t{b} + size > total)
            return false;
        for (const auto &[ub, ue] : used)
            if (b < ue && ub < b + size)
                return false;
        return true;
    };
    if (free_at(planned))
        return planned;
    uint32_t at = 0;
    for (const auto &[ub, ue] : used) {
        if (free_at(at))
            return at;
        at = std::max(at, ue);
    }
    if (free_at(at))
        return at;
    throw CtlError(fmt::format("the job needs {} slots but no free range of that size is left "
                               "of the engine's {} (planned range {}..{}); free slots with "
                               "'incxdp job del', or load the engine with a larger --slots",
                               size, total, planned, planned + size - 1));
}

void zero_slots(const PinnedMaps &m, uint32_t base, uint32_t size) {
    auto zero = std::make_unique<incxdp_slot>();
    std::memset(zero.get(), 0, sizeof(incxdp_slot));
    for (uint32_t i = base; i < base + size; i++)
        if (bpf_map_update_elem(m.slots.get(), &i, zero.get(), BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("cannot reset slot {}", i), errno));
}

} // namespace incxdp::ctl
