/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * hostlib's mesh point-to-point transport (hostlib/include/incxdp/mesh.h):
 * the header that follows the relay header of a frame of kind
 * INCXDP_RELAY_KIND_P2P. docs/MESH.md §Point-to-point has the rules.
 *
 * Frame: Ethernet | IPv4 | UDP (dst INCXDP_RELAY_UDP_PORT) |
 *        incxdp_relay_hdr (kind P2P, session = src_conn) |
 *        incxdp_p2p_hdr | payload
 *
 * Connections are between two endpoints (one per node), named on each side
 * by a 32-bit id the side chose; every frame carries both. DATA segments
 * are numbered per connection and direction (seq); the receiver answers with
 * ACKs holding the cumulative ack and a bitmap of what it holds beyond it.
 */
#ifndef INCXDP_MESH_P2P_H
#define INCXDP_MESH_P2P_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_P2P_VERSION 1

enum incxdp_p2p_type {
	/* dst_conn = the listen id, src_conn = the connector's id. */
	INCXDP_P2P_CONNECT = 1,
	/* dst_conn = the connector's id, src_conn = the acceptor's id. */
	INCXDP_P2P_ACCEPT = 2,
	/* seq, msg_id, tag, msg_off, msg_len; payload = the segment's bytes. */
	INCXDP_P2P_DATA = 3,
	/* seq = cumulative ack (every seq below it is held); msg_id = number of
	 * bits in the payload's bitmap: bit i (byte i / 8, LSB first) set =
	 * seq + 1 + i is held. */
	INCXDP_P2P_ACK = 4,
	/* The sender closed; seq = its cumulative ack, as in ACK; msg_id = 0,
	 * or INCXDP_P2P_CLOSE_ANSWER when it answers a CLOSE (never answered,
	 * so two closed ends do not ping-pong). A closing or closed end answers
	 * a CLOSE while it remembers the connection. */
	INCXDP_P2P_CLOSE = 5,
	/* The receiver knows no such connection (e.g. it restarted): the
	 * sender's connection fails. msg_id = enum incxdp_p2p_reset_reason. */
	INCXDP_P2P_RESET = 6,
};

#define INCXDP_P2P_CLOSE_ANSWER 1

enum incxdp_p2p_reset_reason {
	INCXDP_P2P_RESET_UNKNOWN_CONN = 1,
	INCXDP_P2P_RESET_TRUNCATED = 2, /* a message larger than the posted receive */
};

/* Network byte order. */
struct incxdp_p2p_hdr {
	__u8 type;        /* enum incxdp_p2p_type */
	__u8 version;     /* INCXDP_P2P_VERSION */
	__be16 window;    /* CONNECT/ACCEPT: the sender's receive window (segments) */
	__be32 dst_conn;  /* the receiver's connection id (CONNECT: the listen id) */
	__be32 src_conn;  /* the sender's connection id */
	__be32 seq;       /* DATA: segment number; ACK/CLOSE: cumulative ack */
	__be32 msg_id;    /* DATA: message number on the connection; ACK: bitmap bits */
	__be32 tag;       /* DATA: the isend's tag */
	__be64 msg_off;   /* DATA: the segment's offset in the message */
	__be64 msg_len;   /* DATA: the message's size */
} __attribute__((packed));

#define INCXDP_P2P_HDR_LEN 40
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_p2p_hdr) == INCXDP_P2P_HDR_LEN, "p2p header layout");

/* Largest SACK bitmap an ACK carries (bits), whatever the window. */
#define INCXDP_P2P_MAX_SACK_BITS 4096

/* The listen handle (NCCL's 128-byte opaque handle), network byte order:
 * enough for a connector to find the listener without any other exchange. */
#define INCXDP_P2P_HANDLE_MAGIC 0x50325048 /* "P2PH" */
#define INCXDP_P2P_HANDLE_MAX_ADDRS 16
struct incxdp_p2p_handle {
	__be32 magic;
	__be32 node;      /* incxdp_mesh_node_id() of the listener */
	__be32 listen_id;
	__u8 naddrs;
	__u8 version;
	__u8 pad[2];
	__be32 addrs[INCXDP_P2P_HANDLE_MAX_ADDRS]; /* the listener's IPv4 addresses */
	/* The connecting process's own use (its pending connection), never sent:
	 * NCCL calls connect again with the same handle until it completes. */
	__u64 local_cookie;
	__u8 reserved[40];
} __attribute__((packed));

#define INCXDP_P2P_HANDLE_LEN 128
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_p2p_handle) == INCXDP_P2P_HANDLE_LEN, "p2p handle layout");

#endif
