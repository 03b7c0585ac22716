/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * An SMI program (C, against incxdp/smi.h only) that checks value by value
 * what SMI promises; started once per rank by `incxdp smi run`. Modes:
 *   p2p       every type, lengths 1..10000, to a 1-hop and a far rank at
 *             once (two ports, a sender and a receiver thread each)
 *   coll      bcast, reduce (ADD/MAX/MIN), scatter, gather: several roots,
 *             types and lengths
 *   pipeline  through every rank in order, then a broadcast of the result
 *   slow      a receiver that sleeps: nothing lost, buffers bounded
 *   all       the four in turn
 * Several modes may be given; they run in order.
 * Exits 1 naming the first mismatch.
 */
#include <incxdp/smi.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static SMI_Comm comm;
static int rank, nranks;

#define FAIL(...)                                                                 \
	do {                                                                      \
		fprintf(stderr, "rank %d: ", rank);                               \
		fprintf(stderr, __VA_ARGS__);                                     \
		fprintf(stderr, "\n");                                            \
		exit(1);                                                          \
	} while (0)

static const SMI_Datatype types[] = {SMI_INT, SMI_FLOAT, SMI_DOUBLE, SMI_CHAR, SMI_SHORT};
static void run_bulk_mix(void);
static const char *type_names[] = {"?", "int", "float", "double", "char", "short"};


/* Element i from rank src of a stream tagged `tag`: a value every type holds
 * exactly, negative half of the time. */
static long val(int src, long i, int tag)
{
	long v = (src * 131 + i * 7 + tag * 17) % 101;
	return (i + src) % 2 ? -v : v;
}

static void put(SMI_Datatype t, void *p, long v)
{
	switch (t) {
	case SMI_INT: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
	case SMI_FLOAT: { float x = (float)v + 0.5f; memcpy(p, &x, 4); break; }
	case SMI_DOUBLE: { double x = (double)v + 0.25; memcpy(p, &x, 8); break; }
	case SMI_CHAR: { char x = (char)v; memcpy(p, &x, 1); break; }
	case SMI_SHORT: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
	}
}

static double get(SMI_Datatype t, const void *p)
{
	switch (t) {
	case SMI_INT: { int32_t x; memcpy(&x, p, 4); return x; }
	case SMI_FLOAT: { float x; memcpy(&x, p, 4); return x; }
	case SMI_DOUBLE: { double x; memcpy(&x, p, 8); return x; }
	case SMI_CHAR: { char x; memcpy(&x, p, 1); return x; }
	case SMI_SHORT: { int16_t x; memcpy(&x, p, 2); return x; }
	}
	return 0;
}

static double expect(SMI_Datatype t, long v)
{
	char b[8];
	put(t, b, v);
	return get(t, b);
}

/* ---- point to point ---- */

struct p2p_job {
	SMI_Datatype t;
	int len, peer, port, tag;
};

static void *p2p_send(void *arg)
{
	struct p2p_job *j = arg;
	SMI_Channel ch = SMI_Open_send_channel(j->len, j->t, j->peer, j->port, comm);
	char b[8];
	for (long i = 0; i < j->len; i++) {
		put(j->t, b, val(rank, i, j->tag));
		SMI_Push(&ch, b);
	}
	return NULL;
}

static void *p2p_recv(void *arg)
{
	struct p2p_job *j = arg;
	SMI_Channel ch = SMI_Open_receive_channel(j->len, j->t, j->peer, j->port, comm);
	char b[8];
	for (long i = 0; i < j->len; i++) {
		SMI_Pop(&ch, b);
		if (get(j->t, b) != expect(j->t, val(j->peer, i, j->tag)))
			FAIL("p2p %s len %d from %d port %d: element %ld is %g, expected %g", type_names[j->t],
			     j->len, j->peer, j->port, i, get(j->t, b), expect(j->t, val(j->peer, i, j->tag)));
	}
	return NULL;
}

static void run_p2p(void)
{
	static const int lens[] = {1, 2, 6, 7, 8, 29, 100, 1000, 10000};
	/* 1 hop: the other FPGA of the node in SMI's cluster (rank ^ 1); far:
	 * rank + 5 (3 hops on the torus, up to 7 on the chain). */
	int near = (rank ^ 1) < nranks ? (rank ^ 1) : rank;
	int far_to = (rank + 5) % nranks, far_from = (rank + nranks - 5) % nranks;
	/* The routes the launcher installed: rank ^ 1 is a neighbour on every
	 * shipped cabling, and every rank is reachable. */
	if (incxdp_smi_hops(comm, rank) != 0 || incxdp_smi_hops(comm, near) != 1)
		FAIL("hops: %d to itself, %d to neighbour %d", incxdp_smi_hops(comm, rank),
		     incxdp_smi_hops(comm, near), near);
	for (int r = 0; r < nranks; r++)
		if (r != rank && (incxdp_smi_hops(comm, r) < 1 || incxdp_smi_hops(comm, r) >= nranks))
			FAIL("hops: %d to rank %d", incxdp_smi_hops(comm, r), r);
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
			int tag = (int)(ti * 16 + li);
			struct p2p_job js[4] = {
				{types[ti], lens[li], near, 1, tag},
				{types[ti], lens[li], near, 1, tag},
				{types[ti], lens[li], far_to, 2, tag},
				{types[ti], lens[li], far_from, 2, tag},
			};
			if (near == rank)
				FAIL("p2p needs an even number of ranks");
			pthread_t th[4];
			pthread_create(&th[0], NULL, p2p_send, &js[0]);
			pthread_create(&th[1], NULL, p2p_recv, &js[1]);
			pthread_create(&th[2], NULL, p2p_send, &js[2]);
			pthread_create(&th[3], NULL, p2p_recv, &js[3]);
			for (int k = 0; k < 4; k++)
				pthread_join(th[k], NULL);
		}
	/* The bulk forms and an explicit flush. */
	int n = 5000;
	int *buf = malloc(n * sizeof(int));
	if (rank == 0) {
		for (int i = 0; i < n; i++)
			buf[i] = i * 3 - 7;
		SMI_Channel ch = SMI_Open_send_channel(n + 1, SMI_INT, 1, 3, comm);
		incxdp_smi_push_n(&ch, buf, n);
		int last = 42;
		SMI_Push_flush(&ch, &last, 1);
	} else if (rank == 1) {
		SMI_Channel ch = SMI_Open_receive_channel(n + 1, SMI_INT, 0, 3, comm);
		incxdp_smi_pop_n(&ch, buf, n);
		for (int i = 0; i < n; i++)
			if (buf[i] != i * 3 - 7)
				FAIL("bulk: element %d is %d", i, buf[i]);
		int last;
		SMI_Pop(&ch, &last);
		if (last != 42)
			FAIL("bulk: last element is %d", last);
	}
	free(buf);
	run_bulk_mix();
}

/* Element e of the bulk mix, as the bytes of the type (chars wrap). */
static void mix_value(SMI_Datatype t, int e, void *out)
{
	switch (t) {
	case SMI_INT:
		*(int32_t *)out = e * 7 - 3;
		break;
	case SMI_FLOAT:
		*(float *)out = (float)e + 0.5f;
		break;
	case SMI_DOUBLE:
		*(double *)out = e * 0.25 - 9;
		break;
	case SMI_CHAR:
		*(char *)out = (char)(e * 5 + 1);
		break;
	case SMI_SHORT:
		*(int16_t *)out = (int16_t)(e * 3 - 1000);
		break;
	}
}

/*
 * Bulk and single calls mixed on one channel, rank 3 -> rank 6 (3 hops on
 * the torus), every type: the sender pushes runs of 1 to 39 elements, every
 * third a flushed single element (a partial message), through a one-packet
 * buffer (credits end runs mid-message) and an eager channel; the receiver
 * pops runs of other lengths across message boundaries.
 */
static void run_bulk_mix(void)
{
	const int n = 3001, src = 3, dst = nranks > 6 ? 6 : nranks - 1;
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
		for (int ad = 1; ad >= -4; ad -= 5) {
			SMI_Datatype t = types[ti];
			int sz = t == SMI_DOUBLE ? 8 : t == SMI_SHORT ? 2 : t == SMI_CHAR ? 1 : 4;
			int port = 20 + 2 * (int)ti + (ad < 0);
			unsigned char *buf = malloc((size_t)n * sz), *want = malloc((size_t)n * sz);
			for (int e = 0; e < n; e++)
				mix_value(t, e, want + (size_t)e * sz);
			if (rank == src) {
				SMI_Channel ch = SMI_Open_send_channel_ad(n, t, dst, port, comm, ad);
				for (int e = 0, run = 1; e < n; run++) {
					int k = run % 3 == 0 ? 1 : run % 40;
					if (k > n - e)
						k = n - e;
					if (run % 3 == 0)
						SMI_Push_flush(&ch, want + (size_t)e * sz, 1);
					else
						incxdp_smi_push_n(&ch, want + (size_t)e * sz, (size_t)k);
					e += k;
				}
			} else if (rank == dst) {
				SMI_Channel ch = SMI_Open_receive_channel_ad(n, t, src, port, comm, ad);
				for (int e = 0, run = 1; e < n; run++) {
					int k = (run * 13) % 57 + 1;
					if (k > n - e)
						k = n - e;
					if (k == 1)
						SMI_Pop(&ch, buf + (size_t)e * sz);
					else
						incxdp_smi_pop_n(&ch, buf + (size_t)e * sz, (size_t)k);
					e += k;
				}
				for (int e = 0; e < n; e++)
					if (memcmp(buf + (size_t)e * sz, want + (size_t)e * sz, sz))
						FAIL("bulk mix %s ad %d: element %d differs", type_names[t], ad, e);
			}
			free(buf);
			free(want);
		}
}

/* ---- collectives ---- */

static double fold(SMI_Op op, double a, double b)
{
	if (op == SMI_ADD)
		return a + b;
	if (op == SMI_MAX)
		return b > a ? b : a;
	return b < a ? b : a;
}

static void run_coll(void)
{
	/* MAX over values that are all negative: the identity must be the
	 * type's lowest value (FLT_MIN, a tiny positive, would win). */
	SMI_RChannel neg = SMI_Open_reduce_channel(1, SMI_FLOAT, SMI_MAX, 14, 0, comm);
	float mine = -1.5f - (float)rank, got = 0;
	SMI_Reduce(&neg, &mine, &got);
	if (rank == 0 && got != -1.5f)
		FAIL("reduce float MAX of negatives: %g, expected -1.5", got);

	static const int roots[] = {0, 3, 7};
	static const int lens[] = {1, 9, 500};
	char b[8], r[8];
	for (size_t ri = 0; ri < 3; ri++)
		for (size_t ti = 0; ti < 5; ti++)
			for (size_t li = 0; li < 3; li++) {
				int root = roots[ri] % nranks, len = lens[li];
				SMI_Datatype t = types[ti];
				int tag = (int)(ri * 100 + ti * 10 + li);
				/* Broadcast. */
				SMI_BChannel bc = SMI_Open_bcast_channel(len, t, 10, root, comm);
				for (long i = 0; i < len; i++) {
					put(t, b, val(root, i, tag));
					if (rank != root)
						memset(b, 0, 8);
					SMI_Bcast(&bc, b);
					if (get(t, b) != expect(t, val(root, i, tag)))
						FAIL("bcast %s len %d root %d: element %ld is %g", type_names[t], len, root,
						     i, get(t, b));
				}
				/* Reduce, every op. Values are small, so sums stay exact in
				 * every type (chars: |sum| <= 8 * 6). */
				for (int op = SMI_ADD; op <= SMI_MIN; op++) {
					SMI_RChannel rc = SMI_Open_reduce_channel(len, t, (SMI_Op)op, 11, root, comm);
					for (long i = 0; i < len; i++) {
						long mine = val(rank, i, tag) / (t == SMI_CHAR ? 16 : 1);
						put(t, b, mine);
						SMI_Reduce(&rc, b, r);
						if (rank != root)
							continue;
						double want = expect(t, val(0, i, tag) / (t == SMI_CHAR ? 16 : 1));
						for (int s = 1; s < nranks; s++)
							want = fold((SMI_Op)op, want,
								    expect(t, val(s, i, tag) / (t == SMI_CHAR ? 16 : 1)));
						if (get(t, r) != want)
							FAIL("reduce %s op %d len %d root %d: element %ld is %g, expected %g",
							     type_names[t], op, len, root, i, get(t, r), want);
					}
				}
				/* Scatter: block k of the root's data to rank k. */
				SMI_ScatterChannel sc = SMI_Open_scatter_channel(len, len, t, 12, root, comm);
				if (rank == root) {
					for (long i = 0; i < (long)len * nranks; i++) {
						put(t, b, val(root, i, tag));
						memset(r, 0, 8);
						SMI_Scatter(&sc, b, r);
						if (i / len == rank && get(t, r) != expect(t, val(root, i, tag)))
							FAIL("scatter root's own block: element %ld", i);
					}
				} else {
					for (long i = 0; i < len; i++) {
						SMI_Scatter(&sc, b, r);
						long k = (long)rank * len + i;
						if (get(t, r) != expect(t, val(root, k, tag)))
							FAIL("scatter %s len %d root %d: element %ld is %g, expected %g",
							     type_names[t], len, root, i, get(t, r), expect(t, val(root, k, tag)));
					}
				}
				/* Gather: rank k's block is block k at the root. */
				SMI_GatherChannel gc = SMI_Open_gather_channel(len, len, t, 13, root, comm);
				if (rank == root) {
					for (long i = 0; i < (long)len * nranks; i++) {
						int src = (int)(i / len);
						put(t, b, val(rank, i % len, tag + 1));
						SMI_Gather(&gc, b, r);
						if (get(t, r) != expect(t, val(src, i % len, tag + 1)))
							FAIL("gather %s len %d root %d: element %ld (rank %d) is %g, expected %g",
							     type_names[t], len, root, i, src, get(t, r),
							     expect(t, val(src, i % len, tag + 1)));
					}
				} else {
					for (long i = 0; i < len; i++) {
						put(t, b, val(rank, i, tag + 1));
						SMI_Gather(&gc, b, r);
					}
				}
			}
}

/* ---- pipeline, then broadcast ---- */

static void run_pipeline(void)
{
	const int n = 3000;
	int64_t sum = 0;
	if (nranks < 2)
		return;
	SMI_Channel in, out;
	if (rank > 0)
		in = SMI_Open_receive_channel(n, SMI_INT, rank - 1, 20, comm);
	if (rank < nranks - 1)
		out = SMI_Open_send_channel(n, SMI_INT, rank + 1, 20, comm);
	for (int i = 0; i < n; i++) {
		int v = i;
		if (rank > 0)
			SMI_Pop(&in, &v);
		v += rank;
		if (rank < nranks - 1)
			SMI_Push(&out, &v);
		else {
			if (v != i + nranks * (nranks - 1) / 2)
				FAIL("pipeline: element %d is %d", i, v);
			sum += v;
		}
	}
	double d = (double)sum;
	SMI_BChannel bc = SMI_Open_bcast_channel(1, SMI_DOUBLE, 21, nranks - 1, comm);
	SMI_Bcast(&bc, &d);
	double want = (double)n * (n - 1) / 2 + (double)n * nranks * (nranks - 1) / 2;
	if (d != want)
		FAIL("pipeline broadcast: %g, expected %g", d, want);
}

/* ---- slow receiver ---- */

static void run_slow(void)
{
	const int n = 20000;
	int from = 0, to = nranks > 5 ? 5 : nranks - 1;
	if (rank == from) {
		SMI_Channel ch = SMI_Open_send_channel(n, SMI_INT, to, 30, comm);
		for (int i = 0; i < n; i++)
			SMI_Push(&ch, &i);
	} else if (rank == to) {
		SMI_Channel ch = SMI_Open_receive_channel(n, SMI_INT, from, 30, comm);
		struct timespec ms = {0, 1000000};
		nanosleep(&(struct timespec){0, 300000000}, NULL); /* the sender fills what it may */
		for (int i = 0; i < n; i++) {
			int v;
			SMI_Pop(&ch, &v);
			if (v != i)
				FAIL("slow: element %d is %d", i, v);
			if (i % 500 == 0)
				nanosleep(&ms, NULL);
		}
		struct incxdp_smi_stats st;
		incxdp_smi_get_stats(comm, &st);
		/* One stream of 16 packets' worth of elements (the default
		 * asynchronicity degree) is all the receiver may ever hold: 16
		 * messages and the one being popped, whose popped elements were
		 * already returned as credits. */
		if (st.rx_high_water > (16 + 1) * 32)
			FAIL("slow: %llu bytes buffered at once, more than the channel's 16 packets + 1",
			     (unsigned long long)st.rx_high_water);
		printf("rank %d: slow receiver: %d elements, high water %llu bytes\n", rank, n,
		       (unsigned long long)st.rx_high_water);
	}
}

int main(int argc, char **argv)
{
	comm = SMI_Init(&argc, &argv);
	rank = SMI_Comm_rank(comm);
	nranks = SMI_Comm_size(comm);
	const char *mode = argc > 1 ? argv[1] : "all";
	for (int a = 1; a < (argc > 1 ? argc : 2); a++) {
		const char *m = argc > 1 ? argv[a] : "all";
		int all = strcmp(m, "all") == 0;
		if (all || strcmp(m, "slow") == 0)
			run_slow();
		if (all || strcmp(m, "p2p") == 0)
			run_p2p();
		if (all || strcmp(m, "coll") == 0)
			run_coll();
		if (all || strcmp(m, "pipeline") == 0)
			run_pipeline();
	}
	struct incxdp_smi_stats st;
	incxdp_smi_get_stats(comm, &st);
	printf("rank %d/%d %s ok: %llu frames sent, %llu received, %llu resent\n", rank, nranks,
	       mode, (unsigned long long)st.frames_sent, (unsigned long long)st.frames_received,
	       (unsigned long long)st.retransmits);
	SMI_Finalize(comm);
	return 0;
}
