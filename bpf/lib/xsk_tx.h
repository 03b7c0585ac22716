/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Live-frame sending, shared by the hosts' incxdp_xsk and the mesh relay:
 * the host writes whole frames into the mmapped array incxdp_tx_frames
 * (layout in incxdp/xsk.h) and runs the program with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES; each run takes the next frame and redirects
 * it out of the interface its slot names, as an xdp_frame (no skb). The
 * program must be attached somewhere: running one that is not adds it to
 * and removes it from the kernel's XDP dispatcher on every call (a
 * synchronize_rcu() each, under a global mutex).
 */
#ifndef INCXDP_LIB_XSK_TX_H
#define INCXDP_LIB_XSK_TX_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/xsk.h"

#define XSK_TX_LOOPBACK_IFINDEX 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, INCXDP_XSK_TX_SLOTS);
	__type(key, __u32);
	__type(value, struct incxdp_xsk_tx_frame);
} incxdp_tx_frames SEC(".maps");

enum xsk_tx_outcome { XSK_TX_NOT_A_RUN, XSK_TX_SENT, XSK_TX_BAD };

/* A live-frame run: from the namespace's loopback device (where these
 * programs never run otherwise) while a host has armed the map. */
static __always_inline int xsk_tx_is_run(struct xdp_md *ctx)
{
	struct incxdp_xsk_tx_frame *ctl;
	__u32 zero = 0;

	if (ctx->ingress_ifindex != XSK_TX_LOOPBACK_IFINDEX)
		return 0;
	ctl = bpf_map_lookup_elem(&incxdp_tx_frames, &zero);
	return ctl && ctl->ifindex == INCXDP_XSK_TX_ARMED;
}

/*
 * One run per frame: the run's frame (the template, reset by the kernel
 * before every run) is grown or cut to the queued frame's length and
 * overwritten with it. The slot's ifindex, else `dflt`, is where it leaves.
 */
static __always_inline int xsk_tx_send(struct xdp_md *ctx, __u32 dflt, enum xsk_tx_outcome *out)
{
	struct incxdp_xsk_tx_frame *ctl, *f;
	__u32 zero = 0, i, len, ifindex;
	int have;

	*out = XSK_TX_BAD;
	ctl = bpf_map_lookup_elem(&incxdp_tx_frames, &zero);
	if (!ctl)
		return XDP_DROP;
	i = 1 + __sync_fetch_and_add(&ctl->len, 1) % (INCXDP_XSK_TX_SLOTS - 1);
	f = bpf_map_lookup_elem(&incxdp_tx_frames, &i);
	if (!f)
		return XDP_DROP;
	len = f->len;
	ifindex = f->ifindex ? f->ifindex : dflt;
	if (len < ETH_HLEN || len > INCXDP_XSK_TX_FRAME_MAX || !ifindex)
		return XDP_DROP;
	have = (int)bpf_xdp_get_buff_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, (int)len - have))
		return XDP_DROP;
	if (bpf_xdp_store_bytes(ctx, 0, f->data, len))
		return XDP_DROP;
	*out = XSK_TX_SENT;
	return bpf_redirect(ifindex, 0);
}

#endif
