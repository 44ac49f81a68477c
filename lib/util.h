/* SPDX-License-Identifier: MIT */
/*
 * What fwbench's C programs share (the engine in engine/, the eBPF loader in
 * bpf/): one-line errors, option parsing, the benchmarking-range check,
 * clocks, pinning and stop handlers. Input errors exit at once (EXIT_USAGE)
 * with one line on stderr, so callers check nothing after a parse_*().
 */
#ifndef FWB_UTIL_H
#define FWB_UTIL_H

#include <netinet/in.h>
#include <stdint.h>

#define EXIT_USAGE 2	/* bad input: one line on stderr */
#define EXIT_RUNTIME 1	/* the system refused something */
#define EXIT_UNSUPPORTED 3	/* this kernel does not allow what was asked */

void usage_error(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));
void runtime_error(const char *fmt, ...)
	__attribute__((noreturn, format(printf, 1, 2)));
/* One line on stderr, prefixed with the program's name; exits nothing. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max);
double parse_double(const char *opt, const char *s, double min, double max);
void parse_mac(const char *opt, const char *s, uint8_t mac[6]);
int parse_cpus(const char *opt, const char *s, int *cpus, int max);

/* An address in the benchmarking ranges, 198.18.0.0/15 or 2001:2::/48. */
struct bench_addr {
	int family;
	struct in_addr v4;
	struct in6_addr v6;
};

void parse_bench_addr(const char *opt, const char *s, struct bench_addr *a);
/* The n-th address after a, still inside the benchmarking range, or die. */
void bench_addr_check_span(const char *opt, const struct bench_addr *a,
			   uint64_t n);

uint64_t now_ns(void);		/* CLOCK_MONOTONIC */
void pin_to_cpu(int cpu);
int if_index_or_die(const char *name);

/* SIGINT and SIGTERM set *flag; blocking calls return EINTR. */
void install_stop_handlers(volatile int *flag);

#endif
