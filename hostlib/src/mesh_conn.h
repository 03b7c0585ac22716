// SPDX-License-Identifier: BSD-2-Clause
// One p2p connection's reliability (docs/MESH.md §Point-to-point): the send
// window of numbered segments, cumulative + selective acks, retransmission
// on a later segment's ack (a lost frame) or on timeout, and the receive
// side that puts segments into the posted buffers, in posting order, or holds
// them until the receive is posted. Pure logic over a clock and a frame
// sink: the endpoint owns the sockets.
#pragma once

#include <incxdp/mesh.h>
#include <incxdp/mesh_p2p.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace incxdp::mesh {

using Clock = std::chrono::steady_clock;
using Time = Clock::time_point;

/// incxdp_p2p_hdr in host order.
struct P2pHeader {
    uint8_t type = 0;
    uint16_t window = 0;
    uint32_t dst_conn = 0, src_conn = 0, seq = 0, msg_id = 0;
    int32_t tag = 0;
    uint64_t msg_off = 0, msg_len = 0;
};
incxdp_p2p_hdr encode(const P2pHeader &h);
/// Empty if shorter than the header or of another version.
std::optional<P2pHeader> decode(std::span<const uint8_t> frame);

/// A frame the connection wants sent; `body` points into a user buffer
/// (DATA) or into `extra` (an ACK's bitmap).
struct TxFrame {
    uint32_t dst_node = 0;
    uint8_t path = 0;
    P2pHeader hdr;
    const uint8_t *body = nullptr;
    size_t body_len = 0;
    std::vector<uint8_t> extra;
};

struct Request {
    enum class Kind { Send, Recv } kind = Kind::Send;
    Comm *comm = nullptr;
    bool done = false;
    // send
    const uint8_t *data = nullptr;
    uint64_t size = 0;
    uint32_t msg_id = 0;
    int tag = 0;
    uint64_t segs_total = 0, segs_acked = 0;
    bool segmented = false;
    // receive: messages first_msg .. first_msg + n - 1
    int n = 0;
    uint32_t first_msg = 0;
    void *bufs[kMaxRecvs] = {};
    size_t caps[kMaxRecvs] = {};
    int tags[kMaxRecvs] = {};
    int64_t slot_msg[kMaxRecvs] = {}; ///< message bound to the slot, -1 none
    uint64_t got[kMaxRecvs] = {}, len[kMaxRecvs] = {};
    bool slot_done[kMaxRecvs] = {};
};

struct Comm {
    enum class State { Connecting, Established, Closing, Failed };
    State state = State::Connecting;
    uint32_t id = 0;        ///< ours
    uint32_t peer_node = 0; ///< the other endpoint
    uint32_t peer_conn = 0; ///< its id; 0 until the handshake completes
    uint32_t listen_id = 0; ///< connector: the listener's; acceptor: ours
    bool accepted = false;  ///< acceptor: handed out by accept()
    bool peer_closed = false;
    uint8_t path = 0;
    uint32_t peer_window = 0;
    std::string error; ///< Failed: why
    ErrorKind error_kind = ErrorKind::System;
    Time started{}, last_progress{}, last_ctrl{};
    CommStats stats;

    // Send side.
    struct Seg {
        Request *req = nullptr;
        uint64_t off = 0;
        uint32_t len = 0;
        Time sent{};
        uint64_t order = 0; ///< when it was last sent, in sends of this connection
        bool live = false, acked = false;
    };
    std::vector<Seg> inflight; ///< seq % window
    uint32_t snd_una = 0, snd_nxt = 0, next_msg = 0;
    std::deque<Request *> unsent; ///< front: being cut into segments
    uint64_t cut_off = 0;
    std::deque<Request *> sends;             ///< not yet done, posting order
    uint64_t send_order = 0, rack_order = 0; ///< last sent; latest sent of those acked
    Time rto_deadline{};
    double rto_s = 0;
    uint32_t backoffs = 0;

    // Receive side.
    std::vector<bool> have; ///< seq % window, for rcv_nxt .. rcv_nxt + window - 1
    uint32_t rcv_nxt = 0, next_recv_msg = 0;
    uint32_t rcv_high = 0; ///< one past the highest seq held
    bool ack_due = false;
    struct Stashed {
        uint64_t len = 0;
        int tag = 0;
        std::vector<std::pair<uint64_t, std::vector<uint8_t>>> pieces;
    };
    std::map<uint32_t, Stashed> stash; ///< messages whose receive is not posted yet
    std::deque<Request *> recvs;       ///< posted, not done

    std::vector<std::unique_ptr<Request>> pool; ///< every live request of the comm
};

/// What a connection's reliability needs from its owner.
struct ConnEnv {
    const Options &opts;
    size_t max_segment;                   ///< payload bytes per DATA
    std::function<void(TxFrame &&)> emit; ///< queue a frame
};

void conn_init(Comm &c, uint32_t window, double rto_s, Time now);
/// A DATA segment from the peer (may fail the connection: truncation).
void conn_on_data(Comm &c, const P2pHeader &h, std::span<const uint8_t> payload, Time now);
void conn_on_ack(Comm &c, const P2pHeader &h, std::span<const uint8_t> bitmap, Time now,
                 const ConnEnv &env);
/// Binds the stashed messages a newly posted receive covers.
void conn_post_recv(Comm &c, Request *r);
/// Sends new segments within the window, retransmits what timed out, sends
/// a pending ACK; marks the connection Failed after timeout_s without
/// progress. `describe_path` names the path for the error.
void conn_pump(Comm &c, Time now, const ConnEnv &env,
               const std::function<std::string()> &describe_path, bool *timed_out);
/// The ACK for the current receive state.
TxFrame conn_make_ack(const Comm &c, uint8_t type);
void conn_fail(Comm &c, ErrorKind k, const std::string &why);

} // namespace incxdp::mesh
