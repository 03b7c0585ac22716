/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * SwitchML's UDP aggregation header (p4app-switchML), see docs/PROTOCOLS.md §2.
 * Shared by the XDP engine, the loader and hostlib: this is the only copy.
 */
#ifndef INCXDP_SWITCHML_H
#define INCXDP_SWITCHML_H

#include <linux/types.h>
#include "compiler.h"

/* The switch accepts any destination port in this range. */
#define SWITCHML_UDP_PORT_MIN 0xBEE0
#define SWITCHML_UDP_PORT_MAX 0xBEEF

#define SWITCHML_MSG_UPDATE 0
#define SWITCHML_MSG_RESULT 1

/* size field 0..3 => 32 << size elements */
#define SWITCHML_SIZE_MAX 3
#define SWITCHML_ELEMS(size) (32u << (size))
#define SWITCHML_MAX_ELEMS 256

#define SWITCHML_POOL_SET_BIT 0x8000
#define SWITCHML_POOL_INDEX_MASK 0x3fff

struct switchml_hdr {
	__u8 type_size;   /* msg_type:4 (high nibble), unused:1, size:3 (low bits) */
	__u8 job_number;  /* echoed */
	__u32 tsi;        /* opaque packet id, echoed; host byte order on the client */
	__be16 pool_index; /* bit 15 = shadow set, bits 13:0 = slot */
	__s8 e0;
	__s8 e1;
} __attribute__((packed));

#define SWITCHML_HDR_LEN 10
INCXDP_STATIC_ASSERT(sizeof(struct switchml_hdr) == SWITCHML_HDR_LEN, "SwitchML header layout");

static inline __u8 switchml_msg_type(const struct switchml_hdr *h)
{
	return h->type_size >> 4;
}

static inline __u8 switchml_size(const struct switchml_hdr *h)
{
	return h->type_size & 0x7;
}

#endif
