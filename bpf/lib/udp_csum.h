/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The UDP checksum (RFC 768) of a RoCEv2 frame in an XDP buffer, as the
 * switch's cheap integrity check (docs/ROCE.md §3, docs/PROTOCOLS.md §3).
 *
 * RoCEv2 senders may leave the UDP checksum 0 and receivers ignore it; the
 * ICRC masks it. incxdp's hosts and switches fill it in, and a switch that
 * finds it nonzero checks it instead of the ICRC: the kernel's csum_partial
 * behind bpf_csum_diff is far cheaper than the BPF table CRC (docs/ROCE.md
 * §5 has the costs). The sum covers the ICRC
 * bytes too, so a frame that passes carries the ICRC its sender wrote, which
 * the engine reuses (a leaf's multicast tail). A frame with a 0 checksum (INC_Emulation's hosts, an RDMA NIC)
 * gets the ICRC check.
 *
 * Only the ingress check passes over a whole datagram. A frame the switch
 * sends gets its checksum from the sum of its tail (the AETH/ImmDt word and
 * the payload, everything between the BTH and the ICRC) plus a few header
 * words: the tail's sum comes for free from the loop that writes the payload
 * (agg_store_result), from the checked sum of the frame it is rebuilt from
 * (a parent's result), or from the multicast template, which carries it in
 * its checksum field to every copy. The copies differ from each other only
 * in headers and ICRC, so each costs a dozen additions instead of a pass.
 *
 * bpf_csum_diff takes at most 512 B per call (the per-CPU scratch buffer of
 * kernels before 6.13) and needs a size the verifier can bound against the
 * packet, so a pass goes in 512 B pieces, then in constant pieces of
 * 256 ... 4 B by the bits of what is left. Callers must not hold a spin lock.
 */
#ifndef INCXDP_UDP_CSUM_H
#define INCXDP_UDP_CSUM_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "parse.h"
#include "icrc.h"

#define UDP_CSUM_CHUNK 512
/* Where the UDP header starts: Ethernet, IPv4 without options. */
#define UDP_CSUM_UDP_OFF (14 + 20)
/* As many chunks as the longest datagram holds: what is left is < 512 B. */
#define UDP_CSUM_MAX_CHUNKS (ROCE_ICRC_MAX_FRAME / UDP_CSUM_CHUNK)

enum udp_csum_mode {
	UDP_CSUM_CHECK = 0, /* the datagram: returns 0 if it adds up, 1 if not */
	UDP_CSUM_TAIL = 1,  /* the tail alone: returns its folded sum */
};

/*
 * The datagram's length, if the frame is exactly Ethernet | IPv4 (no
 * options) | UDP, the UDP length reaching the buffer's end, a multiple of 4
 * bytes and no longer than ROCE_ICRC_MAX_FRAME allows (every RoCE frame the
 * engine parses or builds); else 0. The caller has checked the UDP header.
 */
static __always_inline __u32 udp_csum_len(const struct udphdr *udp, const void *end)
{
	__u32 len = (__u32)(end - (const void *)udp);

	if (len != bpf_ntohs(udp->len) || len % 4 || len > ROCE_ICRC_MAX_FRAME)
		return 0;
	return len;
}

/* The pseudo header, summed in memory order like the data. */
static __always_inline __u64 udp_pseudo_sum(const struct iphdr *ip, const struct udphdr *udp)
{
	return (__u64)ip->saddr + ip->daddr + bpf_htons(IPPROTO_UDP) + udp->len;
}

/* One constant piece of `n` bytes at *p, if the length has that bit. */
#define UDP_CSUM_PIECE(n)                                                     \
	do {                                                                  \
		if (len & (n)) {                                              \
			if ((void *)(p + (n)) > end)                          \
				return -1;                                    \
			sum = bpf_csum_diff(NULL, 0, (void *)p, (n), csum_fold32(sum)); \
			if (sum < 0)                                          \
				return -1;                                    \
			p += (n);                                             \
		}                                                             \
	} while (0)

/*
 * A pass over the frame in ctx, shaped as udp_csum_len wants it, for
 * UDP_CSUM_TAIL at least a RoCE frame's headers and ICRC. Returns -1 if it
 * is not; else UDP_CSUM_CHECK's 0 or 1, UDP_CSUM_TAIL's sum. Global:
 * verified once.
 */
__attribute__((noinline)) int incxdp_udp_csum(struct xdp_md *ctx, int mode)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct udphdr *udp = (void *)(ip + 1);
	__u8 *p = (void *)udp;
	__u32 len;
	__s64 sum;

	if ((void *)(udp + 1) > end)
		return -1;
	len = udp_csum_len(udp, end);
	if (!len)
		return -1;
	if (mode == UDP_CSUM_TAIL) {
		if (len < ROCE_HDRS_LEN - UDP_CSUM_UDP_OFF + ROCE_ICRC_LEN)
			return -1;
		p = data + ROCE_HDRS_LEN;
		len -= ROCE_HDRS_LEN - UDP_CSUM_UDP_OFF + ROCE_ICRC_LEN;
		sum = 0;
	} else {
		sum = udp_pseudo_sum(ip, udp);
	}
	for (int i = 0; i < UDP_CSUM_MAX_CHUNKS; i++) {
		if (len < UDP_CSUM_CHUNK)
			break;
		if ((void *)(p + UDP_CSUM_CHUNK) > end)
			return -1;
		sum = bpf_csum_diff(NULL, 0, (void *)p, UDP_CSUM_CHUNK, csum_fold32(sum));
		if (sum < 0)
			return -1;
		p += UDP_CSUM_CHUNK;
		len -= UDP_CSUM_CHUNK;
	}
	UDP_CSUM_PIECE(256);
	UDP_CSUM_PIECE(128);
	UDP_CSUM_PIECE(64);
	UDP_CSUM_PIECE(32);
	UDP_CSUM_PIECE(16);
	UDP_CSUM_PIECE(8);
	UDP_CSUM_PIECE(4);
	if (mode == UDP_CSUM_TAIL)
		return csum_fold16((__u64)sum);
	return csum_fold16((__u64)sum) != 0xffff;
}

#undef UDP_CSUM_PIECE

enum udp_csum_hdrs_mode {
	UDP_CSUM_FINISH = 0,  /* writes the checksum of hdrs + `tail`; returns 0 */
	UDP_CSUM_TAIL_OF = 1, /* returns the tail's sum, from a checked checksum */
};

/*
 * The O(1) part: the pseudo header, the UDP header, the BTH and the ICRC
 * (the last 4 bytes) of the RoCE frame in ctx, shaped as udp_csum_len wants
 * it and at least a RoCE frame's headers and ICRC long. UDP_CSUM_FINISH writes the checksum of the frame whose tail sums
 * to `tail`; UDP_CSUM_TAIL_OF returns what the tail of a frame whose nonzero
 * checksum adds up sums to (the whole sums to zero, so the tail is minus the
 * rest). Returns -1 if the frame has not that shape. Global: verified once.
 */
__attribute__((noinline)) int incxdp_udp_csum_hdrs(struct xdp_md *ctx, int mode, __u32 tail)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 *w = (void *)udp, len, *icrc;
	__u64 sum;
	__u16 folded;

	if ((void *)(w + (ROCE_HDRS_LEN - UDP_CSUM_UDP_OFF) / 4) > end)
		return -1;
	len = udp_csum_len(udp, end);
	if (len < ROCE_HDRS_LEN - UDP_CSUM_UDP_OFF + ROCE_ICRC_LEN)
		return -1;
	/* As in incxdp_roce_icrc: the bound again behind a barrier, on the
	 * register the ICRC's address is made of. */
	len -= ROCE_ICRC_LEN;
	barrier_var(len);
	if (len > ROCE_ICRC_MAX_FRAME)
		return -1;
	icrc = (void *)udp + len;
	if ((void *)(icrc + 1) > end)
		return -1;
	if (mode == UDP_CSUM_FINISH)
		udp->check = 0;
	sum = udp_pseudo_sum(ip, udp);
	/* The UDP header (2 words) and the BTH (3 words). */
	sum += (__u64)w[0] + w[1] + w[2] + w[3] + w[4];
	sum += *icrc;
	if (mode == UDP_CSUM_TAIL_OF)
		return (__u16)~csum_fold16(sum);
	folded = csum_fold16(sum + tail);
	/* An all-zero sum goes as 0xffff: 0 means "no checksum" (RFC 768). */
	udp->check = (__u16)~folded ? (__u16)~folded : 0xffff;
	return 0;
}

static __always_inline int udp_csum_ok(struct xdp_md *ctx)
{
	return incxdp_udp_csum(ctx, UDP_CSUM_CHECK) == 0;
}

/* The folded sum of the tail: the word after the BTH and the payload. */
static __always_inline int udp_csum_tail(struct xdp_md *ctx)
{
	return incxdp_udp_csum(ctx, UDP_CSUM_TAIL);
}

/* The same, from the frame's own checksum, which must be nonzero and checked. */
static __always_inline int udp_csum_tail_of_checked(struct xdp_md *ctx)
{
	return incxdp_udp_csum_hdrs(ctx, UDP_CSUM_TAIL_OF, 0);
}

static __always_inline int udp_csum_finish(struct xdp_md *ctx, __u32 tail)
{
	return incxdp_udp_csum_hdrs(ctx, UDP_CSUM_FINISH, tail);
}

#endif
