// SPDX-License-Identifier: BSD-2-Clause
// load / unload / status: the switch object's lifecycle on interfaces.
#include "pinned_maps.h"
#include "port_util.h"
#include "tc_filter.h"
#include "xdp_attach.h"

#include "incxdp_switch.skel.h"
#include <incxdp/netdev_xdp.h>
#include <incxdp/xdp_frags.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace incxdp::ctl {

namespace {

constexpr const char *kIngressProg = "incxdp_ingress";

struct SkelDeleter {
    void operator()(incxdp_switch *s) const { incxdp_switch__destroy(s); }
};
using SkelPtr = std::unique_ptr<incxdp_switch, SkelDeleter>;

// The kernel adds BPF_F_RDONLY_PROG to every devmap it creates, so
// libbpf before 1.5 finds a pinned devmap "incompatible" with the object's
// definition and refuses to reuse it: loading more ports next to a running
// engine failed with EINVAL. Hand libbpf the pinned map instead.
void adopt_pinned_devmap(bpf_map *map, const std::string &path)
{
    Fd fd(bpf_obj_get(path.c_str()));
    if (!fd)
        throw CtlError(errno_msg("cannot open pinned map " + path, errno));
    if (int err = bpf_map__set_pin_path(map, nullptr))
        throw CtlError(errno_msg("cannot clear the pin path of map " + std::string(bpf_map__name(map)), err));
    if (int err = bpf_map__reuse_fd(map, fd.get()))
        throw CtlError(errno_msg("cannot reuse pinned map " + path, err));
}

bool is_ours(const xdp_program *p)
{
    return p && std::strcmp(xdp_program__name(p), kIngressProg) == 0;
}

// Our program on an interface, whether attached alone (legacy) or as one
// component of libxdp's dispatcher.
const xdp_program *find_ours(const xdp_multiprog *mp)
{
    return find_prog(mp, is_ours);
}

void detach_ours(uint32_t ifindex)
{
    detach_prog(ifindex, is_ours, "incxdp");
}

std::vector<uint32_t> loaded_ports(int ports_fd)
{
    return map_keys<uint32_t>(ports_fd);
}

void remove_pins(const std::string &dir)
{
    for (const char *name : {INCXDP_MAP_SLOTS, INCXDP_MAP_JOBS, INCXDP_MAP_WORKERS, INCXDP_MAP_EGRESS,
                             INCXDP_MAP_PORTS, INCXDP_MAP_STATS, INCXDP_MAP_INFO, INCXDP_MAP_ROCE_CONNS,
                             INCXDP_MAP_PARENTS})
        ::unlink(map_pin_path(dir, name).c_str());
    ::rmdir(dir.c_str());
}

} // namespace

void load(const LoadOptions &opts)
{
    if (opts.ifaces.empty())
        throw CtlError("load: no interface given (--iface IF)");
    std::vector<uint32_t> ifindexes;
    std::set<std::string> seen;
    for (const auto &name : opts.ifaces) {
        if (!seen.insert(name).second)
            throw CtlError(fmt::format("interface '{}' given twice", name));
        ifindexes.push_back(ifindex_of(name));
    }

    ensure_bpffs(opts.pin_dir);
    uint32_t slots = opts.slots ? opts.slots : INCXDP_DEFAULT_SLOTS;
    bool fresh = !PinnedMaps::present(opts.pin_dir);
    if (!fresh) {
        // Loading more ports next to a running engine: share its maps.
        PinnedMaps m = PinnedMaps::open(opts.pin_dir);
        m.require_same_netns(fmt::format("load incxdp on {}", opts.ifaces.front()));
        auto ports = loaded_ports(m.ports.get());
        for (size_t i = 0; i < ifindexes.size(); i++)
            if (std::find(ports.begin(), ports.end(), ifindexes[i]) != ports.end())
                throw CtlError(fmt::format("incxdp is already loaded on {} (run 'incxdp unload --iface {}' first)",
                                           opts.ifaces[i], opts.ifaces[i]));
        uint32_t pinned = m.slot_entries();
        if (opts.slots && opts.slots != pinned)
            throw CtlError(fmt::format("--slots {} differs from the running engine's {} slots; unload it first",
                                       opts.slots, pinned));
        slots = pinned;
    }
    if (slots == 0 || slots > (1u << 20))
        throw CtlError(fmt::format("--slots {} out of range (1..{})", slots, 1u << 20));
    make_pin_dirs(opts.pin_dir);

    Rollback rollback;
    if (fresh)
        rollback.add([dir = opts.pin_dir] { remove_pins(dir); });

    LIBBPF_OPTS(bpf_object_open_opts, open_opts, .pin_root_path = opts.pin_dir.c_str());
    SkelPtr skel(incxdp_switch__open_opts(&open_opts));
    if (!skel)
        throw CtlError(errno_msg("cannot open the incxdp_switch BPF object", errno));
    skel->rodata->native_port = opts.native_port;
    if (!fresh)
        adopt_pinned_devmap(skel->maps.incxdp_ports, opts.pin_dir + "/" INCXDP_MAP_PORTS);
    if (int err = bpf_map__set_max_entries(skel->maps.incxdp_slots, slots))
        throw CtlError(errno_msg("cannot size map " INCXDP_MAP_SLOTS, err));

    // libxdp loads the object itself: as a dispatcher component where the
    // kernel allows it, else attached alone. Either way the maps get pinned.
    DECLARE_LIBXDP_OPTS(xdp_program_opts, xopts, .obj = skel->obj, .prog_name = kIngressProg);
    XdpProgPtr prog(xdp_program__create(&xopts));
    if (long err = libxdp_get_error(prog.get())) {
        prog.release();
        throw CtlError(errno_msg("cannot create the XDP program " + std::string(kIngressProg), err));
    }
    // xdp.frags in driver mode only (incxdp/xdp_frags.h), on both programs:
    // a devmap's programs must agree with the one redirecting into it. The
    // ingress program's through libxdp, so that a multi-program dispatcher
    // is loaded with frags support too.
    const auto mode = opts.mode == AttachMode::Native ? XDP_MODE_NATIVE : XDP_MODE_SKB;
    const bool frags = mode == XDP_MODE_NATIVE;
    if (int err = xdp_program__set_xdp_frags_support(prog.get(), frags))
        throw CtlError(errno_msg(fmt::format("cannot set xdp.frags={} on {}", frags, kIngressProg), err));
    if (int err = set_xdp_frags({skel->progs.incxdp_egress_rewrite}, frags))
        throw CtlError(errno_msg(fmt::format("cannot set xdp.frags={} on incxdp_egress_rewrite", frags), err));
    for (size_t i = 0; i < ifindexes.size(); i++) {
        // Dispatcher or alone, whichever the kernel allows (xdp_attach.h).
        int err = attach_prog(prog.get(), ifindexes[i], mode);
        if (err) {
            std::string hint;
            if (err == -EEXIST || err == -EBUSY)
                hint = " (another XDP program is attached; detach it or use a multi-program capable setup)";
            else if (!fresh && i == 0)
                // The first attach loads the object, reusing the pinned maps:
                // pins left by an incompatible incxdp version fail here.
                hint = fmt::format(" (the maps pinned in {} may come from another incxdp version: "
                                   "'incxdp unload' removes them)",
                                   opts.pin_dir);
            throw CtlError(errno_msg(fmt::format("cannot attach {} to {} in {} mode", kIngressProg,
                                                 opts.ifaces[i], mode == XDP_MODE_NATIVE ? "native" : "skb"),
                                     err) + hint);
        }
        rollback.add([ifx = ifindexes[i]] {
            try {
                detach_ours(ifx);
            } catch (const CtlError &) {
            }
        });
    }

    if (fresh) {
        incxdp_info info{};
        NetnsId here = NetnsId::current();
        info.netns_dev = here.dev;
        info.netns_ino = here.ino;
        info.native_port = opts.native_port;
        uint32_t key = 0;
        if (bpf_map_update_elem(bpf_map__fd(skel->maps.incxdp_info), &key, &info, BPF_ANY) != 0)
            throw CtlError(errno_msg("cannot write map " INCXDP_MAP_INFO, errno));
    }

    // Ports join the multicast devmap with the rewrite program as their
    // egress program; the ingress program broadcasts results into it.
    int ports_fd = bpf_map__fd(skel->maps.incxdp_ports);
    int egress_fd = bpf_program__fd(skel->progs.incxdp_egress_rewrite);
    for (size_t i = 0; i < ifindexes.size(); i++) {
        struct bpf_devmap_val val {};
        val.ifindex = ifindexes[i];
        val.bpf_prog.fd = egress_fd;
        if (bpf_map_update_elem(ports_fd, &ifindexes[i], &val, BPF_NOEXIST) != 0)
            throw CtlError(errno_msg(fmt::format("cannot add {} to map " INCXDP_MAP_PORTS, opts.ifaces[i]), errno));
        rollback.add([ports_fd, ifx = ifindexes[i]] { bpf_map_delete_elem(ports_fd, &ifx); });
    }
    rollback.dismiss();
}

void unload(const std::vector<std::string> &ifaces, const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    m.require_same_netns("unload");
    auto ports = loaded_ports(m.ports.get());
    std::vector<uint32_t> targets;
    if (ifaces.empty()) {
        targets = ports;
    } else {
        for (const auto &name : ifaces) {
            uint32_t ifx = ifindex_of(name);
            if (std::find(ports.begin(), ports.end(), ifx) == ports.end())
                throw CtlError(fmt::format("incxdp is not loaded on {}", name));
            targets.push_back(ifx);
        }
    }
    for (uint32_t ifx : targets) {
        detach_ours(ifx);
        bpf_map_delete_elem(m.ports.get(), &ifx);
    }
    if (loaded_ports(m.ports.get()).empty())
        remove_pins(pin_dir);
}

Status status(const std::string &pin_dir)
{
    Status st;
    st.pin_dir = pin_dir;
    ensure_bpffs(pin_dir);
    if (!PinnedMaps::present(pin_dir))
        return st;
    PinnedMaps m = PinnedMaps::open(pin_dir);
    st.loaded = true;
    st.netns = m.loaded_in().str();
    st.other_netns = m.loaded_in() != NetnsId::current();
    for (uint32_t ifx : loaded_ports(m.ports.get())) {
        PortStatus p;
        p.ifindex = ifx;
        p.iface = st.other_netns ? "" : ifname_of(ifx);
        p.mode = st.other_netns ? "in " + st.netns : "detached";
        if (MultiprogPtr mp = st.other_netns ? nullptr : multiprog_of(ifx)) {
            if (const xdp_program *ours = find_ours(mp.get())) {
                p.mode = mode_name(mp.get());
                p.prog_id = xdp_program__id(ours);
            }
        }
        if (!st.other_netns)
            if (auto f = netdev::xdp_features(int(ifx)))
                p.xdp_xmit = (*f & netdev::kXdpActNdoXmit) != 0;
        st.ports.push_back(p);
    }
    st.slots_total = m.slot_entries();
    for (const auto &j : job_list(pin_dir)) {
        st.jobs++;
        st.slots_used += j.pool_size;
    }
    return st;
}

} // namespace incxdp::ctl
