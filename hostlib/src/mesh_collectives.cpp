// SPDX-License-Identifier: BSD-2-Clause
// Ring collectives over mesh p2p connections to the two ring neighbours.
// Every collective runs as two lanes: lane 0 sends to the right neighbour,
// lane 1 to the left, each on its half of the data, so both directions of
// every ring link carry traffic (docs/MESH.md §Point-to-point).
#include <incxdp/mesh.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace incxdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;

size_t mod(long long a, size_t p) {
    auto n = static_cast<long long>(p);
    return static_cast<size_t>(((a % n) + n) % n);
}

template <typename T> void reduce_into(T *dst, const T *src, size_t n, ReduceOp op) {
    for (size_t i = 0; i < n; i++) {
        switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: // refused before the ring starts; a sum if it were not
            if constexpr (std::is_same_v<T, int32_t>)
                dst[i] = static_cast<int32_t>(static_cast<uint32_t>(dst[i]) +
                                              static_cast<uint32_t>(src[i])); // wraps
            else
                dst[i] += src[i];
            break;
        case ReduceOp::Max:
            dst[i] = std::max(dst[i], src[i]);
            break;
        case ReduceOp::Min:
            dst[i] = std::min(dst[i], src[i]);
            break;
        }
    }
}

void reduce_bytes(std::span<uint8_t> dst, std::span<const uint8_t> src, DType dt, ReduceOp op) {
    size_t n = dst.size() / 4;
    if (dt == DType::Int32) {
        std::vector<int32_t> a(n), b(n);
        memcpy(a.data(), dst.data(), n * 4);
        memcpy(b.data(), src.data(), n * 4);
        reduce_into(a.data(), b.data(), n, op);
        memcpy(dst.data(), a.data(), n * 4);
    } else {
        std::vector<float> a(n), b(n);
        memcpy(a.data(), dst.data(), n * 4);
        memcpy(b.data(), src.data(), n * 4);
        reduce_into(a.data(), b.data(), n, op);
        memcpy(dst.data(), a.data(), n * 4);
    }
}

// [begin, end) of part i when `n` units are split into `parts`.
std::pair<size_t, size_t> split(size_t n, size_t parts, size_t i) {
    size_t base = n / parts, rem = n % parts;
    size_t b = i * base + std::min(i, rem);
    return {b, b + base + (i < rem ? 1 : 0)};
}

struct Lane {
    Comm *to = nullptr, *from = nullptr;
    size_t q = 0; ///< this rank's position in the lane's direction
    std::function<std::span<uint8_t>(size_t)> block; ///< chunk x of the lane's data
    std::vector<uint8_t> tmp;
};

Request *post_send(Endpoint &ep, Comm *c, std::span<const uint8_t> b) {
    Request *r;
    while (!(r = ep.isend(c, b.data(), b.size(), 0)))
        ep.wait(1);
    return r;
}

Request *post_recv(Endpoint &ep, Comm *c, std::span<uint8_t> b) {
    void *d = b.data();
    size_t sz = b.size();
    int tag = 0;
    Request *r;
    while (!(r = ep.irecv(c, 1, &d, &sz, &tag)))
        ep.wait(1);
    return r;
}

void wait_all(Endpoint &ep, std::vector<Request *> &reqs) {
    while (true) {
        bool all = true;
        for (auto &r : reqs)
            if (r && ep.test(r))
                r = nullptr;
            else if (r)
                all = false;
        if (all)
            break;
        ep.wait(1);
    }
    reqs.clear();
}

// p-1 steps of the ring in every lane at once: reduce-scatter (each rank
// ends holding the reduction of chunk q) or allgather (every chunk
// everywhere, starting from chunk q).
void run_lanes(Endpoint &ep, std::vector<Lane> &lanes, size_t p, bool reduce, DType dt,
               ReduceOp op) {
    std::vector<Request *> reqs;
    for (size_t s = 0; s + 1 < p; s++) {
        for (auto &l : lanes) {
            long long q = static_cast<long long>(l.q), ss = static_cast<long long>(s);
            auto out = l.block(mod(q - ss - (reduce ? 1 : 0), p));
            auto in = l.block(mod(q - ss - (reduce ? 2 : 1), p));
            reqs.push_back(post_send(ep, l.to, out));
            if (reduce) {
                l.tmp.resize(in.size());
                reqs.push_back(post_recv(ep, l.from, l.tmp));
            } else {
                reqs.push_back(post_recv(ep, l.from, in));
            }
        }
        wait_all(ep, reqs);
        if (reduce)
            for (auto &l : lanes)
                reduce_bytes(
                    l.block(mod(static_cast<long long>(l.q) - static_cast<long long>(s) - 2, p)),
                    l.tmp, dt, op);
    }
}

} // namespace

std::vector<size_t> ring_order(const std::vector<std::vector<size_t>> &adj, bool *neighbours_only) {
    size_t n = adj.size();
    std::vector<size_t> path = {0};
    std::vector<bool> used(n, false);
    if (n)
        used[0] = true;
    auto linked = [&](size_t a, size_t b) {
        return std::find(adj[a].begin(), adj[a].end(), b) != adj[a].end();
    };
    // Backtracking over at most a few dozen nodes; bounded so a large
    // graph without a cycle falls back quickly.
    size_t budget = 200000;
    std::function<bool()> dfs = [&]() -> bool {
        if (budget-- == 0)
            return false;
        if (path.size() == n)
            return n < 3 ? n == 2 && linked(path[0], path[1]) : linked(path.back(), path[0]);
        for (size_t v : adj[path.back()]) {
            if (v >= n || used[v])
                continue;
            used[v] = true;
            path.push_back(v);
            if (dfs())
                return true;
            path.pop_back();
            used[v] = false;
        }
        return false;
    };
    bool found = n == 1 || (n > 1 && dfs());
    if (neighbours_only)
        *neighbours_only = found;
    if (found)
        return path;
    std::vector<size_t> seq(n);
    for (size_t i = 0; i < n; i++)
        seq[i] = i;
    return seq;
}

Ring::Ring(Endpoint &ep, const std::vector<Handle> &members, const std::vector<size_t> &order,
           size_t rank, uint32_t listen_id, double timeout_s)
    : ep_(ep), order_(order) {
    size_t p = order.size();
    auto it = std::find(order.begin(), order.end(), rank);
    if (it == order.end() || members.size() != p)
        throw Error(ErrorKind::InvalidUsage,
                    fmt::format("mesh ring: rank {} not in a ring of {} members", rank, p));
    pos_ = static_cast<size_t>(it - order.begin());
    if (p == 1)
        return;
    size_t rpos = (pos_ + 1) % p, lpos = (pos_ + p - 1) % p;
    listen_ = ep.listen(listen_id);
    // Each ring link is one connection: the lower position listens.
    struct Want {
        size_t q;
        Comm *c = nullptr;
        Handle h;
    };
    std::vector<Want> want;
    for (size_t q : {rpos, lpos})
        if (want.empty() || want[0].q != q)
            want.push_back({q, nullptr, members[order[q]]});
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    while (true) {
        bool all = true;
        for (auto &w : want) {
            if (w.c)
                continue;
            all = false;
            if (w.q < pos_)
                w.c = ep.connect(w.h);
        }
        if (all)
            break;
        if (Comm *c = ep.accept(listen_))
            for (auto &w : want)
                if (!w.c && w.q > pos_ && ep.peer_node(c) == Endpoint::handle_node(w.h)) {
                    w.c = c;
                    break;
                }
        if (Clock::now() > deadline) {
            std::string missing;
            for (auto &w : want)
                if (!w.c)
                    missing += fmt::format(" rank {} (node {:#010x})", order[w.q],
                                           Endpoint::handle_node(w.h));
            throw Error(ErrorKind::System,
                        fmt::format("mesh ring: rank {} not connected within {:.0f} s to{}", rank,
                                    timeout_s, missing));
        }
        ep.wait(1);
    }
    for (auto &w : want) {
        if (w.q == rpos)
            right_ = w.c;
        if (w.q == lpos)
            left_ = w.c;
    }
}

Ring::~Ring() {
    if (right_)
        ep_.close(right_);
    if (left_ && left_ != right_)
        ep_.close(left_);
    if (listen_)
        ep_.close(listen_);
}

uint64_t Ring::retransmissions() const {
    uint64_t r = 0;
    if (right_)
        r += ep_.stats(right_).retransmissions;
    if (left_ && left_ != right_)
        r += ep_.stats(left_).retransmissions;
    return r;
}

namespace {
// The two lanes' positions: lane 1 runs the ring backwards.
// ReduceOp::Avg (a Communicator's sum-then-divide) has no ring reduction here.
void refuse_avg(ReduceOp op, const char *what) {
    if (op == ReduceOp::Avg)
        throw std::invalid_argument(
            fmt::format("mesh ring {}: op avg is not supported; use sum and divide", what));
}
size_t lane_q(size_t lane, size_t pos, size_t p) {
    return lane == 0 ? pos : (p - pos) % p;
}
// Ring position of a lane's chunk x (its owner at the end of a reduce-scatter).
size_t lane_pos(size_t lane, size_t x, size_t p) {
    return lane == 0 ? x : (p - x) % p;
}
} // namespace

void Ring::allreduce(void *buf, size_t count, DType dtype, ReduceOp op) {
    refuse_avg(op, "allreduce");
    size_t p = size();
    if (p == 1 || count == 0)
        return;
    auto *b = static_cast<uint8_t *>(buf);
    std::vector<Lane> lanes(2);
    for (size_t l = 0; l < 2; l++) {
        auto [hb, he] = split(count, 2, l);
        lanes[l].to = l == 0 ? right_ : left_;
        lanes[l].from = l == 0 ? left_ : right_;
        lanes[l].q = lane_q(l, pos_, p);
        lanes[l].block = [=](size_t x) {
            auto [cb, ce] = split(he - hb, p, x);
            return std::span<uint8_t>(b + (hb + cb) * 4, (ce - cb) * 4);
        };
    }
    run_lanes(ep_, lanes, p, true, dtype, op);
    run_lanes(ep_, lanes, p, false, dtype, op);
}

void Ring::reduce_scatter(const void *in, void *out, size_t count, DType dtype, ReduceOp op) {
    refuse_avg(op, "reduce_scatter");
    size_t p = size();
    std::vector<uint8_t> work(static_cast<const uint8_t *>(in),
                              static_cast<const uint8_t *>(in) + p * count * 4);
    size_t my_rank = order_[pos_];
    if (p > 1) {
        std::vector<Lane> lanes(2);
        for (size_t l = 0; l < 2; l++) {
            auto [hb, he] = split(count, 2, l);
            lanes[l].to = l == 0 ? right_ : left_;
            lanes[l].from = l == 0 ? left_ : right_;
            lanes[l].q = lane_q(l, pos_, p);
            uint8_t *w = work.data();
            auto ord = order_;
            lanes[l].block = [=](size_t x) {
                size_t rank = ord[lane_pos(l, x, p)];
                return std::span<uint8_t>(w + (rank * count + hb) * 4, (he - hb) * 4);
            };
        }
        run_lanes(ep_, lanes, p, true, dtype, op);
    }
    memcpy(out, work.data() + my_rank * count * 4, count * 4);
}

void Ring::allgather(const void *in, void *out, size_t bytes) {
    size_t p = size();
    auto *o = static_cast<uint8_t *>(out);
    size_t my_rank = order_[pos_];
    memcpy(o + my_rank * bytes, in, bytes);
    if (p == 1)
        return;
    std::vector<Lane> lanes(2);
    for (size_t l = 0; l < 2; l++) {
        auto [hb, he] = split(bytes, 2, l);
        lanes[l].to = l == 0 ? right_ : left_;
        lanes[l].from = l == 0 ? left_ : right_;
        lanes[l].q = lane_q(l, pos_, p);
        auto ord = order_;
        lanes[l].block = [=](size_t x) {
            size_t rank = ord[lane_pos(l, x, p)];
            return std::span<uint8_t>(o + rank * bytes + hb, he - hb);
        };
    }
    run_lanes(ep_, lanes, p, false, DType::Int32, ReduceOp::Sum);
}

void Ring::broadcast(void *buf, size_t bytes, size_t root) {
    size_t p = size();
    if (p == 1 || bytes == 0)
        return;
    auto rit = std::find(order_.begin(), order_.end(), root);
    if (rit == order_.end())
        throw Error(ErrorKind::InvalidUsage, fmt::format("mesh ring broadcast: no rank {}", root));
    size_t root_pos = static_cast<size_t>(rit - order_.begin());
    auto *b = static_cast<uint8_t *>(buf);
    // Pipelined along each lane's chain, root first: a chunk moves on as
    // soon as it arrives.
    constexpr size_t kChunk = 256 << 10;
    struct Chain {
        Comm *to, *from;
        size_t dist; // hops from the root along the lane
        size_t hb, he;
    };
    std::vector<Chain> chains;
    for (size_t l = 0; l < 2; l++) {
        auto [hb, he] = split(bytes, 2, l);
        size_t dist = l == 0 ? (pos_ + p - root_pos) % p : (root_pos + p - pos_) % p;
        chains.push_back({l == 0 ? right_ : left_, l == 0 ? left_ : right_, dist, hb, he});
    }
    size_t nchunks = 0;
    for (auto &c : chains)
        nchunks = std::max(nchunks, (c.he - c.hb + kChunk - 1) / kChunk);
    std::vector<Request *> sends;
    for (size_t i = 0; i < nchunks; i++) {
        // Each lane forwards its chunk as soon as it has it: a rank early in
        // one lane is late in the other, so waiting for both would deadlock.
        std::vector<Request *> recvs(chains.size(), nullptr);
        std::vector<std::span<uint8_t>> spans;
        for (size_t k = 0; k < chains.size(); k++) {
            auto &c = chains[k];
            size_t cb = c.hb + i * kChunk;
            size_t ce = std::min(c.he, cb + kChunk);
            spans.emplace_back(b + std::min(cb, c.he), cb < ce ? ce - cb : 0);
            if (!spans[k].empty() && c.dist != 0)
                recvs[k] = post_recv(ep_, c.from, spans[k]);
        }
        std::vector<bool> have(chains.size(), false);
        for (size_t left = chains.size(); left > 0;) {
            for (size_t k = 0; k < chains.size(); k++) {
                if (have[k] || (recvs[k] && !ep_.test(recvs[k])))
                    continue;
                have[k] = true;
                left--;
                if (!spans[k].empty() && chains[k].dist + 1 < p)
                    sends.push_back(post_send(ep_, chains[k].to, spans[k]));
            }
            if (left)
                ep_.wait(1);
        }
        if (sends.size() > 16)
            wait_all(ep_, sends);
    }
    wait_all(ep_, sends);
}

} // namespace incxdp::mesh
