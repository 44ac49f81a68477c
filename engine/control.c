// SPDX-License-Identifier: MIT
/*
 * The stdin control protocol the receivers (sink, recv) share: `arm COOKIE`,
 * `read`, `quit`; every answer is one JSON line on stdout.
 */
#include <string.h>
#include "engine.h"

void control_loop(const struct rx_ops *ops)
{
	char line[128];
	struct json j;

	while (fgets(line, sizeof(line), stdin)) {
		unsigned long cookie;

		if (sscanf(line, "arm %lu", &cookie) == 1 && cookie &&
		    cookie <= UINT32_MAX) {
			ops->arm(ops->ctx, (uint32_t)cookie);
			json_begin(&j, stdout);
			json_u64(&j, "armed", cookie);
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
				 "unknown command (arm COOKIE | read | quit)");
			json_end(&j);
		}
	}
}
