/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The RoCEv2 ICRC (incxdp/roce.h, docs/WIRE.md §2) of the frame in an XDP
 * buffer: CRC-32 over 8 x 0xFF, the IPv4/UDP/BTH headers with their variant
 * fields masked to ones, and everything after the BTH up to the last 4 bytes,
 * which hold the ICRC little-endian.
 *
 * Verifier cost is the design constraint here, not instructions:
 * - incxdp_roce_icrc is a global (non-static, noinline) function, which the
 *   verifier checks once on its own instead of once per call site and state.
 * - A plain bounded loop over up to 3500 B would be walked iteration by
 *   iteration, and every iteration's exit (a different packet offset each)
 *   would walk the rest again: ~100k instructions. The walk therefore runs
 *   as bpf_loop() callbacks at a variable offset, which the verifier checks
 *   as one body each (and the kernel inlines into a plain loop): the < 64 B
 *   head byte by byte, then 64 B blocks.
 * Slice-by-8 within a block: two 32-bit loads and eight table lookups per
 * 8 bytes. The loads read packet memory in the CPU's byte order, which the
 * tables assume is little-endian (the reflected CRC takes the lowest-addressed
 * byte first). Callers must not hold a spin lock.
 */
#ifndef INCXDP_ICRC_H
#define INCXDP_ICRC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "incxdp/roce.h"
#include "crc32_table.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "icrc.h: the slice-by-8 loads assume a little-endian BPF target"
#endif

/*
 * The largest frame covered: the linear part of an XDP buffer (a 4 KiB page
 * less 256 B headroom and 320 B skb_shared_info), above the 3500 B link MTU.
 * A longer frame fails the check and is not stored.
 */
#define ROCE_ICRC_MAX_FRAME 3520
#define ICRC_BLOCK 64
#define ICRC_MAX_BLOCKS ((ROCE_ICRC_MAX_FRAME - ROCE_HDRS_LEN - ROCE_ICRC_LEN) / ICRC_BLOCK)

enum icrc_mode {
	ICRC_CHECK = 0, /* returns 0 if the frame's ICRC is right, 1 if not */
	ICRC_STORE = 1, /* writes it; returns 0 */
};

/* Table k, entry i; one base register for all eight tables, the table's
 * offset folded into the load (see crc32_slice8). */
#define CRC_T(t, k, i) (*(const __u32 *)((t) + (k) * 1024 + ((i) & 0xff) * 4))

static __always_inline __u64 crc32_slice8(__u64 crc, __u64 lo, __u64 hi)
{
	const __u8 *t = (const __u8 *)incxdp_crc32_table;

	/* Stack is what the barriers save: without them clang keeps eight
	 * table addresses and precomputes every lookup that does not depend
	 * on crc, and spills it all (250 B of a call chain limited to 512).
	 * 64-bit values: 32-bit loads zero-extend, and without a 32-bit ALU
	 * (the default BPF target) u32 temporaries cost shifts to clear the
	 * upper halves. */
	barrier_var(t);
	lo ^= crc;
	barrier_var(lo);
	barrier_var(hi);
	return CRC_T(t, 7, lo) ^ CRC_T(t, 6, lo >> 8) ^ CRC_T(t, 5, lo >> 16) ^
	       CRC_T(t, 4, lo >> 24) ^ CRC_T(t, 3, hi) ^ CRC_T(t, 2, hi >> 8) ^
	       CRC_T(t, 1, hi >> 16) ^ CRC_T(t, 0, hi >> 24);
}

static __always_inline __u32 crc32_byte(__u32 crc, __u8 b)
{
	return (crc >> 8) ^ incxdp_crc32_table[0][(crc ^ b) & 0xff];
}

/* The bpf_loop state: where the walk starts, and the running CRC. */
struct icrc_walk {
	void *start;
	void *end;
	__u32 crc;
	__u32 short_frame; /* a read would have run past the end */
};

static long icrc_byte(__u64 i, void *arg)
{
	struct icrc_walk *w = arg;
	__u8 *p;

	if (i >= ICRC_BLOCK)
		goto out;
	p = w->start + i;
	if ((void *)(p + 1) > w->end)
		goto out;
	w->crc = crc32_byte(w->crc, *p);
	return 0;
out:
	w->short_frame = 1;
	return 1;
}

static long icrc_block(__u64 i, void *arg)
{
	struct icrc_walk *w = arg;
	__u64 crc;
	__u8 *p;

	if (i >= ICRC_MAX_BLOCKS)
		goto out;
	p = w->start + i * ICRC_BLOCK;
	if ((void *)(p + ICRC_BLOCK) > w->end)
		goto out;
	crc = w->crc;
#pragma unroll
	for (int j = 0; j < ICRC_BLOCK; j += 8)
		crc = crc32_slice8(crc, *(__u32 *)(p + j), *(__u32 *)(p + j + 4));
	w->crc = crc;
	return 0;
out:
	w->short_frame = 1;
	return 1;
}

/*
 * The masked bytes of the pseudo header (roce.h's ROCE_ICRC_MASK_*, offsets
 * counted from the 8 x 0xFF) as OR masks of the little-endian 32-bit words
 * of IPv4 | UDP | BTH, word w = header bytes 4w..4w+3.
 */
#define ICRC_BYTE_MASK(off, w)                                                \
	((((off) - 8) / 4 == (w)) ? 0xffu << ((((off) - 8) % 4) * 8) : 0u)
#define ICRC_WORD_MASK(w)                                                     \
	(ICRC_BYTE_MASK(ROCE_ICRC_MASK_TOS, w) | ICRC_BYTE_MASK(ROCE_ICRC_MASK_TTL, w) | \
	 ICRC_BYTE_MASK(ROCE_ICRC_MASK_IPCSUM, w) |                           \
	 ICRC_BYTE_MASK(ROCE_ICRC_MASK_IPCSUM + 1, w) |                       \
	 ICRC_BYTE_MASK(ROCE_ICRC_MASK_UDPCSUM, w) |                          \
	 ICRC_BYTE_MASK(ROCE_ICRC_MASK_UDPCSUM + 1, w) |                      \
	 ICRC_BYTE_MASK(ROCE_ICRC_MASK_RESV8, w))

/*
 * Checks or stores the ICRC of the frame in ctx, which must be exactly
 * Ethernet | IPv4 (no options) | UDP | BTH | rest | ICRC: the last 4 bytes of
 * the buffer are the ICRC. Returns -1 if the frame is too short or too long
 * for that, 1 on a mismatch (ICRC_CHECK), else 0.
 */
__attribute__((noinline)) int incxdp_roce_icrc(struct xdp_md *ctx, int mode)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 *hdr = data + 14;
	struct icrc_walk w = {};
	__u32 len = (__u32)(end - data), rest, head;
	__u8 *p;

	if (len < ROCE_HDRS_LEN + ROCE_ICRC_LEN || len > ROCE_ICRC_MAX_FRAME)
		return -1;
	if ((void *)(hdr + (ROCE_HDRS_LEN - 14) / 4) > end)
		return -1;
	/* The pseudo header: 8 x 0xFF (a constant CRC state), then IPv4 | UDP |
	 * BTH with TOS, TTL, IP checksum, UDP checksum and BTH resv8 set to
	 * ones, masked in registers. */
	w.crc = INCXDP_CRC32_AFTER_FF8;
#pragma unroll
	for (int i = 0; i < (ROCE_HDRS_LEN - 14) / 4; i += 2)
		w.crc = crc32_slice8(w.crc, hdr[i] | ICRC_WORD_MASK(i),
				     hdr[i + 1] | ICRC_WORD_MASK(i + 1));

	/* The head (rest mod 64: the AETH or ImmDt word of our frames) byte by
	 * byte, then whole 64 B blocks, which is where a payload's blocks fall. */
	rest = len - ROCE_HDRS_LEN - ROCE_ICRC_LEN;
	head = rest % ICRC_BLOCK;
	w.start = data + ROCE_HDRS_LEN;
	w.end = end;
	if (head)
		bpf_loop(head, icrc_byte, &w, 0);
	w.start = data + ROCE_HDRS_LEN + head;
	if (rest / ICRC_BLOCK)
		bpf_loop(rest / ICRC_BLOCK, icrc_block, &w, 0);
	if (w.short_frame)
		return -1;

	/* The ICRC: the last 4 bytes. The bound is checked again behind a
	 * barrier: clang would drop it as implied by the one above, but the
	 * verifier has lost it through the spills, and a packet pointer with an
	 * unbounded offset never gets a range from the comparison below. */
	len -= ROCE_ICRC_LEN;
	barrier_var(len);
	if (len > ROCE_ICRC_MAX_FRAME)
		return -1;
	p = data + len;
	if ((void *)(p + ROCE_ICRC_LEN) > end)
		return -1;
	w.crc = ~w.crc;
	if (mode == ICRC_STORE) {
		*(__u32 *)p = w.crc; /* little-endian on the wire, as is the CPU */
		return 0;
	}
	return *(__u32 *)p != w.crc;
}

static __always_inline int icrc_ok(struct xdp_md *ctx)
{
	return incxdp_roce_icrc(ctx, ICRC_CHECK) == 0;
}

static __always_inline int icrc_store(struct xdp_md *ctx)
{
	return incxdp_roce_icrc(ctx, ICRC_STORE);
}

#endif
