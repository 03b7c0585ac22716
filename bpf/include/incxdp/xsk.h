/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Counters of the hosts' incxdp_xsk program (bpf/incxdp_xsk.bpf.c): a
 * per-CPU array indexed by enum incxdp_xsk_stat, read with
 *   bpftool map dump name incxdp_xsk_stats
 * while a worker runs, and by the tests.
 */
#ifndef INCXDP_XSK_H
#define INCXDP_XSK_H

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

#endif
