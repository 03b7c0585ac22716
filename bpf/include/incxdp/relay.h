/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The mesh relay: wire header and map layouts, shared by the XDP relay
 * (bpf/incxdp_relay.bpf.c), the mesh daemon that fills the forwarding table
 * (loader, `incxdp mesh`), SMI's route installer and hostlib's endpoints.
 * docs/PROTOCOLS.md §Mesh relay has the byte layout and the rules.
 *
 * Frame: Ethernet | IPv4 (no options) | UDP (dst INCXDP_RELAY_UDP_PORT) |
 *        incxdp_relay_hdr | payload_len bytes
 *
 * Nodes are named by a 32-bit id (FNV-1a over the node's IPv4 addresses for
 * the mesh, the rank for SMI). A frame whose dst_node is this node's id is
 * delivered locally (the AF_XDP socket of its rx queue, else the stack's UDP
 * socket on INCXDP_RELAY_UDP_PORT); any other is forwarded out of the next
 * hop's interface by the forwarding table, addresses rewritten for that
 * link, hops incremented, without leaving the kernel.
 */
#ifndef INCXDP_RELAY_H
#define INCXDP_RELAY_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_RELAY_UDP_PORT 0xBEF2 /* 48882 */
/* The mesh daemon's hellos and link-state floods: plain UDP between
 * neighbours, never relayed (the relay program passes them to the stack). */
#define INCXDP_MESH_CTL_UDP_PORT 0xBEF3 /* 48883 */
#define INCXDP_RELAY_MAGIC 0x4D58    /* "MX" */
#define INCXDP_RELAY_VERSION 1

/* Hop limit when the daemon was not told otherwise (INCXDP_MESH_MAX_HOPS). */
#define INCXDP_RELAY_DEFAULT_MAX_HOPS 4
/* Equal-cost next hops a route may hold (a ring's two ways to a 2-hop peer). */
#define INCXDP_RELAY_MAX_NEXTHOPS 2
#define INCXDP_RELAY_MAX_ROUTES 1024
#define INCXDP_RELAY_MAX_IFACES 64

/* The relay header, network byte order. */
struct incxdp_relay_hdr {
	__be16 magic;       /* INCXDP_RELAY_MAGIC */
	__u8 version;       /* INCXDP_RELAY_VERSION */
	__u8 kind;          /* enum incxdp_relay_kind: who the payload is for */
	__u8 hops;          /* relays crossed so far; +1 at each forward */
	__u8 total_hops;    /* links on the path the sender chose (informative) */
	__u8 path;          /* which of a route's next hops the sender took; relays keep it */
	__u8 flags;         /* reserved, 0 */
	__be32 src_node;
	__be32 dst_node;
	__be32 session;     /* the sender's connection/session id */
	__be32 payload_len; /* bytes after this header */
} __attribute__((packed));

#define INCXDP_RELAY_HDR_LEN 24
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_relay_hdr) == INCXDP_RELAY_HDR_LEN, "relay header layout");

enum incxdp_relay_kind {
	INCXDP_RELAY_KIND_P2P = 1, /* hostlib's mesh point-to-point endpoints */
	INCXDP_RELAY_KIND_SMI = 2, /* SMI network messages (32 B each) */
};

/* Map names; also the pinned file names in the node's pin directory. */
#define INCXDP_MAP_RELAY_CFG "incxdp_relay_cfg"
#define INCXDP_MAP_RELAY_ROUTES "incxdp_relay_routes"
#define INCXDP_MAP_RELAY_TX "incxdp_relay_tx"
#define INCXDP_MAP_RELAY_XSKS "incxdp_relay_xsks"
#define INCXDP_MAP_RELAY_STATS "incxdp_relay_stats"
/* Per-interface delivery (an endpoint with one AF_XDP socket per (interface,
 * rx queue), e.g. an SMI rank with up to 4 QSFPs): the endpoint gives each
 * of the relay's interfaces a slot and binds its sockets under
 * slot * INCXDP_RELAY_XSK_QUEUES + rx queue. Tried before incxdp_relay_xsks. */
#define INCXDP_MAP_RELAY_IFSLOTS "incxdp_relay_ifslots"
#define INCXDP_MAP_RELAY_IF_XSKS "incxdp_relay_if_xsks"
#define INCXDP_RELAY_XSK_QUEUES 16

/* incxdp_relay_cfg (array, one entry): this node and its knobs. */
struct incxdp_relay_cfg {
	__u32 self_node;
	__u32 relay_enabled; /* 0: frames for other nodes are dropped (RELAY_OFF) */
	__u32 max_hops;      /* a frame that has crossed this many relays is dropped */
	__u32 pad;
};

/* One way out: the link to a neighbour and its addresses on that link. */
struct incxdp_relay_nexthop {
	__u32 ifindex; /* egress interface on this node (also a key of incxdp_relay_tx) */
	__u8 src_mac[6];
	__u8 dst_mac[6];
	__be32 src_ip; /* this node's address on the link */
	__be32 dst_ip; /* the neighbour's address on the link */
};

/* incxdp_relay_routes (hash): key dst node id -> how to reach it. */
struct incxdp_relay_route {
	__u32 hops;      /* links to the destination along nh[] */
	__u32 nnexthops; /* 1..INCXDP_RELAY_MAX_NEXTHOPS, equal cost */
	struct incxdp_relay_nexthop nh[INCXDP_RELAY_MAX_NEXTHOPS];
};

/* incxdp_relay_stats: per-CPU counters, index = enum incxdp_relay_stat.
 * Every frame the relay program sees ends in exactly one of them. */
enum incxdp_relay_stat {
	INCXDP_RELAY_STAT_PASS = 0,     /* not relay traffic: to the stack */
	INCXDP_RELAY_STAT_DELIVER_XSK,  /* for this node: to the AF_XDP socket */
	INCXDP_RELAY_STAT_DELIVER_STACK, /* for this node: to the stack's UDP socket */
	INCXDP_RELAY_STAT_FORWARD,      /* for another node: sent to the next hop */
	INCXDP_RELAY_STAT_HOP_LIMIT,    /* past max_hops: dropped */
	INCXDP_RELAY_STAT_RELAY_OFF,    /* for another node with relaying off: dropped */
	INCXDP_RELAY_STAT_NO_ROUTE,     /* unknown destination: dropped */
	INCXDP_RELAY_STAT_MALFORMED,    /* relay port, bad magic/version/lengths: dropped */
	INCXDP_RELAY_STAT_REDIRECT_FAIL, /* the next hop's interface refused the frame */
	INCXDP_RELAY_STAT_CHAOS,        /* taken by `incxdp chaos --xdp` */
	INCXDP_RELAY_STAT_SENT,         /* the local endpoint's live frame, sent (bpf/lib/xsk_tx.h) */
	INCXDP_RELAY_STAT_TX_BAD,       /* the local endpoint's live frame, bad slot: dropped */
	INCXDP_RELAY_STAT_MAX,
};

/*
 * A mesh node's id: FNV-1a 32 over its IPv4 addresses, each as 4 bytes in
 * network order, the addresses sorted ascending (as numbers in host order)
 * so every node that learns them computes the same id. Shared by the mesh
 * daemon, hostlib and the tests. `addrs_host_order` must be sorted.
 */
#define INCXDP_FNV1A_BASIS 0x811c9dc5u
#define INCXDP_FNV1A_PRIME 0x01000193u

static inline __u32 incxdp_mesh_node_id(const __u32 *addrs_host_order, unsigned int n)
{
	__u32 h = INCXDP_FNV1A_BASIS;
	unsigned int i, b;

	for (i = 0; i < n; i++)
		for (b = 0; b < 4; b++) {
			h ^= (addrs_host_order[i] >> (24 - 8 * b)) & 0xff;
			h *= INCXDP_FNV1A_PRIME;
		}
	return h;
}

#endif
