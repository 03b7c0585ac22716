// SPDX-License-Identifier: BSD-2-Clause
// Every `incxdp` subcommand registers itself through one of these.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>

namespace incxdp::cli {

// Flags every printing command accepts.
struct CommonFlags {
    bool json = false;    // -j/--json: machine-readable output on stdout
    bool verbose = false; // -v/--verbose: libbpf/libxdp debug output on stderr
};

// Registers -j and -v on a subcommand.
void add_common_flags(CLI::App *cmd, CommonFlags &flags);
// Routes libbpf/libxdp messages: warnings always, debug only when verbose.
void set_library_verbosity(bool verbose);

// A user-facing failure: main prints "incxdp: <what>" and exits 1.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void add_load_commands(CLI::App &app);  // load, unload, status
void add_job_command(CLI::App &app);    // job add|del|list
void add_stats_command(CLI::App &app);  // stats
void add_topo_command(CLI::App &app);   // topo up|down|status
void add_plan_command(CLI::App &app);   // plan (aggregation trees per INC fid of a .cm)
void add_chaos_command(CLI::App &app);  // chaos (fault injection)
void add_rules_command(CLI::App &app);  // rules apply|show|clear (RoCEv2 trees)
void add_capture_command(CLI::App &app); // capture (pcap of what arrives at our XDP programs)
void add_smi_command(CLI::App &app);    // smi routes|run (SMI clusters on the mesh relay)
void add_mesh_command(CLI::App &app);    // mesh run|show|stats (discovery, routing, relay)
void add_cm_command(CLI::App &app);      // cm check|gen (htsim connection matrices)
void add_replay_command(CLI::App &app);  // replay (a .cm with real bytes on a topology)
void add_apply_command(CLI::App &app);   // apply|remove (plan -> compile -> apply, every job kind)

} // namespace incxdp::cli
