// SPDX-License-Identifier: BSD-2-Clause
// The compile step of every star and tree job (apply_ctl.h): a job's
// aggregation tree into each switch's entries, per the contract of
// bpf/include/incxdp/maps.h (incxdp_job.fanin, incxdp_worker.child,
// incxdp_parents); a one-switch tree is a star (fanin 0). Pure.
#include <incxdp/apply_ctl.h>
#include <incxdp/util/ipv4.h>

#include "port_util.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace incxdp::ctl::apply {
namespace {

// The interface of `from` whose link ends at `to`.
const topo::Iface &iface_to(const topo::Topology &t, const std::string &from,
                            const std::string &to) {
    for (const auto &i : t.node(from).ifaces)
        if (i.peer_node == to)
            return i;
    throw CtlError(fmt::format("topology {}: no link between '{}' and '{}'", t.name, from, to));
}

std::string ctx(const TreeJobSpec &s) {
    return fmt::format("tree job {}", s.id);
}

void check_spec(const TreeJobSpec &s) {
    if (s.id >= INCXDP_MAX_JOBS)
        throw CtlError(fmt::format("{}: id out of range (0..{})", ctx(s), INCXDP_MAX_JOBS - 1));
    if (s.contributors.empty() || s.contributors.size() > INCXDP_MAX_WORKERS)
        throw CtlError(fmt::format("{}: {} contributing hosts; a job has 1..{}", ctx(s),
                                   s.contributors.size(), INCXDP_MAX_WORKERS));
    std::set<std::string> seen;
    for (const auto &h : s.contributors)
        if (!seen.insert(h).second)
            throw CtlError(fmt::format("{}: host '{}' is listed twice", ctx(s), h));
    for (const auto &h : s.receivers)
        if (!seen.count(h))
            throw CtlError(fmt::format("{}: host '{}' receives the result but contributes "
                                       "nothing; a native tree has no receive-only hosts (make it "
                                       "a contributor of zeros)",
                                       ctx(s), h));
    if (s.slots == 0 || s.slots > INCXDP_SLOT_INDEX_MASK + 1)
        throw CtlError(fmt::format("{}: slots {} out of range (1..{})", ctx(s), s.slots,
                                   INCXDP_SLOT_INDEX_MASK + 1));
    if (s.max_elems == 0 || s.max_elems > INCXDP_MAX_ELEMS)
        throw CtlError(fmt::format("{}: max elems {} out of range (1..{})", ctx(s), s.max_elems,
                                   INCXDP_MAX_ELEMS));
}

// What `job add` has always refused, with its messages.
void validate(const JobSpec &job) {
    if (job.id >= INCXDP_MAX_JOBS)
        throw CtlError(fmt::format("job id {} out of range (0..{})", job.id, INCXDP_MAX_JOBS - 1));
    const size_t n = job.workers.size();
    if (n == 0 || n > INCXDP_MAX_WORKERS)
        throw CtlError(
            fmt::format("job {}: {} workers; a job has 1..{}", job.id, n, INCXDP_MAX_WORKERS));
    std::vector<bool> rank_seen(n);
    std::set<std::tuple<topo::Mac, uint32_t, uint16_t>> addrs;
    std::set<std::string> ports;
    for (const auto &w : job.workers) {
        if (w.rank >= n)
            throw CtlError(
                fmt::format("job {}: rank {} out of range for {} workers", job.id, w.rank, n));
        if (rank_seen[w.rank])
            throw CtlError(fmt::format("job {}: rank {} given twice", job.id, w.rank));
        rank_seen[w.rank] = true;
        if (!addrs.insert({w.mac, w.ip, w.port}).second)
            throw CtlError(fmt::format("job {}: two ranks share the address {}/{}:{}", job.id,
                                       topo::mac_to_string(w.mac), util::format_ipv4_be(w.ip),
                                       w.port));
        // The multicast group has one rewrite per (job, port).
        if (!ports.insert(w.iface).second)
            throw CtlError(
                fmt::format("job {}: two workers behind port {}; a job has one worker per port",
                            job.id, w.iface));
    }
    if (job.slots == 0 || job.slots > INCXDP_SLOT_INDEX_MASK + 1)
        throw CtlError(fmt::format("job {}: slots {} out of range (1..{})", job.id, job.slots,
                                   INCXDP_SLOT_INDEX_MASK + 1));
    if (job.max_elems == 0 || job.max_elems > INCXDP_MAX_ELEMS)
        throw CtlError(fmt::format("job {}: max elems {} out of range (1..{})", job.id,
                                   job.max_elems, INCXDP_MAX_ELEMS));
    if (job.switch_ip == 0)
        throw CtlError(fmt::format("job {}: no switch address (--switch-ip)", job.id));
}

} // namespace

SwitchEntries compile_star(const JobSpec &job, const std::string &sw) {
    validate(job);
    SwitchEntries e;
    e.job_id = job.id;
    e.sw = sw;
    e.root = true;
    e.job.active = 1;
    e.job.nworkers = static_cast<uint32_t>(job.workers.size());
    e.job.pool_size = job.slots;
    e.job.max_elems = job.max_elems;
    e.job.switch_ip = job.switch_ip;
    e.job.kind = INCXDP_JOB_STAR;
    e.job.fanin = 0; // one switch: every rank is a child, its bit is its rank
    std::vector<const WorkerSpec *> by_rank(job.workers.size());
    for (const auto &w : job.workers)
        by_rank[w.rank] = &w;
    for (const WorkerSpec *w : by_rank) {
        WorkerEntry we;
        we.peer = fmt::format("rank {}", w->rank);
        we.iface = w->iface;
        std::memcpy(we.key.mac, w->mac.data(), 6);
        we.key.port = htons(w->port);
        we.key.ip = w->ip;
        we.value.job = job.id;
        we.value.rank = w->rank;
        e.workers.push_back(we);

        EgressEntry eg;
        eg.peer = we.peer;
        eg.iface = w->iface;
        std::memcpy(eg.value.dst_mac, w->mac.data(), 6); // src_mac: the port's, at apply
        eg.value.dst_ip = w->ip;
        eg.value.src_ip = job.switch_ip;
        eg.value.dst_port = htons(w->port);
        e.egress.push_back(eg);
        e.ports.push_back({w->iface, std::nullopt});
    }
    return e;
}

namespace {
const topo::Job &job_of(const topo::Topology &t, uint32_t job_id) {
    for (const auto &x : t.jobs)
        if (x.id == job_id)
            return x;
    throw CtlError(fmt::format("topology {} has no job {}", t.name, job_id));
}
} // namespace

const SwitchEntries &CompiledJob::sw(const std::string &name) const {
    for (const auto &s : switches)
        if (s.sw == name)
            return s;
    throw CtlError(fmt::format("tree job {}: switch '{}' is not in its tree", id, name));
}

TreeJobSpec tree_spec(const topo::Topology &t, uint32_t job_id) {
    const topo::Job *j = &job_of(t, job_id);
    if (j->kind != topo::JobKind::Tree)
        throw CtlError(fmt::format("job {} of topology {} is a {} job, not a tree job", job_id,
                                   t.name, topo::job_kind_name(j->kind)));
    TreeJobSpec s;
    s.id = j->id;
    s.contributors = j->workers;
    s.receivers = j->workers;
    s.worker_port = j->worker_port;
    s.slots = j->slots;
    return s;
}

CompiledJob compile_tree(const topo::Topology &t, const TreeJobSpec &spec,
                         const topo::AggPlan &plan) {
    check_spec(spec);
    std::map<std::string, uint16_t> rank;
    for (size_t r = 0; r < spec.contributors.size(); ++r)
        rank[spec.contributors[r]] = static_cast<uint16_t>(r);
    for (const auto &h : plan.contributors)
        if (!rank.count(h))
            throw CtlError(
                fmt::format("{}: the plan has contributor '{}', the job does not", ctx(spec), h));
    if (plan.contributors.size() != spec.contributors.size())
        throw CtlError(fmt::format("{}: the plan has {} contributors, the job {}", ctx(spec),
                                   plan.contributors.size(), spec.contributors.size()));

    // The lowest rank at or below every node of the tree: the rank a switch
    // writes into its partials and is known by at its parent.
    std::map<std::string, uint16_t> low;
    for (const auto &[host, leaf] : plan.leaf) {
        if (!rank.count(host))
            continue;
        const uint16_t r = rank.at(host);
        low[host] = r;
        for (std::string s = leaf;;) {
            auto [it, fresh] = low.emplace(s, r);
            if (!fresh)
                it->second = std::min(it->second, r);
            const auto &ps = plan.sw(s);
            if (!ps.parent)
                break;
            s = *ps.parent;
        }
    }

    CompiledJob out;
    out.id = spec.id;
    out.root = plan.root;
    out.ranks = spec.contributors;
    const uint32_t nworkers = static_cast<uint32_t>(spec.contributors.size());
    if (plan.switches.size() == 1) {
        // The tree of one switch is a star: the same entries `job add`
        // writes, with the ports' MACs from the file.
        const topo::PlanSwitch &ps = plan.switches[0];
        const std::string where = fmt::format("{}: switch {}", ctx(spec), ps.name);
        JobSpec star;
        star.id = spec.id;
        star.switch_ip = be_ip(t.node(ps.name).ip, where);
        star.slots = spec.slots;
        star.max_elems = spec.max_elems;
        std::map<std::string, topo::Mac> port_mac;
        for (const std::string &h : ps.children) {
            const topo::Iface &ours = iface_to(t, ps.name, h);
            WorkerSpec w;
            w.rank = rank.at(h);
            w.mac = iface_to(t, h, ps.name).mac;
            w.ip = be_ip(t.node(h).ip, where + ", child " + h);
            w.port = spec.worker_port;
            w.iface = ours.name;
            star.workers.push_back(w);
            port_mac[ours.name] = ours.mac;
        }
        SwitchEntries e = compile_star(star, ps.name);
        for (auto &w : e.workers)
            w.peer = spec.contributors.at(w.value.rank);
        for (size_t i = 0; i < e.egress.size(); ++i) {
            e.egress[i].peer = e.workers[i].peer;
            std::memcpy(e.egress[i].value.src_mac, port_mac.at(e.egress[i].iface).data(), 6);
        }
        for (auto &p : e.ports)
            p.mac = port_mac.at(p.iface);
        out.switches.push_back(std::move(e));
        return out;
    }
    for (const topo::PlanSwitch &ps : plan.switches) {
        const std::string where = fmt::format("{}: switch {}", ctx(spec), ps.name);
        const topo::Node &node = t.node(ps.name);
        const uint32_t own_ip = be_ip(node.ip, where);
        SwitchEntries e;
        e.job_id = spec.id;
        e.sw = ps.name;
        e.root = !ps.parent;
        if (ps.expected == 0 || ps.expected > INCXDP_MAX_WORKERS)
            throw CtlError(fmt::format("{}: fan-in {} (1..{} children with contributors)", where,
                                       ps.expected, INCXDP_MAX_WORKERS));
        e.job.active = 1;
        e.job.nworkers = nworkers;
        e.job.pool_size = spec.slots;
        e.job.max_elems = spec.max_elems;
        e.job.switch_ip = own_ip;
        e.job.kind = INCXDP_JOB_STAR;
        e.job.fanin = ps.expected;

        uint16_t bit = 0;
        for (const std::string &child : ps.children) {
            const topo::Node &cn = t.node(child);
            const bool is_switch = cn.kind == topo::NodeKind::Switch;
            if (!is_switch && !rank.count(child))
                continue; // checked above: every member contributes
            const topo::Iface &ours = iface_to(t, ps.name, child);
            const topo::Iface &theirs = iface_to(t, child, ps.name);
            const uint32_t child_ip = be_ip(cn.ip, where + ", child " + child);
            WorkerEntry w;
            w.peer = child;
            w.is_switch = is_switch;
            w.iface = ours.name;
            std::memcpy(w.key.mac, theirs.mac.data(), 6);
            w.key.port = htons(is_switch ? partial_src_port(spec.id) : spec.worker_port);
            w.key.ip = child_ip;
            w.value.job = spec.id;
            w.value.rank = low.at(child);
            w.value.child = static_cast<uint16_t>(bit | (is_switch ? INCXDP_CHILD_SWITCH : 0));
            e.workers.push_back(w);

            EgressEntry eg;
            eg.peer = child;
            eg.iface = ours.name;
            std::memcpy(eg.value.dst_mac, theirs.mac.data(), 6);
            std::memcpy(eg.value.src_mac, ours.mac.data(), 6);
            eg.value.dst_ip = child_ip;
            eg.value.src_ip = own_ip;
            eg.value.dst_port = htons(is_switch ? spec.native_port : spec.worker_port);
            e.egress.push_back(eg);
            e.ports.push_back({ours.name, ours.mac});
            ++bit;
        }
        if (bit != ps.expected)
            throw CtlError(fmt::format("{}: {} children with contributors, the plan expects {}",
                                       where, bit, ps.expected));
        if (ps.parent) {
            const topo::Iface &ours = iface_to(t, ps.name, *ps.parent);
            const topo::Iface &theirs = iface_to(t, *ps.parent, ps.name);
            e.parent_iface = ours.name;
            e.parent_node = *ps.parent;
            std::memcpy(e.parent.dst_mac, theirs.mac.data(), 6);
            std::memcpy(e.parent.src_mac, ours.mac.data(), 6);
            e.parent.dst_ip = be_ip(t.node(*ps.parent).ip, where + ", parent " + *ps.parent);
            e.parent.src_ip = own_ip;
            e.parent.dst_port = htons(spec.native_port);
            e.parent.src_port = htons(partial_src_port(spec.id));
            e.parent.rank = low.at(ps.name);
            e.ports.push_back({ours.name, ours.mac});
        }
        out.switches.push_back(std::move(e));
    }
    return out;
}

CompiledJob compile_tree(const topo::Topology &t, uint32_t job_id) {
    tree_spec(t, job_id); // a tree job, or CtlError
    return compile_job(t, job_id);
}

topo::AggPlan plan_job(const topo::Topology &t, uint32_t job_id) {
    try {
        const topo::Job &j = t.job(job_id);
        return topo::build_agg_tree(t, j.switch_name, {j.id, j.workers, j.workers});
    } catch (const topo::TopologyError &e) {
        throw CtlError(e.what());
    }
}

CompiledJob compile_job(const topo::Topology &t, uint32_t job_id) {
    const topo::Job *j = &job_of(t, job_id);
    if (j->kind == topo::JobKind::RoceTree)
        throw CtlError(fmt::format("job {} of topology {} is a roce-tree job: rules::compile() "
                                   "compiles its connections",
                                   job_id, t.name));
    TreeJobSpec spec;
    spec.id = j->id;
    spec.contributors = j->workers;
    spec.receivers = j->workers;
    spec.worker_port = j->worker_port;
    spec.slots = j->slots;
    const topo::AggPlan plan = plan_job(t, job_id);
    // The parser links a star's workers to its switch: they hang below it.
    if (j->kind == topo::JobKind::Star && plan.switches.size() != 1)
        throw CtlError(fmt::format("star job {} of topology {}: its workers hang below {} "
                                   "switches, a star has one ({})",
                                   job_id, t.name, plan.switches.size(), j->switch_name));
    return compile_tree(t, spec, plan);
}

} // namespace incxdp::ctl::apply
