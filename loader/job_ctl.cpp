// SPDX-License-Identifier: BSD-2-Clause
// Jobs: the rules SwitchML's controller writes into the Tofino tables,
// written into the engine's maps instead: the worker table (address ->
// job, rank), the multicast group with its per-port rewrite, and a slot
// pool carved out of the shared slot array. `job add` compiles and applies
// a star as `incxdp apply` does (apply_ctl.h).
#include "map_journal.h"
#include "pinned_maps.h"
#include "port_util.h"

#include <incxdp/apply_ctl.h>
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

// A star is the one-switch tree: the same compile and apply as `incxdp
// apply` (apply_ctl.h), refusing a job that is there already.
void job_add(const JobSpec &job, const std::string &pin_dir) {
    const apply::SwitchEntries e = apply::compile_star(job);
    Journal journal;
    apply::apply_switch(e, pin_dir, journal, apply::Existing::Refuse);
    journal.commit();
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
    // A roce-tree job's parent connection is its incxdp_parents entry
    // (absent in engines loaded before trees existed).
    const int pfd = bpf_obj_get(map_pin_path(pin_dir, INCXDP_MAP_PARENTS).c_str());
    const Fd parents(pfd);
    for (const auto &[id, j] : m.active_jobs()) {
        JobInfo info;
        info.id = id;
        info.kind = j.kind;
        incxdp_parent up{};
        if (j.kind == INCXDP_JOB_ROCE_TREE && parents.get() >= 0 &&
            bpf_map_lookup_elem(parents.get(), &id, &up) == 0 && up.ifindex)
            info.parent_qpn = up.qpn;
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
