// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * incxdp mesh relay: runs on every interface of a mesh node (docs/MESH.md).
 *
 * Relay frames (IPv4/UDP to INCXDP_RELAY_UDP_PORT, incxdp/relay.h) for this
 * node go to the local endpoint: the AF_XDP socket of the rx queue, else the
 * stack's UDP socket. Frames for another node are readdressed for the link
 * to the route's next hop and redirected out of its interface, hop count
 * +1, without leaving the kernel. Everything else passes to the stack.
 *
 * The local endpoint also sends through it: live-frame runs from loopback
 * (bpf/lib/xsk_tx.h) leave by the interface each frame names.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parse.h"
#include "relay.h"
#include "smi_maps.h"
#include "prologue.h"
#include "xsk_tx.h"

static __always_inline int relay(struct xdp_md *ctx, __u64 len)
{
	struct incxdp_relay_cfg *cfg;
	struct relay_frame f = {};
	struct cursor c;
	__u32 key = 0;

	cursor_init(&c, ctx);
	switch (relay_classify(&c, &f, len)) {
	case RELAY_NOT_OURS:
		return relay_count(INCXDP_RELAY_STAT_PASS, XDP_PASS);
	case RELAY_MALFORMED:
		return relay_count(INCXDP_RELAY_STAT_MALFORMED, XDP_DROP);
	case RELAY_OK:
		break;
	}
	cfg = bpf_map_lookup_elem(&incxdp_relay_cfg, &key);
	if (!cfg) /* cannot happen (array) */
		return relay_count(INCXDP_RELAY_STAT_PASS, XDP_PASS);
	if (bpf_ntohl(f.hdr->dst_node) == cfg->self_node)
		return relay_deliver(ctx);
	return relay_forward(cfg, &f);
}

/* Loaded as xdp.frags in driver mode (bpf/user/include/incxdp/xdp_frags.h),
 * so it attaches on links of any MTU. Only the headers are read and
 * rewritten, in the linear part; a frame still in fragments after the pull
 * is forwarded or delivered whole. */
SEC("xdp")
int incxdp_relay(struct xdp_md *ctx)
{
	enum xsk_tx_outcome out;
	int v, pulled;
	__u64 len;

	if (xsk_tx_is_run(ctx)) {
		v = xsk_tx_send(ctx, 0, &out);
		return relay_count(out == XSK_TX_SENT ? INCXDP_RELAY_STAT_SENT
						      : INCXDP_RELAY_STAT_TX_BAD,
				   v);
	}
	v = frame_prologue(ctx, &len, &pulled);
	if (v != CHAOS_XDP_CONTINUE)
		return relay_count(INCXDP_RELAY_STAT_CHAOS, v);
	return relay(ctx, len);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
