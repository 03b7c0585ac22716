/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SMI timings for scripts/bench-smi (not a test). Started by `incxdp smi
 * run` on every rank; rank 0 prints one JSON line per measurement.
 *   pingpong ITERS   rank 0 <-> rank k for every k: one int each way
 *   bw N             rank 0 -> rank 1: N ints element by element, then bulk,
 *                    with the default channel buffer (16 packets), then 1024
 *   coll N ITERS     bcast and reduce of N floats from root 0
 */
#include <incxdp/smi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	SMI_Comm comm = SMI_Init(&argc, &argv);
	int rank = SMI_Comm_rank(comm), n = SMI_Comm_size(comm);
	const char *mode = argc > 1 ? argv[1] : "pingpong";
	if (strcmp(mode, "pingpong") == 0) {
		int iters = argc > 2 ? atoi(argv[2]) : 1000;
		/* Untimed round trips first: the first ones fault in buffers and caches. */
		int warm = iters / 5;
		double *lat = malloc(iters * sizeof(double));
		for (int k = 1; k < n; k++) {
			int port = k;
			if (rank == 0) {
				SMI_Channel s = SMI_Open_send_channel(warm + iters, SMI_INT, k, port, comm);
				SMI_Channel r = SMI_Open_receive_channel(warm + iters, SMI_INT, k, port, comm);
				for (int i = -warm; i < iters; i++) {
					double t0 = now_us();
					int v = i;
					/* One element is a partial message: it goes only flushed. */
					SMI_Push_flush(&s, &v, 1);
					SMI_Pop(&r, &v);
					if (i >= 0)
						lat[i] = now_us() - t0;
				}
				qsort(lat, iters, sizeof(double), cmp);
				/* Per hop: half the round trip, as SMI measures latency. */
				printf("{\"bench\":\"pingpong\",\"peer\":%d,\"hops\":%d,\"rtt_p50_us\":%.1f,"
				       "\"rtt_p99_us\":%.1f,\"half_rtt_p50_us\":%.1f,\"half_rtt_p99_us\":%.1f}\n",
				       k, incxdp_smi_hops(comm, k), lat[iters / 2], lat[iters * 99 / 100],
				       lat[iters / 2] / 2, lat[iters * 99 / 100] / 2);
				fflush(stdout);
			} else if (rank == k) {
				SMI_Channel r = SMI_Open_receive_channel(warm + iters, SMI_INT, 0, port, comm);
				SMI_Channel s = SMI_Open_send_channel(warm + iters, SMI_INT, 0, port, comm);
				for (int i = 0; i < warm + iters; i++) {
					int v;
					SMI_Pop(&r, &v);
					SMI_Push_flush(&s, &v, 1);
				}
			}
		}
		/* Ranks not measured wait here rather than finalizing (and
		 * exiting) while rank 0 measures the first peers. */
		int done = 1;
		if (rank == 0) {
			for (int k = 1; k < n; k++) {
				SMI_Channel d = SMI_Open_send_channel(1, SMI_INT, k, 250, comm);
				SMI_Push(&d, &done);
			}
		} else {
			SMI_Channel d = SMI_Open_receive_channel(1, SMI_INT, 0, 250, comm);
			SMI_Pop(&d, &done);
		}
		free(lat);
	} else if (strcmp(mode, "bw") == 0) {
		int cnt = argc > 2 ? atoi(argv[2]) : 1000000;
		int *buf = calloc(cnt, sizeof(int));
		for (int run = 0; run < 4; run++) {
			int bulk = run % 2, ad = run < 2 ? 0 : 1024, port = 40 + 4 * run;
			double t0 = now_us();
			if (rank == 0) {
				SMI_Channel s = SMI_Open_send_channel_ad(cnt, SMI_INT, 1, port, comm, ad);
				if (bulk)
					incxdp_smi_push_n(&s, buf, cnt);
				else
					for (int i = 0; i < cnt; i++)
						SMI_Push(&s, &buf[i]);
				SMI_Channel a = SMI_Open_receive_channel(1, SMI_INT, 1, port + 2, comm);
				int ack;
				SMI_Pop(&a, &ack);
				double us = now_us() - t0;
				printf("{\"bench\":\"bandwidth\",\"bulk\":%s,\"async_degree\":%d,\"ints\":%d,"
				       "\"MB_per_s\":%.1f,\"M_elems_per_s\":%.2f}\n",
				       bulk ? "true" : "false", ad ? ad : 16, cnt, cnt * 4.0 / us, cnt / us);
				fflush(stdout);
			} else if (rank == 1) {
				SMI_Channel r = SMI_Open_receive_channel_ad(cnt, SMI_INT, 0, port, comm, ad);
				if (bulk)
					incxdp_smi_pop_n(&r, buf, cnt);
				else
					for (int i = 0; i < cnt; i++)
						SMI_Pop(&r, &buf[i]);
				SMI_Channel a = SMI_Open_send_channel(1, SMI_INT, 0, port + 2, comm);
				int ack = 1;
				SMI_Push(&a, &ack);
			}
		}
		free(buf);
	} else if (strcmp(mode, "coll") == 0) {
		int cnt = argc > 2 ? atoi(argv[2]) : 10000, iters = argc > 3 ? atoi(argv[3]) : 5;
		double tb = 0, tr = 0;
		for (int it = 0; it < iters; it++) {
			double t0 = now_us();
			SMI_BChannel b = SMI_Open_bcast_channel(cnt, SMI_FLOAT, 50, 0, comm);
			for (int i = 0; i < cnt; i++) {
				float v = (float)i;
				SMI_Bcast(&b, &v);
			}
			double t1 = now_us();
			SMI_RChannel r = SMI_Open_reduce_channel(cnt, SMI_FLOAT, SMI_ADD, 51, 0, comm);
			for (int i = 0; i < cnt; i++) {
				float v = 1.0f, out;
				SMI_Reduce(&r, &v, &out);
			}
			tb += t1 - t0;
			tr += now_us() - t1;
		}
		if (rank == 0)
			printf("{\"bench\":\"collectives\",\"ranks\":%d,\"floats\":%d,\"bcast_ms\":%.2f,\"reduce_ms\":%.2f}\n",
			       n, cnt, tb / iters / 1e3, tr / iters / 1e3);
	}
	SMI_Finalize(comm);
	return 0;
}
