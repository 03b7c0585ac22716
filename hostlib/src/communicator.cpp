// SPDX-License-Identifier: BSD-2-Clause
// Communicator: argument checks, slot set bookkeeping across calls, close().
#include <incxdp/communicator.h>

#include "collectives.h"
#include "engine.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace incxdp {
namespace {

constexpr std::chrono::milliseconds kDestructorCloseDeadline{5000};

std::unique_ptr<Transport> transport_for(const CommConfig &cfg) {
    cfg.validate();
    if (cfg.transport == TransportKind::AfXdp) {
        AfXdpTransportConfig t;
        t.local_ip = cfg.local_ip;
        t.local_port = cfg.local_port;
        t.remote_ip = cfg.switch_ip;
        t.remote_port = cfg.effective_switch_port();
        t.ifname = cfg.xdp_iface;
        t.queue = cfg.xdp_queue;
        t.tx_live_frames = cfg.xdp_tx_live_frames;
        t.batch = cfg.batch;
        t.max_payload = detail::header_len(cfg.wire) + 4 * size_t(cfg.effective_elems_per_packet());
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

} // namespace

CommStats &CommStats::operator+=(const CommStats &o) {
    packets_sent += o.packets_sent;
    bytes_sent += o.bytes_sent;
    packets_received += o.packets_received;
    bytes_received += o.bytes_received;
    results += o.results;
    retransmissions += o.retransmissions;
    timeouts += o.timeouts;
    duplicates += o.duplicates;
    stale += o.stale;
    malformed += o.malformed;
    seconds += o.seconds;
    return *this;
}

struct Communicator::Impl {
    Impl(CommConfig c, std::unique_ptr<Transport> t)
        : cfg(std::move(c)), transport(std::move(t)), engine(cfg, *transport),
          next_set(cfg.window, 0) {
        lane_slots.reserve(cfg.window);
        base_sets.reserve(cfg.window);
    }

    // Runs one call and keeps the slots' set parity in step with the switch.
    void run(const detail::Schedule &s, const detail::CallInfo &call, detail::StepHandler &handler,
             CommStats &stats) {
        try {
            engine.run(s, lane_slots, base_sets, call, handler, stats);
        } catch (...) {
            failed = true; // the slots' sets are now unknown
            throw;
        }
        for (uint32_t l = 0; l < s.lanes; ++l)
            next_set[lane_slots[l]] ^= uint8_t(s.uses_of_lane(l) & 1);
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
    detail::Engine engine;
    std::vector<uint8_t> next_set; ///< per slot: set of its next use
    std::vector<uint16_t> lane_slots;
    std::vector<uint8_t> base_sets;
    std::vector<int8_t> local_exp, agreed;
    uint32_t round = 0; ///< rid of the last call; all ranks count alike
    bool failed = false;
    bool closed = false;
    CommStats last, total;
};

Communicator::Communicator(CommConfig cfg) : Communicator(cfg, transport_for(cfg)) {}

Communicator::Communicator(CommConfig cfg, std::unique_ptr<Transport> transport) {
    cfg.validate();
    if (!transport)
        throw std::invalid_argument("communicator: transport is null");
    impl_ = std::make_unique<Impl>(std::move(cfg), std::move(transport));
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

void Communicator::allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op) {
    Impl &m = *impl_;
    m.check_usable("allreduce");
    m.last = CommStats{};
    if (count == 0)
        return;
    if (!send || !recv)
        throw std::invalid_argument("allreduce: null buffer");
    auto s0 = reinterpret_cast<uintptr_t>(send), r0 = reinterpret_cast<uintptr_t>(recv);
    size_t bytes = count * 4;
    if (s0 != r0 && s0 < r0 + bytes && r0 < s0 + bytes)
        throw std::invalid_argument("allreduce: send and recv overlap without being the same "
                                    "buffer (in place needs send == recv)");
    if (m.cfg.wire == Wire::SwitchML && op != ReduceOp::Sum)
        throw std::invalid_argument(fmt::format(
            "allreduce {}: the SwitchML header has no op field, the switch only sums; use the "
            "native wire for max/min",
            to_string(op)));

    auto t0 = std::chrono::steady_clock::now();
    auto s = detail::Schedule::make(count, m.cfg.effective_elems_per_packet(), m.cfg.window,
                                    dtype == DType::Float32);
    m.lane_slots.clear();
    m.base_sets.clear();
    for (uint32_t l = 0; l < s.lanes; ++l) {
        m.lane_slots.push_back(uint16_t(l));
        m.base_sets.push_back(m.next_set[l]);
    }
    detail::CallInfo call{m.round + 1, op, dtype, "allreduce"};
    if (dtype == DType::Int32) {
        detail::Int32Steps h(s, m.cfg.wire, op, static_cast<const int32_t *>(send),
                             static_cast<int32_t *>(recv));
        m.round = call.round;
        m.run(s, call, h, m.last);
    } else {
        detail::Float32Steps h(s, m.cfg.wire, op, m.cfg.world_size,
                               static_cast<const float *>(send), static_cast<float *>(recv),
                               m.local_exp, m.agreed);
        h.prepare(m.cfg.rank); // throws before anything is sent
        m.round = call.round;
        m.run(s, call, h, m.last);
    }
    m.last.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.total += m.last;
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
    int32_t v = 0;
    allreduce(&v, &v, 1, DType::Int32, ReduceOp::Sum);
}

void Communicator::close() {
    Impl &m = *impl_;
    if (m.closed)
        return;
    m.check_usable("close");
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
