/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The RoCEv2 path of the switch: one RC connection per link of a job's tree
 * (incxdp_roce_conns, keyed by our QPN on it), aggregation keyed on the
 * packet index idx = (PSN - base) mod 2^24 into the job's slots. The rules
 * are docs/ROCE.md §3; the frames it sends are built by roce_tx.h.
 *
 * RoCE is the engine's adapter for RC connections: PSNs, ACK/NAK, the ICRC
 * and frame building. What a contribution does to its set is the one slot
 * rule (agg.h, TAG mode) and where its frame goes is the one tree layer
 * (tree_decide, tree.h); the parent connection is the job's incxdp_parents
 * entry (qpn).
 *
 * Per frame: decide what happened (one counter) and what goes out (a struct
 * roce_plan), then build that one frame in a single place, roce_finish().
 * The loops live in three global functions, each verified once on its own:
 * incxdp_roce_set (roce_set.h: everything under the slot's lock),
 * incxdp_roce_emit (roce_tx.h) and incxdp_roce_icrc (icrc.h). The rules here
 * are straight-line code around them, ~4k instructions for the verifier.
 */
#ifndef INCXDP_LIB_ROCE_H
#define INCXDP_LIB_ROCE_H

#include "parse.h"
#include "maps.bpf.h"
#include "agg.h"
#include "icrc.h"
#include "udp_csum.h"
#include "roce_tx.h"
#include "roce_set.h"
#include "tree.h"
#include "incxdp/roce.h"

#define ROCE_BTH_PAD_TVER 0x3f /* PadCnt:2 TVer:4 of the BTH flags byte */
#define ROCE_AETH_NAK_GROUP 0x60000000u /* syndrome 011x xxxx: a NAK */

/* A RoCE frame, decoded: everything the rules need from it. */
struct roce_pkt {
	__be32 *payload;
	__u32 qpn;
	__u32 psn;
	__u32 word; /* AETH (ACK) or ImmDt (*_IMM), host order; else 0 */
	__u16 nelems;
	__u8 opcode;
	__u8 has_imm;
	__u8 ackreq;
};

enum roce_tx {
	RTX_DROP,   /* nothing goes out */
	RTX_TX,     /* ACK/NAK or a result to the frame's connection, XDP_TX */
	RTX_UP,     /* the set's aggregate to the parent connection */
	RTX_DOWN,   /* the set as multicast template, devmap broadcast */
};

/* The outcome of one frame. */
struct roce_plan {
	struct roce_out o; /* RTX_UP: o.psn holds idx until the parent is known */
	__u32 stat;        /* the frame's ingress verdict counter */
	__u32 bcast_flags; /* RTX_DOWN */
	__u32 tx;          /* enum roce_tx */
};

/*
 * Shape and lengths, no state (docs/ROCE.md §3, roce_malformed). The frame
 * must be exactly its IPv4 datagram: a RoCE frame is at least 62 B, so it
 * never carries Ethernet padding, and the ICRC is its last 4 bytes.
 */
static __always_inline int roce_parse(struct cursor *c, const struct iphdr *ip,
				      const struct udphdr *udp, struct roce_pkt *r)
{
	struct roce_bth *bth = CURSOR_TAKE(c, struct roce_bth);
	__u32 tot, ulen, hdr, plen, apsn;
	__be32 *w;

	if (!bth)
		return -1;
	tot = bpf_ntohs(ip->tot_len);
	ulen = bpf_ntohs(udp->len);
	if ((__u64)(c->end - (void *)ip) != tot || ulen + sizeof(*ip) != tot)
		return -1;
	r->opcode = bth->opcode;
	if (!roce_opcode_is_send(r->opcode) && r->opcode != ROCE_OP_ACK)
		return -1;
	/* PadCnt 0: payloads are whole 64 B blocks; TVer 0 is the only one. */
	if (bth->flags & ROCE_BTH_PAD_TVER)
		return -1;
	r->qpn = bpf_ntohl(bth->dqpn) & ROCE_QPN_MASK;
	apsn = bpf_ntohl(bth->apsn);
	r->psn = apsn & ROCE_PSN_MASK;
	r->ackreq = !!(apsn & ROCE_BTH_ACKREQ);
	r->has_imm = roce_opcode_has_imm(r->opcode);
	hdr = sizeof(*udp) + sizeof(*bth) + ROCE_ICRC_LEN;
	if (r->opcode == ROCE_OP_ACK || r->has_imm) {
		w = CURSOR_TAKE(c, __be32);
		if (!w)
			return -1;
		r->word = bpf_ntohl(*w);
		hdr += 4;
	}
	if (ulen < hdr)
		return -1;
	plen = ulen - hdr;
	if (r->opcode == ROCE_OP_ACK ? plen != 0 :
	    (plen % (INCXDP_ELEM_QUANTUM * 4) || plen > ROCE_MAX_PAYLOAD))
		return -1;
	r->nelems = plen / 4;
	r->payload = c->pos;
	return (__u64)(c->end - c->pos) == (__u64)plen + ROCE_ICRC_LEN ? 0 : -1;
}

/* ImmDt (the frame's or the connection's last): a collective we know. */
static __always_inline int roce_imm_ok(__u32 imm, __u32 nelems)
{
	__u8 prim = roce_imm_prim(imm);

	if (prim > ROCE_PRIM_BROADCAST || roce_imm_dtype(imm) > ROCE_DTYPE_FLOAT32)
		return 0;
	/* The reserved byte marks only the start check, an AllReduce Barrier. */
	if (imm & 0xff)
		return (imm & 0xff) == ROCE_IMM_START && prim == ROCE_PRIM_ALLREDUCE &&
		       roce_imm_op(imm) == ROCE_OPR_BARRIER && !nelems;
	/* A Barrier carries nothing; Broadcast ignores op. */
	return prim == ROCE_PRIM_BROADCAST || roce_imm_op(imm) != ROCE_OPR_BARRIER || !nelems;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return *(const __u32 *)a == *(const __u32 *)b &&
	       *(const __u16 *)(a + 4) == *(const __u16 *)(b + 4);
}

/* The connection the frame names, if it comes from its peer on its port. */
static __always_inline struct incxdp_roce_conn *roce_conn_of(struct xdp_md *ctx,
							     const struct ethhdr *eth,
							     const struct iphdr *ip, __u32 qpn)
{
	struct incxdp_roce_conn_key key = { .qpn = qpn };
	struct incxdp_roce_conn *conn = bpf_map_lookup_elem(&incxdp_roce_conns, &key);

	if (!conn || conn->ifindex != ctx->ingress_ifindex || conn->peer_ip != ip->saddr ||
	    !mac_eq(eth->h_source, conn->peer_mac))
		return NULL;
	return conn;
}

static __always_inline int roce_job_ok(const struct incxdp_job *job)
{
	return job && job->active && job->kind == INCXDP_JOB_ROCE_TREE && job->pool_size &&
	       !(job->pool_size & (job->pool_size - 1)) && job->nworkers &&
	       job->nworkers <= INCXDP_MAX_WORKERS;
}

static __always_inline void plan_drop(struct roce_plan *pl, __u32 stat)
{
	pl->stat = stat;
	pl->tx = RTX_DROP;
}

static __always_inline void plan_ack(struct roce_plan *pl, __u32 stat, __u32 syndrome, __u32 psn,
				     __u32 msn)
{
	pl->stat = stat;
	pl->tx = RTX_TX;
	pl->o.opcode = ROCE_OP_ACK;
	pl->o.psn = psn;
	pl->o.word = syndrome | (msn & ROCE_AETH_MSN_MASK);
}

/* The set's values (or its Reduce completion) to the frame's connection. */
static __always_inline void plan_result(struct roce_plan *pl, __u32 stat,
					const struct incxdp_roce_conn *conn,
					const struct agg_view *v, __u32 idx, __u32 set, __u32 slot)
{
	pl->stat = stat;
	pl->tx = RTX_TX;
	pl->o.opcode = ROCE_OP_SEND_ONLY_IMM;
	pl->o.psn = conn->tx_base + idx;
	pl->o.word = v->round;
	pl->o.nelems = roce_reduce_cut(v->round, conn) ? 0 : v->nelems;
	pl->o.set = set;
	pl->o.slot = slot;
}

/* RTX_UP or RTX_DOWN with the set's values; the PSN field holds idx. */
static __always_inline void plan_set(struct roce_plan *pl, __u32 stat, __u32 tx,
				     const struct agg_view *v, __u32 idx, __u32 set, __u32 slot)
{
	pl->stat = stat;
	pl->tx = tx;
	pl->o.opcode = ROCE_OP_SEND_ONLY_IMM;
	pl->o.psn = idx;
	pl->o.word = v->round;
	pl->o.nelems = v->nelems;
	pl->o.set = set;
	pl->o.slot = slot;
}

/* Whether an RC device ACKed the result of idx on our stream (only devices
 * ACK results: peer_acked stays 0 for other peers, which would read as
 * "has it" for idx past 2^23 in 24-bit PSN arithmetic). */
static __always_inline int roce_peer_has(const struct incxdp_roce_conn *conn, __u32 idx)
{
	return conn->rc_device && roce_psn_diff(conn->peer_acked, idx) > 0;
}

/* Idx + 1 of the peer's last SEND we took, mod 2^24. */
static __always_inline __u32 roce_taken(const struct incxdp_roce_conn *conn)
{
	return (conn->epsn - conn->rx_base) & ROCE_PSN_MASK;
}

/*
 * Idx + 1 of the last of the peer's SENDs to ACK: all it sent and we took,
 * but for an RC device only those whose results it has ACKed. A device
 * resends what is not ACKed when its timer runs out, and such a duplicate,
 * full-sized, gets its result back; that is how it recovers results it
 * dropped after a gap, wherever the switch cannot grow its small NAK or
 * ACK into a result (skb-built frames on veth).
 */
static __always_inline __u32 roce_ack_upto(const struct incxdp_roce_conn *conn)
{
	__u32 taken = roce_taken(conn);

	if (conn->rc_device && roce_psn_diff(conn->peer_acked, taken) < 0)
		return conn->peer_acked;
	return taken;
}

/* A cumulative ACK of the peer's SENDs up to roce_ack_upto(). */
static __always_inline void plan_ack_taken(struct roce_plan *pl, struct incxdp_roce_conn *conn,
					   __u32 stat)
{
	conn->acked_up = roce_ack_upto(conn);
	plan_ack(pl, stat, ROCE_AETH_ACK, conn->rx_base + conn->acked_up - 1, conn->msn);
}

/*
 * A SEND from a child (host: strict go-back-N; switch: any order). The
 * request q carries the frame's slot, set, idx, ImmDt and payload.
 * The connection's receive state (epsn, msn, nak_sent, imm) changes without
 * a lock: its frames share one 5-tuple, so one RX queue and CPU. What keeps
 * a contribution from counting twice is the set's bitmap, under the lock.
 */
static __always_inline void roce_from_child(struct xdp_md *ctx, const struct roce_pkt *r,
					    struct incxdp_roce_conn *conn,
					    const struct incxdp_job *job, int root,
					    struct roce_req *q, struct roce_plan *pl)
{
	__s32 d = roce_psn_diff(r->psn, conn->epsn);
	__s32 win = (__s32)job->pool_size;
	enum incxdp_stat stat;
	int a;

	if (conn->strict ? d > 0 : d >= win) {
		/* One NAK per gap: the host goes back N from epsn; the frames
		 * already in flight behind the lost one must not each ask. A NAK
		 * also ACKs everything before epsn, which a device must not hear
		 * while it lacks results of those SENDs: its timer recovers then. */
		if (!conn->strict || conn->nak_sent ||
		    roce_psn_diff(roce_ack_upto(conn), roce_taken(conn)) < 0) {
			plan_drop(pl, INCXDP_STAT_ROCE_AHEAD_DROP);
			return;
		}
		conn->nak_sent = 1;
		plan_ack(pl, INCXDP_STAT_ROCE_NAK, ROCE_AETH_NAK_SEQ, conn->epsn, conn->msn);
		return;
	}
	q->root = root;
	q->bit = conn->child;
	q->fanin = job->nworkers;
	if (conn->strict ? d < 0 : d < -win) {
		/* Behind the window: taken before, only the answer. */
		q->kind = RSET_RETX;
	} else {
		q->kind = RSET_CHILD;
		/* Broadcast: only the payload from the root rank's side is data.
		 * A host whose frames cannot grow here (skb-built frames on veth
		 * have no tailroom) pads its SENDs, so that whichever completes
		 * a set has room for the data; the padding is no contribution. */
		if (q->op == AGG_OP_ONE && !roce_subtree_has(conn, roce_imm_dest(q->imm)))
			q->nelems = 0;
	}
	a = incxdp_roce_set(ctx, q);
	if (a == AGG_CONSUMED || a == AGG_COMPLETED) {
		/* Taken. A switch child's frames come in any order: epsn is
		 * the highest PSN + 1 there. */
		if (d >= 0) {
			conn->epsn = (r->psn + 1) & ROCE_PSN_MASK;
			conn->nak_sent = 0;
		}
		conn->msn = (conn->msn + 1) & ROCE_AETH_MSN_MASK;
		if (r->has_imm)
			conn->imm = q->imm;
	}
	switch (tree_decide(a, root, 1, &stat)) {
	case TREE_DOWN:
		plan_set(pl, stat, RTX_DOWN, &q->v, q->idx, q->set, q->slot);
		pl->o.ip_id = (__u16)conn->job;
		pl->bcast_flags = BPF_F_BROADCAST;
		return;
	case TREE_UP:
		plan_set(pl, stat, RTX_UP, &q->v, q->idx, q->set, q->slot);
		return;
	case TREE_UNICAST:
		/* An RC requester resends a SEND nobody ACKed (the one that
		 * completed the set is answered with the result, not an ACK);
		 * if it has the result, it wants the ACK, or its QP fails. */
		if (roce_peer_has(conn, q->idx))
			plan_ack_taken(pl, conn, INCXDP_STAT_ROCE_DUP_ACK);
		else
			plan_result(pl, stat, conn, &q->v, q->idx, q->set, q->slot);
		return;
	case TREE_DROP:
		break;
	}
	/* Nothing for the tree; the connection may still owe an ACK (ACKs
	 * are cumulative: the last PSN taken). */
	if (a == AGG_RETX_PENDING)
		plan_ack_taken(pl, conn, stat);
	else if (a == AGG_CONSUMED && r->ackreq && conn->strict)
		plan_ack_taken(pl, conn, INCXDP_STAT_ROCE_ACK); /* r->psn = epsn - 1 */
	else if (a == AGG_CONSUMED && r->ackreq)
		plan_ack(pl, INCXDP_STAT_ROCE_ACK, ROCE_AETH_ACK, r->psn, conn->msn);
	else
		plan_drop(pl, stat);
}

/* A SEND from the parent: the job's result for idx, in any order. */
static __always_inline void roce_from_parent(struct xdp_md *ctx, const struct roce_pkt *r,
					     struct incxdp_roce_conn *conn, struct roce_req *q,
					     struct roce_plan *pl)
{
	enum incxdp_stat stat;

	q->kind = RSET_PARENT;
	if (tree_decide(incxdp_roce_set(ctx, q), 0, 1, &stat) != TREE_DOWN) {
		plan_drop(pl, stat);
		return;
	}
	if (roce_psn_diff(r->psn, conn->epsn) >= 0)
		conn->epsn = (r->psn + 1) & ROCE_PSN_MASK;
	conn->msn = (conn->msn + 1) & ROCE_AETH_MSN_MASK;
	if (r->has_imm)
		conn->imm = q->imm;
	plan_set(pl, stat, RTX_DOWN, &q->v, q->idx, q->set, q->slot);
	pl->o.ip_id = (__u16)conn->job;
	/* With ImmDt the payload already sits where the template has it. */
	pl->o.in_place = r->has_imm;
	/* No child sits behind the parent's port. */
	pl->bcast_flags = BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS;
}

/* An ACK from a child: ACKs are cumulative, so only a later one moves
 * peer_acked (no lock: the connection's frames share one RX queue).
 * Returns whether the peer is catching up after a NAK (peer_resend). */
static __always_inline int roce_peer_ack(struct incxdp_roce_conn *conn, __u32 psn)
{
	__u32 next = (psn - conn->tx_base + 1) & ROCE_PSN_MASK; /* idx + 1 */

	if (conn->role != INCXDP_ROCE_CHILD)
		return 0;
	if (roce_psn_diff(next, conn->peer_acked) > 0)
		conn->peer_acked = next;
	return conn->peer_resend;
}

/* Whether a strict child has SENDs we took but never ACKed (those that
 * completed a set). */
static __always_inline int roce_owed_ack(const struct incxdp_roce_conn *conn)
{
	return conn->role == INCXDP_ROCE_CHILD && conn->strict &&
	       roce_psn_diff(roce_ack_upto(conn), conn->acked_up) > 0;
}

/*
 * A NAK from a child (its expected PSN on our stream names the idx), or
 * (resend) an ACK from it while it catches up, standing for a NAK of the
 * PSN after it: the held result again. Catching up ends where no result
 * is held, at the live edge of the stream.
 */
static __always_inline void roce_peer_nak(struct xdp_md *ctx, struct incxdp_roce_conn *conn,
					  int root, struct roce_req *q, struct roce_plan *pl,
					  int resend)
{
	__u32 stat = resend ? INCXDP_STAT_ROCE_PEER_RESEND : INCXDP_STAT_ROCE_PEER_NAK;
	int a;

	conn->peer_resend = 1;
	q->kind = RSET_RETX;
	q->root = root;
	a = incxdp_roce_set(ctx, q);
	if (a < 0) {
		plan_drop(pl, INCXDP_STAT_BAD_SLOT);
	} else if (a == AGG_RETX_RESULT) {
		plan_result(pl, stat, conn, &q->v, q->idx, q->set, q->slot);
	} else {
		conn->peer_resend = 0;
		plan_drop(pl, resend ? INCXDP_STAT_ROCE_PEER_ACK : INCXDP_STAT_ROCE_PEER_NAK);
	}
}

/*
 * The start handshake (docs/ROCE.md "Consecutive runs"): a new host process
 * asks where its connection stands. The answer names the PSN we expect next
 * from it and the PSN of our next result to it, both from the same index
 * (everything before it is the previous run's). What the previous run left
 * on the connection that would act on the new one goes: a NAK still out, a
 * resend in progress, an ACK owed for SENDs of the old process.
 */
static __always_inline void roce_sync(struct incxdp_roce_conn *conn, struct roce_plan *pl)
{
	if (conn->role != INCXDP_ROCE_CHILD) {
		plan_drop(pl, INCXDP_STAT_ROCE_PEER_ACK);
		return;
	}
	conn->nak_sent = 0;
	conn->peer_resend = 0;
	conn->acked_up = roce_ack_upto(conn);
	plan_ack(pl, INCXDP_STAT_ROCE_SYNC, ROCE_AETH_SYNC_ANS, conn->epsn,
		 conn->tx_base + roce_taken(conn));
}

/*
 * Builds and sends what the plan says. The counter is the plan's; a frame
 * that cannot be built or redirected also counts redirect_fail.
 */
static __always_inline int roce_finish(struct xdp_md *ctx, struct roce_plan *pl,
				       const struct incxdp_roce_conn *conn,
				       const struct incxdp_parent *up)
{
	struct incxdp_roce_conn_key key;
	struct incxdp_roce_conn *parent;

	stat_inc(pl->stat);
	switch (pl->tx) {
	case RTX_TX:
		if (incxdp_roce_emit(ctx, &pl->o, conn) < 0)
			break;
		return XDP_TX;
	case RTX_UP:
		if (!up)
			break;
		key.qpn = up->qpn;
		parent = bpf_map_lookup_elem(&incxdp_roce_conns, &key);
		if (!parent)
			break;
		pl->o.psn += parent->tx_base;
		if (incxdp_roce_emit(ctx, &pl->o, parent) < 0)
			break;
		if (bpf_redirect_map(&incxdp_ports, parent->ifindex, 0) != XDP_REDIRECT)
			break;
		return XDP_REDIRECT;
	case RTX_DOWN:
		if (incxdp_roce_emit(ctx, &pl->o, NULL) < 0)
			break;
		if (bpf_redirect_map(&incxdp_ports, 0, pl->bcast_flags) != XDP_REDIRECT)
			break;
		return XDP_REDIRECT;
	default:
		return XDP_DROP;
	}
	stat_inc(INCXDP_STAT_REDIRECT_FAIL);
	return XDP_DROP;
}

static __always_inline int roce_drop(__u32 stat)
{
	stat_inc(stat);
	return XDP_DROP;
}

/* A frame to UDP 4791: docs/ROCE.md §3, checks first, each counted. */
static __always_inline int roce_ingress(struct xdp_md *ctx, struct cursor *c,
					const struct ethhdr *eth, const struct iphdr *ip,
					const struct udphdr *udp)
{
	struct roce_pkt r = {};
	struct roce_plan pl = {};
	struct roce_req q;
	struct incxdp_parent *up = NULL;
	struct incxdp_roce_conn *conn;
	struct incxdp_job *job;
	__u32 key, idx, imm, op;
	int resend = 0, ret;

	if (roce_parse(c, ip, udp, &r) < 0)
		return roce_drop(INCXDP_STAT_ROCE_MALFORMED);
	/* A nonzero UDP checksum stands in for the ICRC (udp_csum.h). */
	if (udp->check) {
		if (!udp_csum_ok(ctx))
			return roce_drop(INCXDP_STAT_ROCE_BAD_CSUM);
	} else if (!icrc_ok(ctx)) {
		return roce_drop(INCXDP_STAT_ROCE_BAD_ICRC);
	}
	conn = roce_conn_of(ctx, eth, ip, r.qpn);
	if (!conn || (conn->role != INCXDP_ROCE_CHILD && conn->role != INCXDP_ROCE_PARENT))
		return roce_drop(INCXDP_STAT_ROCE_UNKNOWN_QP);
	key = conn->job;
	job = bpf_map_lookup_elem(&incxdp_jobs, &key);
	if (!roce_job_ok(job) ||
	    (conn->role == INCXDP_ROCE_CHILD && conn->child >= job->nworkers))
		return roce_drop(INCXDP_STAT_BAD_JOB);
	if (r.opcode == ROCE_OP_ACK && (r.word & ROCE_AETH_SYNDROME_MASK) == ROCE_AETH_SYNC_REQ) {
		roce_sync(conn, &pl);
		return roce_finish(ctx, &pl, conn, NULL);
	}
	if (r.opcode == ROCE_OP_ACK && (r.word & 0xe0000000u) != ROCE_AETH_NAK_GROUP) {
		if (!roce_peer_ack(conn, r.psn)) {
			if (!roce_owed_ack(conn))
				return roce_drop(INCXDP_STAT_ROCE_PEER_ACK);
			plan_ack_taken(&pl, conn, INCXDP_STAT_ROCE_LATE_ACK);
			return roce_finish(ctx, &pl, conn, NULL);
		}
		r.psn = (r.psn + 1) & ROCE_PSN_MASK; /* as a NAK of the next PSN */
		resend = 1;
	} else if (r.opcode == ROCE_OP_ACK && conn->role != INCXDP_ROCE_CHILD) {
		return roce_drop(INCXDP_STAT_ROCE_PEER_NAK); /* we never resend aggregates on NAK */
	}

	/* idx on the stream the PSN belongs to: the peer's to us, or (a NAK)
	 * ours to the peer. pool_size is a power of two, so slot and set stay
	 * consistent across the 24-bit wrap of idx. */
	idx = (r.psn - (r.opcode == ROCE_OP_ACK ? conn->tx_base : conn->rx_base)) & ROCE_PSN_MASK;
	__builtin_memset(&q, 0, sizeof(q));
	q.idx = idx;
	q.set = (idx & job->pool_size) ? 1 : 0;
	/* incxdp_roce_set() looks the slot up (it must, to lock it) and
	 * answers -1 (bad_slot) when the pool runs past the slot map. */
	q.slot = job->pool_base + (idx & (job->pool_size - 1));
	/* A child's frame may go up the tree: the job's link to its parent,
	 * as every wire's (none at the root). */
	if (conn->role == INCXDP_ROCE_CHILD)
		up = tree_parent(conn->job);
	if (r.opcode == ROCE_OP_ACK) {
		roce_peer_nak(ctx, conn, !up, &q, &pl, resend);
		ret = roce_finish(ctx, &pl, conn, up);
		/* The NAK or ACK could not grow into the result (skb-built frames
		 * on veth have no tailroom): stop answering ACKs with results, so
		 * that the next one gets the ACK the peer is owed instead, and its
		 * timer resends the SENDs whose results it lacks (full-sized). */
		if (ret == XDP_DROP && pl.tx == RTX_TX)
			conn->peer_resend = 0;
		return ret;
	}

	imm = r.has_imm ? r.word : conn->imm;
	if (!roce_imm_ok(imm, r.nelems))
		return roce_drop(INCXDP_STAT_ROCE_MALFORMED);
	if (r.nelems > job->max_elems)
		return roce_drop(INCXDP_STAT_BAD_SLOT);
	op = roce_imm_op(imm);
	q.imm = imm;
	q.nelems = r.nelems;
	q.payload = ROCE_HDRS_LEN + (r.has_imm ? ROCE_IMM_LEN : 0);
	q.op = op ? op - ROCE_OPR_SUM + INCXDP_OP_SUM : INCXDP_OP_SUM;
	if (roce_imm_prim(imm) == ROCE_PRIM_BROADCAST)
		q.op = AGG_OP_ONE;
	q.dtype = roce_imm_dtype(imm);
	if (conn->role == INCXDP_ROCE_CHILD)
		roce_from_child(ctx, &r, conn, job, !up, &q, &pl);
	else
		roce_from_parent(ctx, &r, conn, &q, &pl);
	return roce_finish(ctx, &pl, conn, up);
}

#endif
