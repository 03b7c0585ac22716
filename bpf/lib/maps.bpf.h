/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * Map definitions of the switch object. Layouts come from incxdp/maps.h,
 * which the control plane includes too. Pinned by name so the CLI and
 * bpftool reach them under /sys/fs/bpf/incxdp (the loader sets the root).
 */
#ifndef INCXDP_MAPS_BPF_H
#define INCXDP_MAPS_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "incxdp/maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INCXDP_DEFAULT_SLOTS); /* `incxdp load --slots` */
	__type(key, __u32);
	__type(value, struct incxdp_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INCXDP_MAX_JOBS);
	__type(key, __u32);
	__type(value, struct incxdp_job);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_jobs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_MAX_WORKER_ENTRIES);
	__type(key, struct incxdp_worker_key);
	__type(value, struct incxdp_worker);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_workers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_MAX_WORKER_ENTRIES);
	__type(key, struct incxdp_egress_key);
	__type(value, struct incxdp_egress);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_egress SEC(".maps");

/* RoCEv2 RC connections of ROCE_TREE jobs, by this switch's QPN on them
 * (docs/ROCE.md §1). The engine updates the receive state in place. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, INCXDP_MAX_ROCE_CONNS);
	__type(key, struct incxdp_roce_conn_key);
	__type(value, struct incxdp_roce_conn);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_roce_conns SEC(".maps");

/* STAR jobs' parent switch (native UDP trees), by job id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INCXDP_MAX_JOBS);
	__type(key, __u32);
	__type(value, struct incxdp_parent);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_parents SEC(".maps");

/* Every port the engine is loaded on, with incxdp_egress_rewrite as its
 * egress program: the target of the multicast broadcast. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, INCXDP_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct incxdp_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_info SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INCXDP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_stats SEC(".maps");

static __always_inline void stat_inc(enum incxdp_stat s)
{
	__u32 key = s;
	__u64 *v = bpf_map_lookup_elem(&incxdp_stats, &key);

	if (v)
		*v += 1; /* per-CPU: no atomics needed */
}

#endif
