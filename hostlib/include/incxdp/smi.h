/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SMI, the Streaming Message Interface (spcl/SMI, SC'19), on CPUs: the same
 * names, enums and per-element semantics, so a program written for SMI
 * compiles unchanged apart from its start-up (SMI_Init/SMI_Finalize instead
 * of SmiInit_<program>). A rank is a process in a network namespace, started
 * by `incxdp smi run`; messages travel the mesh relay (docs/SMI.md).
 *
 * Usable from C and C++ (hostlib/include/incxdp/smi.hpp adds wrappers).
 */
#ifndef INCXDP_SMI_API_H
#define INCXDP_SMI_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SMI_INT = 1, SMI_FLOAT = 2, SMI_DOUBLE = 3, SMI_CHAR = 4, SMI_SHORT = 5 } SMI_Datatype;
typedef enum { SMI_ADD = 0, SMI_MAX = 1, SMI_MIN = 2 } SMI_Op;

struct incxdp_smi_runtime;
struct incxdp_smi_chan;

/* The communicator: this rank, the number of ranks, the runtime. */
typedef struct {
	int rank;
	int size;
	struct incxdp_smi_runtime *rt;
} SMI_Comm;

/* Channels are values, as in SMI; the state they stand for lives in the
 * runtime, so a copy refers to the same channel. */
typedef struct {
	struct incxdp_smi_chan *impl;
	int count;
	SMI_Datatype type;
	int peer; /* destination (send) or source (receive) */
	int port;
} SMI_Channel;

typedef struct {
	struct incxdp_smi_chan *impl;
	int count;
	SMI_Datatype type;
	int port;
	int root;
} SMI_BChannel;

typedef struct {
	struct incxdp_smi_chan *impl;
	int count;
	SMI_Datatype type;
	SMI_Op op;
	int port;
	int root;
} SMI_RChannel;

typedef struct {
	struct incxdp_smi_chan *impl;
	int send_count;
	int recv_count;
	SMI_Datatype type;
	int port;
	int root;
} SMI_ScatterChannel;

typedef struct {
	struct incxdp_smi_chan *impl;
	int send_count;
	int recv_count;
	SMI_Datatype type;
	int port;
	int root;
} SMI_GatherChannel;

/*
 * Start-up. Reads what `incxdp smi run` sets: INCXDP_SMI_RANK,
 * INCXDP_SMI_TOPOLOGY (the cabling file), INCXDP_SMI_PREFIX and
 * INCXDP_SMI_PIN_DIR; optional INCXDP_SMI_EAGER=1 (eager mode for every
 * channel). Opens the rank's endpoint and starts its progress thread. On a
 * missing variable or a failure it prints why and exits 1. argc/argv may be
 * NULL and are left unchanged.
 */
SMI_Comm SMI_Init(int *argc, char ***argv);
/* Waits until every frame this rank sent has been acknowledged, then stops
 * the progress thread and closes the endpoint. */
void SMI_Finalize(SMI_Comm comm);

int SMI_Comm_rank(SMI_Comm comm);
int SMI_Comm_size(SMI_Comm comm);

/* Point to point. A channel carries exactly `count` elements; each call
 * moves one. Push blocks while the channel has no credits; Pop blocks until
 * the element is there. */
SMI_Channel SMI_Open_send_channel(int count, SMI_Datatype type, int destination, int port, SMI_Comm comm);
SMI_Channel SMI_Open_receive_channel(int count, SMI_Datatype type, int source, int port, SMI_Comm comm);
/* asynchronicity_degree: the receive buffer in packets (0 = 16). */
SMI_Channel SMI_Open_send_channel_ad(int count, SMI_Datatype type, int destination, int port, SMI_Comm comm,
				     int asynchronicity_degree);
SMI_Channel SMI_Open_receive_channel_ad(int count, SMI_Datatype type, int source, int port, SMI_Comm comm,
					int asynchronicity_degree);
void SMI_Push(SMI_Channel *chan, void *data);
/* immediate != 0: the partial message goes now. */
void SMI_Push_flush(SMI_Channel *chan, void *data, int immediate);
void SMI_Pop(SMI_Channel *chan, void *data);

/* Broadcast: every rank calls SMI_Bcast `count` times; the root's *data is
 * sent, the others' *data receives. */
SMI_BChannel SMI_Open_bcast_channel(int count, SMI_Datatype type, int port, int root, SMI_Comm comm);
SMI_BChannel SMI_Open_bcast_channel_ad(int count, SMI_Datatype type, int port, int root, SMI_Comm comm,
				       int asynchronicity_degree);
void SMI_Bcast(SMI_BChannel *chan, void *data);

/* Reduce: every rank calls SMI_Reduce `count` times; on the root, data_rcv
 * receives element i of the result on the i-th call. Identities: ADD 0, MIN
 * the type's maximum, MAX the type's lowest value. */
SMI_RChannel SMI_Open_reduce_channel(int count, SMI_Datatype type, SMI_Op op, int port, int root, SMI_Comm comm);
SMI_RChannel SMI_Open_reduce_channel_ad(int count, SMI_Datatype type, SMI_Op op, int port, int root,
					SMI_Comm comm, int asynchronicity_degree);
void SMI_Reduce(SMI_RChannel *chan, void *data_snd, void *data_rcv);

/* Scatter: the root calls SMI_Scatter send_count x ranks times (rank 0's
 * block first; its own block is copied from data_snd to data_rcv); every
 * other rank calls it recv_count times and receives into data_rcv. */
SMI_ScatterChannel SMI_Open_scatter_channel(int send_count, int recv_count, SMI_Datatype type, int port, int root,
					    SMI_Comm comm);
SMI_ScatterChannel SMI_Open_scatter_channel_ad(int send_count, int recv_count, SMI_Datatype type, int port,
					       int root, SMI_Comm comm, int asynchronicity_degree);
void SMI_Scatter(SMI_ScatterChannel *chan, void *data_snd, void *data_rcv);

/* Gather: a non-root calls SMI_Gather send_count times; the root calls it
 * recv_count x ranks times and receives rank 0's block, then rank 1's, ...
 * (its own block is copied from send_data). */
SMI_GatherChannel SMI_Open_gather_channel(int send_count, int recv_count, SMI_Datatype type, int port, int root,
					  SMI_Comm comm);
SMI_GatherChannel SMI_Open_gather_channel_ad(int send_count, int recv_count, SMI_Datatype type, int port,
					     int root, SMI_Comm comm, int asynchronicity_degree);
void SMI_Gather(SMI_GatherChannel *chan, void *send_data, void *rcv_data);

/* incxdp extensions. */

/* Bulk forms: n elements at once, the same as n single calls. */
void incxdp_smi_push_n(SMI_Channel *chan, const void *data, size_t n);
void incxdp_smi_pop_n(SMI_Channel *chan, void *data, size_t n);

struct incxdp_smi_stats {
	uint64_t frames_sent, frames_received, msgs_sent, msgs_received;
	uint64_t retransmits;       /* frames sent again after a timeout */
	uint64_t rx_high_water;     /* most element bytes ever buffered at once */
	uint64_t unacked_high_water; /* most frames ever waiting for an ack */
};
void incxdp_smi_get_stats(SMI_Comm comm, struct incxdp_smi_stats *out);
/* Cables between this rank and `rank` on the installed routes: 0 for this
 * rank, -1 if unreachable. */
int incxdp_smi_hops(SMI_Comm comm, int rank);

#ifdef __cplusplus
}
#endif

#endif
