// SPDX-License-Identifier: BSD-2-Clause
// incxdp-p2p: one node of a mesh topology (run in its namespace). Either
// exchanges --size bytes with --peer in both directions at once over a mesh
// p2p connection (direct or relayed), or runs a ring collective (--coll)
// with every other host. Listen handles come from the topology file alone:
// a rank's node id and addresses are its interfaces' addresses there.
#include "tool_common.h"

#include <incxdp/mesh.h>
#include <incxdp/topology.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>

using namespace incxdp;
using json = nlohmann::json;

namespace {

// Listen ids both sides know without an exchange.
constexpr uint32_t kPairListenId = 0x70320001;
constexpr uint32_t kRingListenId = 0x70320002;

struct Args {
    std::string topo, pin_dir, coll, dtype = "int32", op = "sum", size = "1M";
    uint32_t rank = 0, iters = 1, root = 0;
    int64_t peer = -1;
    double timeout = 0, connect_timeout = 60;
    uint32_t window = 0;
    uint64_t seed = 1;
    bool verify = false, json_out = false;
};

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The bytes rank `from` sends to rank `to`: 8 at a time from a hash of
// (from, to, seed, offset / 8), so every byte depends on its offset.
void fill_pattern(std::vector<uint8_t> &buf, uint32_t from, uint32_t to, uint64_t seed) {
    uint64_t key = splitmix64(seed ^ (uint64_t(from) << 32 | to));
    for (size_t off = 0; off < buf.size(); off += 8) {
        uint64_t w = splitmix64(key + off / 8);
        memcpy(buf.data() + off, &w, std::min<size_t>(8, buf.size() - off));
    }
}

// "1" is a size here (1 byte); suffixed sizes as the other tools take them.
uint64_t parse_bytes(const std::string &s) {
    if (!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit))
        return std::stoull(s);
    return tools::parse_size(s);
}

std::vector<uint32_t> host_addrs(const topo::Node &n) {
    std::vector<uint32_t> out;
    for (const auto &i : n.ifaces)
        if (const auto ip = util::parse_ipv4(i.ip))
            out.push_back(*ip);
    return out;
}

struct Cluster {
    std::vector<const topo::Node *> hosts; // rank order = file order
    std::vector<std::vector<uint32_t>> addrs;
    std::vector<std::vector<size_t>> adj;
};

Cluster load(const topo::Topology &t) {
    Cluster c;
    for (const auto &n : t.nodes)
        if (n.kind == topo::NodeKind::Host) {
            c.hosts.push_back(&n);
            c.addrs.push_back(host_addrs(n));
            if (c.addrs.back().empty())
                throw std::invalid_argument(
                    fmt::format("host {} has no interface address in the topology (a mesh "
                                "topology, kind: mesh, gives one per link)",
                                n.name));
        }
    c.adj.resize(c.hosts.size());
    auto rank_of = [&](const std::string &name) -> int64_t {
        for (size_t i = 0; i < c.hosts.size(); i++)
            if (c.hosts[i]->name == name)
                return int64_t(i);
        return -1;
    };
    for (const auto &l : t.links) {
        int64_t a = rank_of(l.a), b = rank_of(l.b);
        if (a >= 0 && b >= 0) {
            c.adj[a].push_back(size_t(b));
            c.adj[b].push_back(size_t(a));
        }
    }
    return c;
}

// Drives the endpoint until every request is done.
void wait_all(mesh::Endpoint &ep, std::vector<mesh::Request *> reqs) {
    while (!reqs.empty()) {
        for (auto it = reqs.begin(); it != reqs.end();)
            it = ep.test(*it) ? reqs.erase(it) : it + 1;
        if (!reqs.empty())
            ep.wait(1);
    }
}

// Waits for receive r of iteration `it`. The peer sends while we do, so a
// receive that gets no byte for timeout_s means the peer or its path is
// gone: the endpoint fails only sends without progress, and a rank whose own
// send is done would wait for the peer's message forever.
size_t wait_recv(mesh::Endpoint &ep, mesh::Comm *comm, mesh::Request *r, double timeout_s,
                 const std::string &peer, uint32_t it, uint32_t iters, uint64_t bytes) {
    using Clock = std::chrono::steady_clock;
    const auto window =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    uint64_t seen = ep.stats(comm).bytes_received;
    auto since = Clock::now();
    size_t got = 0;
    while (!ep.test(r, &got)) {
        ep.wait(1);
        if (Clock::now() - since <= window)
            continue;
        const uint64_t now_bytes = ep.stats(comm).bytes_received;
        if (now_bytes == seen)
            throw mesh::Error(
                mesh::ErrorKind::System,
                fmt::format("no progress receiving from {} for {:.1f} s: its message of "
                            "iteration {} of {} ({} bytes) is incomplete (did its process end, "
                            "or its path go down?)",
                            peer, timeout_s, it + 1, iters, bytes));
        seen = now_bytes;
        since = Clock::now();
    }
    return got;
}

int run_pair(const Args &a, const Cluster &c, mesh::Endpoint &ep, double timeout_s) {
    uint32_t me = a.rank, peer = uint32_t(a.peer);
    uint64_t bytes = parse_bytes(a.size);
    mesh::Comm *comm = nullptr;
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(a.connect_timeout));
    mesh::Listen *listen = nullptr;
    mesh::Handle h = mesh::Endpoint::make_handle(c.addrs[std::min(me, peer)], kPairListenId);
    // A peer the relays cannot reach is an error now, not after the timeout.
    ep.check_reachable(mesh::Endpoint::handle_node(mesh::Endpoint::make_handle(c.addrs[peer], 0)));
    if (me < peer)
        listen = ep.listen(kPairListenId);
    while (!comm) {
        comm = me < peer ? ep.accept(listen) : ep.connect(h);
        if (comm && me < peer &&
            ep.peer_node(comm) !=
                mesh::Endpoint::handle_node(mesh::Endpoint::make_handle(c.addrs[peer], 0))) {
            ep.close(comm); // someone else's connection
            comm = nullptr;
        }
        if (!comm && std::chrono::steady_clock::now() > deadline)
            throw mesh::Error(mesh::ErrorKind::System,
                              fmt::format("rank {} ({}) never connected within {:.0f} s", peer,
                                          c.hosts[peer]->name, a.connect_timeout));
        if (!comm)
            ep.wait(1);
    }
    std::vector<uint8_t> out(bytes), in(bytes);
    fill_pattern(out, me, peer, a.seed);
    auto t0 = std::chrono::steady_clock::now();
    uint64_t bad = 0, first_bad = 0;
    for (uint32_t it = 0; it < a.iters; it++) {
        if (a.verify)
            std::fill(in.begin(), in.end(), 0);
        void *d = in.data();
        size_t cap = in.size();
        int tag = 0;
        mesh::Request *r = nullptr, *s = nullptr;
        while (!(r = ep.irecv(comm, 1, &d, &cap, &tag)))
            ep.wait(1);
        while (!(s = ep.isend(comm, out.data(), out.size(), 0)))
            ep.wait(1);
        const size_t got = wait_recv(ep, comm, r, timeout_s,
                                     fmt::format("node {:#010x} (rank {}, {})", ep.peer_node(comm),
                                                 peer, c.hosts[peer]->name),
                                     it, a.iters, bytes);
        wait_all(ep, {s});
        if (got != bytes)
            throw mesh::Error(
                mesh::ErrorKind::System,
                fmt::format("received {} bytes from rank {}, expected {}", got, peer, bytes));
        if (a.verify) {
            std::vector<uint8_t> want(bytes);
            fill_pattern(want, peer, me, a.seed);
            for (size_t i = 0; i < bytes; i++)
                if (in[i] != want[i] && bad++ == 0)
                    first_bad = i;
        }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto st = ep.stats(comm);
    double mbps = tools::algbw_mbps(bytes * a.iters, secs);
    if (a.json_out) {
        json j = {{"rank", me},
                  {"peer", peer},
                  {"bytes", bytes},
                  {"iters", a.iters},
                  {"seconds", secs},
                  {"mbps", mbps},
                  {"retransmissions", st.retransmissions},
                  {"timeouts", st.timeouts},
                  {"segments_sent", st.segments_sent},
                  {"path", st.path_desc},
                  {"verified", a.verify && bad == 0}};
        std::cout << j.dump() << std::endl;
    } else {
        fmt::print("rank {} <-> rank {}: {} x {} each way in {:.3f} s, {:.1f} MB/s, {} "
                   "retransmissions, path {}\n",
                   me, peer, a.iters, tools::format_size(bytes), secs, mbps, st.retransmissions,
                   st.path_desc);
    }
    ep.close(comm);
    if (listen)
        ep.close(listen);
    if (bad) {
        fmt::print(stderr, "incxdp-p2p: verify failed: {} bytes from rank {} differ, first at {}\n",
                   bad, peer, first_bad);
        return 1;
    }
    return 0;
}

int run_coll(const Args &a, const Cluster &c, mesh::Endpoint &ep) {
    size_t p = c.hosts.size();
    bool direct = false;
    auto order = mesh::ring_order(c.adj, &direct);
    std::vector<mesh::Handle> handles;
    for (auto &ad : c.addrs)
        handles.push_back(mesh::Endpoint::make_handle(ad, kRingListenId));
    mesh::Ring ring(ep, handles, order, a.rank, kRingListenId, a.connect_timeout);
    uint64_t bytes = tools::parse_size(a.size);
    DType dt = parse_dtype(a.dtype);
    ReduceOp op = parse_op(a.op);
    if (bytes % (4 * p) != 0)
        throw std::invalid_argument(
            fmt::format("--size {}: must be a multiple of 4 x {} ranks", bytes, p));
    size_t count = bytes / 4, per = count / p;
    std::vector<int32_t> buf(count), out;
    uint64_t mismatches = 0;
    auto data_of = [&](uint32_t rank, size_t i) -> int32_t {
        if (dt == DType::Int32)
            return tools::gen_int32(a.seed, rank, i);
        float f = tools::gen_float32(a.seed, rank, i);
        int32_t b;
        memcpy(&b, &f, 4);
        return b;
    };
    auto want_reduced = [&](size_t i) -> double {
        double acc = 0;
        for (uint32_t k = 0; k < p; k++) {
            double v;
            if (dt == DType::Int32)
                v = tools::gen_int32(a.seed, k, i);
            else
                v = tools::gen_float32(a.seed, k, i);
            acc = k == 0                ? v
                  : op == ReduceOp::Sum ? acc + v
                  : op == ReduceOp::Max ? std::max(acc, v)
                                        : std::min(acc, v);
        }
        return acc;
    };
    // int32 exactly (wrapping sum); float32 sums within rounding of the
    // exact sum (the ring adds in another order), max/min exactly.
    auto check_reduced = [&](std::span<const int32_t> got, size_t first_index) {
        if (dt == DType::Int32) {
            for (size_t i = 0; i < got.size(); i++) {
                uint32_t sum = 0;
                int32_t mx = INT32_MIN, mn = INT32_MAX;
                for (uint32_t k = 0; k < p; k++) {
                    int32_t v = tools::gen_int32(a.seed, k, first_index + i);
                    sum += uint32_t(v);
                    mx = std::max(mx, v);
                    mn = std::min(mn, v);
                }
                int32_t w = op == ReduceOp::Sum ? int32_t(sum) : op == ReduceOp::Max ? mx : mn;
                mismatches += got[i] != w;
            }
            return;
        }
        for (size_t i = 0; i < got.size(); i++) {
            float g;
            memcpy(&g, &got[i], 4);
            double w = want_reduced(first_index + i);
            double tol = op == ReduceOp::Sum ? 1e-6 * 256.0 * p + 1e-6 * std::fabs(w) : 0;
            mismatches += !(std::fabs(g - w) <= tol);
        }
    };
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t it = 0; it < a.iters; it++) {
        if (a.coll == "allreduce") {
            for (size_t i = 0; i < count; i++)
                buf[i] = data_of(a.rank, i);
            ring.allreduce(buf.data(), count, dt, op);
            if (a.verify)
                check_reduced(buf, 0);
        } else if (a.coll == "allgather") {
            std::vector<int32_t> mine(per);
            for (size_t i = 0; i < per; i++)
                mine[i] = data_of(a.rank, i);
            ring.allgather(mine.data(), buf.data(), per * 4);
            if (a.verify)
                for (uint32_t k = 0; k < p; k++)
                    for (size_t i = 0; i < per; i++)
                        mismatches += buf[k * per + i] != data_of(k, i);
        } else if (a.coll == "reducescatter") {
            for (size_t i = 0; i < count; i++)
                buf[i] = data_of(a.rank, i);
            out.resize(per);
            ring.reduce_scatter(buf.data(), out.data(), per, dt, op);
            if (a.verify)
                check_reduced(out, a.rank * per);
        } else if (a.coll == "broadcast") {
            for (size_t i = 0; i < count; i++)
                buf[i] = a.rank == a.root ? data_of(a.root, i) : 0;
            ring.broadcast(buf.data(), bytes, a.root);
            if (a.verify)
                for (size_t i = 0; i < count; i++)
                    mismatches += buf[i] != data_of(a.root, i);
        } else {
            throw std::invalid_argument(
                "--coll " + a.coll + ": expected allreduce, allgather, reducescatter or broadcast");
        }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double mbps = tools::algbw_mbps(bytes * a.iters, secs);
    std::string ring_s;
    for (size_t r : order)
        ring_s += (ring_s.empty() ? "" : "-") + c.hosts[r]->name;
    if (a.json_out) {
        json j = {{"rank", a.rank},
                  {"coll", a.coll},
                  {"bytes", bytes},
                  {"iters", a.iters},
                  {"seconds", secs},
                  {"mbps", mbps},
                  {"ring", ring_s},
                  {"neighbours_only", direct},
                  {"retransmissions", ring.retransmissions()},
                  {"verified", a.verify && mismatches == 0},
                  {"mismatches", mismatches}};
        std::cout << j.dump() << std::endl;
    } else {
        fmt::print("rank {}: {} of {} x {} on ring {}{} in {:.3f} s, {:.1f} MB/s algbw\n", a.rank,
                   a.coll, a.iters, tools::format_size(bytes), ring_s,
                   direct ? "" : " (through relays)", secs, mbps);
    }
    if (mismatches) {
        fmt::print(stderr, "incxdp-p2p: verify failed: {} elements differ\n", mismatches);
        return 1;
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"incxdp-p2p: mesh point-to-point transfer or ring collective between hosts of a "
                 "mesh topology (run in the rank's namespace; docs/MESH.md)"};
    Args a;
    app.add_option("--topo", a.topo, "mesh topology file (ranks = hosts in file order)")
        ->required();
    app.add_option("--rank", a.rank, "this node's rank")->required();
    app.add_option("--peer", a.peer, "exchange with this rank (point-to-point mode)");
    app.add_option("--coll", a.coll, "allreduce|allgather|reducescatter|broadcast (ring mode)");
    app.add_option("--size", a.size, "bytes each way (p2p) or buffer size (coll), e.g. 1, 4K, 64M");
    app.add_option("--iters", a.iters, "repetitions")->check(CLI::PositiveNumber);
    app.add_option("--dtype", a.dtype, "coll: int32|float32");
    app.add_option("--op", a.op, "coll: sum|max|min");
    app.add_option("--root", a.root, "broadcast: the root rank");
    app.add_option(
        "--pin-dir", a.pin_dir,
        "the mesh daemon's pin dir (default $INCXDP_MESH_PIN_DIR or /sys/fs/bpf/incxdp/mesh)");
    app.add_option("--timeout", a.timeout, "seconds without progress before giving up (default 5)");
    app.add_option("--connect-timeout", a.connect_timeout,
                   "seconds to wait for the peer(s) to connect");
    app.add_option("--window", a.window, "segments in flight per direction");
    app.add_option("--seed", a.seed, "data seed");
    app.add_flag("--verify", a.verify, "check every byte received");
    app.add_flag("-j,--json", a.json_out, "one JSON line");
    CLI11_PARSE(app, argc, argv);
    try {
        auto t = topo::Topology::load_file(a.topo);
        Cluster c = load(t);
        if (a.rank >= c.hosts.size())
            throw std::invalid_argument(
                fmt::format("--rank {}: the topology has {} hosts", a.rank, c.hosts.size()));
        if ((a.peer >= 0) == !a.coll.empty())
            throw std::invalid_argument("give either --peer P or --coll NAME");
        if (a.peer >= 0 && (uint64_t(a.peer) >= c.hosts.size() || uint32_t(a.peer) == a.rank))
            throw std::invalid_argument(
                fmt::format("--peer {}: not another rank of the {} hosts", a.peer, c.hosts.size()));
        mesh::Options o = mesh::Options::from_env();
        if (!a.pin_dir.empty())
            o.pin_dir = a.pin_dir;
        if (a.timeout > 0)
            o.timeout_s = a.timeout;
        if (a.window)
            o.window = a.window;
        mesh::Endpoint ep(o);
        return a.peer >= 0 ? run_pair(a, c, ep, o.timeout_s) : run_coll(a, c, ep);
    } catch (const std::exception &e) {
        fmt::print(stderr, "incxdp-p2p: rank {}: {}\n", a.rank, e.what());
        return 1;
    }
}
