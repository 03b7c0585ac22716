// SPDX-License-Identifier: BSD-2-Clause
// `incxdp replay FILE.cm --topo FILE.yaml`: every flow of an htsim
// connection matrix with real bytes between the topology's host namespaces
// (docs/CM.md §5).
#include "cm_parse.h"
#include "cm_replay.h"
#include "commands.h"

#include <incxdp/topology.h>

#include <fmt/format.h>

#include <cstdio>
#include <memory>

namespace incxdp::cli {
namespace {

struct ReplayCli {
    std::string file, topo_file;
    bool lenient = false;
    cm::ReplayOptions opts;
    CommonFlags flags;
};

std::string secs(double s) {
    return s < 0 ? "-" : fmt::format("{:.6f}", s);
}

void print_human(const std::string &file, const cm::ReplayResult &r) {
    std::printf("replay %s: %zu flows", file.c_str(), r.flows.size());
    if (r.inc_flows)
        std::printf(", %zu INC flows run as data flows aggregated by the aggregator hosts "
                    "(aggregated: false; in-switch aggregation not available yet)",
                    r.inc_flows);
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
        r = cm::replay(m, t, o);
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
    cmd->add_flag("--lenient", c->lenient,
                  "accept the INC generator's trigger flaws (docs/CM.md), warning about them");
    add_common_flags(cmd, c->flags);
    cmd->callback([c] { run(*c); });
}

} // namespace incxdp::cli
