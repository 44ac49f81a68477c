// SPDX-License-Identifier: MIT
/*
 * The stdin control protocol the receivers (sink, recv) share: `arm COOKIE`,
 * `read`, `quit`, and for a receiver with a time series `series BASE_NS
 * SLOT_NS` and `read-series`, for one that sends packets back `reflect EVERY`;
 * every answer is one JSON line on stdout.
 */
#include <string.h>
#include "engine.h"

void control_loop(const struct rx_ops *ops)
{
	char line[128];
	struct json j;

	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long base, width, every;
		unsigned long cookie;
		const char *why;

		if (sscanf(line, "arm %lu", &cookie) == 1 && cookie &&
		    cookie <= UINT32_MAX) {
			ops->arm(ops->ctx, (uint32_t)cookie);
			json_begin(&j, stdout);
			json_u64(&j, "armed", cookie);
			json_end(&j);
		} else if (sscanf(line, "series %llu %llu", &base, &width) == 2) {
			why = ops->series ? ops->series(ops->ctx, base, width)
					  : "series: this receiver keeps none";
			json_begin(&j, stdout);
			if (why) {
				json_str(&j, "error", why);
			} else {
				json_u64(&j, "series_base_ns", base);
				json_u64(&j, "series_slot_ns", width);
			}
			json_end(&j);
		} else if (sscanf(line, "reflect %llu", &every) == 1) {
			why = ops->reflect ? ops->reflect(ops->ctx, every)
					   : "reflect: this receiver sends nothing back";
			json_begin(&j, stdout);
			if (why)
				json_str(&j, "error", why);
			else
				json_u64(&j, "reflect_every", every);
			json_end(&j);
		} else if (!strncmp(line, "read-series", 11)) {
			json_begin(&j, stdout);
			if (ops->read_series)
				ops->read_series(ops->ctx, &j);
			else
				json_str(&j, "error", "read-series: this receiver keeps none");
			json_end(&j);
		} else if (!strncmp(line, "read", 4)) {
			json_begin(&j, stdout);
			ops->report(ops->ctx, &j);
			json_end(&j);
		} else if (!strncmp(line, "quit", 4)) {
			return;
		} else {
			json_begin(&j, stdout);
			json_str(&j, "error",
				 "unknown command (arm COOKIE | read | series BASE_NS SLOT_NS | read-series | reflect EVERY | quit)");
			json_end(&j);
		}
	}
}
