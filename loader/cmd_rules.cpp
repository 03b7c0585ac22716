// SPDX-License-Identifier: BSD-2-Clause
// incxdp rules apply | show | clear FILE: the RoCEv2 aggregation-tree rules
// of a topology's roce-tree jobs (docs/ROCE.md, docs/TOPOLOGY.md).
#include "commands.h"

#include <incxdp/rules_ctl.h>
#include <incxdp/tree_json.h>
#include <incxdp/util/ipv4.h>
#include <incxdp/util/mac.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <iostream>
#include <memory>

namespace incxdp::cli {

namespace {

using nlohmann::json;
namespace rules = ctl::rules;

struct RulesArgs {
    CommonFlags flags;
    std::string file;
    std::string prefix = "ix-";
    std::string pin_root;
    uint32_t job = 0;
    uint32_t slots = 0;
    std::string mode = "native";
    bool skb = false;
    bool unload = false;
    uint32_t rank = 0; ///< set-qpn
    uint32_t qpn = 0;  ///< set-qpn
};

std::string hex24(uint32_t v) {
    return fmt::format("0x{:06x}", v);
}

std::string ranks_str(uint64_t mask) {
    std::string s;
    for (uint32_t r = 0; r < 64; r++)
        if (mask >> r & 1)
            s += (s.empty() ? "" : ",") + std::to_string(r);
    return s.empty() ? "-" : s;
}

rules::Options options(const RulesArgs &a, CLI::App *cmd) {
    rules::Options o;
    o.prefix = a.prefix;
    o.pin_root = a.pin_root;
    if (cmd->count("--job"))
        o.job = a.job;
    o.slots = a.slots;
    o.mode = a.skb || a.mode == "skb" ? ctl::AttachMode::Skb : ctl::AttachMode::Native;
    o.unload = a.unload;
    return o;
}

topo::Topology load_topology(const std::string &file) {
    try {
        return topo::Topology::load_file(file);
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    }
}

json conn_json(const rules::ConnRule &c) {
    const incxdp_roce_conn &v = c.value;
    json j{{"conn", c.conn},
           {"peer", c.peer},
           {"port", c.iface},
           {"qpn", c.qpn},
           {"peer_qpn", v.peer_qpn},
           {"rx_base", v.rx_base},
           {"tx_base", v.tx_base},
           {"udp_sport", ntohs(v.udp_sport)},
           {"own_mac", util::format_mac(v.own_mac)},
           {"peer_mac", util::format_mac(v.peer_mac)},
           {"own_ip", util::format_ipv4_be(v.own_ip)},
           {"peer_ip", util::format_ipv4_be(v.peer_ip)}};
    if (v.role == INCXDP_ROCE_CHILD) {
        j["child"] = v.child;
        j["strict"] = v.strict != 0;
        j["subtree_ranks"] = v.subtree_ranks;
    }
    return j;
}

json plan_json(const topo::Topology &t, const topo::TreePlan &plan, const RulesArgs &a) {
    json conns = json::array();
    for (size_t i = 0; i < plan.conns.size(); i++) {
        const topo::RoceConn &c = plan.conns[i];
        json cj = c; // incxdp/tree_json.h
        cj["index"] = i;
        conns.push_back(std::move(cj));
    }
    json switches = json::array();
    for (const auto &ts : plan.switches) {
        const rules::SwitchRules r = rules::compile(t, plan, ts.name);
        json children = json::array(), group = json::array();
        json parent = nullptr;
        uint32_t parent_qpn = 0; // the engine's incxdp_parents entry (qpn); 0 at the root
        for (const auto &c : r.conns) {
            if (c.value.role == INCXDP_ROCE_PARENT) {
                parent = conn_json(c);
                parent_qpn = c.qpn;
            } else {
                children.push_back(conn_json(c));
            }
        }
        for (const auto &[port, qpn] : r.egress)
            group.push_back({{"port", port}, {"qpn", qpn}});
        switches.push_back({{"name", ts.name},
                            {"root", ts.root},
                            {"netns", topo::netns_name(a.prefix, ts.name)},
                            {"pin_dir", topo::switch_pin_dir(a.pin_root, a.prefix, ts.name)},
                            {"switch_ip", t.node(ts.name).ip},
                            {"nworkers", r.job.nworkers},
                            {"parent_qpn", parent_qpn},
                            {"pool_base", ts.pool_base},
                            {"pool_size", ts.pool_size},
                            {"max_elems", r.job.max_elems},
                            {"parent", parent},
                            {"children", children},
                            {"multicast", group}});
    }
    return {{"job", plan.job},
            {"kind", "roce-tree"},
            {"root", plan.root},
            {"host_order", topo::host_order_name(plan.host_order)},
            {"ranks", plan.ranks},
            {"host_conn", plan.host_conn},
            {"switches", switches},
            {"conns", conns}};
}

void print_plan(const topo::Topology &t, const topo::TreePlan &plan, const RulesArgs &a) {
    fmt::print("job {} (roce-tree, root {}, host order {}): {} ranks ({}), {} switches, {} "
               "connections\n",
               plan.job, plan.root, topo::host_order_name(plan.host_order), plan.ranks.size(),
               fmt::join(plan.ranks, " "), plan.switches.size(), plan.conns.size());
    for (const auto &ts : plan.switches) {
        const rules::SwitchRules r = rules::compile(t, plan, ts.name);
        fmt::print("\nswitch {} ({}{}, namespace {}, pins {})\n", ts.name, ts.root ? "root, " : "",
                   t.node(ts.name).ip, topo::netns_name(a.prefix, ts.name),
                   topo::switch_pin_dir(a.pin_root, a.prefix, ts.name));
        fmt::print("  pool {}..{} ({} slots), fan-in {}\n", ts.pool_base,
                   ts.pool_base + ts.pool_size - 1, ts.pool_size, r.job.nworkers);
        const auto row = [](const std::string &kind, const std::string &peer,
                            const std::string &port, const std::string &qpn,
                            const std::string &pqpn, const std::string &rx, const std::string &tx,
                            const std::string &sport, const std::string &ranks) {
            std::string line = fmt::format("  {:<8} {:<8} {:<8} {:<9} {:<9} {:<9} {:<9} {:<7} {}",
                                           kind, peer, port, qpn, pqpn, rx, tx, sport, ranks);
            while (line.back() == ' ')
                line.pop_back();
            fmt::print("{}\n", line);
        };
        row("ROLE", "PEER", "PORT", "QPN", "PEER QPN", "RX BASE", "TX BASE", "SPORT", "RANKS");
        for (const auto &c : r.conns) {
            const incxdp_roce_conn &v = c.value;
            const std::string role = v.role == INCXDP_ROCE_PARENT
                                         ? "parent"
                                         : fmt::format("child {}{}", v.child, v.strict ? "" : "*");
            row(role, c.peer, c.iface, hex24(c.qpn), hex24(v.peer_qpn), hex24(v.rx_base),
                hex24(v.tx_base), fmt::format("0x{:04x}", ntohs(v.udp_sport)),
                v.role == INCXDP_ROCE_CHILD ? ranks_str(v.subtree_ranks) : "");
        }
        std::vector<std::string> ports;
        for (const auto &[port, qpn] : r.egress)
            ports.push_back(port);
        fmt::print("  multicast group: {}\n", fmt::join(ports, " "));
    }
    fmt::print("\n(child N*: frames taken out of order within the window, from a switch below "
               "or, with host order any, a host; child N: strict, go-back-N)\n");
}

void cmd_show(const RulesArgs &a, CLI::App *cmd) {
    const topo::Topology t = load_topology(a.file);
    json jobs = json::array();
    bool first = true;
    for (uint32_t id :
         rules::tree_jobs(t, cmd->count("--job") ? std::optional(a.job) : std::nullopt)) {
        const topo::TreePlan plan = rules::plan(t, id);
        if (a.flags.json) {
            jobs.push_back(plan_json(t, plan, a));
            continue;
        }
        if (!first)
            fmt::print("\n");
        first = false;
        print_plan(t, plan, a);
    }
    if (a.flags.json)
        std::cout << json{{"topology", t.name}, {"prefix", a.prefix}, {"jobs", jobs}}.dump(2)
                  << "\n";
}

void cmd_apply(const RulesArgs &a, CLI::App *cmd) {
    set_library_verbosity(a.flags.verbose);
    const topo::Topology t = load_topology(a.file);
    const auto done = rules::apply(t, options(a, cmd));
    if (a.flags.json) {
        json out = json::array();
        for (const auto &d : done)
            out.push_back({{"job", d.job},
                           {"switch", d.sw},
                           {"netns", d.netns},
                           {"pin_dir", d.pin_dir},
                           {"loaded_ports", d.loaded_ports},
                           {"reapplied", d.reapplied},
                           {"pool_base", d.pool_base},
                           {"pool_size", d.pool_size},
                           {"planned_pool_base", d.planned_pool_base},
                           {"conns", d.conns},
                           {"multicast_ports", d.egress}});
        std::cout << out.dump(2) << "\n";
        return;
    }
    for (const auto &d : done) {
        std::string engine = d.loaded_ports.empty() ? "engine already loaded"
                                                    : fmt::format("engine loaded on {}",
                                                                  fmt::join(d.loaded_ports, " "));
        std::string pool = fmt::format("pool {}..{}", d.pool_base, d.pool_base + d.pool_size - 1);
        if (d.pool_base != d.planned_pool_base)
            pool += fmt::format(" (planned {}.. was taken)", d.planned_pool_base);
        fmt::print("job {} on {:<8} {} connections, {} multicast ports, {}; {}{}\n", d.job, d.sw,
                   d.conns, d.egress, pool, engine, d.reapplied ? "; state reset" : "");
    }
}

void cmd_clear(const RulesArgs &a, CLI::App *cmd) {
    set_library_verbosity(a.flags.verbose);
    const topo::Topology t = load_topology(a.file);
    const auto done = rules::clear(t, options(a, cmd));
    if (a.flags.json) {
        json out = json::array();
        for (const auto &d : done)
            out.push_back({{"job", d.job},
                           {"switch", d.sw},
                           {"pin_dir", d.pin_dir},
                           {"engine", d.engine},
                           {"job_found", d.job_found},
                           {"conns", d.conns},
                           {"multicast_ports", d.egress},
                           {"unloaded", d.unloaded},
                           {"note", d.note}});
        std::cout << out.dump(2) << "\n";
        return;
    }
    for (const auto &d : done) {
        if (!d.note.empty())
            fmt::print("job {} on {:<8} {}\n", d.job, d.sw, d.note);
        if (d.unloaded)
            fmt::print("job {} on {:<8} engine unloaded, pins removed\n", d.job, d.sw);
        if (!d.engine)
            fmt::print("job {} on {:<8} no engine there: nothing to clear\n", d.job, d.sw);
        else
            fmt::print("job {} on {:<8} {}removed {} connections, {} multicast ports\n", d.job,
                       d.sw, d.job_found ? "" : "(not installed) ", d.conns, d.egress);
    }
}

void cmd_set_qpn(const RulesArgs &a, CLI::App *cmd) {
    set_library_verbosity(a.flags.verbose);
    const topo::Topology t = load_topology(a.file);
    const rules::QpnSet d = rules::set_qpn(t, options(a, cmd), a.job, a.rank, a.qpn);
    if (a.flags.json) {
        std::cout << json{{"job", d.job},         {"rank", d.rank},
                          {"host", d.host},       {"switch", d.sw},
                          {"pin_dir", d.pin_dir}, {"switch_qpn", d.switch_qpn},
                          {"old_qpn", d.old_qpn}, {"qpn", d.qpn}}
                         .dump(2)
                  << "\n";
        return;
    }
    fmt::print("job {} rank {} ({}): switch {} sends to QPN {} on connection {} (was {})\n", d.job,
               d.rank, d.host, d.sw, hex24(d.qpn), hex24(d.switch_qpn), hex24(d.old_qpn));
}

CLI::App *add_sub(CLI::App *parent, const char *name, const char *help, RulesArgs &a) {
    CLI::App *cmd = parent->add_subcommand(name, help);
    add_common_flags(cmd, a.flags);
    cmd->add_option("FILE", a.file,
                    "topology YAML with roce-tree jobs, e.g. "
                    "topo/topologies/tree124.yaml")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--prefix", a.prefix, "namespace name prefix: node N lives in <prefix>N")
        ->capture_default_str();
    cmd->add_option("--job", a.job, "only this job (default: every roce-tree job of FILE)");
    cmd->add_option("--pin-root", a.pin_root,
                    "bpffs directory holding one pin directory per switch, <root>/<prefix><switch> "
                    "(default: $INCXDP_PIN_DIR, else " INCXDP_PIN_DIR ")");
    return cmd;
}

} // namespace

void add_rules_command(CLI::App &app) {
    auto *cmd = app.add_subcommand("rules", "RoCEv2 aggregation trees: per-switch connections, "
                                            "multicast groups and pools of roce-tree jobs");
    cmd->require_subcommand(1);

    auto apply = std::make_shared<RulesArgs>();
    auto *ap = add_sub(cmd, "apply",
                       "install FILE's roce-tree jobs on every switch of their trees, loading the "
                       "engine where needed; re-applying resets connection state and slots",
                       *apply);
    ap->add_option("--slots", apply->slots,
                   "when loading an engine: aggregation slots shared by all jobs (default 4096)");
    ap->add_option("-m,--mode", apply->mode, "when loading an engine: XDP attach mode")
        ->check(CLI::IsMember({"native", "skb"}))
        ->capture_default_str();
    ap->add_flag("--skb", apply->skb, "same as --mode skb");
    ap->callback([apply, ap] { cmd_apply(*apply, ap); });

    auto show = std::make_shared<RulesArgs>();
    auto *sh = add_sub(cmd, "show",
                       "print the rules each switch gets: parent, children with QPNs and PSN "
                       "bases, multicast group, pool (computed from FILE; changes nothing)",
                       *show);
    sh->callback([show, sh] { cmd_show(*show, sh); });

    auto clear = std::make_shared<RulesArgs>();
    auto *cl = add_sub(cmd, "clear",
                       "remove FILE's roce-tree jobs from every switch of their trees (engines "
                       "stay loaded)",
                       *clear);
    cl->add_flag("--unload", clear->unload,
                 "then unload each of those engines that has no active job left (pins removed)");
    cl->callback([clear, cl] { cmd_clear(*clear, cl); });

    auto setq = std::make_shared<RulesArgs>();
    auto *sq = add_sub(cmd, "set-qpn",
                       "tell a rank's leaf switch the QPN its RDMA device gave the rank's QP "
                       "(incxdp-worker --transport verbs --publish-qpn runs this): after apply, "
                       "before the rank's first packet",
                       *setq);
    sq->get_option("--job")->required()->description("the roce-tree job");
    sq->add_option("--rank", setq->rank, "rank of the job")->required();
    sq->add_option("--qpn", setq->qpn, "the QPN the device assigned (decimal or 0x hex)")
        ->required();
    sq->callback([setq, sq] { cmd_set_qpn(*setq, sq); });
}

} // namespace incxdp::cli
