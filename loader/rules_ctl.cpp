// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 tree rules (rules_ctl.h): the plan of a roce-tree job compiled per
// switch, and installed on each switch's engine from inside its namespace.
// What SwitchML's controller would write into Tofino tables per job, with
// RC connections instead of a worker table.
#include <incxdp/roce.h>
#include <incxdp/rules_ctl.h>

#include "map_journal.h"
#include "pinned_maps.h"
#include "port_util.h"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <memory>
#include <sched.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace incxdp::ctl::rules {

namespace {

std::string qpn_str(uint32_t qpn) {
    return fmt::format("0x{:06x}", qpn);
}

// The engine's connection map, which engines built before RoCE lack.
Fd open_conns(const std::string &dir) {
    return open_engine_map(dir, INCXDP_MAP_ROCE_CONNS, "RoCE support");
}

// The job's incxdp_parents entry: the connection to the parent switch
// (its port, addresses and our QPN on it), or all zero at the root.
incxdp_parent parent_entry(const std::vector<ConnRule> &conns) {
    incxdp_parent p{};
    for (const auto &c : conns) {
        if (c.value.role != INCXDP_ROCE_PARENT)
            continue;
        p.ifindex = c.value.ifindex;
        std::memcpy(p.dst_mac, c.value.peer_mac, 6);
        std::memcpy(p.src_mac, c.value.own_mac, 6);
        p.dst_ip = c.value.peer_ip;
        p.src_ip = c.value.own_ip;
        p.dst_port = htons(INCXDP_ROCE_UDP_PORT);
        p.src_port = c.value.udp_sport;
        p.qpn = c.qpn;
    }
    return p;
}

void mkdir_parents(const std::string &dir) {
    for (size_t pos = 1; (pos = dir.find('/', pos)) != std::string::npos; ++pos) {
        const std::string p = dir.substr(0, pos);
        if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST)
            throw CtlError(errno_msg("cannot create directory " + p, errno));
    }
}

// Loads the engine on the switch's ports where it is not loaded yet.
// Returns the ports it loaded on.
std::vector<std::string> ensure_loaded(const topo::Node &sw, const std::string &dir,
                                       const Options &o) {
    std::vector<std::string> want;
    for (const auto &i : sw.ifaces)
        want.push_back(i.name);
    std::vector<std::string> missing = want;
    ensure_bpffs(dir);
    if (PinnedMaps::present(dir)) {
        PinnedMaps m = PinnedMaps::open(dir);
        if (m.loaded_in() != NetnsId::current())
            throw CtlError(fmt::format(
                "the engine pinned in {} was loaded in network namespace {}, not in this "
                "switch's ({}): pins left from an earlier bring-up? 'incxdp topo down' "
                "removes them while the namespace exists; else remove the directory",
                dir, m.loaded_in().str(), NetnsId::current().str()));
        std::set<uint32_t> loaded;
        for (uint32_t ifx : map_keys<uint32_t>(m.ports.get()))
            loaded.insert(ifx);
        missing.clear();
        for (const auto &name : want)
            if (!loaded.count(ifindex_of(name)))
                missing.push_back(name);
    }
    if (missing.empty())
        return {};
    mkdir_parents(dir);
    LoadOptions lo;
    lo.ifaces = missing;
    lo.mode = o.mode;
    lo.slots = o.slots;
    lo.pin_dir = dir;
    load(lo);
    return missing;
}

// Installs one switch's rules on the engine in `dir` (this namespace).
Applied apply_switch(const topo::Topology &t, const SwitchRules &r, const std::string &dir,
                     const Options &o) {
    const topo::Node &node = t.node(r.sw);
    Applied out;
    out.job = r.job_id;
    out.sw = r.sw;
    out.pin_dir = dir;
    out.loaded_ports = ensure_loaded(node, dir, o);

    PinnedMaps m = PinnedMaps::open(dir);
    m.require_same_netns(fmt::format("apply job {}", r.job_id));
    Fd conns_fd = open_conns(dir);
    Fd parents_fd = open_parents_map(dir);

    // Resolve and check everything before the first write.
    std::vector<ConnRule> conns = r.conns;
    std::set<uint32_t> ports;
    for (uint32_t ifx : map_keys<uint32_t>(m.ports.get()))
        ports.insert(ifx);
    std::map<std::string, uint32_t> ifindex;
    for (const auto &i : node.ifaces) {
        const uint32_t ifx = ifindex_of(i.name);
        if (!ports.count(ifx))
            throw CtlError(fmt::format("incxdp is not loaded on port {}", i.name));
        const topo::Mac mac = mac_of(i.name);
        if (mac != i.mac)
            throw CtlError(fmt::format("port {} has MAC {}, the topology says {}: was the "
                                       "namespace brought up from another file?",
                                       i.name, topo::mac_to_string(mac),
                                       topo::mac_to_string(i.mac)));
        ifindex[i.name] = ifx;
    }
    for (auto &c : conns) {
        c.value.ifindex = ifindex.at(c.iface);
        incxdp_roce_conn_key k{c.qpn};
        incxdp_roce_conn other{};
        if (bpf_map_lookup_elem(conns_fd.get(), &k, &other) == 0 && other.job != r.job_id)
            throw CtlError(fmt::format("connection {} (to {} via {}): QPN {} is taken by job {}",
                                       c.conn, c.peer, c.iface, qpn_str(c.qpn), other.job));
    }
    incxdp_job existing{};
    bpf_map_lookup_elem(m.jobs.get(), &r.job_id, &existing);
    if (existing.active && existing.kind != INCXDP_JOB_ROCE_TREE)
        throw CtlError(fmt::format("job {} is installed here as a star job; 'incxdp job del {} "
                                   "--pin-dir {}' first",
                                   r.job_id, r.job_id, dir));
    out.reapplied = existing.active != 0;
    out.planned_pool_base = r.job.pool_base;
    out.pool_size = r.job.pool_size;
    // A re-apply keeps the pool it has.
    out.pool_base = existing.active && existing.pool_size == r.job.pool_size
                        ? existing.pool_base
                        : choose_pool(m, r.job_id, r.job.pool_base, r.job.pool_size);

    std::set<uint32_t> keep_qpn;
    for (const auto &c : conns)
        keep_qpn.insert(c.qpn);
    std::set<uint32_t> keep_port;
    for (const auto &[port, qpn] : r.egress)
        keep_port.insert(ifindex.at(port));
    std::vector<incxdp_roce_conn_key> stale_conns;
    for (const auto &k : map_keys<incxdp_roce_conn_key>(conns_fd.get())) {
        incxdp_roce_conn v{};
        if (bpf_map_lookup_elem(conns_fd.get(), &k, &v) == 0 && v.job == r.job_id &&
            !keep_qpn.count(k.qpn))
            stale_conns.push_back(k);
    }
    std::vector<incxdp_egress_key> stale_egress;
    for (const auto &k : map_keys<incxdp_egress_key>(m.egress.get()))
        if (k.job == r.job_id && !keep_port.count(k.ifindex))
            stale_egress.push_back(k);

    // Write order: slots, connections, group, and the job entry last, so
    // the data path sees nothing of a new job until all of it is there.
    Journal journal;
    zero_slots(m, out.pool_base, out.pool_size);
    for (const auto &c : conns) {
        incxdp_roce_conn_key k{c.qpn};
        journal.save<incxdp_roce_conn_key, incxdp_roce_conn>(conns_fd.get(), k);
        if (bpf_map_update_elem(conns_fd.get(), &k, &c.value, BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("cannot install connection {} (to {} via {}, "
                                                 "QPN {}) in map {}",
                                                 c.conn, c.peer, c.iface, qpn_str(c.qpn),
                                                 INCXDP_MAP_ROCE_CONNS),
                                     errno));
    }
    for (const auto &[port, qpn] : r.egress) {
        incxdp_egress_key k{r.job_id, ifindex.at(port)};
        incxdp_egress v{};
        v.roce_qpn = qpn;
        journal.save<incxdp_egress_key, incxdp_egress>(m.egress.get(), k);
        if (bpf_map_update_elem(m.egress.get(), &k, &v, BPF_ANY) != 0)
            throw CtlError(errno_msg(
                fmt::format("cannot add port {} to the job's multicast group", port), errno));
    }
    for (const auto &k : stale_conns) {
        journal.save<incxdp_roce_conn_key, incxdp_roce_conn>(conns_fd.get(), k);
        bpf_map_delete_elem(conns_fd.get(), &k);
    }
    for (const auto &k : stale_egress) {
        journal.save<incxdp_egress_key, incxdp_egress>(m.egress.get(), k);
        bpf_map_delete_elem(m.egress.get(), &k);
    }
    const incxdp_parent parent = parent_entry(conns);
    journal.save<uint32_t, incxdp_parent>(parents_fd.get(), r.job_id);
    if (bpf_map_update_elem(parents_fd.get(), &r.job_id, &parent, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot install job {}'s parent link in map {}",
                                             r.job_id, INCXDP_MAP_PARENTS),
                                 errno));
    incxdp_job jv = r.job;
    jv.pool_base = out.pool_base;
    journal.save<uint32_t, incxdp_job>(m.jobs.get(), r.job_id);
    if (bpf_map_update_elem(m.jobs.get(), &r.job_id, &jv, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot install job {}", r.job_id), errno));
    journal.commit();
    out.conns = conns.size();
    out.egress = r.egress.size();
    return out;
}

// Removes pins an engine's unload left behind (maps it does not know of)
// once the engine is gone, and the directory.
void remove_leftover_pins(const std::string &dir) {
    std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(dir.c_str()), ::closedir);
    if (!d)
        return;
    while (const dirent *e = ::readdir(d.get()))
        if (std::strncmp(e->d_name, "incxdp_", 7) == 0)
            ::unlink((dir + "/" + e->d_name).c_str());
    ::rmdir(dir.c_str());
}

Cleared clear_switch(uint32_t job, const std::string &sw, const std::string &dir,
                     bool unload_after) {
    Cleared out;
    out.job = job;
    out.sw = sw;
    out.pin_dir = dir;
    ensure_bpffs(dir);
    if (!PinnedMaps::present(dir))
        return out;
    out.engine = true;
    PinnedMaps m = PinnedMaps::open(dir);
    m.require_same_netns(fmt::format("clear job {}", job));
    incxdp_job j{};
    bpf_map_lookup_elem(m.jobs.get(), &job, &j);
    if (j.active && j.kind != INCXDP_JOB_ROCE_TREE) {
        out.note = fmt::format("job {} is a star job here: left alone", job);
        return out;
    }
    out.job_found = j.active != 0;
    if (j.active) {
        // Deactivate first: from here on the data path drops the job's frames.
        incxdp_job none{};
        if (bpf_map_update_elem(m.jobs.get(), &job, &none, BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("cannot remove job {}", job), errno));
    }
    out.conns = delete_conns(job, dir);
    if (int pfd = bpf_obj_get(map_pin_path(dir, INCXDP_MAP_PARENTS).c_str()); pfd >= 0) {
        Fd parents(pfd);
        const incxdp_parent none_parent{};
        bpf_map_update_elem(parents.get(), &job, &none_parent, BPF_ANY);
    }
    for (const auto &k : map_keys<incxdp_egress_key>(m.egress.get()))
        if (k.job == job && bpf_map_delete_elem(m.egress.get(), &k) == 0)
            out.egress++;
    if (j.active)
        zero_slots(m, j.pool_base, j.pool_size);
    if (unload_after) {
        const auto others = m.active_jobs();
        if (!others.empty()) {
            out.note = fmt::format("engine kept: it still has {} active job(s)", others.size());
        } else {
            unload({}, dir);
            if (!PinnedMaps::present(dir))
                remove_leftover_pins(dir);
            out.unloaded = true;
        }
    }
    return out;
}

bool netns_exists(const std::string &ns) {
    struct stat st {};
    return ::stat(("/var/run/netns/" + ns).c_str(), &st) == 0;
}

std::string joined(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v)
        s += (s.empty() ? "" : ", ") + x;
    return s;
}

} // namespace

SwitchRules compile(const topo::Topology &t, const topo::TreePlan &plan, const std::string &sw) {
    const topo::TreeSwitch &ts = plan.sw(sw);
    const topo::Node &node = t.node(sw);
    SwitchRules r;
    r.job_id = plan.job;
    r.sw = sw;
    r.job.active = 1;
    r.job.nworkers = static_cast<uint32_t>(ts.child_conns.size());
    r.job.pool_base = ts.pool_base;
    r.job.pool_size = ts.pool_size;
    r.job.max_elems = ROCE_MAX_ELEMS;
    r.job.switch_ip = be_ip(node.ip, "switch " + sw);
    r.job.kind = INCXDP_JOB_ROCE_TREE;

    if (ts.parent_conn) {
        // This switch is the child end: it sends up, the parent sends results down.
        const topo::RoceConn &c = plan.conns[*ts.parent_conn];
        ConnRule cr;
        cr.conn = *ts.parent_conn;
        cr.qpn = c.child_qpn;
        cr.iface = c.child_iface;
        cr.peer = c.parent;
        incxdp_roce_conn &v = cr.value;
        v.job = plan.job;
        v.role = INCXDP_ROCE_PARENT;
        std::memcpy(v.peer_mac, c.parent_mac.data(), 6);
        std::memcpy(v.own_mac, c.child_mac.data(), 6);
        v.peer_ip = be_ip(c.parent_ip, "switch " + c.parent);
        v.own_ip = be_ip(c.child_ip, "switch " + c.child);
        v.peer_qpn = c.parent_qpn;
        v.rx_base = c.down_base;
        v.tx_base = c.up_base;
        v.udp_sport = htons(c.child_sport);
        v.epsn = v.rx_base;
        r.conns.push_back(std::move(cr));
    }
    for (size_t i = 0; i < ts.child_conns.size(); ++i) {
        const topo::RoceConn &c = plan.conns[ts.child_conns[i]];
        ConnRule cr;
        cr.conn = ts.child_conns[i];
        cr.qpn = c.parent_qpn;
        cr.iface = c.parent_iface;
        cr.peer = c.child;
        incxdp_roce_conn &v = cr.value;
        v.job = plan.job;
        v.role = INCXDP_ROCE_CHILD;
        // A host goes back N on a NAK; a switch below cannot, so its
        // frames are taken in any order within the window, and so are a
        // host's when the job says it recovers by resending single frames.
        v.strict = c.child_is_switch || plan.host_order == topo::HostOrder::Any ? 0 : 1;
        v.child = static_cast<uint16_t>(i);
        std::memcpy(v.peer_mac, c.child_mac.data(), 6);
        std::memcpy(v.own_mac, c.parent_mac.data(), 6);
        v.peer_ip = be_ip(c.child_ip, "node " + c.child);
        v.own_ip = be_ip(c.parent_ip, "switch " + c.parent);
        v.peer_qpn = c.child_qpn;
        v.rx_base = c.up_base;
        v.tx_base = c.down_base;
        v.udp_sport = htons(c.parent_sport);
        v.subtree_ranks = c.subtree_ranks;
        v.epsn = v.rx_base;
        r.egress.emplace_back(c.parent_iface, c.parent_qpn);
        r.conns.push_back(std::move(cr));
    }
    return r;
}

std::vector<uint32_t> tree_jobs(const topo::Topology &t, std::optional<uint32_t> only) {
    std::vector<uint32_t> out;
    if (only) {
        const topo::Job *j = nullptr;
        for (const auto &x : t.jobs)
            if (x.id == *only)
                j = &x;
        if (!j)
            throw CtlError(fmt::format("topology {} has no job {}", t.name, *only));
        if (j->kind != topo::JobKind::RoceTree)
            throw CtlError(fmt::format("job {} of topology {} is a star job: install it with "
                                       "'incxdp job add --topo FILE --job {}'",
                                       *only, t.name, *only));
        return {*only};
    }
    for (const auto &j : t.jobs)
        if (j.kind == topo::JobKind::RoceTree)
            out.push_back(j.id);
    if (out.empty())
        throw CtlError(fmt::format("topology {} has no roce-tree job", t.name));
    return out;
}

topo::TreePlan plan(const topo::Topology &t, uint32_t job) {
    tree_jobs(t, job);
    try {
        return topo::plan_tree(t, job);
    } catch (const topo::TopologyError &e) {
        throw CtlError(e.what());
    }
}

namespace {

// Calls fn(job, switch, namespace, pin dir) for every switch of each
// roce-tree job the options select, root first; stops at the first error,
// naming the verb, the job, the switch and where.
void for_each_switch(const topo::Topology &t, const Options &o, const char *verb,
                     const std::function<void(uint32_t, const topo::TreePlan &, const std::string &,
                                              const std::string &, const std::string &)> &fn,
                     const std::function<std::string()> &done_so_far) {
    for (uint32_t id : tree_jobs(t, o.job)) {
        const topo::TreePlan p = plan(t, id);
        for (const auto &ts : p.switches) {
            const std::string ns = topo::netns_name(o.prefix, ts.name);
            const std::string dir = topo::switch_pin_dir(o.pin_root, o.prefix, ts.name);
            try {
                fn(id, p, ts.name, ns, dir);
            } catch (const std::exception &e) {
                const std::string done = done_so_far();
                throw CtlError(fmt::format("rules {}: job {} on switch {} (namespace {}, pins {}): "
                                           "{}{}",
                                           verb, id, ts.name, ns, dir, e.what(),
                                           done.empty() ? "" : " (already " + done + ")"));
            }
        }
    }
}

} // namespace

std::vector<Applied> apply(const topo::Topology &t, const Options &o) {
    std::vector<Applied> done;
    for_each_switch(
        t, o, "apply",
        [&](uint32_t, const topo::TreePlan &plan, const std::string &sw, const std::string &ns,
            const std::string &dir) {
            const SwitchRules r = compile(t, plan, sw);
            Applied a;
            in_netns(ns, [&] { a = apply_switch(t, r, dir, o); });
            a.netns = ns;
            done.push_back(std::move(a));
        },
        [&] {
            std::vector<std::string> ok;
            for (const auto &a : done)
                ok.push_back(fmt::format("job {} on {}", a.job, a.sw));
            return ok.empty() ? "" : "applied: " + joined(ok);
        });
    return done;
}

Applied apply_local(const topo::Topology &t, uint32_t job, const std::string &sw,
                    const std::string &pin_dir, const Options &o) {
    const topo::TreePlan p = plan(t, job);
    Applied a = apply_switch(t, compile(t, p, sw), pin_dir, o);
    a.netns = NetnsId::current().str();
    return a;
}

std::vector<Cleared> clear(const topo::Topology &t, const Options &o) {
    std::vector<Cleared> out;
    for_each_switch(
        t, o, "clear",
        [&](uint32_t id, const topo::TreePlan &, const std::string &sw, const std::string &ns,
            const std::string &dir) {
            Cleared c;
            c.job = id;
            c.sw = sw;
            c.pin_dir = dir;
            if (netns_exists(ns))
                in_netns(ns, [&] { c = clear_switch(id, sw, dir, o.unload); });
            out.push_back(std::move(c));
        },
        [] { return std::string(); });
    return out;
}

QpnSet set_qpn(const topo::Topology &t, const Options &o, uint32_t job, uint32_t rank,
               uint32_t qpn) {
    if (qpn == 0 || qpn > ROCE_QPN_MASK)
        throw CtlError(fmt::format("rules set-qpn: QPN {:#x} is not in 1..0xffffff", qpn));
    const topo::TreePlan p = plan(t, job);
    if (rank >= p.ranks.size())
        throw CtlError(fmt::format("rules set-qpn: job {} has {} ranks, there is no rank {}", job,
                                   p.ranks.size(), rank));
    const topo::RoceConn &c = p.conn_of_rank(rank);
    QpnSet out;
    out.job = job;
    out.rank = rank;
    out.host = c.child;
    out.sw = c.parent;
    out.netns = topo::netns_name(o.prefix, c.parent);
    out.pin_dir = topo::switch_pin_dir(o.pin_root, o.prefix, c.parent);
    out.switch_qpn = c.parent_qpn;
    out.qpn = qpn;
    try {
        in_netns(out.netns, [&] {
            if (!PinnedMaps::present(out.pin_dir))
                throw CtlError("no engine is loaded there: apply the job first ('incxdp rules "
                               "apply')");
            Fd conns = open_conns(out.pin_dir);
            incxdp_roce_conn_key k{c.parent_qpn};
            incxdp_roce_conn v{};
            if (bpf_map_lookup_elem(conns.get(), &k, &v) != 0 || v.job != job ||
                v.role != INCXDP_ROCE_CHILD)
                throw CtlError(fmt::format("no connection {} of job {} to {} there: apply the "
                                           "job first ('incxdp rules apply')",
                                           qpn_str(c.parent_qpn), job, c.child));
            out.old_qpn = v.peer_qpn;
            v.peer_qpn = qpn;
            v.rc_device = 1; // only a device's QPN is learnt this way
            if (bpf_map_update_elem(conns.get(), &k, &v, BPF_EXIST) != 0)
                throw CtlError(errno_msg(fmt::format("cannot update connection {} in map {}",
                                                     qpn_str(c.parent_qpn), INCXDP_MAP_ROCE_CONNS),
                                         errno));
        });
    } catch (const std::exception &e) {
        throw CtlError(fmt::format("rules set-qpn: job {} rank {} ({}) on switch {} (namespace {}, "
                                   "pins {}): {}",
                                   job, rank, c.child, c.parent, out.netns, out.pin_dir, e.what()));
    }
    return out;
}

std::vector<Unloaded> unload_switches(const topo::Topology &t, const std::string &prefix,
                                      const std::string &pin_root) {
    std::vector<Unloaded> out;
    for (const auto &n : t.nodes) {
        if (n.kind != topo::NodeKind::Switch)
            continue;
        Unloaded u;
        u.sw = n.name;
        u.netns = topo::netns_name(prefix, n.name);
        u.pin_dir = topo::switch_pin_dir(pin_root, prefix, n.name);
        if (!netns_exists(u.netns) || !PinnedMaps::present(u.pin_dir))
            continue;
        try {
            in_netns(u.netns, [&] {
                PinnedMaps m = PinnedMaps::open(u.pin_dir);
                if (m.loaded_in() != NetnsId::current()) {
                    u.note = fmt::format("the engine pinned in {} was loaded in {}, not in {}: "
                                         "left alone",
                                         u.pin_dir, m.loaded_in().str(), u.netns);
                    return;
                }
                unload({}, u.pin_dir);
                if (!PinnedMaps::present(u.pin_dir))
                    remove_leftover_pins(u.pin_dir);
                u.unloaded = true;
            });
        } catch (const std::exception &e) {
            u.note = e.what();
        }
        out.push_back(std::move(u));
    }
    return out;
}

void in_netns(const std::string &netns, const std::function<void()> &fn) {
    Fd self(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!self)
        throw CtlError(errno_msg("cannot open this thread's network namespace", errno));
    const std::string path = "/var/run/netns/" + netns;
    Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!target)
        throw CtlError(errno == ENOENT
                           ? fmt::format("network namespace {} does not exist (is the topology up "
                                         "with this prefix?)",
                                         netns)
                           : errno_msg("cannot open network namespace " + path, errno));
    if (::setns(target.get(), CLONE_NEWNET) != 0)
        throw CtlError(errno_msg("cannot enter network namespace " + netns, errno));
    struct Back {
        int fd;
        ~Back() {
            // Going on in the switch's namespace would aim the next
            // operation at the wrong interfaces: better to stop.
            if (::setns(fd, CLONE_NEWNET) != 0) {
                std::perror("incxdp: cannot return to the original network namespace");
                std::abort();
            }
        }
    } back{self.get()};
    fn();
}

} // namespace incxdp::ctl::rules
