/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The mesh relay's maps and its steps (bpf/incxdp_relay.bpf.c): classify a
 * frame, deliver it to this node, or forward it to the next hop. Layouts
 * and names come from incxdp/relay.h, which the control plane includes too.
 * Pinned by name: the loader sets the node's pin directory as the root.
 */
#ifndef INCXDP_LIB_RELAY_H
#define INCXDP_LIB_RELAY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/relay.h"
#include "incxdp/xsk.h"
#include "parse.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct incxdp_relay_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_cfg SEC(".maps");

/* Key: the destination node id in host order (as cfg.self_node). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_RELAY_MAX_ROUTES);
	__type(key, __u32);
	__type(value, struct incxdp_relay_route);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_routes SEC(".maps");

/* The node's interfaces a next hop may leave by, keyed by ifindex (value:
 * the same ifindex). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, INCXDP_RELAY_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_tx SEC(".maps");

/* The local endpoint's AF_XDP sockets, by rx queue (hostlib adds them). */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, INCXDP_XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_xsks SEC(".maps");

/* Key: ingress ifindex -> the interface's slot (< INCXDP_RELAY_MAX_IFACES),
 * set by the endpoint that binds per-interface sockets. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_RELAY_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_ifslots SEC(".maps");

/* Key: slot * INCXDP_RELAY_XSK_QUEUES + rx queue: an AF_XDP socket is bound
 * to one (interface, queue), so the interface a frame came in on picks it. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, INCXDP_RELAY_MAX_IFACES * INCXDP_RELAY_XSK_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_if_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INCXDP_RELAY_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_relay_stats SEC(".maps");

/* Counts `what` and returns `verdict`: every frame ends in one counter. */
static __always_inline int relay_count(__u32 what, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&incxdp_relay_stats, &what);

	if (c)
		*c += 1; /* per-CPU */
	return verdict;
}

struct relay_frame {
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	struct incxdp_relay_hdr *hdr;
};

enum relay_class { RELAY_NOT_OURS, RELAY_MALFORMED, RELAY_OK };

/*
 * Relay traffic is option-less, unfragmented IPv4/UDP to the relay port;
 * anything else is the stack's. `len` is the whole frame's (fragments
 * too): the headers are read from the linear part, the lengths checked
 * against all of it.
 */
static __always_inline enum relay_class relay_classify(struct cursor *c, struct relay_frame *f,
						       __u64 len)
{
	__u32 tot, ulen, need;

	f->eth = parse_eth(c);
	if (!f->eth || f->eth->h_proto != bpf_htons(ETH_P_IP))
		return RELAY_NOT_OURS;
	f->ip = parse_ipv4_plain(c);
	if (!f->ip || f->ip->protocol != IPPROTO_UDP)
		return RELAY_NOT_OURS;
	f->udp = parse_udp(c);
	if (!f->udp || f->udp->dest != bpf_htons(INCXDP_RELAY_UDP_PORT))
		return RELAY_NOT_OURS;
	f->hdr = CURSOR_TAKE(c, struct incxdp_relay_hdr);
	if (!f->hdr || f->hdr->magic != bpf_htons(INCXDP_RELAY_MAGIC) ||
	    f->hdr->version != INCXDP_RELAY_VERSION)
		return RELAY_MALFORMED;
	/* The datagram's own lengths must hold the payload it announces, and
	 * the frame must hold the datagram: a relay forwards what the sender's
	 * lengths say, never Ethernet padding or a cut frame. */
	tot = bpf_ntohs(f->ip->tot_len);
	ulen = bpf_ntohs(f->udp->len);
	need = sizeof(struct udphdr) + INCXDP_RELAY_HDR_LEN;
	if (tot > len - sizeof(struct ethhdr) || tot < sizeof(struct iphdr) + need ||
	    ulen > tot - sizeof(struct iphdr) || ulen < need ||
	    bpf_ntohl(f->hdr->payload_len) > ulen - need)
		return RELAY_MALFORMED;
	return RELAY_OK;
}

/* For this node: the AF_XDP socket of (ingress interface, rx queue) if the
 * endpoint bound one, else its socket on this rx queue, else the stack (the
 * UDP socket on the relay port). */
static __always_inline int relay_deliver(struct xdp_md *ctx)
{
	__u32 ifx = ctx->ingress_ifindex, q = ctx->rx_queue_index;
	__u32 *slot = bpf_map_lookup_elem(&incxdp_relay_ifslots, &ifx);
	int v = XDP_PASS;

	if (slot && *slot < INCXDP_RELAY_MAX_IFACES && q < INCXDP_RELAY_XSK_QUEUES)
		v = bpf_redirect_map(&incxdp_relay_if_xsks, *slot * INCXDP_RELAY_XSK_QUEUES + q,
				     XDP_PASS);
	if (v != XDP_REDIRECT)
		v = bpf_redirect_map(&incxdp_relay_xsks, q, XDP_PASS);

	return relay_count(v == XDP_REDIRECT ? INCXDP_RELAY_STAT_DELIVER_XSK
					     : INCXDP_RELAY_STAT_DELIVER_STACK,
			   v);
}

/*
 * For another node: addressed for the link to the route's next hop (the
 * one the sender's `path` picks among equal-cost ones, so a flow keeps its
 * way round a ring), one more hop, and out of that link's interface.
 */
static __always_inline int relay_forward(const struct incxdp_relay_cfg *cfg, struct relay_frame *f)
{
	struct incxdp_relay_nexthop nh;
	struct incxdp_relay_route *r;
	__u32 dst = bpf_ntohl(f->hdr->dst_node), n, i;
	long v;

	if (!cfg->relay_enabled)
		return relay_count(INCXDP_RELAY_STAT_RELAY_OFF, XDP_DROP);
	if (f->hdr->hops >= cfg->max_hops)
		return relay_count(INCXDP_RELAY_STAT_HOP_LIMIT, XDP_DROP);
	r = bpf_map_lookup_elem(&incxdp_relay_routes, &dst);
	if (!r)
		return relay_count(INCXDP_RELAY_STAT_NO_ROUTE, XDP_DROP);
	n = r->nnexthops;
	if (n == 0 || n > INCXDP_RELAY_MAX_NEXTHOPS)
		return relay_count(INCXDP_RELAY_STAT_NO_ROUTE, XDP_DROP);
	i = f->hdr->path % n;
	/* For the verifier, which cannot bound a modulo; the barrier keeps
	 * clang, which can, from dropping the check. */
	barrier_var(i);
	if (i >= INCXDP_RELAY_MAX_NEXTHOPS)
		return relay_count(INCXDP_RELAY_STAT_NO_ROUTE, XDP_DROP);
	/* One snapshot: the control plane may rewrite the route meanwhile. */
	nh = r->nh[i];

	__builtin_memcpy(f->eth->h_dest, nh.dst_mac, ETH_ALEN);
	__builtin_memcpy(f->eth->h_source, nh.src_mac, ETH_ALEN);
	f->ip->saddr = nh.src_ip;
	f->ip->daddr = nh.dst_ip;
	f->ip->ttl = 64; /* each link is its own subnet: the hop count bounds the path */
	ipv4_csum_update(f->ip);
	f->udp->check = 0; /* optional for IPv4; the addresses changed */
	f->hdr->hops += 1;
	v = bpf_redirect_map(&incxdp_relay_tx, nh.ifindex, 0);
	if (v != XDP_REDIRECT)
		return relay_count(INCXDP_RELAY_STAT_REDIRECT_FAIL, XDP_DROP);
	return relay_count(INCXDP_RELAY_STAT_FORWARD, XDP_REDIRECT);
}

#endif
