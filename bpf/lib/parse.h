/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Cursor-style header parsing (after xdp-tutorial's hdr_cursor): each helper
 * checks its header against data_end right before handing it out, advances
 * the cursor, and returns NULL when the frame is too short.
 */
#ifndef INCXDP_PARSE_H
#define INCXDP_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct cursor {
	void *pos;
	void *end;
};

static __always_inline void cursor_init(struct cursor *c, struct xdp_md *ctx)
{
	c->pos = (void *)(long)ctx->data;
	c->end = (void *)(long)ctx->data_end;
}

/*
 * Whether the frame of `len` bytes (bpf_xdp_get_buff_len) continues past
 * data_end in fragments (an xdp.frags program on a link whose MTU exceeds
 * one buffer): then data..data_end is only its first part, and no length
 * field describes what the program sees.
 */
static __always_inline int frame_has_frags(const struct xdp_md *ctx, __u64 len)
{
	return len != (__u64)(ctx->data_end - ctx->data);
}

/* Linux 6.18. Weak: where the kernel lacks it, libbpf resolves it to 0, the
 * guarded call below is dead code and the verifier drops it (Linux >= 5.16),
 * so the programs load on every kernel that has xdp.frags. */
extern int bpf_xdp_pull_data(struct xdp_md *xdp, __u32 len) __ksym __weak;

/*
 * Moves the fragments of a frame of `len` bytes into its linear part, if
 * the kernel can and the buffer has the room (headroom and tailroom). Not
 * only jumbo frames arrive in pieces: drivers whose receive buffers are
 * smaller than a page hand an xdp.frags program a 2 KB-payload frame in
 * two or more (virtio_net's mergeable buffers, the 3 KB buffers of
 * i40e/ice), where a plain program would get it linearised by the driver.
 * On veth every frame of up to one buffer is linear already.
 * Returns 1 if the frame was pulled whole. Invalidates packet pointers.
 */
static __always_inline int frame_pull_linear(struct xdp_md *ctx, __u64 len)
{
	if (!bpf_xdp_pull_data)
		return 0;
	return bpf_xdp_pull_data(ctx, (__u32)len) == 0;
}

/* Returns a pointer to `len` bytes at the cursor and advances past them. */
#define CURSOR_TAKE(c, type)                                                  \
	({                                                                    \
		type *__p = (c)->pos;                                         \
		if ((void *)(__p + 1) > (c)->end)                            \
			__p = NULL;                                           \
		else                                                          \
			(c)->pos = __p + 1;                                   \
		__p;                                                          \
	})

static __always_inline struct ethhdr *parse_eth(struct cursor *c)
{
	return CURSOR_TAKE(c, struct ethhdr);
}

/*
 * Only option-less, unfragmented IPv4 carries aggregation traffic: the
 * engine rewrites headers in place and a fragment cannot be aggregated.
 * Anything else is left to the stack by the caller.
 */
static __always_inline struct iphdr *parse_ipv4_plain(struct cursor *c)
{
	struct iphdr *ip = CURSOR_TAKE(c, struct iphdr);

	if (!ip || ip->ihl != 5 || ip->version != 4)
		return NULL;
	if (ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset */
		return NULL;
	return ip;
}

static __always_inline struct udphdr *parse_udp(struct cursor *c)
{
	return CURSOR_TAKE(c, struct udphdr);
}

/* A 64-bit one's complement accumulator (RFC 1071) to 32 and to 16 bits. */
static __always_inline __u32 csum_fold32(__u64 s)
{
	s = (s & 0xffffffffu) + (s >> 32);
	s = (s & 0xffffffffu) + (s >> 32);
	return (__u32)s;
}

static __always_inline __u16 csum_fold16(__u64 s)
{
	__u32 v = csum_fold32(s);

	v = (v & 0xffff) + (v >> 16);
	v = (v & 0xffff) + (v >> 16);
	return (__u16)v;
}

/* RFC 1071 checksum of an option-less IPv4 header. */
static __always_inline void ipv4_csum_update(struct iphdr *ip)
{
	__u16 *w = (__u16 *)ip;
	__u32 sum = 0;

	ip->check = 0;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += w[i];
	ip->check = (__u16)~csum_fold16(sum);
}

#endif
