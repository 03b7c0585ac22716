// SPDX-License-Identifier: BSD-2-Clause
// `incxdp cm check FILE` and `incxdp cm gen allreduce-inc|allreduce-ring`:
// htsim connection matrices (docs/CM.md).
#include "cm_gen.h"
#include "cm_parse.h"
#include "commands.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace incxdp::cli {
namespace {

using nlohmann::json;

// "0-3,7": a set of ids as ranges.
std::string ranges(const std::set<uint32_t> &s) {
    std::string out;
    for (auto it = s.begin(); it != s.end();) {
        uint32_t lo = *it, hi = lo;
        while (++it != s.end() && *it == hi + 1)
            hi = *it;
        out += (out.empty() ? "" : ",") +
               (lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi));
    }
    return out;
}

struct IncJob {
    std::set<uint32_t> rids, cids;
    std::set<std::string> ops, dirs;
    size_t flows = 0;
    uint64_t up_bytes = 0, down_bytes = 0;
};

void check(const std::string &file, bool lenient, const CommonFlags &flags) {
    cm::Matrix m;
    try {
        m = cm::parse_file(file, {lenient});
    } catch (const cm::CmError &e) {
        throw Error(fmt::format("{}: {}", file, e.what()));
    }
    std::map<std::string, size_t> kinds;
    for (const cm::Trigger &t : m.triggers)
        kinds[cm::trigger_kind_name(t.kind)]++;
    std::map<uint32_t, IncJob> jobs;
    uint64_t total = 0, up = 0, down = 0;
    size_t timed = 0;
    for (const cm::Flow &f : m.flows) {
        total += f.size;
        timed += f.start_ps.has_value();
        if (!f.semantics)
            continue;
        const cm::Semantics &s = *f.semantics;
        IncJob &j = jobs[s.fid];
        j.rids.insert(s.rid);
        j.cids.insert(s.cid);
        j.ops.insert(cm::agg_op_name(s.op));
        j.dirs.insert(cm::agg_dir_name(s.dir));
        j.flows++;
        (s.dir == cm::AggDir::Up ? j.up_bytes : j.down_bytes) += f.size;
        (s.dir == cm::AggDir::Up ? up : down) += f.size;
    }
    if (flags.json) {
        json jj = json::array();
        for (const auto &[fid, j] : jobs)
            jj.push_back({{"fid", fid},
                          {"flows", j.flows},
                          {"rids", j.rids},
                          {"cids", j.cids},
                          {"ops", j.ops},
                          {"dirs", j.dirs},
                          {"up_bytes", j.up_bytes},
                          {"down_bytes", j.down_bytes}});
        json out = {{"file", file},
                    {"nodes", m.node_count()},
                    {"flows", m.flows.size()},
                    {"timed_flows", timed},
                    {"triggered_flows", m.flows.size() - timed},
                    {"triggers", m.triggers.size()},
                    {"triggers_by_kind", kinds},
                    {"failures", m.failures.size()},
                    {"inc_jobs", jj},
                    {"total_bytes", total},
                    {"up_bytes", up},
                    {"down_bytes", down},
                    {"warnings", m.warnings}};
        std::printf("%s\n", out.dump(2).c_str());
        return;
    }
    std::printf("%s: ok%s\n", file.c_str(), m.warnings.empty() ? "" : " (with warnings)");
    std::printf("  nodes      %u\n", m.node_count());
    std::printf("  flows      %zu (%zu timed, %zu triggered)\n", m.flows.size(), timed,
                m.flows.size() - timed);
    std::string k;
    for (const auto &[name, n] : kinds)
        k += fmt::format("{}{} {}", k.empty() ? "" : ", ", n, name);
    std::printf("  triggers   %zu%s\n", m.triggers.size(),
                k.empty() ? "" : (" (" + k + ")").c_str());
    std::printf("  failures   %zu\n", m.failures.size());
    std::printf("  bytes      %llu total, %llu UP, %llu DOWN\n",
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(up),
                static_cast<unsigned long long>(down));
    for (const auto &[fid, j] : jobs) {
        std::string ops, dirs;
        for (const auto &o : j.ops)
            ops += (ops.empty() ? "" : ",") + o;
        for (const auto &d : j.dirs)
            dirs += (dirs.empty() ? "" : ",") + d;
        std::printf("  INC fid %u: %zu flows, rid %s, cid %s, op %s, dir %s, %llu B UP, %llu B "
                    "DOWN\n",
                    fid, j.flows, ranges(j.rids).c_str(), ranges(j.cids).c_str(), ops.c_str(),
                    dirs.c_str(), static_cast<unsigned long long>(j.up_bytes),
                    static_cast<unsigned long long>(j.down_bytes));
    }
    for (const std::string &w : m.warnings)
        std::fprintf(stderr, "warning: %s\n", w.c_str());
}

void write_out(const cm::Matrix &m, const std::string &out) {
    const std::string text = cm::to_text(m);
    if (out.empty() || out == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return;
    }
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    if (!(f << text) || !f.flush())
        throw Error(fmt::format("cannot write '{}'", out));
}

struct GenOpts {
    cm::AllreduceIncParams inc;
    std::string op = "SUM";
    uint32_t nodes = 4;
    uint64_t size = 1 << 20;
    std::string out;
};

template <typename F> void gen_errors(F &&f) {
    try {
        f();
    } catch (const std::invalid_argument &e) {
        throw Error(e.what());
    }
}

} // namespace

void add_cm_command(CLI::App &app) {
    CLI::App *cm = app.add_subcommand("cm", "htsim connection matrices: check, generate");
    cm->require_subcommand(1);

    static std::string file;
    static bool lenient = false;
    static CommonFlags flags;
    CLI::App *chk = cm->add_subcommand("check", "parse a .cm file and summarise it");
    chk->add_option("FILE", file, "connection matrix")->required()->check(CLI::ExistingFile);
    chk->add_flag("--lenient", lenient,
                  "trigger flaws of the INC generator (a oneshot fired twice or with no waiting "
                  "flow, an overfired barrier) are warnings, not errors");
    add_common_flags(chk, flags);
    chk->callback([] { check(file, lenient, flags); });

    static GenOpts g;
    CLI::App *gen = cm->add_subcommand("gen", "write a connection matrix");
    gen->require_subcommand(1);
    CLI::App *inc = gen->add_subcommand(
        "allreduce-inc",
        "AllReduce through pod 0's hosts (the plan's dedicated pod), correct joins");
    inc->add_option("--k", g.inc.k, "fat-tree radix (k^3/4 hosts)")->required();
    inc->add_option("--size", g.inc.size, "bytes of every flow (one chunk; 1M = 2^20)")
        ->required()
        ->transform(CLI::AsSizeValue(false));
    inc->add_option("--chunks", g.inc.chunks, "chunks per iteration")->capture_default_str();
    inc->add_option("--iterations", g.inc.iterations, "iterations (rid 1..I)")
        ->capture_default_str();
    inc->add_option("--fid", g.inc.fid, "the job's fid")->capture_default_str();
    inc->add_option("--window", g.inc.window, "chunks in flight per iteration (0: all)")
        ->capture_default_str();
    inc->add_option("--hosts", g.inc.hosts, "hosts instead of k^3/4 (small runs; 0: k^3/4)");
    inc->add_option("--aggregators", g.inc.aggregators,
                    "aggregator hosts 0..A-1 instead of pod 0's k^2/4 (0: k^2/4)");
    inc->add_option("--op", g.op, "agg_op")
        ->check(CLI::IsMember({"SUM", "MAX", "MIN", "AVG"}))
        ->capture_default_str();
    inc->add_flag(
        "--no-inc", [](int64_t) { g.inc.inc = false; },
        "the same flows without semantics tokens (host aggregation; stock htsim)");
    inc->add_option("-o,--output", g.out, "output file (default stdout)");
    inc->callback([] {
        static const std::map<std::string, cm::AggOp> ops{{"SUM", cm::AggOp::Sum},
                                                          {"MAX", cm::AggOp::Max},
                                                          {"MIN", cm::AggOp::Min},
                                                          {"AVG", cm::AggOp::Avg}};
        g.inc.op = ops.at(g.op);
        gen_errors([] { write_out(cm::gen_allreduce_inc(g.inc), g.out); });
    });
    CLI::App *ring = gen->add_subcommand("allreduce-ring", "htsim's ring AllReduce");
    ring->add_option("--nodes", g.nodes, "ring size")->required();
    ring->add_option("--size", g.size, "bytes per node (each step sends size/nodes; 1M = 2^20)")
        ->required()
        ->transform(CLI::AsSizeValue(false));
    ring->add_option("-o,--output", g.out, "output file (default stdout)");
    ring->callback(
        [] { gen_errors([] { write_out(cm::gen_allreduce_ring(g.nodes, g.size), g.out); }); });
}

} // namespace incxdp::cli
