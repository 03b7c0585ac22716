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
	AGG_RETX_UP,      /* retransmission to a set complete here, its result not yet down */
	AGG_RESULT_TAKEN, /* the parent's result stored into the set (agg_take_result) */
	AGG_RESULT_STALE, /* the parent's result names another use of the set */
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
 * Applies one contribution carrying bitmap bit `bit` (< INCXDP_MAX_WORKERS) to
 * a set expecting `expected` contributions. `root`: a complete set holds the
 * final result (a star, a tree's root); below a tree's root it does once the
 * parent's result is in (INCXDP_SET_RESULT, agg_take_result), and until then
 * a retransmission to the complete set is AGG_RETX_UP. A set completing here
 * takes `done_flags` (a tree's root marks its result; a one-switch star
 * leaves its slots as they always were). On AGG_COMPLETED, AGG_RETX_RESULT
 * and AGG_RETX_UP, exp0 and exp1 hold the set's exponents and the caller
 * copies the values out with agg_store_result().
 */
static __always_inline enum agg_outcome agg_apply(struct incxdp_slot *slot, struct contrib *k,
						  __u32 expected, __u32 bit, __u32 root,
						  __u16 done_flags, void *end, __s8 *exp0,
						  __s8 *exp1)
{
	__u32 set = k->set & 1;
	struct incxdp_slot_set *cur = &slot->set[set];
	struct incxdp_slot_set *other = &slot->set[set ^ 1];
	__s32 *vals = slot->vals[set];
	__u32 mask = 1u << (bit & (INCXDP_MAX_WORKERS - 1));
	enum agg_outcome out;

	bpf_spin_lock(&slot->lock);
	if (cur->bitmap & mask) {
		if (cur->remaining)
			out = AGG_RETX_PENDING;
		else if (!set_matches(cur, k))
			out = AGG_STALE;
		else if (root || (cur->flags & INCXDP_SET_RESULT))
			out = AGG_RETX_RESULT;
		else
			out = AGG_RETX_UP;
	} else if (cur->remaining == 0) {
		/* First contribution of a new round in this set: it writes. */
		cur->round = k->round;
		cur->chunk = k->chunk;
		cur->op = k->op;
		cur->dtype = k->dtype;
		cur->nelems = k->nelems;
		cur->exp0 = k->exp0;
		cur->exp1 = k->exp1;
		cur->flags = 0;
		cur->bitmap |= mask;
		other->bitmap &= ~mask;
		agg_write(vals, k, end);
		cur->remaining = expected - 1;
		out = cur->remaining ? AGG_CONSUMED : AGG_COMPLETED;
	} else if (!set_matches(cur, k)) {
		out = AGG_MISMATCH;
	} else {
		cur->bitmap |= mask;
		other->bitmap &= ~mask;
		agg_combine(vals, k, end);
		if (k->exp0 > cur->exp0)
			cur->exp0 = k->exp0;
		if (k->exp1 > cur->exp1)
			cur->exp1 = k->exp1;
		cur->remaining -= 1;
		out = cur->remaining ? AGG_CONSUMED : AGG_COMPLETED;
	}
	if (out == AGG_COMPLETED) {
		cur->rounds += 1;
		cur->flags |= done_flags;
	}
	*exp0 = cur->exp0;
	*exp1 = cur->exp1;
	bpf_spin_unlock(&slot->lock);
	return out;
}

/*
 * The parent switch's result for a set this switch completed: the values
 * replace the set's aggregate, which then holds the final result (answered
 * to retransmissions). Another tag, or a set not complete here, is stale.
 */
static __always_inline enum agg_outcome agg_take_result(struct incxdp_slot *slot,
							struct contrib *k, void *end)
{
	struct incxdp_slot_set *cur = &slot->set[k->set & 1];
	__s32 *vals = slot->vals[k->set & 1];
	enum agg_outcome out = AGG_RESULT_STALE;

	bpf_spin_lock(&slot->lock);
	if (cur->bitmap && !cur->remaining && set_matches(cur, k)) {
		cur->exp0 = k->exp0;
		cur->exp1 = k->exp1;
		cur->flags |= INCXDP_SET_RESULT;
		agg_write(vals, k, end);
		out = AGG_RESULT_TAKEN;
	}
	bpf_spin_unlock(&slot->lock);
	return out;
}

#undef AGG_Q

#endif
