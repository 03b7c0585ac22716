// SPDX-License-Identifier: BSD-2-Clause
#include "cm_gen.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace incxdp::cm {

namespace {

struct Builder {
    Matrix m;
    uint32_t next_trigger = 1;

    uint32_t barrier(uint32_t count) {
        m.triggers.push_back({next_trigger, TriggerKind::Barrier, count, 0});
        return next_trigger++;
    }
    uint32_t oneshot() {
        m.triggers.push_back({next_trigger, TriggerKind::Oneshot, 0, 0});
        return next_trigger++;
    }
    Flow &flow(uint32_t src, uint32_t dst, uint64_t size) {
        Flow f;
        f.src = src;
        f.dst = dst;
        f.id = static_cast<uint32_t>(m.flows.size() + 1);
        f.size = size;
        m.flows.push_back(f);
        return m.flows.back();
    }
};

} // namespace

Matrix gen_allreduce_inc(const AllreduceIncParams &p) {
    if (p.k < 2 || p.k % 2 || p.k > 64)
        throw std::invalid_argument(fmt::format("--k {}: an even radix 2..64", p.k));
    if (p.chunks == 0 || p.iterations == 0 || p.size == 0)
        throw std::invalid_argument("--chunks, --iterations and --size must be positive");
    if (p.inc && p.fid == 0)
        throw std::invalid_argument("--fid must be non-zero");
    const uint32_t n = p.hosts ? p.hosts : p.k * p.k * p.k / 4;
    const uint32_t aggs = p.aggregators ? p.aggregators : std::min(n, p.k * p.k / 4);
    if (n < 2 || aggs > n)
        throw std::invalid_argument(
            fmt::format("{} hosts, {} aggregators: need 2+ hosts, aggregators <= hosts", n, aggs));
    const uint32_t w = p.window == 0 ? p.chunks : std::min(p.window, p.chunks);
    Builder b;
    b.m.nodes = n;
    // Barrier the first W chunks of iteration r wait on (none for r = 1).
    std::optional<uint32_t> iter_gate;
    for (uint32_t r = 1; r <= p.iterations; ++r) {
        const bool last_iter = r == p.iterations;
        const std::optional<uint32_t> next_gate =
            last_iter ? std::nullopt : std::optional(b.barrier(w * (n - 1)));
        std::vector<std::optional<uint32_t>> chunk_gate(p.chunks); // chunk c's start
        for (uint32_t c = 0; c < p.chunks; ++c) {
            const uint32_t agg = c % aggs;
            // What the DOWN flows of chunk c fire: chunk c+W's start, or the
            // next iteration's gate for the last W chunks.
            std::optional<uint32_t> down_fires;
            if (c + w < p.chunks)
                down_fires = chunk_gate[c + w] = b.barrier(n - 1);
            else
                down_fires = next_gate;
            const std::optional<uint32_t> start_gate = c < w ? iter_gate : chunk_gate[c];
            const uint32_t join = b.barrier(n - 1);
            auto sem = [&](AggDir d) {
                return p.inc ? std::optional(Semantics{p.op, d, p.fid, r, c}) : std::nullopt;
            };
            for (uint32_t h = 0; h < n; ++h) {
                if (h == agg)
                    continue;
                Flow &f = b.flow(h, agg, p.size);
                if (start_gate)
                    f.trigger = start_gate;
                else
                    f.start_ps = 0;
                f.semantics = sem(AggDir::Up);
                f.send_done = join;
            }
            for (uint32_t h = 0; h < n; ++h) {
                if (h == agg)
                    continue;
                Flow &f = b.flow(agg, h, p.size);
                f.trigger = join;
                f.semantics = sem(AggDir::Down);
                f.send_done = down_fires;
            }
        }
        iter_gate = next_gate;
    }
    std::sort(b.m.triggers.begin(), b.m.triggers.end(),
              [](const Trigger &a, const Trigger &c) { return a.id < c.id; });
    return b.m;
}

Matrix gen_allreduce_ring(uint32_t nodes, uint64_t size) {
    if (nodes < 2)
        throw std::invalid_argument("--nodes: at least 2");
    if (size < nodes)
        throw std::invalid_argument(fmt::format("--size {}: at least one byte per node", size));
    const uint32_t steps = 2 * (nodes - 1);
    Builder b;
    b.m.nodes = nodes;
    for (uint32_t j = 0; j < nodes; ++j) {
        std::optional<uint32_t> gate;
        for (uint32_t s = 0; s < steps; ++s) {
            const uint32_t i = (j + s) % nodes;
            Flow &f = b.flow(i, (i + 1) % nodes, size / nodes);
            if (gate)
                f.trigger = gate;
            else
                f.start_ps = 0;
            if (s + 1 < steps)
                gate = f.send_done = b.oneshot();
        }
    }
    return b.m;
}

} // namespace incxdp::cm
