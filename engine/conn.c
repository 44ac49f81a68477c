// SPDX-License-Identifier: MIT
/* The connection modes' pure parts (conn.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "conn.h"

int conn_parse_ports(const char *opt, const char *s, uint16_t *ports, int max)
{
	char *copy = strdup(s), *tok, *save = NULL;
	int n = 0;

	if (!copy)
		runtime_error("--%s: out of memory", opt);
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(tok, '-');
		uint64_t lo, hi;

		if (dash)
			*dash = 0;
		lo = parse_u64(opt, tok, 1, 65535);
		hi = dash ? parse_u64(opt, dash + 1, 1, 65535) : lo;
		if (lo > hi)
			usage_error("--%s: %lu-%lu runs backwards (LO-HI with "
				    "LO <= HI)", opt, (unsigned long)lo,
				    (unsigned long)hi);
		for (uint64_t p = lo; p <= hi; p++) {
			for (int k = 0; k < n; k++)
				if (ports[k] == p)
					usage_error("--%s: port %lu twice", opt,
						    (unsigned long)p);
			if (n == max)
				usage_error("--%s: more than %d ports", opt, max);
			ports[n++] = (uint16_t)p;
		}
	}
	free(copy);
	if (!n)
		usage_error("--%s: no port given", opt);
	return n;
}

uint32_t conn_parse_targets(FILE *f, const char *name,
			    struct conn_target **out)
{
	uint32_t n = 0, cap = 64, line_no = 0;
	struct conn_target *t = malloc(cap * sizeof(*t));
	char line[256], opt[320];
	int family = 0;

	if (!t)
		runtime_error("--targets: out of memory");
	while (fgets(line, sizeof(line), f)) {
		char addr[128], port[32], extra;
		struct bench_addr a;
		int k;

		line_no++;
		for (k = 0; line[k] == ' ' || line[k] == '\t'; k++)
			;
		if (!line[k] || line[k] == '\n' || line[k] == '#')
			continue;
		snprintf(opt, sizeof(opt), "targets: %s line %u", name, line_no);
		if (sscanf(line, "%127s %31s %c", addr, port, &extra) != 2)
			usage_error("--%s: expected ADDR PORT", opt);
		parse_bench_addr(opt, addr, &a);
		if (family && a.family != family)
			usage_error("--%s: %s is of the other IP version than the "
				    "targets before it", opt, addr);
		family = a.family;
		if (n == CONN_MAX_TARGETS)
			usage_error("--%s: more than %u targets", opt,
				    CONN_MAX_TARGETS);
		if (n == cap) {
			struct conn_target *m = realloc(t, 2 * cap * sizeof(*t));

			if (!m)
				runtime_error("--targets: out of memory");
			t = m;
			cap *= 2;
		}
		t[n].len = echo_sockaddr(&a, parse_u64(opt, port, 1, 65535),
					 &t[n].ss);
		snprintf(t[n].text, sizeof(t[n].text), "%s %s", addr, port);
		n++;
	}
	if (!n)
		usage_error("--targets: %s holds no target (lines ADDR PORT)",
			    name);
	*out = t;
	return n;
}

const char *const conn_fail_names[CF_N] = {
	"refused", "unreachable", "timeout", "other",
};

enum conn_fail conn_fail_class(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return CF_REFUSED;
	case ENETUNREACH:
	case EHOSTUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
		return CF_UNREACHABLE;
	case ETIMEDOUT:
		return CF_TIMEOUT;
	default:
		return CF_OTHER;
	}
}

int ep_init(struct ep_table *t, uint32_t max)
{
	memset(t, 0, sizeof(*t));
	t->cap = 16;
	while (t->cap / 4 * 3 < max)
		t->cap *= 2;
	t->max = max;
	t->slot = calloc(t->cap, sizeof(*t->slot));
	t->order = calloc(max, sizeof(*t->order));
	if (!t->slot || !t->order) {
		ep_free(t);
		return -1;
	}
	return 0;
}

void ep_free(struct ep_table *t)
{
	free(t->slot);
	free(t->order);
	t->slot = NULL;
	t->order = NULL;
}

void ep_key_of(const struct sockaddr_storage *ss, struct ep_key *k)
{
	memset(k, 0, sizeof(*k));
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)ss;

		k->family = AF_INET;
		k->port = ntohs(sin->sin_port);
		memcpy(k->addr, &sin->sin_addr, 4);
		return;
	}
	{
		const struct sockaddr_in6 *sin6 = (const void *)ss;

		k->family = AF_INET6;
		k->port = ntohs(sin6->sin6_port);
		memcpy(k->addr, &sin6->sin6_addr, 16);
	}
}

static uint32_t ep_hash(const struct ep_key *k)
{
	uint64_t a, b;

	memcpy(&a, k->addr, 8);
	memcpy(&b, k->addr + 8, 8);
	return (uint32_t)echo_splitmix64(a ^ echo_splitmix64(b ^
			((uint64_t)k->port << 8 | k->family)));
}

bool ep_add(struct ep_table *t, const struct ep_key *k)
{
	uint32_t i = ep_hash(k) & (t->cap - 1);

	for (;; i = (i + 1) & (t->cap - 1)) {
		struct ep_entry *e = &t->slot[i];

		if (!e->used)
			break;
		if (!memcmp(&e->key, k, sizeof(*k))) {
			e->count++;
			e->total++;
			return true;
		}
	}
	if (t->n == t->max) {
		t->unlisted++;
		return false;
	}
	t->slot[i] = (struct ep_entry){ .key = *k, .used = true, .count = 1,
					.total = 1 };
	t->order[t->n++] = i;
	return true;
}

void ep_reset(struct ep_table *t)
{
	for (uint32_t k = 0; k < t->n; k++)
		t->slot[t->order[k]].count = 0;
	t->unlisted = 0;
}

void ep_addr_text(const struct ep_key *k, char *buf, size_t len)
{
	if (!inet_ntop(k->family, k->addr, buf, len))
		snprintf(buf, len, "?");
}
