/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * RoCEv2 frames the engine sends (docs/ROCE.md §3): every one is rebuilt in
 * the buffer of the frame that caused it. The length is set first with
 * bpf_xdp_adjust_tail (which invalidates every packet pointer, so the writers
 * below re-derive theirs from ctx), then the headers, the payload and the
 * ICRC are written. What every frame gets: IPv4 without options, ID 0
 * (the multicast template: the job), DF, TTL 64, a UDP checksum (the
 * multicast template: the sum of its tail, its copies get theirs in the
 * egress program), P_Key
 * 0xFFFF, no AckReq, SEND_ONLY_IMM or ACK.
 */
#ifndef INCXDP_ROCE_TX_H
#define INCXDP_ROCE_TX_H

#include "parse.h"
#include "agg.h"
#include "icrc.h"
#include "udp_csum.h"
#include "maps.bpf.h"
#include "incxdp/roce.h"

#define ROCE_IP_DF 0x4000
INCXDP_STATIC_ASSERT(ROCE_MAX_ELEMS <= INCXDP_MAX_ELEMS, "a RoCE payload fits a slot");
INCXDP_STATIC_ASSERT(ROCE_MIN_IMM_FRAME + ROCE_MAX_PAYLOAD <= ROCE_ICRC_MAX_FRAME,
		     "the largest frame is one the ICRC walk covers");

/* What goes out, apart from the addresses. */
struct roce_out {
	__u32 psn;     /* BTH PSN (the template: idx) */
	__u32 word;    /* AETH (ACK/NAK) or ImmDt, host order */
	__u32 nelems;  /* payload, from a slot set's values */
	__u32 set;     /* which of the slot's sets holds them */
	__u32 slot;    /* the slot: its key in incxdp_slots */
	__u16 ip_id;   /* 0, or the job on the multicast template */
	__u8 opcode;   /* ROCE_OP_ACK or ROCE_OP_SEND_ONLY_IMM */
	__u8 in_place; /* the payload in the buffer already is the set's values */
};

static __always_inline __u32 roce_out_len(const struct roce_out *o)
{
	if (o->opcode == ROCE_OP_ACK)
		return ROCE_ACK_FRAME;
	return ROCE_MIN_IMM_FRAME + (o->nelems < ROCE_MAX_ELEMS ? o->nelems : ROCE_MAX_ELEMS) * 4;
}

/*
 * AckReq on a result to a host: an RC device ACKs only what asks for it,
 * and a duplicate of a SEND is answered with an ACK only once the host
 * ACKed its result (roce_peer_has()). hostlib's own frames ignore it.
 */
static __always_inline __u32 roce_result_ackreq(const struct incxdp_roce_conn *to,
						const struct roce_out *o)
{
	return to && o->opcode != ROCE_OP_ACK && to->role == INCXDP_ROCE_CHILD && to->strict ?
		       ROCE_BTH_ACKREQ :
		       0;
}

/*
 * Ethernet to the AETH/ImmDt word of a frame of `len` bytes. With `to`, the
 * frame is addressed to that connection's peer; without (the multicast
 * template), the addresses stay, the egress program writes them per copy.
 */
static __always_inline int roce_write_hdrs(void *data, void *end,
					   const struct incxdp_roce_conn *to, __u32 len,
					   const struct roce_out *o)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	struct roce_bth *bth = (void *)(udp + 1);
	__be32 *word = (void *)(bth + 1);

	if ((void *)(word + 1) > end)
		return -1;
	if (to) {
		__builtin_memcpy(eth->h_dest, to->peer_mac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, to->own_mac, ETH_ALEN);
		ip->saddr = to->own_ip;
		ip->daddr = to->peer_ip;
		udp->source = to->udp_sport;
		bth->dqpn = bpf_htonl(to->peer_qpn & ROCE_QPN_MASK);
	} else {
		bth->dqpn = 0; /* no connection has QPN 0: "rewrite me" */
	}
	eth->h_proto = bpf_htons(ETH_P_IP);
	*(__u8 *)ip = 0x45;
	/* Keep the traffic class, not a congestion mark meant for another frame. */
	ip->tos &= ~3;
	ip->tot_len = bpf_htons(len - sizeof(*eth));
	ip->id = bpf_htons(o->ip_id);
	ip->frag_off = bpf_htons(ROCE_IP_DF);
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ipv4_csum_update(ip);
	udp->dest = bpf_htons(INCXDP_ROCE_UDP_PORT);
	udp->len = bpf_htons(len - sizeof(*eth) - sizeof(*ip));
	udp->check = 0; /* filled in last, over the ICRC (incxdp_roce_emit) */
	bth->opcode = o->opcode;
	bth->flags = ROCE_BTH_TVER;
	bth->pkey = bpf_htons(ROCE_PKEY_DEFAULT);
	bth->apsn = bpf_htonl((o->psn & ROCE_PSN_MASK) | roce_result_ackreq(to, o));
	*word = bpf_htonl(o->word);
	return 0;
}

/* Sets the buffer to exactly `len` bytes. Packet pointers are stale after. */
static __always_inline int roce_set_len(struct xdp_md *ctx, __u32 len)
{
	__s32 cur = (__s32)(ctx->data_end - ctx->data);

	if ((__s32)len == cur)
		return 0;
	return bpf_xdp_adjust_tail(ctx, (__s32)len - cur) ? -1 : 0;
}

/*
 * Rebuilds the frame in ctx as `o`, addressed to `to` (NULL: the multicast
 * template), with the values of set o->set of slot o->slot as payload (unless
 * they are in place already). Returns 0, or -1 if the buffer could not take
 * the frame. Global, so the verifier walks its payload loop once; every
 * packet pointer of the caller is stale after it (bpf_xdp_adjust_tail). The
 * slot is looked up here: a slot holds a bpf_spin_lock, and the verifier
 * refuses memory with a lock in it as a global function's argument.
 * The template carries the CRC of its tail in the ICRC's place and the sum
 * of its tail in the UDP checksum's, so that the egress program only
 * combines them with each copy's headers (icrc.h, udp_csum.h).
 */
__attribute__((noinline)) int incxdp_roce_emit(struct xdp_md *ctx, const struct roce_out *o,
					       const struct incxdp_roce_conn *to)
{
	struct roce_out out;
	struct contrib k = {};
	struct incxdp_slot *slot = NULL;
	struct udphdr *udp;
	void *data, *end;
	int same_len, tail_ready, tail_sum = -1;
	__u32 len, *w;

	if (!o)
		return -1;
	out = *o;
	len = roce_out_len(&out);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	udp = data + UDP_CSUM_UDP_OFF;
	if ((void *)(udp + 1) > end)
		return -1;
	/* The payload in place and staying (a Reduce-cut copy shrinks). */
	same_len = out.in_place && (__u32)(end - data) == len;
	/* The tail's sum, where the frame has it already: a copy's from its
	 * template, a parent's result's from its checked checksum (before
	 * anything here touches the frame). */
	if (same_len && to)
		tail_sum = udp->check;
	else if (same_len && udp->check)
		tail_sum = udp_csum_tail_of_checked(ctx);
	/* A template in place is the parent's result frame, with the parent's
	 * headers and the ICRC ingress checked: that turns into the tail's
	 * CRC without a pass over the payload (icrc.h), if the ImmDt stays
	 * what it is. */
	tail_ready = same_len && !to && incxdp_roce_icrc_from_tail(ctx) == 0;
	if (roce_set_len(ctx, len) < 0)
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	w = data + ROCE_HDRS_LEN;
	if ((void *)(w + 1) > end)
		return -1;
	udp = data + UDP_CSUM_UDP_OFF; /* before w: in the range just checked */
	if (tail_ready && *w != bpf_htonl(out.word))
		tail_ready = 0;
	if (roce_write_hdrs(data, end, to, len, &out) < 0)
		return -1;
	if (out.opcode != ROCE_OP_ACK && out.nelems && !out.in_place)
		slot = bpf_map_lookup_elem(&incxdp_slots, &out.slot);
	if (slot) {
		k.payload = data + ROCE_HDRS_LEN + ROCE_IMM_LEN;
		k.nelems = out.nelems < ROCE_MAX_ELEMS ? out.nelems : ROCE_MAX_ELEMS;
		tail_sum = csum_fold16(agg_store_result(slot->vals[out.set & 1], &k, end) + *w);
	} else if (out.opcode == ROCE_OP_ACK || !out.nelems) {
		tail_sum = csum_fold16(*w); /* the tail is the AETH or ImmDt alone */
	} else if (tail_sum < 0) {
		tail_sum = udp_csum_tail(ctx); /* no checksum came with it */
	}
	if (tail_sum < 0)
		return -1;
	if (!to) {
		if (!tail_ready && icrc_tail_store(ctx) < 0)
			return -1;
		udp->check = (__u16)tail_sum;
		return 0;
	}
	/* In place with a payload: a multicast copy, whose tail is the
	 * template's (a Reduce-cut copy has a tail of its own, just the ImmDt). */
	if ((out.in_place && out.nelems ? incxdp_roce_icrc_from_tail(ctx) : icrc_store(ctx)) < 0)
		return -1;
	/* After the ICRC, which the UDP checksum covers (udp_csum.h). */
	return udp_csum_finish(ctx, (__u32)tail_sum);
}

/* Whether `rank` sits behind the connection (its subtree's ranks). */
static __always_inline int roce_subtree_has(const struct incxdp_roce_conn *conn, __u32 rank)
{
	return rank < 64 && (conn->subtree_ranks >> rank) & 1;
}

/*
 * A Reduce result goes only toward its root rank: every other port gets the
 * 0-payload completion (docs/ROCE.md §2).
 */
static __always_inline int roce_reduce_cut(__u32 imm, const struct incxdp_roce_conn *to)
{
	return roce_imm_prim(imm) == ROCE_PRIM_REDUCE && !roce_subtree_has(to, roce_imm_dest(imm));
}

/*
 * incxdp_egress_rewrite for RoCE frames. The multicast template (destination
 * QPN 0, idx in the PSN field, the job in the IPv4 ID, its tail's CRC in the
 * ICRC's place) is addressed to the
 * child connection behind this port; any other RoCE frame (the aggregate to
 * the parent) leaves as it is. Returns the devmap program's verdict.
 *
 * bpf_xdp_adjust_tail is available to devmap programs (xdp_func_proto has no
 * attach-type exception for it; the frame is re-read from the buffer after
 * XDP_PASS), so a Reduce copy is cut here.
 */
static __always_inline int roce_egress(struct xdp_md *ctx, struct cursor *c, struct iphdr *ip,
				       struct udphdr *udp)
{
	struct roce_bth *bth;
	__be32 *w;
	struct incxdp_egress_key key;
	struct incxdp_egress *rw;
	struct incxdp_roce_conn_key ck;
	struct incxdp_roce_conn *to;
	struct roce_out o = { .opcode = ROCE_OP_SEND_ONLY_IMM };
	__u32 ulen;

	/* Anything but a template is not ours to judge: sent as it came. */
	bth = CURSOR_TAKE(c, struct roce_bth);
	if (!bth || (bth->dqpn & bpf_htonl(ROCE_QPN_MASK)))
		return XDP_PASS;
	w = CURSOR_TAKE(c, __be32);
	if (!w)
		goto drop;
	key.job = bpf_ntohs(ip->id);
	key.ifindex = ctx->egress_ifindex;
	rw = bpf_map_lookup_elem(&incxdp_egress, &key);
	if (!rw)
		goto drop;
	ck.qpn = rw->roce_qpn;
	to = bpf_map_lookup_elem(&incxdp_roce_conns, &ck);
	if (!to)
		goto drop;
	ulen = bpf_ntohs(udp->len);
	if (ulen < sizeof(*udp) + sizeof(*bth) + ROCE_IMM_LEN + ROCE_ICRC_LEN)
		goto drop;
	o.word = bpf_ntohl(*w);
	o.psn = to->tx_base + (bpf_ntohl(bth->apsn) & ROCE_PSN_MASK);
	o.nelems = roce_reduce_cut(o.word, to) ? 0 :
		   (ulen - sizeof(*udp) - sizeof(*bth) - ROCE_IMM_LEN - ROCE_ICRC_LEN) / 4;
	o.in_place = 1;
	if (incxdp_roce_emit(ctx, &o, to) < 0)
		goto drop;
	stat_inc(INCXDP_STAT_EGRESS_TX);
	return XDP_PASS; /* in a devmap program, PASS means "transmit" */
drop:
	stat_inc(INCXDP_STAT_EGRESS_DROP);
	return XDP_DROP;
}

#endif
