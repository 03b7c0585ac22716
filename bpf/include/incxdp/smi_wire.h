/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * SMI (Streaming Message Interface) on the mesh relay: the 32-byte network
 * message of SMI's communication kernels, carried N at a time in a relay
 * frame (relay.h, kind INCXDP_RELAY_KIND_SMI, dst_node = destination rank).
 * Shared by hostlib's SMI runtime, the loader's `incxdp smi` and the tests.
 * docs/SMI.md has the byte layout and the rules.
 *
 * Frame: Ethernet | IPv4 | UDP (dst INCXDP_RELAY_UDP_PORT) |
 *        incxdp_relay_hdr (kind SMI, src_node/dst_node = ranks,
 *                          session = frame sequence number on the
 *                          (src, dst) stream, 0 = unsequenced) |
 *        payload_len / 32 x struct incxdp_smi_msg
 */
#ifndef INCXDP_SMI_WIRE_H
#define INCXDP_SMI_WIRE_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_SMI_MSG_LEN 32
#define INCXDP_SMI_DATA_LEN 28
/* Ranks are bytes in the header. */
#define INCXDP_SMI_MAX_RANKS 256

/* SMI's operations (lower 3 bits of elems_and_op). */
enum incxdp_smi_op {
	INCXDP_SMI_OP_SEND = 0,
	INCXDP_SMI_OP_RECEIVE = 1,
	INCXDP_SMI_OP_BROADCAST = 2,
	INCXDP_SMI_OP_SYNCH = 3, /* control: credits, link acks */
	INCXDP_SMI_OP_SCATTER = 4,
	INCXDP_SMI_OP_REDUCE = 5,
	INCXDP_SMI_OP_GATHER = 6,
};

/* One network message: SMI's layout, byte for byte. Elements are
 * little-endian at data[e * size]. */
struct incxdp_smi_msg {
	__u8 data[INCXDP_SMI_DATA_LEN];
	__u8 src;          /* sender rank */
	__u8 dst;          /* destination rank */
	__u8 port;         /* the channel's port */
	__u8 elems_and_op; /* valid elements << 3 | op */
} __attribute__((packed));

INCXDP_STATIC_ASSERT(sizeof(struct incxdp_smi_msg) == INCXDP_SMI_MSG_LEN, "SMI message layout");

#define INCXDP_SMI_OP_MASK 0x7
#define INCXDP_SMI_ELEMS_SHIFT 3

static inline __u8 incxdp_smi_pack(unsigned int elems, unsigned int op)
{
	return (__u8)((elems << INCXDP_SMI_ELEMS_SHIFT) | (op & INCXDP_SMI_OP_MASK));
}
static inline unsigned int incxdp_smi_op(__u8 elems_and_op)
{
	return elems_and_op & INCXDP_SMI_OP_MASK;
}
static inline unsigned int incxdp_smi_elems(__u8 elems_and_op)
{
	return elems_and_op >> INCXDP_SMI_ELEMS_SHIFT;
}

/* Elements per message by element size (28 char, 14 short, 7 int/float,
 * 3 double). */
#define INCXDP_SMI_ELEMS_CHAR 28
#define INCXDP_SMI_ELEMS_SHORT 14
#define INCXDP_SMI_ELEMS_INT 7
#define INCXDP_SMI_ELEMS_FLOAT 7
#define INCXDP_SMI_ELEMS_DOUBLE 3

/*
 * SYNCH messages (op SYNCH). data[0..3] is a little-endian __u32,
 * data[4] says what it is:
 *  - a data op (SEND, BROADCAST, SCATTER, REDUCE, GATHER): credits, in
 *    elements, for the stream (receiver -> sender, port, that op);
 *  - INCXDP_SMI_SYNCH_LINK_ACK: the next frame sequence number the sender
 *    of this message expects on the stream from the message's dst to its
 *    src (cumulative). Read from any frame, sequenced or not.
 */
#define INCXDP_SMI_SYNCH_LINK_ACK 7

/* Relay header bytes + message bytes must fit the link MTU; a frame also
 * never holds more than this many messages. */
#define INCXDP_SMI_MAX_MSGS_PER_FRAME 64
/* IPv4 (20) + UDP (8) + relay header (24): what precedes the messages
 * inside the link MTU. */
#define INCXDP_SMI_FRAME_OVERHEAD 52

#endif
