// SPDX-License-Identifier: BSD-2-Clause
// fake0's libibverbs functions (fake_verbs.h): the subset VerbsSession and
// the tests call, with the checks a device makes on them.
#include "fake_verbs_state.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

using namespace fakeverbs;

extern "C" {

ibv_device **(ibv_get_device_list)(int *n) {
    static ibv_device dev = [] {
        ibv_device d{};
        std::strcpy(d.name, "fake0");
        d.node_type = IBV_NODE_CA;
        d.transport_type = IBV_TRANSPORT_IB;
        return d;
    }();
    *n = 1;
    return new ibv_device *[2] { &dev, nullptr };
}

void ibv_free_device_list(ibv_device **list) {
    delete[] list;
}

const char *ibv_get_device_name(ibv_device *d) {
    return d->name;
}

// A whole verbs_context, of which the inline verbs look at the ibv_context
// at its end (they step back to the start only when abi_compat says so).
ibv_context *ibv_open_device(ibv_device *d) {
    ibv_context *ctx = &(new verbs_context{})->context;
    ctx->device = d;
    ctx->ops.poll_cq = op_poll_cq;
    ctx->ops.req_notify_cq = op_req_notify_cq;
    ctx->ops.post_send = op_post_send;
    ctx->ops.post_recv = op_post_recv;
    ctx->abi_compat = nullptr; // not extended: ibv_query_port() takes the plain path
    return ctx;
}

int ibv_close_device(ibv_context *ctx) {
    delete reinterpret_cast<verbs_context *>(reinterpret_cast<char *>(ctx) -
                                             offsetof(verbs_context, context));
    return 0;
}

int ibv_query_device(ibv_context *, ibv_device_attr *a) {
    *a = ibv_device_attr{};
    a->phys_port_cnt = 1;
    a->max_qp_wr = 4096;
    a->max_cqe = 65536;
    a->max_sge = 1;
    return 0;
}

// The inline ibv_query_port() hands over a whole ibv_port_attr.
int(ibv_query_port)(ibv_context *, uint8_t port, _compat_ibv_port_attr *compat) {
    if (port != 1)
        return EINVAL;
    auto *a = reinterpret_cast<ibv_port_attr *>(compat);
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = active_mtu();
    a->gid_tbl_len = kGidCount;
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

int _ibv_query_gid_ex(ibv_context *, uint32_t port, uint32_t index, ibv_gid_entry *e, uint32_t,
                      size_t) {
    if (port != 1 || index >= kGidCount - 1)
        return ENODATA;
    *e = ibv_gid_entry{};
    e->gid = gid_at(index, &e->gid_type);
    e->gid_index = index;
    e->port_num = port;
    return 0;
}

ibv_pd *ibv_alloc_pd(ibv_context *ctx) {
    return new ibv_pd{ctx, 0};
}
int ibv_dealloc_pd(ibv_pd *pd) {
    delete pd;
    return 0;
}

ibv_comp_channel *ibv_create_comp_channel(ibv_context *ctx) {
    int fds[2];
    if (pipe(fds) != 0)
        return nullptr;
    // The read end is the channel's fd; the write end hides in refcnt.
    return new ibv_comp_channel{ctx, fds[0], fds[1]};
}

int ibv_destroy_comp_channel(ibv_comp_channel *ch) {
    close(ch->fd);
    close(ch->refcnt);
    delete ch;
    return 0;
}

ibv_cq *ibv_create_cq(ibv_context *ctx, int cqe, void *cq_context, ibv_comp_channel *ch, int) {
    auto *cq = new Cq;
    cq->cq.context = ctx;
    cq->cq.channel = ch;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    return &cq->cq;
}

int ibv_destroy_cq(ibv_cq *c) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->events != cq->acked)
        W().error(fmt::format("ibv_destroy_cq with {} of {} events not acked",
                              cq->events - cq->acked, cq->events));
    delete cq;
    return 0;
}

int ibv_get_cq_event(ibv_comp_channel *ch, ibv_cq **cq, void **cq_context) {
    Cq *c = nullptr;
    if (read(ch->fd, &c, sizeof(c)) != ssize_t(sizeof(c)))
        return -1;
    std::lock_guard lk(W().mu);
    c->events++;
    *cq = &c->cq;
    *cq_context = c->cq.cq_context;
    return 0;
}

void ibv_ack_cq_events(ibv_cq *c, unsigned int n) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->acked += n;
}

ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *a) {
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->cap.max_send_wr > 4096 ||
        a->cap.max_recv_wr > 4096 || a->cap.max_send_sge > 1 || a->cap.max_recv_sge > 1) {
        errno = EINVAL;
        return nullptr;
    }
    std::lock_guard lk(W().mu);
    auto *q = new Qp;
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_num = W().next_qpn++;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->cap = a->cap;
    W().qps[q->qp.qp_num] = q;
    return &q->qp;
}

int ibv_destroy_qp(ibv_qp *qp) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    W().psns_of_destroyed[qp->qp_num] = q->sent_psns;
    W().qps.erase(qp->qp_num);
    delete q;
    return 0;
}

int ibv_modify_qp(ibv_qp *qp, ibv_qp_attr *a, int mask) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    auto need = [&](int required, const char *what) {
        if ((mask & required) == required)
            return true;
        W().error(
            fmt::format("modify_qp {}: mask 0x{:x} lacks 0x{:x}", what, mask, required & ~mask));
        return false;
    };
    if (!(mask & IBV_QP_STATE))
        return EINVAL;
    if (qp->state == IBV_QPS_RESET && a->qp_state == IBV_QPS_INIT) {
        if (!need(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT") ||
            a->port_num != 1)
            return EINVAL;
    } else if (qp->state == IBV_QPS_INIT && a->qp_state == IBV_QPS_RTR) {
        if (!need(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "RTR"))
            return EINVAL;
        uint32_t type = 0;
        const ibv_global_route &g = a->ah_attr.grh;
        if (!a->ah_attr.is_global || a->ah_attr.port_num != 1 || g.sgid_index >= kGidCount - 1 ||
            (gid_at(g.sgid_index, &type), type) != IBV_GID_TYPE_ROCE_V2 ||
            a->path_mtu > active_mtu() || a->dest_qp_num > 0xFFFFFF || a->rq_psn > 0xFFFFFF)
            return EINVAL;
        bool reachable = false; // loopback only: the destination is one of our GIDs
        for (uint32_t i = 0; i < kGidCount - 1; ++i) {
            ibv_gid mine = gid_at(i, &type);
            reachable |= type == IBV_GID_TYPE_ROCE_V2 && std::memcmp(mine.raw, g.dgid.raw, 16) == 0;
        }
        if (!reachable) // wire mode: another IPv4 node, reached through the netdev
            if (int e = wire_connect(q, *a))
                return e;
        q->dest = a->dest_qp_num;
        q->rq_psn = a->rq_psn;
        q->mtu = a->path_mtu;
    } else if (qp->state == IBV_QPS_RTR && a->qp_state == IBV_QPS_RTS) {
        if (!need(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                  "RTS") ||
            a->sq_psn > 0xFFFFFF)
            return EINVAL;
        q->sq_psn = a->sq_psn;
        q->timeout = a->timeout;
        q->retry_cnt = a->retry_cnt;
    } else {
        W().error(
            fmt::format("modify_qp: no transition {} -> {}", int(qp->state), int(a->qp_state)));
        return EINVAL;
    }
    qp->state = a->qp_state;
    return 0;
}

ibv_mr *(ibv_reg_mr)(ibv_pd *pd, void *addr, size_t length, int) {
    std::lock_guard lk(W().mu);
    uint32_t key = W().next_key++;
    auto *mr = new ibv_mr{pd->context, pd, addr, length, key, key, key};
    W().mrs.push_back(mr);
    return mr;
}

int ibv_dereg_mr(ibv_mr *mr) {
    std::lock_guard lk(W().mu);
    std::erase(W().mrs, mr);
    delete mr;
    return 0;
}

const char *ibv_wc_status_str(ibv_wc_status s) {
    switch (s) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error";
    case IBV_WC_WR_FLUSH_ERR:
        return "Work Request Flushed Error";
    case IBV_WC_REM_INV_REQ_ERR:
        return "remote invalid request error";
    case IBV_WC_RETRY_EXC_ERR:
        return "transport retry counter exceeded";
    default:
        return "other error";
    }
}

const char *ibv_port_state_str(ibv_port_state s) {
    return s == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN";
}

} // extern "C"

