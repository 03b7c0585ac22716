// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * ixchaos_bounce: the skb half of `incxdp chaos --xdp`'s detours on a link
 * whose ends run their XDP programs in different modes (incxdp/chaos.h,
 * STACK_OUT), on each end's tc ingress:
 *  - on the native end, a REFLECT frame its XDP hook passed up with an
 *    incxdp_chaos_bounce_meta: `copies` clones leave as skbs, the original
 *    ends here;
 *  - on the generic end, such a clone (redirected, so generic XDP skipped
 *    it): sent straight back as RETURN, which the native end's program
 *    restores and processes.
 * Everything else goes on untouched; no maps, no state.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/chaos.h"

SEC("tc")
int ixchaos_bounce(struct __sk_buff *skb)
{
	void *meta = (void *)(long)skb->data_meta;
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct incxdp_chaos_bounce_meta *b = meta;
	struct ethhdr *eth = data;
	__u32 copies;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(INCXDP_CHAOS_ETH_REFLECT))
		return TC_ACT_UNSPEC;
	if ((void *)(b + 1) > data || b->magic != INCXDP_CHAOS_BOUNCE_MAGIC) {
		/* A peer's copy: back to it, one frame in, one out. */
		eth->h_proto = bpf_htons(INCXDP_CHAOS_ETH_RETURN);
		return bpf_redirect(skb->ifindex, 0);
	}
	copies = b->copies;
	/* The clones share these bytes: the peer must not take them for a
	 * request of its own. */
	b->magic = 0;
	/* Clones invalidate the packet pointers: nothing is read after them. */
	if (copies >= 1)
		bpf_clone_redirect(skb, skb->ifindex, 0);
	if (copies >= 2)
		bpf_clone_redirect(skb, skb->ifindex, 0);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
