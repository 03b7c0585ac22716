/* SPDX-License-Identifier: BSD-2-Clause */
/* Built against an installed incxdp, outside the source tree: the C API's
 * calls that need neither root nor a switch. */
#include <incxdp/incxdp.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
	incxdp_config_t cfg;
	incxdp_comm_t *comm = (incxdp_comm_t *)&cfg; /* must come back NULL */
	incxdp_status_t st;

	if (strcmp(incxdp_version(), INCXDP_VERSION_STRING) != 0) {
		fprintf(stderr, "library %s, header %s\n", incxdp_version(), INCXDP_VERSION_STRING);
		return 1;
	}
	incxdp_config_init(&cfg);
	cfg.topology = "/nonexistent/incxdp-consumer.yaml";
	st = incxdp_comm_create(&cfg, &comm);
	if (st != INCXDP_EINVAL || comm != NULL ||
	    strstr(incxdp_last_error(NULL), "incxdp-consumer.yaml") == NULL) {
		fprintf(stderr, "create: %d (%s) %s\n", (int)st, incxdp_strerror(st),
			incxdp_last_error(NULL));
		return 1;
	}
	printf("incxdp %s C API: %s: %s\n", incxdp_version(), incxdp_strerror(st),
	       incxdp_last_error(NULL));
	return 0;
}
