// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_conn.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <cstring>

namespace incxdp::mesh {
namespace {

// Sequence numbers wrap: compare by signed distance.
bool before(uint32_t a, uint32_t b) {
    return static_cast<int32_t>(a - b) < 0;
}

// New segments one pump may send: a window's worth at once would overrun
// the 256-frame rings of the veths on the way before anyone drains them.
constexpr uint32_t kBurst = 128;

uint32_t send_window(const Comm &c) {
    uint32_t w = static_cast<uint32_t>(c.inflight.size());
    return c.peer_window ? std::min(w, c.peer_window) : w;
}

void emit_data(Comm &c, uint32_t seq, Comm::Seg &s, Time now, const ConnEnv &env) {
    TxFrame f;
    f.dst_node = c.peer_node;
    f.path = c.path;
    f.hdr.type = INCXDP_P2P_DATA;
    f.hdr.dst_conn = c.peer_conn;
    f.hdr.src_conn = c.id;
    f.hdr.seq = seq;
    f.hdr.msg_id = s.req->msg_id;
    f.hdr.tag = s.req->tag;
    f.hdr.msg_off = s.off;
    f.hdr.msg_len = s.req->size;
    f.body = s.req->data + s.off;
    f.body_len = s.len;
    s.sent = now;
    s.order = ++c.send_order;
    c.stats.segments_sent++;
    env.emit(std::move(f));
}

void finish_send(Comm &c, Request *r) {
    r->done = true;
    c.sends.erase(std::find(c.sends.begin(), c.sends.end(), r));
}

void ack_seg(Comm &c, uint32_t seq, bool *progress) {
    auto &s = c.inflight[seq % c.inflight.size()];
    if (!s.live || s.acked)
        return;
    s.acked = true;
    *progress = true;
    c.rack_order = std::max(c.rack_order, s.order);
    c.stats.bytes_sent += s.len;
    Request *r = s.req;
    r->segs_acked++;
    if (r->segmented && r->segs_acked == r->segs_total && !r->done)
        finish_send(c, r);
}

int bind_slot(Comm &c, Request *r, uint32_t msg, int tag) {
    for (int i = 0; i < r->n; i++)
        if (r->slot_msg[i] == msg)
            return i;
    for (int i = 0; i < r->n; i++)
        if (r->slot_msg[i] < 0 && (r->n == 1 || r->tags[i] == tag)) {
            r->slot_msg[i] = msg;
            return i;
        }
    conn_fail(c, ErrorKind::InvalidUsage,
              fmt::format("message {} from node {:#010x} has tag {}, which no buffer of the "
                          "grouped receive has",
                          msg, c.peer_node, tag));
    return -1;
}

void check_recv_done(Comm &c, Request *r) {
    for (int i = 0; i < r->n; i++)
        if (!r->slot_done[i])
            return;
    r->done = true;
    c.recvs.erase(std::find(c.recvs.begin(), c.recvs.end(), r));
}

// Puts `data` (offset `off` of message `msg`, `total` bytes long) into the
// receive that covers the message, or holds it until that is posted.
void deliver(Comm &c, uint32_t msg, int tag, uint64_t off, uint64_t total,
             std::span<const uint8_t> data) {
    if (off + data.size() > total || off > total) {
        conn_fail(c, ErrorKind::System,
                  fmt::format("malformed segment from node {:#010x}: offset {} + {} bytes beyond "
                              "the message's {}",
                              c.peer_node, off, data.size(), total));
        return;
    }
    for (Request *r : c.recvs) {
        if (before(msg, r->first_msg) || !before(msg, r->first_msg + uint32_t(r->n)))
            continue;
        int slot = bind_slot(c, r, msg, tag);
        if (slot < 0)
            return;
        if (total > r->caps[slot]) {
            conn_fail(c, ErrorKind::InvalidUsage,
                      fmt::format("message {} from node {:#010x} has {} bytes, more than the {} "
                                  "bytes of the posted receive",
                                  msg, c.peer_node, total, r->caps[slot]));
            return;
        }
        r->len[slot] = total;
        if (!data.empty())
            memcpy(static_cast<uint8_t *>(r->bufs[slot]) + off, data.data(), data.size());
        r->got[slot] += data.size();
        c.stats.bytes_received += data.size();
        if (r->got[slot] == total) {
            r->slot_done[slot] = true;
            check_recv_done(c, r);
        }
        return;
    }
    auto &st = c.stash[msg];
    st.len = total;
    st.tag = tag;
    st.pieces.emplace_back(off, std::vector<uint8_t>(data.begin(), data.end()));
}

} // namespace

incxdp_p2p_hdr encode(const P2pHeader &h) {
    incxdp_p2p_hdr w{};
    w.type = h.type;
    w.version = INCXDP_P2P_VERSION;
    w.window = htons(h.window);
    w.dst_conn = htonl(h.dst_conn);
    w.src_conn = htonl(h.src_conn);
    w.seq = htonl(h.seq);
    w.msg_id = htonl(h.msg_id);
    w.tag = htonl(static_cast<uint32_t>(h.tag));
    w.msg_off = htobe64(h.msg_off);
    w.msg_len = htobe64(h.msg_len);
    return w;
}

std::optional<P2pHeader> decode(std::span<const uint8_t> frame) {
    if (frame.size() < sizeof(incxdp_p2p_hdr))
        return std::nullopt;
    incxdp_p2p_hdr w;
    memcpy(&w, frame.data(), sizeof w);
    if (w.version != INCXDP_P2P_VERSION)
        return std::nullopt;
    P2pHeader h;
    h.type = w.type;
    h.window = ntohs(w.window);
    h.dst_conn = ntohl(w.dst_conn);
    h.src_conn = ntohl(w.src_conn);
    h.seq = ntohl(w.seq);
    h.msg_id = ntohl(w.msg_id);
    h.tag = static_cast<int32_t>(ntohl(w.tag));
    h.msg_off = be64toh(w.msg_off);
    h.msg_len = be64toh(w.msg_len);
    return h;
}

void conn_init(Comm &c, uint32_t window, double rto_s, Time now) {
    c.inflight.assign(window, {});
    c.have.assign(window, false);
    c.rto_s = rto_s;
    c.started = c.last_progress = c.last_ctrl = now;
}

void conn_fail(Comm &c, ErrorKind k, const std::string &why) {
    if (c.state == Comm::State::Failed)
        return;
    c.state = Comm::State::Failed;
    c.error_kind = k;
    c.error = why;
}

void conn_on_data(Comm &c, const P2pHeader &h, std::span<const uint8_t> payload, Time) {
    c.ack_due = true;
    uint32_t w = static_cast<uint32_t>(c.have.size());
    if (before(h.seq, c.rcv_nxt) || !before(h.seq, c.rcv_nxt + w))
        return; // a duplicate, or beyond the window: the ACK tells the sender
    if (c.have[h.seq % w])
        return;
    c.have[h.seq % w] = true;
    if (!before(h.seq, c.rcv_high))
        c.rcv_high = h.seq + 1;
    while (c.have[c.rcv_nxt % w]) {
        c.have[c.rcv_nxt % w] = false;
        c.rcv_nxt++;
    }
    deliver(c, h.msg_id, h.tag, h.msg_off, h.msg_len, payload);
}

void conn_on_ack(Comm &c, const P2pHeader &h, std::span<const uint8_t> bitmap, Time now,
                 const ConnEnv &env) {
    bool progress = false;
    uint32_t cum = h.seq;
    if (before(c.snd_una, cum) && !before(c.snd_nxt, cum)) {
        for (uint32_t s = c.snd_una; s != cum; s++)
            ack_seg(c, s, &progress);
        for (uint32_t s = c.snd_una; s != cum; s++)
            c.inflight[s % c.inflight.size()].live = false;
        c.snd_una = cum;
    }
    uint32_t bits = std::min<uint32_t>(h.msg_id, static_cast<uint32_t>(bitmap.size() * 8));
    for (uint32_t i = 0; i < bits; i++) {
        if (!(bitmap[i / 8] & (1u << (i % 8))))
            continue;
        uint32_t s = cum + 1 + i;
        if (!before(s, c.snd_una) && before(s, c.snd_nxt))
            ack_seg(c, s, &progress);
    }
    if (!progress)
        return;
    c.last_progress = now;
    c.backoffs = 0;
    c.rto_s = env.opts.rto_s;
    c.rto_deadline =
        now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c.rto_s));
    // A segment sent before one that arrived and still missing was lost
    // (paths keep order): resend it now rather than at the timeout.
    for (uint32_t s = c.snd_una; before(s, c.snd_nxt); s++) {
        auto &seg = c.inflight[s % c.inflight.size()];
        if (seg.live && !seg.acked && seg.order < c.rack_order) {
            c.stats.retransmissions++;
            emit_data(c, s, seg, now, env);
        }
    }
}

void conn_post_recv(Comm &c, Request *r) {
    r->first_msg = c.next_recv_msg;
    c.next_recv_msg += static_cast<uint32_t>(r->n);
    for (int i = 0; i < r->n; i++)
        r->slot_msg[i] = -1;
    c.recvs.push_back(r);
    for (int i = 0; i < r->n && c.state != Comm::State::Failed; i++) {
        auto it = c.stash.find(r->first_msg + uint32_t(i));
        if (it == c.stash.end())
            continue;
        Comm::Stashed st = std::move(it->second);
        c.stash.erase(it);
        uint32_t msg = r->first_msg + uint32_t(i);
        for (auto &[off, bytes] : st.pieces)
            if (!r->done)
                deliver(c, msg, st.tag, off, st.len, bytes);
    }
}

void conn_pump(Comm &c, Time now, const ConnEnv &env,
               const std::function<std::string()> &describe_path, bool *timed_out) {
    *timed_out = false;
    if (c.state != Comm::State::Established && c.state != Comm::State::Closing)
        return;
    auto dur = [](double s) {
        return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    bool in_flight = c.snd_una != c.snd_nxt;
    if (in_flight && now - c.last_progress > dur(env.opts.timeout_s)) {
        conn_fail(c, ErrorKind::System,
                  fmt::format("no progress sending to node {:#010x} for {:.1f} s ({} segment(s) "
                              "unacknowledged, {} retransmissions) on path {}: {}",
                              c.peer_node, env.opts.timeout_s, c.snd_nxt - c.snd_una,
                              c.stats.retransmissions, c.path, describe_path()));
        return;
    }
    if (in_flight && now >= c.rto_deadline) {
        *timed_out = true;
        c.stats.timeouts++;
        c.backoffs++;
        auto age = dur(c.rto_s);
        for (uint32_t s = c.snd_una; before(s, c.snd_nxt); s++) {
            auto &seg = c.inflight[s % c.inflight.size()];
            if (seg.live && !seg.acked && seg.sent + age <= now) {
                c.stats.retransmissions++;
                emit_data(c, s, seg, now, env);
            }
        }
        c.rto_s = std::min(c.rto_s * 2, env.opts.rto_s * 16);
        c.rto_deadline = now + dur(c.rto_s);
    }
    uint32_t win = send_window(c), burst = 0;
    while (!c.unsent.empty() && c.snd_nxt - c.snd_una < win && burst < kBurst) {
        if (c.snd_una == c.snd_nxt) {
            c.last_progress = now;
            c.rto_deadline = now + dur(c.rto_s);
        }
        Request *r = c.unsent.front();
        uint64_t len = std::min<uint64_t>(env.max_segment, r->size - c.cut_off);
        uint32_t seq = c.snd_nxt++;
        auto &seg = c.inflight[seq % c.inflight.size()];
        seg = {};
        seg.req = r;
        seg.off = c.cut_off;
        seg.len = static_cast<uint32_t>(len);
        seg.live = true;
        r->segs_total++;
        c.cut_off += len;
        if (c.cut_off >= r->size) {
            r->segmented = true;
            c.unsent.pop_front();
            c.cut_off = 0;
        }
        emit_data(c, seq, seg, now, env);
        burst++;
    }
    if (c.ack_due) {
        env.emit(conn_make_ack(c, INCXDP_P2P_ACK));
        c.ack_due = false;
    }
}

TxFrame conn_make_ack(const Comm &c, uint8_t type) {
    TxFrame f;
    f.dst_node = c.peer_node;
    f.path = c.path;
    f.hdr.type = type;
    f.hdr.dst_conn = c.peer_conn;
    f.hdr.src_conn = c.id;
    f.hdr.seq = c.rcv_nxt;
    uint32_t w = static_cast<uint32_t>(c.have.size());
    uint32_t bits = 0;
    if (before(c.rcv_nxt + 1, c.rcv_high))
        bits = std::min({c.rcv_high - c.rcv_nxt - 1, w - 1, uint32_t(INCXDP_P2P_MAX_SACK_BITS)});
    f.hdr.msg_id = bits;
    f.extra.assign((bits + 7) / 8, 0);
    for (uint32_t i = 0; i < bits; i++)
        if (c.have[(c.rcv_nxt + 1 + i) % w])
            f.extra[i / 8] |= uint8_t(1u << (i % 8));
    f.body = f.extra.data();
    f.body_len = f.extra.size();
    return f;
}

} // namespace incxdp::mesh
