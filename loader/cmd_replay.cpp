// SPDX-License-Identifier: BSD-2-Clause
// `incxdp replay FILE.cm --topo FILE.yaml`: every flow of an htsim
// connection matrix with real bytes between the topology's host namespaces
// (docs/CM.md §5).
#include "cm_inc_switch.h"
#include "cm_parse.h"
#include "cm_replay.h"
#include "commands.h"

#include <incxdp/topology.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>

namespace incxdp::cli {
namespace {

struct ReplayCli {
    std::string file, topo_file;
    bool lenient = false;
    std::string inc = "auto";
    cm::SwitchPathOptions sw;
    cm::ReplayOptions opts;
    CommonFlags flags;
};

std::string secs(double s) {
    return s < 0 ? "-" : fmt::format("{:.6f}", s);
}

void print_switches(const nlohmann::json &rep) {
    if (!rep.is_object())
        return;
    for (const auto &j : rep["jobs"])
        std::printf("INC fid %u: job %u, root %s, %zu ranks, %zu switches\n",
                    j["fid"].get<uint32_t>(), j["job"].get<uint32_t>(),
                    j["root"].get<std::string>().c_str(), j["ranks"].get<size_t>(),
                    j["tree"].size());
    auto line = [](const std::string &who, const nlohmann::json &c) {
        std::string out;
        for (const auto &[k, v] : c.items())
            out += fmt::format(" {}={}", k, v.get<uint64_t>());
        std::printf("  %-8s%s\n", who.c_str(), out.c_str());
    };
    std::printf("aggregation counters per tier:\n");
    for (const char *tier : {"tor", "leaf", "agg", "spine", "core"})
        if (rep["tiers"].contains(tier))
            line(tier, rep["tiers"][tier]);
    std::printf("per switch:\n");
    for (const auto &s : rep["switches"])
        line(s["name"].get<std::string>(), s.value("counters", nlohmann::json::object()));
    const auto &h = rep["hosts"];
    std::printf("hosts: %llu packets sent, %llu retransmissions, %llu timeouts\n",
                static_cast<unsigned long long>(h["packets_sent"].get<uint64_t>()),
                static_cast<unsigned long long>(h["retransmissions"].get<uint64_t>()),
                static_cast<unsigned long long>(h["timeouts"].get<uint64_t>()));
}

void print_human(const std::string &file, const cm::ReplayResult &r) {
    std::printf("replay %s: %zu flows", file.c_str(), r.flows.size());
    if (r.inc_flows)
        std::printf(", %zu INC flows aggregated by the %s", r.inc_flows,
                    r.aggregated ? "switches (hostlib allreduce per fid, rid, cid)"
                                 : "aggregator hosts (as TCP data flows)");
    std::printf("\n%8s %12s %12s %12s %12s %12s %s\n", "flow", "src->dst", "bytes", "start_s",
                "done_s", "fct_s", "state");
    for (const cm::FlowResult &f : r.flows)
        std::printf("%8u %12s %12llu %12s %12s %12s %s%s%s\n", f.id,
                    fmt::format("{}->{}", f.src, f.dst).c_str(),
                    static_cast<unsigned long long>(f.received), secs(f.start_s).c_str(),
                    secs(f.send_done_s).c_str(),
                    f.send_done_s < 0 ? "-" : secs(f.send_done_s - f.start_s).c_str(),
                    f.state.c_str(), f.held ? " (held for UP inputs)" : "",
                    f.error.empty() ? "" : (": " + f.error).c_str());
    std::printf("job completion %.6f s, %llu bytes (UP %llu, DOWN %llu)\n", r.job_s,
                static_cast<unsigned long long>(r.total_bytes),
                static_cast<unsigned long long>(r.up_bytes),
                static_cast<unsigned long long>(r.down_bytes));
    if (!r.tiers.empty()) {
        std::printf("wire bytes per tier (both directions, headers and ACKs included):\n");
        for (const auto &[tier, b] : r.tiers)
            std::printf("  %-12s %llu\n", tier.c_str(), static_cast<unsigned long long>(b));
        std::printf("per link (a->b, b->a):\n");
        for (const cm::LinkBytes &l : r.links)
            std::printf("  %-8s %-8s %-10s %12llu %12llu\n", l.a.c_str(), l.b.c_str(),
                        l.tier.c_str(), static_cast<unsigned long long>(l.a_to_b),
                        static_cast<unsigned long long>(l.b_to_a));
    }
    print_switches(r.inc_report);
    for (const std::string &e : r.errors)
        std::printf("error: %s\n", e.c_str());
}

void run(const ReplayCli &c) {
    cm::Matrix m;
    try {
        m = cm::parse_file(c.file, {c.lenient});
    } catch (const cm::CmError &e) {
        throw Error(fmt::format("{}: {}", c.file, e.what()));
    }
    for (const std::string &w : m.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    topo::Topology t;
    try {
        t = topo::Topology::load_file(c.topo_file);
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    }
    cm::ReplayOptions o = c.opts;
    o.progress = true;
    cm::ReplayResult r;
    try {
        const bool any_inc = std::any_of(m.flows.begin(), m.flows.end(),
                                         [](const cm::Flow &f) { return f.semantics.has_value(); });
        std::unique_ptr<cm::IncPath> path;
        cm::SwitchPathOptions so = c.sw;
        so.prefix = o.prefix;
        so.deadline_s = o.timeout_s > 0 ? o.timeout_s : 3600;
        so.verbose = c.flags.verbose;
        bool in_switch = c.inc == "switch";
        if (c.inc == "auto")
            in_switch = any_inc && cm::engines_loaded(t, o.prefix, so.pin_root);
        so.load_missing = true;
        if (in_switch && any_inc)
            path = cm::make_switch_path(m, t, so);
        r = cm::replay(m, t, o, std::move(path));
    } catch (const std::runtime_error &e) {
        throw Error(fmt::format("replay {}: {}", c.file, e.what()));
    }
    if (c.flags.json) {
        nlohmann::json j = cm::to_json(r);
        j["file"] = c.file;
        j["topology"] = c.topo_file;
        j["prefix"] = c.opts.prefix;
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        print_human(c.file, r);
    }
    if (!r.ok()) {
        size_t bad = 0;
        for (const cm::FlowResult &f : r.flows)
            bad += f.state != "done" || !f.verified;
        throw Error(fmt::format("replay {}: {} of {} flows did not complete verified{}", c.file,
                                bad, r.flows.size(), r.timed_out ? " (timed out)" : ""));
    }
}

} // namespace

void add_replay_command(CLI::App &app) {
    auto c = std::make_shared<ReplayCli>();
    CLI::App *cmd = app.add_subcommand(
        "replay", "run an htsim connection matrix with real bytes on a topology's hosts");
    cmd->add_option("FILE", c->file, "connection matrix (.cm)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--topo", c->topo_file, "topology YAML that is up (host i = i-th host)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--prefix", c->opts.prefix, "namespace prefix of the topology")
        ->capture_default_str();
    cmd->add_option("--scale-start", c->opts.scale_start,
                    "wall picoseconds per matrix picosecond of `start` times (1: real time)")
        ->capture_default_str();
    cmd->add_option("--timeout", c->opts.timeout_s, "give up after S seconds (0: never)")
        ->capture_default_str();
    cmd->add_option("--port", c->opts.port, "TCP port every host listens on")
        ->capture_default_str();
    cmd->add_option("--inc", c->inc,
                    "where INC flows are aggregated: switch (native trees on the engines, "
                    "loaded where missing), host (the aggregator hosts, over TCP), auto (switch "
                    "if every switch runs the engine)")
        ->check(CLI::IsMember({"auto", "switch", "host"}))
        ->capture_default_str();
    cmd->add_option("--pin-root", c->sw.pin_root,
                    "where the switches' engines are pinned (default: topo's)");
    cmd->add_option("--window", c->sw.window, "--inc switch: each host's window (<= --slots)")
        ->capture_default_str();
    cmd->add_option("--slots", c->sw.slots, "--inc switch: each job's slot pool per switch")
        ->capture_default_str();
    cmd->add_option("--worker-port", c->sw.worker_port_base,
                    "--inc switch: a host's UDP port for job J is this + J")
        ->capture_default_str();
    cmd->add_flag("--ignore-failures", c->opts.ignore_failures,
                  "run a file with `failure` lines with every link up (refused otherwise)");
    cmd->add_flag("--lenient", c->lenient,
                  "accept the INC generator's trigger flaws (docs/CM.md), warning about them");
    add_common_flags(cmd, c->flags);
    cmd->callback([c] { run(*c); });
}

} // namespace incxdp::cli
