/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * A contribution: what the engine needs from one aggregation frame,
 * whatever wire format it came in. The decoders fill it; the engine never
 * looks at a protocol header again until it writes the reply.
 */
#ifndef INCXDP_CONTRIB_H
#define INCXDP_CONTRIB_H

#include <linux/types.h>
#include "incxdp/maps.h"

struct contrib {
	void *hdr;       /* protocol header, for the reply */
	__be32 *payload; /* nelems big-endian int32 */
	__u32 job;
	__u32 round;     /* native rid; 0 for SwitchML */
	__u32 chunk;     /* native cid; 0 for SwitchML */
	__u16 rank;      /* claimed by the header (native) or by the worker table */
	__u16 nworkers;  /* claimed by the header; 0 = take the job's */
	__u16 slot;
	__u16 nelems;
	__u8 set;
	__u8 op;
	__u8 dtype;
	__u8 wire;       /* enum incxdp_wire */
	__s8 exp0;
	__s8 exp1;
	__u8 msg;        /* enum incxdp_msg (native); DATA for SwitchML */
};

#endif
