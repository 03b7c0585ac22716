/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * A RoCE job's slot sets (docs/ROCE.md §1, §3): SwitchML's per-(slot, set)
 * bitmap, counter and shadow-set rules, with each set's use tagged by the
 * packet index idx (chunk) and the ImmDt (round), so that a frame can tell
 * "this idx, still open", "this idx, complete (with or without the job's
 * result)" and "another idx". Everything that needs the slot's lock is here,
 * behind one global function, incxdp_roce_set; the connection rules that
 * call it are in roce.h.
 */
#ifndef INCXDP_LIB_ROCE_SET_H
#define INCXDP_LIB_ROCE_SET_H

#include "maps.bpf.h"
#include "agg.h"
#include "roce_tx.h"
#include "incxdp/roce.h"

/* What a frame found in its slot set, read under the slot's lock. */
struct roce_view {
	__u32 imm;
	__u16 nelems;
	__u8 on_idx;   /* the set is in use for this idx */
	__u8 complete; /* every child's contribution to it is in */
	__u8 result;   /* INCXDP_SET_RESULT */
	__u8 pad[3];
};

enum roce_set_op {
	RSET_VIEW,   /* read the set */
	RSET_CHILD,  /* a child's contribution: enum roce_agg */
	RSET_PARENT, /* the parent's result: 1 stored, 0 not this switch's idx */
};

/* The arguments of incxdp_roce_set (no holes: the verifier wants every byte
 * of a global function's memory argument initialised). */
struct roce_req {
	__u32 slot;    /* key in incxdp_slots */
	__u32 idx;
	__u32 imm;     /* ImmDt, host order */
	__u32 bit;     /* RSET_CHILD: the child's bit in the set's bitmap */
	__u32 fanin;   /* RSET_CHILD: contributions that complete the set */
	__u16 nelems;
	__u16 payload; /* offset of the payload from ctx->data */
	__u8 kind;     /* enum roce_set_op */
	__u8 set;
	__u8 root;     /* this switch is the job's root */
	__u8 op;       /* INCXDP_OP_* */
	__u8 dtype;
	__u8 pad[3];
	struct roce_view v; /* out: the set after the operation */
};

enum roce_agg {
	RAGG_CONSUMED,
	RAGG_COMPLETED,
	RAGG_DUP,      /* this child's contribution is in already (or past) */
	RAGG_STALE,    /* the set is busy with another idx */
	RAGG_MISMATCH, /* same idx, another ImmDt or payload size */
};


/*
 * A set's current use: chunk holds its idx. A set never used (all zero, as
 * after a job reset) has neither contributions in flight nor a completion.
 */
static __always_inline int roce_set_on(const struct incxdp_slot_set *s, __u32 idx)
{
	return s->chunk == idx && (s->remaining || s->rounds);
}

static __always_inline void roce_fill_view(const struct incxdp_slot_set *s, __u32 idx,
					   struct roce_view *v)
{
	v->on_idx = roce_set_on(s, idx);
	v->complete = s->remaining == 0;
	v->result = !!(s->flags & INCXDP_SET_RESULT);
	v->imm = s->round;
	v->nelems = s->nelems;
}

/*
 * agg.h's combine with branch-free MAX/MIN: a compare-and-store per element
 * is a fork per element for the verifier (docs/ROCE.md §5); the 64-bit
 * difference's sign picks the value instead (d = x - v
 * cannot overflow in 64 bits; d >> 63 is all ones iff x < v). The barrier
 * keeps clang from seeing max/min in it and emitting the branch again.
 */
#define AGG_Q INCXDP_ELEM_QUANTUM
static __always_inline void roce_combine(__s32 *vals, struct contrib *k, void *end)
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
	default:
		agg_combine(vals, k, end); /* SUM */
		break;
	}
}
#undef AGG_Q

/*
 * A child's contribution for idx (SwitchML's set rules with the set tagged
 * by idx and ImmDt: chunk = idx, round = ImmDt). Broadcast does not add: the
 * set takes the one non-empty payload. At the root the completion is the
 * job's result. Fills *v with the set as it is after the frame.
 * The bookkeeping comes first and the element loop last, right before the
 * unlock: each of the loop's exits (one per block) then has nothing left to
 * walk but the unlock.
 */
static __always_inline int roce_agg_child(struct incxdp_slot *slot, __u32 set, __u32 idx,
					  __u32 imm, struct contrib *k, __u32 bit, __u32 fanin,
					  int root, void *end, struct roce_view *v)
{
	struct incxdp_slot_set *cur = &slot->set[set & 1];
	struct incxdp_slot_set *other = &slot->set[(set & 1) ^ 1];
	__s32 *vals = slot->vals[set & 1];
	int bcast = roce_imm_prim(imm) == ROCE_PRIM_BROADCAST;
	int out, write = 0, combine = 0;

	bpf_spin_lock(&slot->lock);
	if (roce_set_on(cur, idx)) {
		if ((cur->bitmap & bit) || !cur->remaining) {
			out = RAGG_DUP;
		} else if (cur->round != imm ||
			   (bcast ? k->nelems && cur->nelems : k->nelems != cur->nelems)) {
			out = RAGG_MISMATCH;
		} else {
			cur->bitmap |= bit;
			other->bitmap &= ~bit;
			if (!bcast) {
				combine = 1;
			} else if (k->nelems) {
				write = 1;
				cur->nelems = k->nelems;
			}
			cur->remaining -= 1;
			out = cur->remaining ? RAGG_CONSUMED : RAGG_COMPLETED;
		}
	} else if (cur->remaining) {
		out = RAGG_STALE;
	} else {
		/* First contribution of this idx: it writes. Every child has
		 * left the set's previous use (a rank sends idx only after the
		 * result of idx - pool_size), so no old bit survives. */
		cur->chunk = idx;
		cur->round = imm;
		cur->op = k->op;
		cur->dtype = k->dtype;
		cur->nelems = k->nelems;
		cur->exp0 = 0;
		cur->exp1 = 0;
		cur->flags = 0;
		cur->bitmap = bit;
		other->bitmap &= ~bit;
		write = 1;
		cur->remaining = fanin - 1;
		out = cur->remaining ? RAGG_CONSUMED : RAGG_COMPLETED;
	}
	if (out == RAGG_COMPLETED) {
		cur->rounds += 1;
		if (root)
			cur->flags |= INCXDP_SET_RESULT;
	}
	roce_fill_view(cur, idx, v);
	if (write)
		agg_write(vals, k, end);
	else if (combine)
		roce_combine(vals, k, end);
	bpf_spin_unlock(&slot->lock);
	return out;
}

/* The parent's result for idx, if this switch completed idx. */
static __always_inline int roce_store_result(struct incxdp_slot *slot, __u32 set, __u32 idx,
					     struct contrib *k, void *end, struct roce_view *v)
{
	struct incxdp_slot_set *cur = &slot->set[set & 1];
	__s32 *vals = slot->vals[set & 1];
	int ok;

	bpf_spin_lock(&slot->lock);
	ok = roce_set_on(cur, idx) && !cur->remaining;
	if (ok) {
		cur->nelems = k->nelems;
		cur->flags |= INCXDP_SET_RESULT;
	}
	roce_fill_view(cur, idx, v);
	if (ok)
		agg_write(vals, k, end);
	bpf_spin_unlock(&slot->lock);
	return ok;
}

/*
 * Everything done under a slot's lock, as one global function: the verifier
 * walks its element loops (agg.h: write, SUM, MAX, MIN, Broadcast, the
 * parent's result) once, not once per rule that reaches them. A global
 * function can take the lock because it looks the slot up itself (a map
 * value; a pointer argument would only be plain memory to it).
 */
__attribute__((noinline)) int incxdp_roce_set(struct xdp_md *ctx, struct roce_req *q)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct contrib k = {};
	struct incxdp_slot *slot;
	__u32 key, off;
	int ret;

	if (!q)
		return -1;
	key = q->slot;
	slot = bpf_map_lookup_elem(&incxdp_slots, &key);
	if (!slot)
		return -1;
	if (q->kind == RSET_VIEW) {
		bpf_spin_lock(&slot->lock);
		roce_fill_view(&slot->set[q->set & 1], q->idx, &q->v);
		bpf_spin_unlock(&slot->lock);
		return 0;
	}
	off = q->payload;
	if (off > ROCE_HDRS_LEN + ROCE_IMM_LEN)
		return -1;
	k.payload = data + off;
	k.nelems = q->nelems < ROCE_MAX_ELEMS ? q->nelems : ROCE_MAX_ELEMS;
	k.op = q->op;
	k.dtype = q->dtype;
	if (q->kind == RSET_PARENT)
		return roce_store_result(slot, q->set, q->idx, &k, end, &q->v);
	ret = roce_agg_child(slot, q->set, q->idx, q->imm, &k, q->bit, q->fanin, q->root, end,
			     &q->v);
	return ret;
}

#endif
