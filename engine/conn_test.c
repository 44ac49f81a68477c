// SPDX-License-Identifier: MIT
/*
 * Checks the connection modes' pure parts (conn.c): port lists, the target
 * file, the seeded target choice (deterministic, in range, uniform within a
 * chi-square bound), the schedule, the error classes and the endpoint table
 * (counts by endpoint, reset, a full table counting the rest unlisted).
 * Exit 0 and "ok" on success; prints every failure otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "conn.h"

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		printf("FAIL %s:%d: ", __FILE__, __LINE__);		\
		printf(__VA_ARGS__);					\
		printf("\n");						\
		failures++;						\
	}								\
} while (0)

static void test_ports(void)
{
	uint16_t p[CONN_MAX_PORTS];
	int n = conn_parse_ports("ports", "8080-8085,9000,80", p, CONN_MAX_PORTS);

	CHECK(n == 8, "8 ports, got %d", n);
	CHECK(p[0] == 8080 && p[5] == 8085 && p[6] == 9000 && p[7] == 80,
	      "ports in the order given: %u %u %u %u", p[0], p[5], p[6], p[7]);
	n = conn_parse_ports("ports", "1-1024", p, CONN_MAX_PORTS);
	CHECK(n == 1024 && p[1023] == 1024, "1-1024: %d", n);
}

static void test_targets(void)
{
	static const char text[] =
		"# a comment\n"
		"198.19.0.2 8080\n"
		"\n"
		"   198.19.128.10\t80\n";
	FILE *f = fmemopen((void *)text, sizeof(text) - 1, "r");
	struct conn_target *t = NULL;
	uint32_t n = conn_parse_targets(f, "mem", &t);
	const struct sockaddr_in *sin = (const void *)&t[1].ss;

	fclose(f);
	CHECK(n == 2, "2 targets, got %u", n);
	CHECK(sin->sin_family == AF_INET && ntohs(sin->sin_port) == 80 &&
	      ntohl(sin->sin_addr.s_addr) == 0xc613800aU,
	      "second target 198.19.128.10:80");
	CHECK(!strcmp(t[0].text, "198.19.0.2 8080"), "text %s", t[0].text);
	free(t);
}

static void test_pick(void)
{
	enum { N = 7, DRAWS = 700000 };
	uint64_t counts[N] = { 0 };
	double chi2 = 0, e = (double)DRAWS / N;

	for (uint64_t i = 0; i < DRAWS; i++) {
		uint32_t k = conn_pick(42, i, N);

		if (k >= N) {
			CHECK(0, "pick %u out of range", k);
			return;
		}
		counts[k]++;
	}
	for (int k = 0; k < N; k++)
		chi2 += (counts[k] - e) * (counts[k] - e) / e;
	/* 6 degrees of freedom: P(chi2 > 22.46) = 0.001. */
	CHECK(chi2 < 22.46, "uniform: chi2 %.2f over 6 df", chi2);
	CHECK(conn_pick(42, 123, 1000) == conn_pick(42, 123, 1000),
	      "a pure function of (seed, i)");
	{
		int same = 0;

		for (uint64_t i = 0; i < 1000; i++)
			same += conn_pick(1, i, 1000) == conn_pick(2, i, 1000);
		CHECK(same < 20, "seeds 1 and 2 agree on %d of 1000", same);
	}
	CHECK(conn_pick(7, 5, 1) == 0, "one target");
}

static void test_schedule_and_classes(void)
{
	double iv = 1e9 / 3000.0;

	CHECK(conn_due(100, iv, 0) == 100, "the first at t0");
	CHECK(conn_due(0, iv, 3000) == 1000000000ULL, "3000 at 1 s: %llu",
	      (unsigned long long)conn_due(0, iv, 3000));
	CHECK(conn_due(0, 1e9 / 7.0, 7000000000ULL) == 1000000000000000000ULL,
	      "exact after 10^9 s at 7/s");
	CHECK(conn_fail_class(ECONNREFUSED) == CF_REFUSED, "refused");
	CHECK(conn_fail_class(EHOSTUNREACH) == CF_UNREACHABLE &&
	      conn_fail_class(ENETUNREACH) == CF_UNREACHABLE, "unreachable");
	CHECK(conn_fail_class(ETIMEDOUT) == CF_TIMEOUT, "timeout");
	CHECK(conn_fail_class(EADDRNOTAVAIL) == CF_OTHER, "other");
}

static void key4(struct ep_key *k, uint32_t addr, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (void *)&ss;

	memset(&ss, 0, sizeof(ss));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(addr);
	sin->sin_port = htons(port);
	ep_key_of(&ss, k);
}

static void test_table(void)
{
	struct ep_table t;
	struct ep_key a, b, c;
	char text[64];

	CHECK(!ep_init(&t, 2), "init");
	key4(&a, 0xc6130002U, 8080);
	key4(&b, 0xc6130002U, 8081);
	key4(&c, 0xc613800aU, 8080);
	for (int i = 0; i < 5; i++)
		ep_add(&t, &a);
	ep_add(&t, &b);
	CHECK(!ep_add(&t, &c), "a third endpoint does not fit in 2");
	CHECK(t.n == 2 && t.unlisted == 1, "held %u, unlisted %llu", t.n,
	      (unsigned long long)t.unlisted);
	CHECK(t.slot[t.order[0]].count == 5 && t.slot[t.order[1]].count == 1,
	      "counts 5 and 1, first seen first");
	ep_addr_text(&t.slot[t.order[0]].key, text, sizeof(text));
	CHECK(!strcmp(text, "198.19.0.2") && t.slot[t.order[0]].key.port == 8080,
	      "endpoint text %s", text);
	ep_reset(&t);
	ep_add(&t, &b);
	CHECK(t.slot[t.order[0]].count == 0 && t.slot[t.order[1]].count == 1 &&
	      t.slot[t.order[0]].total == 5 && t.unlisted == 0,
	      "reset: counts since, totals kept");
	ep_free(&t);
	/* Many endpoints: every one found again after the table fills. */
	CHECK(!ep_init(&t, 65536), "init 65536");
	for (uint32_t i = 0; i < 65536; i++) {
		key4(&a, 0xc6130000U + i / 64, 8000 + i % 64);
		ep_add(&t, &a);
		ep_add(&t, &a);
	}
	CHECK(t.n == 65536 && t.unlisted == 0, "65536 held: %u", t.n);
	{
		int bad = 0;

		for (uint32_t k = 0; k < t.n; k++)
			bad += t.slot[t.order[k]].count != 2;
		CHECK(!bad, "%d endpoints without their 2", bad);
	}
	ep_free(&t);
}

int main(void)
{
	test_ports();
	test_targets();
	test_pick();
	test_schedule_and_classes();
	test_table();
	if (!failures)
		printf("ok\n");
	return failures ? 1 : 0;
}
