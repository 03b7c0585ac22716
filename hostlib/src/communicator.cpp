// SPDX-License-Identifier: BSD-2-Clause
// Communicator: argument checks, the carrier (carrier.h), and every
// collective through the protocol's engine backend (engine_backend.h);
// AllGather, ReduceScatter and AVG built on its primitives.
#include <incxdp/communicator.h>

#include "carrier.h"
#include "engine_backend.h"
#include "stop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace incxdp {
namespace {

constexpr std::chrono::milliseconds kDestructorCloseDeadline{5000};

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
    // The carrier opens on cfg as stored here: the RoCE engine keeps a
    // reference to it.
    explicit Impl(CommConfig c) : cfg(std::move(c)) { start(detail::open_carrier(cfg)); }
    Impl(CommConfig c, std::unique_ptr<Transport> t) : cfg(std::move(c)) {
        start(detail::carry_over(cfg, std::move(t)));
    }

    // The backend follows the protocol; the carrier is already open.
    void start(detail::Carried c) {
        carried = std::move(c);
        if (cfg.protocol == Protocol::Roce)
            backend =
                detail::make_roce_backend(cfg, std::move(carried.roce), carried.transport.get());
        else
            backend = detail::make_window_backend(cfg, *carried.transport);
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

    uint64_t rx_dropped() const { return carried.transport ? carried.transport->rx_dropped() : 0; }

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
    detail::Carried carried; ///< before backend: the backend uses it until destroyed
    std::unique_ptr<detail::EngineBackend> backend;
    std::vector<int32_t> scatter; ///< reduce_scatter: the whole reduction
    bool closed = false;
    CommStats last, total;
};

Communicator::Communicator(CommConfig cfg) {
    cfg.validate();
    impl_ = std::make_unique<Impl>(std::move(cfg));
}

Communicator::Communicator(CommConfig cfg, std::unique_ptr<Transport> transport) {
    cfg.validate();
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
