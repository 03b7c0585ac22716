/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Sample layout of the incxdp_capture perf array (bpf/lib/capture.h):
 * this header, then the first `len` bytes of the frame.
 */
#ifndef INCXDP_CAPTURE_LAYOUT_H
#define INCXDP_CAPTURE_LAYOUT_H

#include <linux/types.h>

#define INCXDP_CAPTURE_MAP "incxdp_capture"
#define INCXDP_CAPTURE_MAX_LEN 0xffff

struct incxdp_capture_meta {
	__u32 ifindex; /* interface the frame arrived on */
	__u32 len;     /* frame length; the sample carries all of it */
};

#endif
