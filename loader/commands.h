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
void add_chaos_command(CLI::App &app);  // chaos (fault injection)
void add_rules_command(CLI::App &app);  // rules apply|show|clear (RoCEv2 trees)
void add_capture_command(CLI::App &app); // capture (pcap of what arrives at our XDP programs)

} // namespace incxdp::cli
