// SPDX-License-Identifier: BSD-2-Clause
// Communicator: argument checks, slot set bookkeeping across calls, close().
#include <incxdp/communicator.h>

#include "collectives.h"
#include "engine.h"
#include "roce_collectives.h"
#include "roce_engine.h"
#include "rx_backlog.h"
#include "stop.h"
#include "verbs_link.h"

#include <fmt/format.h>

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
        if (cfg.transport == TransportKind::Roce) {
            roce = std::make_unique<detail::RoceEngine>(cfg, *transport);
            return;
        }
        if (cfg.transport == TransportKind::Verbs) {
            roce = detail::make_verbs_link(cfg); // the device is the transport
            return;
        }
        engine = std::make_unique<detail::Engine>(cfg, *transport);
        next_set.assign(cfg.window, 0);
        lane_slots.reserve(cfg.window);
        base_sets.reserve(cfg.window);
    }

    // Runs one call and keeps the slots' set parity in step with the switch.
    void run(const detail::Schedule &s, const detail::CallInfo &call, detail::StepHandler &handler,
             CommStats &stats) {
        try {
            engine->run(s, lane_slots, base_sets, call, handler, stats);
        } catch (...) {
            failed = true; // the slots' sets are now unknown
            throw;
        }
        for (uint32_t l = 0; l < s.lanes; ++l)
            next_set[lane_slots[l]] ^= uint8_t(s.uses_of_lane(l) & 1);
    }

    // One collective on a RoCE tree: the packets at the next indices.
    void run_roce(const detail::RoceCall &c, const char *what) {
        auto t0 = std::chrono::steady_clock::now();
        last = CommStats{};
        // Verbs has no Transport: the device's frames are skb-built.
        const bool pad = !transport || !transport->frames_grow_at_switch();
        detail::RoceSteps steps(c, cfg.rank, cfg.world_size, cfg.effective_elems_per_packet(),
                                roce_exps, pad);
        steps.prepare(what); // throws before anything is sent
        uint64_t dropped = rx_dropped();
        try {
            roce->run(steps, what, last);
        } catch (...) {
            failed = true; // the connection's sequence is now unknown to the switch
            throw;
        }
        finish_call(t0, dropped);
    }

    void star_allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op,
                        const char *what);

    uint64_t rx_dropped() const { return transport ? transport->rx_dropped() : 0; }

    // The call that started at t0 with the transport's drop count at
    // dropped_before is done: its time and drops into last, last into total.
    void finish_call(std::chrono::steady_clock::time_point t0, uint64_t dropped_before) {
        last.rx_dropped = rx_dropped() - dropped_before;
        last.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total += last;
    }

    void check_root(const char *what, uint32_t root) const {
        if (root >= cfg.world_size)
            throw std::invalid_argument(
                fmt::format("{}: root {} is not below world_size {}", what, root, cfg.world_size));
    }

    void check_usable(const char *what) const {
        if (failed)
            throw std::logic_error(fmt::format(
                "{}: communicator of rank {} job {} is unusable: an earlier collective failed "
                "and the switch's slot sets are unknown; re-install the job and start over",
                what, cfg.rank, cfg.job));
        if (closed)
            throw std::logic_error(fmt::format("{}: communicator of rank {} job {} is closed", what,
                                               cfg.rank, cfg.job));
    }

    CommConfig cfg;
    std::unique_ptr<Transport> transport;
    std::unique_ptr<detail::Engine> engine;   ///< UDP/AF_XDP star jobs
    std::unique_ptr<detail::RoceLink> roce;   ///< roce-tree jobs: AF_XDP frames or a device
    std::vector<int8_t> roce_exps;
    std::vector<int32_t> scratch;  ///< star reduce/broadcast: what non-roots send or receive
    std::vector<uint8_t> next_set; ///< per slot: set of its next use
    std::vector<uint16_t> lane_slots;
    std::vector<uint8_t> base_sets;
    std::vector<int8_t> local_exp, agreed;
    uint32_t round = 0; ///< rid of the last call; all ranks count alike
    bool failed = false;
    bool closed = false;
    CommStats last, total;
};

Communicator::Communicator(CommConfig cfg) {
    cfg.validate();
    resolve_roce_link(cfg);
    std::unique_ptr<Transport> transport;
    if (cfg.transport != TransportKind::Verbs)
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
    if (!impl_ || impl_->closed || impl_->failed)
        return;
    impl_->cfg.deadline = std::min(impl_->cfg.deadline, kDestructorCloseDeadline);
    try {
        close();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "incxdp: rank %u job %u: close() in destructor failed: %s\n",
                     impl_->cfg.rank, impl_->cfg.job, e.what());
    }
}

// Star jobs: one allreduce call through the window engine.
void Communicator::Impl::star_allreduce(const void *send, void *recv, size_t count, DType dtype,
                                        ReduceOp op, const char *what) {
    if (cfg.wire == Wire::SwitchML && op != ReduceOp::Sum)
        throw std::invalid_argument(
            fmt::format("{} {}: the SwitchML header has no op field, the switch only sums; use the "
                        "native wire for max/min",
                        what, to_string(op)));

    auto t0 = std::chrono::steady_clock::now();
    auto s = detail::Schedule::make(count, cfg.effective_elems_per_packet(), cfg.window,
                                    dtype == DType::Float32);
    lane_slots.clear();
    base_sets.clear();
    for (uint32_t l = 0; l < s.lanes; ++l) {
        lane_slots.push_back(uint16_t(l));
        base_sets.push_back(next_set[l]);
    }
    detail::CallInfo call{round + 1, op, dtype, what};
    uint64_t dropped = rx_dropped();
    if (dtype == DType::Int32) {
        detail::Int32Steps h(s, cfg.wire, op, static_cast<const int32_t *>(send),
                             static_cast<int32_t *>(recv));
        round = call.round;
        run(s, call, h, last);
    } else {
        detail::Float32Steps h(s, cfg.wire, op, cfg.world_size, static_cast<const float *>(send),
                               static_cast<float *>(recv), local_exp, agreed);
        h.prepare(cfg.rank); // throws before anything is sent
        round = call.round;
        run(s, call, h, last);
    }
    finish_call(t0, dropped);
}

void Communicator::allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op) {
    Impl &m = *impl_;
    m.check_usable("allreduce");
    m.last = CommStats{};
    if (count == 0)
        return;
    check_buffers("allreduce", send, recv, count);
    if (m.roce)
        m.run_roce({detail::RocePrim::AllReduce, dtype, op, 0, send, recv, count}, "allreduce");
    else
        m.star_allreduce(send, recv, count, dtype, op, "allreduce");
}

void Communicator::reduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op,
                          uint32_t root) {
    Impl &m = *impl_;
    m.check_usable("reduce");
    m.last = CommStats{};
    m.check_root("reduce", root);
    if (count == 0)
        return;
    bool is_root = m.cfg.rank == root;
    if (!send)
        throw std::invalid_argument("reduce: null send buffer");
    if (is_root)
        check_buffers("reduce", send, recv, count);
    if (m.roce) {
        m.run_roce(
            {detail::RocePrim::Reduce, dtype, op, root, send, is_root ? recv : nullptr, count},
            "reduce");
        return;
    }
    if (is_root) {
        m.star_allreduce(send, recv, count, dtype, op, "reduce");
        return;
    }
    m.scratch.resize(count); // the result nobody asked for lands here
    m.star_allreduce(send, m.scratch.data(), count, dtype, op, "reduce");
}

void Communicator::broadcast(void *buf, size_t count, DType dtype, uint32_t root) {
    Impl &m = *impl_;
    m.check_usable("broadcast");
    m.last = CommStats{};
    m.check_root("broadcast", root);
    if (count == 0)
        return;
    if (!buf)
        throw std::invalid_argument("broadcast: null buffer");
    if (m.roce) {
        m.run_roce({detail::RocePrim::Broadcast, dtype, ReduceOp::Sum, root, buf, buf, count},
                   "broadcast");
        return;
    }
    // The root's bits plus zeros from everyone else: exact for any dtype.
    if (m.cfg.rank == root) {
        m.star_allreduce(buf, buf, count, DType::Int32, ReduceOp::Sum, "broadcast");
        return;
    }
    m.scratch.assign(count, 0);
    m.star_allreduce(m.scratch.data(), buf, count, DType::Int32, ReduceOp::Sum, "broadcast");
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
    m.check_usable("barrier");
    m.last = CommStats{};
    if (m.roce) {
        m.run_roce({detail::RocePrim::Barrier}, "barrier");
        return;
    }
    int32_t v = 0;
    m.star_allreduce(&v, &v, 1, DType::Int32, ReduceOp::Sum, "barrier");
}

void Communicator::close() {
    Impl &m = *impl_;
    if (m.closed)
        return;
    m.check_usable("close");
    if (m.roce) {
        // Nothing to park: a new connection starts from idx 0 once the
        // switches were reset (docs/ROCE.md §4).
        m.closed = true;
        return;
    }
    // Slots used an odd number of times get one empty packet in set 1.
    m.lane_slots.clear();
    m.base_sets.clear();
    for (uint32_t slot = 0; slot < m.cfg.window; ++slot) {
        if (m.next_set[slot]) {
            m.lane_slots.push_back(uint16_t(slot));
            m.base_sets.push_back(1);
        }
    }
    if (!m.lane_slots.empty()) {
        auto s = detail::Schedule::single_steps(uint32_t(m.lane_slots.size()));
        detail::CallInfo call{m.round + 1, ReduceOp::Sum, DType::Int32, "close"};
        detail::EmptySteps h(m.cfg.wire, m.cfg.effective_elems_per_packet());
        m.round = call.round;
        CommStats st;
        m.run(s, call, h, st);
        m.total += st;
    }
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
