/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The tree layer of every wire (docs/ENGINE.md, "Trees"). A job may span
 * several switches: each waits for its children (hosts and switches below),
 * and below the root sends its aggregate up to the parent (incxdp_parents);
 * the root's result comes down, and every switch stores it and multicasts
 * it to its children. A one-switch star (fanin 0, no parent) is the tree of
 * one node. Native UDP sends DATA up and RESULT down; RoCE (roce.h) sends
 * SENDs on its RC connections, the parent's found through its
 * incxdp_parents entry (qpn).
 *
 * The decisions live here; the slot rule (agg.h) stays tree-agnostic apart
 * from the expected count, the sender's bit and whether a complete set
 * holds the final result.
 */
#ifndef INCXDP_TREE_H
#define INCXDP_TREE_H

#include "agg.h"
#include "maps.bpf.h"
#include "parse.h"
#include "incxdp/proto.h"

enum tree_action {
	TREE_DROP,    /* counted and dropped */
	TREE_DOWN,    /* multicast to the children (the result) */
	TREE_UP,      /* to the parent (the aggregate) */
	TREE_UNICAST, /* back to the sender (the result it missed) */
};

/* A counter per outcome and wire: RoCE counts in its own names. */
#define TREE_STAT(roce, NATIVE, ROCE) ((roce) ? INCXDP_STAT_##ROCE : INCXDP_STAT_##NATIVE)

/*
 * What a switch does with an aggregation outcome, for every wire; *stat is
 * its counter. A wire with acknowledgements (RoCE) may still answer the
 * sender of a dropped frame: that is its adapter's, not the tree's.
 */
static __always_inline enum tree_action tree_decide(int outcome, int root, int roce,
						    enum incxdp_stat *stat)
{
	switch (outcome) {
	case AGG_CONSUMED:
		*stat = TREE_STAT(roce, CONSUMED, ROCE_ABSORBED);
		return TREE_DROP;
	case AGG_RETX_PENDING:
		*stat = TREE_STAT(roce, RETX_DROP, ROCE_DUP_ACK);
		return TREE_DROP;
	case AGG_STALE:
		*stat = TREE_STAT(roce, STALE, ROCE_STALE);
		return TREE_DROP;
	case AGG_MISMATCH:
		*stat = TREE_STAT(roce, MISMATCH, ROCE_MISMATCH);
		return TREE_DROP;
	case AGG_COMPLETED:
		/* complete at the root: down; below it: up */
		*stat = root ? TREE_STAT(roce, COMPLETED, ROCE_DOWN) : TREE_STAT(roce, UP, ROCE_UP);
		return root ? TREE_DOWN : TREE_UP;
	case AGG_RETX_RESULT:
		*stat = TREE_STAT(roce, RETX_UNICAST, ROCE_DUP_RESULT);
		return TREE_UNICAST;
	case AGG_RETX_UP:
		/* our partial or the parent's result was lost: ask again */
		*stat = TREE_STAT(roce, DUP_UP, ROCE_DUP_UP);
		return TREE_UP;
	case AGG_RESULT_TAKEN:
		*stat = TREE_STAT(roce, DOWN, ROCE_DOWN);
		return TREE_DOWN;
	case AGG_RESULT_STALE:
		*stat = TREE_STAT(roce, RESULT_STALE, ROCE_STALE);
		return TREE_DROP;
	}
	*stat = INCXDP_STAT_BAD_SLOT; /* the slot vanished: cannot happen (array) */
	return TREE_DROP;
}

/* The job's parent, or NULL at the root (and for a one-switch star). */
static __always_inline struct incxdp_parent *tree_parent(__u32 job)
{
	struct incxdp_parent *p = bpf_map_lookup_elem(&incxdp_parents, &job);

	return p && p->ifindex ? p : NULL;
}

/* A RESULT is only taken from the parent's addresses on the parent's port:
 * anyone else could otherwise overwrite a set's result. */
static __always_inline int tree_from_parent(const struct incxdp_parent *p, __u32 ingress,
					    const struct ethhdr *eth, const struct iphdr *ip)
{
	const __u8 *a = eth->h_source, *b = p ? p->dst_mac : a;

	return p && p->ifindex == ingress && ip->saddr == p->dst_ip && a[0] == b[0] &&
	       a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

/* The sender's bit and the count a set of this job waits for. */
static __always_inline __u32 tree_bit(const struct incxdp_job *job, const struct incxdp_worker *w)
{
	return job->fanin ? (w->child & INCXDP_CHILD_BIT_MASK) : w->rank;
}

static __always_inline __u32 tree_expected(const struct incxdp_job *job)
{
	return job->fanin ? job->fanin : job->nworkers;
}

/* Turns the contribution's header into our partial for the parent: a DATA
 * frame from the rank the parent knows us by. */
static __always_inline void tree_encode_partial(struct contrib *k, __s8 exp, __u16 rank,
						__u16 nworkers, void *end)
{
	struct incxdp_hdr *h = k->hdr;

	if ((void *)(h + 1) > end)
		return;
	h->ver_type = (INCXDP_VERSION << 4) | INCXDP_MSG_DATA;
	h->rank = bpf_htons(rank);
	h->nworkers = bpf_htons(nworkers);
	h->exp = exp;
}

/* Addresses the frame to the parent and sends it out of the port towards it. */
static __always_inline int tree_send_up(struct ethhdr *eth, struct iphdr *ip, struct udphdr *udp,
					const struct incxdp_parent *p)
{
	__builtin_memcpy(eth->h_dest, p->dst_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->src_mac, ETH_ALEN);
	ip->saddr = p->src_ip;
	ip->daddr = p->dst_ip;
	ip->id = 0;
	ip->ttl = 64;
	ipv4_csum_update(ip);
	udp->source = p->src_port;
	udp->dest = p->dst_port;
	udp->check = 0; /* optional for IPv4; the payload changed */
	return bpf_redirect(p->ifindex, 0);
}

/* The UDP port a child's results go to: a child switch sends partials from
 * a per-job port but takes results on its native port, which its egress
 * entry holds. */
static __always_inline __be16 tree_child_port(const struct incxdp_worker *w, __u32 job,
					      __be16 sender_port)
{
	struct incxdp_egress_key key = { .job = job, .ifindex = w->ifindex };
	struct incxdp_egress *rw;

	if (!(w->child & INCXDP_CHILD_SWITCH))
		return sender_port;
	rw = bpf_map_lookup_elem(&incxdp_egress, &key);
	return rw ? rw->dst_port : sender_port;
}

#endif
