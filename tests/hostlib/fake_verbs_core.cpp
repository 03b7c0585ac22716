// SPDX-License-Identifier: BSD-2-Clause
// fake0's core (fake_verbs.h): RC between the device's own QPs: a SEND
// lands in the destination QP's next receive WR after `delay` (parked while
// there is none, as endless RNR retries would), then its ACK completes the
// send after another `delay`; everything in order. The posting and polling
// ops, which record what a device would refuse or what would go wrong
// unnoticed (send queue overflow, CQ overrun, PSNs that disagree across a
// connection), and the tests' hooks.
#include "fake_verbs_state.h"

#include <fmt/format.h>

#include <cstring>

namespace fakeverbs {

World &W() {
    static World w;
    return w;
}

ibv_gid gid_at(uint32_t i, uint32_t *type) {
    ibv_gid g{};
    if (i == 1) {
        g.raw[0] = 0xfe;
        g.raw[1] = 0x80;
        g.raw[15] = 1;
        *type = IBV_GID_TYPE_ROCE_V2;
    } else {
        g = incxdp::detail::ipv4_mapped_gid(wire_dev() ? wire_dev()->ip : "192.0.2.1");
        *type = i == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    }
    return g;
}

namespace {

uint32_t packets(size_t len, ibv_mtu mtu) {
    uint32_t m = incxdp::detail::mtu_bytes(mtu);
    return len == 0 ? 1 : uint32_t((len + m - 1) / m);
}

bool sge_ok(const ibv_sge &s) {
    for (ibv_mr *mr : W().mrs)
        if (mr->lkey == s.lkey && s.addr >= uintptr_t(mr->addr) &&
            s.addr + s.length <= uintptr_t(mr->addr) + mr->length)
            return true;
    return false;
}

} // namespace

Qp *qp_of(uint32_t qpn) {
    auto it = W().qps.find(qpn);
    return it == W().qps.end() ? nullptr : it->second;
}

void push_cqe(ibv_cq *c, const ibv_wc &wc, uint64_t seq) {
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->q.size() >= size_t(c->cqe))
        W().error("CQ overrun");
    cq->q.emplace_back(wc, seq);
    if (cq->armed && c->channel) {
        cq->armed = false;
        ssize_t r = write(c->channel->refcnt, &cq, sizeof(cq)); // the pipe's write end
        (void)r;
    }
}

ibv_wc wc_for(Qp *q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.qp_num = q->qp.qp_num;
    return wc;
}

// The requester saw no ACK through every retry: the oldest unACKed WR
// fails, the rest flush.
void retry_exceeded(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->acked > seq || q->qp.state == IBV_QPS_ERR)
        return;
    q->qp.state = IBV_QPS_ERR;
    bool first = true;
    for (auto &[s, w] : q->inflight) {
        push_cqe(
            q->qp.send_cq,
            wc_for(q, w.first, first ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), s);
        first = false;
    }
    q->inflight.clear();
    for (auto &r : q->rq)
        push_cqe(q->qp.recv_cq, wc_for(q, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV), ~0ull);
    q->rq.clear();
    q->rq_sge.clear();
}

namespace {

void no_ack_for(Qp *src, uint64_t seq) {
    // 4.096 us * 2^timeout per try, 1 + retry_cnt tries
    auto t = std::chrono::nanoseconds(int64_t(4096) << src->timeout) * (1 + src->retry_cnt);
    uint32_t qpn = src->qp.qp_num;
    W().at(std::min<Clock::duration>(t, std::chrono::seconds(2)),
           [qpn, seq] { retry_exceeded(qpn, seq); });
}

} // namespace

// ACKs are cumulative: everything up to seq is done.
void ack(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->qp.state == IBV_QPS_ERR)
        return;
    while (!q->inflight.empty() && q->inflight.begin()->first <= seq) {
        auto [s, w] = *q->inflight.begin();
        if (w.second)
            push_cqe(q->qp.send_cq, wc_for(q, w.first, IBV_WC_SUCCESS, IBV_WC_SEND), s);
        q->inflight.erase(q->inflight.begin());
    }
    q->acked = std::max(q->acked, seq + 1);
}

// The responder takes m into its next receive WR.
void take(Qp *dst, Msg &m) {
    Qp *src = qp_of(m.src);
    ibv_recv_wr r = dst->rq.front();
    ibv_sge sge = dst->rq_sge.front();
    dst->rq.pop_front();
    dst->rq_sge.pop_front();
    if (m.psn != dst->rq_psn)
        W().error(fmt::format("QP 0x{:x} got PSN 0x{:06x} from 0x{:x}, expected 0x{:06x}",
                              dst->qp.qp_num, m.psn, m.src, dst->rq_psn));
    dst->rq_psn = (dst->rq_psn + packets(m.data.size(), dst->mtu)) & 0xFFFFFF;
    if (m.data.size() > (r.num_sge ? sge.length : 0)) {
        push_cqe(dst->qp.recv_cq, wc_for(dst, r.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV), ~0ull);
        dst->qp.state = IBV_QPS_ERR;
        if (src) {
            auto it = src->inflight.find(m.seq);
            if (it != src->inflight.end())
                push_cqe(src->qp.send_cq,
                         wc_for(src, it->second.first, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND), m.seq);
            src->qp.state = IBV_QPS_ERR;
        }
        return;
    }
    if (!m.data.empty())
        std::memcpy(reinterpret_cast<void *>(sge.addr), m.data.data(), m.data.size());
    ibv_wc wc = wc_for(dst, r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV);
    wc.byte_len = uint32_t(m.data.size());
    wc.imm_data = m.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.src_qp = m.src;
    push_cqe(dst->qp.recv_cq, wc, ~0ull);
    if (!src)
        return;
    if (W().no_ack.count(dst->qp.qp_num)) {
        no_ack_for(src, m.seq);
        return;
    }
    uint32_t sq = m.src;
    uint64_t seq = m.seq;
    W().at(W().delay, [sq, seq] { ack(sq, seq); });
}

namespace {

void deliver(Msg m) {
    Qp *dst = qp_of(m.dst);
    Qp *src = qp_of(m.src);
    if (!dst || dst->qp.state < IBV_QPS_RTR || dst->qp.state == IBV_QPS_ERR || dst->dest != m.src) {
        if (src)
            no_ack_for(src, m.seq); // nobody answers
        return;
    }
    if (dst->rq.empty()) {
        dst->parked.push_back(std::move(m));
        return;
    }
    take(dst, m);
}

} // namespace

int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_ERR) { // accepted and flushed, as mlx5 and rxe do
            push_cqe(qp->send_cq, wc_for(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND),
                     q->posted++);
            continue;
        }
        if (qp->state != IBV_QPS_RTS)
            return EINVAL;
        if (q->posted - q->freed >= q->cap.max_send_wr) {
            W().error(fmt::format("send queue overflow on QP 0x{:x}: {} WRs not freed", qp->qp_num,
                                  q->posted - q->freed));
            return ENOMEM;
        }
        if (wr->opcode != IBV_WR_SEND_WITH_IMM || wr->num_sge > 1 ||
            (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad send WR (opcode, SGE count or SGE outside its MR)");
            return EINVAL;
        }
        Msg m;
        m.src = qp->qp_num;
        m.dst = q->dest;
        m.psn = q->sq_psn;
        m.imm = wr->imm_data;
        m.seq = q->posted++;
        if (wr->num_sge) {
            auto *p = reinterpret_cast<const std::byte *>(wr->sg_list[0].addr);
            m.data.assign(p, p + wr->sg_list[0].length);
        }
        q->inflight[m.seq] = {wr->wr_id, (wr->send_flags & IBV_SEND_SIGNALED) != 0};
        q->sent_psns.push_back(q->sq_psn);
        q->sq_psn = (q->sq_psn + packets(m.data.size(), q->mtu)) & 0xFFFFFF;
        if (q->wire)
            wire_send(q, m);
        else
            W().at(W().delay, [m = std::move(m)]() mutable { deliver(std::move(m)); });
    }
    *bad = nullptr;
    return 0;
}

int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_ERR)
            return EINVAL;
        if (q->rq.size() >= q->cap.max_recv_wr)
            return ENOMEM;
        if (wr->num_sge > 1 || (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad receive WR (SGE count or SGE outside its MR)");
            return EINVAL;
        }
        q->rq.push_back(*wr);
        q->rq_sge.push_back(wr->num_sge ? wr->sg_list[0] : ibv_sge{});
    }
    *bad = nullptr;
    while (!q->parked.empty() && !q->rq.empty() && qp->state != IBV_QPS_ERR) {
        Msg m = std::move(q->parked.front());
        q->parked.pop_front();
        take(q, m);
    }
    return 0;
}

int op_poll_cq(ibv_cq *c, int n, ibv_wc *wc) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    int k = 0;
    for (; k < n && !cq->q.empty(); ++k) {
        auto [w, seq] = cq->q.front();
        cq->q.pop_front();
        wc[k] = w;
        if (seq != ~0ull)
            if (Qp *q = qp_of(w.qp_num))
                q->freed = std::max(q->freed, seq + 1); // the driver frees WQEs up to here
    }
    return k;
}

int op_req_notify_cq(ibv_cq *c, int) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->armed = true;
    return 0;
}


void set_no_ack(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    W().no_ack.insert(qpn);
}

std::vector<uint32_t> sent_psns(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    Qp *q = qp_of(qpn);
    return q ? q->sent_psns : W().psns_of_destroyed[qpn];
}

std::string take_errors() {
    std::lock_guard lk(W().mu);
    return std::exchange(W().errors, std::string());
}

} // namespace fakeverbs
