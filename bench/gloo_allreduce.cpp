// SPDX-License-Identifier: BSD-2-Clause
// gloo-allreduce: the Gloo baseline of docs/BENCH.md. Every rank runs it
// in its own namespace with the same flags; the ranks meet through a
// FileStore directory (the namespaces share the file system) and then talk
// TCP from --addr, the worker's veth address. Rank 0 prints the table, or
// with -j one JSON object with the same fields as incxdp-bench -j.
#include <incxdp/util/size.h>

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <vector>

using incxdp::util::algbw_mbps;
using incxdp::util::format_size;
using incxdp::util::parse_size_list;
using json = nlohmann::json;

namespace {

struct Options {
    uint32_t rank = 0;
    uint32_t world = 4;
    std::string addr;
    std::string store;
    std::string algo = "ring";
    std::string dtype = "int32";
    std::string sizes = "4K,64K,1M,16M,64M";
    uint32_t iters = 10;
    uint32_t warmup = 2;
    double timeout_s = 600;
    bool json = false;
};

struct Row {
    uint64_t bytes = 0;
    double median = 0, min = 0;
};

// One AllReduce of `count` elements of `data`, in place, ready to be run
// again. The legacy algorithm objects preallocate their buffers and pairs'
// slots per size, as their users (Caffe2) keep them across iterations.
using RunFn = std::function<void()>;

template <typename T>
RunFn make_run(const std::shared_ptr<gloo::Context> &ctx, const std::string &algo, T *data,
               size_t count) {
    std::vector<T *> ptrs{data};
    if (algo == "ring_legacy") {
        auto a = std::make_shared<gloo::AllreduceRing<T>>(ctx, ptrs, int(count));
        return [a] { a->run(); };
    }
    if (algo == "ring_chunked") {
        auto a = std::make_shared<gloo::AllreduceRingChunked<T>>(ctx, ptrs, int(count));
        return [a] { a->run(); };
    }
    if (algo == "halving_doubling") {
        auto a = std::make_shared<gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs, int(count));
        return [a] { a->run(); };
    }
    // "ring", "bcube": the gloo::allreduce() entry point PyTorch's CPU
    // ProcessGroupGloo calls, with its algorithm chosen explicitly.
    auto algorithm = algo == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                     : gloo::AllreduceOptions::Algorithm::RING;
    uint32_t tag = 0;
    return [ctx, algorithm, data, count, tag]() mutable {
        gloo::AllreduceOptions opts(ctx);
        opts.setAlgorithm(algorithm);
        opts.setOutput(data, count);
        opts.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<T>));
        opts.setTag(tag++);
        gloo::allreduce(opts);
    };
}

void barrier(const std::shared_ptr<gloo::Context> &ctx) {
    gloo::BarrierOptions opts(ctx);
    gloo::barrier(opts);
}

template <typename T>
std::vector<Row> sweep(const std::shared_ptr<gloo::Context> &ctx, const Options &o,
                       const std::vector<uint64_t> &sizes) {
    uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<T> data(largest / sizeof(T));
    bool human = ctx->rank == 0 && !o.json;
    if (human)
        fmt::print("{:>10}  {:>14}  {:>12}\n", "size", "time (median)", "algbw");
    std::vector<Row> rows;
    for (uint64_t bytes : sizes) {
        size_t count = bytes / sizeof(T);
        // Small values: an in-place float sum multiplies them by the world
        // size per call, and must stay finite over warm-up + iterations.
        std::fill(data.begin(), data.begin() + count, T(1));
        RunFn run = make_run<T>(ctx, o.algo, data.data(), count);
        std::vector<double> times;
        for (uint32_t it = 0; it < o.warmup + o.iters; ++it) {
            barrier(ctx);
            auto t0 = std::chrono::steady_clock::now();
            run();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (it >= o.warmup)
                times.push_back(s);
        }
        std::sort(times.begin(), times.end());
        size_t n = times.size();
        Row r{bytes, n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2, times.front()};
        rows.push_back(r);
        if (human) {
            fmt::print("{:>10}  {:>11.3f} ms  {:>7.1f} MB/s\n", format_size(bytes), r.median * 1e3,
                       algbw_mbps(bytes, r.median));
            std::fflush(stdout);
        }
    }
    return rows;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"gloo-allreduce: Gloo AllReduce size sweep over TCP (run on every rank; rank 0 "
                 "reports)"};
    Options o;
    app.add_option("--rank", o.rank, "This process's rank")->required();
    app.add_option("--world", o.world, "Number of ranks")->capture_default_str();
    app.add_option("--addr", o.addr, "Local address to bind the TCP transport to")->required();
    app.add_option("--store", o.store, "Rendezvous directory, the same for all ranks, empty")
        ->required()
        ->check(CLI::ExistingDirectory);
    app.add_option("--algo", o.algo, "AllReduce algorithm")
        ->check(CLI::IsMember({"ring", "bcube", "ring_legacy", "ring_chunked", "halving_doubling"}))
        ->capture_default_str();
    app.add_option("--dtype", o.dtype, "Element type (sum)")
        ->check(CLI::IsMember({"int32", "float32"}))
        ->capture_default_str();
    app.add_option("--sizes", o.sizes, "Comma-separated sizes, e.g. 4K,1M,64M")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
    app.add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
    app.add_option("--timeout", o.timeout_s, "Seconds any one operation may take")
        ->capture_default_str();
    app.add_flag("-j,--json", o.json, "JSON output");
    try {
        app.parse(argc, argv);
        if (o.iters == 0)
            throw CLI::ValidationError("--iters", "must be at least 1");
        if (o.rank >= o.world)
            throw CLI::ValidationError("--rank", "must be below --world");
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    try {
        auto sizes = parse_size_list(o.sizes, 4); // whole int32/float32 elements
        for (uint64_t s : sizes)
            if (s == 0 || s / 4 > uint64_t(std::numeric_limits<int>::max()))
                throw std::invalid_argument(
                    fmt::format("size {}: the legacy Gloo algorithms count elements in an int", s));

        gloo::transport::tcp::attr attr(o.addr.c_str());
        attr.ai_family = AF_INET;
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore fstore(o.store);
        gloo::rendezvous::PrefixStore store("gloo-allreduce", fstore);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(int(o.rank), int(o.world));
        ctx->setTimeout(std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
        ctx->connectFullMesh(store, dev);
        if (o.rank == 0 && !o.json)
            fmt::print("gloo-allreduce: {} ranks, {} sum, {}, tcp from {}, {} warm-up + {} "
                       "iterations\n",
                       o.world, o.dtype, o.algo, o.addr, o.warmup, o.iters);

        auto rows =
            o.dtype == "float32" ? sweep<float>(ctx, o, sizes) : sweep<int32_t>(ctx, o, sizes);
        barrier(ctx); // nobody closes its pairs while another still reads
        if (o.rank == 0 && o.json) {
            json j = {{"system", "gloo"}, {"algo", o.algo},       {"world_size", o.world},
                      {"dtype", o.dtype}, {"op", "sum"},          {"warmup", o.warmup},
                      {"iters", o.iters}, {"rows", json::array()}};
            for (const Row &r : rows)
                j["rows"].push_back({{"size", r.bytes},
                                     {"median_s", r.median},
                                     {"min_s", r.min},
                                     {"algbw_MBps", algbw_mbps(r.bytes, r.median)}});
            std::cout << j.dump() << std::endl;
        }
    } catch (const std::exception &e) {
        if (o.json)
            std::cout << json{{"rank", o.rank}, {"error", e.what()}}.dump() << std::endl;
        else
            fmt::print(stderr, "gloo-allreduce: rank {}: {}\n", o.rank, e.what());
        return 1;
    }
    return 0;
}
