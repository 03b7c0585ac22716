/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * A RoCE job's slot sets (docs/ROCE.md §1, §3): the engine's one slot rule
 * (agg.h) in its TAG mode, each set's use tagged by the packet index idx
 * (chunk) and the ImmDt (round). Behind one global function,
 * incxdp_roce_set, so that the verifier walks the rule's element loops
 * (write, SUM, MAX, MIN, Broadcast, the parent's result) once, not once per
 * connection rule of roce.h that reaches them.
 */
#ifndef INCXDP_LIB_ROCE_SET_H
#define INCXDP_LIB_ROCE_SET_H

#include "maps.bpf.h"
#include "agg.h"
#include "roce_tx.h"
#include "incxdp/roce.h"

enum roce_set_op {
	RSET_CHILD,  /* a child's contribution (agg_apply) */
	RSET_RETX,   /* a frame taken before: the answer only (agg_apply, retx) */
	RSET_PARENT, /* the parent's result (agg_take_result) */
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
	__u8 op;       /* INCXDP_OP_*, AGG_OP_ONE for Broadcast */
	__u8 dtype;
	__u8 pad[3];
	struct agg_view v; /* out: the set after the operation */
};

/*
 * Everything done under a slot's lock, as one global function. A global
 * function can take the lock because it looks the slot up itself (a map
 * value; a pointer argument would only be plain memory to it). Returns the
 * enum agg_outcome, or -1.
 */
__attribute__((noinline)) int incxdp_roce_set(struct xdp_md *ctx, struct roce_req *q)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct contrib k = {};
	struct incxdp_slot *slot;
	__u32 key, off;

	if (!q)
		return -1;
	key = q->slot;
	slot = bpf_map_lookup_elem(&incxdp_slots, &key);
	if (!slot)
		return -1;
	off = q->payload;
	if (off > ROCE_HDRS_LEN + ROCE_IMM_LEN)
		return -1;
	k.payload = data + off;
	k.nelems = q->nelems < ROCE_MAX_ELEMS ? q->nelems : ROCE_MAX_ELEMS;
	k.chunk = q->idx;
	k.round = q->imm;
	k.set = q->set;
	k.op = q->op;
	k.dtype = q->dtype;
	if (q->kind == RSET_PARENT)
		return agg_take_result(slot, &k, AGG_MATCH_TAG, end, &q->v);
	return agg_apply(slot, &k, q->fanin, q->bit, q->root, q->root ? INCXDP_SET_RESULT : 0,
			 AGG_MATCH_TAG, q->kind == RSET_RETX, end, &q->v);
}

#endif
