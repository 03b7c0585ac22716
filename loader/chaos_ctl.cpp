// SPDX-License-Identifier: BSD-2-Clause
// incxdp chaos: attaching the fault injector (bpf/incxdp_chaos.bpf.c) to an
// interface's clsact hook, changing its rates, reading its counters. The
// topology-wide form is chaos_links.cpp.
#include <incxdp/chaos_ctl.h>

#include "chaos_xdp.h"
#include "pinned_maps.h"
#include "port_util.h"
#include "tc_filter.h"

#include "incxdp_chaos.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <memory>
#include <net/if.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace incxdp::ctl::chaos {

namespace {

using nlohmann::json;

struct SkelDeleter {
    void operator()(incxdp_chaos *s) const { incxdp_chaos__destroy(s); }
};
using SkelPtr = std::unique_ptr<incxdp_chaos, SkelDeleter>;

constexpr Hook kHooks[] = {Hook::Egress, Hook::Ingress};


const char *prog_name(Hook h) {
    return h == Hook::Egress ? "ixchaos_egress" : "ixchaos_ingress";
}

std::string where(const std::string &iface, Hook h) {
    return fmt::format("{} {}", iface, hook_name(h));
}

// The namespace of the calling thread: setns() in a forked child changes
// the thread's, which /proc/thread-self reflects.
uint64_t netns_inode() {
    struct stat st {};
    if (::stat("/proc/thread-self/ns/net", &st) != 0)
        throw CtlError(errno_msg("cannot stat /proc/thread-self/ns/net", errno));
    return st.st_ino;
}

// The name becomes a path component: refuse what no interface can be called.
void check_name(const std::string &iface) {
    if (iface.empty() || iface.size() >= IF_NAMESIZE || iface.find('/') != std::string::npos ||
        iface == "." || iface == "..")
        throw CtlError(fmt::format("invalid interface name '{}'", iface));
}

std::string iface_dir(const std::string &root, uint64_t inode, const std::string &iface) {
    check_name(iface);
    return fmt::format("{}/{}-{}", root, inode, iface);
}

std::string hook_dir(const std::string &root, uint64_t inode, const std::string &iface, Hook h) {
    return iface_dir(root, inode, iface) + "/" + hook_name(h);
}

void make_dir(const std::string &dir) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw CtlError(errno_msg("cannot create pin directory " + dir, errno));
}

bool pinned(const std::string &dir) {
    return ::access(map_pin_path(dir, INCXDP_CHAOS_MAP_CONFIG).c_str(), F_OK) == 0;
}

// Removes a hook's pins, its directory and the interface's directory once
// both hooks are gone. The maps live on while the program uses them.
void remove_pins(const std::string &hdir) {
    for (const char *name : {INCXDP_CHAOS_MAP_CONFIG, INCXDP_CHAOS_MAP_STATS})
        ::unlink(map_pin_path(hdir, name).c_str());
    ::rmdir(hdir.c_str());
    ::rmdir(hdir.substr(0, hdir.rfind('/')).c_str()); // fails while the other hook is pinned
}

Fd open_pin(const std::string &dir, const char *name) {
    std::string path = map_pin_path(dir, name);
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        throw CtlError(errno_msg("cannot open pinned map " + path, errno));
    return Fd(fd);
}

uint32_t map_id(int fd) {
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
        return 0;
    return info.id;
}

TcFilter filter_of(uint32_t ifindex, Hook h) {
    return {ifindex, h == Hook::Egress ? BPF_TC_EGRESS : BPF_TC_INGRESS, INCXDP_CHAOS_TC_HANDLE,
            INCXDP_CHAOS_TC_PRIORITY, prog_name(h)};
}

// Our filter on the hook: its program id, if the filter at our handle and
// priority runs one of our programs; 0 otherwise.
uint32_t our_filter(uint32_t ifindex, Hook h) {
    return tc_filter_prog(filter_of(ifindex, h));
}

// Does program `prog_id` use the map `id`? Tells our live filter from one
// whose pins were removed or belong to another pin root.
bool prog_uses_map(uint32_t prog_id, uint32_t id) {
    Fd prog(bpf_prog_get_fd_by_id(prog_id));
    if (!prog || !id)
        return false;
    uint32_t ids[16] = {};
    bpf_prog_info info{};
    info.nr_map_ids = 16;
    info.map_ids = reinterpret_cast<uintptr_t>(ids);
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0)
        return false;
    for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 16); i++)
        if (ids[i] == id)
            return true;
    return false;
}

incxdp_chaos_config read_config(int fd) {
    incxdp_chaos_config c{};
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(fd, &zero, &c) != 0)
        throw CtlError(errno_msg("cannot read map " INCXDP_CHAOS_MAP_CONFIG, errno));
    return c;
}

void write_config(int fd, const incxdp_chaos_config &c, const std::string &what) {
    uint32_t zero = 0;
    if (bpf_map_update_elem(fd, &zero, &c, BPF_ANY) != 0)
        throw CtlError(errno_msg("cannot set the rates of " + what, errno));
}

Counters read_counters(int fd) {
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0)
        throw CtlError(errno_msg("cannot count CPUs", ncpu));
    std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
    uint64_t sum[INCXDP_CHAOS_STAT_MAX] = {};
    for (uint32_t k = 0; k < INCXDP_CHAOS_STAT_MAX; k++) {
        if (bpf_map_lookup_elem(fd, &k, per_cpu.data()) != 0)
            throw CtlError(errno_msg("cannot read map " INCXDP_CHAOS_MAP_STATS, errno));
        for (uint64_t v : per_cpu)
            sum[k] += v;
    }
    return counters_from(sum);
}

// Loads a fresh instance with its maps pinned in `hdir`, writes the rates,
// then attaches it (replacing a stale filter of ours), so its first frame
// already sees them. Undoes the pins if anything fails.
void attach(uint32_t ifindex, const std::string &iface, Hook h, const std::string &hdir,
            const incxdp_chaos_config &cfg) {
    const std::string what = where(iface, h);
    make_dir(hdir.substr(0, hdir.rfind('/')));
    make_dir(hdir);
    struct PinGuard {
        std::string dir;
        bool armed = true;
        ~PinGuard() {
            if (armed)
                remove_pins(dir);
        }
    } guard{hdir};

    LIBBPF_OPTS(bpf_object_open_opts, open_opts, .pin_root_path = hdir.c_str());
    SkelPtr skel(incxdp_chaos__open_opts(&open_opts));
    if (!skel)
        throw CtlError(errno_msg("cannot open the incxdp_chaos BPF object", errno));
    bpf_program *prog =
        h == Hook::Egress ? skel->progs.ixchaos_egress : skel->progs.ixchaos_ingress;
    bpf_program *other =
        h == Hook::Egress ? skel->progs.ixchaos_ingress : skel->progs.ixchaos_egress;
    bpf_program__set_autoload(other, false);
    if (int err = incxdp_chaos__load(skel.get()))
        throw CtlError(errno_msg("cannot load the chaos program for " + what, err));
    write_config(bpf_map__fd(skel->maps.chaos_config), cfg, what);

    tc_filter_attach(filter_of(ifindex, h), bpf_program__fd(prog), iface, "the chaos program to " + what);
    guard.armed = false;
}

// The xdp hook's state, or "not attached" where no incxdp program runs.
HookStatus xdp_status_or_none(const std::string &iface) {
    try {
        return xdp::status(iface);
    } catch (const CtlError &) {
        HookStatus s;
        s.iface = iface;
        s.hook = Hook::Xdp;
        return s;
    }
}

HookStatus read_status(const std::string &root, uint64_t inode, const std::string &iface, Hook h) {
    HookStatus s;
    s.netns_inode = inode;
    s.iface = iface;
    s.hook = h;
    const std::string hdir = hook_dir(root, inode, iface, h);
    std::optional<uint32_t> config_id;
    if (pinned(hdir)) {
        Fd config = open_pin(hdir, INCXDP_CHAOS_MAP_CONFIG);
        Fd stats = open_pin(hdir, INCXDP_CHAOS_MAP_STATS);
        incxdp_chaos_config c = read_config(config.get());
        s.enabled = c.enabled != 0;
        s.rates = {c.loss_ppm, c.dup_ppm, c.corrupt_ppm};
        s.counters = read_counters(stats.get());
        config_id = map_id(config.get());
    }
    unsigned idx = if_nametoindex(iface.c_str());
    if (idx) {
        s.prog_id = our_filter(idx, h);
        // A filter whose program does not use these pins is not the one
        // described here: report it detached.
        s.attached = s.prog_id && (!config_id || prog_uses_map(s.prog_id, *config_id));
    }
    return s;
}

} // namespace

void apply_update(const RateUpdate &u, incxdp_chaos_config &c) {
    c.enabled = 1;
    if (u.loss_ppm)
        c.loss_ppm = *u.loss_ppm;
    if (u.dup_ppm)
        c.dup_ppm = *u.dup_ppm;
    if (u.corrupt_ppm)
        c.corrupt_ppm = *u.corrupt_ppm;
    if (u.reorder_ppm)
        c.reorder_ppm = *u.reorder_ppm;
}

Counters counters_from(const uint64_t (&sum)[INCXDP_CHAOS_STAT_MAX]) {
    Counters c;
#define INCXDP_CHAOS_FROM_SUM_(NAME, name, what) c.name = sum[INCXDP_CHAOS_##NAME];
    INCXDP_CHAOS_STATS(INCXDP_CHAOS_FROM_SUM_)
#undef INCXDP_CHAOS_FROM_SUM_
    return c;
}

const char *hook_name(Hook h) {
    switch (h) {
    case Hook::Egress:
        return "egress";
    case Hook::Ingress:
        return "ingress";
    case Hook::Xdp:
        return "xdp";
    }
    return "?";
}

std::string default_pin_root() {
    const char *env = std::getenv("INCXDP_CHAOS_PIN_DIR");
    return env && *env ? env : INCXDP_CHAOS_PIN_DIR;
}

uint32_t parse_rate(const std::string &text, const std::string &what) {
    std::string num = text;
    bool percent = !num.empty() && num.back() == '%';
    if (percent)
        num.pop_back();
    const std::string bad = fmt::format("{} '{}'", what, text);
    if (num.empty() || num.find_first_not_of("0123456789.") != std::string::npos)
        throw CtlError(bad + ": not a rate (write e.g. 5%, 0.5% or the fraction 0.05)");
    char *end = nullptr;
    double v = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || !std::isfinite(v))
        throw CtlError(bad + ": not a rate (write e.g. 5%, 0.5% or the fraction 0.05)");
    if (!percent && v > 1)
        throw CtlError(bad + ": a fraction above 1 (for percent write '" + num + "%')");
    double ppm = percent ? v * 1e4 : v * 1e6;
    if (ppm > INCXDP_CHAOS_PPM)
        throw CtlError(bad + ": above 100%");
    auto r = static_cast<uint32_t>(std::llround(ppm));
    if (r == 0 && v > 0)
        throw CtlError(bad + ": below the resolution of 0.0001% (1 ppm)");
    return r;
}

std::string format_rate(uint32_t ppm) {
    std::string s = fmt::format("{:.4f}", ppm / 1e4);
    while (s.back() == '0')
        s.pop_back();
    if (s.back() == '.')
        s.pop_back();
    return s + "%";
}

json to_json(const HookStatus &s) {
    const Counters &c = s.counters;
    json counters = json::object();
#define INCXDP_CHAOS_TO_JSON_(NAME, name, what) counters[#name] = c.name;
    INCXDP_CHAOS_STATS(INCXDP_CHAOS_TO_JSON_)
#undef INCXDP_CHAOS_TO_JSON_
    return {{"netns", s.netns},
            {"netns_inode", s.netns_inode},
            {"iface", s.iface},
            {"hook", hook_name(s.hook)},
            {"attached", s.attached},
            {"prog_id", s.prog_id},
            {"enabled", s.enabled},
            {"loss", format_rate(s.rates.loss_ppm)},
            {"dup", format_rate(s.rates.dup_ppm)},
            {"corrupt", format_rate(s.rates.corrupt_ppm)},
            {"reorder", format_rate(s.rates.reorder_ppm)},
            {"loss_ppm", s.rates.loss_ppm},
            {"dup_ppm", s.rates.dup_ppm},
            {"corrupt_ppm", s.rates.corrupt_ppm},
            {"reorder_ppm", s.rates.reorder_ppm},
            {"detour", s.detour},
            {"counters", counters}};
}

HookStatus hook_status_from_json(const json &j) {
    HookStatus s;
    s.netns = j.at("netns").get<std::string>();
    s.netns_inode = j.at("netns_inode").get<uint64_t>();
    s.iface = j.at("iface").get<std::string>();
    const std::string hook = j.at("hook").get<std::string>();
    s.hook = hook == "ingress" ? Hook::Ingress : hook == "xdp" ? Hook::Xdp : Hook::Egress;
    s.attached = j.at("attached").get<bool>();
    s.prog_id = j.at("prog_id").get<uint32_t>();
    s.enabled = j.at("enabled").get<bool>();
    s.rates = {j.at("loss_ppm").get<uint32_t>(), j.at("dup_ppm").get<uint32_t>(),
               j.at("corrupt_ppm").get<uint32_t>(), j.at("reorder_ppm").get<uint32_t>()};
    s.detour = j.value("detour", "");
    const json &c = j.at("counters");
#define INCXDP_CHAOS_FROM_JSON_(NAME, name, what) s.counters.name = c.at(#name).get<uint64_t>();
    INCXDP_CHAOS_STATS(INCXDP_CHAOS_FROM_JSON_)
#undef INCXDP_CHAOS_FROM_JSON_
    return s;
}

HookStatus set(const std::string &iface, Hook h, const RateUpdate &update,
               const std::string &root) {
    const uint32_t ifindex = ifindex_of(iface);
    const std::string what = where(iface, h);
    for (auto r : {update.loss_ppm, update.dup_ppm, update.corrupt_ppm, update.reorder_ppm})
        if (r && *r > INCXDP_CHAOS_PPM)
            throw CtlError(fmt::format("{}: rate {} ppm above 100%", what, *r));
    if (h == Hook::Xdp)
        return xdp::set(iface, update);
    if (update.reorder_ppm && *update.reorder_ppm)
        throw CtlError(fmt::format("{}: a tc hook cannot hold a frame back to reorder it; "
                                   "reordering needs the xdp hook (--xdp)",
                                   what));
    ensure_bpffs(root);
    make_dir(root);
    const uint64_t inode = netns_inode();
    const std::string hdir = hook_dir(root, inode, iface, h);

    HookStatus cur = read_status(root, inode, iface, h);
    incxdp_chaos_config cfg{};
    if (cur.attached && pinned(hdir)) {
        cfg = {1, cur.rates.loss_ppm, cur.rates.dup_ppm, cur.rates.corrupt_ppm, 0};
    }
    apply_update(update, cfg); // no reordering here: refused above

    if (cur.attached && pinned(hdir)) {
        // Running: one map update, the program picks it up on its next frame.
        Fd config = open_pin(hdir, INCXDP_CHAOS_MAP_CONFIG);
        write_config(config.get(), cfg, what);
    } else {
        // Pins without our filter (the interface was recreated) or a filter
        // without pins: start over with a fresh instance.
        remove_pins(hdir);
        attach(ifindex, iface, h, hdir, cfg);
    }
    return read_status(root, inode, iface, h);
}

void off(const std::string &iface, Hook h, const std::string &root) {
    if (h == Hook::Xdp)
        return xdp::off(iface);
    const uint64_t inode = netns_inode();
    const std::string hdir = hook_dir(root, inode, iface, h);
    const std::string what = where(iface, h);
    unsigned ifindex = if_nametoindex(iface.c_str());
    uint32_t prog = ifindex ? our_filter(ifindex, h) : 0;
    bool pins = pinned(hdir);
    if (!ifindex && !pins)
        throw CtlError(fmt::format("unknown interface '{}' (in this network namespace)", iface));
    if (!prog && !pins)
        throw CtlError(fmt::format("chaos is not attached to {}", what));
    if (pins) {
        // Frames in flight while we detach see no faults.
        Fd config = open_pin(hdir, INCXDP_CHAOS_MAP_CONFIG);
        incxdp_chaos_config c = read_config(config.get());
        c.enabled = 0;
        write_config(config.get(), c, what);
    }
    if (prog)
        if (int err = tc_filter_detach(filter_of(ifindex, h)))
            throw CtlError(errno_msg("cannot detach the chaos program from " + what, err));
    remove_pins(hdir);
}

void reset_counters(const std::string &iface, Hook h, const std::string &root) {
    if (h == Hook::Xdp)
        return xdp::reset_counters(iface);
    const std::string hdir = hook_dir(root, netns_inode(), iface, h);
    if (!pinned(hdir))
        throw CtlError(fmt::format("chaos is not attached to {}", where(iface, h)));
    Fd stats = open_pin(hdir, INCXDP_CHAOS_MAP_STATS);
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> zeros(static_cast<size_t>(ncpu > 0 ? ncpu : 1), 0);
    for (uint32_t k = 0; k < INCXDP_CHAOS_STAT_MAX; k++)
        if (bpf_map_update_elem(stats.get(), &k, zeros.data(), BPF_ANY) != 0)
            throw CtlError(errno_msg("cannot reset the counters of " + where(iface, h), errno));
}

HookStatus hook_status(const std::string &iface, Hook h, const std::string &root) {
    if (h == Hook::Xdp)
        return xdp_status_or_none(iface);
    return read_status(root, netns_inode(), iface, h);
}

std::vector<HookStatus> status(const std::string &iface, const std::string &root) {
    const uint64_t inode = netns_inode();
    std::vector<HookStatus> v;
    if (!iface.empty()) {
        if (!if_nametoindex(iface.c_str()) && !pinned(hook_dir(root, inode, iface, Hook::Egress)) &&
            !pinned(hook_dir(root, inode, iface, Hook::Ingress)))
            throw CtlError(
                fmt::format("unknown interface '{}' (in this network namespace)", iface));
        for (Hook h : kHooks) {
            HookStatus s = read_status(root, inode, iface, h);
            if (s.attached || pinned(hook_dir(root, inode, iface, h)))
                v.push_back(s);
        }
        if (HookStatus s = xdp_status_or_none(iface); s.attached)
            v.push_back(s);
        return v;
    }
    // Every "<inode>-<ifname>" directory of this namespace.
    for (const auto &n : xdp::configured())
        v.push_back(xdp::status(n));
    std::unique_ptr<DIR, int (*)(DIR *)> dir(::opendir(root.c_str()), ::closedir);
    if (!dir)
        return v;
    const std::string prefix = fmt::format("{}-", inode);
    std::set<std::string> names;
    while (dirent *e = ::readdir(dir.get())) {
        std::string n = e->d_name;
        if (n.rfind(prefix, 0) == 0)
            names.insert(n.substr(prefix.size()));
    }
    for (const auto &n : names)
        for (Hook h : kHooks)
            if (pinned(hook_dir(root, inode, n, h)))
                v.push_back(read_status(root, inode, n, h));
    return v;
}

std::vector<std::string> prune(const std::string &root) {
    // Inodes of every namespace still alive: named ones and those of processes.
    std::set<uint64_t> live;
    auto add = [&](const std::string &path) {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0)
            live.insert(st.st_ino);
    };
    for (const char *base : {"/var/run/netns", "/proc"}) {
        std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(base), ::closedir);
        if (!d)
            continue;
        bool proc = std::strcmp(base, "/proc") == 0;
        while (dirent *e = ::readdir(d.get())) {
            std::string n = e->d_name;
            if (n == "." || n == "..")
                continue;
            if (proc && n.find_first_not_of("0123456789") != std::string::npos)
                continue;
            add(std::string(base) + "/" + n + (proc ? "/ns/net" : ""));
        }
    }
    std::vector<std::string> removed;
    std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(root.c_str()), ::closedir);
    if (!d)
        return removed;
    std::vector<std::string> stale;
    while (dirent *e = ::readdir(d.get())) {
        std::string n = e->d_name;
        size_t dash = n.find('-');
        if (dash == std::string::npos || dash == 0 || n.find_first_not_of("0123456789") != dash)
            continue;
        if (!live.count(std::strtoull(n.substr(0, dash).c_str(), nullptr, 10)))
            stale.push_back(root + "/" + n);
    }
    for (const auto &s : stale) {
        for (Hook h : kHooks)
            remove_pins(s + "/" + hook_name(h));
        ::rmdir(s.c_str());
        removed.push_back(s);
    }
    return removed;
}

} // namespace incxdp::ctl::chaos
