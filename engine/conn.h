/* SPDX-License-Identifier: MIT */
/*
 * The connection modes (accept, connect): what is pure in them, so it can be
 * tested without sockets. Port lists, the target file, which target
 * connection i goes to, a connect error's class, the schedule, and the
 * server's table of accepted connections by local endpoint.
 */
#ifndef FWB_CONN_H
#define FWB_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include "echo.h"

#define CONN_MAX_PORTS 1024
#define CONN_MAX_TARGETS (1U << 20)

/* "8080-8085,9000": ports in the order given, no repeats; n, or exits 2. */
int conn_parse_ports(const char *opt, const char *s, uint16_t *ports, int max);

struct conn_target {
	struct sockaddr_storage ss;
	socklen_t len;
	char text[176];		/* ADDR PORT as given, for the samples file */
};

/*
 * Lines `ADDR PORT` (blank lines and # comments skipped), every address in
 * the benchmarking ranges and all of one family; n, or exits 2 naming the
 * line. *out is malloc()ed.
 */
uint32_t conn_parse_targets(FILE *f, const char *name,
			    struct conn_target **out);

/*
 * Connection i's target: a pure function of (seed, i), so the choice does not
 * depend on the thread count and Python can say where each went:
 *   target(i) = (splitmix64(splitmix64(seed) ^ i) * n) >> 64
 * (Lemire's multiply-shift: uniform to within n / 2^64).
 */
static inline uint32_t conn_pick(uint64_t seed, uint64_t i, uint32_t n)
{
	uint64_t x = echo_splitmix64(echo_splitmix64(seed) ^ i);

	return (uint32_t)(((unsigned __int128)x * n) >> 64);
}

/* Connection i is due at t0 + i / rate, in ns. */
static inline uint64_t conn_due(uint64_t t0, double interval_ns, uint64_t i)
{
	return t0 + (uint64_t)((double)i * interval_ns);
}

enum conn_fail { CF_REFUSED, CF_UNREACHABLE, CF_TIMEOUT, CF_OTHER, CF_N };
extern const char *const conn_fail_names[CF_N];
enum conn_fail conn_fail_class(int err);

/*
 * Accepted connections by local endpoint (family, address, port): an open
 * addressing table of a fixed capacity that keeps the endpoints it has seen
 * in the order first seen; an endpoint past the capacity is counted in
 * `unlisted`. `count` is since the last ep_reset(), `total` since start.
 */
struct ep_key {			/* no padding: compared with memcmp() */
	uint8_t addr[16];	/* IPv4 in the first 4 bytes, the rest 0 */
	uint16_t port;		/* host order */
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint8_t zero;
};

struct ep_entry {
	struct ep_key key;
	bool used;
	uint64_t count, total;
};

struct ep_table {
	struct ep_entry *slot;
	uint32_t cap;		/* a power of two */
	uint32_t n, max;	/* endpoints held; at most max (3/4 of cap) */
	uint32_t *order;	/* slot indices, first seen first */
	uint64_t unlisted;
};

int ep_init(struct ep_table *t, uint32_t max);
void ep_free(struct ep_table *t);
void ep_key_of(const struct sockaddr_storage *ss, struct ep_key *k);
/* Count one connection; false when the table is full (counted unlisted). */
bool ep_add(struct ep_table *t, const struct ep_key *k);
void ep_reset(struct ep_table *t);
void ep_addr_text(const struct ep_key *k, char *buf, size_t len);

#endif
