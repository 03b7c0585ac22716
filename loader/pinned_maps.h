// SPDX-License-Identifier: BSD-2-Clause
// The engine's maps reopened from their pins by a process that did not load
// them (job, stats, status, unload).
#pragma once

#include <incxdp/ctl.h>
#include <incxdp/util/fd.h>

#include <bpf/bpf.h>

#include <map>
#include <string>
#include <vector>

namespace incxdp::ctl {

using util::Fd;

// The network namespace of this process, as "net:[inode]" identifies it.
struct NetnsId {
    uint64_t dev = 0, ino = 0;
    static NetnsId current();
    bool operator==(const NetnsId &) const = default;
    std::string str() const;
};

struct PinnedMaps {
    std::string dir;
    Fd slots, jobs, workers, egress, ports, stats, info;

    // Throws CtlError("incxdp is not loaded ...") if the pins are missing.
    static PinnedMaps open(const std::string &dir);
    // True if the directory holds incxdp's pins.
    static bool present(const std::string &dir);
    uint32_t slot_entries() const;
    // Every active job in incxdp_jobs, by id.
    std::map<uint32_t, incxdp_job> active_jobs() const;
    // Where the engine was loaded (incxdp_info).
    NetnsId loaded_in() const;
    // Throws CtlError naming both namespaces unless this process is in the
    // one the engine was loaded in: its ports' ifindexes mean nothing here.
    void require_same_netns(const std::string &action) const;
};

// Every key of a map, collected first: deleting while walking with
// bpf_map_get_next_key would restart the walk.
template <typename K> std::vector<K> map_keys(int fd)
{
    std::vector<K> keys;
    K key{}, next{};
    K *prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
        keys.push_back(next);
        key = next;
        prev = &key;
    }
    return keys;
}

std::string map_pin_path(const std::string &dir, const char *map_name);

// A map of the engine pinned in `dir` that engines built before `feature`
// lack: that case is its own error ("built without <feature>; unload it").
Fd open_engine_map(const std::string &dir, const char *name, const char *feature);
// Its incxdp_parents (every tree job's parent link, native or RoCE).
Fd open_parents_map(const std::string &dir);

// mkdir -p of a pin directory (the default ones are two levels below
// bpffs); throws CtlError naming the level that failed.
void make_pin_dirs(const std::string &dir);
// "what failed: strerror (errno)"
std::string errno_msg(const std::string &what, int err);
// Mounts bpffs on /sys/fs/bpf if the pin directory lives there and it is not.
void ensure_bpffs(const std::string &pin_dir);

} // namespace incxdp::ctl
