/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The loss injector's contract: the layouts of the maps incxdp_chaos.bpf.c
 * shares with `incxdp chaos` (loader/chaos_ctl.cpp) and the tests. The only
 * copy.
 *
 * Every attachment (interface x hook) is its own program instance with its
 * own two maps, pinned by name under
 *   INCXDP_CHAOS_PIN_DIR/<netns inode>-<ifname>/<egress|ingress>/
 * because interfaces in different namespaces share names and ifindexes.
 */
#ifndef INCXDP_CHAOS_H
#define INCXDP_CHAOS_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_CHAOS_PIN_DIR "/sys/fs/bpf/incxdp-chaos"

/* Map names; also the pinned file names. */
#define INCXDP_CHAOS_MAP_CONFIG "chaos_config"
#define INCXDP_CHAOS_MAP_STATS "chaos_stats"

/* Probabilities are parts per million: 5% = 50000. */
#define INCXDP_CHAOS_PPM 1000000u

/*
 * A duplicate is a clone re-sent through the same hook, so the program sees
 * it a second time. The clone carries this skb->mark; the program clears it
 * and lets the clone through untouched and uncounted (it was counted as
 * `duplicated` on the original), so a duplicate is never duplicated again.
 */
#define INCXDP_CHAOS_CLONE_MARK 0x1c4a0d0bu

/* tc filter identity of our attachments (clsact, direct action). Fixed, so
 * a later process finds and detaches exactly our filter and no other. */
#define INCXDP_CHAOS_TC_HANDLE 0x1c4a
#define INCXDP_CHAOS_TC_PRIORITY 0xc4a0

/* chaos_config (array, one entry): what the control plane changes at run
 * time, one map update, no reload. */
struct incxdp_chaos_config {
	__u32 enabled;     /* 0: every frame passes untouched (still counted) */
	__u32 loss_ppm;    /* frame dropped (egress: TC_ACT_STOLEN, ingress: TC_ACT_SHOT) */
	__u32 dup_ppm;     /* tc: a clone sent right after; xdp: delivered twice */
	__u32 corrupt_ppm; /* one random bit of the UDP payload flipped */
	__u32 reorder_ppm; /* xdp only: delivered once, late (sent around the peer) */
	__u32 detour;      /* xdp only: enum incxdp_chaos_detour, set by the control plane */
};

/*
 * chaos_stats (per-CPU array): index = enum incxdp_chaos_stat.
 * seen = dropped + passed; duplicated and corrupted count among passed.
 * The one list of the counters: X(NAME, name, what) gives the enumerator
 * INCXDP_CHAOS_<NAME> and the name `incxdp chaos -j` prints. Append only:
 * the programs index counters by position.
 */
#define INCXDP_CHAOS_STATS(X) \
	X(SEEN, seen, "frames through the hook (our clones excluded)") \
	X(DROPPED, dropped, "lost on purpose") \
	X(PASSED, passed, "let through (possibly corrupted/duplicated)") \
	X(DUPLICATED, duplicated, "passed, plus one clone sent") \
	X(CORRUPTED, corrupted, "passed with one payload bit flipped") \
	X(DUP_FAILED, dup_failed, "chosen for duplication, clone refused by the kernel") \
	X(REORDERED, reordered, "xdp: passed late, after a trip around the peer") \
	X(REFLECTED, reflected, "xdp: a peer's detour frame sent back to it")

#define INCXDP_CHAOS_ENUMERATOR_(NAME, name, what) INCXDP_CHAOS_##NAME,
enum incxdp_chaos_stat {
	INCXDP_CHAOS_STATS(INCXDP_CHAOS_ENUMERATOR_)
	INCXDP_CHAOS_STAT_MAX,
};
#undef INCXDP_CHAOS_ENUMERATOR_

INCXDP_STATIC_ASSERT(sizeof(struct incxdp_chaos_config) == 24, "chaos config layout");

/*
 * ---- The XDP hook (bpf/lib/chaos_xdp.h, docs/CHAOS.md "XDP hook") ----
 *
 * Frames forwarded by XDP (the engine's results, AF_XDP sends) pass no tc
 * hook, so every incxdp XDP program (the engine, incxdp_xsk, incxdp_pass)
 * faults what it receives, before anything else: a direction of a link is
 * faulted at its receiving end. Per program instance, keyed by the
 * receiving interface's ifindex (unique within the program's namespace).
 * Not pinned: `incxdp chaos --xdp` finds the maps through the program
 * attached to the interface, and a program that replaces another on an
 * interface (hostlib's incxdp_xsk over incxdp_pass) adopts its maps.
 */
#define INCXDP_CHAOS_XDP_CONFIG "chaos_xdp_cfg"   /* hash: ifindex -> incxdp_chaos_config */
#define INCXDP_CHAOS_XDP_STATS "chaos_xdp_stats"  /* per-CPU hash: ifindex -> incxdp_chaos_xdp_stats */
#define INCXDP_CHAOS_XDP_DUP "chaos_xdp_dup"      /* hash of devmaps: ifindex -> its own interface, twice */
#define INCXDP_CHAOS_XDP_MAX_IFACES 256
#define INCXDP_CHAOS_XDP_DUP_COPIES 2

/*
 * XDP cannot hold or clone a frame for later, but it can send it back out
 * of the interface it came in on. A duplicated (or reordered) frame leaves
 * with EtherType REFLECT as two (one) broadcast copies; the peer's incxdp
 * program turns REFLECT into RETURN and sends it straight back (XDP_TX);
 * this end restores IPv4 on RETURN and processes the frame without faulting
 * it again. Both are IEEE 802 "local experimental" EtherTypes: nothing else
 * on a topology's links uses them, and the Ethernet header is covered by
 * no checksum (RoCEv2's ICRC starts at the IP header).
 */
#define INCXDP_CHAOS_ETH_REFLECT 0x88B5
#define INCXDP_CHAOS_ETH_RETURN 0x88B6

/*
 * The way round a duplicated or delayed frame takes depends on where XDP
 * frames can go on the link. veth transmits a native program's XDP_TX and
 * redirects only while the peer runs a native program too; a generic
 * program's leave as skbs and always arrive, but the kernel skips generic
 * XDP for an skb a BPF program redirected (skb_is_redirected).
 *  PEER       the two ends in the same mode: out of the interface as
 *             REFLECT, back by the peer's XDP_TX (above).
 *  STACK_OUT  this end native, the peer generic: XDP_PASS with the REFLECT
 *             frame and an incxdp_chaos_bounce_meta in its metadata; the tc
 *             program ixchaos_bounce (bpf/incxdp_chaos_bounce.bpf.c) on
 *             this interface's ingress sends `copies` clones out as skbs.
 *             They reach the generic peer redirected, so past its XDP
 *             program: its own ixchaos_bounce sends each back as RETURN,
 *             which this native end's program takes.
 *  NONE       this end generic, the peer native: nothing sent round would
 *             come back into a generic program (the native peer's XDP_TX
 *             is refused, a redirected skb skips generic XDP), so frames
 *             are neither duplicated nor delayed here (`incxdp chaos`
 *             warns); loss and corruption work as everywhere.
 * `incxdp chaos --xdp` picks one per interface when it sets the rates
 * (loader/chaos_xdp.cpp), from the attach mode of the program on it and
 * whether the kernel says the interface transmits XDP frames (netdev
 * NDO_XMIT: on veth, whether the peer's program is native). A generic end
 * also gets ixchaos_bounce, for a native peer's STACK_OUT copies.
 */
enum incxdp_chaos_detour {
	INCXDP_CHAOS_DETOUR_PEER = 0,
	INCXDP_CHAOS_DETOUR_STACK_OUT = 1,
	INCXDP_CHAOS_DETOUR_NONE = 2,
};

/* XDP metadata of a frame handed to ixchaos_bounce. */
#define INCXDP_CHAOS_BOUNCE_MAGIC 0xc4a0b0ceu
struct incxdp_chaos_bounce_meta {
	__u32 magic;  /* INCXDP_CHAOS_BOUNCE_MAGIC */
	__u32 copies; /* 1 (delayed) or 2 (duplicated) */
};

/* tc filter identity of ixchaos_bounce on an interface's ingress: before
 * the injector's (a lower priority number runs first), so a bounced frame
 * is not faulted twice. */
#define INCXDP_CHAOS_BOUNCE_TC_HANDLE 0x1c4b
#define INCXDP_CHAOS_BOUNCE_TC_PRIORITY 0xc49f

struct incxdp_chaos_xdp_stats {
	__u64 n[INCXDP_CHAOS_STAT_MAX]; /* enum incxdp_chaos_stat */
};

#endif
