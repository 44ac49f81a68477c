/* SPDX-License-Identifier: MIT */
/*
 * The engine's user-space parts: histograms, the receivers' control loop and
 * the modes. Options, addresses, errors and JSON come from ../lib.
 */
#ifndef FWB_ENGINE_H
#define FWB_ENGINE_H

#include <stdint.h>
#include "common.h"
#include "json.h"
#include "util.h"

/* Histogram summaries (hist.c). */
double hist_bucket_mid(uint32_t idx);
double hist_bucket_low(uint32_t idx);
double hist_percentile(const uint64_t *hist, uint64_t count, double q,
		       uint64_t min, uint64_t max);
void json_latency(struct json *j, const char *key, const uint64_t *hist,
		  uint64_t count, uint64_t sum, uint64_t min, uint64_t max);
/* The same with the percentiles named: {"p01", 0.01}, ... */
struct hist_q {
	const char *name;
	double q;
};
void json_latency_qs(struct json *j, const char *key, const uint64_t *hist,
		     uint64_t count, uint64_t sum, uint64_t min, uint64_t max,
		     const struct hist_q *qs, unsigned int nq);
void json_hist(struct json *j, const char *key, const uint64_t *hist);
void json_rx_report(struct json *j, const char *mode, uint32_t cookie,
		    const struct fwb_counters *c, const uint64_t *hist);

/*
 * A receiver driven over stdin: `arm COOKIE` starts a trial (reset, then
 * count packets carrying COOKIE), `read` prints the trial's report as one
 * JSON line, `quit` or end of input stops. A receiver that keeps a time
 * series (the sink) also takes `series BASE_NS SLOT_NS` (for the next arm;
 * returns NULL or why not) and `read-series`, and one that can send packets
 * back (the sink) `reflect EVERY` (likewise for the next arm); for others
 * they are NULL.
 */
struct rx_ops {
	void (*arm)(void *ctx, uint32_t cookie);
	void (*report)(void *ctx, struct json *j);
	void *ctx;
	const char *(*series)(void *ctx, uint64_t base_ns, uint64_t slot_ns);
	void (*read_series)(void *ctx, struct json *j);
	const char *(*reflect)(void *ctx, uint64_t every);
};

void control_loop(const struct rx_ops *ops);

int cmd_send(int argc, char **argv);
int cmd_recv(int argc, char **argv);
int cmd_sink(int argc, char **argv);
int cmd_echo(int argc, char **argv);		/* echo_client.c */
int cmd_echo_server(int argc, char **argv);	/* echo_server.c */
int cmd_spin(int argc, char **argv);		/* spin.c */
int cmd_accept(int argc, char **argv);		/* accept.c */
int cmd_connect(int argc, char **argv);		/* connect.c */

#endif
