// SPDX-License-Identifier: BSD-2-Clause
// incxdp capture: frames arriving at incxdp's XDP programs, as pcap.
#include "commands.h"

#include <incxdp/capture_ctl.h>

#include <fmt/format.h>

#include <atomic>
#include <csignal>

namespace incxdp::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

} // namespace

void add_capture_command(CLI::App &app)
{
    auto opts = std::make_shared<ctl::CaptureOptions>();
    auto *cmd = app.add_subcommand("capture",
                                   "Write every frame arriving at incxdp's XDP programs to a pcap file "
                                   "(frames sent by XDP bypass tcpdump's taps)");
    cmd->add_option("-i,--iface", opts->ifaces, "Interface (repeatable); default: every one running ours");
    cmd->add_option("-w,--write", opts->file,
                    "pcap file to write; it appears, with its header, once the capture listens")
        ->required();
    cmd->add_option("-c,--count", opts->count, "Stop after this many frames");
    cmd->add_option("--seconds", opts->seconds, "Stop after this many seconds")->check(CLI::NonNegativeNumber);
    cmd->callback([opts] {
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        try {
            auto res = ctl::capture(*opts, g_stop);
            std::fprintf(stderr, "incxdp capture: %llu frames on %s to %s, %llu lost\n",
                         static_cast<unsigned long long>(res.frames), fmt::format("{}", fmt::join(res.ifaces, ",")).c_str(),
                         opts->file.c_str(), static_cast<unsigned long long>(res.lost));
        } catch (const std::exception &e) {
            throw Error(e.what());
        }
    });
}

} // namespace incxdp::cli
