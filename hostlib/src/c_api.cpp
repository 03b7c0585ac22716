// SPDX-License-Identifier: BSD-2-Clause
// The C API (incxdp/incxdp.h) over the Communicator: every entry point runs
// its body in guarded(), which turns each exception into a status code and
// keeps the message for incxdp_last_error().
#include <incxdp/communicator.h>
#include <incxdp/incxdp.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

using namespace incxdp;

struct incxdp_comm {
    // CommConfig::stop points here, so it outlives the Communicator.
    std::atomic<bool> stop{false};
    std::unique_ptr<Communicator> comm;
    mutable std::string error; // the last failed call's message
};

namespace {

static_assert(std::atomic<bool>::is_always_lock_free,
              "incxdp_comm_interrupt() must be async-signal-safe");

thread_local std::string t_error;

// Raised by this file for what the wire or the build cannot do.
struct NotSupported : std::runtime_error {
    using std::runtime_error::runtime_error;
};

constexpr uint32_t kKnownFlags = INCXDP_CFG_NO_GSO | INCXDP_CFG_UDP_GRO | INCXDP_CFG_XDP_TX_RING |
                                 INCXDP_CFG_XDP_NO_FOLLOW_QUEUES;

incxdp_status_t fail(const incxdp_comm *c, incxdp_status_t code, const char *msg) noexcept {
    try {
        t_error = msg;
        if (c)
            c->error = msg;
    } catch (...) { // no memory for the message: the code still says what failed
    }
    return code;
}

template <typename F> incxdp_status_t guarded(const incxdp_comm *c, F &&body) noexcept {
    try {
        body();
        return INCXDP_OK;
    } catch (const NotSupported &e) {
        return fail(c, INCXDP_ENOTSUP, e.what());
    } catch (const CommTimeout &e) {
        return fail(c, INCXDP_ETIMEDOUT, e.what());
    } catch (const CommInterrupted &e) {
        return fail(c, INCXDP_EINTR, e.what());
    } catch (const std::system_error &e) {
        return fail(c, INCXDP_ESYSTEM, e.what());
    } catch (const std::invalid_argument &e) {
        return fail(c, INCXDP_EINVAL, e.what());
    } catch (const std::logic_error &e) { // the Communicator's "closed" / "unusable"
        return fail(c, INCXDP_ESTATE, e.what());
    } catch (const std::bad_alloc &) {
        return fail(c, INCXDP_ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return fail(c, INCXDP_EFAILED, e.what());
    } catch (...) {
        return fail(c, INCXDP_EFAILED, "unknown exception");
    }
}

DType to_dtype(incxdp_dtype_t d, const char *what) {
    switch (d) {
    case INCXDP_INT32:
        return DType::Int32;
    case INCXDP_FLOAT32:
        return DType::Float32;
    }
    throw std::invalid_argument(
        fmt::format("{}: dtype {} is not INCXDP_INT32 (0) or INCXDP_FLOAT32 (1)", what, int(d)));
}

ReduceOp to_op(incxdp_op_t op, const char *what) {
    switch (op) {
    case INCXDP_SUM:
        return ReduceOp::Sum;
    case INCXDP_MAX:
        return ReduceOp::Max;
    case INCXDP_MIN:
        return ReduceOp::Min;
    case INCXDP_AVG:
        return ReduceOp::Avg;
    }
    throw std::invalid_argument(
        fmt::format("{}: op {} is not INCXDP_SUM (0), INCXDP_MAX (1), INCXDP_MIN (2) or "
                    "INCXDP_AVG (3)",
                    what, int(op)));
}

// The Communicator says invalid_argument here; to C callers it is a
// wire's limit, not a mistake in the arguments.
void check_wire_op(const Communicator &c, ReduceOp op, const char *what) {
    const CommConfig &cfg = c.config();
    // Avg is a sum on the wire.
    if (!cfg.roce_tree() && cfg.wire == Wire::SwitchML && op != ReduceOp::Sum &&
        op != ReduceOp::Avg)
        throw NotSupported(fmt::format("{} {}: the SwitchML wire only sums (its header has no op "
                                       "field); use the native wire for max/min",
                                       what, to_string(op)));
}

void check_comm(const incxdp_comm *c, const char *what) {
    if (!c)
        throw std::invalid_argument(fmt::format("{}: comm is NULL", what));
}

CommConfig to_config(const incxdp_config_t &c) {
    if (c.flags & ~kKnownFlags)
        throw std::invalid_argument(fmt::format("config: unknown flags {:#x} (known: INCXDP_CFG_*)",
                                                c.flags & ~kKnownFlags));
    CommConfig k;
    if (c.topology) {
        k = CommConfig::from_topology(c.topology, c.job, c.rank);
        if (c.world_size != 0 && c.world_size != k.world_size)
            throw std::invalid_argument(
                fmt::format("topology {}: job {} has {} ranks, the config says world_size {}",
                            c.topology, c.job, k.world_size, c.world_size));
    } else {
        if (!c.switch_ip || !c.local_ip || c.world_size == 0)
            throw std::invalid_argument("config: without a topology file, world_size, switch_ip "
                                        "and local_ip must be set");
        k.rank = c.rank;
        k.world_size = c.world_size;
        k.job = c.job;
    }
    if (c.switch_ip)
        k.switch_ip = c.switch_ip;
    if (c.local_ip)
        k.local_ip = c.local_ip;
    if (c.switch_port)
        k.switch_port = c.switch_port;
    if (c.local_port)
        k.local_port = c.local_port;
    // Carrier names or the old transport names; a topology's job fixes the protocol.
    if (c.transport)
        k.use_carrier(c.transport,
                      c.topology ? fmt::format("job {} of {}", c.job, c.topology) : std::string());
#ifndef INCXDP_HAVE_VERBS
    if (k.carrier == Carrier::Verbs)
        throw NotSupported("carrier verbs: libincxdp was built without libibverbs (install "
                           "libibverbs-dev and rebuild), use carrier af_xdp");
#endif
    if (k.carrier != Carrier::Verbs && (c.verbs_device || c.publish_qpn || c.verbs_ack_timeout))
        throw std::invalid_argument(
            "config: verbs_device, verbs_ack_timeout and publish_qpn need carrier verbs");
    if (c.verbs_ack_timeout > 31)
        throw std::invalid_argument(
            fmt::format("config: verbs_ack_timeout {} is above 31", c.verbs_ack_timeout));
    if (c.wire)
        k.wire = parse_wire(c.wire);
    if (c.window)
        k.window = c.window;
    if (c.elems_per_packet)
        k.elems_per_packet = c.elems_per_packet;
    if (c.mtu)
        k.mtu = c.mtu;
    if (c.timeout_ms) {
        k.timeout = std::chrono::milliseconds(c.timeout_ms);
        k.max_timeout = std::max(k.max_timeout, k.timeout);
    }
    if (c.max_timeout_ms)
        k.max_timeout = std::chrono::milliseconds(c.max_timeout_ms);
    if (c.deadline_ms)
        k.deadline = std::chrono::milliseconds(c.deadline_ms);
    k.max_retries = c.max_retries;
    if (c.batch)
        k.batch = c.batch;
    k.udp_gso = !(c.flags & INCXDP_CFG_NO_GSO);
    k.udp_gro = c.flags & INCXDP_CFG_UDP_GRO;
    k.xdp_tx_live_frames = !(c.flags & INCXDP_CFG_XDP_TX_RING);
    k.xdp_follow_queues = !(c.flags & INCXDP_CFG_XDP_NO_FOLLOW_QUEUES);
    if (c.xdp_iface)
        k.xdp_iface = c.xdp_iface;
    k.xdp_queue = c.xdp_queue;
    if (c.verbs_device)
        k.verbs.device = c.verbs_device;
    if (c.verbs_ack_timeout)
        k.verbs.ack_timeout = uint8_t(c.verbs_ack_timeout);
    if (c.publish_qpn)
        k.verbs.publish_qpn = [fn = c.publish_qpn, user = c.publish_qpn_user](uint32_t qpn) {
            if (int rc = fn(qpn, user); rc != 0)
                throw std::runtime_error(fmt::format("publish_qpn callback returned {} for QPN "
                                                     "{:#x}: the switch does not know the QP",
                                                     rc, qpn));
        };
    return k;
}

incxdp_stats_t to_c(const CommStats &s) {
    incxdp_stats_t o;
    std::memset(&o, 0, sizeof(o));
    o.packets_sent = s.packets_sent;
    o.bytes_sent = s.bytes_sent;
    o.packets_received = s.packets_received;
    o.bytes_received = s.bytes_received;
    o.results = s.results;
    o.retransmissions = s.retransmissions;
    o.fast_retransmits = s.fast_retransmits;
    o.timeouts = s.timeouts;
    o.window_cuts = s.window_cuts;
    o.duplicates = s.duplicates;
    o.stale = s.stale;
    o.malformed = s.malformed;
    o.acks = s.acks;
    o.naks = s.naks;
    o.bad_icrc = s.bad_icrc;
    o.rx_dropped = s.rx_dropped;
    o.seconds = s.seconds;
    return o;
}

template <typename T> void check_out(const T *p, const char *what, const char *name) {
    if (!p)
        throw std::invalid_argument(fmt::format("{}: {} is NULL", what, name));
}

// A collective's two buffers: both needed unless nothing moves.
void check_buffers(const char *what, const void *send, const void *recv, size_t count) {
    if (count != 0 && (!send || !recv))
        throw std::invalid_argument(
            fmt::format("{}: {} is NULL (count {})", what, send ? "recv" : "send", count));
}

} // namespace

extern "C" {

const char *incxdp_version(void) noexcept {
    return INCXDP_VERSION_STRING;
}

const char *incxdp_strerror(incxdp_status_t code) noexcept {
    switch (code) {
    case INCXDP_OK:
        return "success";
    case INCXDP_EINVAL:
        return "invalid argument or configuration";
    case INCXDP_ETIMEDOUT:
        return "the switch made no progress before the deadline";
    case INCXDP_ENOTSUP:
        return "not supported by this wire or build";
    case INCXDP_ESYSTEM:
        return "system error";
    case INCXDP_EINTR:
        return "interrupted";
    case INCXDP_ESTATE:
        return "communicator closed or unusable after a failed collective";
    case INCXDP_ENOMEM:
        return "out of memory";
    case INCXDP_EFAILED:
        return "operation failed";
    }
    return "unknown status";
}

const char *incxdp_last_error(const incxdp_comm_t *comm) noexcept {
    return comm ? comm->error.c_str() : t_error.c_str();
}

void incxdp_config_init(incxdp_config_t *cfg) noexcept {
    if (cfg)
        std::memset(cfg, 0, sizeof(*cfg));
}

incxdp_status_t incxdp_comm_create(const incxdp_config_t *cfg, incxdp_comm_t **out) noexcept {
    if (out)
        *out = nullptr;
    return guarded(nullptr, [&] {
        check_out(cfg, "incxdp_comm_create", "config");
        check_out(out, "incxdp_comm_create", "out");
        CommConfig k = to_config(*cfg);
        auto h = std::make_unique<incxdp_comm>();
        k.stop = &h->stop;
        h->comm = std::make_unique<Communicator>(std::move(k));
        *out = h.release();
    });
}

incxdp_status_t incxdp_comm_close(incxdp_comm_t *comm) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_comm_close");
        comm->comm->close();
    });
}

// ~Communicator never throws: it prints what its close() says.
void incxdp_comm_destroy(incxdp_comm_t *comm) noexcept {
    delete comm;
}

incxdp_status_t incxdp_comm_interrupt(incxdp_comm_t *comm) noexcept {
    if (!comm)
        return INCXDP_EINVAL; // no message: fail() allocates, not async-signal-safe
    comm->stop.store(true);
    return INCXDP_OK;
}

incxdp_status_t incxdp_comm_rank(const incxdp_comm_t *comm, uint32_t *rank) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_comm_rank");
        check_out(rank, "incxdp_comm_rank", "rank");
        *rank = comm->comm->config().rank;
    });
}

incxdp_status_t incxdp_comm_size(const incxdp_comm_t *comm, uint32_t *size) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_comm_size");
        check_out(size, "incxdp_comm_size", "size");
        *size = comm->comm->config().world_size;
    });
}

incxdp_status_t incxdp_comm_elems_per_packet(const incxdp_comm_t *comm, uint32_t *elems) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_comm_elems_per_packet");
        check_out(elems, "incxdp_comm_elems_per_packet", "elems");
        *elems = comm->comm->config().effective_elems_per_packet();
    });
}

incxdp_status_t incxdp_comm_stats(const incxdp_comm_t *comm, incxdp_stats_kind_t kind,
                                  incxdp_stats_t *out) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_comm_stats");
        check_out(out, "incxdp_comm_stats", "out");
        if (kind == INCXDP_STATS_LAST)
            *out = to_c(comm->comm->last_stats());
        else if (kind == INCXDP_STATS_TOTAL)
            *out = to_c(comm->comm->total_stats());
        else
            throw std::invalid_argument(fmt::format(
                "incxdp_comm_stats: kind {} is not INCXDP_STATS_LAST (0) or INCXDP_STATS_TOTAL (1)",
                int(kind)));
    });
}

incxdp_status_t incxdp_allreduce(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
                                 incxdp_dtype_t dtype, incxdp_op_t op) noexcept {
    return guarded(comm, [&] {
        const char *what = "incxdp_allreduce";
        check_comm(comm, what);
        DType d = to_dtype(dtype, what);
        ReduceOp o = to_op(op, what);
        check_wire_op(*comm->comm, o, what);
        check_buffers(what, send, recv, count);
        comm->comm->allreduce(send, recv, count, d, o);
    });
}

incxdp_status_t incxdp_reduce(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
                              incxdp_dtype_t dtype, incxdp_op_t op, uint32_t root) noexcept {
    return guarded(comm, [&] {
        const char *what = "incxdp_reduce";
        check_comm(comm, what);
        DType d = to_dtype(dtype, what);
        ReduceOp o = to_op(op, what);
        check_wire_op(*comm->comm, o, what);
        comm->comm->reduce(send, recv, count, d, o, root);
    });
}

incxdp_status_t incxdp_broadcast(incxdp_comm_t *comm, void *buf, size_t count, incxdp_dtype_t dtype,
                                 uint32_t root) noexcept {
    return guarded(comm, [&] {
        const char *what = "incxdp_broadcast";
        check_comm(comm, what);
        comm->comm->broadcast(buf, count, to_dtype(dtype, what), root);
    });
}

incxdp_status_t incxdp_allgather(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
                                 incxdp_dtype_t dtype) noexcept {
    return guarded(comm, [&] {
        const char *what = "incxdp_allgather";
        check_comm(comm, what);
        DType d = to_dtype(dtype, what);
        check_buffers(what, send, recv, count);
        comm->comm->allgather(send, recv, count, d);
    });
}

incxdp_status_t incxdp_reduce_scatter(incxdp_comm_t *comm, const void *send, void *recv,
                                      size_t count, incxdp_dtype_t dtype, incxdp_op_t op) noexcept {
    return guarded(comm, [&] {
        const char *what = "incxdp_reduce_scatter";
        check_comm(comm, what);
        DType d = to_dtype(dtype, what);
        ReduceOp o = to_op(op, what);
        check_wire_op(*comm->comm, o, what);
        check_buffers(what, send, recv, count);
        comm->comm->reduce_scatter(send, recv, count, d, o);
    });
}

incxdp_status_t incxdp_barrier(incxdp_comm_t *comm) noexcept {
    return guarded(comm, [&] {
        check_comm(comm, "incxdp_barrier");
        comm->comm->barrier();
    });
}

} // extern "C"
