// SPDX-License-Identifier: BSD-2-Clause
// incxdp mesh run|show|stats: the mesh discovery and routing daemon, its
// state and the relay's counters (docs/MESH.md §incxdp mesh).
#include "commands.h"
#include "mesh_config.h"
#include "mesh_daemon.h"
#include "mesh_relay_port.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>

namespace incxdp::cli {

using namespace incxdp::mesh;

static void add_run(CLI::App *mesh) {
    struct Args {
        CommonFlags flags;
        std::string ifaces, pin_dir, relay, topology, config, mode, state_file;
        uint32_t max_hops = 0;
        uint32_t hello_ms = 0, dead_ms = 0; // 0: Timers' defaults
        bool no_xdp = false;
    };
    auto a = std::make_shared<Args>();
    auto *cmd = mesh->add_subcommand(
        "run", "discover the mesh, compute routes and keep the relay's forwarding table "
               "(foreground; SIGINT/SIGTERM detach)");
    add_common_flags(cmd, a->flags);
    auto *o_ifaces = cmd->add_option("--ifaces", a->ifaces,
                                     "interfaces, a,b,.. or all (default: every up non-loopback "
                                     "interface with an IPv4 address)");
    auto *o_pin = cmd->add_option("--pin-dir", a->pin_dir,
                                  "bpffs directory for the relay's maps (default "
                                  "$INCXDP_MESH_PIN_DIR, else /sys/fs/bpf/incxdp/mesh)");
    auto *o_relay = cmd->add_option("--relay", a->relay, "forward frames for other nodes: on|off");
    auto *o_hops = cmd->add_option("--max-hops", a->max_hops,
                                   "destinations more links away are unreachable (default 4)");
    auto *o_topo = cmd->add_option("--topology", a->topology,
                                   "auto|ring|line|full: a graph that is not one is an error");
    auto *o_mode = cmd->add_option("--mode", a->mode, "relay attach mode: native|skb");
    cmd->add_option("--config", a->config, "YAML file with the same knobs (flag > env > file)");
    cmd->add_option("--state", a->state_file,
                    "state file (default /run/incxdp/mesh<pin dir>/mesh.json)");
    cmd->add_flag("--no-xdp", a->no_xdp,
                  "discovery and routes only: attach no relay, write no maps");
    cmd->add_option("--hello-ms", a->hello_ms, "hello on every interface this often (default 100)");
    cmd->add_option("--dead-ms", a->dead_ms,
                    "a neighbour not heard this long is down (default 400); raise it where a "
                    "loaded host may not run the daemon for that long");
    cmd->callback([a, o_ifaces, o_pin, o_relay, o_hops, o_topo, o_mode] {
        set_library_verbosity(a->flags.verbose);
        KnobSet flags;
        if (o_ifaces->count())
            flags.ifaces = parse_iface_list(a->ifaces);
        if (o_pin->count())
            flags.pin_dir = a->pin_dir;
        if (o_relay->count())
            flags.relay = parse_on_off(a->relay, "--relay");
        if (o_hops->count())
            flags.max_hops = parse_max_hops(std::to_string(a->max_hops), "--max-hops");
        if (o_topo->count())
            flags.topology = parse_topo_override(a->topology);
        if (o_mode->count())
            flags.mode = parse_mode(a->mode, "--mode");
        const KnobSet env = knobs_from_env([](const char *n) { return std::getenv(n); });
        const KnobSet file = a->config.empty() ? KnobSet{} : knobs_from_file(a->config);
        DaemonOptions opts;
        opts.knobs = resolve_knobs(flags, env, file, relay_default_pin_dir());
        opts.xdp = !a->no_xdp;
        opts.state_file = a->state_file;
        if (a->hello_ms)
            opts.timers.hello_ms = a->hello_ms;
        if (a->dead_ms)
            opts.timers.dead_ms = a->dead_ms;
        run_daemon(opts);
    });
}

static void add_show(CLI::App *mesh) {
    struct Args {
        CommonFlags flags;
        std::string pin_dir, state_file;
    };
    auto a = std::make_shared<Args>();
    auto *cmd = mesh->add_subcommand(
        "show", "this node's id, topology, knobs, neighbours and routes (from the daemon's state)");
    add_common_flags(cmd, a->flags);
    cmd->add_option("--pin-dir", a->pin_dir, "the daemon's --pin-dir");
    cmd->add_option("--state", a->state_file, "the daemon's --state");
    cmd->callback([a] {
        const std::string dir = a->pin_dir.empty() ? relay_default_pin_dir() : a->pin_dir;
        const std::string path = a->state_file.empty() ? state_path(dir) : a->state_file;
        std::ifstream in(path);
        if (!in)
            throw Error(fmt::format("no mesh daemon state at {}: is `incxdp mesh run "
                                    "--pin-dir {}` running in this node?",
                                    path, dir));
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception &e) {
            throw Error(fmt::format("mesh state {}: {}", path, e.what()));
        }
        if (a->flags.json)
            std::cout << j.dump(2) << "\n";
        else
            std::cout << format_show(j);
    });
}

static void add_stats(CLI::App *mesh) {
    struct Args {
        CommonFlags flags;
        std::string pin_dir;
    };
    auto a = std::make_shared<Args>();
    auto *cmd = mesh->add_subcommand("stats", "the relay's counters, summed over CPUs");
    add_common_flags(cmd, a->flags);
    cmd->add_option("--pin-dir", a->pin_dir, "the daemon's --pin-dir");
    cmd->callback([a] {
        set_library_verbosity(a->flags.verbose);
        const auto stats = relay_stats(a->pin_dir.empty() ? relay_default_pin_dir() : a->pin_dir);
        if (a->flags.json) {
            nlohmann::json j = nlohmann::json::object();
            for (const auto &[name, v] : stats)
                j[name] = v;
            std::cout << j.dump(2) << "\n";
        } else {
            for (const auto &[name, v] : stats)
                fmt::print("{:<16} {:>14}\n", name, v);
        }
    });
}

void add_mesh_command(CLI::App &app) {
    auto *mesh = app.add_subcommand("mesh", "mesh clusters: discovery, routing, relay state");
    mesh->require_subcommand(1);
    add_run(mesh);
    add_show(mesh);
    add_stats(mesh);
}

} // namespace incxdp::cli
