// SPDX-License-Identifier: BSD-2-Clause
// The one rollback mechanism of the control plane: every map entry an
// apply changes is saved first and restored, in reverse, unless the whole
// apply commits. Also the two slot-pool steps every applier shares.
#pragma once

#include "pinned_maps.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace incxdp::ctl {

class Journal {
  public:
    Journal() = default;
    Journal(const Journal &) = delete;
    Journal &operator=(const Journal &) = delete;
    ~Journal() { rollback(); }

    /// Call before changing (fd, key): its current value (or its absence)
    /// is what a rollback restores. The fd must stay open until commit or
    /// rollback: pass it to keep() if its owner goes away earlier (an
    /// apply spanning several engines).
    template <typename K, typename V> void save(int fd, const K &key) {
        Entry e{fd, bytes(key), std::nullopt};
        V v{};
        if (bpf_map_lookup_elem(fd, &key, &v) == 0)
            e.old = bytes(v);
        entries_.push_back(std::move(e));
    }
    /// Keeps a map open for as long as the journal may need it; returns its fd.
    int keep(Fd fd);
    /// Restores every saved entry, newest first, unless committed.
    void rollback();
    void commit() { committed_ = true; }

  private:
    struct Entry {
        int fd;
        std::vector<uint8_t> key;
        std::optional<std::vector<uint8_t>> old;
    };
    template <typename T> static std::vector<uint8_t> bytes(const T &v) {
        const auto *p = reinterpret_cast<const uint8_t *>(&v);
        return {p, p + sizeof(T)};
    }
    std::vector<Entry> entries_;
    std::vector<Fd> kept_;
    bool committed_ = false;
};

/// A free range of `size` slots in the engine's slot array, ignoring job
/// `job`'s own pool: `planned` if it is free, else the first free one.
/// Throws CtlError saying how many are free.
uint32_t choose_pool(const PinnedMaps &m, uint32_t job, uint32_t planned, uint32_t size);

/// Zeroes slots base .. base + size - 1 (a pool's state before a run).
void zero_slots(const PinnedMaps &m, uint32_t base, uint32_t size);

} // namespace incxdp::ctl
