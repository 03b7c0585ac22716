/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The aggregation engine's one slot rule, for every wire: SwitchML's
 * per-(slot, set) bitmap, counter and shadow-set rules (docs/PROTOCOLS.md
 * §2), generalised to SUM/MAX/MIN, to Broadcast (the set takes the one
 * non-empty payload), and to a (round, chunk) tag per set: the native
 * header's (rid, cid), or RoCE's (ImmDt, idx). Its outcome, one enum
 * agg_outcome, is turned into a tree action by tree_decide() (tree.h).
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
 * How a set tells which use of it a frame is for.
 * BITMAP (SwitchML, native UDP): the sender's bit. A sender whose bit is in
 * has been counted; the (round, chunk) tag tells a current retransmission
 * from a stale one.
 * TAG (RoCE): the chunk tag (idx) first. A set in use for another idx is
 * stale to the frame; a set complete for this idx answers every frame for
 * it, bit or no bit (a child's bit leaves the set once it uses the other
 * set, and a switch child's frames come in any order).
 */
enum agg_match {
	AGG_MATCH_BITMAP,
	AGG_MATCH_TAG,
};

/* Broadcast: no wire's op (decoders refuse it). The set takes the one
 * non-empty payload; a second one is a mismatch. */
#define AGG_OP_ONE INCXDP_OP_COUNT

/* The set as the frame left it, read under the lock: what a reply or a
 * frame to the parent carries besides the values. */
struct agg_view {
	__u32 round;
	__u16 nelems;
	__s8 exp0; /* signed max of the contributions' exponents */
	__s8 exp1;
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

/*
 * MAX and MIN without a branch per element: a compare-and-store per element
 * is a fork per element for the verifier (docs/ROCE.md §5). The 64-bit
 * difference's sign picks the value instead (d = x - v cannot overflow in
 * 64 bits; d >> 63 is all ones iff x < v). The barrier keeps clang from
 * seeing max/min in it and emitting the branch again.
 */
static __always_inline void agg_combine(__s32 *vals, struct contrib *k, void *end)
{
	switch (k->op) {
	case INCXDP_OP_MAX:
		AGG_LOOP(vals, k, end, {
			__s64 d = (__s64)x - v[j];
			barrier_var(d);
			v[j] = (__s32)(x - (d & (d >> 63)));
		});
		break;
	case INCXDP_OP_MIN:
		AGG_LOOP(vals, k, end, {
			__s64 d = (__s64)x - v[j];
			barrier_var(d);
			v[j] = (__s32)(v[j] + (d & (d >> 63)));
		});
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

		/* Read afresh: the count the element loops before narrowed
		 * would make each of their exits a state of its own here. */
		if (b * AGG_Q >= *(volatile __u16 *)&k->nelems)
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

/* The frame names the set's current use: tag, op, type and size (Broadcast:
 * at most one non-empty payload). */
static __always_inline int set_matches(const struct incxdp_slot_set *s, const struct contrib *k)
{
	int size_ok = k->op == AGG_OP_ONE ? !(k->nelems && s->nelems) : s->nelems == k->nelems;

	return s->round == k->round && s->chunk == k->chunk && s->op == k->op &&
	       s->dtype == k->dtype && size_ok;
}

/* TAG: the set is in use for chunk. A set never used (all zero, as after a
 * job reset) has neither contributions in flight nor a completion. */
static __always_inline int set_on(const struct incxdp_slot_set *s, __u32 chunk)
{
	return s->chunk == chunk && (s->remaining || s->rounds);
}

static __always_inline void agg_fill_view(const struct incxdp_slot_set *s, struct agg_view *v)
{
	v->round = s->round;
	v->nelems = s->nelems;
	v->exp0 = s->exp0;
	v->exp1 = s->exp1;
}

/*
 * Applies one contribution carrying bitmap bit `bit` (< INCXDP_MAX_WORKERS)
 * to a set expecting `expected` contributions; `match` says how the set
 * tells the frame's use of it (enum agg_match). `retx` (TAG only): the
 * adapter knows the frame was taken before (RoCE: a PSN behind), so it only
 * asks for the answer a retransmission gets.
 * `root`: a complete set holds the final result (a star, a tree's root);
 * below a tree's root it does once the parent's result is in
 * (INCXDP_SET_RESULT, agg_take_result), and until then a retransmission
 * to the complete set is AGG_RETX_UP. A set completing here takes
 * `done_flags` (a tree's root marks its result; a one-switch star leaves
 * its slots as they always were). *view is the set after the frame; on
 * AGG_COMPLETED, AGG_RETX_RESULT and AGG_RETX_UP the caller copies the
 * values out with agg_store_result().
 */
static __always_inline enum agg_outcome agg_apply(struct incxdp_slot *slot, struct contrib *k,
						  __u32 expected, __u32 bit, __u32 root,
						  __u16 done_flags, enum agg_match match,
						  __u32 retx, void *end, struct agg_view *view)
{
	__u32 set = k->set & 1;
	struct incxdp_slot_set *cur = &slot->set[set];
	struct incxdp_slot_set *other = &slot->set[set ^ 1];
	__s32 *vals = slot->vals[set];
	__u32 mask = 1u << (bit & (INCXDP_MAX_WORKERS - 1));
	int on = 1, seen, fresh, write = 0, combine = 0;
	enum agg_outcome out;

	bpf_spin_lock(&slot->lock);
	if (match == AGG_MATCH_TAG) {
		on = set_on(cur, k->chunk);
		seen = on && (retx || (cur->bitmap & mask) || !cur->remaining);
		fresh = !on && !retx && !cur->remaining;
	} else {
		seen = !!(cur->bitmap & mask);
		fresh = !seen && !cur->remaining;
	}
	if (seen) {
		if (cur->remaining)
			out = AGG_RETX_PENDING;
		else if (match == AGG_MATCH_BITMAP && !set_matches(cur, k))
			out = AGG_STALE;
		else if (root || (cur->flags & INCXDP_SET_RESULT))
			out = AGG_RETX_RESULT;
		else
			out = AGG_RETX_UP;
	} else if (fresh) {
		/* First contribution of a new use of this set: it writes. By
		 * the shadow-set rule every sender has left the set's previous
		 * use (it sends again only after that use's result). */
		cur->round = k->round;
		cur->chunk = k->chunk;
		cur->op = k->op;
		cur->dtype = k->dtype;
		cur->nelems = k->nelems;
		cur->exp0 = k->exp0;
		cur->exp1 = k->exp1;
		cur->flags = 0;
		cur->bitmap = match == AGG_MATCH_TAG ? mask : cur->bitmap | mask;
		other->bitmap &= ~mask;
		write = 1;
		cur->remaining = expected - 1;
		out = AGG_CONSUMED;
	} else if (!on) {
		out = AGG_STALE;
	} else if (!set_matches(cur, k)) {
		out = AGG_MISMATCH;
	} else {
		cur->bitmap |= mask;
		other->bitmap &= ~mask;
		if (k->op != AGG_OP_ONE) {
			combine = 1;
		} else if (k->nelems) {
			write = 1;
			cur->nelems = k->nelems;
		}
		if (k->exp0 > cur->exp0)
			cur->exp0 = k->exp0;
		if (k->exp1 > cur->exp1)
			cur->exp1 = k->exp1;
		cur->remaining -= 1;
		out = AGG_CONSUMED;
	}
	if (write)
		agg_write(vals, k, end);
	else if (combine)
		agg_combine(vals, k, end);
	/* Whether it completed is read back from the set after the loop: the
	 * verifier then walks each loop once, not once per outcome. */
	if (out == AGG_CONSUMED && !cur->remaining) {
		out = AGG_COMPLETED;
		cur->rounds += 1;
		cur->flags |= done_flags;
	}
	agg_fill_view(cur, view);
	bpf_spin_unlock(&slot->lock);
	return out;
}

/*
 * The parent switch's result for a set this switch completed: the values
 * replace the set's aggregate, which then holds the final result (answered
 * to retransmissions). Another use of the set, or a set not complete here,
 * is stale.
 */
static __always_inline enum agg_outcome agg_take_result(struct incxdp_slot *slot,
							struct contrib *k, enum agg_match match,
							void *end, struct agg_view *view)
{
	struct incxdp_slot_set *cur = &slot->set[k->set & 1];
	__s32 *vals = slot->vals[k->set & 1];
	enum agg_outcome out = AGG_RESULT_STALE;
	int ok;

	bpf_spin_lock(&slot->lock);
	ok = !cur->remaining && (match == AGG_MATCH_TAG ? set_on(cur, k->chunk) :
					cur->bitmap && set_matches(cur, k));
	if (ok) {
		cur->nelems = k->nelems;
		cur->exp0 = k->exp0;
		cur->exp1 = k->exp1;
		cur->flags |= INCXDP_SET_RESULT;
		out = AGG_RESULT_TAKEN;
	}
	agg_fill_view(cur, view);
	if (ok)
		agg_write(vals, k, end);
	bpf_spin_unlock(&slot->lock);
	return out;
}

#undef AGG_Q

#endif
