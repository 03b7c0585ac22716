// SPDX-License-Identifier: BSD-2-Clause
// incxdp job add | del | list
#include "commands.h"

#include <incxdp/ctl.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

namespace incxdp::cli {

namespace {

struct JobArgs {
    CommonFlags flags;
    std::string pin_dir = ctl::default_pin_dir();
    std::string topo_file;
    uint32_t id = 0;
    std::vector<std::string> workers;
    std::string switch_ip;
    uint32_t slots = 0;
    uint32_t max_elems = INCXDP_MAX_ELEMS;
};

using util::format_ipv4_be;

// --switch-ip as the engine keeps it (network order).
uint32_t switch_ip_be(const std::string &text)
{
    if (const auto be = util::parse_ipv4_be(text))
        return *be;
    throw Error(fmt::format("job add: --switch-ip '{}' is not an IPv4 address", text));
}

ctl::JobSpec spec_from_args(const JobArgs &a, CLI::App *cmd)
{
    ctl::JobSpec job;
    if (!a.topo_file.empty()) {
        if (!a.workers.empty())
            throw Error("job add: give either --topo or --worker, not both");
        try {
            job = ctl::job_from_topology(topo::Topology::load_file(a.topo_file), a.id);
        } catch (const topo::TopologyError &e) {
            throw Error(e.what());
        }
    } else {
        if (a.workers.empty())
            throw Error("job add: no workers (--worker RANK=MAC/IP:PORT@IFACE, or --topo FILE)");
        job.id = a.id;
        for (const auto &w : a.workers)
            job.workers.push_back(ctl::parse_worker_spec(w));
        job.switch_ip = switch_ip_be(a.switch_ip);
    }
    if (cmd->count("--switch-ip") && !a.topo_file.empty())
        job.switch_ip = switch_ip_be(a.switch_ip);
    if (a.slots)
        job.slots = a.slots;
    job.max_elems = a.max_elems;
    return job;
}

void print_jobs(const std::vector<ctl::JobInfo> &jobs, bool json)
{
    if (json) {
        auto arr = nlohmann::json::array();
        for (const auto &j : jobs) {
            nlohmann::json o{{"id", j.id},           {"workers", j.nworkers},   {"pool_base", j.pool_base},
                             {"pool_size", j.pool_size}, {"max_elems", j.max_elems}, {"switch", j.switch_addr}};
            o["kind"] = j.kind == INCXDP_JOB_ROCE_TREE ? "roce-tree" : "star";
            if (j.kind == INCXDP_JOB_ROCE_TREE)
                o["parent_qpn"] = j.parent_qpn;
            o["ranks"] = nlohmann::json::array();
            for (const auto &w : j.workers)
                o["ranks"].push_back({{"rank", w.rank},
                                      {"mac", topo::mac_to_string(w.mac)},
                                      {"ip", format_ipv4_be(w.ip)},
                                      {"port", w.port},
                                      {"iface", w.iface}});
            arr.push_back(o);
        }
        std::cout << arr.dump(2) << "\n";
        return;
    }
    if (jobs.empty()) {
        fmt::print("no jobs\n");
        return;
    }
    for (const auto &j : jobs) {
        if (j.kind == INCXDP_JOB_ROCE_TREE) {
            // Its connections are in incxdp_roce_conns: `incxdp rules show` lists them.
            fmt::print("job {} (roce-tree, {}): {} children, slots {}..{}, switch {}, max {} elems/packet\n",
                       j.id, j.parent_qpn ? fmt::format("parent QPN 0x{:06x}", j.parent_qpn) : "root",
                       j.nworkers, j.pool_base, j.pool_base + j.pool_size - 1, j.switch_addr, j.max_elems);
            continue;
        }
        fmt::print("job {}: {} workers, slots {}..{}, switch {}, max {} elems/packet\n", j.id, j.nworkers,
                   j.pool_base, j.pool_base + j.pool_size - 1, j.switch_addr, j.max_elems);
        for (const auto &w : j.workers)
            fmt::print("  rank {:<3} {}  {:<15} :{:<5} via {}\n", w.rank,
                       topo::mac_to_string(w.mac), format_ipv4_be(w.ip), w.port, w.iface);
    }
}

} // namespace

void add_job_command(CLI::App &app)
{
    auto args = std::make_shared<JobArgs>();
    auto *job = app.add_subcommand("job", "install, remove and list aggregation jobs");
    job->require_subcommand(1);

    auto *add = job->add_subcommand("add", "install a job: workers, multicast group, slot pool");
    add_common_flags(add, args->flags);
    add->add_option("--id,--job", args->id, "job id (0..255)")->required();
    add->add_option("--topo", args->topo_file, "take the job's workers and switch from a topology file")
        ->check(CLI::ExistingFile);
    add->add_option("-w,--worker", args->workers, "RANK=MAC/IP:PORT@IFACE (repeatable)");
    add->add_option("--switch-ip", args->switch_ip, "address workers send to; source of results");
    add->add_option("--slots", args->slots, "slot pool size (default: topology's, else 256)");
    add->add_option("--max-elems", args->max_elems, "largest payload in int32 elements")->capture_default_str();
    add->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    add->callback([args, add] {
        set_library_verbosity(args->flags.verbose);
        ctl::JobSpec spec = spec_from_args(*args, add);
        ctl::job_add(spec, args->pin_dir);
        if (!args->flags.json)
            fmt::print("job {} installed: {} workers, {} slots\n", spec.id, spec.workers.size(), spec.slots);
        else
            std::cout << nlohmann::json{{"id", spec.id}, {"workers", spec.workers.size()}, {"slots", spec.slots}}.dump()
                      << "\n";
    });

    auto *del = job->add_subcommand("del", "remove a job and free its slots");
    add_common_flags(del, args->flags);
    del->add_option("id", args->id, "job id")->required();
    del->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    del->callback([args] {
        set_library_verbosity(args->flags.verbose);
        ctl::job_del(args->id, args->pin_dir);
    });

    auto *reset = job->add_subcommand("reset", "clear a job's slots before its workers start a new run");
    add_common_flags(reset, args->flags);
    reset->add_option("id", args->id, "job id")->required();
    reset->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    reset->callback([args] {
        set_library_verbosity(args->flags.verbose);
        ctl::job_reset(args->id, args->pin_dir);
    });

    auto *list = job->add_subcommand("list", "show installed jobs");
    add_common_flags(list, args->flags);
    list->add_option("--pin-dir", args->pin_dir, "bpffs directory for the maps")->capture_default_str();
    list->callback([args] {
        set_library_verbosity(args->flags.verbose);
        print_jobs(ctl::job_list(args->pin_dir), args->flags.json);
    });
}

} // namespace incxdp::cli
