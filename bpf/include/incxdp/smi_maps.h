/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * SMI's routing tables of one rank, as `incxdp smi routes --install` (and
 * `incxdp smi run`) writes them into BPF maps pinned next to the rank's relay
 * maps (relay.h), and as the SMI runtime reads them at SMI_Init. Forwarding
 * itself is the relay's route table; these say what each CK does with a
 * message: CK_S (destination rank -> local, out of this QSFP, via another
 * QSFP) and CK_R ((port, data|control) -> this CK's endpoint, or via the
 * QSFP whose CK holds the port). docs/SMI.md §Maps.
 */
#ifndef INCXDP_SMI_MAPS_H
#define INCXDP_SMI_MAPS_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_MAP_SMI_CKS "incxdp_smi_cks"
#define INCXDP_MAP_SMI_CKR "incxdp_smi_ckr"

#define INCXDP_SMI_QSFPS 4
#define INCXDP_SMI_PORTS 256
/* Ranks in one rank's CK_S: the array holds QSFPS x this many entries. */
#define INCXDP_SMI_CKS_RANKS 256

enum incxdp_smi_cks_action {
	INCXDP_SMI_CKS_UNREACHABLE = 0, /* no path (also: entry never written) */
	INCXDP_SMI_CKS_LOCAL = 1,       /* this rank: to CK_R */
	INCXDP_SMI_CKS_OUT = 2,         /* out of this QSFP's cable */
	INCXDP_SMI_CKS_VIA = 3,         /* hand to QSFP `ch`'s CK_S */
};

enum incxdp_smi_ckr_kind {
	INCXDP_SMI_CKR_DATA = 0,
	INCXDP_SMI_CKR_CONTROL = 1,
};

enum incxdp_smi_ckr_action {
	INCXDP_SMI_CKR_NONE = 0,    /* entry never written */
	INCXDP_SMI_CKR_DELIVER = 1, /* this CK holds the port's endpoint */
	INCXDP_SMI_CKR_VIA = 2,     /* hand to QSFP `ch`'s CK_R */
};

/* incxdp_smi_cks (array): key = qsfp * INCXDP_SMI_CKS_RANKS + dst rank. */
struct incxdp_smi_cks_entry {
	__u8 action; /* enum incxdp_smi_cks_action */
	__u8 ch;     /* OUT: this QSFP; VIA: the QSFP handed to */
	__u16 hops;  /* cables to the destination along the rank's route */
	__u32 cost;  /* the path's cost (cable 100, QSFP to QSFP 1) */
};

/* incxdp_smi_ckr (array): key = (qsfp * INCXDP_SMI_PORTS + port) * 2 + kind. */
struct incxdp_smi_ckr_entry {
	__u8 action; /* enum incxdp_smi_ckr_action */
	__u8 ch;     /* DELIVER: this QSFP; VIA: the QSFP holding the port */
	__u16 pad;
};

INCXDP_STATIC_ASSERT(sizeof(struct incxdp_smi_cks_entry) == 8, "CK_S entry layout");
INCXDP_STATIC_ASSERT(sizeof(struct incxdp_smi_ckr_entry) == 4, "CK_R entry layout");

static inline __u32 incxdp_smi_cks_key(unsigned int qsfp, unsigned int dst)
{
	return qsfp * INCXDP_SMI_CKS_RANKS + dst;
}
static inline __u32 incxdp_smi_ckr_key(unsigned int qsfp, unsigned int port, unsigned int kind)
{
	return (qsfp * INCXDP_SMI_PORTS + port) * 2 + kind;
}

#endif
