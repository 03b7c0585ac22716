// SPDX-License-Identifier: BSD-2-Clause
// incxdp chaos --xdp: the hook every incxdp XDP program carries
// (bpf/lib/chaos_xdp.h). Nothing is pinned: the rates go into the maps of
// the program running on the interface, keyed by its ifindex. Where XDP
// frames cannot go round the link (a native end whose peer is not, a
// generic end), the tc program ixchaos_bounce is attached to the
// interface's ingress for the detours (incxdp/chaos.h).
#include "chaos_xdp.h"

#include "pinned_maps.h"
#include "port_util.h"
#include "tc_filter.h"

#include <incxdp/chaos.h>
#include <incxdp/maps.h>
#include <incxdp/netdev_xdp.h>
#include <incxdp/xdp_prog_maps.h>

#include "incxdp_chaos_bounce.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <linux/if_link.h>
#include <memory>
#include <net/if.h>

namespace incxdp::ctl::chaos::xdp {

namespace {

struct Maps {
    uint32_t ifindex = 0;
    uint32_t prog_id = 0;
    Fd cfg, stats, dup;
};

// The chaos maps of the incxdp program on `iface`; throws if there is none.
Maps maps_of(const std::string &iface) {
    Maps m;
    m.ifindex = ifindex_of(iface);
    const int idx = int(m.ifindex);
    m.cfg = Fd(xdpmaps::map_fd_on_iface(idx, INCXDP_CHAOS_XDP_CONFIG, BPF_MAP_TYPE_HASH, &m.prog_id));
    if (!m.cfg)
        throw CtlError(fmt::format(
            "{}: no incxdp XDP program runs here (the engine, incxdp_pass or incxdp_xsk carry "
            "the xdp hook: bring the topology up or load the switch first)",
            iface));
    m.stats = Fd(xdpmaps::map_fd(m.prog_id, INCXDP_CHAOS_XDP_STATS, BPF_MAP_TYPE_PERCPU_HASH));
    m.dup = Fd(xdpmaps::map_fd(m.prog_id, INCXDP_CHAOS_XDP_DUP, BPF_MAP_TYPE_HASH_OF_MAPS));
    if (!m.stats || !m.dup)
        throw CtlError(fmt::format("{}: XDP program {} has map {} but not {} and {} (another incxdp "
                                   "version?)",
                                   iface, m.prog_id, INCXDP_CHAOS_XDP_CONFIG,
                                   INCXDP_CHAOS_XDP_STATS, INCXDP_CHAOS_XDP_DUP));
    return m;
}

bool read_config(const Maps &m, incxdp_chaos_config &c) {
    return bpf_map_lookup_elem(m.cfg.get(), &m.ifindex, &c) == 0;
}

Counters read_counters(const Maps &m) {
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0)
        throw CtlError(errno_msg("cannot count CPUs", ncpu));
    std::vector<incxdp_chaos_xdp_stats> per_cpu(static_cast<size_t>(ncpu));
    Counters c;
    if (bpf_map_lookup_elem(m.stats.get(), &m.ifindex, per_cpu.data()) != 0)
        return c;
    uint64_t sum[INCXDP_CHAOS_STAT_MAX] = {};
    for (const auto &s : per_cpu)
        for (int k = 0; k < INCXDP_CHAOS_STAT_MAX; k++)
            sum[k] += s.n[k];
    return counters_from(sum);
}

void zero_counters(const Maps &m, const std::string &iface, __u64 flags) {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<incxdp_chaos_xdp_stats> zero(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    if (bpf_map_update_elem(m.stats.get(), &m.ifindex, zero.data(), flags) != 0 && errno != EEXIST)
        throw CtlError(errno_msg(fmt::format("{}: cannot write the xdp chaos counters", iface), errno));
}

// The egress program the engine runs on this port's multicast copies
// (its incxdp_ports entry), or none (-1) on a host.
Fd port_egress_prog(const Maps &m) {
    Fd ports(xdpmaps::map_fd(m.prog_id, INCXDP_MAP_PORTS, BPF_MAP_TYPE_DEVMAP_HASH));
    bpf_devmap_val v{};
    if (!ports || bpf_map_lookup_elem(ports.get(), &m.ifindex, &v) != 0 || !v.bpf_prog.id)
        return Fd();
    return Fd(bpf_prog_get_fd_by_id(v.bpf_prog.id));
}

// The interface, twice, in a devmap of its own: the program broadcasts a
// duplicated frame into it (the kernel makes one copy per entry) and sends
// a delayed one through entry 0. Each entry carries the port's egress
// program, as the engine's own redirects to it do (bpf/lib/chaos_xdp.h
// says why). Devmap entries name interfaces of the namespace that writes
// them: ours.
void ensure_dup_map(const Maps &m, const std::string &iface) {
    uint32_t inner_id = 0;
    if (bpf_map_lookup_elem(m.dup.get(), &m.ifindex, &inner_id) == 0)
        return;
    Fd inner(bpf_map_create(BPF_MAP_TYPE_DEVMAP, "chaos_dup_dev", sizeof(uint32_t),
                            sizeof(bpf_devmap_val), INCXDP_CHAOS_XDP_DUP_COPIES, nullptr));
    if (!inner)
        throw CtlError(errno_msg(fmt::format("{}: cannot create the duplication devmap", iface), errno));
    Fd egress = port_egress_prog(m);
    bpf_devmap_val v{};
    v.ifindex = m.ifindex;
    v.bpf_prog.fd = egress ? egress.get() : 0;
    for (uint32_t k = 0; k < INCXDP_CHAOS_XDP_DUP_COPIES; k++)
        if (bpf_map_update_elem(inner.get(), &k, &v, BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("{}: cannot fill the duplication devmap", iface), errno));
    int fd = inner.get();
    if (bpf_map_update_elem(m.dup.get(), &m.ifindex, &fd, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("{}: cannot write map " INCXDP_CHAOS_XDP_DUP, iface), errno));
}

const char *detour_name(uint32_t d) {
    switch (d) {
    case INCXDP_CHAOS_DETOUR_PEER:
        return "peer";
    case INCXDP_CHAOS_DETOUR_STACK_OUT:
        return "stack-out";
    case INCXDP_CHAOS_DETOUR_NONE:
        return "none";
    }
    return "?";
}

struct Route {
    uint32_t detour = INCXDP_CHAOS_DETOUR_PEER;
    bool bounce = false; // ixchaos_bounce on the interface's ingress
};

// How a detour can go round from this interface (incxdp/chaos.h). On veth
// the kernel's NDO_XMIT says whether the peer runs a native program; where
// it cannot say (before 6.3) the peer is taken to be in our mode.
Route route_for(const Maps &m, const std::string &iface) {
    LIBBPF_OPTS(bpf_xdp_query_opts, q);
    if (int err = bpf_xdp_query(int(m.ifindex), 0, &q))
        throw CtlError(errno_msg(fmt::format("{}: cannot query its XDP program", iface), err));
    const bool generic = q.attach_mode == XDP_ATTACHED_SKB;
    auto features = netdev::xdp_features(int(m.ifindex));
    const bool peer_native = features ? (*features & netdev::kXdpActNdoXmit) != 0 : !generic;
    Route r;
    if (generic) {
        // A native peer's STACK_OUT copies arrive past our XDP program.
        r.bounce = true;
        r.detour = peer_native ? INCXDP_CHAOS_DETOUR_NONE : INCXDP_CHAOS_DETOUR_PEER;
    } else if (!peer_native) {
        r.bounce = true;
        r.detour = INCXDP_CHAOS_DETOUR_STACK_OUT;
    }
    return r;
}

TcFilter bounce_filter(uint32_t ifindex) {
    return {ifindex, BPF_TC_INGRESS, INCXDP_CHAOS_BOUNCE_TC_HANDLE, INCXDP_CHAOS_BOUNCE_TC_PRIORITY,
            "ixchaos_bounce"};
}

// ixchaos_bounce on the interface's tc ingress (a fresh instance replaces
// ours if there is one; the filter keeps the program alive).
void attach_bounce(uint32_t ifindex, const std::string &iface) {
    std::unique_ptr<incxdp_chaos_bounce, decltype(&incxdp_chaos_bounce__destroy)> skel(
        incxdp_chaos_bounce__open_and_load(), incxdp_chaos_bounce__destroy);
    if (!skel)
        throw CtlError(errno_msg("cannot load ixchaos_bounce for " + iface, errno));
    tc_filter_attach(bounce_filter(ifindex), bpf_program__fd(skel->progs.ixchaos_bounce), iface,
                     "ixchaos_bounce to " + iface + " ingress");
}

// Only where the filter at our place runs ixchaos_bounce: one that someone
// else put there is left alone.
void detach_bounce(uint32_t ifindex) {
    if (tc_filter_prog(bounce_filter(ifindex)))
        tc_filter_detach(bounce_filter(ifindex));
}

HookStatus status_of(const Maps &m, const std::string &iface) {
    HookStatus s;
    s.iface = iface;
    s.hook = Hook::Xdp;
    s.prog_id = m.prog_id;
    incxdp_chaos_config c{};
    if (read_config(m, c)) {
        s.attached = true;
        s.enabled = c.enabled != 0;
        s.rates = {c.loss_ppm, c.dup_ppm, c.corrupt_ppm, c.reorder_ppm};
        s.counters = read_counters(m);
        s.detour = detour_name(c.detour);
    }
    return s;
}

} // namespace

HookStatus set(const std::string &iface, const RateUpdate &u) {
    Maps m = maps_of(iface);
    incxdp_chaos_config c{};
    read_config(m, c); // absent: all rates 0
    apply_update(u, c);
    // Decided anew on every set: the modes on the link may have changed.
    const Route route = route_for(m, iface);
    c.detour = route.detour;
    // Counters, the duplication devmap and the bounce before the rates:
    // the first frame that sees the rates finds them.
    zero_counters(m, iface, BPF_NOEXIST);
    ensure_dup_map(m, iface);
    if (route.bounce)
        attach_bounce(m.ifindex, iface);
    else
        detach_bounce(m.ifindex);
    if (bpf_map_update_elem(m.cfg.get(), &m.ifindex, &c, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot set the rates of {} xdp", iface), errno));
    return status_of(m, iface);
}

void off(const std::string &iface) {
    Maps m = maps_of(iface);
    // Rates first: frames in flight meanwhile see no faults.
    if (bpf_map_delete_elem(m.cfg.get(), &m.ifindex) != 0) {
        if (errno == ENOENT)
            throw CtlError(fmt::format("chaos is not set on {} xdp", iface));
        throw CtlError(errno_msg(fmt::format("cannot clear the rates of {} xdp", iface), errno));
    }
    bpf_map_delete_elem(m.dup.get(), &m.ifindex);
    bpf_map_delete_elem(m.stats.get(), &m.ifindex);
    detach_bounce(m.ifindex);
}

void reset_counters(const std::string &iface) {
    Maps m = maps_of(iface);
    incxdp_chaos_config c{};
    if (!read_config(m, c))
        throw CtlError(fmt::format("chaos is not set on {} xdp", iface));
    zero_counters(m, iface, BPF_ANY);
}

HookStatus status(const std::string &iface) {
    return status_of(maps_of(iface), iface);
}

std::vector<std::string> configured() {
    std::vector<std::string> out;
    std::unique_ptr<struct if_nameindex, decltype(&if_freenameindex)> all(::if_nameindex(), if_freenameindex);
    for (const struct if_nameindex *i = all.get(); i && i->if_index; i++) {
        int fd = xdpmaps::map_fd_on_iface(int(i->if_index), INCXDP_CHAOS_XDP_CONFIG, BPF_MAP_TYPE_HASH);
        if (fd < 0)
            continue;
        incxdp_chaos_config c{};
        uint32_t key = i->if_index;
        if (bpf_map_lookup_elem(fd, &key, &c) == 0)
            out.push_back(i->if_name);
        ::close(fd);
    }
    return out;
}

} // namespace incxdp::ctl::chaos::xdp
