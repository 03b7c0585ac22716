/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * RoCEv2 as INC_Emulation's hosts and switches use it (docs/PROTOCOLS.md §3):
 * reliable-connected SENDs whose immediate data names the collective.
 * Shared by the XDP engine, the loader, hostlib and the tests.
 *
 * Frame: Ethernet | IPv4 (no options) | UDP (dst 4791) | BTH (12 B)
 *        | [AETH 4 B on ACK/NAK] | [ImmDt 4 B on *_IMM opcodes]
 *        | payload (n x be32, n a multiple of INCXDP_ELEM_QUANTUM) | ICRC (4 B)
 *
 * incxdp sends and expects one packet per message (SEND_ONLY_IMM) and keys
 * aggregation on the packet's position in its connection's PSN stream,
 * idx = (PSN - connection base PSN) mod 2^24, the same on every connection
 * of a job. It also accepts FIRST/MIDDLE/LAST/ONLY without ImmDt, which then
 * take the ImmDt last seen on their connection.
 */
#ifndef INCXDP_ROCE_H
#define INCXDP_ROCE_H

#include <linux/types.h>
#include "compiler.h"

#define INCXDP_ROCE_UDP_PORT 4791

enum incxdp_roce_opcode {
	ROCE_OP_SEND_FIRST = 0x00,
	ROCE_OP_SEND_MIDDLE = 0x01,
	ROCE_OP_SEND_LAST = 0x02,
	ROCE_OP_SEND_LAST_IMM = 0x03,
	ROCE_OP_SEND_ONLY = 0x04,
	ROCE_OP_SEND_ONLY_IMM = 0x05,
	ROCE_OP_ACK = 0x11,
};

#define ROCE_PSN_MASK 0xFFFFFFu
#define ROCE_QPN_MASK 0xFFFFFFu
#define ROCE_BTH_ACKREQ 0x80000000u /* in apsn: the requester asks for an ACK */
#define ROCE_PKEY_DEFAULT 0xFFFF
#define ROCE_BTH_TVER 0          /* flags byte: SE=0 M=0 PadCnt=0 TVer=0 */

/* AETH syndromes (IBA 9.7.5.1.5): ACK with "invalid credit count" (0x1F),
 * NAK PSN sequence error. The low 24 bits carry the MSN. */
#define ROCE_AETH_ACK 0x1F000000u
#define ROCE_AETH_NAK_SEQ 0x60000000u
#define ROCE_AETH_SYNDROME_MASK 0xFF000000u
#define ROCE_AETH_MSN_MASK 0x00FFFFFFu

/*
 * The start handshake (docs/ROCE.md "Consecutive runs"): a host asks its leaf
 * where its connection stands with an ACK whose AETH syndrome is in the class
 * IBA reserves (010x xxxx), which no RC device sends. The leaf answers with
 * ROCE_AETH_SYNC_ANS: BTH PSN = the PSN it expects next from the host, AETH
 * low 24 bits = the PSN of its next result to the host.
 */
#define ROCE_AETH_SYNC_REQ 0x40000000u
#define ROCE_AETH_SYNC_ANS 0x41000000u

struct roce_bth {
	__u8 opcode;  /* enum incxdp_roce_opcode */
	__u8 flags;   /* SE:1 M:1 PadCnt:2 TVer:4 */
	__be16 pkey;  /* ROCE_PKEY_DEFAULT */
	__be32 dqpn;  /* resv8 (0; ICRC masks it to 0xFF) + destination QPN:24 */
	__be32 apsn;  /* AckReq:1 resv7 + PSN:24 */
} __attribute__((packed));

struct roce_aeth {
	__be32 syn_msn; /* syndrome:8 + MSN:24 */
} __attribute__((packed));

INCXDP_STATIC_ASSERT(sizeof(struct roce_bth) == 12, "BTH layout");
INCXDP_STATIC_ASSERT(sizeof(struct roce_aeth) == 4, "AETH layout");

#define ROCE_ICRC_LEN 4
#define ROCE_IMM_LEN 4
/* Ethernet + IPv4 + UDP + BTH */
#define ROCE_HDRS_LEN (14 + 20 + 8 + 12)
/* A SEND_ONLY_IMM frame without payload (a Barrier, a Reduce completion to a
 * non-root rank): 62 B. */
#define ROCE_MIN_IMM_FRAME (ROCE_HDRS_LEN + ROCE_IMM_LEN + ROCE_ICRC_LEN)
/* An ACK/NAK frame: 62 B. */
#define ROCE_ACK_FRAME (ROCE_HDRS_LEN + 4 + ROCE_ICRC_LEN)
/*
 * Largest payload: 832 int32 (INCXDP_MAX_ELEMS, what a slot holds), one
 * SEND_ONLY message of path MTU 4096. Its 3394 B frame is the largest that
 * fits the linear part of an XDP buffer (bpf/lib/icrc.h); 4096 B arrives in
 * fragments on a jumbo link and is dropped as too_long (reading, checking
 * and writing payloads across fragments is not done). Hosts whose device
 * negotiates path MTU 2048 (rxe on that link) send up to 2048 B, hostlib's
 * default.
 */
#define ROCE_MAX_PAYLOAD 3328
#define ROCE_MAX_ELEMS (ROCE_MAX_PAYLOAD / 4)

/*
 * ImmDt (host order after ntohl):
 *   dest_rank:16 | primitive:2 | op:2 | dtype:4 | reserved:8
 * dest_rank is the root rank of Reduce/Broadcast, 0xFFFF for AllReduce.
 */
enum incxdp_roce_prim {
	ROCE_PRIM_ALLREDUCE = 0,
	ROCE_PRIM_REDUCE = 1,
	ROCE_PRIM_BROADCAST = 2,
};

enum incxdp_roce_op {
	ROCE_OPR_BARRIER = 0, /* no payload; completes when every rank sent it */
	ROCE_OPR_SUM = 1,
	ROCE_OPR_MAX = 2,
	ROCE_OPR_MIN = 3,
};

enum incxdp_roce_dtype {
	ROCE_DTYPE_INT32 = 0,
	/* float32 carried as int32 by the hosts (docs/ROCE.md §floats); the
	 * switch only checks every contribution agrees */
	ROCE_DTYPE_FLOAT32 = 1,
};

#define ROCE_IMM_ALL_RANKS 0xFFFF
/* ImmDt reserved byte of the start check, a Barrier every rank sends at the
 * index the handshake gave it: no set of an earlier run has this ImmDt, so
 * the check cannot complete with what such a run left in a set. */
#define ROCE_IMM_START 0x01

static inline __u32 roce_imm_make(__u16 dest_rank, __u8 prim, __u8 op, __u8 dtype)
{
	return ((__u32)dest_rank << 16) | ((__u32)(prim & 3) << 14) | ((__u32)(op & 3) << 12) |
	       ((__u32)(dtype & 0xf) << 8);
}
static inline __u16 roce_imm_dest(__u32 imm) { return imm >> 16; }
static inline __u8 roce_imm_prim(__u32 imm) { return (imm >> 14) & 3; }
static inline __u8 roce_imm_op(__u32 imm) { return (imm >> 12) & 3; }
static inline __u8 roce_imm_dtype(__u32 imm) { return (imm >> 8) & 0xf; }

static inline int roce_opcode_has_imm(__u8 op)
{
	return op == ROCE_OP_SEND_LAST_IMM || op == ROCE_OP_SEND_ONLY_IMM;
}

static inline int roce_opcode_is_send(__u8 op)
{
	return op <= ROCE_OP_SEND_ONLY_IMM;
}

/* (a - b) mod 2^24 as a signed distance in [-2^23, 2^23): a PSN is ahead of
 * the expected one if > 0, a duplicate if < 0 (IBA 9.7.4.1.3). */
static inline __s32 roce_psn_diff(__u32 a, __u32 b)
{
	return (__s32)((a - b) << 8) >> 8;
}

/*
 * ICRC (IBA Annex A17.3.3, docs/PROTOCOLS.md §3): CRC-32 (reflected 0xEDB88320,
 * init and final xor 0xFFFFFFFF, i.e. zlib's crc32) over
 *   8 bytes 0xFF,
 *   the IPv4 header with TOS, TTL and header checksum set to all ones,
 *   the UDP header with its checksum set to all ones,
 *   the BTH with resv8 (the byte before the destination QPN) set to 0xFF,
 *   everything after the BTH up to the ICRC,
 * stored little-endian in the last 4 bytes of the frame.
 * Offsets of the masked bytes inside the 48-byte pseudo header that starts
 * with the 8 bytes of 0xFF:
 */
#define ROCE_ICRC_PSEUDO_LEN (8 + 20 + 8 + 12)
#define ROCE_ICRC_MASK_TOS (8 + 1)
#define ROCE_ICRC_MASK_TTL (8 + 8)
#define ROCE_ICRC_MASK_IPCSUM (8 + 10) /* 2 bytes */
#define ROCE_ICRC_MASK_UDPCSUM (8 + 20 + 6) /* 2 bytes */
#define ROCE_ICRC_MASK_RESV8 (8 + 20 + 8 + 4)

#endif
