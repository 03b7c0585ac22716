// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * libincxdp's AF_XDP transport (hostlib/src/afxdp_transport.cpp).
 *
 * incxdp_xsk runs on the worker's interface while the transport is open: the
 * switch's results (IPv4/UDP to the worker's address and port) go to the
 * AF_XDP socket of the rx queue they arrive on; everything else (ARP, ICMP,
 * other ports, other hosts' traffic) goes to the stack, as with incxdp_pass.
 * With no socket in the map (the transport closed or crashed) every frame
 * passes, so the program may stay attached.
 *
 * The same program sends: the transport runs it with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES (bpf/lib/xsk_tx.h), each run redirecting the
 * next frame the host wrote into incxdp_tx_frames out of the worker's
 * interface as an xdp_frame. On veth that frame reaches the switch's XDP
 * program without an skb (an AF_XDP copy-mode or UDP send builds an skb
 * that veth must copy again into a page for XDP), and the kernel flushes
 * the redirects once per batch of runs. One program for both: it is
 * attached, so a run does not add it to the kernel's XDP dispatcher
 * (docs/PERF.md).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/xsk.h"
#include "parse.h"
#include "prologue.h"
#include "xsk_tx.h"

/* Set before load (network byte order): the worker's address and UDP port. */
const volatile __u32 xsk_local_ip = 0;
const volatile __u16 xsk_local_port = 0;
/* Set before load: the interface sent frames leave by. */
const volatile __u32 xsk_tx_ifindex = 0;

/* Frames for the worker on a queue without a socket, by queue, and their
 * total, which the transport polls (incxdp/xsk.h). */
__u64 xsk_missed[INCXDP_XSK_MAX_QUEUES] = {};
__u64 xsk_missed_total = 0;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, INCXDP_XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} incxdp_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INCXDP_XSK_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} incxdp_xsk_stats SEC(".maps");

static __always_inline int count(__u32 what, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&incxdp_xsk_stats, &what);

	if (c)
		*c += 1;
	return verdict;
}

static __always_inline int xsk_steer(struct xdp_md *ctx)
{
	struct cursor c;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	int verdict;

	cursor_init(&c, ctx);
	eth = parse_eth(&c);
	if (!eth || eth->h_proto != bpf_htons(ETH_P_IP))
		return count(INCXDP_XSK_PASSED, XDP_PASS);
	ip = parse_ipv4_plain(&c);
	if (!ip || ip->protocol != IPPROTO_UDP || ip->daddr != xsk_local_ip)
		return count(INCXDP_XSK_PASSED, XDP_PASS);
	udp = parse_udp(&c);
	if (!udp || udp->dest != xsk_local_port)
		return count(INCXDP_XSK_PASSED, XDP_PASS);
	verdict = bpf_redirect_map(&incxdp_xsks, ctx->rx_queue_index, XDP_PASS);
	if (verdict == XDP_REDIRECT)
		return count(INCXDP_XSK_REDIRECTED, verdict);
	if (ctx->rx_queue_index < INCXDP_XSK_MAX_QUEUES) {
		__sync_fetch_and_add(&xsk_missed[ctx->rx_queue_index], 1);
		__sync_fetch_and_add(&xsk_missed_total, 1);
	}
	return count(INCXDP_XSK_NO_SOCKET, verdict);
}

static __always_inline int xsk_send(struct xdp_md *ctx)
{
	enum xsk_tx_outcome out;
	int v = xsk_tx_send(ctx, xsk_tx_ifindex, &out);

	return count(out == XSK_TX_SENT ? INCXDP_XSK_SENT : INCXDP_XSK_TX_BAD, v);
}

/* Loaded as xdp.frags in driver mode (xdp_frags.h): it then attaches on
 * links of any MTU. The socket takes one buffer per frame (no XDP_USE_SG):
 * a frame that arrives in pieces (a NIC's receive buffers smaller than the
 * frame, parse.h) is pulled whole first; one still in fragments steered to
 * the socket is dropped and counted by the kernel in the socket's
 * rx_dropped (the switch sends none above one buffer). */
SEC("xdp")
int incxdp_xsk(struct xdp_md *ctx)
{
	int v, pulled;
	__u64 len;

	if (xsk_tx_is_run(ctx))
		return xsk_send(ctx);
	v = frame_prologue(ctx, &len, &pulled);
	if (pulled)
		count(INCXDP_XSK_PULLED, 0);
	if (v != CHAOS_XDP_CONTINUE)
		return v;
	return xsk_steer(ctx);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
