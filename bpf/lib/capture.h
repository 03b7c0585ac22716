/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Frames as they arrive at an XDP program, for `incxdp capture`.
 *
 * Frames an XDP program sends (XDP_TX, redirects, AF_XDP, live frames) never
 * pass the packet taps tcpdump uses, and xdpdump's fentry hooks are refused
 * where freplace/fentry are (as on our CI machines). So every program that
 * ends a link (the engine on switch ports, incxdp_xsk/incxdp_pass on hosts)
 * offers each frame it receives to this perf array: what arrives on every
 * port is what travelled on every link. While nobody listens, the array
 * slot of the CPU is empty and the helper returns -ENOENT after one lookup.
 */
#ifndef INCXDP_CAPTURE_H
#define INCXDP_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "incxdp/capture.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} incxdp_capture SEC(".maps");

/* `len` is the whole frame's, fragments too (bpf_xdp_get_buff_len; the
 * helper copies across them). */
static __always_inline void capture_frame(struct xdp_md *ctx, __u64 len)
{
	struct incxdp_capture_meta m;

	m.ifindex = ctx->ingress_ifindex;
	m.len = (__u32)len;
	/* The length in the flags' upper bits makes the helper append that
	 * many bytes of the packet to the sample. */
	bpf_perf_event_output(ctx, &incxdp_capture,
			      BPF_F_CURRENT_CPU | ((len & INCXDP_CAPTURE_MAX_LEN) << 32), &m,
			      sizeof(m));
}

#endif
