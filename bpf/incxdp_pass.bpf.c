// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * Host ends of a topology: a veth only delivers frames another interface
 * XDP_REDIRECTs into it when its own end runs an XDP program, so every host
 * interface gets this one. It passes everything to the stack, after
 * `incxdp chaos --xdp` (bpf/lib/chaos_xdp.h) and offering it to
 * `incxdp capture` (bpf/lib/capture.h).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "capture.h"
#include "chaos_xdp.h"

/* xdp.frags: a host link may have any MTU; frames pass whole. topo attaches
 * it in driver mode only (see bpf/user/include/incxdp/xdp_frags.h). */
SEC("xdp.frags")
int incxdp_pass(struct xdp_md *ctx)
{
	int v = chaos_xdp(ctx);

	if (v != CHAOS_XDP_CONTINUE)
		return v;
	capture_frame(ctx, bpf_xdp_get_buff_len(ctx));
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
