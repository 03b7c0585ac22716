/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The aggregation engine: SwitchML's per-(slot, set) bitmap, counter and
 * shadow-set rules (docs/PROTOCOLS.md §2), generalised to SUM/MAX/MIN and to a
 * (round, chunk) tag per set for the native header's (rid, cid).
 *
 * Everything between bpf_spin_lock and bpf_spin_unlock must be inline code
 * without helper or function calls (verifier rule), so the element loops
 * below are __always_inline and touch packet memory directly.
 */
#ifndef INCXDP_AGG_H
#define INCXDP_AGG_H

#include "contrib.h"
#include "incxdp/maps.h"
#include <bpf/bpf_endian.h>

#define AGG_Q INCXDP_ELEM_QUANTUM
#define MAX_BLOCKS (INCXDP_MAX_ELEMS / INCXDP_ELEM_QUANTUM)

enum agg_outcome {
	AGG_CONSUMED,     /* new contribution, set still incomplete */
	AGG_COMPLETED,    /* this contribution completed the set */
	AGG_RETX_RESULT,  /* retransmission to a complete set */
	AGG_RETX_PENDING, /* retransmission to an incomplete set */
	AGG_STALE,        /* retransmission naming another chunk than the set's */
	AGG_MISMATCH,     /* new contribution disagreeing with the set in progress */
};

/*
 * One loop per operation, each walking the payload in blocks of AGG_Q elements:
 * the bounds check is per block (the verifier needs one before each access,
 * and the decoder has already verified the whole payload fits).
 */
#define AGG_LOOP(vals, k, end, EXPR)                                          \
	do {                                                                  \
		for (__u32 b = 0; b < MAX_BLOCKS; b++) {                      \
			__be32 *p = (k)->payload + b * AGG_Q;                     \
			__s32 *v = (vals) + b * AGG_Q;                            \
			if (b * AGG_Q >= (k)->nelems)                             \
				break;                                        \
			if ((void *)(p + AGG_Q) > (end))                          \
				break;                                        \
			_Pragma("unroll") for (int j = 0; j < AGG_Q; j++)         \
			{                                                     \
				__s32 x = (__s32)bpf_ntohl(p[j]);             \
				EXPR;                                         \
			}                                                     \
		}                                                             \
	} while (0)

static __always_inline void agg_write(__s32 *vals, struct contrib *k, void *end)
{
	AGG_LOOP(vals, k, end, v[j] = x);
}

static __always_inline void agg_combine(__s32 *vals, struct contrib *k, void *end)
{
	switch (k->op) {
	case INCXDP_OP_MAX:
		AGG_LOOP(vals, k, end, if (x > v[j]) v[j] = x);
		break;
	case INCXDP_OP_MIN:
		AGG_LOOP(vals, k, end, if (x < v[j]) v[j] = x);
		break;
	default: /* SUM wraps at 32 bits, like the switch ASIC */
		AGG_LOOP(vals, k, end, v[j] = (__s32)((__u32)v[j] + (__u32)x));
		break;
	}
}

/* Copies a set's values into the packet's payload, big-endian. Called after
 * the unlock: a complete set is read-only until every worker has its result
 * (a worker reuses the slot only after receiving it). Returns the words
 * written, summed as stored (a one's complement sum of the payload before
 * folding, for its UDP checksum: one add per word instead of another pass). */
static __always_inline __u64 agg_store_result(const __s32 *vals, struct contrib *k, void *end)
{
	__u64 sum = 0;

	for (__u32 b = 0; b < MAX_BLOCKS; b++) {
		__be32 *p = k->payload + b * AGG_Q;
		const __s32 *v = vals + b * AGG_Q;

		if (b * AGG_Q >= k->nelems)
			break;
		if ((void *)(p + AGG_Q) > end)
			break;
#pragma unroll
		for (int j = 0; j < AGG_Q; j++) {
			__u32 be = bpf_htonl((__u32)v[j]);

			p[j] = be;
			sum += be;
		}
	}
	return sum;
}

static __always_inline int set_matches(const struct incxdp_slot_set *s, const struct contrib *k)
{
	return s->round == k->round && s->chunk == k->chunk && s->op == k->op &&
	       s->dtype == k->dtype && s->nelems == k->nelems;
}

/*
 * Applies one contribution from `rank` of a job with `nworkers` workers.
 * On AGG_COMPLETED and AGG_RETX_RESULT, exp0 and exp1 hold the set's exponents
 * and the caller copies the values out with agg_store_result().
 */
static __always_inline enum agg_outcome agg_apply(struct incxdp_slot *slot, struct contrib *k,
						  __u32 nworkers, void *end, __s8 *exp0,
						  __s8 *exp1)
{
	__u32 set = k->set & 1;
	struct incxdp_slot_set *cur = &slot->set[set];
	struct incxdp_slot_set *other = &slot->set[set ^ 1];
	__s32 *vals = slot->vals[set];
	__u32 bit = 1u << (k->rank & (INCXDP_MAX_WORKERS - 1));
	enum agg_outcome out;

	bpf_spin_lock(&slot->lock);
	if (cur->bitmap & bit) {
		if (cur->remaining)
			out = AGG_RETX_PENDING;
		else if (!set_matches(cur, k))
			out = AGG_STALE;
		else
			out = AGG_RETX_RESULT;
	} else if (cur->remaining == 0) {
		/* First contribution of a new round in this set: it writes. */
		cur->round = k->round;
		cur->chunk = k->chunk;
		cur->op = k->op;
		cur->dtype = k->dtype;
		cur->nelems = k->nelems;
		cur->exp0 = k->exp0;
		cur->exp1 = k->exp1;
		cur->bitmap |= bit;
		other->bitmap &= ~bit;
		agg_write(vals, k, end);
		cur->remaining = nworkers - 1;
		out = cur->remaining ? AGG_CONSUMED : AGG_COMPLETED;
	} else if (!set_matches(cur, k)) {
		out = AGG_MISMATCH;
	} else {
		cur->bitmap |= bit;
		other->bitmap &= ~bit;
		agg_combine(vals, k, end);
		if (k->exp0 > cur->exp0)
			cur->exp0 = k->exp0;
		if (k->exp1 > cur->exp1)
			cur->exp1 = k->exp1;
		cur->remaining -= 1;
		out = cur->remaining ? AGG_CONSUMED : AGG_COMPLETED;
	}
	if (out == AGG_COMPLETED)
		cur->rounds += 1;
	*exp0 = cur->exp0;
	*exp1 = cur->exp1;
	bpf_spin_unlock(&slot->lock);
	return out;
}

#undef AGG_Q

#endif
