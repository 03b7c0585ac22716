// SPDX-License-Identifier: BSD-2-Clause
// incxdp chaos IF [--loss R] [--dup R] [--corrupt R] [--reorder R] [--egress|--ingress|--xdp]
//                 [--off] [--reset]
// incxdp chaos --topo FILE [--prefix P] --all-links [--xdp] [--loss R ...] [--off]
// incxdp chaos [--prune]
// Fault injection on interfaces (docs/CHAOS.md); no rates and no --off
// prints the state.
#include "commands.h"

#include <incxdp/chaos_ctl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>

namespace incxdp::cli {

namespace {

namespace chaos = ctl::chaos;

struct ChaosArgs {
    CommonFlags flags;
    std::string iface;
    std::string loss, dup, corrupt, reorder;
    bool egress = false, ingress = false, xdp = false;
    bool off = false, reset = false, prune = false;
    std::string topo_file;
    std::string prefix = "ix-";
    bool all_links = false;
    std::string pin_root = chaos::default_pin_root();
};

chaos::RateUpdate update_from(const ChaosArgs &a) {
    chaos::RateUpdate u;
    if (!a.loss.empty())
        u.loss_ppm = chaos::parse_rate(a.loss, "--loss");
    if (!a.dup.empty())
        u.dup_ppm = chaos::parse_rate(a.dup, "--dup");
    if (!a.corrupt.empty())
        u.corrupt_ppm = chaos::parse_rate(a.corrupt, "--corrupt");
    if (!a.reorder.empty())
        u.reorder_ppm = chaos::parse_rate(a.reorder, "--reorder");
    return u;
}

void print(const std::vector<chaos::HookStatus> &v, bool json, bool with_netns) {
    for (const auto &s : v)
        if (s.detour == "none" && (s.rates.dup_ppm || s.rates.reorder_ppm))
            fmt::print(stderr,
                       "warning: {}{}{}: not duplicating or delaying frames: its XDP program is "
                       "generic and its peer's native, so no frame sent round the link would come "
                       "back into it (docs/CHAOS.md)\n",
                       s.netns, s.netns.empty() ? "" : " ", s.iface);
    if (json) {
        auto a = nlohmann::json::array();
        for (const auto &s : v)
            a.push_back(chaos::to_json(s));
        std::cout << a.dump(2) << "\n";
        return;
    }
    if (v.empty()) {
        fmt::print("no chaos attached in this network namespace\n");
        return;
    }
    size_t w = 0;
    for (const auto &s : v)
        w = std::max(w, s.netns.size());
    auto row = [&](const std::string &netns, const std::string &iface, const std::string &hook,
                   const std::string &state, const std::string &loss, const std::string &dup,
                   const std::string &corrupt, const std::string &reorder, const std::string &seen,
                   const std::string &dropped, const std::string &dupd, const std::string &corr,
                   const std::string &reord, const std::string &detour) {
        std::string ns = with_netns ? fmt::format("{:<{}}  ", netns, w) : "";
        fmt::print("{}{:<15} {:<7} {:<8} {:>8} {:>8} {:>8} {:>8} {:>12} {:>10} {:>10} {:>10} {:>10}  {}\n",
                   ns, iface, hook, state, loss, dup, corrupt, reorder, seen, dropped, dupd, corr,
                   reord, detour);
    };
    row("NETNS", "IFACE", "HOOK", "STATE", "LOSS", "DUP", "CORRUPT", "REORDER", "SEEN", "DROPPED",
        "DUPLICATED", "CORRUPTED", "REORDERED", "DETOUR");
    for (const auto &s : v) {
        const auto &c = s.counters;
        std::string state = !s.attached ? "stale" : s.enabled ? "on" : "paused";
        row(s.netns, s.iface, chaos::hook_name(s.hook), state, chaos::format_rate(s.rates.loss_ppm),
            chaos::format_rate(s.rates.dup_ppm), chaos::format_rate(s.rates.corrupt_ppm),
            chaos::format_rate(s.rates.reorder_ppm), std::to_string(c.seen),
            std::to_string(c.dropped), std::to_string(c.duplicated), std::to_string(c.corrupted),
            std::to_string(c.reordered), s.detour.empty() ? "-" : s.detour);
    }
}

// The hooks named by --egress/--ingress; `dflt` when neither is given.
std::vector<chaos::Hook> hooks_of(const ChaosArgs &a, std::vector<chaos::Hook> dflt) {
    std::vector<chaos::Hook> v;
    if (a.egress)
        v.push_back(chaos::Hook::Egress);
    if (a.ingress)
        v.push_back(chaos::Hook::Ingress);
    if (a.xdp)
        v.push_back(chaos::Hook::Xdp);
    return v.empty() ? dflt : v;
}

void run_topology(const ChaosArgs &a, const chaos::RateUpdate &u) {
    if (!a.all_links)
        throw Error("chaos --topo: give --all-links (every link of the topology)");
    if (!a.iface.empty())
        throw Error("chaos --topo: takes no interface (it applies to every link)");
    if (a.egress || a.ingress)
        throw Error("chaos --topo: --egress/--ingress are chosen per link (see docs/CHAOS.md); "
                    "--xdp faults every link at its receiving ends");
    if (a.reset)
        throw Error("chaos --topo: --reset works on one interface");
    topo::Topology t;
    try {
        t = topo::Topology::load_file(a.topo_file);
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    }
    chaos::LinkPlan plan = chaos::all_links(t, a.prefix, a.xdp);
    for (const auto &l : plan.unreachable)
        fmt::print(stderr,
                   "incxdp: chaos: link {} skipped: both ends forward with XDP, which "
                   "no tc hook sees (--xdp reaches it)\n",
                   l);
    if (a.off) {
        chaos::off_links(plan, a.pin_root);
        if (a.flags.json)
            std::cout << nlohmann::json{{"off", plan.hooks.size()}}.dump() << "\n";
        else
            fmt::print("chaos off on every link of {} (prefix {})\n", t.name, a.prefix);
        return;
    }
    auto v =
        u.empty() ? chaos::status_links(plan, a.pin_root) : chaos::set_links(plan, u, a.pin_root);
    print(v, a.flags.json, true);
}

void run_iface(const ChaosArgs &a, const chaos::RateUpdate &u) {
    using chaos::Hook;
    if (a.off) {
        auto hooks = hooks_of(a, {});
        if (hooks.empty()) {
            // Every hook that is attached; none is an error.
            for (const auto &s : chaos::status(a.iface, a.pin_root))
                hooks.push_back(s.hook);
            if (hooks.empty())
                throw Error(fmt::format("chaos is not attached to {}", a.iface));
        }
        for (Hook h : hooks)
            chaos::off(a.iface, h, a.pin_root);
        if (a.flags.json)
            std::cout << nlohmann::json{{"iface", a.iface}, {"off", hooks.size()}}.dump() << "\n";
        else
            for (Hook h : hooks)
                fmt::print("chaos off on {} {}\n", a.iface, chaos::hook_name(h));
        return;
    }
    std::vector<chaos::HookStatus> v;
    if (!u.empty()) {
        for (Hook h : hooks_of(a, {Hook::Egress}))
            v.push_back(chaos::set(a.iface, h, u, a.pin_root));
    } else {
        auto want = hooks_of(a, {Hook::Egress, Hook::Ingress, Hook::Xdp});
        for (auto &s : chaos::status(a.iface, a.pin_root))
            if (std::find(want.begin(), want.end(), s.hook) != want.end())
                v.push_back(s);
        if (v.empty() && !a.flags.json) {
            fmt::print("chaos is not attached to {}\n", a.iface);
            return;
        }
    }
    print(v, a.flags.json, false);
    if (a.reset)
        for (const auto &s : v)
            chaos::reset_counters(a.iface, s.hook, a.pin_root);
}

void run(const ChaosArgs &a) {
    set_library_verbosity(a.flags.verbose);
    if (a.prune) {
        if (!a.iface.empty() || !a.topo_file.empty() || a.off)
            throw Error("chaos --prune: takes no interface, --topo or --off");
        auto removed = chaos::prune(a.pin_root);
        if (a.flags.json)
            std::cout << nlohmann::json{{"removed", removed}}.dump() << "\n";
        else
            fmt::print("removed {} stale pin directories\n", removed.size());
        return;
    }
    chaos::RateUpdate u = update_from(a);
    if (a.off && !u.empty())
        throw Error("chaos --off takes no rates");
    if (!a.topo_file.empty())
        return run_topology(a, u);
    if (a.all_links)
        throw Error("chaos --all-links needs --topo FILE");
    if (!a.iface.empty())
        return run_iface(a, u);
    if (!u.empty() || a.off || a.reset || a.egress || a.ingress || a.xdp)
        throw Error("chaos: which interface? (incxdp chaos IF ..., or --topo FILE --all-links)");
    print(chaos::status("", a.pin_root), a.flags.json, false);
}

} // namespace

void add_chaos_command(CLI::App &app) {
    auto a = std::make_shared<ChaosArgs>();
    auto *cmd = app.add_subcommand(
        "chaos", "inject loss, duplication, corruption and reordering on an interface (tc "
                 "clsact, or the xdp hook of incxdp's XDP programs); without rates, show the state");
    add_common_flags(cmd, a->flags);
    cmd->add_option("IF", a->iface, "interface in this network namespace");
    cmd->add_option("--loss", a->loss, "drop probability: 5%, 0.5% or a fraction 0.05");
    cmd->add_option("--dup", a->dup, "duplication probability (the copy follows the frame)");
    cmd->add_option("--corrupt", a->corrupt, "probability of flipping one UDP payload bit");
    cmd->add_option("--reorder", a->reorder,
                    "probability of delivering a frame late, behind later ones (--xdp only)");
    cmd->add_flag("--egress", a->egress, "the interface's egress (the default for new rates)");
    cmd->add_flag("--ingress", a->ingress,
                  "the interface's ingress, after its XDP program passed the frame");
    cmd->add_flag("--xdp", a->xdp,
                  "what the interface receives, in its incxdp XDP program (the engine, incxdp_pass, "
                  "incxdp_xsk): also frames sent by XDP or AF_XDP");
    cmd->add_flag("--off", a->off, "detach and remove the pins");
    cmd->add_flag("--reset", a->reset, "zero the counters after printing them");
    cmd->add_option("--topo", a->topo_file, "topology YAML: with --all-links, every link")
        ->check(CLI::ExistingFile);
    cmd->add_option("--prefix", a->prefix, "namespace prefix the topology is up with")
        ->capture_default_str();
    cmd->add_flag("--all-links", a->all_links,
                  "both directions of every link of --topo (tc: host egress and ingress; "
                  "--xdp: both receiving ends)");
    cmd->add_flag("--prune", a->prune, "remove pins left by namespaces that no longer exist");
    cmd->add_option("--pin-dir", a->pin_root, "bpffs root of the chaos pins")
        ->capture_default_str();
    cmd->callback([a] { run(*a); });
}

} // namespace incxdp::cli
