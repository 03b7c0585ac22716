/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libincxdp's C API: the Communicator (incxdp/communicator.h) behind an
 * opaque handle, for C programs and for bindings of other languages
 * (docs/HOSTLIB.md "C API").
 *
 * C89 with <stddef.h>/<stdint.h>. Every function returns an incxdp_status_t
 * (or a value that cannot fail) and never lets a C++ exception out: a
 * failure's message is kept for incxdp_last_error(). A communicator is not
 * thread-safe, apart from incxdp_comm_interrupt(); use one per rank.
 */
#ifndef INCXDP_INCXDP_H
#define INCXDP_INCXDP_H

#include <stddef.h>
#include <stdint.h>

/* The project's version (CMake's project(incxdp VERSION ...)). */
#define INCXDP_VERSION_MAJOR 0
#define INCXDP_VERSION_MINOR 1
#define INCXDP_VERSION_PATCH 0
#define INCXDP_VERSION_STRING "0.1.0"
/* One number to compare in #if: 10000 * major + 100 * minor + patch. */
#define INCXDP_VERSION                                                                             \
	(INCXDP_VERSION_MAJOR * 10000 + INCXDP_VERSION_MINOR * 100 + INCXDP_VERSION_PATCH)

#ifdef __cplusplus
/* A C++ exception reaching this boundary would be a library bug: terminate. */
#define INCXDP_NOEXCEPT noexcept
extern "C" {
#else
#define INCXDP_NOEXCEPT
#endif

typedef enum incxdp_status {
	INCXDP_OK = 0,
	INCXDP_EINVAL = 1,    /* bad argument or configuration (the message names it) */
	INCXDP_ETIMEDOUT = 2, /* the switch made no progress before the deadline */
	INCXDP_ENOTSUP = 3,   /* not possible with this wire or this build */
	INCXDP_ESYSTEM = 4,   /* a system call failed: socket, bind, AF_XDP, device */
	INCXDP_EINTR = 5,     /* stopped by incxdp_comm_interrupt() */
	INCXDP_ESTATE = 6,    /* communicator closed, or unusable after a timeout/interrupt */
	INCXDP_ENOMEM = 7,    /* out of memory */
	INCXDP_EFAILED = 8    /* any other failure (a publish_qpn callback, a failed completion) */
} incxdp_status_t;

/* Element types; both are 4 bytes wide. */
typedef enum incxdp_dtype {
	INCXDP_INT32 = 0,  /* exact, wrapping 32-bit arithmetic like the switch */
	INCXDP_FLOAT32 = 1 /* quantised with a shared block exponent (docs/HOSTLIB.md 4) */
} incxdp_dtype_t;

/* INCXDP_AVG: float32 only (a sum divided by the world size on the host);
 * int32 AVG is INCXDP_EINVAL, as in torch and NCCL. */
typedef enum incxdp_op {
	INCXDP_SUM = 0,
	INCXDP_MAX = 1,
	INCXDP_MIN = 2,
	INCXDP_AVG = 3
} incxdp_op_t;

/* Opaque: one rank's communicator. */
typedef struct incxdp_comm incxdp_comm_t;

/* flags of incxdp_config_t */
#define INCXDP_CFG_NO_GSO 0x1u             /* udp: no UDP_SEGMENT on send */
#define INCXDP_CFG_UDP_GRO 0x2u            /* udp: UDP_GRO on receive */
#define INCXDP_CFG_XDP_TX_RING 0x4u        /* afxdp/roce: send through the tx ring, not live frames */
#define INCXDP_CFG_XDP_NO_FOLLOW_QUEUES 0x8u /* afxdp/roce: a socket on xdp_queue only */

/*
 * How a rank reaches the switch. Start from incxdp_config_init(); every
 * field left 0 or NULL keeps the topology's or the library's value.
 *
 * Main path: topology + job + rank (CommConfig::from_topology: addresses,
 * ports, world size, window, MTU and, for a roce-tree job, the RoCE
 * connection). Without a topology, world_size, switch_ip and local_ip are
 * required. Strings are copied; they need to live only during
 * incxdp_comm_create().
 */
typedef struct incxdp_config {
	const char *topology; /* topology file (YAML); NULL: the address fields below */
	uint32_t job;
	uint32_t rank;
	uint32_t world_size;   /* without topology: ranks in the job; with: must match or be 0 */
	const char *switch_ip; /* switch service address */
	uint16_t switch_port;  /* 0: the wire's (0xBEF0 native, 0xBEE0 SwitchML) */
	const char *local_ip;  /* this rank's address (bound) */
	uint16_t local_port;   /* this rank's UDP port (the switch's worker table) */
	/* The carrier: "auto", "socket", "af_xdp", "verbs", or the transport
	 * names "udp" (socket), "afxdp" (af_xdp), "roce" (roce over af_xdp).
	 * The topology's job decides the protocol (docs/HOSTLIB.md 5);
	 * without a topology, "roce" and "verbs" mean RoCEv2, else native.
	 * NULL: auto (roce-tree jobs: af_xdp). */
	const char *transport;
	const char *wire;      /* "native", "switchml" (SUM only); NULL: native */
	uint32_t window;       /* slots in flight, <= the job's slot pool */
	uint32_t elems_per_packet; /* 0: 832 native, 256 SwitchML, 512 roce (capped by mtu) */
	uint32_t mtu;              /* IP MTU of the link, checked against the packet size */
	uint32_t timeout_ms;       /* first retransmission timeout (20; roce trees 2) */
	uint32_t max_timeout_ms;   /* backoff doubles up to this (200; roce trees 500) */
	uint32_t deadline_ms;      /* no result at all for this long: INCXDP_ETIMEDOUT (30000) */
	uint32_t max_retries;      /* per packet; 0: unlimited (the deadline decides) */
	uint32_t batch;            /* datagrams per sendmmsg/recvmmsg or ring operation (64) */
	uint32_t flags;            /* INCXDP_CFG_* */
	const char *xdp_iface;     /* af_xdp: interface; NULL: the one holding local_ip */
	uint32_t xdp_queue;        /* af_xdp: rx queue of the first socket */
	const char *verbs_device;  /* verbs: "mlx5_0", "rxe0"; NULL: the one whose GID is local_ip */
	uint32_t verbs_ack_timeout; /* verbs: local ACK timeout 4.096 us * 2^t, <= 31; 0: 14 */
	/*
	 * verbs: called once with the QP number the device assigned, before
	 * anything is sent; must return only once the rank's leaf switch has it
	 * (`incxdp rules set-qpn`), 0 on success. Non-zero fails
	 * incxdp_comm_create() with INCXDP_EFAILED.
	 */
	int (*publish_qpn)(uint32_t qpn, void *user);
	void *publish_qpn_user;
} incxdp_config_t;

/* Which counters incxdp_comm_stats() returns. */
typedef enum incxdp_stats_kind {
	INCXDP_STATS_LAST = 0, /* the last collective */
	INCXDP_STATS_TOTAL = 1 /* every collective and close since create */
} incxdp_stats_kind_t;

/* CommStats (incxdp/communicator.h); roce-only counters stay 0 elsewhere. */
typedef struct incxdp_stats {
	uint64_t packets_sent; /* retransmissions included */
	uint64_t bytes_sent;   /* UDP payload bytes */
	uint64_t packets_received;
	uint64_t bytes_received;
	uint64_t results;          /* results accepted (one per step) */
	uint64_t retransmissions;  /* packets sent again (timeout, NAK or fast retransmit) */
	uint64_t fast_retransmits; /* roce: resent because later results came back */
	uint64_t timeouts;         /* retransmission timer expiries */
	uint64_t window_cuts;      /* roce, strict order: losses that halved the frames in flight */
	uint64_t duplicates;       /* results for an already finished step */
	uint64_t stale;            /* results of another call, set or slot */
	uint64_t malformed;        /* datagrams that are not a result for this job */
	uint64_t acks;             /* roce: ACKs from the switch */
	uint64_t naks;             /* roce: NAKs (PSN sequence errors) */
	uint64_t bad_icrc;         /* roce: frames with a wrong ICRC, dropped */
	uint64_t rx_dropped;       /* frames the kernel dropped for want of room (afxdp, roce) */
	double seconds;
} incxdp_stats_t;

/* INCXDP_VERSION_STRING of the library linked (may differ from the header's). */
const char *incxdp_version(void) INCXDP_NOEXCEPT;

/* A constant text for a status code ("unknown status" for others). */
const char *incxdp_strerror(incxdp_status_t code) INCXDP_NOEXCEPT;

/*
 * The message of the last failure: comm's last failed call, or with
 * comm == NULL the calling thread's (the only place incxdp_comm_create()
 * can leave it). "" if none; successes leave it alone. Valid until the next
 * failure on the same comm or thread.
 */
const char *incxdp_last_error(const incxdp_comm_t *comm) INCXDP_NOEXCEPT;

/* Zero every field: the topology's and the library's defaults. */
void incxdp_config_init(incxdp_config_t *cfg) INCXDP_NOEXCEPT;

/*
 * Validate cfg, open the carrier (socket: bind local_ip:local_port; af_xdp
 * needs root) and store the communicator in *out (NULL on failure).
 * Unknown topology files, jobs and ranks are INCXDP_EINVAL naming the file.
 */
incxdp_status_t incxdp_comm_create(const incxdp_config_t *cfg, incxdp_comm_t **out) INCXDP_NOEXCEPT;

/*
 * Collective: leave the switch's slots ready for a later communicator on the
 * same job (docs/HOSTLIB.md 3.5). Every rank calls it, then destroys.
 */
incxdp_status_t incxdp_comm_close(incxdp_comm_t *comm) INCXDP_NOEXCEPT;

/*
 * Free comm (NULL is a no-op). Without an earlier incxdp_comm_close() it
 * closes first, waiting at most 5 s for the other ranks; failures there are
 * printed to stderr.
 */
void incxdp_comm_destroy(incxdp_comm_t *comm) INCXDP_NOEXCEPT;

/*
 * The running or next collective of comm ends with INCXDP_EINTR; comm is
 * unusable afterwards. Async-signal-safe, callable from any thread.
 */
incxdp_status_t incxdp_comm_interrupt(incxdp_comm_t *comm) INCXDP_NOEXCEPT;

incxdp_status_t incxdp_comm_rank(const incxdp_comm_t *comm, uint32_t *rank) INCXDP_NOEXCEPT;
incxdp_status_t incxdp_comm_size(const incxdp_comm_t *comm, uint32_t *size) INCXDP_NOEXCEPT;
/* Elements per packet in use (float32 blocks share one exponent per packet). */
incxdp_status_t incxdp_comm_elems_per_packet(const incxdp_comm_t *comm,
					     uint32_t *elems) INCXDP_NOEXCEPT;
incxdp_status_t incxdp_comm_stats(const incxdp_comm_t *comm, incxdp_stats_kind_t kind,
				  incxdp_stats_t *out) INCXDP_NOEXCEPT;

/*
 * Collectives. Every rank calls the same sequence with the same count,
 * dtype, op and root. count 0 is a no-op. send == recv works in place;
 * otherwise the buffers must not overlap. int32 is bit-exact (wrapping sum),
 * float32 within docs/HOSTLIB.md 4.3's bound, NaN/Inf input is
 * INCXDP_EINVAL (before anything is sent). MAX/MIN on the SwitchML wire is
 * INCXDP_ENOTSUP.
 */
incxdp_status_t incxdp_allreduce(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
				 incxdp_dtype_t dtype, incxdp_op_t op) INCXDP_NOEXCEPT;
/* The allreduce's result on rank root only; other ranks may pass recv NULL. */
incxdp_status_t incxdp_reduce(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
			      incxdp_dtype_t dtype, incxdp_op_t op, uint32_t root) INCXDP_NOEXCEPT;
/* buf on every rank = buf of rank root, bit for bit. */
incxdp_status_t incxdp_broadcast(incxdp_comm_t *comm, void *buf, size_t count,
				 incxdp_dtype_t dtype, uint32_t root) INCXDP_NOEXCEPT;
/* Returns once every rank entered it. */
incxdp_status_t incxdp_barrier(incxdp_comm_t *comm) INCXDP_NOEXCEPT;
/*
 * recv (world_size * count elements) = every rank's send, rank r's at
 * recv + r * count; bit for bit for any dtype. In place: send ==
 * recv + rank * count.
 */
incxdp_status_t incxdp_allgather(incxdp_comm_t *comm, const void *send, void *recv, size_t count,
				 incxdp_dtype_t dtype) INCXDP_NOEXCEPT;
/*
 * send has world_size * count elements; recv (count) = op over all ranks of
 * this rank's block send[rank * count .. (rank + 1) * count).
 */
incxdp_status_t incxdp_reduce_scatter(incxdp_comm_t *comm, const void *send, void *recv,
				      size_t count, incxdp_dtype_t dtype,
				      incxdp_op_t op) INCXDP_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* INCXDP_INCXDP_H */
