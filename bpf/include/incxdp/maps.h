/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Key/value layouts of every map the engine shares with the control plane.
 * Included by the BPF programs, the loader and the tests: the only copy.
 * All maps are pinned under INCXDP_PIN_DIR by name, with BTF, so
 * `bpftool map dump pinned /sys/fs/bpf/incxdp/<map>` prints named fields.
 */
#ifndef INCXDP_MAPS_H
#define INCXDP_MAPS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include "proto.h"

#define INCXDP_PIN_DIR "/sys/fs/bpf/incxdp"

#define INCXDP_MAX_JOBS 256
#define INCXDP_MAX_WORKER_ENTRIES 4096
#define INCXDP_MAX_PORTS 256
#define INCXDP_DEFAULT_SLOTS 4096 /* slot map size, `incxdp load --slots` */

/* Map names; also the pinned file names. */
#define INCXDP_MAP_SLOTS "incxdp_slots"
#define INCXDP_MAP_JOBS "incxdp_jobs"
#define INCXDP_MAP_WORKERS "incxdp_workers"
#define INCXDP_MAP_EGRESS "incxdp_egress"
#define INCXDP_MAP_PORTS "incxdp_ports"
#define INCXDP_MAP_STATS "incxdp_stats"
#define INCXDP_MAP_INFO "incxdp_info"
#define INCXDP_MAP_ROCE_CONNS "incxdp_roce_conns"
#define INCXDP_MAP_PARENTS "incxdp_parents"

#define INCXDP_MAX_ROCE_CONNS 4096

enum incxdp_wire {
	INCXDP_WIRE_NATIVE = 0,
	INCXDP_WIRE_SWITCHML = 1,
};

/* incxdp_info (one entry, written by the loader, never read by BPF): the
 * network namespace the engine was loaded in. Port ifindexes only mean
 * something there, so the control plane refuses to change the engine from
 * another namespace. */
struct incxdp_info {
	__u64 netns_dev; /* stat() of /proc/self/ns/net */
	__u64 netns_ino;
	__u32 native_port;
	__u32 pad;
};

/* incxdp_workers: who may contribute. Key: the sender's addresses as seen
 * in the frame (network byte order), value: its job, rank and the switch
 * port it sits behind; a frame with the right addresses arriving on another
 * port is a forgery. */
struct incxdp_worker_key {
	__u8 mac[6];
	__be16 port;
	__be32 ip;
};

struct incxdp_worker {
	__u32 job;
	__u16 rank;
	/* fanin != 0: low 5 bits = the sender's bit in the slot bitmap (< fanin);
	 * INCXDP_CHILD_SWITCH: the sender is a switch below, whose results go
	 * to its native port */
	__u16 child;
	__u32 ifindex; /* the switch port the worker is reached through */
};

#define INCXDP_CHILD_SWITCH 0x8000
#define INCXDP_CHILD_BIT_MASK 0x1f

/* incxdp_jobs (array indexed by job id): what the controller installed. */
enum incxdp_job_kind {
	INCXDP_JOB_STAR = 0,      /* UDP (native/SwitchML), workers in incxdp_workers */
	INCXDP_JOB_ROCE_TREE = 1, /* RoCEv2 RC connections in incxdp_roce_conns */
};

struct incxdp_job {
	__u32 active;      /* 0 = no such job */
	__u32 nworkers;    /* STAR: workers; ROCE_TREE: children of this switch (fan-in) */
	__u32 pool_base;   /* first entry of the job's range in incxdp_slots */
	__u32 pool_size;   /* slots in the range; window slot must be below */
	__u32 max_elems;   /* per packet, <= INCXDP_MAX_ELEMS */
	__be32 switch_ip;  /* source address of results */
	/* ROCE_TREE: pool_size is a power of two: idx picks slot
	 * idx % pool_size, set (idx / pool_size) & 1. The parent connection
	 * is the job's incxdp_parents entry, as for every tree. */
	__u32 kind;        /* enum incxdp_job_kind */
	__u32 reserved0;   /* 0 */
	/* STAR: contributions this switch waits for (its children: hosts and
	 * switches below it); 0 = a one-switch star, fan-in = nworkers and the
	 * slot bitmap bit = rank. nworkers stays the job's total worker count
	 * (the header's nworkers). */
	__u32 fanin;
	__u32 tree_flags; /* reserved 0 */
};

/* incxdp_parents (array indexed by job id): a job's link to the switch
 * above this one in its tree, for every wire (docs/ENGINE.md, trees).
 * STAR (native UDP) sends its partials with the addresses and ports below;
 * ROCE_TREE sends them on the RC connection `qpn` (incxdp_roce_conns),
 * whose peer the addresses name too (the UDP ports and rank are unused). */
struct incxdp_parent {
	__u32 ifindex;   /* this switch's port towards the parent; 0 = this switch is the job's root */
	__u8 dst_mac[6]; /* the parent's MAC on that link */
	__u8 src_mac[6]; /* ours on that link */
	__be32 dst_ip;   /* the parent's IP on that link (its worker table knows us by src_ip) */
	__be32 src_ip;
	__be16 dst_port; /* the parent's native port */
	/* the UDP source port of our partials: unique per job on this switch
	 * (the control plane uses 0xC000 | job), since the parent's worker
	 * table is keyed by (mac, port, ip) across all jobs */
	__be16 src_port;
	__u16 rank; /* the header rank of our partials (the parent has it in its worker table) */
	__u16 pad;
	/* ROCE_TREE: switch-local QPN of the connection to the parent (the
	 * key of its incxdp_roce_conns entry, role PARENT); STAR: 0 */
	__u32 qpn;
};

/* incxdp_egress: per-copy rewrite of a multicast result. Key: job and the
 * egress interface the devmap broadcast produced the copy for. A copy for
 * a port with no entry is not part of the job's group and is dropped. */
struct incxdp_egress_key {
	__u32 job;
	__u32 ifindex;
};

struct incxdp_egress {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__be32 dst_ip;
	__be32 src_ip;
	__be16 dst_port;
	__u16 pad; /* results leave from the UDP port the workers address */
	/* ROCE_TREE: switch-local QPN of the child connection behind this
	 * port (incxdp_roce_conns); the MAC/IP/port fields above are unused. */
	__u32 roce_qpn;
};

/*
 * incxdp_roce_conns: one RC connection between this switch and a peer (a
 * child: host or switch below; or the parent switch above). Key: the QPN
 * this switch has on it, i.e. the destination QPN of the peer's frames.
 * A frame must also come from the peer's MAC and IP on the connection's
 * port, or it is refused (QPN isolation; docs/ROCE.md).
 * The first block is written by `incxdp rules apply`; the receive state at
 * the end is the engine's (reset to rx_base by rules apply / job reset).
 */
enum incxdp_roce_role {
	INCXDP_ROCE_CHILD = 1,  /* the peer sends contributions up, we send results down */
	INCXDP_ROCE_PARENT = 2, /* the peer is our parent: we send aggregates up, it sends results down */
};

struct incxdp_roce_conn_key {
	__u32 qpn; /* host order, < 2^24 */
};

struct incxdp_roce_conn {
	__u32 job;
	__u8 role;     /* enum incxdp_roce_role */
	/* 1: in-order only, ahead => NAK (a go-back-N peer: hosts);
	 * 0: any PSN within the window is taken, the slot bitmap drops
	 *    duplicates (a switch peer, which cannot go back N from XDP). */
	__u8 strict;
	__u16 child;   /* CHILD: the peer's bit in the slot bitmap, < nworkers */
	__u32 ifindex; /* the switch port the peer is behind */
	__u8 peer_mac[6];
	__u8 own_mac[6];
	__be32 peer_ip;
	__be32 own_ip;    /* source address of our frames to the peer */
	__u32 peer_qpn;   /* destination QPN of our frames to the peer */
	__u32 rx_base;    /* PSN of idx 0 in the peer's stream to us */
	__u32 tx_base;    /* PSN of idx 0 in our stream to the peer */
	__be16 udp_sport; /* source UDP port of our frames to the peer */
	__u16 pad0;
	__u64 subtree_ranks; /* CHILD: bit r = rank r is at or below the peer */
	/* receive state, the engine's */
	__u32 epsn;     /* next PSN expected from the peer */
	__u32 msn;      /* messages accepted (AETH MSN) */
	__u32 imm;      /* last ImmDt from the peer (host order), for frames without one */
	__u32 nak_sent; /* strict: a NAK for epsn is out; no more until it arrives */
	/* CHILD: idx + 1 of the last result of our stream the peer ACKed, mod
	 * 2^24; 0 = none (RC devices ACK results, cumulatively and in order;
	 * hostlib's own frames never do). */
	__u32 peer_acked;
	/* CHILD: the peer NAKed a gap of our stream. An RC device drops what
	 * follows a gap and NAKs once; we can send one frame per frame in, so
	 * each of its ACKs is answered with the next result until none is
	 * held (go-back-N clocked by its ACKs). */
	__u32 peer_resend;
	/* CHILD: idx + 1 of the last of the peer's SENDs we ACKed, mod 2^24;
	 * 0 = none. The SEND that completes a set is answered with the
	 * result, not an ACK; a strict peer's next ACK of our stream then
	 * gets the ACK it is owed (an RC device frees its send queue only on
	 * ACKs, and resends on its ACK timeout). */
	__u32 acked_up;
	/* CHILD: the peer is an RDMA device's RC QP (`incxdp rules set-qpn`
	 * gave us its QPN): it ACKs our results and drops those after a gap,
	 * so its SENDs are ACKed only as far as it has their results. */
	__u32 rc_device;
};

/* One aggregation slot, both shadow sets. The lock guards every field;
 * a packet for set s also clears its sender's bit in set 1-s, so both sets
 * live in one value under one lock. */
struct incxdp_slot_set {
	__u32 bitmap;    /* ranks whose contribution is in */
	__u32 remaining; /* contributions still missing; 0 = complete or idle */
	__u32 round;     /* rid of the round in this set (native); ImmDt (RoCE) */
	__u32 chunk;     /* cid of the chunk in this set (native); idx (RoCE) */
	__u32 rounds;    /* completions of this set, for status/debug */
	__u8 op;
	__u8 dtype;
	__u16 nelems;
	__s8 exp0;       /* signed max of the contributions' exponents */
	__s8 exp1;
	__u16 flags;     /* INCXDP_SET_* */
};

/* A tree's set holds the job's final result, not only this switch's
 * aggregate (at a tree's root once complete; at other switches once the
 * parent's result came down). A one-switch star never sets it. */
#define INCXDP_SET_RESULT 0x1

struct incxdp_slot {
	struct bpf_spin_lock lock;
	__u32 pad;
	struct incxdp_slot_set set[2];
	__s32 vals[2][INCXDP_MAX_ELEMS]; /* host byte order */
};

/*
 * incxdp_stats: per-CPU counters, index = enum incxdp_stat. Every frame the
 * ingress program sees ends in exactly one of the counters before
 * INCXDP_STAT_INGRESS_VERDICTS, so the control plane derives "rx" as their sum
 * instead of paying a second counter update per packet.
 *
 * The one list of the counters: X(NAME, name, what) gives the enumerator
 * INCXDP_STAT_<NAME>, the name `incxdp stats` prints and a line saying what
 * happened to the frame. The enum and every name table are generated from
 * it. New counters go at the end of their list: the programs and the
 * pinned map index counters by position.
 */
#define INCXDP_STATS_INGRESS(X) \
	X(PASS, pass, "not aggregation traffic: to the stack") \
	X(MALFORMED, malformed, "ours by port, but truncated/invalid: dropped") \
	X(UNKNOWN_SENDER, unknown_sender, "not a registered worker: dropped") \
	X(WRONG_PORT, wrong_port, "a worker's addresses on another port: dropped") \
	X(BAD_JOB, bad_job, "job inactive or header disagrees with job: dropped") \
	X(BAD_SLOT, bad_slot, "slot outside the job's pool or too many elems: dropped") \
	X(MISMATCH, mismatch, "chunk/op/size differs from the set in progress: dropped") \
	X(CONSUMED, consumed, "new contribution absorbed, slot not complete") \
	X(COMPLETED, completed, "completing contribution, result multicast") \
	X(RETX_UNICAST, retx_unicast, "retransmission to a complete set: result unicast") \
	X(RETX_DROP, retx_drop, "retransmission to an incomplete set: dropped") \
	X(STALE, stale, "retransmission naming an older chunk: dropped") \
	/* RoCEv2 (UDP 4791), docs/ROCE.md §3 */ \
	X(ROCE_MALFORMED, roce_malformed, "bad BTH/ImmDt/lengths, unsupported opcode: dropped") \
	X(ROCE_BAD_ICRC, roce_bad_icrc, "ICRC mismatch: dropped") \
	X(ROCE_UNKNOWN_QP, roce_unknown_qp, "no such QPN, or not from its peer's MAC/IP/port: dropped") \
	X(ROCE_ABSORBED, roce_absorbed, "in order, aggregated, no ACK asked for: dropped") \
	X(ROCE_ACK, roce_ack, "in order, aggregated, ACK sent (XDP_TX)") \
	X(ROCE_NAK, roce_nak, "ahead of the expected PSN: NAK sent (XDP_TX)") \
	X(ROCE_AHEAD_DROP, roce_ahead_drop, "ahead, a NAK is already out: dropped") \
	X(ROCE_UP, roce_up, "completed below the root: aggregate sent to the parent") \
	X(ROCE_DOWN, roce_down, "completed at the root / result from the parent: multicast") \
	X(ROCE_DUP_ACK, roce_dup_ack, "duplicate, slot still incomplete: ACK re-sent") \
	X(ROCE_DUP_RESULT, roce_dup_result, "duplicate, result held: result unicast (XDP_TX)") \
	X(ROCE_DUP_UP, roce_dup_up, "duplicate, waiting for the parent: aggregate re-sent up") \
	X(ROCE_STALE, roce_stale, "PSN of a slot use already past or not begun: dropped") \
	X(ROCE_MISMATCH, roce_mismatch, "ImmDt/size disagrees with the slot's: dropped") \
	X(ROCE_PEER_ACK, roce_peer_ack, "ACK from a peer: consumed") \
	X(ROCE_PEER_NAK, roce_peer_nak, "NAK from a peer: the result re-sent if held, else dropped") \
	X(ROCE_PEER_RESEND, roce_peer_resend, "ACK from a peer after its NAK: its next result re-sent") \
	X(ROCE_LATE_ACK, roce_late_ack, "ACK from a peer owed an ACK of its SENDs: the ACK sent") \
	X(CHAOS, chaos, "taken by `incxdp chaos --xdp`: lost, detoured or reflected (docs/CHAOS.md)") \
	X(TOO_LONG, too_long, "ours by port, but larger than one XDP buffer: dropped") \
	X(ROCE_BAD_CSUM, roce_bad_csum, "nonzero UDP checksum that does not add up: dropped") \
	/* native UDP trees (docs/ENGINE.md, trees) */ \
	X(UP, up, "completed below the root: aggregate sent to the parent") \
	X(DOWN, down, "result from the parent: stored and multicast to the children") \
	X(DUP_UP, dup_up, "retransmission, waiting for the parent: aggregate re-sent up") \
	X(RESULT_STALE, result_stale, "result from the parent for another chunk/round: dropped") \
	X(NOT_PARENT, not_parent, "result frame not from this job's parent: dropped") \
	/* RoCE start handshake, docs/ROCE.md "Consecutive runs" */ \
	X(ROCE_SYNC, roce_sync, "a host's start handshake: where its connection stands sent (XDP_TX)")

/* Counted besides a verdict, or by the egress program. */
#define INCXDP_STATS_OTHER(X) \
	X(REDIRECT_FAIL, redirect_fail, "completed, but the multicast redirect was refused") \
	X(EGRESS_TX, egress_tx, "multicast copy rewritten and sent") \
	X(EGRESS_DROP, egress_drop, "multicast copy for a port outside the group") \
	X(PULLED, pulled, "arrived in fragments within one buffer's room: made linear")

#define INCXDP_STATS(X) INCXDP_STATS_INGRESS(X) INCXDP_STATS_OTHER(X)

#define INCXDP_STAT_ENUMERATOR_(NAME, name, what) INCXDP_STAT_##NAME,
enum incxdp_stat {
	INCXDP_STATS_INGRESS(INCXDP_STAT_ENUMERATOR_)
	INCXDP_STAT_INGRESS_VERDICTS,  /* (how many ingress verdicts there are) */
	/* The other counters start at INCXDP_STAT_INGRESS_VERDICTS: the first,
	 * INCXDP_STAT_REDIRECT_FAIL, takes its index. */
	INCXDP_STAT_OTHER_BEFORE_ = INCXDP_STAT_INGRESS_VERDICTS - 1,
	INCXDP_STATS_OTHER(INCXDP_STAT_ENUMERATOR_)
	INCXDP_STAT_MAX,
};
#undef INCXDP_STAT_ENUMERATOR_

INCXDP_STATIC_ASSERT(INCXDP_STAT_REDIRECT_FAIL == INCXDP_STAT_INGRESS_VERDICTS,
		     "the first counter after the verdicts aliases INCXDP_STAT_INGRESS_VERDICTS");

#endif
