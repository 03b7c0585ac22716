/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The fault injector's XDP hook: loss, duplication, reordering and payload
 * corruption of what an incxdp XDP program receives, configured per
 * receiving interface by `incxdp chaos IF --xdp` (contract and mechanism in
 * incxdp/chaos.h; docs/CHAOS.md).
 *
 * Frames forwarded with XDP (the engine's results, AF_XDP and live-frame
 * sends) pass no tc hook, so the tc injector cannot reach them; every
 * program that ends a link calls chaos_xdp() first instead. With nothing
 * configured for the interface this costs one hash lookup that misses.
 */
#ifndef INCXDP_CHAOS_XDP_H
#define INCXDP_CHAOS_XDP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/chaos.h"
#include "chaos_rand.h"

/* chaos_xdp()'s "not mine: go on with the frame". */
#define CHAOS_XDP_CONTINUE (-1)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_CHAOS_XDP_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct incxdp_chaos_config);
} chaos_xdp_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, INCXDP_CHAOS_XDP_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct incxdp_chaos_xdp_stats);
} chaos_xdp_stats SEC(".maps");

/* The inner map's shape; the control plane creates one per interface. */
struct chaos_dup_devmap {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, INCXDP_CHAOS_XDP_DUP_COPIES);
	__uint(key_size, sizeof(__u32));
	/* A size, not a type: where nothing else uses the struct, clang's BTF
	 * has only its forward declaration and libbpf cannot size it. */
	__uint(value_size, sizeof(struct bpf_devmap_val));
};

/*
 * One devmap per interface, holding that interface twice: a broadcast into
 * it is the only way XDP makes two frames of one. It has to be a map of its
 * own, because a broadcast goes to every entry of the map it is given.
 *
 * Both entries carry the egress program the interface's other redirects
 * carry (the engine's incxdp_egress_rewrite on switch ports, none on
 * hosts), and a delayed frame goes through entry 0 rather than a plain
 * bpf_redirect(): the kernel queues every frame redirected to a device
 * during one NAPI poll in one per-CPU bulk queue, which runs the egress
 * program of whichever redirect came first on all of them (devmap.c
 * bq_enqueue). A detour without the program next to a result multicast
 * with it would strip the result copies of their rewrite, or rewrite the
 * detours (seen: results with QPN 0 and a bad ICRC).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, INCXDP_CHAOS_XDP_MAX_IFACES);
	__type(key, __u32);
	__array(values, struct chaos_dup_devmap);
} chaos_xdp_dup SEC(".maps");

/* A detour frame on its way out: egress programs let it pass unchanged. */
static __always_inline int chaos_detour(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	return (void *)(eth + 1) <= end && eth->h_proto == bpf_htons(INCXDP_CHAOS_ETH_REFLECT);
}

static __always_inline void chaos_count(struct incxdp_chaos_xdp_stats *st, __u32 what)
{
	if (st && what < INCXDP_CHAOS_STAT_MAX)
		st->n[what] += 1; /* per-CPU */
}

/*
 * Flips one random bit of the UDP payload of an IPv4 frame (within the IP
 * total length, so never Ethernet padding). Headers stay intact: the frame
 * is still delivered and only a receiver's check (RoCEv2's ICRC, the hosts'
 * verification) can notice. Returns 1 if a bit was flipped.
 */
static __always_inline int chaos_corrupt(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct udphdr *udp;
	__u8 *payload, *p;
	__u32 len, at, off;

	if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		return 0;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return 0;
	payload = (__u8 *)(udp + 1);
	len = bpf_ntohs(ip->tot_len);
	if (len <= sizeof(*ip) + sizeof(*udp))
		return 0;
	len -= sizeof(*ip) + sizeof(*udp);
	if (len > (__u32)(end - (void *)payload))
		len = (__u32)(end - (void *)payload);
	/* A linear XDP frame is under a page; the bound also keeps the
	 * verifier's offset arithmetic within its packet range limit. */
	if (!len || len > 4096)
		return 0;
	at = random_below(len * 8);
	off = at >> 3;
	/* Below len already, but the verifier's bounds of the product are
	 * loose: mask after a barrier clang cannot see through. */
	barrier_var(off);
	p = payload + (off & 4095);
	if ((void *)(p + 1) > end) /* for the verifier: `at` is below len */
		return 0;
	*p ^= (__u8)(1u << (at & 7));
	return 1;
}

/*
 * Hands the REFLECT frame to the interface's stack for ixchaos_bounce to
 * send `copies` of it out (incxdp/chaos.h, STACK_OUT). Returns the verdict,
 * or CHAOS_XDP_CONTINUE where the driver keeps no metadata.
 */
static __always_inline int chaos_bounce_out(struct xdp_md *ctx, __u32 copies)
{
	struct incxdp_chaos_bounce_meta *b;
	struct ethhdr *eth;
	void *end;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*b)))
		return CHAOS_XDP_CONTINUE;
	b = (void *)(long)ctx->data_meta;
	eth = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)(b + 1) > (void *)eth || (void *)(eth + 1) > end)
		return CHAOS_XDP_CONTINUE;
	b->magic = INCXDP_CHAOS_BOUNCE_MAGIC;
	b->copies = copies;
	eth->h_proto = bpf_htons(INCXDP_CHAOS_ETH_REFLECT);
	return XDP_PASS;
}

/*
 * CHAOS_XDP_CONTINUE to process the frame as usual (possibly corrupted, or
 * back from its detour), else the verdict to return at once. Loss first, so
 * a lost frame is never also duplicated or corrupted; a corrupted frame is
 * duplicated corrupted.
 */
static __always_inline int chaos_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct incxdp_chaos_xdp_stats *st;
	struct incxdp_chaos_config cfg, *c;
	struct ethhdr *eth = data;
	__u32 key = ctx->ingress_ifindex;
	void *dup;
	int v;

	if ((void *)(eth + 1) > end)
		return CHAOS_XDP_CONTINUE;
	if (eth->h_proto == bpf_htons(INCXDP_CHAOS_ETH_RETURN)) {
		/* Our own frame back from the peer: it was faulted already. */
		eth->h_proto = bpf_htons(ETH_P_IP);
		return CHAOS_XDP_CONTINUE;
	}
	if (eth->h_proto == bpf_htons(INCXDP_CHAOS_ETH_REFLECT)) {
		/* The peer's detour: straight back out, to the only sender on
		 * this link; one frame in, one out, no state touched. */
		eth->h_proto = bpf_htons(INCXDP_CHAOS_ETH_RETURN);
		chaos_count(bpf_map_lookup_elem(&chaos_xdp_stats, &key), INCXDP_CHAOS_REFLECTED);
		return XDP_TX;
	}
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return CHAOS_XDP_CONTINUE;
	c = bpf_map_lookup_elem(&chaos_xdp_cfg, &key);
	if (!c)
		return CHAOS_XDP_CONTINUE;
	cfg = *c; /* one snapshot per frame: the control plane may write meanwhile */
	st = bpf_map_lookup_elem(&chaos_xdp_stats, &key);
	chaos_count(st, INCXDP_CHAOS_SEEN);
	if (!cfg.enabled) {
		chaos_count(st, INCXDP_CHAOS_PASSED);
		return CHAOS_XDP_CONTINUE;
	}
	if (chance(cfg.loss_ppm)) {
		chaos_count(st, INCXDP_CHAOS_DROPPED);
		return XDP_DROP;
	}
	chaos_count(st, INCXDP_CHAOS_PASSED);
	if (chance(cfg.corrupt_ppm) && chaos_corrupt(ctx))
		chaos_count(st, INCXDP_CHAOS_CORRUPTED);
	/* chaos_corrupt() invalidated the packet pointers: reload. */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return CHAOS_XDP_CONTINUE;
	if (chance(cfg.dup_ppm)) {
		if (cfg.detour != INCXDP_CHAOS_DETOUR_PEER) {
			/* Failed or impossible: passed once, as a refused clone is. */
			v = cfg.detour == INCXDP_CHAOS_DETOUR_STACK_OUT ? chaos_bounce_out(ctx, 2)
									: CHAOS_XDP_CONTINUE;
			chaos_count(st, v == XDP_PASS ? INCXDP_CHAOS_DUPLICATED : INCXDP_CHAOS_DUP_FAILED);
			return v;
		}
		dup = bpf_map_lookup_elem(&chaos_xdp_dup, &key);
		if (dup) {
			eth->h_proto = bpf_htons(INCXDP_CHAOS_ETH_REFLECT);
			chaos_count(st, INCXDP_CHAOS_DUPLICATED);
			return bpf_redirect_map(dup, 0, BPF_F_BROADCAST);
		}
		chaos_count(st, INCXDP_CHAOS_DUP_FAILED);
	}
	if (chance(cfg.reorder_ppm)) {
		if (cfg.detour != INCXDP_CHAOS_DETOUR_PEER) {
			v = cfg.detour == INCXDP_CHAOS_DETOUR_STACK_OUT ? chaos_bounce_out(ctx, 1)
									: CHAOS_XDP_CONTINUE;
			if (v == XDP_PASS)
				chaos_count(st, INCXDP_CHAOS_REORDERED);
			return v;
		}
		dup = bpf_map_lookup_elem(&chaos_xdp_dup, &key);
		if (dup) {
			/* Back out of the interface it came in on (entry 0): the
			 * peer returns it behind whatever its queue holds. */
			eth->h_proto = bpf_htons(INCXDP_CHAOS_ETH_REFLECT);
			chaos_count(st, INCXDP_CHAOS_REORDERED);
			return bpf_redirect_map(dup, 0, 0);
		}
	}
	return CHAOS_XDP_CONTINUE;
}

#endif
