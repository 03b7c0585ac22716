// SPDX-License-Identifier: BSD-2-Clause
// `incxdp topo up|down|status FILE [--prefix P]`: the namespace topology of
// a YAML file (docs/TOPOLOGY.md), brought up for the demo and the tests.
#include "cm_inc_switch.h"
#include "commands.h"

#include <unistd.h>

#include <incxdp/fattree_gen.h>
#include <incxdp/netns.h>
#include <incxdp/rules_ctl.h>
#include <incxdp/topology.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace incxdp::cli {
namespace {

using nlohmann::json;
namespace topo = incxdp::topo;

constexpr const char *kDefaultPrefix = "ix-";

struct TopoOpts {
    std::string file;
    std::string prefix = kDefaultPrefix;
    std::string pin_root; // down: where the switches' engines are pinned
    bool engine = false;  // up: load the engine on every switch
    CommonFlags flags;
};

CLI::App *add_sub(CLI::App *parent, const char *name, const char *help, TopoOpts &o) {
    CLI::App *cmd = parent->add_subcommand(name, help);
    cmd->add_option("FILE", o.file, "topology YAML, e.g. topo/topologies/star.yaml")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--prefix", o.prefix,
                    "namespace name prefix: node N lives in namespace <prefix>N")
        ->capture_default_str();
    add_common_flags(cmd, o.flags);
    return cmd;
}

// Library errors become user-facing ones: main prints "incxdp: <what>".
template <typename F> void user_errors(F &&f) {
    try {
        f();
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    } catch (const topo::NetnsError &e) {
        throw Error(e.what());
    }
}

std::vector<std::string> namespaces(const topo::Topology &t, const std::string &prefix) {
    std::vector<std::string> v;
    for (const auto &n : t.nodes)
        v.push_back(topo::netns_name(prefix, n.name));
    return v;
}

std::string join(const std::vector<std::string> &v, const char *sep) {
    std::string s;
    for (const auto &x : v)
        s += (s.empty() ? "" : sep) + x;
    return s;
}

void print_table(const std::vector<std::vector<std::string>> &rows) {
    std::vector<size_t> w;
    for (const auto &r : rows)
        for (size_t c = 0; c < r.size(); ++c) {
            w.resize(std::max(w.size(), r.size()));
            w[c] = std::max(w[c], r[c].size());
        }
    for (const auto &r : rows) {
        std::string line;
        for (size_t c = 0; c < r.size(); ++c)
            line += c + 1 == r.size() ? r[c] : fmt::format("{:<{}}  ", r[c], w[c]);
        while (!line.empty() && line.back() == ' ')
            line.pop_back();
        std::puts(line.c_str());
    }
}

void cmd_up(const TopoOpts &o) {
    set_library_verbosity(o.flags.verbose);
    const auto t = topo::Topology::load_file(o.file);
    topo::Progress progress;
    if (o.flags.verbose)
        progress = [](const std::string &s) { std::fprintf(stderr, "topo up: %s\n", s.c_str()); };
    topo::up(t, o.prefix, progress);
    if (o.engine)
        for (const std::string &sw : cm::load_engines(t, o.prefix, o.pin_root))
            progress ? progress("engine loaded on " + sw) : void();
    const auto ns = namespaces(t, o.prefix);
    if (o.flags.json) {
        std::puts(json{{"topology", t.name},
                       {"prefix", o.prefix},
                       {"state", "up"},
                       {"namespaces", ns},
                       {"links", t.links.size()}}
                      .dump()
                      .c_str());
        return;
    }
    fmt::print("topology {} up: {} namespaces ({}), {} links\n", t.name, ns.size(), join(ns, " "),
               t.links.size());
}

void cmd_down(const TopoOpts &o) {
    set_library_verbosity(o.flags.verbose);
    const auto t = topo::Topology::load_file(o.file);
    // An engine's pins live in bpffs, not in its namespace: unload it
    // while its ports still exist, or they stay behind.
    std::vector<std::string> unloaded;
    for (const auto &u : ctl::rules::unload_switches(t, o.prefix, o.pin_root)) {
        if (u.unloaded)
            unloaded.push_back(u.sw);
        else
            fmt::print(stderr, "incxdp: topo down: switch {}: engine in {} not unloaded: {}\n",
                       u.sw, u.pin_dir, u.note);
    }
    const size_t removed = topo::down(t, o.prefix);
    // A private pin root (tests, scripts) goes too once its switches' pin
    // directories are gone; the default one may hold other engines: rmdir
    // only succeeds on an empty directory.
    if (!o.pin_root.empty())
        ::rmdir(o.pin_root.c_str());
    if (o.flags.json) {
        std::puts(json{{"topology", t.name},
                       {"prefix", o.prefix},
                       {"removed", removed},
                       {"unloaded", unloaded}}
                      .dump()
                      .c_str());
        return;
    }
    if (!unloaded.empty())
        fmt::print("unloaded incxdp on {}\n", join(unloaded, " "));
    if (removed == 0)
        fmt::print("topology {} is not up with prefix {}: nothing to remove\n", t.name, o.prefix);
    else
        fmt::print("topology {} down: removed {} namespaces\n", t.name, removed);
}

json xdp_json(const topo::XdpStatus &x) {
    if (x.id == 0)
        return nullptr;
    return {{"id", x.id}, {"name", x.name}, {"mode", x.mode}};
}

json status_json(const topo::Topology &t, const topo::TopologyStatus &s) {
    json nodes = json::array();
    for (size_t n = 0; n < s.nodes.size(); ++n) {
        const auto &ns = s.nodes[n];
        json ifaces = json::array();
        for (size_t k = 0; k < ns.ifaces.size(); ++k) {
            const auto &is = ns.ifaces[k];
            const auto &want = t.nodes[n].ifaces[k];
            ifaces.push_back({{"name", is.name},
                              {"peer_node", want.peer_node},
                              {"peer_iface", want.peer_iface},
                              {"exists", is.exists},
                              {"up", is.up},
                              {"operstate", is.operstate},
                              {"mac", is.mac},
                              {"expected_mac", topo::mac_to_string(want.mac)},
                              {"mtu", is.mtu},
                              {"addrs", is.addrs},
                              {"xdp", xdp_json(is.xdp)}});
        }
        nodes.push_back({{"name", ns.name},
                         {"kind", ns.kind == topo::NodeKind::Switch ? "switch" : "host"},
                         {"netns", ns.netns},
                         {"exists", ns.exists},
                         {"ifaces", ifaces}});
    }
    return {{"topology", s.topology}, {"prefix", s.prefix}, {"state", s.state()}, {"nodes", nodes}};
}

void print_status(const topo::Topology &t, const topo::TopologyStatus &s) {
    fmt::print("topology {} (prefix {}): {}, {}/{} namespaces\n", s.topology, s.prefix, s.state(),
               s.namespaces_present(), s.nodes.size());
    std::vector<std::vector<std::string>> rows{
        {"NODE", "NETNS", "IFACE", "PEER", "STATE", "MAC", "MTU", "ADDRESS", "XDP"}};
    for (size_t n = 0; n < s.nodes.size(); ++n) {
        const auto &ns = s.nodes[n];
        if (!ns.exists) {
            rows.push_back({ns.name, ns.netns, "-", "-", "absent"});
            continue;
        }
        for (size_t k = 0; k < ns.ifaces.size(); ++k) {
            const auto &is = ns.ifaces[k];
            const auto &want = t.nodes[n].ifaces[k];
            const std::string peer = want.peer_node + ":" + want.peer_iface;
            if (!is.exists) {
                rows.push_back({ns.name, ns.netns, is.name, peer, "missing"});
                continue;
            }
            std::string mac = is.mac;
            if (mac != topo::mac_to_string(want.mac))
                mac += " (want " + topo::mac_to_string(want.mac) + ")";
            const std::string xdp =
                is.xdp.id ? fmt::format("{} (id {}, {})", is.xdp.name, is.xdp.id, is.xdp.mode)
                          : "-";
            rows.push_back({ns.name, ns.netns, is.name, peer, is.up ? "up" : "down", mac,
                            std::to_string(is.mtu), is.addrs.empty() ? "-" : join(is.addrs, ","),
                            xdp});
        }
    }
    print_table(rows);
}

void cmd_status(const TopoOpts &o) {
    const auto t = topo::Topology::load_file(o.file);
    const auto s = topo::status(t, o.prefix);
    if (o.flags.json)
        std::puts(status_json(t, s).dump().c_str());
    else
        print_status(t, s);
}

} // namespace

namespace {

// `topo gen fattree`: htsim's fat-tree as YAML (docs/FATTREE.md).
struct GenOpts {
    topo::FatTreeSpec spec;
    std::string out; // empty: stdout
};

void cmd_gen_fattree(const GenOpts &o) {
    const std::string yaml = topo::generate_fattree_yaml(o.spec);
    // What we write must load: the parser checks names, addresses, links
    // and that up/down routing reaches every host.
    topo::Topology::parse(yaml);
    if (o.out.empty()) {
        std::fputs(yaml.c_str(), stdout);
        return;
    }
    std::FILE *f = std::fopen(o.out.c_str(), "w");
    const bool ok = f && std::fputs(yaml.c_str(), f) >= 0;
    if (f && std::fclose(f) != 0)
        throw Error(fmt::format("topo gen: write {}: {}", o.out, std::strerror(errno)));
    if (!ok)
        throw Error(fmt::format("topo gen: write {}: {}", o.out, std::strerror(errno)));
}

void add_gen_command(CLI::App *topo) {
    CLI::App *gen = topo->add_subcommand("gen", "write a topology YAML");
    gen->require_subcommand(1);
    auto o = std::make_shared<GenOpts>();
    CLI::App *ft = gen->add_subcommand(
        "fattree", "htsim's fat-tree (3 tiers) or leaf-spine (2 tiers), numbered as htsim numbers "
                   "it, with routing: updown");
    ft->add_option("--k", o->spec.k, "switch radix (even, >= 2): k^3/4 hosts with 3 tiers")
        ->required();
    ft->add_option("--tiers", o->spec.tiers, "3: ToR/Agg/core; 2: leaf-spine (ToR/spine)")
        ->capture_default_str();
    ft->add_option("--subnet", o->spec.subnet,
                   "the hosts' and switches' subnet, a.b.0.0/len with len <= 16")
        ->capture_default_str();
    ft->add_option("--name", o->spec.name, "topology name (default fattree<k> / leafspine<k>)");
    ft->add_option("-o,--output", o->out, "write to FILE instead of stdout");
    ft->callback([o] { user_errors([&] { cmd_gen_fattree(*o); }); });
}

} // namespace

void add_topo_command(CLI::App &app) {
    CLI::App *topo = app.add_subcommand(
        "topo", "network-namespace topologies: one namespace per node, veth links");
    topo->require_subcommand(1);

    auto up = std::make_shared<TopoOpts>();
    CLI::App *up_cmd = add_sub(topo, "up",
                               "create FILE's namespaces, veth links, MACs, addresses, neighbours "
                               "and hosts' XDP_PASS (root; all or nothing)",
                               *up);
    up_cmd->add_flag("--engine", up->engine,
                     "then load the engine on every port of every switch (pins under "
                     "--pin-root/<prefix><switch>; `topo down` unloads them)");
    up_cmd->add_option("--pin-root", up->pin_root, "with --engine: bpffs directory of the pins");
    up_cmd->callback([up] { user_errors([&] { cmd_up(*up); }); });

    auto down = std::make_shared<TopoOpts>();
    CLI::App *down_cmd =
        add_sub(topo, "down",
                "unload the engine of every switch (its pin directory under --pin-root), then "
                "delete FILE's namespaces and with them their links (root)",
                *down);
    down_cmd->add_option("--pin-root", down->pin_root,
                         "bpffs directory holding the switches' pin directories "
                         "<root>/<prefix><switch> (default: $INCXDP_PIN_DIR, else " INCXDP_PIN_DIR
                         ")");
    down_cmd->callback([down] { user_errors([&] { cmd_down(*down); }); });

    auto status = std::make_shared<TopoOpts>();
    add_sub(topo, "status", "show FILE's namespaces and interfaces: state, MAC, MTU, address, XDP",
            *status)
        ->callback([status] { user_errors([&] { cmd_status(*status); }); });

    add_gen_command(topo);
}

} // namespace incxdp::cli
