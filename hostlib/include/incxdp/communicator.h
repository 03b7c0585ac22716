// SPDX-License-Identifier: BSD-2-Clause
// libincxdp: AllReduce through an incxdp (or SwitchML-compatible) switch.
//
// Every rank of a job creates one Communicator and calls the same sequence
// of collectives with the same count, dtype and op. The buffer is cut into
// chunks of elems_per_packet elements; chunk c travels in window slot
// c % window, and a slot alternates its two shadow sets on every use, so a
// slot's next chunk is sent only once the previous result for that slot
// arrived (docs/HOSTLIB.md §3). Lost packets are recovered by per-slot
// timers with exponential backoff; the switch unicasts the stored result
// to a retransmission of a completed set.
//
// float32 travels as int32 with a per-chunk block exponent agreed through
// the switch (the `exp` field, signed max), pipelined: chunk c's packet
// carries the exponent of chunk c + window. Error bound in quantize.h.
#pragma once

#include <incxdp/reduce_op.h>
#include <incxdp/transport.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace incxdp {

/// How a Communicator reaches the switch (docs/HOSTLIB.md §5).
enum class TransportKind {
    Udp,   ///< a UDP socket (sendmmsg/recvmmsg, GSO, GRO)
    AfXdp, ///< an AF_XDP socket on the worker's interface (root)
};
/// "udp", "afxdp"; parse throws std::invalid_argument naming the text.
TransportKind parse_transport(const std::string &s);
const char *to_string(TransportKind t);

/// Everything a rank needs to reach the switch. All ranks of a job must use
/// the same world_size, job, window, elems_per_packet and wire.
struct CommConfig {
    uint32_t rank = 0;
    uint32_t world_size = 1;       ///< workers in the job, <= 32
    uint32_t job = 0;              ///< job id installed on the switch
    std::string switch_ip;         ///< switch service address
    uint16_t switch_port = 0;      ///< 0 = wire default: 0xBEF0 native, 0xBEE0 SwitchML
    std::string local_ip;          ///< this worker's address (bound)
    uint16_t local_port = 0;       ///< this worker's UDP port (the switch's worker table)
    uint32_t window = 64;          ///< slots in flight, <= the job's slot pool
    uint32_t elems_per_packet = 0; ///< 0 = wire default: 832 native, 256 SwitchML (capped by mtu)
    uint32_t mtu = 0;              ///< IP MTU of the worker's link; 0 = unknown, not checked
    Wire wire = Wire::Native;
    std::chrono::milliseconds timeout{20};        ///< first retransmission timeout
    std::chrono::milliseconds max_timeout{200};   ///< backoff doubles up to this
    uint32_t max_retries = 0;                     ///< per packet; 0 = unlimited
    std::chrono::milliseconds deadline{30000};    ///< no result at all for this long => CommTimeout
    TransportKind transport = TransportKind::Udp; ///< used by Communicator(CommConfig)
    int socket_buffer = 8 << 20;                  ///< UDP SO_RCVBUF/SO_SNDBUF bytes
    uint32_t batch = 64;            ///< datagrams per sendmmsg/recvmmsg or ring operation
    bool udp_gso = true;            ///< UDP: UDP_SEGMENT on send
    bool udp_gro = false;           ///< UDP: UDP_GRO on receive (did not pay: docs/PERF.md)
    std::string xdp_iface;          ///< AfXdp: interface; empty = the one holding local_ip
    uint32_t xdp_queue = 0;         ///< AfXdp: rx queue of the socket
    bool xdp_tx_live_frames = true; ///< AfXdp: send as live XDP frames, not via the tx ring

    /// Fill rank, world_size, job, addresses and ports from a topology file:
    /// local = the rank's host IP and the job's worker_port, remote = the
    /// job's switch IP, window = min(128, job slots), mtu = the topology's.
    /// Throws std::invalid_argument naming the file and what is wrong.
    static CommConfig from_topology(const std::string &path, uint32_t job_id, uint32_t rank);

    /// Port actually used (switch_port, or the wire's default).
    uint16_t effective_switch_port() const;
    /// Elements per data packet actually used.
    uint32_t effective_elems_per_packet() const;
    /// Throws std::invalid_argument naming the first bad field.
    void validate() const;
};

/// Counters of one allreduce call (or, from total_stats(), of all calls).
struct CommStats {
    uint64_t packets_sent = 0; ///< datagrams handed to the transport, retransmissions included
    uint64_t bytes_sent = 0;   ///< UDP payload bytes
    uint64_t packets_received = 0;
    uint64_t bytes_received = 0;
    uint64_t results = 0;         ///< results accepted (one per step)
    uint64_t retransmissions = 0; ///< packets sent again after a timeout
    uint64_t timeouts = 0;        ///< retransmission timer expiries
    uint64_t duplicates = 0;      ///< results of this call for an already finished step
    uint64_t stale = 0;           ///< results of another call, set or slot
    uint64_t malformed = 0;       ///< datagrams that are not a result for this job
    double seconds = 0;

    CommStats &operator+=(const CommStats &o);
};

/// Raised when the switch made no progress; names the stuck slot and chunk.
struct CommTimeout : std::runtime_error {
    CommTimeout(const std::string &what, uint32_t rank_, uint32_t job_, uint32_t slot_,
                uint64_t chunk_)
        : std::runtime_error(what), rank(rank_), job(job_), slot(slot_), chunk(chunk_) {}
    uint32_t rank, job, slot;
    uint64_t chunk;
};

class Communicator {
  public:
    /// Open cfg.transport (UDP socket bound to local_ip:local_port, or an
    /// AF_XDP socket on the interface holding local_ip). Throws
    /// std::invalid_argument for a bad config, std::system_error when the
    /// socket cannot be set up.
    explicit Communicator(CommConfig cfg);
    /// Use a caller-provided transport (tests, AF_XDP).
    Communicator(CommConfig cfg, std::unique_ptr<Transport> transport);
    /// Calls close() with a deadline of at most 5 s unless it was called or
    /// a collective failed; errors are printed to stderr, never thrown.
    ~Communicator();
    Communicator(const Communicator &) = delete;
    Communicator &operator=(const Communicator &) = delete;

    /// recv[i] = op over all ranks of send[i], for i < count. send == recv is
    /// allowed (in place); otherwise the buffers must not overlap. Int32 is
    /// bit-exact (wrapping sum); Float32 is within quant::result_bound().
    /// Throws std::invalid_argument for NaN/Inf input or an op the wire cannot
    /// carry (SwitchML: Sum only), CommTimeout when the switch stalls. After a
    /// CommTimeout the communicator is unusable (std::logic_error).
    void allreduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op);

    void allreduce(std::span<const int32_t> send, std::span<int32_t> recv, ReduceOp op);
    void allreduce(std::span<const float> send, std::span<float> recv, ReduceOp op);

    /// Collective: returns once every rank entered it (a one-element int32
    /// allreduce). Tools call it before timing a collective so that the skew
    /// between ranks is not measured.
    void barrier();

    /// Collective: leave every slot this communicator used with an even number
    /// of uses, i.e. its next use in set 0 and the rank's bit clear there, so
    /// a later communicator on the same job (a new process) starts cleanly.
    /// Costs at most one small packet per slot. Idempotent.
    void close();

    const CommStats &last_stats() const;
    const CommStats &total_stats() const;
    const CommConfig &config() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace incxdp
