// SPDX-License-Identifier: MIT
/* Errors, input parsing, address checks, clocks, pinning and stop handlers. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "util.h"

static void vsay(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", program_invocation_short_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	exit(EXIT_USAGE);
}

void runtime_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	exit(EXIT_RUNTIME);
}

void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
}

uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (*s == '-')
		usage_error("--%s: %s is negative; expected %" PRIu64 "..%" PRIu64,
			    opt, s, min, max);
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		usage_error("--%s: %s is not a whole number", opt, s);
	if (v < min || v > max)
		usage_error("--%s: %llu is outside %" PRIu64 "..%" PRIu64,
			    opt, v, min, max);
	return v;
}

double parse_double(const char *opt, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		usage_error("--%s: %s is not a number", opt, s);
	if (v < min || v > max)
		usage_error("--%s: %g is outside %g..%g", opt, v, min, max);
	return v;
}

void parse_mac(const char *opt, const char *s, uint8_t mac[6])
{
	unsigned int b[6];
	char tail;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4],
		   &b[5], &tail) != 6)
		usage_error("--%s: %s is not a MAC address (aa:bb:cc:dd:ee:ff)",
			    opt, s);
	for (int i = 0; i < 6; i++) {
		if (b[i] > 255)
			usage_error("--%s: %s is not a MAC address", opt, s);
		mac[i] = b[i];
	}
}

int parse_cpus(const char *opt, const char *s, int *cpus, int max)
{
	char *copy = strdup(s), *tok, *save = NULL;
	int n = 0;

	if (!copy)
		runtime_error("--%s: out of memory", opt);
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == max)
			usage_error("--%s: more than %d CPUs", opt, max);
		cpus[n++] = parse_u64(opt, tok, 0, CPU_SETSIZE - 1);
	}
	free(copy);
	if (!n)
		usage_error("--%s: no CPU given", opt);
	return n;
}

/* 198.18.0.0/15 (RFC 2544) and 2001:2::/48 (RFC 5180): nothing else, ever. */
static bool in_bench_range(const struct bench_addr *a)
{
	if (a->family == AF_INET)
		return (ntohl(a->v4.s_addr) & 0xfffe0000U) == 0xc6120000U;
	return a->v6.s6_addr[0] == 0x20 && a->v6.s6_addr[1] == 0x01 &&
	       a->v6.s6_addr[2] == 0x00 && a->v6.s6_addr[3] == 0x02 &&
	       a->v6.s6_addr[4] == 0x00 && a->v6.s6_addr[5] == 0x00;
}

void parse_bench_addr(const char *opt, const char *s, struct bench_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, s, &a->v4) == 1)
		a->family = AF_INET;
	else if (inet_pton(AF_INET6, s, &a->v6) == 1)
		a->family = AF_INET6;
	else
		usage_error("--%s: %s is not an IPv4 or IPv6 address", opt, s);
	if (!in_bench_range(a))
		usage_error("--%s: %s is outside the benchmarking ranges "
			    "198.18.0.0/15 and 2001:2::/48", opt, s);
}

void bench_addr_check_span(const char *opt, const struct bench_addr *a,
			   uint64_t n)
{
	struct bench_addr last = *a;

	if (n == 0)
		usage_error("--%s-count: must be at least 1", opt);
	if (a->family == AF_INET) {
		uint64_t v = (uint64_t)ntohl(a->v4.s_addr) + n - 1;

		if (v > UINT32_MAX)
			usage_error("--%s-count: %" PRIu64 " addresses run past "
				    "the address space", opt, n);
		last.v4.s_addr = htonl((uint32_t)v);
	} else {
		uint32_t low;
		uint64_t v;

		memcpy(&low, &a->v6.s6_addr[12], 4);
		v = (uint64_t)ntohl(low) + n - 1;
		if (v > UINT32_MAX)
			usage_error("--%s-count: %" PRIu64 " addresses run past "
				    "the last 32 bits", opt, n);
		low = htonl((uint32_t)v);
		memcpy(&last.v6.s6_addr[12], &low, 4);
	}
	if (!in_bench_range(&last))
		usage_error("--%s-count: %" PRIu64 " addresses leave the "
			    "benchmarking range", opt, n);
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void pin_to_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		runtime_error("cannot pin to CPU %d: %s", cpu, strerror(errno));
}

int if_index_or_die(const char *name)
{
	unsigned int idx = if_nametoindex(name);

	if (!idx)
		usage_error("--ifname: no interface %s in this network namespace",
			    name);
	return idx;
}

/* The handler can reach the flag only through here. */
static volatile int *stop_flag;

static void on_stop(int sig)
{
	if (stop_flag)
		*stop_flag = 1;
}

void install_stop_handlers(volatile int *flag)
{
	struct sigaction sa = { .sa_handler = on_stop };

	/* No SA_RESTART: a blocking read returns EINTR and the loop ends. */
	stop_flag = flag;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}
