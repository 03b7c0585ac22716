// SPDX-License-Identifier: BSD-2-Clause
#include "tool_common.h"

#include <incxdp/quantize.h>

#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace incxdp::tools {
namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t element_hash(uint64_t seed, uint32_t rank, uint64_t index) {
    uint64_t key = splitmix64(seed ^ splitmix64(rank + 0x5bd1e995ull));
    return splitmix64(key + index * 0x9E3779B97F4A7C15ull);
}

} // namespace

uint64_t parse_size(std::string_view text) {
    return util::parse_size(text, 4);
}

std::vector<uint64_t> parse_size_list(std::string_view s) {
    return util::parse_size_list(s, 4);
}

void add_bootstrap_options(CLI::App &app, BootstrapOptions &o) {
    app.add_option("--topo", o.topo, "Topology file (YAML)")->required()->check(CLI::ExistingFile);
    app.add_option("--job", o.job, "Job id in the topology")->capture_default_str();
    app.add_option("--rank", o.rank, "This worker's rank in the job")->required();
    app.add_option("--dtype", o.dtype, "Element type")
        ->check(CLI::IsMember({"int32", "float32"}))
        ->capture_default_str();
    app.add_option("--op", o.op, "Reduction")
        ->check(CLI::IsMember({"sum", "max", "min", "avg"}))
        ->capture_default_str();
    app.add_option("--wire", o.wire, "Header spoken to the switch")
        ->check(CLI::IsMember({"native", "switchml"}))
        ->capture_default_str();
    auto *carrier =
        app.add_option("--carrier", o.carrier,
                       "What carries the job's protocol (star and tree jobs: native, roce-tree "
                       "jobs: roce): auto (native: af_xdp where it attaches, else socket, saying "
                       "why; roce: af_xdp), socket (kernel UDP, native only), af_xdp (root), "
                       "verbs (an RDMA device's RC QP, roce only) (default: auto)")
            ->check(CLI::IsMember({"auto", "socket", "af_xdp", "verbs"}));
    app.add_option("--transport", o.transport,
                   "Older name of --carrier: udp (socket), afxdp or af_xdp, roce (a roce-tree "
                   "job over af_xdp), verbs, auto")
        ->check(CLI::IsMember({"auto", "udp", "afxdp", "af_xdp", "roce", "verbs"}))
        ->excludes(carrier);
    app.add_option("--verbs-device", o.verbs_device,
                   "verbs: RDMA device (default: the one whose RoCEv2 GID is the rank's IP)");
    app.add_option("--verbs-ack-timeout", o.verbs_ack_timeout,
                   "verbs: local ACK timeout exponent, 4.096 us * 2^t")
        ->check(CLI::Range(1, 31))
        ->capture_default_str();
    app.add_option("--publish-qpn", o.publish_qpn,
                   "verbs: shell command that tells the leaf switch the QPN the device gave this "
                   "rank, run before the first packet, {qpn} {rank} {job} replaced; must exit 0 "
                   "(e.g. 'incxdp rules set-qpn topo.yaml --job {job} --rank {rank} --qpn {qpn}')");
    app.add_option("--batch", o.batch, "Datagrams per syscall / ring operation (0: 64)")
        ->capture_default_str();
    app.add_option("--xdp-tx", o.xdp_tx,
                   "af_xdp: send as live XDP frames (BPF_PROG_RUN) or through the AF_XDP tx ring")
        ->check(CLI::IsMember({"live", "ring"}))
        ->capture_default_str();
    app.add_option("--xdp-queue", o.xdp_queue, "af_xdp: rx queue of the first AF_XDP socket")
        ->capture_default_str();
    app.add_flag("--xdp-no-follow-queues", o.xdp_no_follow_queues,
                 "af_xdp: no socket on the other rx queues frames for this rank arrive on "
                 "(steer them to --xdp-queue yourself, e.g. ethtool -N)");
    app.add_flag("--no-gso", o.no_gso, "socket: no UDP_SEGMENT (one datagram per sendmsg entry)");
    app.add_flag("--udp-gro", o.udp_gro,
                 "socket: UDP_GRO on the socket (needs GRO on the interface)");
    app.add_option("--window", o.window, "Slots in flight (0: min(128, job slots); roce trees: min(1024, job slots))")
        ->capture_default_str();
    app.add_option("--elems", o.elems,
                   "Elements per packet (0: 832 native, 256 switchml, 512 roce)")
        ->capture_default_str();
    app.add_option("--switch-port", o.switch_port,
                   "Switch UDP port (0: 0xBEF0 native, 0xBEE0 switchml)")
        ->capture_default_str();
    app.add_option("--timeout", o.timeout_ms,
                   "First retransmission timeout, ms (0: 20, roce-tree jobs 2)")
        ->capture_default_str();
    app.add_option("--deadline", o.deadline_s, "Give up after this many seconds without progress")
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the generated data")->capture_default_str();
    app.add_flag("-j,--json", o.json, "JSON output");
}

std::string expand_publish_qpn(const std::string &cmd, uint32_t qpn, uint32_t rank, uint32_t job) {
    const std::pair<const char *, std::string> vars[] = {
        {"{qpn}", std::to_string(qpn)}, {"{rank}", std::to_string(rank)}, {"{job}", std::to_string(job)}};
    std::string out = cmd;
    for (const auto &[key, value] : vars)
        for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + value.size()))
            out.replace(at, std::strlen(key), value);
    return out;
}

namespace {
std::atomic<bool> g_stop{false};
volatile sig_atomic_t g_stop_signal = 0;
static_assert(std::atomic<bool>::is_always_lock_free, "stored from a signal handler");

void on_stop_signal(int sig) {
    g_stop_signal = sig;
    g_stop.store(true, std::memory_order_relaxed);
}
} // namespace

const std::atomic<bool> *stop_on_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    // No SA_RESTART: the collective's poll returns EINTR and sees the flag.
    sa.sa_flags = SA_RESETHAND;
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        sigaction(sig, &sa, nullptr);
    return &g_stop;
}

int stop_signal() { return g_stop_signal; }

CommConfig make_config(const BootstrapOptions &o) {
    CommConfig c = CommConfig::from_topology(o.topo, o.job, o.rank);
    c.wire = parse_wire(o.wire);
    c.use_carrier(o.carrier.empty() ? o.transport : o.carrier,
                  fmt::format("job {} of {}", o.job, o.topo));
    if (c.carrier != Carrier::Verbs && !(o.verbs_device.empty() && o.publish_qpn.empty()))
        throw std::invalid_argument("--verbs-device and --publish-qpn need --carrier verbs");
    c.verbs.device = o.verbs_device;
    c.verbs.ack_timeout = o.verbs_ack_timeout;
    if (!o.publish_qpn.empty()) {
        c.verbs.publish_qpn = [cmd = o.publish_qpn, rank = c.rank, job = c.job](uint32_t qpn) {
            std::string line = expand_publish_qpn(cmd, qpn, rank, job);
            int st = std::system(line.c_str());
            if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                throw std::runtime_error(fmt::format(
                    "--publish-qpn: '{}' failed ({}): the switch does not know QPN {:#x}", line,
                    st == -1 ? "could not run it"
                    : WIFEXITED(st) ? fmt::format("exit status {}", WEXITSTATUS(st))
                                    : fmt::format("signal {}", WTERMSIG(st)),
                    qpn));
        };
    }
    if (o.batch)
        c.batch = o.batch;
    c.udp_gso = !o.no_gso;
    c.udp_gro = o.udp_gro;
    c.xdp_tx_live_frames = o.xdp_tx == "live";
    c.xdp_queue = o.xdp_queue;
    c.xdp_follow_queues = !o.xdp_no_follow_queues;
    if (o.window)
        c.window = o.window;
    c.elems_per_packet = o.elems;
    c.switch_port = uint16_t(o.switch_port);
    if (o.timeout_ms) {
        c.timeout = std::chrono::milliseconds(o.timeout_ms);
        c.max_timeout = std::max(c.max_timeout, c.timeout);
    }
    c.deadline = std::chrono::milliseconds(int64_t(o.deadline_s * 1000));
    c.validate();
    return c;
}

int32_t gen_int32(uint64_t seed, uint32_t rank, uint64_t index) {
    return int32_t(uint32_t(element_hash(seed, rank, index) >> 32));
}

float gen_float32(uint64_t seed, uint32_t rank, uint64_t index) {
    uint64_t h = element_hash(seed, rank, index);
    // (2u + 1 - 2^24) / 2^24 with u < 2^24: an exact float in (-1, 1).
    int32_t odd = int32_t(2 * (h >> 40) + 1) - (1 << 24);
    int s = int(splitmix64(seed ^ 0x6a09e667f3bcc908ull ^ (index >> 10)) % 17) - 8;
    return std::ldexp(float(odd), s - 24);
}

void fill(std::span<int32_t> v, uint64_t seed, uint32_t rank) {
    for (size_t i = 0; i < v.size(); ++i)
        v[i] = gen_int32(seed, rank, i);
}

void fill(std::span<float> v, uint64_t seed, uint32_t rank) {
    for (size_t i = 0; i < v.size(); ++i)
        v[i] = gen_float32(seed, rank, i);
}

std::string VerifyResult::describe() const {
    if (ok)
        return "OK";
    return fmt::format("FAILED: {} elements wrong, first at index {}: got {} want {} "
                       "(allowed error {:.3g})",
                       mismatches, first_bad, got, want, bound);
}

namespace {

void note_mismatch(VerifyResult &r, uint64_t i, double got, double want, double bound) {
    if (r.mismatches++ == 0) {
        r.first_bad = i;
        r.got = got;
        r.want = want;
        r.bound = bound;
    }
    r.ok = false;
}

} // namespace

VerifyResult verify_int32(std::span<const int32_t> got, uint64_t seed, uint32_t world, ReduceOp op,
                          uint64_t first) {
    VerifyResult r;
    for (size_t i = 0; i < got.size(); ++i) {
        uint32_t sum = 0;
        int32_t mx = std::numeric_limits<int32_t>::min();
        int32_t mn = std::numeric_limits<int32_t>::max();
        for (uint32_t k = 0; k < world; ++k) {
            int32_t v = gen_int32(seed, k, first + i);
            sum += uint32_t(v); // wraps like the switch
            mx = std::max(mx, v);
            mn = std::min(mn, v);
        }
        int32_t want = op == ReduceOp::Sum ? int32_t(sum) : op == ReduceOp::Max ? mx : mn;
        if (got[i] != want)
            note_mismatch(r, i, got[i], want, 0);
    }
    return r;
}

VerifyResult verify_float32(std::span<const float> got, uint64_t seed, uint32_t world, ReduceOp op,
                            uint32_t per_packet, uint64_t first, uint64_t total) {
    VerifyResult r;
    const bool avg = op == ReduceOp::Avg;
    const ReduceOp wop = avg ? ReduceOp::Sum : op; // what the switches computed
    std::vector<float> block(size_t(world) * per_packet);
    const uint64_t end = first + got.size();
    const uint64_t whole = std::max(total, end);
    // Blocks of the whole buffer: [b, b + per_packet) from the block holding first.
    for (uint64_t b = first / per_packet * per_packet; b < end; b += per_packet) {
        size_t n = size_t(std::min<uint64_t>(per_packet, whole - b));
        int8_t agreed = int8_t(quant::kMinExpField);
        for (uint32_t k = 0; k < world; ++k) {
            std::span<float> mine(block.data() + size_t(k) * per_packet, n);
            for (size_t i = 0; i < n; ++i)
                mine[i] = gen_float32(seed, k, b + i);
            agreed = std::max(agreed, quant::block_exponent(mine));
        }
        for (size_t i = 0; i < n && b + i < end; ++i) {
            if (b + i < first)
                continue;
            double want = wop == ReduceOp::Sum ? 0.0 : wop == ReduceOp::Max ? -INFINITY : INFINITY;
            for (uint32_t k = 0; k < world; ++k) {
                double v = block[size_t(k) * per_packet + i];
                want = wop == ReduceOp::Sum   ? want + v
                       : wop == ReduceOp::Max ? std::max(want, v)
                                              : std::min(want, v);
            }
            double bound = quant::result_bound(agreed, world, wop, want);
            if (avg) {
                want /= world;
                bound /= world;
            }
            size_t at = size_t(b + i - first);
            double err = std::fabs(double(got[at]) - want);
            r.max_err = std::max(r.max_err, err);
            r.max_err_over_bound = std::max(r.max_err_over_bound, err / bound);
            if (!(err <= bound))
                note_mismatch(r, at, got[at], want, bound);
        }
    }
    return r;
}

VerifyResult verify_allgather(std::span<const int32_t> got_bits, uint64_t seed, uint32_t world,
                              DType dtype) {
    VerifyResult r;
    const size_t count = world ? got_bits.size() / world : 0;
    for (size_t i = 0; i < got_bits.size(); ++i) {
        uint32_t k = uint32_t(i / count);
        uint64_t idx = i % count;
        int32_t want = dtype == DType::Int32 ? gen_int32(seed, k, idx)
                                             : std::bit_cast<int32_t>(gen_float32(seed, k, idx));
        if (got_bits[i] != want)
            note_mismatch(r, i, got_bits[i], want, 0);
    }
    return r;
}

Prim parse_prim(std::string_view s) {
    if (s == "allreduce")
        return Prim::AllReduce;
    if (s == "reduce")
        return Prim::Reduce;
    if (s == "broadcast")
        return Prim::Broadcast;
    if (s == "barrier")
        return Prim::Barrier;
    if (s == "allgather")
        return Prim::AllGather;
    if (s == "reduce-scatter" || s == "reduce_scatter")
        return Prim::ReduceScatter;
    throw std::invalid_argument(
        fmt::format("collective '{}': expected allreduce, reduce, broadcast, barrier, allgather or "
                    "reduce-scatter",
                    s));
}

const char *to_string(Prim p) {
    switch (p) {
    case Prim::Reduce:
        return "reduce";
    case Prim::Broadcast:
        return "broadcast";
    case Prim::Barrier:
        return "barrier";
    case Prim::AllGather:
        return "allgather";
    case Prim::ReduceScatter:
        return "reduce-scatter";
    default:
        return "allreduce";
    }
}

void add_collective_options(CLI::App &app, CollectiveOptions &o) {
    app.add_option("--prim", o.prim, "Collective")
        ->check(CLI::IsMember(
            {"allreduce", "reduce", "broadcast", "barrier", "allgather", "reduce-scatter"}))
        ->capture_default_str();
    app.add_option("--root", o.root, "Root rank of reduce and broadcast")->capture_default_str();
}

void run_collective(Communicator &comm, Prim prim, uint32_t root, const void *send, void *recv,
                    size_t count, DType dtype, ReduceOp op) {
    switch (prim) {
    case Prim::AllReduce:
        comm.allreduce(send, recv, count, dtype, op);
        break;
    case Prim::Reduce:
        comm.reduce(send, recv, count, dtype, op, root);
        break;
    case Prim::Broadcast:
        comm.broadcast(recv, count, dtype, root);
        break;
    case Prim::Barrier:
        comm.barrier();
        break;
    case Prim::AllGather:
        comm.allgather(send, recv, count, dtype);
        break;
    case Prim::ReduceScatter:
        comm.reduce_scatter(send, recv, count, dtype, op);
        break;
    }
}

VerifyResult verify_broadcast(std::span<const int32_t> got_bits, uint64_t seed, uint32_t root,
                              DType dtype) {
    VerifyResult r;
    for (size_t i = 0; i < got_bits.size(); ++i) {
        int32_t want = dtype == DType::Int32 ? gen_int32(seed, root, i)
                                             : std::bit_cast<int32_t>(gen_float32(seed, root, i));
        if (got_bits[i] != want) {
            if (dtype == DType::Int32)
                note_mismatch(r, i, got_bits[i], want, 0);
            else
                note_mismatch(r, i, std::bit_cast<float>(got_bits[i]), std::bit_cast<float>(want),
                              0);
        }
    }
    return r;
}

VerifyResult verify_untouched(std::span<const int32_t> got_bits, int32_t marker) {
    VerifyResult r;
    for (size_t i = 0; i < got_bits.size(); ++i)
        if (got_bits[i] != marker)
            note_mismatch(r, i, got_bits[i], marker, 0);
    return r;
}

} // namespace incxdp::tools
