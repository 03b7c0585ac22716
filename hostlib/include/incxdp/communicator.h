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
//
// Protocol::Roce speaks RoCEv2 to a tree of switches instead
// (docs/ROCE.md): one packet per index of the job's sequence, go-back-N,
// carried by AF_XDP frames or by an RDMA device (Carrier::Verbs).
#pragma once

#include <incxdp/reduce_op.h>
#include <incxdp/transport.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

namespace incxdp {

/// What a worker speaks to the switch (docs/HOSTLIB.md §5). The job kind
/// decides it (CommConfig::from_topology): star and tree jobs native,
/// roce-tree jobs roce.
enum class Protocol {
    Native, ///< incxdp native or SwitchML header over UDP (CommConfig::wire)
    Roce,   ///< RoCEv2 RC SENDs to a roce-tree job's leaf switch
};

/// What moves the protocol's frames. Valid pairs (the table in carrier.cpp):
/// native over socket or af_xdp, roce over af_xdp or verbs.
enum class Carrier {
    /// native: AfXdp where it binds to the interface holding local_ip, else
    /// Socket with one line on stderr saying why (loopback: Socket without a
    /// word); roce: AfXdp.
    Auto,
    Socket, ///< a kernel UDP socket (sendmmsg/recvmmsg, GSO, GRO)
    AfXdp,  ///< an AF_XDP socket on the worker's interface (root)
    Verbs,  ///< an RDMA device's RC QP (a RoCE NIC or rxe; libibverbs)
};

/// "native", "roce"
const char *to_string(Protocol p);
/// "auto", "socket", "af_xdp", "verbs"
const char *to_string(Carrier c);
/// "native/af_xdp", "roce/verbs": the pair, for logs.
std::string to_string(Protocol p, Carrier c);

/// Empty when `c` can carry `p` (Auto always can); else why it cannot and
/// what to use instead, for an error message.
std::string carrier_refusal(Protocol p, Carrier c);

/// A name users type for a carrier: a carrier name (auto, socket, af_xdp,
/// verbs) or an old transport spelling (udp = socket, afxdp and xdp =
/// af_xdp, roce = roce over af_xdp). `protocol` is set only when the name
/// says which (roce).
struct CarrierName {
    std::optional<Protocol> protocol;
    Carrier carrier = Carrier::Auto;
};
/// Throws std::invalid_argument naming the text and the accepted names.
CarrierName parse_carrier(const std::string &s);

/// Protocol::Roce: this rank's RC connection to its leaf switch
/// (topo::RoceConn of the rank, docs/ROCE.md §1). The frames go from
/// local_ip:sport to switch_ip:4791, the switch's frames to local_ip:4791.
struct RoceConnConfig {
    uint32_t local_qpn = 0;  ///< this host's QPN: destination QPN of the switch's frames
    uint32_t remote_qpn = 0; ///< the switch's QPN: destination QPN of our frames
    uint32_t up_base = 0;    ///< PSN of idx 0 in our stream (mod 2^24)
    uint32_t down_base = 0;  ///< PSN of idx 0 in the switch's stream to us
    uint16_t sport = 0;      ///< UDP source port of our frames
    uint32_t pool = 0;       ///< the job's slot pool; window must not exceed it (0: unchecked)
    uint32_t ack_every = 32; ///< AckReq on every this many packets (and before blocking)
    /// The leaf takes our SENDs in any order within the window (the job's
    /// `host_order: any`, topology.h) instead of strictly in PSN order. A
    /// timeout then resends only the frames that are overdue, never the
    /// window behind them (docs/ROCE.md §4).
    bool any_order = false;
    /// Before the first call, ask the leaf where the job's sequence stands
    /// and check that every rank stands there (docs/ROCE.md "Consecutive
    /// runs"): a new process continues a job without `incxdp rules apply`.
    /// false: start at idx 0 of the bases (tests that script the leaf).
    bool start_handshake = true;
    /// Zero: the interface's MAC / the neighbour table's entry for switch_ip,
    /// looked up when Communicator(CommConfig) opens the transport.
    std::array<uint8_t, 6> local_mac{}, switch_mac{};
};

/// Carrier::Verbs: the RDMA device (a RoCE NIC, or rxe) that carries
/// the rank's RC connection (docs/ROCE.md §6). The device runs RC itself
/// (PSNs, AckReq, ICRC, go-back-N), chooses the UDP source port and gives
/// the QP its number, which the switch must learn before the first packet.
struct VerbsOptions {
    std::string device;              ///< "mlx5_0", "rxe0"; empty = the one whose GID is local_ip
    uint32_t gid_index = UINT32_MAX; ///< source GID; UINT32_MAX = local_ip's RoCEv2 GID
    uint8_t ack_timeout = 14;        ///< local ACK timeout 4.096 us * 2^t (14: 67 ms)
    uint8_t retry_cnt = 7;           ///< resends of an unACKed SEND before the QP fails
    /// Called once with the QPN the device assigned, before anything is
    /// sent; must return only once the rank's leaf switch has it as the
    /// connection's child QPN (`incxdp rules set-qpn`). Null: the topology's
    /// child QPN must already be the device's (it rarely is).
    std::function<void(uint32_t qpn)> publish_qpn;
};

/// Everything a rank needs to reach the switch. All ranks of a job must use
/// the same world_size, job, window, elems_per_packet and wire.
struct CommConfig {
    uint32_t rank = 0;
    uint32_t world_size = 1;  ///< workers in the job, <= 32 (roce: <= 64)
    uint32_t job = 0;         ///< job id installed on the switch
    std::string switch_ip;    ///< switch service address
    uint16_t switch_port = 0; ///< 0 = wire default: 0xBEF0 native, 0xBEE0 SwitchML
    std::string local_ip;     ///< this worker's address (bound)
    uint16_t local_port = 0;  ///< this worker's UDP port (the switch's worker table)
    uint32_t window = 64;     ///< slots in flight, <= the job's slot pool
    uint32_t elems_per_packet =
        0;            ///< 0 = default: 832 native, 256 SwitchML, 512 roce (capped by mtu)
    uint32_t mtu = 0; ///< IP MTU of the worker's link; 0 = unknown, not checked
    Wire wire = Wire::Native;
    std::chrono::milliseconds timeout{20};        ///< first retransmission timeout
    std::chrono::milliseconds max_timeout{200};   ///< backoff doubles up to this
    uint32_t max_retries = 0;                     ///< per packet; 0 = unlimited
    std::chrono::milliseconds deadline{30000};    ///< no result at all for this long => CommTimeout
    /// Set and true: the running collective stops with CommInterrupted at
    /// its next turn (a signal ends the wait it sleeps in), so that a tool's
    /// SIGINT handler only has to store true (async-signal-safe) and the
    /// communicator's destructor still puts the interface's XDP program back.
    const std::atomic<bool> *stop = nullptr;
    /// What this rank speaks to the switch: the job's (from_topology).
    Protocol protocol = Protocol::Native;
    /// What carries it (use_carrier()). Communicator(CommConfig) replaces
    /// Auto by what it opened, so config() tells.
    Carrier carrier = Carrier::Auto;
    int socket_buffer = 8 << 20;                  ///< UDP SO_RCVBUF/SO_SNDBUF bytes
    uint32_t batch = 64;            ///< datagrams per sendmmsg/recvmmsg or ring operation
    bool udp_gso = true;            ///< UDP: UDP_SEGMENT on send
    bool udp_gro = false;           ///< UDP: UDP_GRO on receive (did not pay: docs/PERF.md)
    std::string xdp_iface;          ///< AfXdp: interface; empty = the one holding local_ip
    uint32_t xdp_queue = 0;         ///< AfXdp: rx queue of the first socket
    bool xdp_follow_queues = true;  ///< AfXdp: sockets on the other rx queues frames arrive on
    bool xdp_tx_live_frames = true; ///< AfXdp: send as live XDP frames, not via the tx ring
    RoceConnConfig roce;            ///< Protocol::Roce: the connection (from_topology fills it)
    VerbsOptions verbs;             ///< Verbs: the device

    /// Fill rank, world_size, job, addresses and ports from a topology file:
    /// local = the rank's host IP and the job's worker_port, remote = the
    /// job's switch IP (a tree job: the rank's leaf), window = min(128, job
    /// slots), mtu = the topology's, protocol native, carrier Auto.
    /// For a `kind: roce-tree` job: protocol roce, local = the rank's host
    /// IP and port 4791, remote = its leaf switch, `roce` from the job's
    /// tree (topo::plan_tree, the rank's connection), window = min(1024, pool).
    /// Throws std::invalid_argument naming the file and what is wrong.
    static CommConfig from_topology(const std::string &path, uint32_t job_id, uint32_t rank);

    /// The one place a carrier is chosen by name (parse_carrier(): carrier
    /// names and the old transport spellings; empty: no change). With
    /// `job_desc` ("job 1 of topo.yaml"), the protocol is that job's, as
    /// from_topology() set it, and a name it cannot use is refused saying
    /// why and what fits. Without (a config built by hand), a name that says
    /// its protocol (roce) or a carrier only one protocol uses (socket:
    /// native, verbs: roce) sets the protocol. Throws std::invalid_argument.
    void use_carrier(const std::string &name, const std::string &job_desc);

    /// A rank of a roce-tree job (the RoCEv2 protocol).
    bool roce_tree() const { return protocol == Protocol::Roce; }
    /// "native/af_xdp", "roce/verbs".
    std::string transport_name() const { return to_string(protocol, carrier); }
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
    uint64_t retransmissions = 0; ///< packets sent again (timeout, NAK or fast retransmit)
    uint64_t fast_retransmits = 0; ///< roce: of those, resent because later results came back
    /// roce: how many later results may come back before a missing one is
    /// resent (learnt from the reordering seen; a maximum, not a sum)
    uint64_t reorder = 0;
    uint64_t timeouts = 0;        ///< retransmission timer expiries
    /// roce, strict order: losses that sent us back (a NAK or a probe's
    /// answer, once per loss), each halving the frames kept in flight
    /// (down to 128, or the window if smaller)
    uint64_t window_cuts = 0;
    uint64_t duplicates = 0;      ///< results of this call for an already finished step
    uint64_t stale = 0;           ///< results of another call, set or slot
    uint64_t malformed = 0;       ///< datagrams that are not a result for this job
    uint64_t acks = 0;            ///< roce: ACKs from the switch
    uint64_t naks = 0;            ///< roce: NAKs (PSN sequence error): went back N
    uint64_t bad_icrc = 0;        ///< roce: frames with a wrong ICRC, dropped
    /// Frames for us the kernel dropped for want of room in our receive
    /// queue (AF_XDP and roce: Transport::rx_dropped; 0 for udp and verbs)
    uint64_t rx_dropped = 0;
    double seconds = 0;

    CommStats &operator+=(const CommStats &o);
};

/// Raised when the switch made no progress; names the stuck slot and chunk
/// (roce: chunk = the packet index idx of the job's sequence, slot = idx % pool).
struct CommTimeout : std::runtime_error {
    CommTimeout(const std::string &what, uint32_t rank_, uint32_t job_, uint32_t slot_,
                uint64_t chunk_)
        : std::runtime_error(what), rank(rank_), job(job_), slot(slot_), chunk(chunk_) {}
    uint32_t rank, job, slot;
    uint64_t chunk;
};

/// Raised when CommConfig::stop became true during a collective. The
/// communicator is unusable afterwards, as after a CommTimeout.
struct CommInterrupted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Communicator {
  public:
    /// Open cfg.carrier for cfg.protocol (a UDP socket bound to
    /// local_ip:local_port, an AF_XDP socket on the interface holding
    /// local_ip, or an RDMA device; Auto: see Carrier::Auto, config()
    /// telling what was opened). Throws std::invalid_argument for a bad
    /// config or pair, std::system_error when the carrier cannot be set up.
    explicit Communicator(CommConfig cfg);
    /// Use a caller-provided transport (tests) as the carrier of cfg.protocol;
    /// cfg.carrier must not be Verbs (the device is its own carrier).
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

    /// recv[i] = op over all ranks of send[i] on rank `root`; recv is only
    /// written there (other ranks may pass nullptr). Same rules and errors as
    /// allreduce; every rank must pass the same root (< world_size).
    /// Roce: the switches send the data down to the root only. UDP/AF_XDP:
    /// an allreduce whose result only the root keeps.
    void reduce(const void *send, void *recv, size_t count, DType dtype, ReduceOp op,
                uint32_t root);

    /// buf on every rank = buf of rank `root`, bit for bit (any dtype).
    /// Roce: the root's packets are the only ones with data. UDP/AF_XDP: an
    /// int32 sum of the raw bits with zeros from every other rank.
    void broadcast(void *buf, size_t count, DType dtype, uint32_t root);

    /// recv (world_size * count elements) = every rank's send, rank r's at
    /// recv + r * count. Exact for any dtype: the bits travel as an int32
    /// sum with zeros, as broadcast's do. recv must not overlap send unless
    /// send == recv + rank * count (in place).
    void allgather(const void *send, void *recv, size_t count, DType dtype);

    /// send has world_size * count elements; recv (count elements) = op over
    /// all ranks of this rank's block send[rank * count, (rank + 1) * count).
    /// Same rules and errors as allreduce.
    void reduce_scatter(const void *send, void *recv, size_t count, DType dtype, ReduceOp op);

    /// Collective: returns once every rank entered it (a one-element int32
    /// allreduce; roce: one payload-free Barrier packet). Tools call it
    /// before timing a collective so that the skew between ranks is not
    /// measured.
    void barrier();

    /// Collective: leave every slot this communicator used with an even number
    /// of uses, i.e. its next use in set 0 and the rank's bit clear there, so
    /// a later communicator on the same job (a new process) starts cleanly.
    /// Costs at most one small packet per slot. Idempotent. Roce: nothing to
    /// send (a new communicator needs `incxdp rules apply` / `job reset`).
    void close();

    const CommStats &last_stats() const;
    const CommStats &total_stats() const;
    const CommConfig &config() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace incxdp
