// SPDX-License-Identifier: BSD-2-Clause
// The state machine of the reference pcap switch (ref_pcap_switch.cpp): one
// switch of a roce-tree job, docs/ROCE.md §3 applied to one frame at a time
// in user space, as INC_Emulation's switch does (its psn_state_t: a mutex
// per slot). Knows nothing of pcap: frames come in as bytes with the index
// of the port they arrived on, and what goes out is queued per port.
//
// Aggregation is incxdp's, not the reference's shared PSN % N array: per
// connection idx = (PSN - base) mod 2^24, slot idx % pool, set (idx / pool) & 1.
#pragma once

#include "ref_pcap_frame.h"

#include <incxdp/tree.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

namespace incxdp::refsw {

/// Counters, named as the engine's (INCXDP_STATS in maps.h, `incxdp stats`)
/// where they mean the same. The one list: X(name) gives S_<name> and the
/// name stats_line() prints.
#define REFSW_STATS(X)                                                                             \
    X(rx)                                                                                          \
    X(not_roce)                                                                                    \
    X(roce_malformed)                                                                              \
    X(roce_bad_icrc)                                                                               \
    X(roce_unknown_qp)                                                                             \
    X(roce_absorbed)                                                                               \
    X(roce_ack)                                                                                    \
    X(roce_nak)                                                                                    \
    X(roce_ahead_drop)                                                                             \
    X(roce_up)                                                                                     \
    X(roce_down)                                                                                   \
    X(roce_dup_ack)                                                                                \
    X(roce_dup_result)                                                                             \
    X(roce_dup_up)                                                                                 \
    X(roce_stale)                                                                                  \
    X(roce_mismatch)                                                                               \
    X(roce_peer_ack)                                                                               \
    X(roce_peer_nak)                                                                               \
    X(retx_up)                                                                                     \
    X(tx)                                                                                          \
    X(tx_fail)

#define REFSW_STAT_ENUMERATOR_(name) S_##name,
enum Stat { REFSW_STATS(REFSW_STAT_ENUMERATOR_) kStatCount };
#undef REFSW_STAT_ENUMERATOR_

/// Frames to send, each for one port; built under a slot's mutex, sent after it.
class TxQueue {
  public:
    struct Frame {
        size_t port = 0;
        size_t len = 0;
        std::array<uint8_t, kMaxFrame> buf;
    };
    uint8_t *add(size_t port); ///< room for one frame; set_len() once it is built
    void set_len(size_t len) { frames_[n_ - 1]->len = len; }
    size_t size() const { return n_; }
    const Frame &operator[](size_t i) const { return *frames_[i]; }
    void clear() { n_ = 0; }

  private:
    std::vector<std::unique_ptr<Frame>> frames_;
    size_t n_ = 0;
};

/// One switch of the job's tree. on_frame() runs concurrently for different
/// ports (one capture thread each), never for the same port twice at once;
/// retransmit() runs beside them; reset() waits for both.
class Aggregator {
  public:
    Aggregator(const topo::TreePlan &plan, const std::string &name); ///< throws runtime_error

    /// The switch's interfaces, by port index: the children's, then the parent's.
    const std::vector<std::string> &ports() const { return port_ifaces_; }
    bool root() const { return root_; }
    uint32_t fanin() const { return fanin_; }
    uint32_t pool() const { return pool_; }

    /// One frame as captured on `port`: counted, maybe answered through `txq`.
    void on_frame(size_t port, const uint8_t *frame, size_t len, TxQueue &txq);

    /// The reference's retransmission pass (every 50 ms): an aggregate that
    /// got no result from the parent within `timeout` is sent up again, at
    /// most `batch` of them (a parent with the result answers with it).
    void retransmit(std::chrono::steady_clock::duration timeout, size_t batch, TxQueue &txq);

    /// Every connection back to idx 0 and every set empty, as `incxdp rules
    /// apply` does for the engine before a new set of host processes.
    void reset();

    void count(Stat s) { stats_[s].fetch_add(1, std::memory_order_relaxed); }
    /// " name=value" for every counter that is not 0 (rx always).
    std::string stats_line() const;

  private:
    enum class Role { Child, Parent };

    // One RC connection: one per port, a link carries one connection of the job.
    struct Conn {
        Role role = Role::Child;
        bool strict = true; // a host child: in order only, go-back-N
        uint64_t bit = 0;   // Child: its bit in a set's bitmap
        size_t port = 0;
        Mac peer_mac{};
        uint32_t peer_ip = 0; // network order
        uint32_t own_qpn = 0; // destination QPN of the peer's frames
        uint32_t rx_base = 0; // PSN of idx 0 in the peer's stream
        uint32_t tx_base = 0; // PSN of idx 0 in ours
        uint64_t subtree = 0; // Child: ranks at or below the peer
        Endpoint tx;          // how our frames to the peer are addressed
        // Receive state: only the port's capture thread touches it.
        uint32_t epsn = 0, msn = 0, imm = 0;
        bool nak_sent = false;
    };

    // One aggregation set; `vals` in host order.
    struct Set {
        bool used = false;
        uint32_t idx = 0;
        uint64_t bitmap = 0;
        uint32_t count = 0, imm = 0, nelems = 0;
        bool has_payload = false; // Broadcast: the root rank's values are in
        bool complete = false;
        bool result = false; // holds the job's result (root, or it came down)
        std::chrono::steady_clock::time_point up_sent{};
        int32_t *vals = nullptr;
    };

    // The reference's psn_state_t: a mutex around the slot's state.
    struct Slot {
        std::mutex mu;
        Set set[2];
    };

    void add_conn(Conn c, const std::string &iface);
    Conn *conn_of(uint32_t qpn);
    Slot &slot_of(uint32_t idx) { return slots_[idx & (pool_ - 1)]; }
    Set &set_of(Slot &s, uint32_t idx) { return s.set[(idx / pool_) & 1]; }
    bool send_ok(const Conn &c, const View &v, uint32_t &imm);

    void from_child(Conn &c, const View &v, TxQueue &txq);
    void aggregate(Set &s, uint32_t imm, const uint8_t *payload, uint32_t n);
    void duplicate(Conn &c, Set &s, uint32_t idx, TxQueue &txq);
    void from_parent(Conn &c, const View &v, TxQueue &txq);
    void peer_ack(Conn &c, const View &v, TxQueue &txq);

    void ack(TxQueue &txq, const Conn &c, uint32_t psn, uint32_t syn_msn);
    void result_to(const Conn &c, const Set &s, TxQueue &txq);
    void multicast(const Set &s, TxQueue &txq);
    void send_up(Set &s, TxQueue &txq);

    bool root_ = false;
    uint32_t pool_ = 0, fanin_ = 0;
    std::vector<Conn> conns_;
    std::vector<std::string> port_ifaces_;
    std::optional<size_t> parent_;
    std::vector<int32_t> vals_;
    std::unique_ptr<Slot[]> slots_;
    std::shared_mutex state_mu_; // shared per frame, exclusive for reset()
    std::array<std::atomic<uint64_t>, kStatCount> stats_{};
};

} // namespace incxdp::refsw
