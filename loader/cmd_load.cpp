// SPDX-License-Identifier: BSD-2-Clause
// incxdp load | unload | status
#include "commands.h"

#include <incxdp/ctl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace incxdp::cli {

namespace {

struct LoadArgs {
    CommonFlags flags;
    std::vector<std::string> ifaces;
    std::string mode = "native";
    uint32_t slots = 0;
    uint16_t native_port = INCXDP_UDP_PORT;
    std::string pin_dir = ctl::default_pin_dir();
};

void print_status(const ctl::Status &st, bool json)
{
    if (json) {
        nlohmann::json j;
        j["loaded"] = st.loaded;
        j["pin_dir"] = st.pin_dir;
        j["netns"] = st.netns;
        j["other_netns"] = st.other_netns;
        j["slots_total"] = st.slots_total;
        j["slots_used"] = st.slots_used;
        j["jobs"] = st.jobs;
        j["ports"] = nlohmann::json::array();
        for (const auto &p : st.ports)
            j["ports"].push_back({{"iface", p.iface},
                                  {"ifindex", p.ifindex},
                                  {"mode", p.mode},
                                  {"prog_id", p.prog_id},
                                  {"xdp_xmit", p.xdp_xmit ? nlohmann::json(*p.xdp_xmit) : nlohmann::json()}});
        std::cout << j.dump(2) << "\n";
        return;
    }
    if (!st.loaded) {
        fmt::print("incxdp is not loaded (no pins in {})\n", st.pin_dir);
        return;
    }
    fmt::print("incxdp loaded in {}{}, maps in {}\n", st.netns, st.other_netns ? " (not this namespace)" : "",
               st.pin_dir);
    fmt::print("slots: {} used of {}, jobs: {}\n", st.slots_used, st.slots_total, st.jobs);
    fmt::print("{:<16} {:>8} {:<20} {:>8} {:>8}\n", "PORT", "IFINDEX", "MODE", "PROG", "XDP-XMIT");
    for (const auto &p : st.ports)
        fmt::print("{:<16} {:>8} {:<20} {:>8} {:>8}\n", p.iface, p.ifindex, p.mode, p.prog_id,
                   p.xdp_xmit ? (*p.xdp_xmit ? "yes" : "no") : "?");
    for (const auto &p : st.ports)
        if (p.xdp_xmit == false && p.mode.find("native") != std::string::npos)
            fmt::print("warning: {} transmits no XDP frames (a veth whose peer runs no native XDP "
                       "program?): what the engine forwards or multicasts out of it is dropped\n",
                       p.iface);
}

} // namespace

void add_load_commands(CLI::App &app)
{
    auto args = std::make_shared<LoadArgs>();

    auto *load = app.add_subcommand("load", "attach the aggregation engine to switch ports");
    add_common_flags(load, args->flags);
    load->add_option("-i,--iface", args->ifaces, "switch port (repeatable)")->required();
    load->add_option("-m,--mode", args->mode, "XDP attach mode")
        ->check(CLI::IsMember({"native", "skb"}))
        ->capture_default_str();
    load->add_option("--slots", args->slots, "aggregation slots shared by all jobs (default 4096)");
    load->add_option("--native-port", args->native_port, "UDP port of the native incxdp protocol")
        ->capture_default_str();
    load->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    load->callback([args] {
        set_library_verbosity(args->flags.verbose);
        ctl::LoadOptions o;
        o.ifaces = args->ifaces;
        o.mode = args->mode == "skb" ? ctl::AttachMode::Skb : ctl::AttachMode::Native;
        o.slots = args->slots;
        o.native_port = args->native_port;
        o.pin_dir = args->pin_dir;
        ctl::load(o);
        auto st = ctl::status(args->pin_dir);
        if (args->flags.json)
            print_status(st, true);
        else
            for (const auto &p : st.ports)
                fmt::print("{:<16} {}\n", p.iface, p.mode);
    });

    auto *unload = app.add_subcommand("unload", "detach the engine; remove its maps when no port is left");
    add_common_flags(unload, args->flags);
    unload->add_option("-i,--iface", args->ifaces, "port to detach (default: all)");
    unload->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    unload->callback([args] {
        set_library_verbosity(args->flags.verbose);
        ctl::unload(args->ifaces, args->pin_dir);
    });

    auto *status = app.add_subcommand("status", "show the ports, attach modes and slot usage");
    add_common_flags(status, args->flags);
    status->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    status->callback([args] {
        set_library_verbosity(args->flags.verbose);
        print_status(ctl::status(args->pin_dir), args->flags.json);
    });
}

} // namespace incxdp::cli
