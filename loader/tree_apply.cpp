// SPDX-License-Identifier: BSD-2-Clause
// The apply step of every job kind (apply_ctl.h): a compiled star or tree
// job written into each switch's engine, every change saved in one
// journal, so a failure on any switch restores all of them; and the one
// dispatch by job kind (roce-tree jobs to the RoCE installer).
#include <incxdp/apply_ctl.h>
#include <incxdp/rules_ctl.h>

#include "map_journal.h"
#include "pinned_maps.h"
#include "port_util.h"

#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sys/stat.h>
#include <tuple>

namespace incxdp::ctl::apply {
namespace {

using KeyTuple = std::tuple<std::string, uint16_t, uint32_t>;
KeyTuple key_tuple(const incxdp_worker_key &k) {
    return {std::string(k.mac, k.mac + 6), k.port, k.ip};
}

std::string mac_string(const uint8_t *p) {
    topo::Mac m{};
    std::memcpy(m.data(), p, m.size());
    return topo::mac_to_string(m);
}

bool netns_exists(const std::string &ns) {
    struct stat st {};
    return ::stat(("/var/run/netns/" + ns).c_str(), &st) == 0;
}

} // namespace

SwitchApplied apply_switch(const SwitchEntries &e, const std::string &pin_dir, Journal &journal,
                           Existing if_there) {
    const uint32_t id = e.job_id;
    SwitchApplied out;
    out.sw = e.sw;
    out.pin_dir = pin_dir;
    ensure_bpffs(pin_dir);
    PinnedMaps m = PinnedMaps::open(pin_dir);
    m.require_same_netns(fmt::format("add job {}", id));
    Fd parents = open_parents_map(pin_dir);

    // Resolve and check everything before the first write: every port the
    // entries name is loaded and has the MAC the file gives it.
    std::set<uint32_t> loaded;
    for (uint32_t ifx : map_keys<uint32_t>(m.ports.get()))
        loaded.insert(ifx);
    std::map<std::string, uint32_t> ifindex;
    std::map<std::string, topo::Mac> port_mac;
    for (const PortUse &p : e.ports) {
        const uint32_t ifx = ifindex_of(p.iface);
        if (!loaded.count(ifx))
            throw CtlError(fmt::format("job {}: incxdp is not loaded on port {} ('incxdp load "
                                       "-i {}')",
                                       id, p.iface, p.iface));
        const topo::Mac mac = mac_of(p.iface);
        if (p.mac && mac != *p.mac)
            throw CtlError(fmt::format("port {} has MAC {}, the topology says {}", p.iface,
                                       topo::mac_to_string(mac), topo::mac_to_string(*p.mac)));
        ifindex[p.iface] = ifx;
        port_mac[p.iface] = mac;
    }
    incxdp_job existing{};
    bpf_map_lookup_elem(m.jobs.get(), &id, &existing);
    if (existing.active && if_there == Existing::Refuse)
        throw CtlError(fmt::format("job {} already exists (incxdp job del {} first)", id, id));
    if (existing.active && existing.kind != INCXDP_JOB_STAR)
        throw CtlError(fmt::format("job {} is installed here as a roce-tree job; 'incxdp rules "
                                   "clear' it first",
                                   id));
    std::set<KeyTuple> keep_workers;
    for (const auto &w : e.workers) {
        keep_workers.insert(key_tuple(w.key));
        incxdp_worker other{};
        if (bpf_map_lookup_elem(m.workers.get(), &w.key, &other) == 0 && other.job != id)
            throw CtlError(fmt::format(
                "job {}: {} {} {}/{}:{} (via {}) already belongs to job {} as rank {}", id,
                w.is_switch ? "switch" : "worker", w.peer, mac_string(w.key.mac),
                util::format_ipv4_be(w.key.ip), ntohs(w.key.port), w.iface, other.job, other.rank));
    }
    out.replaced = existing.active != 0;
    out.pool_size = e.job.pool_size;
    out.pool_base = existing.active && existing.pool_size == e.job.pool_size
                        ? existing.pool_base
                        : choose_pool(m, id, 0, e.job.pool_size);

    std::set<uint32_t> keep_ports;
    for (const auto &g : e.egress)
        keep_ports.insert(ifindex.at(g.iface));
    std::vector<incxdp_worker_key> stale_workers;
    for (const auto &k : map_keys<incxdp_worker_key>(m.workers.get())) {
        incxdp_worker v{};
        if (bpf_map_lookup_elem(m.workers.get(), &k, &v) == 0 && v.job == id &&
            !keep_workers.count(key_tuple(k)))
            stale_workers.push_back(k);
    }
    std::vector<incxdp_egress_key> stale_egress;
    for (const auto &k : map_keys<incxdp_egress_key>(m.egress.get()))
        if (k.job == id && !keep_ports.count(k.ifindex))
            stale_egress.push_back(k);

    // The journal outlives this engine's PinnedMaps: it keeps the maps open.
    const int jobs_fd = journal.keep(std::move(m.jobs));
    const int workers_fd = journal.keep(std::move(m.workers));
    const int egress_fd = journal.keep(std::move(m.egress));
    const int parents_fd = journal.keep(std::move(parents));
    // Write order: slots, workers, group, parent, and the job entry last, so
    // the data path sees nothing of a new job until all of it is there.
    zero_slots(m, out.pool_base, out.pool_size);
    for (const auto &w : e.workers) {
        incxdp_worker v = w.value;
        v.ifindex = ifindex.at(w.iface);
        journal.save<incxdp_worker_key, incxdp_worker>(workers_fd, w.key);
        if (bpf_map_update_elem(workers_fd, &w.key, &v, BPF_ANY) != 0)
            throw CtlError(errno_msg(
                fmt::format("cannot add worker {} (rank {}, via {})", w.peer, v.rank, w.iface),
                errno));
    }
    for (const auto &g : e.egress) {
        const incxdp_egress_key k{id, ifindex.at(g.iface)};
        incxdp_egress v = g.value;
        std::memcpy(v.src_mac, port_mac.at(g.iface).data(), 6); // = the file's, checked above
        journal.save<incxdp_egress_key, incxdp_egress>(egress_fd, k);
        if (bpf_map_update_elem(egress_fd, &k, &v, BPF_ANY) != 0)
            throw CtlError(errno_msg(
                fmt::format("cannot add port {} to the job's multicast group", g.iface), errno));
    }
    for (const auto &k : stale_workers) {
        journal.save<incxdp_worker_key, incxdp_worker>(workers_fd, k);
        bpf_map_delete_elem(workers_fd, &k);
    }
    for (const auto &k : stale_egress) {
        journal.save<incxdp_egress_key, incxdp_egress>(egress_fd, k);
        bpf_map_delete_elem(egress_fd, &k);
    }
    incxdp_parent p = e.parent;
    p.ifindex = e.parent_iface.empty() ? 0 : ifindex.at(e.parent_iface);
    journal.save<uint32_t, incxdp_parent>(parents_fd, id);
    if (bpf_map_update_elem(parents_fd, &id, &p, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot set the parent of job {}", id), errno));
    incxdp_job jv = e.job;
    jv.pool_base = out.pool_base;
    journal.save<uint32_t, incxdp_job>(jobs_fd, id);
    if (bpf_map_update_elem(jobs_fd, &id, &jv, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot install job {}", id), errno));
    out.workers = e.workers.size();
    out.egress = e.egress.size();
    return out;
}

std::vector<SwitchApplied> apply_tree_netns(const topo::Topology & /*t: the job's file*/,
                                            const std::string &prefix, const CompiledJob &job,
                                            const std::string &pin_root) {
    Journal journal;
    std::vector<SwitchApplied> done;
    for (const auto &e : job.switches) {
        const std::string ns = topo::netns_name(prefix, e.sw);
        const std::string dir = topo::switch_pin_dir(pin_root, prefix, e.sw);
        try {
            SwitchApplied a;
            rules::in_netns(ns, [&] { a = apply_switch(e, dir, journal); });
            a.netns = ns;
            done.push_back(std::move(a));
        } catch (const std::exception &ex) {
            journal.rollback();
            std::string undone;
            for (const auto &d : done)
                undone += (undone.empty() ? "" : ", ") + d.sw;
            throw CtlError(fmt::format("apply job {} on switch {} (namespace {}, pins {}): "
                                       "{}{}",
                                       job.id, e.sw, ns, dir, ex.what(),
                                       undone.empty() ? "" : " (restored: " + undone + ")"));
        }
    }
    journal.commit();
    return done;
}

bool remove_here(uint32_t job, const std::string &pin_dir) {
    ensure_bpffs(pin_dir);
    if (!PinnedMaps::present(pin_dir))
        return false;
    PinnedMaps m = PinnedMaps::open(pin_dir);
    incxdp_job j{};
    if (job >= INCXDP_MAX_JOBS || bpf_map_lookup_elem(m.jobs.get(), &job, &j) != 0 || !j.active)
        return false;
    job_del(job, pin_dir); // entry, workers, group, parent, slots
    return true;
}

size_t remove_tree_netns(const topo::Topology & /*t: the file the job came from*/,
                         const std::string &prefix, const CompiledJob &job,
                         const std::string &pin_root) {
    size_t n = 0;
    for (const auto &e : job.switches) {
        const std::string ns = topo::netns_name(prefix, e.sw);
        if (!netns_exists(ns))
            continue;
        const std::string dir = topo::switch_pin_dir(pin_root, prefix, e.sw);
        try {
            rules::in_netns(ns, [&] { n += remove_here(job.id, dir) ? 1 : 0; });
        } catch (const std::exception &ex) {
            throw CtlError(fmt::format("remove tree job {} on switch {} (namespace {}, pins {}): "
                                       "{}",
                                       job.id, e.sw, ns, dir, ex.what()));
        }
    }
    return n;
}

// ---- every job kind --------------------------------------------------------------

namespace {

rules::Options roce_options(uint32_t job, const NetnsTarget &where) {
    rules::Options o;
    o.prefix = where.prefix;
    o.pin_root = where.pin_root;
    o.job = job;
    o.mode = where.mode;
    return o;
}

SwitchApplied from_roce(const rules::Applied &a) {
    SwitchApplied d;
    d.sw = a.sw;
    d.netns = a.netns;
    d.pin_dir = a.pin_dir;
    d.pool_base = a.pool_base;
    d.pool_size = a.pool_size;
    d.replaced = a.reapplied;
    d.egress = a.egress;
    d.conns = a.conns;
    return d;
}

} // namespace

std::vector<SwitchApplied> apply_job_netns(const topo::Topology &t, uint32_t job_id,
                                           const NetnsTarget &where) {
    if (t.job(job_id).kind != topo::JobKind::RoceTree)
        return apply_tree_netns(t, where.prefix, compile_job(t, job_id), where.pin_root);
    std::vector<SwitchApplied> out;
    for (const auto &a : rules::apply(t, roce_options(job_id, where)))
        out.push_back(from_roce(a));
    return out;
}

void remove_job_netns(const topo::Topology &t, uint32_t job_id, const NetnsTarget &where) {
    if (t.job(job_id).kind != topo::JobKind::RoceTree)
        remove_tree_netns(t, where.prefix, compile_job(t, job_id), where.pin_root);
    else
        rules::clear(t, roce_options(job_id, where));
}

SwitchApplied apply_job_here(const topo::Topology &t, uint32_t job_id, const std::string &sw,
                             const std::string &pin_dir, AttachMode mode) {
    if (t.job(job_id).kind == topo::JobKind::RoceTree) {
        rules::Options o;
        o.mode = mode;
        SwitchApplied d = from_roce(rules::apply_local(t, job_id, sw, pin_dir, o));
        d.pin_dir = pin_dir;
        return d;
    }
    Journal journal;
    SwitchApplied d = apply_switch(compile_job(t, job_id).sw(sw), pin_dir, journal);
    journal.commit();
    return d;
}

} // namespace incxdp::ctl::apply
