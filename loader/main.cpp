// SPDX-License-Identifier: BSD-2-Clause
#include "commands.h"

#include <cstdio>
#include <exception>

int main(int argc, char **argv)
{
    CLI::App app{"incxdp: in-network aggregation on Linux XDP"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "incxdp 0.1.0");
    incxdp::cli::add_load_commands(app);
    incxdp::cli::add_job_command(app);
    incxdp::cli::add_stats_command(app);
    incxdp::cli::add_topo_command(app);
    incxdp::cli::add_plan_command(app);
    incxdp::cli::add_chaos_command(app);
    incxdp::cli::add_rules_command(app);
    incxdp::cli::add_capture_command(app);
    incxdp::cli::add_smi_command(app);
    incxdp::cli::add_mesh_command(app);
    incxdp::cli::add_cm_command(app);
    incxdp::cli::add_replay_command(app);
    incxdp::cli::add_apply_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "incxdp: %s\n", e.what());
        return 1;
    }
    return 0;
}
