// SPDX-License-Identifier: BSD-2-Clause
// incxdp-worker: one rank of a job, bootstrapped from a topology file. Runs
// N iterations of one collective (allreduce, reduce, broadcast, barrier,
// allgather, reduce-scatter) on
// deterministic data and optionally verifies every result against a local
// recomputation of all ranks' data.
#include "tool_common.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <variant>
#include <vector>

using namespace incxdp;
using namespace incxdp::tools;
using json = nlohmann::json;

namespace {

struct Options {
    BootstrapOptions boot;
    CollectiveOptions coll;
    std::string size = "1M";
    uint32_t iters = 1;
    bool verify = false;
};

json stats_json(const CommStats &s) {
    return {{"seconds", s.seconds},
            {"packets_sent", s.packets_sent},
            {"bytes_sent", s.bytes_sent},
            {"packets_received", s.packets_received},
            {"retransmissions", s.retransmissions},
            {"fast_retransmits", s.fast_retransmits},
            {"reorder", s.reorder},
            {"timeouts", s.timeouts},
            {"window_cuts", s.window_cuts},
            {"duplicates", s.duplicates},
            {"stale", s.stale},
            {"malformed", s.malformed},
            {"acks", s.acks},
            {"naks", s.naks},
            {"bad_icrc", s.bad_icrc},
            {"rx_dropped", s.rx_dropped}};
}

// What a non-root rank's reduce buffer holds before and, untouched, after.
constexpr int32_t kUntouched = 0x5a5a5a5a;

// Checks one iteration's result (verify_* of tool_common).
template <typename T>
VerifyResult check(const Options &o, const CommConfig &cfg, Prim prim, ReduceOp op,
                   std::span<const T> recv) {
    std::span<const int32_t> bits(reinterpret_cast<const int32_t *>(recv.data()), recv.size());
    bool reduced = prim == Prim::AllReduce || (prim == Prim::Reduce && cfg.rank == o.coll.root);
    if (prim == Prim::Barrier)
        return {};
    if (prim == Prim::Broadcast)
        return verify_broadcast(bits, o.boot.seed, o.coll.root, parse_dtype(o.boot.dtype));
    if (prim == Prim::AllGather)
        return verify_allgather(bits, o.boot.seed, cfg.world_size, parse_dtype(o.boot.dtype));
    // reduce-scatter: this rank's block of the reduction
    const uint64_t first = prim == Prim::ReduceScatter ? uint64_t(cfg.rank) * recv.size() : 0;
    reduced = reduced || prim == Prim::ReduceScatter;
    if (!reduced)
        return verify_untouched(bits, kUntouched);
    if constexpr (std::is_same_v<T, int32_t>)
        return verify_int32(recv, o.boot.seed, cfg.world_size, op, first);
    else
        return verify_float32(recv, o.boot.seed, cfg.world_size, op,
                              cfg.effective_elems_per_packet(), first,
                              uint64_t(cfg.world_size) * recv.size());
}

// Runs the iterations; returns false if a verification failed.
template <typename T> bool run(Communicator &comm, const Options &o, uint64_t bytes, json &out) {
    const auto &cfg = comm.config();
    DType dtype = parse_dtype(o.boot.dtype);
    ReduceOp op = parse_op(o.boot.op);
    Prim prim = parse_prim(o.coll.prim);
    size_t count = prim == Prim::Barrier ? 0 : bytes / 4;
    // allgather and reduce-scatter: --size is the whole buffer (allgather's
    // recv, reduce-scatter's send), of world_size blocks of `count`.
    size_t send_n = count, recv_n = count;
    if (prim == Prim::AllGather || prim == Prim::ReduceScatter) {
        if (count % cfg.world_size != 0)
            throw std::invalid_argument(fmt::format("{}: --size {} is not {} equal blocks of whole "
                                                    "elements",
                                                    to_string(prim), bytes, cfg.world_size));
        count /= cfg.world_size;
        (prim == Prim::AllGather ? send_n : recv_n) = count;
    }
    std::vector<T> send(send_n), recv(recv_n);
    fill(std::span<T>(send), o.boot.seed, cfg.rank);
    std::string what = prim == Prim::Reduce || prim == Prim::Broadcast
                           ? fmt::format("{} (root {})", to_string(prim), o.coll.root)
                           : std::string(to_string(prim));

    bool all_ok = true;
    for (uint32_t it = 0; it < o.iters; ++it) {
        if (prim == Prim::Broadcast) // in place: every rank starts from its own data
            recv = send;
        else if (prim == Prim::Reduce && cfg.rank != o.coll.root)
            std::fill_n(reinterpret_cast<int32_t *>(recv.data()), count, kUntouched);
        comm.barrier(); // do not time the ranks' skew
        run_collective(comm, prim, o.coll.root, send.data(), recv.data(), count, dtype, op);
        CommStats st = comm.last_stats();
        uint64_t moved = prim == Prim::Barrier ? 0 : bytes;
        json j = stats_json(st);
        j["iter"] = it;
        j["algbw_MBps"] = algbw_mbps(moved, st.seconds);
        std::string verdict;
        if (o.verify) {
            VerifyResult v = check<T>(o, cfg, prim, op, recv);
            all_ok = all_ok && v.ok;
            j["verify"] = v.ok ? "ok" : "failed";
            if (!v.ok)
                j["verify_error"] = v.describe();
            if constexpr (std::is_same_v<T, float>) {
                j["max_abs_err"] = v.max_err;
                j["max_err_over_bound"] = v.max_err_over_bound;
            }
            verdict = ", verify " + v.describe();
        }
        out["iterations"].push_back(j);
        if (!o.boot.json) {
            if (prim == Prim::Barrier)
                fmt::print("rank {}: barrier: {:.6f} s, retx {}, rx drops {}, bad icrc {}{}\n",
                           cfg.rank, st.seconds, st.retransmissions, st.rx_dropped, st.bad_icrc,
                           verdict);
            else
                fmt::print("rank {}: {} {} {}{}: {:.3f} s, {:.1f} MB/s algbw, retx {}, rx drops "
                           "{}, bad icrc {}{}\n",
                           cfg.rank, what, format_size(bytes), o.boot.dtype,
                           prim == Prim::Broadcast || prim == Prim::AllGather ? ""
                                                                              : " " + o.boot.op,
                           st.seconds, algbw_mbps(bytes, st.seconds), st.retransmissions,
                           st.rx_dropped, st.bad_icrc, verdict);
            // What recovered the frames resent or dropped: enough to tell a
            // lossy link (NAKs) from a starved rank (timeouts, duplicates).
            if (st.retransmissions > 0 || st.rx_dropped > 0)
                fmt::print("rank {}: recovery: timeouts {}, naks {}, window cuts {}, fast "
                           "retransmits {}, duplicates {}, stale {}, acks {}\n",
                           cfg.rank, st.timeouts, st.naks, st.window_cuts, st.fast_retransmits,
                           st.duplicates, st.stale, st.acks);
        }
        std::fflush(stdout);
    }
    return all_ok;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"incxdp-worker: one rank of an in-network collective job"};
    Options o;
    add_bootstrap_options(app, o.boot);
    add_collective_options(app, o.coll);
    app.add_option("--size", o.size, "Buffer size in bytes (K/M/G suffixes: 64M)")
        ->capture_default_str();
    app.add_option("--iters", o.iters, "Iterations")->capture_default_str();
    app.add_flag("--verify", o.verify, "Check every result against a local recomputation");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }

    json out = {{"rank", o.boot.rank}, {"job", o.boot.job},          {"dtype", o.boot.dtype},
                {"op", o.boot.op},     {"wire", o.boot.wire},        {"prim", o.coll.prim},
                {"root", o.coll.root}, {"iterations", json::array()}};
    int rc = 0;
    try {
        uint64_t bytes = parse_size(o.size);
        CommConfig cfg = make_config(o.boot);
        out["size"] = bytes;
        out["world_size"] = cfg.world_size;
        out["window"] = cfg.window;
        out["elems_per_packet"] = cfg.effective_elems_per_packet();
        if (cfg.roce_tree())
            out["wire"] = "roce";
        if (cfg.carrier == Carrier::Verbs)
            cfg.verbs.publish_qpn = [&out, publish = cfg.verbs.publish_qpn](uint32_t qpn) {
                out["qpn"] = qpn; // the device's choice, for the log
                if (publish)
                    publish(qpn);
            };
        cfg.stop = stop_on_signals();
        Communicator comm(cfg);
        // What was opened (auto resolved): "native/af_xdp", "roce/verbs".
        out["transport"] = comm.config().transport_name();
        out["carrier"] = to_string(comm.config().carrier);
        bool ok = o.boot.dtype == "float32" ? run<float>(comm, o, bytes, out)
                                            : run<int32_t>(comm, o, bytes, out);
        comm.close();
        out["total"] = stats_json(comm.total_stats());
        out["ok"] = ok;
        rc = ok ? 0 : 1;
    } catch (const std::exception &e) {
        out["ok"] = false;
        out["error"] = e.what();
        if (!o.boot.json)
            fmt::print(stderr, "incxdp-worker: rank {}: {}\n", o.boot.rank, e.what());
        rc = stop_signal() ? 128 + stop_signal() : 1;
    }
    if (o.boot.json)
        std::cout << out.dump() << std::endl;
    return rc;
}
