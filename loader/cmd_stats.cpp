// SPDX-License-Identifier: BSD-2-Clause
// incxdp stats [-j] [--reset]
#include "commands.h"

#include <incxdp/ctl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace incxdp::cli {

void add_stats_command(CLI::App &app)
{
    struct Args {
        CommonFlags flags;
        bool reset = false;
        std::string pin_dir = ctl::default_pin_dir();
    };
    auto args = std::make_shared<Args>();
    auto *cmd = app.add_subcommand("stats", "per-verdict packet counters, summed over CPUs");
    add_common_flags(cmd, args->flags);
    cmd->add_flag("--reset", args->reset, "zero the counters after printing them");
    cmd->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    cmd->callback([args] {
        set_library_verbosity(args->flags.verbose);
        auto stats = ctl::read_stats(args->pin_dir);
        if (args->flags.json) {
            std::cout << nlohmann::json(stats).dump(2) << "\n";
        } else {
            fmt::print("{:<16} {:>14}\n", "rx", stats["rx"]);
            for (uint32_t i = 0; i < INCXDP_STAT_MAX; i++) {
                const char *name = ctl::stat_name(static_cast<incxdp_stat>(i));
                fmt::print("{:<16} {:>14}\n", name, stats[name]);
            }
        }
        if (args->reset)
            ctl::reset_stats(args->pin_dir);
    });
}

} // namespace incxdp::cli
