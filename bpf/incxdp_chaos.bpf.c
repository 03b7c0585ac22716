// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/*
 * incxdp chaos: fault injection on one hook of one interface (netem is not
 * available on the machines this project runs on). Random loss, duplication
 * and single-bit payload corruption, with probabilities read from
 * chaos_config on every frame, so `incxdp chaos` changes them with one map
 * update while traffic flows.
 *
 * tc (clsact), for frames that pass the stack (UDP sockets): only an skb can
 * be cloned in place. Frames forwarded by XDP are faulted by the XDP hook
 * every incxdp XDP program carries (bpf/lib/chaos_xdp.h). The two entry points
 * differ in where a duplicate is re-sent; each attachment loads one of them
 * with its own maps (see incxdp/chaos.h).
 *
 * Frames the engine forwards with XDP_TX/XDP_REDIRECT never pass a tc hook
 * of the switch, so faults on the switch-to-host direction are injected at
 * the host's ingress, which sees them after incxdp_pass (docs/CHAOS.md).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "incxdp/chaos.h"
#include "chaos_rand.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct incxdp_chaos_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} chaos_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INCXDP_CHAOS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} chaos_stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *c = bpf_map_lookup_elem(&chaos_stats, &stat);

	if (c)
		*c += 1; /* per-CPU: no atomics needed */
}

/*
 * Offset (from the Ethernet header) and length of the UDP payload of an
 * IPv4 frame; length 0 when there is none (not UDP, a non-first fragment,
 * truncated). The IP total length bounds it, so Ethernet padding is never
 * "payload". bpf_skb_load_bytes rather than direct access: it also reads
 * non-linear skbs.
 */
static __always_inline __u32 udp_payload(struct __sk_buff *skb, __u32 *off)
{
	struct ethhdr eth;
	struct iphdr ip;
	__u32 ihl, tot, end;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0 || eth.h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes(skb, sizeof(eth), &ip, sizeof(ip)) < 0)
		return 0;
	if (ip.version != 4 || ip.ihl < 5 || ip.protocol != IPPROTO_UDP)
		return 0;
	if (ip.frag_off & bpf_htons(0x1fff)) /* a later fragment: no UDP header */
		return 0;
	ihl = ip.ihl * 4;
	tot = bpf_ntohs(ip.tot_len);
	if (tot < ihl + sizeof(struct udphdr))
		return 0;
	*off = sizeof(eth) + ihl + sizeof(struct udphdr);
	end = sizeof(eth) + tot;
	if (end > skb->len)
		end = skb->len;
	return end > *off ? end - *off : 0;
}

/*
 * Flips one random bit of the UDP payload; headers stay intact so the frame
 * is still delivered and only a receiver-side check can catch it. The UDP
 * checksum is left as it was (a wire error would not fix it either);
 * BPF_F_RECOMPUTE_CSUM only keeps a CHECKSUM_COMPLETE skb's running sum
 * true to the bytes, so the stack does not report a hardware checksum fault.
 */
static __always_inline int corrupt_one_bit(struct __sk_buff *skb)
{
	__u32 off = 0, len = udp_payload(skb, &off);
	__u8 byte;

	if (!len)
		return 0;
	off += random_below(len);
	if (bpf_skb_load_bytes(skb, off, &byte, 1) < 0)
		return 0;
	byte ^= (__u8)(1u << (bpf_get_prandom_u32() & 7));
	return bpf_skb_store_bytes(skb, off, &byte, 1, BPF_F_RECOMPUTE_CSUM) == 0;
}

/*
 * Sends a clone through the same hook of the same interface (egress: queued
 * for transmission before the original; ingress: re-received right after
 * it). The clone meets this program again; the mark tells it apart.
 */
static __always_inline int duplicate(struct __sk_buff *skb, __u64 flags)
{
	__u32 mark = skb->mark;
	long err;

	skb->mark = INCXDP_CHAOS_CLONE_MARK;
	err = bpf_clone_redirect(skb, skb->ifindex, flags);
	skb->mark = mark;
	return err == 0;
}

/*
 * Passing is TC_ACT_UNSPEC, not TC_ACT_OK: in direct-action mode UNSPEC
 * lets any later filter on the hook run too (its default is to send), so
 * the injector coexists with other tc programs on the interface.
 *
 * A lost frame is `drop`: TC_ACT_STOLEN on egress, because TC_ACT_SHOT there
 * makes dev_queue_xmit return NET_XMIT_DROP and the sender learns of the
 * loss (sendto fails with ENOBUFS on a packet socket, or a UDP socket with
 * IP_RECVERR), which a wire never tells it; STOLEN frees the frame and
 * reports success, as netem's loss does. On ingress nobody is told either
 * way and TC_ACT_SHOT counts it as a drop in the kernel's statistics.
 */
static __always_inline int chaos(struct __sk_buff *skb, __u64 dup_flags, int drop)
{
	struct incxdp_chaos_config cfg, *c;
	__u32 zero = 0;

	if (skb->mark == INCXDP_CHAOS_CLONE_MARK) {
		skb->mark = 0;
		return TC_ACT_UNSPEC;
	}
	count(INCXDP_CHAOS_SEEN);
	c = bpf_map_lookup_elem(&chaos_config, &zero);
	if (!c || !c->enabled) {
		count(INCXDP_CHAOS_PASSED);
		return TC_ACT_UNSPEC;
	}
	cfg = *c; /* one snapshot per frame: the control plane may write meanwhile */
	if (chance(cfg.loss_ppm)) {
		count(INCXDP_CHAOS_DROPPED);
		return drop;
	}
	/* Corrupt before duplicating: a duplicate is a copy of what was sent. */
	if (chance(cfg.corrupt_ppm) && corrupt_one_bit(skb))
		count(INCXDP_CHAOS_CORRUPTED);
	if (chance(cfg.dup_ppm))
		count(duplicate(skb, dup_flags) ? INCXDP_CHAOS_DUPLICATED : INCXDP_CHAOS_DUP_FAILED);
	count(INCXDP_CHAOS_PASSED);
	return TC_ACT_UNSPEC;
}

/* Kernel program names are cut at 15 characters: keep them whole. */
SEC("tc")
int ixchaos_egress(struct __sk_buff *skb)
{
	return chaos(skb, 0, TC_ACT_STOLEN);
}

SEC("tc")
int ixchaos_ingress(struct __sk_buff *skb)
{
	return chaos(skb, BPF_F_INGRESS, TC_ACT_SHOT);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
