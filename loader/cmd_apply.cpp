// SPDX-License-Identifier: BSD-2-Clause
// incxdp apply | remove FILE: plan -> compile -> apply of every job of a
// topology, whatever its kind (docs/APPLY.md), through the one dispatch of
// apply_ctl.h: star (a one-switch tree) and tree jobs compiled and written
// with one journal, roce-tree jobs by the RoCE installer. Either on every
// switch namespace of a topology that is up, or (--node NAME) only that
// node's part, on the machine this runs on.
#include "commands.h"

#include <incxdp/apply_ctl.h>
#include <incxdp/rules_ctl.h>
#include <incxdp/util/ipv4.h>
#include <incxdp/util/mac.h>

#include "port_util.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <optional>

namespace incxdp::cli {
namespace {

using nlohmann::json;
namespace apply = ctl::apply;
namespace rules = ctl::rules;

struct ApplyArgs {
    CommonFlags flags;
    std::string file;
    std::vector<uint32_t> jobs;
    std::string prefix = "ix-";
    std::string pin_root;
    std::string node;
    std::string pin_dir; ///< --node: the engine's pins here
    std::string mode = "native";
    bool dry_run = false;
    bool remove = false;
};

topo::Topology load_topology(const std::string &file) {
    try {
        return topo::Topology::load_file(file);
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    }
}

std::vector<const topo::Job *> selected(const topo::Topology &t, const ApplyArgs &a) {
    std::vector<const topo::Job *> out;
    for (const auto &j : t.jobs)
        if (a.jobs.empty() || std::find(a.jobs.begin(), a.jobs.end(), j.id) != a.jobs.end())
            out.push_back(&j);
    for (uint32_t id : a.jobs)
        t.job(id); // an unknown id is an error, not a silent no-op
    if (out.empty())
        throw Error(fmt::format("topology {} has no jobs", t.name));
    return out;
}

// The slot bitmap bit of a child: its rank in a star (fanin 0, maps.h).
unsigned bit_of(const apply::SwitchEntries &e, const apply::WorkerEntry &w) {
    return e.job.fanin ? w.value.child & INCXDP_CHILD_BIT_MASK : w.value.rank;
}

json tree_switch_json(const apply::SwitchEntries &e) {
    json workers = json::array(), egress = json::array();
    for (const auto &w : e.workers)
        workers.push_back({{"peer", w.peer},
                           {"switch", w.is_switch},
                           {"port", w.iface},
                           {"mac", util::format_mac(w.key.mac)},
                           {"ip", util::format_ipv4_be(w.key.ip)},
                           {"udp_port", ntohs(w.key.port)},
                           {"rank", w.value.rank},
                           {"bit", bit_of(e, w)}});
    for (const auto &g : e.egress)
        egress.push_back({{"peer", g.peer},
                          {"port", g.iface},
                          {"dst_mac", util::format_mac(g.value.dst_mac)},
                          {"src_mac", util::format_mac(g.value.src_mac)},
                          {"dst_ip", util::format_ipv4_be(g.value.dst_ip)},
                          {"src_ip", util::format_ipv4_be(g.value.src_ip)},
                          {"dst_port", ntohs(g.value.dst_port)}});
    json parent = nullptr;
    if (!e.root)
        parent = {{"node", e.parent_node},
                  {"port", e.parent_iface},
                  {"dst_mac", util::format_mac(e.parent.dst_mac)},
                  {"src_mac", util::format_mac(e.parent.src_mac)},
                  {"dst_ip", util::format_ipv4_be(e.parent.dst_ip)},
                  {"src_ip", util::format_ipv4_be(e.parent.src_ip)},
                  {"dst_port", ntohs(e.parent.dst_port)},
                  {"src_port", ntohs(e.parent.src_port)},
                  {"rank", e.parent.rank}};
    return {{"switch", e.sw},
            {"root", e.root},
            {"switch_ip", util::format_ipv4_be(e.job.switch_ip)},
            {"nworkers", e.job.nworkers},
            {"fanin", e.job.fanin},
            {"pool_size", e.job.pool_size},
            {"max_elems", e.job.max_elems},
            {"workers", workers},
            {"egress", egress},
            {"parent", parent}};
}

void print_tree_switch(const apply::SwitchEntries &e) {
    fmt::print("  switch {} ({}{}): fan-in {} of {} ranks{}, {} slots\n", e.sw,
               e.root ? "root, " : "", util::format_ipv4_be(e.job.switch_ip), e.job.fanin,
               e.job.nworkers, e.job.fanin ? "" : " (a star: every rank)", e.job.pool_size);
    for (const auto &w : e.workers)
        fmt::print("    child  bit {:<2} {:<6} {:<7} via {:<10} {}/{}:{} rank {}\n", bit_of(e, w),
                   w.peer, w.is_switch ? "switch" : "host", w.iface, util::format_mac(w.key.mac),
                   util::format_ipv4_be(w.key.ip), ntohs(w.key.port), w.value.rank);
    if (!e.root)
        fmt::print("    parent {} via {}: to {}/{}:{} from {}/{}:{} as rank {}\n", e.parent_node,
                   e.parent_iface, util::format_mac(e.parent.dst_mac),
                   util::format_ipv4_be(e.parent.dst_ip), ntohs(e.parent.dst_port),
                   util::format_mac(e.parent.src_mac), util::format_ipv4_be(e.parent.src_ip),
                   ntohs(e.parent.src_port), e.parent.rank);
}

// Whether `node` has a part in job j (a switch of its tree, or a worker).
bool involves(const topo::Topology &t, const topo::Job &j, const std::string &node) {
    if (std::find(j.workers.begin(), j.workers.end(), node) != j.workers.end())
        return true;
    const auto p = apply::plan_job(t, j.id);
    return std::any_of(p.switches.begin(), p.switches.end(),
                       [&](const auto &s) { return s.name == node; });
}

void dry_run(const topo::Topology &t, const ApplyArgs &a) {
    json jobs = json::array();
    for (const topo::Job *j : selected(t, a)) {
        if (!a.node.empty() && !involves(t, *j, a.node))
            continue;
        json sw = json::array();
        const bool mine_only = !a.node.empty();
        if (!a.flags.json)
            fmt::print("job {} ({}, {} ranks, switch {}):\n", j->id, topo::job_kind_name(j->kind),
                       j->workers.size(), j->switch_name);
        if (j->kind != topo::JobKind::RoceTree) {
            for (const auto &e : apply::compile_job(t, j->id).switches) {
                if (mine_only && e.sw != a.node)
                    continue;
                sw.push_back(tree_switch_json(e));
                if (!a.flags.json)
                    print_tree_switch(e);
            }
        } else {
            const topo::TreePlan p = rules::plan(t, j->id);
            for (const auto &ts : p.switches) {
                if (mine_only && ts.name != a.node)
                    continue;
                const auto r = rules::compile(t, p, ts.name);
                sw.push_back({{"switch", ts.name},
                              {"fanin", r.job.nworkers},
                              {"conns", r.conns.size()},
                              {"egress", r.egress.size()}});
                if (!a.flags.json)
                    fmt::print("  switch {}: fan-in {}, {} connections ('incxdp rules show' "
                               "lists them)\n",
                               ts.name, r.job.nworkers, r.conns.size());
            }
        }
        jobs.push_back({{"job", j->id}, {"kind", topo::job_kind_name(j->kind)}, {"switches", sw}});
    }
    if (a.flags.json)
        std::cout << json{{"topology", t.name}, {"node", a.node}, {"jobs", jobs}}.dump(2) << "\n";
}

json applied_json(const apply::SwitchApplied &d) {
    json o = {{"switch", d.sw},
              {"pin_dir", d.pin_dir},
              {"pool_base", d.pool_base},
              {"pool_size", d.pool_size},
              {"replaced", d.replaced}};
    if (d.conns)
        o["conns"] = d.conns;
    else
        o["workers"] = d.workers;
    return o;
}

apply::NetnsTarget target_of(const ApplyArgs &a) {
    apply::NetnsTarget w;
    w.prefix = a.prefix;
    w.pin_root = a.pin_root;
    w.mode = a.mode == "skb" ? ctl::AttachMode::Skb : ctl::AttachMode::Native;
    return w;
}

// ---- one node, on this machine --------------------------------------------------

// The IPv4 addresses on interface `name` here.
std::vector<std::string> addrs_of(const std::string &name) {
    std::vector<std::string> out;
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0)
        return out;
    for (const ifaddrs *i = list; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && name == i->ifa_name)
            out.push_back(util::format_ipv4_be(
                reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr));
    freeifaddrs(list);
    return out;
}

// A host: the interface, MAC and address the file gives it exist here;
// what the rank's worker will use.
json check_host(const topo::Topology &t, const topo::Job &j, const std::string &host) {
    const uint32_t rank = static_cast<uint32_t>(
        std::find(j.workers.begin(), j.workers.end(), host) - j.workers.begin());
    // The leaf from the one planner: the job's switch for a star.
    const std::string sw = apply::plan_job(t, j.id).leaf.at(host);
    const uint16_t port = j.kind == topo::JobKind::RoceTree ? 4791 : j.worker_port;
    const topo::Iface &ifc = t.host_iface_for(host, sw);
    const topo::Node &h = t.node(host);
    if (if_nametoindex(ifc.name.c_str()) == 0)
        throw Error(fmt::format("host {}: interface {} (towards {}) does not exist here", host,
                                ifc.name, sw));
    const topo::Mac mac = ctl::mac_of(ifc.name);
    if (mac != ifc.mac)
        throw Error(fmt::format("host {}: interface {} has MAC {}, the file says {}", host,
                                ifc.name, topo::mac_to_string(mac), topo::mac_to_string(ifc.mac)));
    const auto have = addrs_of(ifc.name);
    if (std::find(have.begin(), have.end(), h.ip) == have.end())
        throw Error(fmt::format("host {}: interface {} does not have address {} (it has: {})", host,
                                ifc.name, h.ip,
                                have.empty() ? "none" : fmt::format("{}", fmt::join(have, " "))));
    return {{"job", j.id},       {"kind", topo::job_kind_name(j.kind)},
            {"rank", rank},      {"world_size", j.workers.size()},
            {"iface", ifc.name}, {"mac", topo::mac_to_string(mac)},
            {"local_ip", h.ip},  {"local_port", port},
            {"switch", sw},      {"switch_ip", t.node(sw).ip}};
}

json apply_node(const topo::Topology &t, const ApplyArgs &a, const topo::Job &j) {
    const topo::Node &n = t.node(a.node);
    const std::string dir = a.pin_dir.empty() ? ctl::default_pin_dir() : a.pin_dir;
    if (n.kind == topo::NodeKind::Host)
        return check_host(t, j, a.node);
    if (a.remove)
        return {{"job", j.id}, {"removed", apply::remove_here(j.id, dir)}};
    json d = applied_json(apply::apply_job_here(t, j.id, a.node, dir, target_of(a).mode));
    d["job"] = j.id;
    return d;
}

void run(const ApplyArgs &a) {
    set_library_verbosity(a.flags.verbose);
    const topo::Topology t = load_topology(a.file);
    if (!a.node.empty())
        t.node(a.node);
    if (a.dry_run)
        return dry_run(t, a);
    json out = json::array();
    for (const topo::Job *j : selected(t, a)) {
        try {
            if (!a.node.empty()) {
                if (!involves(t, *j, a.node))
                    continue;
                json d = apply_node(t, a, *j);
                if (!a.flags.json && t.node(a.node).kind == topo::NodeKind::Host)
                    fmt::print("job {} rank {} of {}: {} {} {}:{} -> switch {} ({})\n", j->id,
                               d["rank"].get<uint32_t>(), j->workers.size(),
                               d["iface"].get<std::string>(), d["mac"].get<std::string>(),
                               d["local_ip"].get<std::string>(), d["local_port"].get<int>(),
                               d["switch"].get<std::string>(), d["switch_ip"].get<std::string>());
                else if (!a.flags.json)
                    fmt::print("job {} ({}) on {}: {}\n", j->id, topo::job_kind_name(j->kind),
                               a.node, a.remove ? "removed" : "applied");
                out.push_back(std::move(d));
            } else if (a.remove) {
                apply::remove_job_netns(t, j->id, target_of(a));
                if (!a.flags.json)
                    fmt::print("job {} ({}): removed\n", j->id, topo::job_kind_name(j->kind));
                out.push_back({{"job", j->id}, {"removed", true}});
            } else {
                json d = json::array();
                for (const auto &sw : apply::apply_job_netns(t, j->id, target_of(a)))
                    d.push_back(applied_json(sw));
                if (!a.flags.json)
                    fmt::print("job {} ({}): applied on {} switch(es)\n", j->id,
                               topo::job_kind_name(j->kind), d.size());
                out.push_back({{"job", j->id}, {"switches", d}});
            }
        } catch (const std::exception &e) {
            throw Error(fmt::format("{} job {} ({}) of {}: {}", a.remove ? "remove" : "apply",
                                    j->id, topo::job_kind_name(j->kind), a.file, e.what()));
        }
    }
    if (a.flags.json)
        std::cout << out.dump(2) << "\n";
}

void add_options(CLI::App *cmd, ApplyArgs &a) {
    add_common_flags(cmd, a.flags);
    cmd->add_option("FILE", a.file, "topology YAML")->required()->check(CLI::ExistingFile);
    cmd->add_option("--job", a.jobs, "only this job (repeatable; default: every job of FILE)");
    cmd->add_option("--prefix", a.prefix, "namespace name prefix: node N lives in <prefix>N")
        ->capture_default_str();
    cmd->add_option("--pin-root", a.pin_root,
                    "bpffs directory holding one pin directory per switch, <root>/<prefix><switch> "
                    "(default: $INCXDP_PIN_DIR, else " INCXDP_PIN_DIR ")");
    cmd->add_option("--node", a.node,
                    "only this node's part, on this machine (its current network namespace): a "
                    "switch's rules into the engine pinned in --pin-dir; a host: check its "
                    "interface, MAC and address, print what its worker uses");
    cmd->add_option("--pin-dir", a.pin_dir,
                    "with --node: the engine's pins (default: $INCXDP_PIN_DIR, else " INCXDP_PIN_DIR
                    ")");
}

} // namespace

void add_apply_command(CLI::App &app) {
    auto a = std::make_shared<ApplyArgs>();
    auto *cmd = app.add_subcommand(
        "apply", "install every job of FILE (star, roce-tree, tree) on the switches of a "
                 "topology that is up, or with --node one node's part on this machine; "
                 "applying again replaces a job with a fresh one");
    add_options(cmd, *a);
    cmd->add_flag("--dry-run", a->dry_run, "print each switch's entries; change nothing");
    cmd->add_flag("--remove", a->remove, "remove the jobs instead (as `incxdp remove`)");
    cmd->add_option("-m,--mode", a->mode, "roce-tree jobs, loading an engine: XDP attach mode")
        ->check(CLI::IsMember({"native", "skb"}))
        ->capture_default_str();
    cmd->callback([a] { run(*a); });

    auto r = std::make_shared<ApplyArgs>();
    auto *rm = app.add_subcommand("remove", "remove FILE's jobs (or --job) from every switch of "
                                            "theirs, or with --node from this machine's engine");
    add_options(rm, *r);
    rm->callback([r] {
        r->remove = true;
        run(*r);
    });
}

} // namespace incxdp::cli
