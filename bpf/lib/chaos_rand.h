/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The injector's coin, shared by its tc program and the XDP hook. */
#ifndef INCXDP_CHAOS_RAND_H
#define INCXDP_CHAOS_RAND_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "incxdp/chaos.h"

/*
 * True with probability ppm / 10^6. Multiply-shift maps the 32-bit random
 * number onto [0, 10^6) without a division; its bias (< 2^-12 relative) is
 * far below anything a test can see. ppm 0 never fires, 10^6 always.
 */
static __always_inline int chance(__u32 ppm)
{
	if (!ppm)
		return 0;
	return (((__u64)bpf_get_prandom_u32() * INCXDP_CHAOS_PPM) >> 32) < ppm;
}

/* A uniform index in [0, n) for n < 2^32. */
static __always_inline __u32 random_below(__u32 n)
{
	return (__u32)(((__u64)bpf_get_prandom_u32() * n) >> 32);
}

#endif
