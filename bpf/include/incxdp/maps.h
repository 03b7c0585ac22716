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
	__u16 pad;
	__u32 ifindex; /* the switch port the worker is reached through */
};

/* incxdp_jobs (array indexed by job id): what the controller installed. */
struct incxdp_job {
	__u32 active;      /* 0 = no such job */
	__u32 nworkers;
	__u32 pool_base;   /* first entry of the job's range in incxdp_slots */
	__u32 pool_size;   /* slots in the range; window slot must be below */
	__u32 max_elems;   /* per packet, <= INCXDP_MAX_ELEMS */
	__be32 switch_ip;  /* source address of results */
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
};

/* One aggregation slot, both shadow sets. The lock guards every field;
 * a packet for set s also clears its sender's bit in set 1-s, so both sets
 * live in one value under one lock. */
struct incxdp_slot_set {
	__u32 bitmap;    /* ranks whose contribution is in */
	__u32 remaining; /* contributions still missing; 0 = complete or idle */
	__u32 round;     /* rid of the round in this set (native) */
	__u32 chunk;     /* cid of the chunk in this set (native) */
	__u32 rounds;    /* completions of this set, for status/debug */
	__u8 op;
	__u8 dtype;
	__u16 nelems;
	__s8 exp0;       /* signed max of the contributions' exponents */
	__s8 exp1;
	__u16 pad;
};

struct incxdp_slot {
	struct bpf_spin_lock lock;
	__u32 pad;
	struct incxdp_slot_set set[2];
	__s32 vals[2][INCXDP_MAX_ELEMS]; /* host byte order */
};

/* incxdp_stats: per-CPU counters, index = enum incxdp_stat. Every frame the
 * ingress program sees ends in exactly one of the counters before
 * INCXDP_STAT_INGRESS_VERDICTS, so the control plane derives "rx" as their sum
 * instead of paying a second counter update per packet. */
enum incxdp_stat {
	INCXDP_STAT_PASS = 0,          /* not aggregation traffic: to the stack */
	INCXDP_STAT_MALFORMED,         /* ours by port, but truncated/invalid: dropped */
	INCXDP_STAT_UNKNOWN_SENDER,    /* not a registered worker: dropped */
	INCXDP_STAT_WRONG_PORT,        /* a worker's addresses on another port: dropped */
	INCXDP_STAT_BAD_JOB,           /* job inactive or header disagrees with job: dropped */
	INCXDP_STAT_BAD_SLOT,          /* slot outside the job's pool or too many elems: dropped */
	INCXDP_STAT_MISMATCH,          /* chunk/op/size differs from the set in progress: dropped */
	INCXDP_STAT_CONSUMED,          /* new contribution absorbed, slot not complete */
	INCXDP_STAT_COMPLETED,         /* completing contribution, result multicast */
	INCXDP_STAT_RETX_UNICAST,      /* retransmission to a complete set: result unicast */
	INCXDP_STAT_RETX_DROP,         /* retransmission to an incomplete set: dropped */
	INCXDP_STAT_STALE,             /* retransmission naming an older chunk: dropped */
	INCXDP_STAT_INGRESS_VERDICTS,  /* (how many ingress verdicts there are) */
	INCXDP_STAT_REDIRECT_FAIL = INCXDP_STAT_INGRESS_VERDICTS, /* completed, but the multicast redirect was refused */
	INCXDP_STAT_EGRESS_TX,         /* multicast copy rewritten and sent */
	INCXDP_STAT_EGRESS_DROP,       /* multicast copy for a port outside the group */
	INCXDP_STAT_MAX,
};

#endif
