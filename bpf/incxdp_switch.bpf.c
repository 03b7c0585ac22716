// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * incxdp switch: in-network aggregation on the XDP fast path.
 *
 * incxdp_ingress runs on every switch port. Aggregation frames (SwitchML on
 * UDP 0xBEE0-0xBEEF, native incxdp on native_port) from registered workers
 * are added into their job's slot; the frame completing a slot becomes the
 * result and is broadcast through the incxdp_ports devmap, where
 * incxdp_egress_rewrite addresses each copy to the job's worker behind that
 * port (a P4 multicast group plus egress rewrite). RoCEv2 (UDP 4791) takes
 * the tree path of bpf/lib/roce.h (docs/ROCE.md). Everything else passes.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parse.h"
#include "maps.bpf.h"
#include "decode.h"
#include "agg.h"
#include "tree.h"
#include "roce.h"
#include "prologue.h"

/* Set by the loader before load (`incxdp load --native-port`). */
const volatile __u16 native_port = INCXDP_UDP_PORT;

enum l4_kind { L4_OTHER, L4_SWITCHML, L4_NATIVE, L4_ROCE };

struct frame {
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *end;
};

static __always_inline enum l4_kind classify(struct cursor *c, struct frame *f)
{
	__u16 dport;

	f->eth = parse_eth(c);
	if (!f->eth || f->eth->h_proto != bpf_htons(ETH_P_IP))
		return L4_OTHER;
	f->ip = parse_ipv4_plain(c);
	if (!f->ip || f->ip->protocol != IPPROTO_UDP)
		return L4_OTHER;
	f->udp = parse_udp(c);
	if (!f->udp)
		return L4_OTHER;
	dport = bpf_ntohs(f->udp->dest);
	if (dport >= SWITCHML_UDP_PORT_MIN && dport <= SWITCHML_UDP_PORT_MAX)
		return L4_SWITCHML;
	if (dport == native_port)
		return L4_NATIVE;
	if (dport == INCXDP_ROCE_UDP_PORT)
		return L4_ROCE;
	return L4_OTHER;
}

/*
 * The datagram's own length fields must hold what we aggregate: bytes past
 * the UDP length (Ethernet padding, leftovers) are not the sender's data,
 * and the result goes out with the request's lengths.
 */
static __always_inline int lengths_cover(const struct frame *f, const struct contrib *k)
{
	__u32 tot = bpf_ntohs(f->ip->tot_len), ulen = bpf_ntohs(f->udp->len);
	__u64 in_frame = (__u64)(f->end - (void *)f->ip);
	__u64 need = (__u64)((void *)k->payload - (void *)f->udp);

	/* Keeps clang from reassociating this into scalar - pointer, which
	 * the verifier refuses. */
	barrier_var(need);
	need += (__u64)k->nelems * 4;

	return tot >= sizeof(struct iphdr) + sizeof(struct udphdr) && tot <= in_frame &&
	       ulen == tot - sizeof(struct iphdr) && ulen >= need;
}

static __always_inline struct incxdp_worker *lookup_sender(const struct frame *f)
{
	struct incxdp_worker_key key = {};

	__builtin_memcpy(key.mac, f->eth->h_source, ETH_ALEN);
	key.port = f->udp->source;
	key.ip = f->ip->saddr;
	return bpf_map_lookup_elem(&incxdp_workers, &key);
}

/* Sends the frame back where it came from: the unicast of a cached result. */
static __always_inline int reply_unicast(struct frame *f)
{
	__u8 mac[ETH_ALEN];
	__be32 ip = f->ip->saddr;
	__be16 port = f->udp->source;

	__builtin_memcpy(mac, f->eth->h_source, ETH_ALEN);
	__builtin_memcpy(f->eth->h_source, f->eth->h_dest, ETH_ALEN);
	__builtin_memcpy(f->eth->h_dest, mac, ETH_ALEN);
	f->ip->saddr = f->ip->daddr;
	f->ip->daddr = ip;
	f->ip->ttl = 64;
	ipv4_csum_update(f->ip);
	f->udp->source = f->udp->dest;
	f->udp->dest = port;
	f->udp->check = 0; /* optional for IPv4; the payload changed */
	return XDP_TX;
}

/*
 * The egress stage needs the job to find each port's rewrite. The IP ID of
 * the result is free (we rewrite the header anyway, and results are never
 * fragmented), so it carries the job id across the devmap broadcast; this
 * works in native and generic (skb) mode alike, unlike XDP metadata.
 */
static __always_inline int multicast_result(struct frame *f, __u32 job, __u64 flags)
{
	long ret;

	f->ip->id = bpf_htons((__u16)job);
	ret = bpf_redirect_map(&incxdp_ports, 0, BPF_F_BROADCAST | flags);
	if (ret != XDP_REDIRECT) {
		stat_inc(INCXDP_STAT_REDIRECT_FAIL);
		return XDP_DROP;
	}
	return XDP_REDIRECT;
}

/*
 * What incxdp_agg needs of a contribution or of a parent's result. A global
 * function only gets scalars and plain memory, so the packet pointers
 * travel as offsets.
 */
struct agg_req {
	struct contrib k; /* hdr and payload: NULL, see the offsets */
	__u32 slot;       /* key in incxdp_slots */
	__u32 expected;   /* contributions the set waits for */
	__u32 bit;        /* the sender's bit in the slot bitmap */
	__u32 root;       /* a complete set holds the final result */
	__u32 done_flags; /* what a set completing here takes (agg_apply) */
	__u32 hdr_off;    /* k.hdr - ctx->data */
	__u32 payload_off;
	__u16 up_rank;    /* below the root: the header of our partial */
	__u16 up_nworkers;
};

/*
 * agg_apply (or agg_take_result for a parent's RESULT) under the slot's
 * lock, and for a frame leaving with the set's values those values and
 * its header written into the frame. Global, so the verifier walks the
 * element loops once instead of once per path of aggregate() that reaches
 * them (~900k instructions walked inline: nearly the whole 1M budget the
 * program shares with the RoCE path). Returns the enum agg_outcome, or -1.
 */
__attribute__((noinline)) int incxdp_agg(struct xdp_md *ctx, struct agg_req *q)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct incxdp_slot *slot;
	struct agg_view view;
	struct contrib k;
	__u32 key, hoff, poff;
	int out;

	if (!q)
		return -1;
	k = q->k;
	hoff = q->hdr_off;
	poff = q->payload_off;
	if (hoff > 64 || poff > 128)
		return -1;
	k.hdr = data + hoff;
	k.payload = data + poff;
	key = q->slot;
	slot = bpf_map_lookup_elem(&incxdp_slots, &key);
	if (!slot)
		return -1;
	/* The parent's result: forwarded as it came, values only stored. */
	if (k.msg == INCXDP_MSG_RESULT)
		return agg_take_result(slot, &k, AGG_MATCH_BITMAP, end, &view);
	out = agg_apply(slot, &k, q->expected, q->bit, q->root, q->done_flags, AGG_MATCH_BITMAP, 0,
			end, &view);
	if (out == AGG_RETX_RESULT || (out == AGG_COMPLETED && q->root)) {
		agg_store_result(slot->vals[k.set & 1], &k, end);
		encode_result_hdr(&k, view.exp0, view.exp1, end);
	} else if (out == AGG_RETX_UP || out == AGG_COMPLETED) {
		agg_store_result(slot->vals[k.set & 1], &k, end);
		tree_encode_partial(&k, view.exp0, q->up_rank, q->up_nworkers, end);
	}
	return out;
}

/* The checks every frame of a job passes before it touches a slot: the
 * header agrees with the job, the slot is in the job's pool. */
static __always_inline int job_admits(const struct incxdp_job *job, const struct contrib *k)
{
	if (!job || !job->active || (k->nworkers && k->nworkers != job->nworkers)) {
		stat_inc(INCXDP_STAT_BAD_JOB);
		return 0;
	}
	if (k->slot >= job->pool_size || k->nelems > job->max_elems) {
		stat_inc(INCXDP_STAT_BAD_SLOT);
		return 0;
	}
	return 1;
}

static __always_inline int aggregate(struct xdp_md *ctx, struct cursor *c, struct frame *f,
				     enum l4_kind kind)
{
	struct incxdp_parent *parent = NULL;
	struct incxdp_worker *w = NULL;
	enum incxdp_stat stat;
	struct contrib k = {};
	struct agg_req q = {};
	struct incxdp_job *job;
	__u32 idx;
	int out;

	if ((kind == L4_SWITCHML ? decode_switchml(c, &k) : decode_native(c, &k)) < 0 ||
	    !lengths_cover(f, &k)) {
		stat_inc(INCXDP_STAT_MALFORMED);
		return XDP_DROP;
	}
	if (k.msg == INCXDP_MSG_RESULT) {
		/* Down a tree: only from this job's parent. */
		parent = tree_parent(k.job);
		if (!tree_from_parent(parent, ctx->ingress_ifindex, f->eth, f->ip)) {
			stat_inc(INCXDP_STAT_NOT_PARENT);
			return XDP_DROP;
		}
		idx = k.job;
		job = bpf_map_lookup_elem(&incxdp_jobs, &idx);
		if (!job_admits(job, &k))
			return XDP_DROP;
	} else {
		w = lookup_sender(f);
		if (!w) {
			stat_inc(INCXDP_STAT_UNKNOWN_SENDER);
			return XDP_DROP;
		}
		if (w->ifindex != ctx->ingress_ifindex) {
			stat_inc(INCXDP_STAT_WRONG_PORT);
			return XDP_DROP;
		}
		if (k.wire == INCXDP_WIRE_SWITCHML) {
			k.job = w->job;
			k.rank = w->rank;
		}
		idx = w->job;
		job = bpf_map_lookup_elem(&incxdp_jobs, &idx);
		/* The header's job and rank must be the ones the sender is
		 * registered with: a worker cannot contribute as another rank
		 * or to another job. */
		if (job && (k.job != w->job || k.rank != w->rank || k.rank >= job->nworkers)) {
			stat_inc(INCXDP_STAT_BAD_JOB);
			return XDP_DROP;
		}
		if (!job_admits(job, &k))
			return XDP_DROP;
		/* Trees are native only: SwitchML stays a one-switch star, and
		 * a star (fanin 0) has no parent to look up per frame. */
		if (k.wire == INCXDP_WIRE_NATIVE && job->fanin)
			parent = tree_parent(k.job);
		q.bit = tree_bit(job, w);
		q.expected = tree_expected(job);
	}
	idx = job->pool_base + k.slot;
	if (!bpf_map_lookup_elem(&incxdp_slots, &idx)) {
		stat_inc(INCXDP_STAT_BAD_SLOT);
		return XDP_DROP;
	}

	q.k = k;
	q.k.hdr = NULL;
	q.k.payload = NULL;
	q.slot = idx;
	q.root = !parent;
	q.done_flags = !parent && job->fanin ? INCXDP_SET_RESULT : 0;
	if (parent)
		q.up_rank = parent->rank;
	q.up_nworkers = job->nworkers;
	/* Where classify() and the decoder found them: option-less IPv4. */
	q.hdr_off = sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr);
	q.payload_off = q.hdr_off +
			(k.wire == INCXDP_WIRE_SWITCHML ? SWITCHML_HDR_LEN : INCXDP_HDR_LEN);
	out = incxdp_agg(ctx, &q);
	switch (tree_decide(out, !parent, 0, &stat)) {
	case TREE_DOWN:
		stat_inc(stat);
		/* A result from the parent goes to every child but the parent. */
		return multicast_result(f, k.job, w ? 0 : BPF_F_EXCLUDE_INGRESS);
	case TREE_UP:
		if (!parent)
			break;
		stat_inc(stat);
		return tree_send_up(f->eth, f->ip, f->udp, parent);
	case TREE_UNICAST:
		if (!w)
			break;
		stat_inc(stat);
		f->udp->source = tree_child_port(w, k.job, f->udp->source);
		return reply_unicast(f);
	case TREE_DROP:
		stat_inc(stat);
		return XDP_DROP;
	}
	stat_inc(INCXDP_STAT_BAD_SLOT); /* cannot happen: see tree_decide */
	return XDP_DROP;
}

/* Loaded as xdp.frags in driver mode (bpf/user/include/incxdp/xdp_frags.h):
 * it then attaches on links of any MTU (jumbo frames), see frame_has_frags. */
SEC("xdp")
int incxdp_ingress(struct xdp_md *ctx)
{
	struct cursor c;
	struct frame f = {};
	enum l4_kind kind;
	int v, pulled;
	__u64 len;

	v = frame_prologue(ctx, &len, &pulled);
	if (pulled)
		stat_inc(INCXDP_STAT_PULLED);
	if (v != CHAOS_XDP_CONTINUE) {
		stat_inc(INCXDP_STAT_CHAOS);
		return v;
	}
	cursor_init(&c, ctx);
	f.end = c.end;
	kind = classify(&c, &f);
	if (kind == L4_OTHER) {
		stat_inc(INCXDP_STAT_PASS);
		return XDP_PASS;
	}
	/* Everything below reads, writes and resizes the frame as the linear
	 * part of the buffer: a frame still in fragments (above ~3.5 KB, only
	 * on a link whose MTU a non-frags program could not take, or on a
	 * kernel without bpf_xdp_pull_data) is not ours. */
	if (frame_has_frags(ctx, len)) {
		stat_inc(INCXDP_STAT_TOO_LONG);
		return XDP_DROP;
	}
	if (kind == L4_ROCE)
		return roce_ingress(ctx, &c, f.eth, f.ip, f.udp);
	return aggregate(ctx, &c, &f, kind);
}

/* Runs once per broadcast copy, on the devmap entry of the egress port.
 * The copies are ingress frames without fragments; frags or not as the
 * ingress program is, which a devmap's programs must agree with. */
SEC("xdp/devmap")
int incxdp_egress_rewrite(struct xdp_md *ctx)
{
	struct cursor c;
	struct frame f = {};
	struct incxdp_egress_key key;
	struct incxdp_egress *rw;
	enum l4_kind kind;

	/* A chaos detour sharing this port's transmit queue (see
	 * chaos_xdp.h): leaves as it is, and is no multicast copy. */
	if (chaos_detour(ctx))
		return XDP_PASS;
	cursor_init(&c, ctx);
	kind = classify(&c, &f);
	if (kind == L4_OTHER) {
		stat_inc(INCXDP_STAT_EGRESS_DROP);
		return XDP_DROP;
	}
	if (kind == L4_ROCE)
		return roce_egress(ctx, &c, f.ip, f.udp);
	key.job = bpf_ntohs(f.ip->id);
	key.ifindex = ctx->egress_ifindex;
	rw = bpf_map_lookup_elem(&incxdp_egress, &key);
	if (!rw) {
		stat_inc(INCXDP_STAT_EGRESS_DROP);
		return XDP_DROP;
	}
	__builtin_memcpy(f.eth->h_dest, rw->dst_mac, ETH_ALEN);
	__builtin_memcpy(f.eth->h_source, rw->src_mac, ETH_ALEN);
	f.ip->saddr = rw->src_ip;
	f.ip->daddr = rw->dst_ip;
	f.ip->id = 0;
	f.ip->ttl = 64;
	ipv4_csum_update(f.ip);
	/* From the port the workers address, as the unicast reply does:
	 * a client with a connect()ed socket only accepts that one. */
	f.udp->source = f.udp->dest;
	f.udp->dest = rw->dst_port;
	f.udp->check = 0;
	stat_inc(INCXDP_STAT_EGRESS_TX);
	return XDP_PASS; /* in a devmap program, PASS means "transmit" */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
