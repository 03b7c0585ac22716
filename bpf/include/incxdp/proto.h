/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * incxdp's native UDP aggregation header. It carries the (fid, rid, cid)
 * semantics (docs/PROTOCOLS.md §1) plus everything the engine needs to place a
 * chunk without a per-protocol table: op, dtype, rank, worker count, window
 * slot and shadow set. Shared by the XDP engine, the loader and hostlib.
 *
 * Frame: Ethernet | IPv4 | UDP (dst INCXDP_UDP_PORT) | incxdp_hdr | N x be32
 * N is a multiple of INCXDP_ELEM_QUANTUM and at most INCXDP_MAX_ELEMS; hosts
 * pad the last chunk with the op's identity (0 for SUM, INT32_MIN for MAX,
 * INT32_MAX for MIN). The quantum lets the engine check packet bounds once
 * per block of elements instead of once per element.
 */
#ifndef INCXDP_PROTO_H
#define INCXDP_PROTO_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_UDP_PORT 0xBEF0 /* default; `incxdp load --native-port` */
#define INCXDP_MAGIC 0x1C
#define INCXDP_VERSION 1

#define INCXDP_ELEM_QUANTUM 16
/*
 * 832 x 4 B + 32 B header + UDP/IPv4/Ethernet = 3402 B: the largest multiple
 * of the quantum whose frame fits one XDP buffer (3520 B: a page less
 * headroom and skb_shared_info). Longer frames (jumbo links) arrive in
 * fragments, which the engine does not read (INCXDP_STAT_TOO_LONG).
 */
#define INCXDP_MAX_ELEMS 832
#define INCXDP_MAX_WORKERS 32 /* one bit each in the slot bitmap */
#define INCXDP_LINK_MTU 3500

enum incxdp_msg {
	INCXDP_MSG_DATA = 0,   /* worker -> switch contribution */
	INCXDP_MSG_RESULT = 1, /* switch -> worker aggregate */
};

enum incxdp_op {
	INCXDP_OP_SUM = 0,
	INCXDP_OP_MAX = 1,
	INCXDP_OP_MIN = 2,
	INCXDP_OP_COUNT,
};

enum incxdp_dtype {
	INCXDP_DTYPE_INT32 = 0,
	/* float32 quantised by the host to int32 with a block exponent (exp) */
	INCXDP_DTYPE_FLOAT32 = 1,
	INCXDP_DTYPE_COUNT,
};

#define INCXDP_SLOT_SET_BIT 0x8000
#define INCXDP_SLOT_INDEX_MASK 0x3fff

struct incxdp_hdr {
	__u8 magic;      /* INCXDP_MAGIC */
	__u8 ver_type;   /* version:4 (high nibble), msg type:4 */
	__u8 op;         /* enum incxdp_op */
	__u8 dtype;      /* enum incxdp_dtype */
	__be32 job;      /* fid: job / flow group */
	__be32 round;    /* rid: iteration, echoed and checked per slot */
	__be32 chunk;    /* cid: chunk within the round, echoed and checked */
	__be16 rank;     /* sender's rank (must match the worker table) */
	__be16 nworkers; /* contributions expected (must match the job) */
	__be16 slot;     /* bit 15 = shadow set, bits 13:0 = window slot */
	__be16 nelems;   /* int32 elements that follow */
	__s8 exp;        /* block exponent; the switch keeps the signed max */
	__u8 flags;      /* reserved, 0 */
	__be16 reserved; /* 0 */
	__u32 tsi;       /* opaque to the switch, echoed in results */
} __attribute__((packed));

#define INCXDP_HDR_LEN 32
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_hdr) == INCXDP_HDR_LEN, "native header layout");

static inline __u8 incxdp_hdr_version(const struct incxdp_hdr *h)
{
	return h->ver_type >> 4;
}

static inline __u8 incxdp_hdr_type(const struct incxdp_hdr *h)
{
	return h->ver_type & 0xf;
}

#endif
