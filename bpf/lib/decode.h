/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Wire decoders: SwitchML (docs/PROTOCOLS.md §2) and the native incxdp header
 * (incxdp/proto.h). They check the header and the payload length, and fill
 * a struct contrib; they touch no state. Return 0 or -1 (malformed).
 */
#ifndef INCXDP_DECODE_H
#define INCXDP_DECODE_H

#include "parse.h"
#include "contrib.h"
#include "incxdp/proto.h"
#include "incxdp/switchml.h"

/* The payload must hold nelems elements; checked once here so that no
 * state is touched for a truncated frame. The copy loops still re-check
 * per block because the verifier needs a bound on every access. */
static __always_inline int payload_fits(struct cursor *c, __u32 nelems)
{
	__u64 avail = (__u64)(c->end - c->pos);

	return avail >= (__u64)nelems * 4 ? 0 : -1;
}

static __always_inline int decode_switchml(struct cursor *c, struct contrib *k)
{
	struct switchml_hdr *h = CURSOR_TAKE(c, struct switchml_hdr);
	__u16 pool;

	if (!h)
		return -1;
	if (switchml_msg_type(h) != SWITCHML_MSG_UPDATE || switchml_size(h) > SWITCHML_SIZE_MAX)
		return -1;
	pool = bpf_ntohs(h->pool_index);
	if (pool & 0x4000) /* bit 14 must be 0 */
		return -1;
	k->hdr = h;
	k->wire = INCXDP_WIRE_SWITCHML;
	k->msg = INCXDP_MSG_DATA;
	k->nelems = SWITCHML_ELEMS(switchml_size(h));
	k->slot = pool & SWITCHML_POOL_INDEX_MASK;
	k->set = !!(pool & SWITCHML_POOL_SET_BIT);
	k->op = INCXDP_OP_SUM;
	k->dtype = INCXDP_DTYPE_INT32;
	k->exp0 = h->e0;
	k->exp1 = h->e1;
	k->round = 0;
	k->chunk = 0;
	k->nworkers = 0;
	k->payload = c->pos;
	return payload_fits(c, k->nelems);
}

static __always_inline int decode_native(struct cursor *c, struct contrib *k)
{
	struct incxdp_hdr *h = CURSOR_TAKE(c, struct incxdp_hdr);
	__u16 slot;

	if (!h)
		return -1;
	/* RESULT: a parent switch's result coming down a tree (tree.h). */
	if (h->magic != INCXDP_MAGIC || incxdp_hdr_version(h) != INCXDP_VERSION ||
	    incxdp_hdr_type(h) > INCXDP_MSG_RESULT)
		return -1;
	if (h->op >= INCXDP_OP_COUNT || h->dtype >= INCXDP_DTYPE_COUNT)
		return -1;
	k->nelems = bpf_ntohs(h->nelems);
	if (k->nelems > INCXDP_MAX_ELEMS || k->nelems % INCXDP_ELEM_QUANTUM)
		return -1;
	slot = bpf_ntohs(h->slot);
	if (slot & 0x4000)
		return -1;
	k->hdr = h;
	k->wire = INCXDP_WIRE_NATIVE;
	k->msg = incxdp_hdr_type(h);
	k->slot = slot & INCXDP_SLOT_INDEX_MASK;
	k->set = !!(slot & INCXDP_SLOT_SET_BIT);
	k->op = h->op;
	k->dtype = h->dtype;
	k->exp0 = h->exp;
	k->exp1 = 0;
	k->job = bpf_ntohl(h->job);
	k->round = bpf_ntohl(h->round);
	k->chunk = bpf_ntohl(h->chunk);
	k->rank = bpf_ntohs(h->rank);
	k->nworkers = bpf_ntohs(h->nworkers);
	k->payload = c->pos;
	return payload_fits(c, k->nelems);
}

/* Turns the contribution's header into the result header in place. */
static __always_inline void encode_result_hdr(struct contrib *k, __s8 exp0, __s8 exp1,
					      void *end)
{
	if (k->wire == INCXDP_WIRE_SWITCHML) {
		struct switchml_hdr *h = k->hdr;

		if ((void *)(h + 1) > end)
			return;
		h->type_size = (SWITCHML_MSG_RESULT << 4) | (h->type_size & 0x0f);
		h->e0 = exp0;
		h->e1 = exp1;
	} else {
		struct incxdp_hdr *h = k->hdr;

		if ((void *)(h + 1) > end)
			return;
		h->ver_type = (INCXDP_VERSION << 4) | INCXDP_MSG_RESULT;
		h->exp = exp0;
	}
}

#endif
