/* SPDX-License-Identifier: MIT */
/* The engine's user-space parts: options, addresses, JSON, histograms, receivers. */
#ifndef FWB_ENGINE_H
#define FWB_ENGINE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "common.h"

#define EXIT_USAGE 2	/* bad input: one line on stderr */
#define EXIT_RUNTIME 1	/* the system refused something */

void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void runtime_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
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
void bench_addr_check_span(const char *opt, const struct bench_addr *a, uint64_t n);

uint64_t now_ns(void);
void pin_to_cpu(int cpu);
int if_index_or_die(const char *name);

/* A minimal streaming JSON writer: one document per line on stdout. */
struct json {
	FILE *f;
	int depth;
	bool comma[16];
};

void json_begin(struct json *j, FILE *f);
void json_end(struct json *j);
void json_obj(struct json *j, const char *key);
void json_arr(struct json *j, const char *key);
void json_close_obj(struct json *j);
void json_close_arr(struct json *j);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_num(struct json *j, const char *key, double v);
void json_str(struct json *j, const char *key, const char *v);
void json_bool(struct json *j, const char *key, bool v);

/* Histogram summaries (hist.c). */
double hist_bucket_mid(uint32_t idx);
double hist_bucket_low(uint32_t idx);
void json_latency(struct json *j, const char *key, const uint64_t *hist,
		  uint64_t count, uint64_t sum, uint64_t min, uint64_t max);
void json_hist(struct json *j, const char *key, const uint64_t *hist);
void json_rx_report(struct json *j, const char *mode, uint32_t cookie,
		    const struct fwb_counters *c, const uint64_t *hist);

/*
 * A receiver driven over stdin: `arm COOKIE` starts a trial (reset, then
 * count packets carrying COOKIE), `read` prints the trial's report as one
 * JSON line, `quit` or end of input stops.
 */
struct rx_ops {
	void (*arm)(void *ctx, uint32_t cookie);
	void (*report)(void *ctx, struct json *j);
	void *ctx;
};

void control_loop(const struct rx_ops *ops);
void install_stop_handlers(volatile int *flag);

int cmd_send(int argc, char **argv);
int cmd_recv(int argc, char **argv);
int cmd_sink(int argc, char **argv);

#endif
