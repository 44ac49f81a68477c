/* SPDX-License-Identifier: MIT */
/*
 * A minimal streaming JSON writer: one document per line, keys written as
 * given (callers pass plain identifiers), numbers in %.6g, non-finite as null.
 */
#ifndef FWB_JSON_H
#define FWB_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json {
	FILE *f;
	int depth;
	bool comma[JSON_MAX_DEPTH];
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

#endif
