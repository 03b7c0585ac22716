/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * SMI's CK_S and CK_R tables (incxdp/smi_maps.h). Defined in the relay's
 * object so that they are created and pinned with the relay's maps, with
 * BTF (`bpftool map dump pinned` names the fields); the program does not
 * read them: the relay's route table forwards, the SMI runtime delivers.
 * They stay empty on nodes that are not SMI ranks.
 */
#ifndef INCXDP_LIB_SMI_MAPS_H
#define INCXDP_LIB_SMI_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "incxdp/smi_maps.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INCXDP_SMI_QSFPS * INCXDP_SMI_CKS_RANKS);
	__type(key, __u32);
	__type(value, struct incxdp_smi_cks_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_smi_cks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INCXDP_SMI_QSFPS * INCXDP_SMI_PORTS * 2);
	__type(key, __u32);
	__type(value, struct incxdp_smi_ckr_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} incxdp_smi_ckr SEC(".maps");

#endif
