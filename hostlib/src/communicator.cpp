// SPDX-License-Identifier: BSD-2-Clause
// Communicator: argument checks, the transport, and every collective through
// one engine backend (engine_backend.h); AllGather, ReduceScatter and AVG
// built on its primitives.
#include <incxdp/communicator.h>

#include "engine_backend.h"
#include "packet.h"
#include "roce_frame.h"
#include "rx_backlog.h"
#include "stop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace incxdp {
namespace {

constexpr std::chrono::milliseconds kDestructorCloseDeadline{5000};

bool is_zero(const std::array<uint8_t, 6> &mac) {
    return mac == std::array<uint8_t, 6>{};
}

// Roce: the MACs the frames need, from this namespace, unless given.
void resolve_roce_link(CommConfig &cfg) {
    if (cfg.transport != TransportKind::Roce ||
        (!is_zero(cfg.roce.local_mac) && !is_zero(cfg.roce.switch_mac)))
        return;
    LinkInfo l = resolve_link(cfg.local_ip, cfg.switch_ip, cfg.xdp_iface);
    if (is_zero(cfg.roce.local_mac))
        cfg.roce.local_mac = l.local_mac;
    if (is_zero(cfg.roce.switch_mac))
        cfg.roce.switch_mac = l.remote_mac;
}

std::unique_ptr<Transport> transport_for(const CommConfig &cfg) {
    cfg.validate();
    if (cfg.transport == TransportKind::Roce || cfg.transport == TransportKind::AfXdp) {
        AfXdpTransportConfig t;
        t.local_ip = cfg.local_ip;
        t.remote_ip = cfg.switch_ip;
        t.ifname = cfg.xdp_iface;
        t.queue = cfg.xdp_queue;
        t.follow_queues = cfg.xdp_follow_queues;
        t.tx_live_frames = cfg.xdp_tx_live_frames;
        t.batch = cfg.batch;
        t.rx_frames = std::max(t.rx_frames, detail::rx_queue_frames(cfg)); // rx_backlog.h
        size_t payload = 4 * size_t(cfg.effective_elems_per_packet());
        if (cfg.transport == TransportKind::Roce) {
            // Whole frames: the switch's frames come to local_ip:4791.
            t.local_port = t.remote_port = INCXDP_ROCE_UDP_PORT;
            t.raw_frames = true;
            t.max_payload = detail::RoceSendTemplate::frame_len(payload) - detail::kFrameHdrLen;
        } else {
            t.local_port = cfg.local_port;
            t.remote_port = cfg.effective_switch_port();
            t.max_payload = detail::header_len(cfg.wire) + payload;
        }
        return make_afxdp_transport(t);
    }
    UdpTransportConfig t;
    t.local_ip = cfg.local_ip;
    t.local_port = cfg.local_port;
    t.remote_ip = cfg.switch_ip;
    t.remote_port = cfg.effective_switch_port();
    t.socket_buffer = cfg.socket_buffer;
    t.batch = cfg.batch;
    t.gso = cfg.udp_gso;
    t.gro = cfg.udp_gro;
    return make_udp_transport(t);
}

// Avg is a Sum on the wire and a division on the host; integer averages
// are refused as torch and NCCL refuse them.
ReduceOp wire_op(const char *what, DType dtype, ReduceOp op) {
    if (op != ReduceOp::Avg)
        return op;
    if (dtype != DType::Float32)
        throw std::invalid_argument(fmt::format(
            "{} avg: {} has no average (integer division would round); use sum and divide, "
            "or float32",
            what, to_string(dtype)));
    return ReduceOp::Sum;
}

void divide(void *buf, size_t count, uint32_t world_size) {
    auto *y = static_cast<float *>(buf);
    for (size_t i = 0; i < count; ++i)
        y[i] /= float(world_size);
}

// Why AF_XDP did not open, in a few words for the fallback notice.
std::string afxdp_failure(const std::exception &e) {
    auto *se = dynamic_cast<const std::system_error *>(&e);
    if (se && (se->code().value() == EPERM || se->code().value() == EACCES))
        return fmt::format("{}: not root (needs CAP_NET_ADMIN and CAP_BPF)",
                           se->code().value() == EPERM ? "EPERM" : "EACCES");
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');
    return why;
}

// Auto: AF_XDP where it attaches (it bypasses the stack, docs/PERF.md),
// else the UDP socket with one line on stderr. Loopback has no interface
// worth bypassing: the socket, silently. cfg.transport becomes the choice.
std::unique_ptr<Transport> open_auto(CommConfig &cfg) {
    if (cfg.xdp_iface.empty() && cfg.local_ip.starts_with("127.")) {
        cfg.transport = TransportKind::Udp;
        return transport_for(cfg);
    }
    cfg.transport = TransportKind::AfXdp;
    try {
        return transport_for(cfg);
    } catch (const std::exception &e) {
        std::string iface = cfg.xdp_iface;
        if (iface.empty()) {
            try {
                iface = resolve_link(cfg.local_ip, cfg.switch_ip).ifname;
            } catch (const std::exception &) {
                iface = "the interface holding " + cfg.local_ip;
            }
        }
        std::fprintf(stderr,
                     "incxdp: rank %u: AF_XDP on %s not available (%s); using the UDP "
                     "socket\n",
                     cfg.rank, iface.c_str(), afxdp_failure(e).c_str());
    }
    cfg.transport = TransportKind::Udp;
    return transport_for(cfg);
}

void check_buffers(const char *what, const void *send, const void *recv, size_t count) {
    if (!send || !recv)
        throw std::invalid_argument(fmt::format("{}: null buffer", what));
    auto s0 = reinterpret_cast<uintptr_t>(send), r0 = reinterpret_cast<uintptr_t>(recv);
    size_t bytes = count * 4;
    if (s0 != r0 && s0 < r0 + bytes && r0 < s0 + bytes)
        throw std::invalid_argument(fmt::format("{}: send and recv overlap without being the same "
                                                "buffer (in place needs send == recv)",
                                                what));
}

} // namespace

CommStats &CommStats::operator+=(const CommStats &o) {
    packets_sent += o.packets_sent;
    bytes_sent += o.bytes_sent;
    packets_received += o.packets_received;
    bytes_received += o.bytes_received;
    results += o.results;
    retransmissions += o.retransmissions;
    fast_retransmits += o.fast_retransmits;
    reorder = std::max(reorder, o.reorder);
    timeouts += o.timeouts;
    window_cuts += o.window_cuts;
    duplicates += o.duplicates;
    stale += o.stale;
    malformed += o.malformed;
    acks += o.acks;
    naks += o.naks;
    bad_icrc += o.bad_icrc;
    rx_dropped += o.rx_dropped;
    seconds += o.seconds;
    return *this;
}

struct Communicator::Impl {
    Impl(CommConfig c, std::unique_ptr<Transport> t) : cfg(std::move(c)), transport(std::move(t)) {
        if (cfg.roce_tree())
            backend = detail::make_roce_backend(cfg, transport.get());
        else
            backend = detail::make_window_backend(cfg, *transport);
    }

    // One collective through the backend: its stats into last and total.
    void run(const detail::Call &c, const char *what) {
        auto t0 = std::chrono::steady_clock::now();
        uint64_t dropped = rx_dropped();
        backend->run(c, what, last);
        last.rx_dropped = rx_dropped() - dropped;
        last.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total += last;
    }

    uint64_t rx_dropped() const { return transport ? transport->rx_dropped() : 0; }

    // Every collective starts here: a usable communicator, fresh last stats.
    void begin(const char *what) {
        check_usable(what);
        last = CommStats{};
    }

    void check_root(const char *what, uint32_t root) const {
        if (root >= cfg.world_size)
            throw std::invalid_argument(
                fmt::format("{}: root {} is not below world_size {}", what, root, cfg.world_size));
    }

    void check_usable(const char *what) const {
        if (backend->failed())
            throw std::logic_error(fmt::format(
                "{}: communicator of rank {} job {} is unusable: an earlier collective failed "
                "and the switch's slot sets are unknown; re-install the job and start over",
                what, cfg.rank, cfg.job));
        if (closed)
            throw std::logic_error(fmt::format("{}: communicator of rank {} job {} is closed", what,
                                               cfg.rank, cfg.job));
    }

    CommConfig cfg;
    std::unique_ptr<Transport> transport; ///< null for verbs: the device is the transport
    std::unique_ptr<detail::EngineBackend> backend;
    std::vector<int32_t> scatter; ///< reduce_scatter: the whole reduction
    bool closed = false;
    CommStats last, total;
};

Communicator::Communicator(CommConfig cfg) {
    cfg.validate();
    resolve_roce_link(cfg);
    std::unique_ptr<Transport> transport;
    if (cfg.transport == TransportKind::Auto)
        transport = open_auto(cfg);
    else if (cfg.transport != TransportKind::Verbs)
        transport = transport_for(cfg);
    impl_ = std::make_unique<Impl>(std::move(cfg), std::move(transport));
}

Communicator::Communicator(CommConfig cfg, std::unique_ptr<Transport> transport) {
    cfg.validate();
    if (!transport)
        throw std::invalid_argument("communicator: transport is null");
    if (cfg.transport == TransportKind::Verbs)
        throw std::invalid_argument(
            "communicator: transport verbs sends through the RDMA device, not a given Transport");
    impl_ = std::make_unique<Impl>(std::move(cfg), std::move(transport));
}

void detail::throw_interrupted(const CommConfig &cfg, const char *what) {
    throw CommInterrupted(fmt::format("{}: rank {} job {} interrupted", what, cfg.rank, cfg.job));
}

Communicator::~Communicator() {
    if (!impl_ || impl_->closed || impl_->backend->failed())
        return;
    impl_->cfg.deadline = std::min(impl_->cfg.deadline, kDestructorCloseDeadline);
    try {
        close();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "incxdp: rank %u job %u: close() in destructor failed: %s\n",
                     impl_->cfg.rank, impl_->cfg.job, e.what());
    }
}

void Communicator::allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op) {
    Impl &m = *impl_;
    m.begin("allreduce");
    if (count == 0)
        return;
    check_buffers("allreduce", send, recv, count);
    m.run({detail::Prim::AllReduce, dtype, wire_op("allreduce", dtype, op), 0, send, recv, count},
          "allreduce");
    if (op == ReduceOp::Avg)
        divide(recv, count, m.cfg.world_size);
}

void Communicator::reduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op,
                          uint32_t root) {
    Impl &m = *impl_;
    m.begin("reduce");
    m.check_root("reduce", root);
    if (count == 0)
        return;
    bool is_root = m.cfg.rank == root;
    if (!send)
        throw std::invalid_argument("reduce: null send buffer");
    if (is_root)
        check_buffers("reduce", send, recv, count);
    m.run({detail::Prim::Reduce, dtype, wire_op("reduce", dtype, op), root, send,
           is_root ? recv : nullptr, count},
          "reduce");
    if (is_root && op == ReduceOp::Avg)
        divide(recv, count, m.cfg.world_size);
}

void Communicator::broadcast(void *buf, size_t count, DType dtype, uint32_t root) {
    Impl &m = *impl_;
    m.begin("broadcast");
    m.check_root("broadcast", root);
    if (count == 0)
        return;
    if (!buf)
        throw std::invalid_argument("broadcast: null buffer");
    m.run({detail::Prim::Broadcast, dtype, ReduceOp::Sum, root, buf, buf, count}, "broadcast");
}

void Communicator::allgather(const void *send, void *recv, size_t count, DType dtype) {
    Impl &m = *impl_;
    m.begin("allgather");
    if (count == 0)
        return;
    if (!send || !recv)
        throw std::invalid_argument("allgather: null buffer");
    const size_t n = count * m.cfg.world_size;
    auto *out = static_cast<int32_t *>(recv);
    int32_t *own = out + m.cfg.rank * count;
    if (send != own) {
        auto s0 = reinterpret_cast<uintptr_t>(send), r0 = reinterpret_cast<uintptr_t>(recv);
        if (s0 < r0 + 4 * n && r0 < s0 + 4 * count)
            throw std::invalid_argument(
                fmt::format("allgather: send overlaps recv without being rank {}'s block of it "
                            "(in place needs send == recv + rank * count)",
                            m.cfg.rank));
        std::memcpy(own, send, 4 * count);
    }
    (void)dtype; // the bits travel as they are
    // Every rank's bits plus zeros from the others: exact for any dtype.
    std::fill(out, own, 0);
    std::fill(own + count, out + n, 0);
    m.run({detail::Prim::AllReduce, DType::Int32, ReduceOp::Sum, 0, out, out, n}, "allgather");
}

void Communicator::reduce_scatter(const void *send, void *recv, size_t count, DType dtype,
                                  ReduceOp op) {
    Impl &m = *impl_;
    m.begin("reduce_scatter");
    if (count == 0)
        return;
    if (!send || !recv)
        throw std::invalid_argument("reduce_scatter: null buffer");
    const size_t n = count * m.cfg.world_size;
    // The whole reduction lands in scratch, so recv may overlap send freely.
    m.scatter.resize(n);
    m.run({detail::Prim::AllReduce, dtype, wire_op("reduce_scatter", dtype, op), 0, send,
           m.scatter.data(), n},
          "reduce_scatter");
    std::memmove(recv, m.scatter.data() + m.cfg.rank * count, 4 * count);
    if (op == ReduceOp::Avg)
        divide(recv, count, m.cfg.world_size);
}

void Communicator::allreduce(std::span<const int32_t> send, std::span<int32_t> recv, ReduceOp op) {
    if (send.size() != recv.size())
        throw std::invalid_argument(
            fmt::format("allreduce: send has {} elements, recv {}", send.size(), recv.size()));
    allreduce(send.data(), recv.data(), send.size(), DType::Int32, op);
}

void Communicator::allreduce(std::span<const float> send, std::span<float> recv, ReduceOp op) {
    if (send.size() != recv.size())
        throw std::invalid_argument(
            fmt::format("allreduce: send has {} elements, recv {}", send.size(), recv.size()));
    allreduce(send.data(), recv.data(), send.size(), DType::Float32, op);
}

void Communicator::barrier() {
    Impl &m = *impl_;
    m.begin("barrier");
    m.run({detail::Prim::Barrier}, "barrier");
}

void Communicator::close() {
    Impl &m = *impl_;
    if (m.closed)
        return;
    m.check_usable("close");
    CommStats st;
    m.backend->close(st);
    m.total += st;
    m.closed = true;
}

const CommStats &Communicator::last_stats() const {
    return impl_->last;
}

const CommStats &Communicator::total_stats() const {
    return impl_->total;
}

const CommConfig &Communicator::config() const {
    return impl_->cfg;
}

} // namespace incxdp
