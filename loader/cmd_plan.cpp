// SPDX-License-Identifier: BSD-2-Clause
// `incxdp plan FILE.yaml --cm FILE.cm`: the aggregation tree of every INC
// job (fid) of a connection matrix over a topology's switches
// (docs/FATTREE.md "Planner"). Reads files only; needs no kernel.
#include "cm_parse.h"
#include "commands.h"

#include <incxdp/fattree_plan.h>
#include <incxdp/topology.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

namespace incxdp::cli {
namespace {

using nlohmann::json;
namespace topo = incxdp::topo;

struct PlanOpts {
    std::string topo_file, cm_file;
    CommonFlags flags;
};

// Host i of a .cm is the topology's i-th host in file order (htsim's
// numbering, which `topo gen fattree` keeps).
std::vector<topo::AggJob> jobs_of(const cm::Matrix &m, const topo::Topology &t) {
    std::vector<std::string> hosts;
    for (const auto &n : t.nodes)
        if (n.kind == topo::NodeKind::Host)
            hosts.push_back(n.name);
    if (m.node_count() > hosts.size())
        throw Error(fmt::format("plan: the matrix has {} nodes but topology {} has {} hosts",
                                m.node_count(), t.name, hosts.size()));
    std::map<uint32_t, topo::AggJob> by_fid;
    for (const cm::Flow &f : m.flows) {
        if (!f.semantics)
            continue;
        topo::AggJob &j = by_fid[f.semantics->fid];
        j.fid = f.semantics->fid;
        if (f.semantics->dir == cm::AggDir::Up) {
            j.contributors.push_back(hosts.at(f.src));
        } else {
            // The DOWN flow's sender holds the result as well.
            j.receivers.push_back(hosts.at(f.src));
        }
        j.receivers.push_back(hosts.at(f.dst));
    }
    std::vector<topo::AggJob> out;
    for (auto &[fid, j] : by_fid)
        out.push_back(std::move(j));
    return out;
}

json plan_json(const topo::AggPlan &p) {
    json sws = json::array();
    for (const auto &s : p.switches)
        sws.push_back({{"name", s.name},
                       {"level", s.level},
                       {"tier", s.tier},
                       {"parent", s.parent ? json(*s.parent) : json(nullptr)},
                       {"children", s.children},
                       {"expected", s.expected},
                       {"contributors_below", s.contributors_below}});
    return {{"fid", p.fid},
            {"root", p.root},
            {"contributors", p.contributors},
            {"receivers", p.receivers},
            {"switches", sws},
            {"leaf", p.leaf}};
}

std::string join(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v)
        s += (s.empty() ? "" : " ") + x;
    return s;
}

void print_plan(const topo::AggPlan &p) {
    const auto &root = p.sw(p.root);
    fmt::print("fid {}: root {} (tier {}), {} contributors, {} receivers, {} switches\n", p.fid,
               p.root, root.tier, p.contributors.size(), p.receivers.size(), p.switches.size());
    size_t w = 6;
    for (const auto &s : p.switches)
        w = std::max(w, s.name.size());
    fmt::print("  {:<5}  {:<{}}  {:<4}  {:<{}}  {:<8}  {:<5}  {}\n", "LEVEL", "SWITCH", w, "TIER",
               "PARENT", w, "EXPECTED", "BELOW", "CHILDREN");
    for (const auto &s : p.switches)
        fmt::print("  {:<5}  {:<{}}  {:<4}  {:<{}}  {:<8}  {:<5}  {}\n", s.level, s.name, w, s.tier,
                   s.parent.value_or("-"), w, s.expected, s.contributors_below, join(s.children));
    // Per level: how many switches and how many partial results they wait for.
    std::map<int, std::pair<size_t, uint32_t>> levels;
    for (const auto &s : p.switches) {
        ++levels[s.level].first;
        levels[s.level].second += s.expected;
    }
    std::string lv;
    for (const auto &[l, v] : levels)
        lv += fmt::format("{}level {}: {} switch{}, {} expected", lv.empty() ? "" : "; ", l,
                          v.first, v.first == 1 ? "" : "es", v.second);
    fmt::print("  {}\n", lv);
}

void cmd_plan(const PlanOpts &o) {
    const auto t = topo::Topology::load_file(o.topo_file);
    // The plan reads flows only: trigger flaws of the plan's own generator
    // (CM.md §2) are warnings here.
    cm::ParseOptions po;
    po.lenient = true;
    const cm::Matrix m = cm::parse_file(o.cm_file, po);
    if (o.flags.verbose)
        for (const auto &w : m.warnings)
            fmt::print(stderr, "incxdp: plan: {}: {}\n", o.cm_file, w);
    const auto jobs = jobs_of(m, t);
    if (jobs.empty())
        throw Error(fmt::format("plan: {} has no INC flow (no `semantics` token)", o.cm_file));
    const auto plans = topo::plan_agg_jobs(t, jobs);
    if (o.flags.json) {
        json all = json::array();
        for (const auto &p : plans)
            all.push_back(plan_json(p));
        std::puts(json{{"topology", t.name}, {"matrix", o.cm_file}, {"jobs", all}}.dump().c_str());
        return;
    }
    fmt::print("topology {}, matrix {}: {} INC job{}\n", t.name, o.cm_file, plans.size(),
               plans.size() == 1 ? "" : "s");
    for (const auto &p : plans)
        print_plan(p);
}

} // namespace

void add_plan_command(CLI::App &app) {
    auto o = std::make_shared<PlanOpts>();
    CLI::App *cmd = app.add_subcommand(
        "plan", "aggregation tree per INC job (fid) of a .cm over a topology: root, parents, "
                "children, expected contributions per switch");
    cmd->add_option("FILE", o->topo_file, "topology YAML, e.g. topo/topologies/fattree4.yaml")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--cm", o->cm_file, "connection matrix whose UP/DOWN flows define the jobs")
        ->required()
        ->check(CLI::ExistingFile);
    add_common_flags(cmd, o->flags);
    cmd->callback([o] {
        try {
            cmd_plan(*o);
        } catch (const topo::TopologyError &e) {
            throw Error(e.what());
        } catch (const cm::CmError &e) {
            throw Error(fmt::format("{}: {}", o->cm_file, e.what()));
        }
    });
}

} // namespace incxdp::cli
