// SPDX-License-Identifier: MIT
/* Reading the log-linear latency histogram: bucket edges, percentiles, reports. */
#include <math.h>
#include "engine.h"

double hist_bucket_low(uint32_t idx)
{
	uint32_t e, sub;

	if (idx < FWB_SUB_COUNT)
		return idx;
	e = idx / FWB_SUB_COUNT + FWB_SUB_BITS - 1;
	sub = idx % FWB_SUB_COUNT;
	return (double)(FWB_SUB_COUNT + sub) * (double)(1ULL << (e - FWB_SUB_BITS));
}

double hist_bucket_mid(uint32_t idx)
{
	if (idx < FWB_SUB_COUNT)
		return idx;
	return (hist_bucket_low(idx) + hist_bucket_low(idx + 1)) / 2;
}

/* The value below which a share q of the samples lie, at its bucket's midpoint,
 * clamped to the exact extremes; NaN (JSON null) for no samples. */
double hist_percentile(const uint64_t *hist, uint64_t count, double q,
		       uint64_t min, uint64_t max)
{
	uint64_t rank = (uint64_t)(q * count + 0.999999), seen = 0;
	double v;

	if (!count)
		return NAN;
	if (rank < 1)
		rank = 1;
	for (uint32_t i = 0; i < FWB_HIST_BUCKETS; i++) {
		seen += hist[i];
		if (seen >= rank) {
			v = hist_bucket_mid(i);
			if (v < min)
				v = min;
			if (v > max)
				v = max;
			return v;
		}
	}
	return max;
}

static const struct hist_q default_qs[] = {
	{ "p50", 0.50 }, { "p90", 0.90 }, { "p99", 0.99 }, { "p99_9", 0.999 },
};

void json_latency_qs(struct json *j, const char *key, const uint64_t *hist,
		     uint64_t count, uint64_t sum, uint64_t min, uint64_t max,
		     const struct hist_q *qs, unsigned int nq)
{
	json_obj(j, key);
	json_u64(j, "count", count);
	if (count) {
		json_num(j, "min", min);
		json_num(j, "mean", (double)sum / count);
		for (unsigned int i = 0; i < nq; i++)
			json_num(j, qs[i].name,
				 hist_percentile(hist, count, qs[i].q, min, max));
		json_num(j, "max", max);
	}
	json_close_obj(j);
}

void json_latency(struct json *j, const char *key, const uint64_t *hist,
		  uint64_t count, uint64_t sum, uint64_t min, uint64_t max)
{
	json_latency_qs(j, key, hist, count, sum, min, max, default_qs,
			sizeof(default_qs) / sizeof(default_qs[0]));
}

/* Non-empty buckets as [lower edge ns, count], so runs can be merged later. */
void json_hist(struct json *j, const char *key, const uint64_t *hist)
{
	json_arr(j, key);
	for (uint32_t i = 0; i < FWB_HIST_BUCKETS; i++) {
		if (!hist[i])
			continue;
		json_arr(j, NULL);
		json_num(j, NULL, hist_bucket_low(i));
		json_u64(j, NULL, hist[i]);
		json_close_arr(j);
	}
	json_close_arr(j);
}

void json_rx_report(struct json *j, const char *mode, uint32_t cookie,
		    const struct fwb_counters *c, const uint64_t *hist)
{
	json_str(j, "mode", mode);
	json_u64(j, "cookie", cookie);
	json_u64(j, "received", c->received);
	json_u64(j, "duplicated", c->duplicated);
	json_u64(j, "reordered", c->reordered);
	json_u64(j, "late", c->late);
	json_u64(j, "stale", c->stale);
	json_u64(j, "malformed", c->malformed);
	json_u64(j, "early", c->early);
	json_u64(j, "out_of_window", c->out_of_window);
	json_u64(j, "bytes", c->bytes);
	json_u64(j, "reflected", c->reflected);
	json_u64(j, "first_ns", c->first_ns);
	json_u64(j, "last_ns", c->last_ns);
	json_latency(j, "latency_ns", hist, c->received, c->lat_sum_ns,
		     c->lat_min_ns, c->lat_max_ns);
	json_hist(j, "hist", hist);
}
