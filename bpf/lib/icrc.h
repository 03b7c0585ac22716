/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The RoCEv2 ICRC (incxdp/roce.h, docs/PROTOCOLS.md §3) of the frame in an XDP
 * buffer: CRC-32 over 8 x 0xFF, the IPv4/UDP/BTH headers with their variant
 * fields masked to ones, and everything after the BTH up to the last 4 bytes,
 * which hold the ICRC little-endian.
 *
 * Verifier cost shapes the walk:
 * - incxdp_roce_icrc is a global (non-static, noinline) function, which the
 *   verifier checks once on its own instead of once per call site and state.
 * - A plain bounded loop over up to 3500 B would be walked iteration by
 *   iteration, and every iteration's exit (a different packet offset each)
 *   would walk the rest again: ~100k instructions. The walk therefore runs
 *   as bpf_loop() callbacks at a variable offset, which the verifier checks
 *   as one body each (and the kernel inlines into a plain loop).
 * Speed shapes the rest (docs/BENCH.md "The ICRC walk halved" has the costs):
 * - a callback costs a call and its bounds checks, so the payload
 *   goes in 256 B blocks; the word before it (ImmDt, AETH) is one inline
 *   step at its constant offset, the < 256 B left over 8 B steps;
 * - slicing-by-16: the walk is bound by instructions (four per cycle) and by
 *   the chain through the running CRC, and 16 B per step halves the chain's
 *   share; see crc32_slice and crc_tab for the instruction-level choices.
 * The loads read packet memory in the CPU's byte order, which the tables
 * assume is little-endian (the reflected CRC takes the lowest-addressed byte
 * first). Callers must not hold a spin lock.
 *
 * Multicast copies differ from their template only in headers, so the
 * template carries the CRC of its tail (everything after the BTH) where the
 * ICRC goes, computed once, and each copy's ICRC is combined from the CRC
 * of its own 48 B pseudo header and that (zlib's crc32_combine: a GF(2)
 * multiplication by x^(8 x tail length)), a constant cost per copy instead
 * of a pass over its payload (docs/ROCE.md §5).
 */
#ifndef INCXDP_ICRC_H
#define INCXDP_ICRC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "incxdp/roce.h"
#include "crc32_table.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "icrc.h: the slicing loads assume a little-endian BPF target"
#endif

/*
 * The largest frame covered: the linear part of an XDP buffer (a 4 KiB page
 * less 256 B headroom and 320 B skb_shared_info), above the 3500 B link MTU.
 * A longer frame fails the check and is not stored.
 */
#define ROCE_ICRC_MAX_FRAME 3520
#define ICRC_BLOCK 256
#define ICRC_MAX_BLOCKS ((ROCE_ICRC_MAX_FRAME - ROCE_HDRS_LEN - ROCE_ICRC_LEN) / ICRC_BLOCK)

enum icrc_mode {
	ICRC_CHECK = 0, /* returns 0 if the frame's ICRC is right, 1 if not */
	ICRC_STORE = 1, /* writes it; returns 0 */
	ICRC_TAIL = 2,  /* writes the CRC of the tail alone in its place; returns 0 */
};

/*
 * Table k at byte offset off (0..1020, a byte times 4). The instruction
 * count is what bounds the walk (~4 per cycle already), so each lookup is
 * kept to shift, mask, add, load: `off += t` is written out because clang
 * emits `tmp = t; tmp += off` (BPF has no three-operand add), one copy per
 * lookup; the verifier takes scalar += map value pointer as the pointer
 * with off's range.
 */
static __always_inline __u64 crc_tab(const __u8 *t, int k, __u64 off)
{
	asm("%[off] += %[t]" : [off] "+r"(off) : [t] "r"(t));
	return *(const __u32 *)(off + k * 1024);
}

/* The four lookups of one 32-bit word x whose last byte is k bytes before
 * the end of the step: tables k+3 (x's first byte) down to k. */
static __always_inline __u64 crc_word(const __u8 *t, int k, __u64 x)
{
	return crc_tab(t, k + 3, (x << 2) & 0x3fc) ^ crc_tab(t, k + 2, (x >> 6) & 0x3fc) ^
	       crc_tab(t, k + 1, (x >> 14) & 0x3fc) ^ crc_tab(t, k, (x >> 22) & 0x3fc);
}

/*
 * One step of slicing-by-n (n = 4 x nw, words little-endian as loaded). The
 * walk is bound by instructions and by the chain through crc: the words
 * after the first do not depend on crc and are looked up first, and the
 * first word's four lookups are summed as a tree, not a chain (clang would
 * reassociate them into one without the barriers). Stack is what the other
 * barriers save: without them clang keeps a table address per lookup and
 * precomputes every lookup that does not depend on crc, and spills it all
 * (250 B of a call chain limited to 512).
 */
static __always_inline __u32 crc32_slice(__u32 crc, const __u32 *w, int nw)
{
	const __u8 *t = (const __u8 *)incxdp_crc32_table;
	__u64 h = 0, x = w[0], a, b;

	barrier_var(t);
#pragma unroll
	for (int i = 1; i < nw; i++)
		h ^= crc_word(t, 4 * (nw - 1 - i), w[i]);
	x ^= crc;
	barrier_var(x);
	a = crc_tab(t, 4 * nw - 1, (x << 2) & 0x3fc) ^ crc_tab(t, 4 * nw - 2, (x >> 6) & 0x3fc);
	b = crc_tab(t, 4 * nw - 3, (x >> 14) & 0x3fc) ^ crc_tab(t, 4 * nw - 4, (x >> 22) & 0x3fc);
	barrier_var(a);
	barrier_var(b);
	return h ^ a ^ b;
}

/* The bpf_loop state: where the walk starts, and the running CRC. */
struct icrc_walk {
	void *start;
	void *end;
	__u32 crc;
	__u32 short_frame; /* a read would have run past the end */
};

static long icrc_word(__u64 i, void *arg)
{
	struct icrc_walk *w = arg;
	__u8 *p;

	if (i >= ICRC_BLOCK / 8)
		goto out;
	p = w->start + i * 8;
	if ((void *)(p + 8) > w->end)
		goto out;
	w->crc = crc32_slice(w->crc, (const __u32 *)p, 2);
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
	for (int j = 0; j < ICRC_BLOCK; j += 16)
		crc = crc32_slice(crc, (const __u32 *)(p + j), 4);
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
	for (int i = 0; i < (ROCE_HDRS_LEN - 14) / 4; i += 2) {
		__u32 v[2] = { hdr[i] | ICRC_WORD_MASK(i), hdr[i + 1] | ICRC_WORD_MASK(i + 1) };

		crc = crc32_slice(crc, v, 2);
	}
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
 * too long for that or its rest is not whole 32-bit words, 1 on a mismatch
 * (ICRC_CHECK), else 0.
 */
__attribute__((noinline)) int incxdp_roce_icrc(struct xdp_md *ctx, int mode)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 *hdr = data + 14;
	struct icrc_walk w = {};
	__u32 len = (__u32)(end - data), rest, head, words;
	__u8 *p;

	if (len < ROCE_HDRS_LEN + ROCE_ICRC_LEN || len > ROCE_ICRC_MAX_FRAME)
		return -1;
	if ((void *)(hdr + (ROCE_HDRS_LEN - 14) / 4) > end)
		return -1;
	w.crc = mode == ICRC_TAIL ? 0xffffffffu : icrc_pseudo_hdr(hdr);

	/* Whole 32-bit words only: PadCnt is 0 in every frame that parses. An
	 * odd word first (the AETH or ImmDt of our frames), then 8 B words up
	 * to a multiple of the block, then whole blocks: a payload of n x 256 B
	 * starts where the blocks do. */
	rest = len - ROCE_HDRS_LEN - ROCE_ICRC_LEN;
	if (rest % 4)
		return -1;
	head = rest % 8;
	words = (rest % ICRC_BLOCK) / 8;
	w.end = end;
	if (head) {
		/* At a constant offset: no loop, no callback. */
		const __u32 *q = data + ROCE_HDRS_LEN;

		if ((void *)(q + 1) > end)
			return -1;
		w.crc = crc32_slice(w.crc, q, 1);
	}
	w.start = data + ROCE_HDRS_LEN + head;
	if (words)
		bpf_loop(words, icrc_word, &w, 0);
	w.start = data + ROCE_HDRS_LEN + head + words * 8;
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
