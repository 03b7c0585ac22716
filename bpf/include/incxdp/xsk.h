/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Counters of the hosts' incxdp_xsk program (bpf/incxdp_xsk.bpf.c): a
 * per-CPU array indexed by enum incxdp_xsk_stat, read with
 *   bpftool map dump name incxdp_xsk_stats
 * while a worker runs, and by the tests.
 */
#ifndef INCXDP_XSK_H
#define INCXDP_XSK_H

#include <linux/types.h>

#define INCXDP_XSK_STATS_MAP "incxdp_xsk_stats"

/*
 * The rx queues a worker can take frames on: the size of the program's
 * XSKMAP and of xsk_missed[], the frames for the worker that arrived on a
 * queue without a socket, by queue (its .bss, mmapped by the transport,
 * which binds a socket to a queue once frames show up there: a NIC's RSS
 * or, on veth, the sending CPU picks the queue, not the worker).
 */
#define INCXDP_XSK_MAX_QUEUES 256

enum incxdp_xsk_stat {
	INCXDP_XSK_REDIRECTED, /* handed to the socket */
	INCXDP_XSK_NO_SOCKET,  /* ours, but no socket on this queue: passed */
	INCXDP_XSK_PASSED,     /* not ours: passed */
	INCXDP_XSK_SENT,       /* live frame redirected out of the interface */
	INCXDP_XSK_TX_BAD,     /* live frame with a bad slot or length: dropped */
	INCXDP_XSK_PULLED,     /* arrived in fragments, made linear (also counted as one of the above) */
	INCXDP_XSK_STAT_COUNT,
};

/*
 * Live-frame sending (bpf/lib/xsk_tx.h), by incxdp_xsk and the mesh relay:
 * the array map INCXDP_XSK_TX_MAP (BPF_F_MMAPABLE), INCXDP_XSK_TX_SLOTS
 * entries of struct incxdp_xsk_tx_frame. Entry 0 is the control slot: its
 * `len` is the frame slot the next run takes (the host sets it before a
 * batch of runs, each run advances it) and its `ifindex` is
 * INCXDP_XSK_TX_ARMED while a host sends through the map: a run from
 * loopback is a live-frame run only then (a plain BPF_PROG_RUN also comes
 * "from" loopback, and a live run's frame holds whatever its page held
 * last, so the frame cannot carry a marker). Entry 1 + k holds frame slot
 * k; its `ifindex` 0 means the program's own interface (incxdp_xsk), else
 * the frame is dropped. 3520 B bounds a frame (4096 - XDP_PACKET_HEADROOM -
 * skb_shared_info); a live frame also holds the kernel's xdp_page_head,
 * which leaves ~3408 B: the host probes its largest frame when it starts.
 */
#define INCXDP_XSK_TX_MAP "incxdp_tx_frames"
#define INCXDP_XSK_TX_SLOTS 513
#define INCXDP_XSK_TX_FRAME_MAX 3520
#define INCXDP_XSK_TX_ARMED 0x4c495645 /* "LIVE" */

struct incxdp_xsk_tx_frame {
	__u32 len;     /* host order */
	__u32 ifindex; /* host order */
	__u8 data[INCXDP_XSK_TX_FRAME_MAX];
};

#endif
