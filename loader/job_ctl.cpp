// SPDX-License-Identifier: BSD-2-Clause
// Jobs: the rules SwitchML's controller writes into the Tofino tables,
// written into the engine's maps instead: the worker table (address ->
// job, rank), the multicast group with its per-port rewrite, and a slot
// pool carved out of the shared slot array.
#include "pinned_maps.h"
#include "port_util.h"

#include <incxdp/rules_ctl.h>
#include <incxdp/util/ipv4.h>

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <memory>
#include <regex>
#include <set>

namespace incxdp::ctl {

namespace {

using util::format_ipv4_be;

// Network order, as the engine's maps hold addresses.
uint32_t parse_ip(const std::string &s, const std::string &what)
{
    if (const auto be = util::parse_ipv4_be(s))
        return *be;
    throw CtlError(fmt::format("{}: '{}' is not an IPv4 address", what, s));
}

incxdp_worker_key worker_key(const WorkerSpec &w)
{
    incxdp_worker_key k{};
    std::memcpy(k.mac, w.mac.data(), 6);
    k.port = htons(w.port);
    k.ip = w.ip;
    return k;
}

// First fit in the shared slot array.
uint32_t allocate_pool(const PinnedMaps &m, uint32_t size)
{
    std::vector<std::pair<uint32_t, uint32_t>> used;
    for (const auto &[id, j] : m.active_jobs())
        used.emplace_back(j.pool_base, j.pool_base + j.pool_size);
    std::sort(used.begin(), used.end());
    uint32_t total = m.slot_entries(), at = 0, free_total = 0, largest = 0;
    used.emplace_back(total, total); // the end of the array closes the last gap
    for (const auto &[b, e] : used) {
        uint32_t gap = b > at ? b - at : 0;
        if (gap >= size)
            return at;
        free_total += gap;
        largest = std::max(largest, gap);
        at = std::max(at, e);
    }
    throw CtlError(fmt::format("job needs {} slots but the switch has {} of {} free (largest free range {}); "
                               "free slots with 'incxdp job del', or reload with a larger --slots",
                               size, free_total, total, largest));
}

void zero_slots(const PinnedMaps &m, uint32_t base, uint32_t size)
{
    auto zero = std::make_unique<incxdp_slot>();
    std::memset(zero.get(), 0, sizeof(incxdp_slot));
    for (uint32_t i = base; i < base + size; i++)
        if (bpf_map_update_elem(m.slots.get(), &i, zero.get(), BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("cannot reset slot {}", i), errno));
}

void validate(const JobSpec &job)
{
    if (job.id >= INCXDP_MAX_JOBS)
        throw CtlError(fmt::format("job id {} out of range (0..{})", job.id, INCXDP_MAX_JOBS - 1));
    size_t n = job.workers.size();
    if (n == 0 || n > INCXDP_MAX_WORKERS)
        throw CtlError(fmt::format("job {}: {} workers; a job has 1..{}", job.id, n, INCXDP_MAX_WORKERS));
    std::vector<bool> rank_seen(n);
    std::set<std::tuple<topo::Mac, uint32_t, uint16_t>> addrs;
    for (const auto &w : job.workers) {
        if (w.rank >= n)
            throw CtlError(fmt::format("job {}: rank {} out of range for {} workers", job.id, w.rank, n));
        if (rank_seen[w.rank])
            throw CtlError(fmt::format("job {}: rank {} given twice", job.id, w.rank));
        rank_seen[w.rank] = true;
        if (!addrs.insert({w.mac, w.ip, w.port}).second)
            throw CtlError(fmt::format("job {}: two ranks share the address {}/{}:{}", job.id,
                                       topo::mac_to_string(w.mac), format_ipv4_be(w.ip), w.port));
    }
    if (job.slots == 0 || job.slots > INCXDP_SLOT_INDEX_MASK + 1)
        throw CtlError(fmt::format("job {}: slots {} out of range (1..{})", job.id, job.slots,
                                   INCXDP_SLOT_INDEX_MASK + 1));
    if (job.max_elems == 0 || job.max_elems > INCXDP_MAX_ELEMS)
        throw CtlError(fmt::format("job {}: max elems {} out of range (1..{})", job.id, job.max_elems,
                                   INCXDP_MAX_ELEMS));
    if (job.switch_ip == 0)
        throw CtlError(fmt::format("job {}: no switch address (--switch-ip)", job.id));
}

} // namespace

WorkerSpec parse_worker_spec(const std::string &s)
{
    static const std::regex re(R"(^(\d+)=([0-9A-Fa-f:]{17})/([0-9.]+):(\d+)@([^\s@]+)$)");
    std::smatch mt;
    if (!std::regex_match(s, mt, re))
        throw CtlError(fmt::format("malformed worker '{}': expected RANK=MAC/IP:PORT@IFACE, "
                                   "e.g. 0=02:00:00:00:00:01/10.0.0.1:4000@p-w0", s));
    WorkerSpec w;
    // Digits only (the regex), but possibly too many for any integer type.
    auto number = [](const std::string &digits) -> unsigned long {
        return digits.size() > 9 ? ~0ul : std::stoul(digits);
    };
    unsigned long rank = number(mt[1]), port = number(mt[4]);
    if (rank >= INCXDP_MAX_WORKERS)
        throw CtlError(fmt::format("worker '{}': rank {} out of range (0..{})", s, std::string(mt[1]),
                                   INCXDP_MAX_WORKERS - 1));
    if (port == 0 || port > 65535)
        throw CtlError(fmt::format("worker '{}': UDP port {} out of range", s, std::string(mt[4])));
    w.rank = static_cast<uint16_t>(rank);
    try {
        w.mac = topo::mac_from_string(mt[2]);
    } catch (const std::exception &e) {
        throw CtlError(fmt::format("worker '{}': {}", s, e.what()));
    }
    w.ip = parse_ip(mt[3], fmt::format("worker '{}'", s));
    w.port = static_cast<uint16_t>(port);
    w.iface = mt[5];
    return w;
}

JobSpec job_from_topology(const topo::Topology &t, uint32_t id)
{
    const topo::Job &tj = t.job(id);
    if (tj.kind != topo::JobKind::Star)
        throw CtlError(fmt::format("job {} of topology {} is a {} job: install it with 'incxdp rules apply'",
                                   id, t.name, topo::job_kind_name(tj.kind)));
    const topo::Node &sw = t.node(tj.switch_name);
    JobSpec job;
    job.id = id;
    job.switch_ip = parse_ip(sw.ip, fmt::format("switch {}", sw.name));
    job.slots = tj.slots;
    for (size_t r = 0; r < tj.workers.size(); r++) {
        const topo::Node &h = t.node(tj.workers[r]);
        WorkerSpec w;
        w.rank = static_cast<uint16_t>(r);
        w.mac = t.host_iface_for(h.name, sw.name).mac;
        w.ip = parse_ip(h.ip, fmt::format("host {}", h.name));
        w.port = tj.worker_port;
        w.iface = t.switch_port_for(sw.name, h.name).name;
        job.workers.push_back(w);
    }
    return job;
}

void job_add(const JobSpec &job, const std::string &pin_dir)
{
    validate(job);
    PinnedMaps m = PinnedMaps::open(pin_dir);
    m.require_same_netns(fmt::format("add job {}", job.id));

    incxdp_job existing{};
    if (bpf_map_lookup_elem(m.jobs.get(), &job.id, &existing) == 0 && existing.active)
        throw CtlError(fmt::format("job {} already exists (incxdp job del {} first)", job.id, job.id));

    // Resolve everything before the first write.
    struct Port {
        uint32_t ifindex;
        topo::Mac mac;
    };
    std::vector<Port> ports;
    for (const auto &w : job.workers) {
        uint32_t ifx = ifindex_of(w.iface);
        struct bpf_devmap_val dv {};
        if (bpf_map_lookup_elem(m.ports.get(), &ifx, &dv) != 0)
            throw CtlError(fmt::format("job {}: rank {} is reached through {}, where incxdp is not loaded",
                                       job.id, w.rank, w.iface));
        for (const auto &p : ports)
            if (p.ifindex == ifx)
                throw CtlError(fmt::format("job {}: two workers behind port {}; a job has one worker per port",
                                           job.id, w.iface));
        ports.push_back({ifx, mac_of(w.iface)});
        incxdp_worker_key k = worker_key(w);
        incxdp_worker other{};
        if (bpf_map_lookup_elem(m.workers.get(), &k, &other) == 0)
            throw CtlError(fmt::format("job {}: worker {}/{}:{} already belongs to job {} as rank {}", job.id,
                                       topo::mac_to_string(w.mac), format_ipv4_be(w.ip), w.port, other.job,
                                       other.rank));
    }
    uint32_t base = allocate_pool(m, job.slots);

    // Write order: slots, rewrites, workers, and the job entry last, so the
    // data path sees nothing of the job until all of it is in place.
    std::vector<incxdp_worker_key> added_workers;
    std::vector<incxdp_egress_key> added_egress;
    auto undo = [&] {
        for (auto &k : added_workers)
            bpf_map_delete_elem(m.workers.get(), &k);
        for (auto &k : added_egress)
            bpf_map_delete_elem(m.egress.get(), &k);
    };
    try {
        zero_slots(m, base, job.slots);
        for (size_t i = 0; i < job.workers.size(); i++) {
            const WorkerSpec &w = job.workers[i];
            incxdp_egress_key ek{job.id, ports[i].ifindex};
            incxdp_egress ev{};
            std::memcpy(ev.dst_mac, w.mac.data(), 6);
            std::memcpy(ev.src_mac, ports[i].mac.data(), 6);
            ev.dst_ip = w.ip;
            ev.src_ip = job.switch_ip;
            ev.dst_port = htons(w.port);
            if (bpf_map_update_elem(m.egress.get(), &ek, &ev, BPF_NOEXIST) != 0)
                throw CtlError(errno_msg(fmt::format("job {}: cannot add the rewrite for {}", job.id, w.iface), errno));
            added_egress.push_back(ek);

            incxdp_worker_key wk = worker_key(w);
            incxdp_worker wv{job.id, w.rank, 0, ports[i].ifindex};
            if (bpf_map_update_elem(m.workers.get(), &wk, &wv, BPF_NOEXIST) != 0)
                throw CtlError(errno_msg(fmt::format("job {}: cannot add worker rank {}", job.id, w.rank), errno));
            added_workers.push_back(wk);
        }
        incxdp_job jv{};
        jv.active = 1;
        jv.nworkers = static_cast<uint32_t>(job.workers.size());
        jv.pool_base = base;
        jv.pool_size = job.slots;
        jv.max_elems = job.max_elems;
        jv.switch_ip = job.switch_ip;
        if (bpf_map_update_elem(m.jobs.get(), &job.id, &jv, BPF_ANY) != 0)
            throw CtlError(errno_msg(fmt::format("cannot install job {}", job.id), errno));
    } catch (...) {
        undo();
        throw;
    }
}

std::vector<JobInfo> job_list(const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    std::vector<JobInfo> out;
    std::map<uint32_t, std::vector<WorkerSpec>> workers;
    const bool same_netns = m.loaded_in() == NetnsId::current();
    for (const auto &k : map_keys<incxdp_worker_key>(m.workers.get())) {
        incxdp_worker v{};
        if (bpf_map_lookup_elem(m.workers.get(), &k, &v) != 0)
            continue;
        WorkerSpec w;
        w.rank = v.rank;
        std::memcpy(w.mac.data(), k.mac, 6);
        w.ip = k.ip;
        w.port = ntohs(k.port);
        w.iface = same_netns ? ifname_of(v.ifindex) : fmt::format("ifindex {}", v.ifindex);
        workers[v.job].push_back(w);
    }
    for (const auto &[id, j] : m.active_jobs()) {
        JobInfo info;
        info.id = id;
        info.kind = j.kind;
        info.parent_qpn = j.parent_qpn;
        info.nworkers = j.nworkers;
        info.pool_base = j.pool_base;
        info.pool_size = j.pool_size;
        info.max_elems = j.max_elems;
        info.switch_addr = format_ipv4_be(j.switch_ip);
        info.workers = workers[id];
        std::sort(info.workers.begin(), info.workers.end(),
                  [](const WorkerSpec &a, const WorkerSpec &b) { return a.rank < b.rank; });
        out.push_back(std::move(info));
    }
    return out;
}

void job_reset(uint32_t id, const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    m.require_same_netns(fmt::format("reset job {}", id));
    incxdp_job j{};
    if (id >= INCXDP_MAX_JOBS || bpf_map_lookup_elem(m.jobs.get(), &id, &j) != 0 || !j.active)
        throw CtlError(fmt::format("no job {}", id));
    zero_slots(m, j.pool_base, j.pool_size);
    if (j.kind == INCXDP_JOB_ROCE_TREE)
        rules::reset_conns(id, pin_dir);
}

void job_del(uint32_t id, const std::string &pin_dir)
{
    PinnedMaps m = PinnedMaps::open(pin_dir);
    m.require_same_netns(fmt::format("delete job {}", id));
    incxdp_job j{};
    if (id >= INCXDP_MAX_JOBS || bpf_map_lookup_elem(m.jobs.get(), &id, &j) != 0 || !j.active)
        throw CtlError(fmt::format("no job {}", id));
    // Deactivate first: from here on the data path drops the job's frames.
    incxdp_job none{};
    if (bpf_map_update_elem(m.jobs.get(), &id, &none, BPF_ANY) != 0)
        throw CtlError(errno_msg(fmt::format("cannot remove job {}", id), errno));

    for (const auto &k : map_keys<incxdp_worker_key>(m.workers.get())) {
        incxdp_worker v{};
        if (bpf_map_lookup_elem(m.workers.get(), &k, &v) == 0 && v.job == id)
            bpf_map_delete_elem(m.workers.get(), &k);
    }
    for (const auto &k : map_keys<incxdp_egress_key>(m.egress.get()))
        if (k.job == id)
            bpf_map_delete_elem(m.egress.get(), &k);
    if (j.kind == INCXDP_JOB_ROCE_TREE)
        rules::delete_conns(id, pin_dir);
    // A native tree job's link to its parent switch (absent in engines
    // loaded before trees existed).
    if (int pfd = bpf_obj_get(map_pin_path(pin_dir, INCXDP_MAP_PARENTS).c_str()); pfd >= 0) {
        Fd parents(pfd);
        incxdp_parent none_parent{};
        bpf_map_update_elem(parents.get(), &id, &none_parent, BPF_ANY);
    }
    zero_slots(m, j.pool_base, j.pool_size);
}

// ---- the connections of roce-tree jobs (declared in rules_ctl.h) -------------
// Here rather than in rules_ctl.cpp because job reset/del need them and the
// job rules build on their own (tests/fuzz).
namespace rules {

namespace {

// The engine's connection map; an invalid Fd if the engine predates RoCE.
Fd open_roce_conns(const std::string &dir)
{
    const std::string path = map_pin_path(dir, INCXDP_MAP_ROCE_CONNS);
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0 && errno != ENOENT)
        throw CtlError(errno_msg("cannot open pinned map " + path, errno));
    return Fd(fd);
}

} // namespace

size_t reset_conns(uint32_t job, const std::string &pin_dir)
{
    Fd fd = open_roce_conns(pin_dir);
    if (!fd)
        return 0;
    size_t n = 0;
    for (const auto &k : map_keys<incxdp_roce_conn_key>(fd.get())) {
        incxdp_roce_conn v{};
        if (bpf_map_lookup_elem(fd.get(), &k, &v) != 0 || v.job != job)
            continue;
        v.epsn = v.rx_base;
        v.msn = 0;
        v.imm = 0;
        v.nak_sent = 0;
        v.peer_acked = 0;
        v.peer_resend = 0;
        v.acked_up = 0;
        if (bpf_map_update_elem(fd.get(), &k, &v, BPF_EXIST) != 0)
            throw CtlError(errno_msg(fmt::format("job {}: cannot reset connection QPN 0x{:06x}", job, k.qpn), errno));
        n++;
    }
    return n;
}

size_t delete_conns(uint32_t job, const std::string &pin_dir)
{
    Fd fd = open_roce_conns(pin_dir);
    if (!fd)
        return 0;
    size_t n = 0;
    for (const auto &k : map_keys<incxdp_roce_conn_key>(fd.get())) {
        incxdp_roce_conn v{};
        if (bpf_map_lookup_elem(fd.get(), &k, &v) == 0 && v.job == job && bpf_map_delete_elem(fd.get(), &k) == 0)
            n++;
    }
    return n;
}

} // namespace rules

} // namespace incxdp::ctl
