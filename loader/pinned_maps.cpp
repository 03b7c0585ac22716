// SPDX-License-Identifier: BSD-2-Clause
#include "pinned_maps.h"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace incxdp::ctl {

std::string default_pin_dir()
{
    const char *env = std::getenv("INCXDP_PIN_DIR");
    return env && *env ? env : INCXDP_PIN_DIR;
}

std::string errno_msg(const std::string &what, int err)
{
    if (err < 0)
        err = -err;
    return fmt::format("{}: {} ({})", what, std::strerror(err), err);
}

std::string map_pin_path(const std::string &dir, const char *map_name)
{
    return dir + "/" + map_name;
}

void ensure_bpffs(const std::string &pin_dir)
{
    const std::string root = "/sys/fs/bpf";
    if (pin_dir.rfind(root, 0) != 0)
        return;
    struct statfs st {};
    if (statfs(root.c_str(), &st) == 0 && st.f_type == BPF_FS_MAGIC)
        return;
    // Fresh machines (and containers) may not have bpffs mounted; pinning
    // needs it, as do libxdp's dispatcher pins.
    if (mount("bpf", root.c_str(), "bpf", 0, "mode=0700") != 0)
        throw CtlError(errno_msg("cannot mount bpffs on " + root, errno));
}

Fd open_engine_map(const std::string &dir, const char *name, const char *feature)
{
    const std::string path = map_pin_path(dir, name);
    const int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        throw CtlError(errno == ENOENT
                           ? fmt::format("the engine pinned in {} has no map {}: it was built "
                                         "without {}; unload it and load this version",
                                         dir, name, feature)
                           : errno_msg("cannot open pinned map " + path, errno));
    return Fd(fd);
}

Fd open_parents_map(const std::string &dir)
{
    return open_engine_map(dir, INCXDP_MAP_PARENTS, "trees");
}

static Fd open_pin(const std::string &dir, const char *name)
{
    std::string path = map_pin_path(dir, name);
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        throw CtlError(errno_msg("cannot open pinned map " + path, errno));
    return Fd(fd);
}

bool PinnedMaps::present(const std::string &dir)
{
    return ::access(map_pin_path(dir, INCXDP_MAP_PORTS).c_str(), F_OK) == 0;
}

PinnedMaps PinnedMaps::open(const std::string &dir)
{
    ensure_bpffs(dir);
    if (!present(dir))
        throw CtlError(fmt::format("incxdp is not loaded (no pinned maps in {}); run 'incxdp load' first", dir));
    PinnedMaps m;
    m.dir = dir;
    m.slots = open_pin(dir, INCXDP_MAP_SLOTS);
    m.jobs = open_pin(dir, INCXDP_MAP_JOBS);
    m.workers = open_pin(dir, INCXDP_MAP_WORKERS);
    m.egress = open_pin(dir, INCXDP_MAP_EGRESS);
    m.ports = open_pin(dir, INCXDP_MAP_PORTS);
    m.stats = open_pin(dir, INCXDP_MAP_STATS);
    m.info = open_pin(dir, INCXDP_MAP_INFO);
    return m;
}

NetnsId NetnsId::current()
{
    struct stat st {};
    if (::stat("/proc/self/ns/net", &st) != 0)
        throw CtlError(errno_msg("cannot identify this network namespace (/proc/self/ns/net)", errno));
    return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

std::string NetnsId::str() const
{
    return fmt::format("net:[{}]", ino);
}

NetnsId PinnedMaps::loaded_in() const
{
    uint32_t key = 0;
    incxdp_info v{};
    if (bpf_map_lookup_elem(info.get(), &key, &v) != 0)
        throw CtlError(errno_msg("cannot read map " INCXDP_MAP_INFO, errno));
    return {v.netns_dev, v.netns_ino};
}

void PinnedMaps::require_same_netns(const std::string &action) const
{
    NetnsId here = NetnsId::current(), there = loaded_in();
    if (here != there)
        throw CtlError(fmt::format("cannot {}: the incxdp engine pinned in {} was loaded in network namespace {}, "
                                   "this is {}; run the command there (nsenter --net=/var/run/netns/NAME) "
                                   "or give another --pin-dir",
                                   action, dir, there.str(), here.str()));
}

std::map<uint32_t, incxdp_job> PinnedMaps::active_jobs() const
{
    std::map<uint32_t, incxdp_job> out;
    for (uint32_t id = 0; id < INCXDP_MAX_JOBS; id++) {
        incxdp_job j{};
        if (bpf_map_lookup_elem(jobs.get(), &id, &j) == 0 && j.active)
            out[id] = j;
    }
    return out;
}

uint32_t PinnedMaps::slot_entries() const
{
    struct bpf_map_info info {};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(slots.get(), &info, &len) != 0)
        throw CtlError(errno_msg("cannot query map " INCXDP_MAP_SLOTS, errno));
    return info.max_entries;
}

void make_pin_dirs(const std::string &dir) {
    for (size_t at = 1; at != std::string::npos;) {
        at = dir.find('/', at + 1);
        const std::string part = dir.substr(0, at);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
            throw CtlError(errno_msg("cannot create pin directory " + part, errno));
    }
}

} // namespace incxdp::ctl
