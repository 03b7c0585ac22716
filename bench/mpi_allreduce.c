// SPDX-License-Identifier: BSD-2-Clause
/*
 * mpi-allreduce: the OpenMPI baseline of docs/BENCH.md, an OSU-style
 * MPI_Allreduce sweep. Per size: warm-up, then timed iterations, each one
 * MPI_Barrier + MPI_Allreduce timed by every rank on its own clock; rank 0
 * reports the median of its own times (as incxdp-bench and gloo-allreduce
 * do), as a table or, with -j, one JSON object.
 *
 *   mpi-allreduce [-j] [--dtype int32|float32] [--sizes 4K,1M,...]
 *                 [--iters N] [--warmup N]
 */
#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

struct options {
	int json;
	int use_float;
	int nsizes;
	uint64_t sizes[MAX_SIZES];
	int iters;
	int warmup;
};

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	int shift = 0;
	switch (tolower((unsigned char)*end)) {
	case 'k': shift = 10; end++; break;
	case 'm': shift = 20; end++; break;
	case 'g': shift = 30; end++; break;
	}
	/* "KiB", "KB", "K" all mean 1024 */
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end || n == 0 || (n << shift) % 4)
		return -1;
	*out = (uint64_t)n << shift;
	return 0;
}

static int parse_sizes(const char *list, struct options *o)
{
	char *copy = strdup(list), *save = NULL;
	o->nsizes = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->nsizes == MAX_SIZES || parse_size(t, &o->sizes[o->nsizes]) < 0) {
			free(copy);
			return -1;
		}
		o->nsizes++;
	}
	free(copy);
	return o->nsizes ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	*o = (struct options){.iters = 10, .warmup = 2};
	if (parse_sizes("4K,64K,1M,16M,64M", o) < 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-j") || !strcmp(a, "--json")) {
			o->json = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "mpi-allreduce: %s: unknown option or missing value\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--sizes")) {
			if (parse_sizes(v, o) < 0) {
				fprintf(stderr, "mpi-allreduce: --sizes '%s': expected e.g. 4K,1M,64M "
						"(multiples of 4, at most %d)\n", v, MAX_SIZES);
				return -1;
			}
		} else if (!strcmp(a, "--dtype")) {
			if (strcmp(v, "int32") && strcmp(v, "float32")) {
				fprintf(stderr, "mpi-allreduce: --dtype: int32 or float32\n");
				return -1;
			}
			o->use_float = !strcmp(v, "float32");
		} else if (!strcmp(a, "--iters") || !strcmp(a, "--warmup")) {
			int is_iters = !strcmp(a, "--iters");
			int n = atoi(v);
			if (n < is_iters || n > 1000000) {
				fprintf(stderr, "mpi-allreduce: %s %s: out of range\n", a, v);
				return -1;
			}
			*(is_iters ? &o->iters : &o->warmup) = n;
		} else {
			fprintf(stderr, "mpi-allreduce: unknown option %s\n", a);
			return -1;
		}
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static const char *human_size(uint64_t b, char *buf, size_t len)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB"};
	int u = 0;
	while (u < 3 && b >= 1024 && b % 1024 == 0) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, "%llu %s", (unsigned long long)b, units[u]);
	return buf;
}

int main(int argc, char **argv)
{
	struct options o;
	int rank, world;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	if (parse_args(argc, argv, &o) < 0) {
		MPI_Finalize();
		return 2;
	}

	uint64_t largest = 0;
	for (int i = 0; i < o.nsizes; i++)
		largest = o.sizes[i] > largest ? o.sizes[i] : largest;
	/* Separate send and receive buffers: the input stays the same. */
	char *sendbuf = malloc(largest), *recvbuf = malloc(largest);
	double *times = malloc(sizeof(double) * (size_t)o.iters);
	if (!sendbuf || !recvbuf || !times) {
		fprintf(stderr, "mpi-allreduce: rank %d: out of memory for %llu bytes\n", rank,
			(unsigned long long)largest);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (o.use_float)
		for (uint64_t i = 0; i < largest / 4; i++)
			((float *)sendbuf)[i] = 1.0f / (float)(1 + (i & 1023));
	else
		for (uint64_t i = 0; i < largest / 4; i++)
			((int32_t *)sendbuf)[i] = (int32_t)(i * 2654435761u + (uint32_t)rank);
	memset(recvbuf, 0, largest);

	MPI_Datatype type = o.use_float ? MPI_FLOAT : MPI_INT32_T;
	char sz[32];
	if (rank == 0 && !o.json) {
		printf("mpi-allreduce: %d ranks, %s sum, %d warm-up + %d iterations\n", world,
		       o.use_float ? "float32" : "int32", o.warmup, o.iters);
		printf("%10s  %14s  %12s\n", "size", "time (median)", "algbw");
		fflush(stdout);
	}
	double *median = malloc(sizeof(double) * (size_t)o.nsizes);
	double *minimum = malloc(sizeof(double) * (size_t)o.nsizes);
	for (int s = 0; s < o.nsizes; s++) {
		/* MPI counts are int: 1 GiB of 4-byte elements is 2^28, fine */
		int count = (int)(o.sizes[s] / 4);
		for (int it = 0; it < o.warmup + o.iters; it++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			MPI_Allreduce(sendbuf, recvbuf, count, type, MPI_SUM, MPI_COMM_WORLD);
			double t = MPI_Wtime() - t0;
			if (it >= o.warmup)
				times[it - o.warmup] = t;
		}
		qsort(times, (size_t)o.iters, sizeof(double), cmp_double);
		int n = o.iters;
		median[s] = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
		minimum[s] = times[0];
		if (rank == 0 && !o.json) {
			printf("%10s  %11.3f ms  %7.1f MB/s\n", human_size(o.sizes[s], sz, sizeof(sz)),
			       median[s] * 1e3, (double)o.sizes[s] / median[s] / 1e6);
			fflush(stdout);
		}
	}
	if (rank == 0 && o.json) {
		printf("{\"system\":\"openmpi\",\"world_size\":%d,\"dtype\":\"%s\",\"op\":\"sum\","
		       "\"warmup\":%d,\"iters\":%d,\"rows\":[",
		       world, o.use_float ? "float32" : "int32", o.warmup, o.iters);
		for (int s = 0; s < o.nsizes; s++)
			printf("%s{\"size\":%llu,\"median_s\":%.9g,\"min_s\":%.9g,\"algbw_MBps\":%.6g}",
			       s ? "," : "", (unsigned long long)o.sizes[s], median[s], minimum[s],
			       (double)o.sizes[s] / median[s] / 1e6);
		printf("]}\n");
		fflush(stdout);
	}
	free(median);
	free(minimum);
	free(times);
	free(sendbuf);
	free(recvbuf);
	MPI_Finalize();
	return 0;
}
