// SPDX-License-Identifier: BSD-2-Clause
// RoCEv2 through libibverbs: one rank's RC connection to its switch on a
// real RDMA device (a RoCE NIC, or Soft-RoCE: `rdma link add rxe0 type rxe
// netdev eth0`), instead of frames built in user space and sent over AF_XDP.
// Built only where libibverbs is (INCXDP_HAVE_VERBS=1).
//
// The protocol is docs/ROCE.md's, unchanged; the device runs the RC
// machinery the AF_XDP path does by hand: PSNs, AckReq, ICRC, UDP source
// port, go-back-N on a NAK or an ACK timeout, ACKs of the switch's results.
//
// Connection (plan_tree(topo, job).conn_of_rank(rank), verbs_config_from()):
//   RoceConn          here                        ibv_qp_attr
//   parent_qpn        VerbsConfig::remote_qpn     dest_qp_num        (RTR)
//   down_base         VerbsConfig::rq_psn         rq_psn             (RTR)
//   up_base           VerbsConfig::sq_psn         sq_psn             (RTS)
//   parent_ip         VerbsConfig::switch_ip      ah_attr.grh.dgid = ::ffff:<ip> (RTR)
//   child_ip          VerbsConfig::local_ip       ah_attr.grh.sgid_index = the
//                                                 port's RoCEv2 GID of that IP
//   child_qpn         (not used)                  assigned by the device: qp_num()
//   child_sport       (not used)                  the device picks the UDP source port
// The switch must therefore be told qp_num() as the connection's child QPN
// before the first result comes down (create the session, publish qp_num(),
// then connect() or run()), and must not key the connection on the UDP
// source port. MACs come from the kernel's neighbour table through the
// GID's netdev, as for any RoCE QP; the device decides AckReq (rxe sets it
// on every message).
//
// Packets (run()): packet k of a collective (RocePackets, the same the
// AF_XDP engine sends) is one SEND_WITH_IMM at the session's next idx,
// payload and ImmDt from build(k) (n big-endian int32, <= max_payload; the
// ImmDt in network order on the wire), posted in idx order with at most
// `window` without a result; every `signal_every`-th WR and the last of a
// run are signaled, and a signaled completion frees the send buffers up to
// its WR (send completions still due when a run ends are taken by the next
// one). Results come as SENDs on the switch's down PSN stream:
// RC delivers them in PSN order, one receive WR each, so the k-th receive
// completion is idx k. The session's idx runs on across run() calls, like
// the PSN streams (a new session needs `incxdp rules apply` or `incxdp job
// reset` on the switches first, as any new RC connection would).
//
// One SEND must be one packet (the PSN names the idx): the port's path MTU
// must be >= max_payload, else the constructor refuses (rxe takes its MTU
// from the netdev's less 80 B: 1500 gives 1024, 2128 or more gives 2048).
//
// What the device expects of the switch, beyond what AF_XDP hosts need:
// - an ACK for each of our SENDs eventually (cumulative ACKs are fine): a
//   SEND that is never ACKed is resent (ack_timeout) retry_cnt times, then
//   the QP fails with IBV_WC_RETRY_EXC_ERR;
// - a lost result is recovered only through the device's NAK (sequence
//   error, once per gap) when a later result arrives: there is no host
//   timer that resends, so the tail of a window is not recovered by the
//   host. run() ends with VerbsTimeout after `timeout` without completions.
#pragma once

#include "roce_packets.h"

#include <incxdp/roce.h>
#include <incxdp/tree.h>

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::detail {

inline constexpr uint32_t kVerbsGidAuto = UINT32_MAX;

/// One rank's end of one RC connection, and how to run it.
struct VerbsConfig {
    std::string device;                 ///< "mlx5_0", "rxe0"; empty = the first holding local_ip
    uint8_t port = 0;                   ///< 0 = the port whose RoCEv2 GID is local_ip
    uint32_t gid_index = kVerbsGidAuto; ///< sgid index; auto = local_ip's RoCEv2 GID
    std::string local_ip;               ///< this rank's IPv4 address (RoceConn::child_ip)
    std::string switch_ip;              ///< the switch's IPv4 address (RoceConn::parent_ip)
    uint32_t remote_qpn = 0;            ///< the switch's QPN (RoceConn::parent_qpn)
    uint32_t sq_psn = 0;                ///< PSN of idx 0 up (RoceConn::up_base)
    uint32_t rq_psn = 0;                ///< PSN of idx 0 down (RoceConn::down_base)
    uint32_t window = 64;               ///< packets without a result, <= the job's slot pool
    uint32_t max_payload = ROCE_MAX_PAYLOAD;  ///< bytes per SEND and per receive buffer
    uint32_t signal_every = 32;               ///< one signaled send WR per this many
    uint8_t traffic_class = 0;                ///< GRH traffic class (DSCP << 2 | ECN)
    uint8_t hop_limit = 64;                   ///< GRH hop limit = IPv4 TTL
    uint8_t ack_timeout = 14;                 ///< local ACK timeout 4.096 us * 2^t (14: 67 ms)
    uint8_t retry_cnt = 7;                    ///< resends of an unACKed SEND before the QP fails
    uint8_t rnr_retry = 7;                    ///< 7 = retry forever on RNR NAK
    std::chrono::milliseconds timeout{30000}; ///< no completion for this long => VerbsTimeout
    std::chrono::microseconds spin{50};       ///< busy-poll this long before sleeping on the CQ
    const std::atomic<bool> *stop = nullptr;  ///< set and true: run() ends with VerbsInterrupted

    /// Throws std::invalid_argument naming the first bad field.
    void validate() const;
};

/// The config of the child end of `conn` (a host's: conn_of_rank(rank)).
VerbsConfig verbs_config_from(const topo::RoceConn &conn);

/// ImmDt in host order (docs/ROCE.md §2): dest_rank:16|prim:2|op:2|dtype:4|0:8.
inline uint32_t verbs_imm(uint16_t dest_rank, uint8_t prim, uint8_t op, uint8_t dtype) {
    return roce_imm_make(dest_rank, prim, op, dtype);
}
/// ibv_send_wr::imm_data and ibv_wc::imm_data are in network byte order.
__be32 imm_to_wire(uint32_t imm);
uint32_t imm_from_wire(__be32 imm);
/// Whether two ImmDt name the same collective (primitive, op, dtype).
bool imm_same_collective(uint32_t a, uint32_t b);

/// PSN of idx on a stream starting at base: (base + idx) mod 2^24.
inline uint32_t verbs_psn(uint32_t base, uint64_t idx) {
    return uint32_t((base + idx) & ROCE_PSN_MASK);
}

/// ::ffff:a.b.c.d, the RoCEv2 GID of an IPv4 address. Throws
/// std::invalid_argument naming `what` and the text.
ibv_gid ipv4_mapped_gid(const std::string &ip, const char *what = "address");
/// "::ffff:10.0.0.1" or the GID as 8 hex groups.
std::string gid_to_string(const ibv_gid &g);

/// Bytes of an IBA MTU (IBV_MTU_1024 -> 1024); 0 for a bad value.
uint32_t mtu_bytes(ibv_mtu m);
/// The path MTU to use: the smallest IBA MTU >= max_payload, which the
/// port's active MTU must reach. Throws std::invalid_argument naming both.
ibv_mtu path_mtu_for(uint32_t max_payload, ibv_mtu active);

/// Where the QP sends from: port, source GID index, path MTU.
struct VerbsPath {
    uint8_t port = 1;
    uint32_t sgid_index = 0;
    ibv_mtu mtu = IBV_MTU_2048;
};

/// One ibv_modify_qp() call: the attributes and their mask.
struct QpTransition {
    ibv_qp_attr attr{};
    int mask = 0;
};
QpTransition init_attr(const VerbsPath &path);
QpTransition rtr_attr(const VerbsConfig &cfg, const VerbsPath &path);
QpTransition rts_attr(const VerbsConfig &cfg);

/// Posting and completion bookkeeping of one run, apart from the device.
/// A send is posted when the window and the send queue allow it; results
/// arrive in idx order; send slots are freed by signaled completions.
class VerbsWindow {
  public:
    /// window: packets without a result; sq_depth: send WRs without a
    /// completion (= send buffers); signal_every <= sq_depth.
    VerbsWindow(uint32_t window, uint32_t sq_depth, uint32_t signal_every);

    void start(uint64_t n_packets); ///< a new run; the send sequence runs on
    bool can_post() const;
    /// Whether the next post must be signaled: every signal_every-th, and
    /// the last one of the run.
    bool signal_next() const;
    /// Record the next post: its packet (0-based in the run) and send seq.
    struct Post {
        uint64_t idx, seq;
        bool signaled;
    };
    Post post();
    /// A signaled send completed: every WR up to seq is done.
    void send_done(uint64_t seq);
    /// The next result arrived; returns its packet. Throws std::logic_error
    /// if no packet is waiting for one.
    uint64_t result();

    bool done() const { return results_ == n_; }
    uint64_t posted() const { return next_; }          ///< packets posted this run
    uint64_t results() const { return results_; }      ///< results this run
    uint64_t seq() const { return seq_; }              ///< send WRs posted ever
    uint64_t sq_free_from() const { return sq_done_; } ///< send WRs completed ever
    uint32_t sq_depth() const { return sq_depth_; }

  private:
    uint32_t window_, sq_depth_, signal_every_;
    uint64_t n_ = 0, next_ = 0, results_ = 0;
    uint64_t seq_ = 0, sq_done_ = 0, last_signaled_ = 0;
};

/// run()'s counters.
struct VerbsRunStats {
    uint64_t packets_sent = 0, bytes_sent = 0;
    uint64_t results = 0, bytes_received = 0;
    uint64_t send_completions = 0; ///< signaled ones
    uint64_t cq_sleeps = 0;        ///< times the CQ was empty past `spin`
    double seconds = 0;
};

/// No completion for VerbsConfig::timeout; names the packet that waits.
struct VerbsInterrupted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct VerbsTimeout : std::runtime_error {
    VerbsTimeout(const std::string &what, uint64_t idx_) : std::runtime_error(what), idx(idx_) {}
    uint64_t idx; ///< the session's idx whose result did not come
};

/// The device, port and GID a config selects, opened, with a PD.
class VerbsDevice {
  public:
    /// Throws std::runtime_error: no device (the available() reason), no
    /// device/port/GID matching the config (saying what there is), a port
    /// that is not ACTIVE; std::system_error when a verbs call fails.
    explicit VerbsDevice(const VerbsConfig &cfg);
    ~VerbsDevice();
    VerbsDevice(const VerbsDevice &) = delete;
    VerbsDevice &operator=(const VerbsDevice &) = delete;

    ibv_context *context() const { return ctx_; }
    ibv_pd *pd() const { return pd_; }
    const std::string &name() const { return name_; }
    uint8_t port() const { return port_; }
    uint32_t gid_index() const { return gid_index_; }
    const ibv_gid &gid() const { return gid_; }
    ibv_mtu active_mtu() const { return active_mtu_; }
    /// "rxe0 port 1 gid 1 (::ffff:10.79.0.1)"
    std::string describe() const;

  private:
    ibv_context *ctx_ = nullptr;
    ibv_pd *pd_ = nullptr;
    std::string name_;
    uint8_t port_ = 0;
    uint32_t gid_index_ = 0;
    ibv_gid gid_{};
    ibv_mtu active_mtu_ = IBV_MTU_1024;
};

/// One rank's RC QP to its switch. Not thread-safe.
class VerbsSession {
  public:
    /// Whether any RDMA device exists; if not, `why` says what is missing.
    static bool available(std::string *why = nullptr);

    /// Opens the device, creates CQ, QP (left in INIT), buffers. Throws as
    /// VerbsDevice, std::invalid_argument for a bad config.
    explicit VerbsSession(VerbsConfig cfg);
    ~VerbsSession();
    VerbsSession(const VerbsSession &) = delete;
    VerbsSession &operator=(const VerbsSession &) = delete;

    /// The QPN the device gave us: the switch's child QPN of the connection.
    uint32_t qp_num() const;
    /// INIT -> RTR -> RTS with the config's QPN and PSNs. run() calls it if
    /// not done; call it yourself to connect before the first packet.
    void connect();

    /// One collective: call.count() SENDs, packet k with call.build(k)'s
    /// payload and ImmDt, posted in order once call.ready(k); each result
    /// handed to call.consume() in order after checking its ImmDt names
    /// packet k's collective and its length is call.result_elems(k) int32.
    /// Throws VerbsTimeout, or std::runtime_error on a failed completion
    /// (the QP is then in error and the session unusable: std::logic_error
    /// afterwards) or a result that fails those checks.
    VerbsRunStats run(RocePackets &call);

    /// Packets sent (and results taken) over all runs: the next idx.
    uint64_t next_idx() const { return idx_base_; }
    const VerbsDevice &device() const { return *dev_; }
    const VerbsConfig &config() const { return cfg_; }
    /// "rxe0 port 1 gid 1 (::ffff:10.79.0.1) qpn 0x000011 -> 10.79.0.251 qpn 0x010012"
    std::string describe() const;

  private:
    struct Impl;
    void post_ready(RocePackets &call, VerbsRunStats &st);
    /// Completions into wc[0..32); 0 once give_up passed without any.
    int poll_wait(ibv_wc *wc, std::chrono::steady_clock::time_point give_up, VerbsRunStats &st);
    void take_completion(const ibv_wc &wc, RocePackets &call, VerbsRunStats &st);
    std::string completion_error(const ibv_wc &wc) const;

    VerbsConfig cfg_;
    std::unique_ptr<VerbsDevice> dev_;
    std::unique_ptr<Impl> impl_;
    uint64_t idx_base_ = 0;
    bool connected_ = false;
    bool failed_ = false;
};

} // namespace incxdp::detail
