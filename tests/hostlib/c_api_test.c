/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The C API from a C89 program: version, status texts, and every argument
 * and configuration error a caller can make, with its code and a message
 * naming what was wrong. Nothing is sent: collectives run in
 * tests/hostlib/c_api_e2e_test.cpp against the reference switch.
 * Exit status 0 when every check passed.
 */
#include <incxdp/incxdp.h>

#include <stdio.h>
#include <string.h>

static int g_checks, g_failures;

static void check(int ok, const char *what, int line)
{
	++g_checks;
	if (!ok) {
		++g_failures;
		fprintf(stderr, "FAIL c_api_test.c:%d: %s\n", line, what);
	}
}

static void check_status(incxdp_status_t got, incxdp_status_t want, const char *what, int line)
{
	++g_checks;
	if (got != want) {
		++g_failures;
		fprintf(stderr, "FAIL c_api_test.c:%d: %s: got %d (%s), want %d (%s); last error '%s'\n",
			line, what, (int)got, incxdp_strerror(got), (int)want, incxdp_strerror(want),
			incxdp_last_error(NULL));
	}
}

static void check_contains(const char *text, const char *part, const char *what, int line)
{
	++g_checks;
	if (!text || !strstr(text, part)) {
		++g_failures;
		fprintf(stderr, "FAIL c_api_test.c:%d: %s: '%s' does not contain '%s'\n", line, what,
			text ? text : "(null)", part);
	}
}

#define CHECK(cond) check((cond) != 0, #cond, __LINE__)
#define CHECK_STATUS(call, want) check_status((call), (want), #call, __LINE__)
#define CHECK_MSG(text, part) check_contains((text), (part), #text, __LINE__)

static const char *topo_path(const char *name)
{
	static char buf[4096];
	sprintf(buf, "%s/topo/topologies/%s", INCXDP_SOURCE_DIR, name);
	return buf;
}

static void test_version_and_strerror(void)
{
	char v[64];
	int a, b;
	sprintf(v, "%d.%d.%d", INCXDP_VERSION_MAJOR, INCXDP_VERSION_MINOR, INCXDP_VERSION_PATCH);
	CHECK(strcmp(v, INCXDP_VERSION_STRING) == 0);
	CHECK(strcmp(INCXDP_VERSION_STRING, INCXDP_PROJECT_VERSION) == 0);
	CHECK(strcmp(incxdp_version(), INCXDP_VERSION_STRING) == 0);
	CHECK(INCXDP_VERSION == INCXDP_VERSION_MAJOR * 10000 + INCXDP_VERSION_MINOR * 100 +
				       INCXDP_VERSION_PATCH);

	for (a = INCXDP_OK; a <= INCXDP_EFAILED; ++a) {
		const char *ta = incxdp_strerror((incxdp_status_t)a);
		CHECK(ta && ta[0] && strcmp(ta, "unknown status") != 0);
		for (b = a + 1; b <= INCXDP_EFAILED; ++b)
			CHECK(strcmp(ta, incxdp_strerror((incxdp_status_t)b)) != 0);
	}
	CHECK(strcmp(incxdp_strerror((incxdp_status_t)99), "unknown status") == 0);
	CHECK(strcmp(incxdp_strerror((incxdp_status_t)-1), "unknown status") == 0);
}

/* A topology config of star.yaml's job 1 (4 workers). */
static incxdp_config_t star(uint32_t rank)
{
	incxdp_config_t cfg;
	incxdp_config_init(&cfg);
	cfg.topology = topo_path("star.yaml");
	cfg.job = 1;
	cfg.rank = rank;
	return cfg;
}

static void test_create_errors(void)
{
	incxdp_config_t cfg;
	incxdp_comm_t *comm = (incxdp_comm_t *)&cfg; /* must become NULL */
	const char *missing = "/nonexistent/incxdp-c-api-test/no-such-topology.yaml";

	CHECK_STATUS(incxdp_comm_create(NULL, &comm), INCXDP_EINVAL);
	CHECK(comm == NULL);
	CHECK_MSG(incxdp_last_error(NULL), "config is NULL");

	incxdp_config_init(&cfg);
	CHECK(cfg.topology == NULL && cfg.window == 0 && cfg.publish_qpn == NULL);
	CHECK_STATUS(incxdp_comm_create(&cfg, NULL), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "out is NULL");

	cfg.topology = missing;
	comm = (incxdp_comm_t *)&cfg;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK(comm == NULL);
	CHECK_MSG(incxdp_last_error(NULL), missing);

	cfg = star(7);
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "star.yaml");
	CHECK_MSG(incxdp_last_error(NULL), "there is no rank 7");

	cfg = star(0);
	cfg.job = 99;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "star.yaml");
	CHECK_MSG(incxdp_last_error(NULL), "99");

	cfg = star(0);
	cfg.world_size = 3;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "job 1 has 4 ranks");

	cfg = star(0);
	cfg.transport = "carrier-pigeon";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "'carrier-pigeon'");

	cfg = star(0);
	cfg.transport = "roce";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "star job");

	cfg = star(0);
	cfg.wire = "morse";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "morse");

	cfg = star(0);
	cfg.flags = 0x100;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "unknown flags 0x100");

	cfg = star(0);
	cfg.verbs_device = "rxe0";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "need carrier verbs");

	cfg = star(0);
	cfg.verbs_ack_timeout = 3;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "need carrier verbs");

	cfg = star(0);
	cfg.window = 1u << 20; /* above the 14-bit slot index */
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "window 1048576");

	incxdp_config_init(&cfg);
	cfg.topology = topo_path("tree124.yaml");
	cfg.job = 1;
	cfg.transport = "udp";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "roce-tree job");

	/* Without a topology the addresses and the world size are required. */
	incxdp_config_init(&cfg);
	cfg.world_size = 2;
	cfg.switch_ip = "127.0.0.1";
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "local_ip");

	/* A star worker's address is not on this host (outside its netns). */
	cfg = star(0);
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_ESYSTEM);
	CHECK_MSG(incxdp_last_error(NULL), "bind");
	CHECK(comm == NULL);
}

/* A rank of two on loopback with no switch: enough for every argument check. */
static incxdp_comm_t *loopback(const char *wire)
{
	incxdp_config_t cfg;
	incxdp_comm_t *comm = NULL;
	incxdp_config_init(&cfg);
	cfg.world_size = 2;
	cfg.switch_ip = "127.0.0.1";
	cfg.local_ip = "127.0.0.1"; /* local_port 0: any free one */
	cfg.wire = wire;
	cfg.deadline_ms = 500;
	CHECK_STATUS(incxdp_comm_create(&cfg, &comm), INCXDP_OK);
	return comm;
}

static void test_comm_errors(void)
{
	int32_t a[8] = { 0 };
	float f[4] = { 1.0f, 2.0f, 0.0f, 4.0f };
	uint32_t v = 77;
	volatile float zero = 0.0f;
	incxdp_stats_t st;
	incxdp_comm_t *comm = loopback(NULL);
	if (!comm)
		return;

	CHECK_STATUS(incxdp_comm_rank(comm, &v), INCXDP_OK);
	CHECK(v == 0);
	CHECK_STATUS(incxdp_comm_size(comm, &v), INCXDP_OK);
	CHECK(v == 2);
	CHECK_STATUS(incxdp_comm_elems_per_packet(comm, &v), INCXDP_OK);
	CHECK(v == 832);
	CHECK_STATUS(incxdp_comm_rank(comm, NULL), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "rank is NULL");
	CHECK_STATUS(incxdp_comm_size(NULL, &v), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "comm is NULL");
	CHECK_MSG(incxdp_last_error(comm), "rank is NULL"); /* the comm's own, unchanged */

	CHECK_STATUS(incxdp_allreduce(NULL, a, a, 8, INCXDP_INT32, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_allreduce(comm, NULL, a, 8, INCXDP_INT32, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "send is NULL");
	CHECK_STATUS(incxdp_allreduce(comm, a, NULL, 8, INCXDP_INT32, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "recv is NULL");
	CHECK_STATUS(incxdp_allreduce(comm, a, a, 8, (incxdp_dtype_t)7, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "dtype 7");
	CHECK_STATUS(incxdp_allreduce(comm, a, a, 8, INCXDP_INT32, (incxdp_op_t)9), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "op 9");
	CHECK_STATUS(incxdp_allreduce(comm, a, a + 1, 4, INCXDP_INT32, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "overlap");
	f[2] = zero / zero; /* NaN: refused before anything is sent */
	CHECK_STATUS(incxdp_allreduce(comm, f, f, 4, INCXDP_FLOAT32, INCXDP_SUM), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_reduce(comm, a, a, 8, INCXDP_INT32, INCXDP_SUM, 2), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "root 2");
	CHECK_STATUS(incxdp_reduce(comm, a, NULL, 8, INCXDP_INT32, INCXDP_SUM, 0), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_reduce(comm, a, a, 8, (incxdp_dtype_t)2, INCXDP_SUM, 0), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_broadcast(comm, NULL, 8, INCXDP_INT32, 0), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "null buffer");
	CHECK_STATUS(incxdp_broadcast(comm, a, 8, (incxdp_dtype_t)-1, 0), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_barrier(NULL), INCXDP_EINVAL);
	/* count 0 sends nothing */
	CHECK_STATUS(incxdp_allreduce(comm, NULL, NULL, 0, INCXDP_FLOAT32, INCXDP_MAX), INCXDP_OK);

	CHECK_STATUS(incxdp_comm_stats(comm, (incxdp_stats_kind_t)5, &st), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "kind 5");
	CHECK_STATUS(incxdp_comm_stats(comm, INCXDP_STATS_TOTAL, NULL), INCXDP_EINVAL);
	memset(&st, 0xff, sizeof(st));
	CHECK_STATUS(incxdp_comm_stats(comm, INCXDP_STATS_TOTAL, &st), INCXDP_OK);
	CHECK(st.packets_sent == 0 && st.results == 0 && st.retransmissions == 0);
	CHECK_STATUS(incxdp_comm_interrupt(NULL), INCXDP_EINVAL);

	/* No slot was used: close sends nothing. Afterwards every call is refused. */
	CHECK_STATUS(incxdp_comm_close(comm), INCXDP_OK);
	CHECK_STATUS(incxdp_comm_close(comm), INCXDP_OK);
	CHECK_STATUS(incxdp_allreduce(comm, a, a, 8, INCXDP_INT32, INCXDP_SUM), INCXDP_ESTATE);
	CHECK_MSG(incxdp_last_error(comm), "closed");
	CHECK_STATUS(incxdp_barrier(comm), INCXDP_ESTATE);
	incxdp_comm_destroy(comm);
	incxdp_comm_destroy(NULL);
}

/* The collectives issue 28 added: argument checks and what is refused, all
 * before anything is sent. */
static void test_gather_scatter_avg_errors(void)
{
	int32_t a[8] = { 0 };
	float f[8] = { 0 };
	volatile float zero = 0.0f;
	incxdp_comm_t *comm = loopback(NULL);
	if (!comm)
		return;
	CHECK_STATUS(incxdp_allgather(NULL, a, a, 4, INCXDP_INT32), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(NULL), "comm is NULL");
	CHECK_STATUS(incxdp_allgather(comm, NULL, a, 4, INCXDP_INT32), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "send is NULL");
	CHECK_STATUS(incxdp_allgather(comm, a, a, 4, (incxdp_dtype_t)3), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "dtype 3");
	/* send overlaps recv but is not this rank's block of it */
	CHECK_STATUS(incxdp_allgather(comm, a + 1, a, 4, INCXDP_INT32), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "overlaps");
	CHECK_STATUS(incxdp_reduce_scatter(comm, a, NULL, 4, INCXDP_INT32, INCXDP_SUM),
		     INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "recv is NULL");
	CHECK_STATUS(incxdp_reduce_scatter(comm, a, a, 4, INCXDP_INT32, (incxdp_op_t)4),
		     INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "INCXDP_AVG (3)");
	/* int32 has no average (torch and NCCL refuse it too) */
	CHECK_STATUS(incxdp_allreduce(comm, a, a, 8, INCXDP_INT32, INCXDP_AVG), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "avg");
	CHECK_STATUS(incxdp_reduce_scatter(comm, a, a, 4, INCXDP_INT32, INCXDP_AVG), INCXDP_EINVAL);
	CHECK_MSG(incxdp_last_error(comm), "int32");
	f[3] = 1.0f / zero; /* infinite: refused before anything is sent */
	CHECK_STATUS(incxdp_reduce_scatter(comm, f, f, 4, INCXDP_FLOAT32, INCXDP_AVG), INCXDP_EINVAL);
	/* count 0 sends nothing */
	CHECK_STATUS(incxdp_allgather(comm, NULL, NULL, 0, INCXDP_FLOAT32), INCXDP_OK);
	CHECK_STATUS(incxdp_reduce_scatter(comm, NULL, NULL, 0, INCXDP_FLOAT32, INCXDP_AVG), INCXDP_OK);
	CHECK_STATUS(incxdp_comm_close(comm), INCXDP_OK);
	incxdp_comm_destroy(comm);
}

static void test_switchml_ops(void)
{
	int32_t a[4] = { 1, 2, 3, 4 };
	incxdp_comm_t *comm = loopback("switchml");
	if (!comm)
		return;
	CHECK_STATUS(incxdp_allreduce(comm, a, a, 4, INCXDP_INT32, INCXDP_MAX), INCXDP_ENOTSUP);
	CHECK_MSG(incxdp_last_error(comm), "SwitchML");
	CHECK_STATUS(incxdp_reduce(comm, a, a, 4, INCXDP_FLOAT32, INCXDP_MIN, 0), INCXDP_ENOTSUP);
	CHECK_MSG(incxdp_last_error(comm), "incxdp_reduce min");
	CHECK_STATUS(incxdp_reduce_scatter(comm, a, a, 2, INCXDP_INT32, INCXDP_MAX), INCXDP_ENOTSUP);
	CHECK_MSG(incxdp_last_error(comm), "incxdp_reduce_scatter max");
	CHECK_STATUS(incxdp_comm_elems_per_packet(comm, NULL), INCXDP_EINVAL);
	CHECK_STATUS(incxdp_comm_close(comm), INCXDP_OK);
	incxdp_comm_destroy(comm);
}

int main(void)
{
	test_version_and_strerror();
	test_create_errors();
	test_comm_errors();
	test_gather_scatter_avg_errors();
	test_switchml_ops();
	printf("c_api_test: %d checks, %d failed\n", g_checks, g_failures);
	return g_failures == 0 ? 0 : 1;
}
