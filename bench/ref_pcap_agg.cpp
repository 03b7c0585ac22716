// SPDX-License-Identifier: BSD-2-Clause
#include "ref_pcap_agg.h"

#include <incxdp/proto.h>
#include <incxdp/roce.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace incxdp::refsw {
namespace {

constexpr uint32_t kMaxElems = ROCE_MAX_ELEMS;

#define REFSW_STAT_NAME_(name) #name,
constexpr const char *kStatNames[kStatCount] = {REFSW_STATS(REFSW_STAT_NAME_)};
#undef REFSW_STAT_NAME_

uint32_t ip_of(const std::string &s) {
    return util::ipv4_be_or_throw(s, "tree plan address");
}

uint32_t idx_of(uint32_t psn, uint32_t base) {
    return (psn - base) & ROCE_PSN_MASK;
}

int32_t be_val(const uint8_t *p, uint32_t i) {
    uint32_t be;
    std::memcpy(&be, p + 4 * i, 4);
    return static_cast<int32_t>(ntohl(be));
}

// ImmDt (the frame's or the connection's last) naming a collective we know.
bool imm_ok(uint32_t imm, size_t nelems) {
    const uint8_t prim = roce_imm_prim(imm);
    if (prim > ROCE_PRIM_BROADCAST || roce_imm_dtype(imm) > ROCE_DTYPE_FLOAT32 || (imm & 0xff))
        return false;
    return prim == ROCE_PRIM_BROADCAST || roce_imm_op(imm) != ROCE_OPR_BARRIER || !nelems;
}
} // namespace

uint8_t *TxQueue::add(size_t port) {
    if (n_ == frames_.size())
        frames_.emplace_back(std::make_unique<Frame>());
    frames_[n_]->port = port;
    return frames_[n_++]->buf.data();
}

Aggregator::Aggregator(const topo::TreePlan &plan, const std::string &name) {
    const topo::TreeSwitch &ts = plan.sw(name);
    root_ = ts.root;
    pool_ = ts.pool_size;
    fanin_ = static_cast<uint32_t>(ts.child_conns.size());
    if (pool_ == 0 || (pool_ & (pool_ - 1)) || pool_ > (1u << 22))
        throw std::runtime_error(
            fmt::format("pool of {} slots: a power of two up to 2^22 is needed", pool_));
    if (fanin_ == 0 || fanin_ > 64)
        throw std::runtime_error(fmt::format("{} children: 1..64 supported", fanin_));
    for (size_t k = 0; k < ts.child_conns.size(); ++k) {
        const topo::RoceConn &rc = plan.conns[ts.child_conns[k]];
        Conn c;
        c.role = Role::Child;
        c.strict = !rc.child_is_switch;
        c.bit = uint64_t{1} << k;
        c.peer_mac = rc.child_mac;
        c.peer_ip = ip_of(rc.child_ip);
        c.own_qpn = rc.parent_qpn;
        c.rx_base = rc.up_base;
        c.tx_base = rc.down_base;
        c.subtree = rc.subtree_ranks;
        c.tx = {rc.parent_mac, rc.child_mac,    ip_of(rc.parent_ip),
                c.peer_ip,     rc.parent_sport, rc.child_qpn};
        add_conn(c, rc.parent_iface);
    }
    if (ts.parent_conn) {
        const topo::RoceConn &rc = plan.conns[*ts.parent_conn];
        Conn c;
        c.role = Role::Parent;
        c.strict = false;
        c.peer_mac = rc.parent_mac;
        c.peer_ip = ip_of(rc.parent_ip);
        c.own_qpn = rc.child_qpn;
        c.rx_base = rc.down_base;
        c.tx_base = rc.up_base;
        c.tx = {rc.child_mac, rc.parent_mac,  ip_of(rc.child_ip),
                c.peer_ip,    rc.child_sport, rc.parent_qpn};
        parent_ = conns_.size();
        add_conn(c, rc.child_iface);
    }
    vals_.assign(size_t{pool_} * 2 * kMaxElems, 0);
    slots_ = std::make_unique<Slot[]>(pool_);
    for (uint32_t s = 0; s < pool_; ++s)
        for (int b = 0; b < 2; ++b)
            slots_[s].set[b].vals = &vals_[(size_t{s} * 2 + b) * kMaxElems];
    reset();
}

void Aggregator::add_conn(Conn c, const std::string &iface) {
    c.port = port_ifaces_.size();
    port_ifaces_.push_back(iface);
    conns_.push_back(c);
}

void Aggregator::reset() {
    std::unique_lock lk(state_mu_);
    for (Conn &c : conns_) {
        c.epsn = c.rx_base;
        c.msn = 0;
        c.imm =
            roce_imm_make(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, ROCE_DTYPE_INT32);
        c.nak_sent = false;
    }
    for (uint32_t s = 0; s < pool_; ++s)
        for (Set &st : slots_[s].set) {
            int32_t *v = st.vals;
            st = Set{};
            st.vals = v;
        }
}

std::string Aggregator::stats_line() const {
    std::string line;
    for (size_t i = 0; i < kStatCount; ++i) {
        const uint64_t v = stats_[i].load(std::memory_order_relaxed);
        if (v || i == S_rx)
            line += fmt::format(" {}={}", kStatNames[i], v);
    }
    return line;
}

Aggregator::Conn *Aggregator::conn_of(uint32_t qpn) {
    for (Conn &c : conns_)
        if (c.own_qpn == qpn)
            return &c;
    return nullptr;
}

void Aggregator::on_frame(size_t port, const uint8_t *f, size_t len, TxQueue &txq) {
    count(S_rx);
    View v;
    const Parse pr = parse(f, len, v);
    if (pr != Parse::Ok) {
        count(pr == Parse::NotRoce   ? S_not_roce
              : pr == Parse::BadIcrc ? S_roce_bad_icrc
                                     : S_roce_malformed);
        return;
    }
    Conn *c = conn_of(v.dqpn);
    if (!c || c->port != port || c->peer_mac != v.src_mac || c->peer_ip != v.src_ip) {
        count(S_roce_unknown_qp);
        return;
    }
    std::shared_lock lk(state_mu_);
    if (v.opcode == ROCE_OP_ACK)
        peer_ack(*c, v, txq);
    else if (c->role == Role::Child)
        from_child(*c, v, txq);
    else
        from_parent(*c, v, txq);
}

void Aggregator::retransmit(std::chrono::steady_clock::duration timeout, size_t batch,
                            TxQueue &txq) {
    if (!parent_)
        return;
    const auto now = std::chrono::steady_clock::now();
    std::shared_lock lk(state_mu_);
    for (uint32_t i = 0; i < pool_ && txq.size() < batch; ++i) {
        std::lock_guard sl(slots_[i].mu);
        for (Set &s : slots_[i].set)
            if (s.used && s.complete && !s.result && now - s.up_sent > timeout) {
                send_up(s, txq);
                count(S_retx_up);
            }
    }
}

// ---- docs/ROCE.md §3, per frame

// Payload a whole number of 64 B blocks, at most ROCE_MAX_PAYLOAD, and a known ImmDt.
bool Aggregator::send_ok(const Conn &c, const View &v, uint32_t &imm) {
    imm = v.imm ? *v.imm : c.imm;
    if (v.payload_len % (4 * INCXDP_ELEM_QUANTUM) || v.payload_len > ROCE_MAX_PAYLOAD ||
        !imm_ok(imm, v.payload_len / 4)) {
        count(S_roce_malformed);
        return false;
    }
    return true;
}

void Aggregator::from_child(Conn &c, const View &v, TxQueue &txq) {
    uint32_t imm = 0;
    if (!send_ok(c, v, imm))
        return;
    const int32_t d = roce_psn_diff(v.psn, c.epsn);
    const int32_t win = static_cast<int32_t>(pool_);
    const uint32_t idx = idx_of(v.psn, c.rx_base);
    if (c.strict ? d > 0 : d >= win) {
        // One NAK per gap: the host goes back N from epsn; the frames
        // in flight behind the lost one must not each ask.
        if (!c.strict || c.nak_sent) {
            count(S_roce_ahead_drop);
            return;
        }
        c.nak_sent = true;
        ack(txq, c, c.epsn, ROCE_AETH_NAK_SEQ | c.msn);
        count(S_roce_nak);
        return;
    }
    Slot &sl = slot_of(idx);
    std::lock_guard lk(sl.mu);
    Set &s = set_of(sl, idx);
    const bool on_idx = s.used && s.idx == idx;
    if ((c.strict ? d < 0 : d < -win) || (on_idx && ((s.bitmap & c.bit) || s.complete))) {
        duplicate(c, s, idx, txq);
        return;
    }
    const uint32_t n = static_cast<uint32_t>(v.payload_len / 4);
    const bool bcast = roce_imm_prim(imm) == ROCE_PRIM_BROADCAST;
    if (!on_idx) {
        if (s.used && !s.complete) {
            count(S_roce_stale); // the set is busy with another idx
            return;
        }
        // The set's previous use (idx - 2 pool) is over: every rank had
        // its result before any could send this idx.
        int32_t *vals = s.vals;
        s = Set{};
        s.vals = vals;
        s.used = true;
        s.idx = idx;
    } else if (imm != s.imm || (bcast ? n && s.has_payload : n != s.nelems)) {
        count(S_roce_mismatch);
        return;
    }
    aggregate(s, imm, v.payload, n);
    s.bitmap |= c.bit;
    s.count++;
    // A switch child's frames come in any order: epsn is the highest PSN + 1 there.
    if (d >= 0) {
        c.epsn = (v.psn + 1) & ROCE_PSN_MASK;
        c.nak_sent = false;
    }
    c.msn = (c.msn + 1) & ROCE_AETH_MSN_MASK;
    c.imm = imm;
    if (s.count < fanin_) {
        if (v.ackreq) {
            ack(txq, c, v.psn, ROCE_AETH_ACK | c.msn);
            count(S_roce_ack);
        } else {
            count(S_roce_absorbed);
        }
        return;
    }
    s.complete = true;
    if (root_) {
        s.result = true;
        multicast(s, txq);
    } else {
        send_up(s, txq);
        count(S_roce_up);
    }
}

void Aggregator::aggregate(Set &s, uint32_t imm, const uint8_t *p, uint32_t n) {
    auto val = [p](uint32_t i) { return be_val(p, i); };
    if (s.count == 0) {
        s.imm = imm;
        s.nelems = n;
        for (uint32_t i = 0; i < n; ++i)
            s.vals[i] = val(i);
        s.has_payload = n > 0;
        return;
    }
    if (roce_imm_prim(imm) == ROCE_PRIM_BROADCAST) {
        // No addition: the set takes the one non-empty payload.
        if (n > 0 && !s.has_payload) {
            for (uint32_t i = 0; i < n; ++i)
                s.vals[i] = val(i);
            s.nelems = n;
            s.has_payload = true;
        }
        return;
    }
    switch (roce_imm_op(imm)) {
    case ROCE_OPR_MAX:
        for (uint32_t i = 0; i < n; ++i)
            s.vals[i] = std::max(s.vals[i], val(i));
        break;
    case ROCE_OPR_MIN:
        for (uint32_t i = 0; i < n; ++i)
            s.vals[i] = std::min(s.vals[i], val(i));
        break;
    case ROCE_OPR_SUM: // wraps at 32 bits, like the engine
        for (uint32_t i = 0; i < n; ++i)
            s.vals[i] = static_cast<int32_t>(static_cast<uint32_t>(s.vals[i]) +
                                             static_cast<uint32_t>(val(i)));
        break;
    default: // Barrier: no payload
        break;
    }
}

// A frame (or a frame's bit) this switch has already taken: answer from the set.
void Aggregator::duplicate(Conn &c, Set &s, uint32_t idx, TxQueue &txq) {
    if (!s.used || s.idx != idx) {
        count(S_roce_stale);
    } else if (!s.complete) { // ACKs are cumulative: the last PSN taken
        ack(txq, c, (c.epsn - 1) & ROCE_PSN_MASK, ROCE_AETH_ACK | c.msn);
        count(S_roce_dup_ack);
    } else if (s.result) {
        result_to(c, s, txq);
        count(S_roce_dup_result);
    } else if (parent_) { // the up frame may be lost; a parent with the result answers
        send_up(s, txq);
        count(S_roce_dup_up);
    } else {
        count(S_roce_stale);
    }
}

// ---- from the parent: results, in any order

void Aggregator::from_parent(Conn &c, const View &v, TxQueue &txq) {
    uint32_t imm = 0;
    if (!send_ok(c, v, imm))
        return;
    const uint32_t idx = idx_of(v.psn, c.rx_base);
    Slot &sl = slot_of(idx);
    std::lock_guard lk(sl.mu);
    Set &s = set_of(sl, idx);
    if (!s.used || s.idx != idx || !s.complete) {
        count(S_roce_stale);
        return;
    }
    const uint32_t n = static_cast<uint32_t>(v.payload_len / 4);
    for (uint32_t i = 0; i < n; ++i)
        s.vals[i] = be_val(v.payload, i);
    s.nelems = n;
    s.result = true;
    if (roce_psn_diff(v.psn, c.epsn) >= 0)
        c.epsn = (v.psn + 1) & ROCE_PSN_MASK;
    c.msn = (c.msn + 1) & ROCE_AETH_MSN_MASK;
    c.imm = imm;
    multicast(s, txq); // also when it was there already: a child asked again
}

// ---- ACK/NAK from a peer

void Aggregator::peer_ack(Conn &c, const View &v, TxQueue &txq) {
    if ((*v.aeth & 0xE0000000u) != ROCE_AETH_NAK_SEQ) { // syndrome 011x xxxx: a NAK
        count(S_roce_peer_ack);
        return;
    }
    if (c.role != Role::Child) { // aggregates are not resent on a NAK
        count(S_roce_peer_nak);
        return;
    }
    // PSN = what the child expects next on our stream to it.
    const uint32_t idx = idx_of(v.psn, c.tx_base);
    Slot &sl = slot_of(idx);
    std::lock_guard lk(sl.mu);
    const Set &s = set_of(sl, idx);
    if (s.used && s.idx == idx && s.result)
        result_to(c, s, txq);
    count(S_roce_peer_nak);
}

// ---- frames out (built under the slot mutex, sent by the caller after it)

void Aggregator::ack(TxQueue &txq, const Conn &c, uint32_t psn, uint32_t syn_msn) {
    uint8_t *f = txq.add(c.port);
    txq.set_len(build_ack(f, c.tx, psn, syn_msn));
}

void Aggregator::result_to(const Conn &c, const Set &s, TxQueue &txq) {
    uint32_t n = s.nelems;
    const uint16_t dest = roce_imm_dest(s.imm);
    if (roce_imm_prim(s.imm) == ROCE_PRIM_REDUCE && (dest >= 64 || !(c.subtree >> dest & 1)))
        n = 0; // Reduce: only the root rank's subtree gets the values
    uint8_t *f = txq.add(c.port);
    const uint32_t psn = (c.tx_base + s.idx) & ROCE_PSN_MASK;
    txq.set_len(build_send(f, c.tx, psn, false, s.imm, {s.vals, n}));
}

void Aggregator::multicast(const Set &s, TxQueue &txq) {
    for (const Conn &c : conns_)
        if (c.role == Role::Child)
            result_to(c, s, txq);
    count(S_roce_down);
}

void Aggregator::send_up(Set &s, TxQueue &txq) {
    const Conn &p = conns_[*parent_];
    uint8_t *f = txq.add(p.port);
    const uint32_t psn = (p.tx_base + s.idx) & ROCE_PSN_MASK;
    txq.set_len(build_send(f, p.tx, psn, false, s.imm, {s.vals, s.nelems}));
    s.up_sent = std::chrono::steady_clock::now();
}

} // namespace incxdp::refsw
