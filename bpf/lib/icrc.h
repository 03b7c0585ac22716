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
 *
 * Multicast copies differ from their template only in headers, so the
 * template carries the CRC of its tail (everything after the BTH) where the
 * ICRC goes, computed once, and each copy's ICRC is combined from the CRC
 * of its own 48 B pseudo header and that (zlib's crc32_combine: a GF(2)
 * multiplication by x^(8 x tail length)): ~0.1 us instead of ~1.4 us per
 * 2 KB copy.
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
	ICRC_TAIL = 2,  /* writes the CRC of the tail alone in its place; returns 0 */
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

/* The running CRC after the pseudo header: 8 x 0xFF, then IPv4 | UDP | BTH
 * (40 B at hdr, bounds checked by the caller) with TOS, TTL, IP checksum,
 * UDP checksum and BTH resv8 set to ones, masked in registers. */
static __always_inline __u32 icrc_pseudo_hdr(const __u32 *hdr)
{
	__u32 crc = INCXDP_CRC32_AFTER_FF8;

#pragma unroll
	for (int i = 0; i < (ROCE_HDRS_LEN - 14) / 4; i += 2)
		crc = crc32_slice8(crc, hdr[i] | ICRC_WORD_MASK(i), hdr[i + 1] | ICRC_WORD_MASK(i + 1));
	return crc;
}

/* a * b mod P, both reflected (bit 31 is x^0): zlib's multmodp, branch-free
 * so that the verifier walks one path. The conditional terms multiply by a
 * 0/1 bit: masking with -bit instead makes the verifier (6.x) fork its
 * state on every [-1, 0] mask, 2^64 paths here. */
static __always_inline __u32 crc32_mulmod(__u32 a, __u32 b)
{
	__u32 p = 0;

#pragma unroll
	for (int i = 31; i >= 0; i--) {
		p ^= b * ((a >> i) & 1);
		b = (b >> 1) ^ (0xEDB88320u * (b & 1));
	}
	return p;
}

/*
 * Checks or stores the ICRC of the frame in ctx, which must be exactly
 * Ethernet | IPv4 (no options) | UDP | BTH | rest | ICRC: the last 4 bytes of
 * the buffer are the ICRC. ICRC_TAIL stores the CRC of `rest` alone there
 * (for incxdp_roce_icrc_from_tail). Returns -1 if the frame is too short or
 * too long for that, 1 on a mismatch (ICRC_CHECK), else 0.
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
	w.crc = mode == ICRC_TAIL ? 0xffffffffu : icrc_pseudo_hdr(hdr);

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
	if (mode != ICRC_CHECK) {
		*(__u32 *)p = w.crc; /* little-endian on the wire, as is the CPU */
		return 0;
	}
	return *(__u32 *)p != w.crc;
}

/*
 * The ICRC of a multicast copy whose tail is the template's: the last 4
 * bytes hold the tail's CRC (ICRC_TAIL), and are replaced by the ICRC.
 * The same step the other way: on a frame whose last 4 bytes are its
 * (checked) ICRC, they become the tail's CRC, as
 * ICRC = shift(crc(pseudo header)) ^ crc(tail) either way round.
 * Returns -1 if the frame does not have the shape incxdp_roce_icrc needs or
 * its tail is not a multiple of 4 bytes (none of ours), else 0.
 */
__attribute__((noinline)) int incxdp_roce_icrc_from_tail(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 *hdr = data + 14;
	__u32 len = (__u32)(end - data), tail, i, shift, *p;

	if (len < ROCE_HDRS_LEN + ROCE_ICRC_LEN || len > ROCE_ICRC_MAX_FRAME)
		return -1;
	if ((void *)(hdr + (ROCE_HDRS_LEN - 14) / 4) > end)
		return -1;
	tail = len - ROCE_HDRS_LEN - ROCE_ICRC_LEN;
	if (tail % 4)
		return -1;
	/* Checked on the register the load uses: clang would otherwise test a
	 * copy and index with one the verifier knows no bound of. */
	i = tail / 4;
	barrier_var(i);
	if (i >= INCXDP_CRC32_SHIFT_ENTRIES)
		return -1;
	shift = incxdp_crc32_shift4[i];
	len -= ROCE_ICRC_LEN;
	barrier_var(len); /* as in incxdp_roce_icrc: keep the bound for the verifier */
	if (len > ROCE_ICRC_MAX_FRAME)
		return -1;
	p = data + len;
	if ((void *)(p + 1) > end)
		return -1;
	*p = crc32_mulmod(shift, ~icrc_pseudo_hdr(hdr)) ^ *p;
	return 0;
}

static __always_inline int icrc_ok(struct xdp_md *ctx)
{
	return incxdp_roce_icrc(ctx, ICRC_CHECK) == 0;
}

static __always_inline int icrc_store(struct xdp_md *ctx)
{
	return incxdp_roce_icrc(ctx, ICRC_STORE);
}

static __always_inline int icrc_tail_store(struct xdp_md *ctx)
{
	return incxdp_roce_icrc(ctx, ICRC_TAIL);
}

#endif
