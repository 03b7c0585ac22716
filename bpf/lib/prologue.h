/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * What every xdp.frags program on a link does first: a frame that arrived
 * in pieces is pulled whole (parse.h), then `incxdp chaos --xdp` may take
 * it (a frame it loses never arrived), then `incxdp capture` records what
 * arrived. Shared by the switch, the relay and the AF_XDP steering program.
 */
#ifndef INCXDP_PROLOGUE_H
#define INCXDP_PROLOGUE_H

#include "parse.h"
#include "capture.h"
#include "chaos_xdp.h"

/*
 * *len: the frame's length (one helper call for every later use, it is not
 * inlined); *pulled: the frame was in fragments and is linear now.
 * Returns CHAOS_XDP_CONTINUE, or the verdict of the fault injector, which
 * took the frame.
 */
static __always_inline int frame_prologue(struct xdp_md *ctx, __u64 *len, int *pulled)
{
	int v;

	*len = bpf_xdp_get_buff_len(ctx);
	*pulled = frame_has_frags(ctx, *len) && frame_pull_linear(ctx, *len);
	v = chaos_xdp(ctx);
	if (v != CHAOS_XDP_CONTINUE)
		return v;
	capture_frame(ctx, *len);
	return CHAOS_XDP_CONTINUE;
}

#endif
