// SPDX-License-Identifier: BSD-2-Clause
// The mesh relay on a node's interfaces, and its pinned maps.
#include "pinned_maps.h"
#include "port_util.h"
#include "xdp_attach.h"

#include "incxdp_relay.skel.h"
#include <incxdp/relay_ctl.h>
#include <incxdp/smi_maps.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <xdp/libxdp.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <net/if.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace incxdp::relay {

using ctl::CtlError;
using ctl::errno_msg;
using ctl::Fd;
using ctl::map_pin_path;

namespace {

constexpr const char *kProg = "incxdp_relay";
constexpr const char *kMaps[] = {
    INCXDP_MAP_RELAY_CFG,     INCXDP_MAP_RELAY_ROUTES, INCXDP_MAP_RELAY_TX,
    INCXDP_MAP_RELAY_XSKS,    INCXDP_MAP_RELAY_STATS,  INCXDP_MAP_RELAY_IFSLOTS,
    INCXDP_MAP_RELAY_IF_XSKS, INCXDP_MAP_SMI_CKS,      INCXDP_MAP_SMI_CKR};

struct SkelDeleter {
    void operator()(incxdp_relay *s) const { incxdp_relay__destroy(s); }
};
using SkelPtr = std::unique_ptr<incxdp_relay, SkelDeleter>;

// The switch's name table is indexed by position; here a switch over the
// enum (which -Wswitch checks) builds the table, so a counter added to
// relay.h without a name fails to compile below.
constexpr const char *name_of(incxdp_relay_stat s) {
    switch (s) {
    case INCXDP_RELAY_STAT_PASS:
        return "pass";
    case INCXDP_RELAY_STAT_DELIVER_XSK:
        return "deliver_xsk";
    case INCXDP_RELAY_STAT_DELIVER_STACK:
        return "deliver_stack";
    case INCXDP_RELAY_STAT_FORWARD:
        return "forward";
    case INCXDP_RELAY_STAT_HOP_LIMIT:
        return "hop_limit";
    case INCXDP_RELAY_STAT_RELAY_OFF:
        return "relay_off";
    case INCXDP_RELAY_STAT_NO_ROUTE:
        return "no_route";
    case INCXDP_RELAY_STAT_MALFORMED:
        return "malformed";
    case INCXDP_RELAY_STAT_REDIRECT_FAIL:
        return "redirect_fail";
    case INCXDP_RELAY_STAT_CHAOS:
        return "chaos";
    case INCXDP_RELAY_STAT_SENT:
        return "sent";
    case INCXDP_RELAY_STAT_TX_BAD:
        return "tx_bad";
    case INCXDP_RELAY_STAT_MAX:
        break;
    }
    return nullptr;
}

constexpr std::array<const char *, INCXDP_RELAY_STAT_MAX> make_names() {
    std::array<const char *, INCXDP_RELAY_STAT_MAX> a{};
    for (int i = 0; i < INCXDP_RELAY_STAT_MAX; i++)
        a[size_t(i)] = name_of(incxdp_relay_stat(i));
    return a;
}
constexpr auto kNames = make_names();
static_assert(std::all_of(kNames.begin(), kNames.end(), [](const char *n) { return n != nullptr; }),
              "every counter of enum incxdp_relay_stat needs a name in name_of()");

xdp_attach_mode parse_mode(const std::string &mode) {
    if (mode == "native")
        return XDP_MODE_NATIVE;
    if (mode == "skb")
        return XDP_MODE_SKB;
    throw CtlError(fmt::format("relay attach mode '{}': expected \"native\" or \"skb\"", mode));
}

void remove_pins(const std::string &dir) {
    for (const char *name : kMaps)
        ::unlink(map_pin_path(dir, name).c_str());
    ::rmdir(dir.c_str());
}

Fd open_pin(const std::string &dir, const char *name) {
    std::string path = map_pin_path(dir, name);
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        throw CtlError(errno_msg("cannot open the relay's pinned map " + path, errno));
    return Fd(fd);
}

uint32_t map_id(int fd, const std::string &what) {
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
        throw CtlError(errno_msg("cannot query map " + what, errno));
    return info.id;
}

// Whether program `prog_id` uses map `id`: the relay pinned in one
// directory, told apart from another node's relay (same program name).
bool prog_uses_map(uint32_t prog_id, uint32_t id) {
    Fd prog(bpf_prog_get_fd_by_id(prog_id));
    if (!prog)
        return false;
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0)
        return false;
    std::vector<uint32_t> ids(info.nr_map_ids);
    bpf_prog_info info2{};
    info2.nr_map_ids = uint32_t(ids.size());
    info2.map_ids = reinterpret_cast<uint64_t>(ids.data());
    len = sizeof(info2);
    if (bpf_obj_get_info_by_fd(prog.get(), &info2, &len) != 0)
        return false;
    ids.resize(std::min<size_t>(ids.size(), info2.nr_map_ids));
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Matches the relay program whose config map is `cfg_id`.
ctl::ProgMatch relay_using(uint32_t cfg_id) {
    return [cfg_id](const xdp_program *p) {
        return p && std::strcmp(xdp_program__name(p), kProg) == 0 &&
               prog_uses_map(xdp_program__id(p), cfg_id);
    };
}

std::vector<uint32_t> all_ifindexes() {
    std::vector<uint32_t> out;
    std::unique_ptr<struct if_nameindex, decltype(&if_freenameindex)> all(::if_nameindex(),
                                                                          if_freenameindex);
    for (const struct if_nameindex *i = all.get(); i && i->if_index; i++)
        out.push_back(i->if_index);
    return out;
}

void write_config(int fd, const RelayConfig &c) {
    if (c.max_hops > 255)
        throw CtlError(fmt::format(
            "relay max_hops {} out of range: the header counts hops in one byte (0..255)",
            c.max_hops));
    incxdp_relay_cfg v{};
    v.self_node = c.self_node;
    v.relay_enabled = c.relay_enabled ? 1 : 0;
    v.max_hops = c.max_hops;
    uint32_t key = 0;
    if (bpf_map_update_elem(fd, &key, &v, BPF_ANY) != 0)
        throw CtlError(errno_msg("cannot write map " INCXDP_MAP_RELAY_CFG, errno));
}

} // namespace

std::string default_pin_dir() {
    const char *env = std::getenv("INCXDP_MESH_PIN_DIR");
    return env && *env ? env : "/sys/fs/bpf/incxdp/mesh";
}

bool present(const std::string &pin_dir) {
    return ::access(map_pin_path(pin_dir, INCXDP_MAP_RELAY_CFG).c_str(), F_OK) == 0;
}

const char *stat_name(incxdp_relay_stat s) {
    return s >= 0 && s < INCXDP_RELAY_STAT_MAX ? kNames[size_t(s)] : "?";
}

const std::array<const char *, INCXDP_RELAY_STAT_MAX> &stat_names() {
    return kNames;
}

void attach(const std::string &pin_dir, const std::vector<std::string> &ifaces,
            const std::string &mode_str) {
    const xdp_attach_mode mode = parse_mode(mode_str);
    if (ifaces.empty())
        throw CtlError("relay attach: no interface given");
    std::vector<uint32_t> ifindexes;
    std::set<std::string> seen;
    for (const auto &name : ifaces) {
        if (!seen.insert(name).second)
            throw CtlError(fmt::format("relay attach: interface '{}' given twice", name));
        ifindexes.push_back(ctl::ifindex_of(name));
    }

    ctl::ensure_bpffs(pin_dir);
    const bool fresh = !present(pin_dir);
    if (!fresh) {
        // More interfaces for a running relay: the new program shares its
        // pinned maps, so the two count and route as one.
        Fd cfg = open_pin(pin_dir, INCXDP_MAP_RELAY_CFG);
        auto ours = relay_using(map_id(cfg.get(), INCXDP_MAP_RELAY_CFG));
        for (size_t i = 0; i < ifindexes.size(); i++)
            if (ctl::MultiprogPtr mp = ctl::multiprog_of(ifindexes[i]);
                mp && ctl::find_prog(mp.get(), ours))
                throw CtlError(
                    fmt::format("the relay pinned in {} already runs on {}; detach it first",
                                pin_dir, ifaces[i]));
    }
    ctl::make_pin_dirs(pin_dir);

    ctl::Rollback rollback;
    if (fresh)
        rollback.add([pin_dir] { remove_pins(pin_dir); });

    LIBBPF_OPTS(bpf_object_open_opts, open_opts, .pin_root_path = pin_dir.c_str());
    SkelPtr skel(incxdp_relay__open_opts(&open_opts));
    if (!skel)
        throw CtlError(errno_msg("cannot open the incxdp_relay BPF object", errno));
    for (const char *name : kMaps)
        if (!bpf_object__find_map_by_name(skel->obj, name))
            throw CtlError(fmt::format(
                "the incxdp_relay BPF object has no map {} (relay.h and the object disagree)",
                name));

    // libxdp loads the object itself on the first attach (pinning the
    // maps): as a dispatcher component where the kernel allows it, else
    // attached alone.
    DECLARE_LIBXDP_OPTS(xdp_program_opts, xopts, .obj = skel->obj, .prog_name = kProg);
    ctl::XdpProgPtr prog(xdp_program__create(&xopts));
    if (long err = libxdp_get_error(prog.get())) {
        prog.release();
        throw CtlError(errno_msg(fmt::format("cannot create the XDP program {}", kProg), err));
    }
    // xdp.frags in driver mode only (incxdp/xdp_frags.h): generic mode
    // would hand it every skb's fragments.
    const bool frags = mode == XDP_MODE_NATIVE;
    if (int err = xdp_program__set_xdp_frags_support(prog.get(), frags))
        throw CtlError(errno_msg(fmt::format("cannot set xdp.frags={} on {}", frags, kProg), err));
    for (size_t i = 0; i < ifindexes.size(); i++) {
        if (int err = ctl::attach_prog(prog.get(), ifindexes[i], mode)) {
            std::string hint;
            if (err == -EEXIST || err == -EBUSY)
                hint = " (another XDP program is attached; detach it first)";
            else if (!fresh && i == 0)
                hint = fmt::format(" (the maps pinned in {} may come from another incxdp version: "
                                   "detach the relay to remove them)",
                                   pin_dir);
            throw CtlError(errno_msg(fmt::format("cannot attach {} to {} in {} mode", kProg,
                                                 ifaces[i], mode_str),
                                     err) +
                           hint);
        }
        rollback.add([ifx = ifindexes[i], what = std::string(kProg)] {
            try {
                ctl::detach_prog(ifx, ctl::prog_named(kProg), what);
            } catch (const CtlError &) {
            }
        });
    }

    if (fresh)
        write_config(bpf_map__fd(skel->maps.incxdp_relay_cfg), RelayConfig{});
    int tx = bpf_map__fd(skel->maps.incxdp_relay_tx);
    for (size_t i = 0; i < ifindexes.size(); i++) {
        if (bpf_map_update_elem(tx, &ifindexes[i], &ifindexes[i], BPF_ANY) != 0)
            throw CtlError(errno_msg(
                fmt::format("cannot add {} to map " INCXDP_MAP_RELAY_TX, ifaces[i]), errno));
        rollback.add([tx, ifx = ifindexes[i]] { bpf_map_delete_elem(tx, &ifx); });
    }
    rollback.dismiss();
}

void detach(const std::string &pin_dir) {
    ctl::ensure_bpffs(pin_dir);
    if (!present(pin_dir)) {
        ::rmdir(pin_dir.c_str()); // an empty leftover
        return;
    }
    {
        Fd cfg = open_pin(pin_dir, INCXDP_MAP_RELAY_CFG);
        auto ours = relay_using(map_id(cfg.get(), INCXDP_MAP_RELAY_CFG));
        for (uint32_t ifx : all_ifindexes())
            ctl::detach_prog(ifx, ours, fmt::format("the relay pinned in {}", pin_dir));
    }
    remove_pins(pin_dir);
}

// ---- RelayMaps ---------------------------------------------------------------

struct RelayMaps::Fds {
    Fd cfg, routes, tx, xsks, stats;
};

RelayMaps::RelayMaps() : fds_(std::make_unique<Fds>()) {}
RelayMaps::RelayMaps(RelayMaps &&) noexcept = default;
RelayMaps &RelayMaps::operator=(RelayMaps &&) noexcept = default;
RelayMaps::~RelayMaps() = default;

RelayMaps RelayMaps::open(const std::string &pin_dir) {
    ctl::ensure_bpffs(pin_dir);
    if (!present(pin_dir))
        throw CtlError(fmt::format("the mesh relay is not running here (no pinned maps in {}); "
                                   "run `incxdp mesh run` first",
                                   pin_dir));
    RelayMaps m;
    m.dir_ = pin_dir;
    m.fds_->cfg = open_pin(pin_dir, INCXDP_MAP_RELAY_CFG);
    m.fds_->routes = open_pin(pin_dir, INCXDP_MAP_RELAY_ROUTES);
    m.fds_->tx = open_pin(pin_dir, INCXDP_MAP_RELAY_TX);
    m.fds_->xsks = open_pin(pin_dir, INCXDP_MAP_RELAY_XSKS);
    m.fds_->stats = open_pin(pin_dir, INCXDP_MAP_RELAY_STATS);
    return m;
}

int RelayMaps::xsks_fd() const {
    return fds_->xsks.get();
}

void RelayMaps::set_config(const RelayConfig &c) {
    write_config(fds_->cfg.get(), c);
}

RelayConfig RelayMaps::config() const {
    incxdp_relay_cfg v{};
    uint32_t key = 0;
    if (bpf_map_lookup_elem(fds_->cfg.get(), &key, &v) != 0)
        throw CtlError(errno_msg("cannot read map " INCXDP_MAP_RELAY_CFG " in " + dir_, errno));
    return RelayConfig{v.self_node, v.relay_enabled != 0, v.max_hops};
}

void RelayMaps::set_route(uint32_t dst_node, const incxdp_relay_route &r) {
    if (r.nnexthops < 1 || r.nnexthops > INCXDP_RELAY_MAX_NEXTHOPS)
        throw CtlError(fmt::format("route to node {:#x}: {} next hops (1..{})", dst_node,
                                   r.nnexthops, INCXDP_RELAY_MAX_NEXTHOPS));
    for (uint32_t i = 0; i < r.nnexthops; i++) {
        uint32_t ifx = r.nh[i].ifindex, v = 0;
        if (bpf_map_lookup_elem(fds_->tx.get(), &ifx, &v) != 0)
            throw CtlError(
                fmt::format("route to node {:#x}: next hop {} leaves by {}, which the relay is not "
                            "attached to (not in " INCXDP_MAP_RELAY_TX ")",
                            dst_node, i, ctl::ifname_of(ifx)));
    }
    if (bpf_map_update_elem(fds_->routes.get(), &dst_node, &r, BPF_ANY) != 0)
        throw CtlError(errno_msg(
            fmt::format("cannot write the route to node {:#x} into map " INCXDP_MAP_RELAY_ROUTES,
                        dst_node),
            errno));
}

void RelayMaps::del_route(uint32_t dst_node) {
    if (bpf_map_delete_elem(fds_->routes.get(), &dst_node) != 0 && errno != ENOENT)
        throw CtlError(errno_msg(
            fmt::format("cannot delete the route to node {:#x} from map " INCXDP_MAP_RELAY_ROUTES,
                        dst_node),
            errno));
}

std::map<uint32_t, incxdp_relay_route> RelayMaps::routes() const {
    std::map<uint32_t, incxdp_relay_route> out;
    for (uint32_t dst : ctl::map_keys<uint32_t>(fds_->routes.get())) {
        incxdp_relay_route r{};
        if (bpf_map_lookup_elem(fds_->routes.get(), &dst, &r) == 0) // else deleted meanwhile
            out[dst] = r;
    }
    return out;
}

void RelayMaps::add_tx_port(uint32_t ifindex) {
    if (bpf_map_update_elem(fds_->tx.get(), &ifindex, &ifindex, BPF_ANY) != 0)
        throw CtlError(errno_msg(
            fmt::format("cannot add {} to map " INCXDP_MAP_RELAY_TX, ctl::ifname_of(ifindex)),
            errno));
}

std::vector<uint32_t> RelayMaps::tx_ports() const {
    return ctl::map_keys<uint32_t>(fds_->tx.get());
}

std::array<uint64_t, INCXDP_RELAY_STAT_MAX> RelayMaps::stats() const {
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0)
        throw CtlError(errno_msg("cannot count possible CPUs", ncpu));
    std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
    std::array<uint64_t, INCXDP_RELAY_STAT_MAX> out{};
    for (uint32_t i = 0; i < INCXDP_RELAY_STAT_MAX; i++) {
        if (bpf_map_lookup_elem(fds_->stats.get(), &i, per_cpu.data()) != 0)
            throw CtlError(
                errno_msg("cannot read map " INCXDP_MAP_RELAY_STATS " in " + dir_, errno));
        for (uint64_t v : per_cpu)
            out[i] += v;
    }
    return out;
}

void RelayMaps::reset_stats() {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> zero(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    for (uint32_t i = 0; i < INCXDP_RELAY_STAT_MAX; i++)
        if (bpf_map_update_elem(fds_->stats.get(), &i, zero.data(), BPF_ANY) != 0)
            throw CtlError(
                errno_msg("cannot reset map " INCXDP_MAP_RELAY_STATS " in " + dir_, errno));
}

} // namespace incxdp::relay
