/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The mesh daemon's control messages (`incxdp mesh run`): hellos between
 * neighbours and link-state advertisements (LSAs) flooded through the mesh.
 * docs/MESH.md §Discovery and routing has the rules and timers.
 *
 * Frame: Ethernet | IPv4 | UDP (dst INCXDP_MESH_CTL_UDP_PORT, relay.h) |
 *        incxdp_mesh_ctl_hdr | incxdp_mesh_hello or incxdp_mesh_lsa
 *
 * Sent as broadcasts on one link (SO_BINDTODEVICE), never relayed: the relay
 * program passes the port to the stack. Every field is network byte order;
 * every message has a fixed size so parsing is one length check.
 */
#ifndef INCXDP_MESH_CTL_H
#define INCXDP_MESH_CTL_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_MESH_CTL_MAGIC 0x4D43 /* "MC" */
#define INCXDP_MESH_CTL_VERSION 1

/* Addresses a node advertises (its node id hashes all of them, relay.h). */
#define INCXDP_MESH_MAX_ADDRS 16
/* Neighbour links one LSA can list. */
#define INCXDP_MESH_MAX_NEIGHBOURS 32

enum incxdp_mesh_msg_type {
	INCXDP_MESH_MSG_HELLO = 1,
	INCXDP_MESH_MSG_LSA = 2,
};

struct incxdp_mesh_ctl_hdr {
	__be16 magic;  /* INCXDP_MESH_CTL_MAGIC */
	__u8 version;  /* INCXDP_MESH_CTL_VERSION */
	__u8 type;     /* enum incxdp_mesh_msg_type */
	__be32 sender; /* node id of the node that put it on this link */
	__be16 len;    /* bytes from this header to the end of the message */
	__be16 reserved;
} __attribute__((packed));

#define INCXDP_MESH_CTL_HDR_LEN 12
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_mesh_ctl_hdr) == INCXDP_MESH_CTL_HDR_LEN,
		     "mesh ctl header layout");

/* Every hello interval on every interface: "I am here, on this link". */
struct incxdp_mesh_hello {
	struct incxdp_mesh_ctl_hdr hdr;
	__be32 link_addr;   /* the sender's address on this link */
	__u8 mac[6];        /* the sender's MAC on this link: the relay's dst MAC */
	__u8 naddrs;        /* used entries of addrs */
	__u8 pad;
	__be16 interval_ms; /* the sender's hello interval */
	__be16 dead_ms;     /* after this long without a hello the sender is down */
	__be32 addrs[INCXDP_MESH_MAX_ADDRS]; /* all of the sender's addresses */
} __attribute__((packed));

#define INCXDP_MESH_HELLO_LEN 92
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_mesh_hello) == INCXDP_MESH_HELLO_LEN,
		     "mesh hello layout");

/* One link of the originating node to a neighbour it hears hellos from. */
struct incxdp_mesh_lsa_link {
	__be32 node;       /* the neighbour's node id */
	__be32 local_addr; /* the originator's address on the link */
	__be32 peer_addr;  /* the neighbour's address on the link */
} __attribute__((packed));

#define INCXDP_MESH_LSA_LINK_LEN 12
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_mesh_lsa_link) == INCXDP_MESH_LSA_LINK_LEN,
		     "mesh lsa link layout");

/* A node's view of itself, flooded unchanged (hdr.sender is the flooder). */
struct incxdp_mesh_lsa {
	struct incxdp_mesh_ctl_hdr hdr;
	__be32 origin; /* node id of the node that originated it */
	__be32 seq;    /* newer wins, compared as serial numbers (RFC 1982) */
	__u8 naddrs;
	__u8 nlinks;
	__be16 pad;
	__be32 addrs[INCXDP_MESH_MAX_ADDRS];
	struct incxdp_mesh_lsa_link links[INCXDP_MESH_MAX_NEIGHBOURS];
} __attribute__((packed));

#define INCXDP_MESH_LSA_LEN (INCXDP_MESH_CTL_HDR_LEN + 12 + 4 * INCXDP_MESH_MAX_ADDRS + \
			     INCXDP_MESH_LSA_LINK_LEN * INCXDP_MESH_MAX_NEIGHBOURS)
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_mesh_lsa) == INCXDP_MESH_LSA_LEN, "mesh lsa layout");
INCXDP_STATIC_ASSERT(INCXDP_MESH_LSA_LEN == 472, "mesh lsa size");

#endif
