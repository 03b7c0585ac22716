// SPDX-License-Identifier: BSD-2-Clause
// incxdp-bench: size sweep of one collective (allreduce by default; reduce,
// broadcast, barrier, allgather, reduce-scatter with --prim). Every rank of
// the job runs it with the same flags; rank 0 prints size | median time |
// algbw.
#include "tool_common.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <stdexcept>
#include <vector>

using namespace incxdp;
using namespace incxdp::tools;
using json = nlohmann::json;

namespace {

struct Options {
    BootstrapOptions boot;
    CollectiveOptions coll;
    std::string sizes; // explicit list overrides the sweep
    std::string min_size = "4K";
    std::string max_size = "64M";
    uint32_t iters = 10;
    uint32_t warmup = 2;
};

struct Row {
    uint64_t bytes = 0;
    double median = 0, min = 0;
    uint64_t retx = 0;
    uint64_t rx_dropped = 0; ///< frames our receive ring had no room for (AF_XDP, roce)
    double cpu = 0;          ///< median CPU seconds per allreduce, summed over all ranks
};

// CPU time of this process: user + system, including the softirq work
// (the switch's XDP program, the veth hops) that runs in its context.
double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<uint64_t> sweep(const Options &o) {
    if (parse_prim(o.coll.prim) == Prim::Barrier)
        return {0}; // no data: one row
    if (!o.sizes.empty())
        return parse_size_list(o.sizes);
    std::vector<uint64_t> v;
    uint64_t hi = parse_size(o.max_size);
    for (uint64_t s = parse_size(o.min_size); s <= hi; s *= 4)
        v.push_back(s);
    return v;
}

template <typename T>
Row measure(Communicator &comm, const Options &o, uint64_t bytes, std::vector<T> &send,
            std::vector<T> &recv, DType dtype, ReduceOp op) {
    size_t count = bytes / 4;
    Prim prim = parse_prim(o.coll.prim);
    // allgather and reduce-scatter: the size is the whole buffer (allgather's
    // recv, reduce-scatter's send) of world_size blocks.
    if (prim == Prim::AllGather || prim == Prim::ReduceScatter) {
        uint32_t world = comm.config().world_size;
        if (count % world != 0)
            throw std::invalid_argument(fmt::format(
                "{}: size {} is not {} equal blocks of whole elements", o.coll.prim, bytes, world));
        count /= world;
    }
    std::vector<double> times, cpus;
    Row row{bytes, 0, 0, 0, 0};
    for (uint32_t it = 0; it < o.warmup + o.iters; ++it) {
        comm.barrier();
        double c0 = process_cpu_seconds();
        run_collective(comm, prim, o.coll.root, send.data(), recv.data(), count, dtype, op);
        double c1 = process_cpu_seconds();
        if (it >= o.warmup) {
            times.push_back(comm.last_stats().seconds);
            cpus.push_back(c1 - c0);
            row.retx += comm.last_stats().retransmissions;
            row.rx_dropped += comm.last_stats().rx_dropped;
        }
    }
    row.median = median_of(times);
    row.min = *std::min_element(times.begin(), times.end());
    // Sum the ranks' CPU medians (in microseconds) through the switch itself.
    int32_t cpu_us = int32_t(std::min(median_of(cpus) * 1e6, 2e9));
    comm.allreduce(&cpu_us, &cpu_us, 1, DType::Int32, ReduceOp::Sum);
    row.cpu = cpu_us * 1e-6;
    return row;
}

template <typename T>
std::vector<Row> run(Communicator &comm, const Options &o, const std::vector<uint64_t> &sizes) {
    DType dtype = parse_dtype(o.boot.dtype);
    ReduceOp op = parse_op(o.boot.op);
    uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<T> send(largest / 4), recv(largest / 4);
    fill(std::span<T>(send), o.boot.seed, comm.config().rank);
    recv = send; // broadcast works in place on recv
    std::vector<Row> rows;
    bool human = comm.config().rank == 0 && !o.boot.json;
    if (human) {
        fmt::print("{:>10}  {:>14}  {:>12}  {:>6}  {:>12}\n", "size", "time (median)", "algbw",
                   "retx", "cpu (ranks)");
        std::fflush(stdout); // bench/star_perf.sh starts its profile here
    }
    for (uint64_t bytes : sizes) {
        rows.push_back(measure(comm, o, bytes, send, recv, dtype, op));
        const Row &r = rows.back();
        if (human) {
            fmt::print("{:>10}  {:>11.3f} ms  {:>7.1f} MB/s  {:>6}  {:>9.3f} ms\n",
                       format_size(bytes), r.median * 1e3, algbw_mbps(bytes, r.median), r.retx,
                       r.cpu * 1e3);
            std::fflush(stdout);
        }
    }
    return rows;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"incxdp-bench: collective size sweep (run on every rank; rank 0 reports)"};
    Options o;
    add_bootstrap_options(app, o.boot);
    add_collective_options(app, o.coll);
    app.add_option("--sizes", o.sizes,
                   "Comma-separated sizes (e.g. 4K,1M,64M); overrides the sweep");
    app.add_option("--min-size", o.min_size, "Smallest size of the sweep")->capture_default_str();
    app.add_option("--max-size", o.max_size, "Largest size of the sweep (powers of 4 from min)")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
    app.add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
    try {
        app.parse(argc, argv);
        if (o.iters == 0)
            throw CLI::ValidationError("--iters", "must be at least 1");
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    try {
        auto sizes = sweep(o);
        if (sizes.empty())
            throw std::invalid_argument("no sizes to run (check --min-size/--max-size)");
        CommConfig cfg = make_config(o.boot);
        cfg.stop = stop_on_signals();
        Communicator comm(cfg);
        if (cfg.rank == 0 && !o.boot.json)
            fmt::print(
                "incxdp-bench: {}{}, job {}, {} ranks, {} {}, {} wire, window {}, {} elems/packet, "
                "{} warm-up + {} iterations, {} transport\n",
                o.coll.prim,
                o.coll.prim == "reduce" || o.coll.prim == "broadcast"
                    ? fmt::format(" (root {})", o.coll.root)
                    : "",
                cfg.job, cfg.world_size, o.boot.dtype, o.boot.op,
                cfg.roce_tree() ? "roce" : o.boot.wire, cfg.window,
                cfg.effective_elems_per_packet(), o.warmup, o.iters,
                comm.config().transport_name());
        auto rows =
            o.boot.dtype == "float32" ? run<float>(comm, o, sizes) : run<int32_t>(comm, o, sizes);
        comm.close();
        if (cfg.rank == 0 && o.boot.json) {
            json j = {{"job", cfg.job},
                      {"world_size", cfg.world_size},
                      {"dtype", o.boot.dtype},
                      {"op", o.boot.op},
                      {"wire", cfg.roce_tree() ? "roce" : o.boot.wire},
                      {"window", cfg.window},
                      {"elems_per_packet", cfg.effective_elems_per_packet()},
                      {"prim", o.coll.prim},
                      {"root", o.coll.root},
                      {"transport", comm.config().transport_name()},
                      {"carrier", to_string(comm.config().carrier)},
                      {"rows", json::array()}};
            for (const Row &r : rows)
                j["rows"].push_back({{"size", r.bytes},
                                     {"median_s", r.median},
                                     {"min_s", r.min},
                                     {"algbw_MBps", algbw_mbps(r.bytes, r.median)},
                                     {"retransmissions", r.retx},
                                     {"rx_dropped", r.rx_dropped},
                                     {"cpu_s_all_ranks", r.cpu}});
            std::cout << j.dump() << std::endl;
        }
    } catch (const std::exception &e) {
        if (o.boot.json)
            std::cout << json{{"rank", o.boot.rank}, {"error", e.what()}}.dump() << std::endl;
        else
            fmt::print(stderr, "incxdp-bench: rank {}: {}\n", o.boot.rank, e.what());
        return stop_signal() ? 128 + stop_signal() : 1;
    }
    return 0;
}
