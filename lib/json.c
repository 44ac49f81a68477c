// SPDX-License-Identifier: MIT
/* The streaming JSON writer (json.h). */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include "json.h"

static void json_key(struct json *j, const char *key)
{
	if (j->comma[j->depth])
		fputc(',', j->f);
	j->comma[j->depth] = true;
	if (key)
		fprintf(j->f, "\"%s\":", key);
}

void json_begin(struct json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	fputc('{', f);
}

void json_end(struct json *j)
{
	fputs("}\n", j->f);
	fflush(j->f);
}

void json_obj(struct json *j, const char *key)
{
	json_key(j, key);
	fputc('{', j->f);
	j->comma[++j->depth] = false;
}

void json_arr(struct json *j, const char *key)
{
	json_key(j, key);
	fputc('[', j->f);
	j->comma[++j->depth] = false;
}

void json_close_obj(struct json *j)
{
	fputc('}', j->f);
	j->depth--;
}

void json_close_arr(struct json *j)
{
	fputc(']', j->f);
	j->depth--;
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void json_num(struct json *j, const char *key, double v)
{
	json_key(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.6g", v);
	else
		fputs("null", j->f);
}

void json_str(struct json *j, const char *key, const char *v)
{
	json_key(j, key);
	fputc('"', j->f);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			fputc('\\', j->f);
		fputc(*v, j->f);
	}
	fputc('"', j->f);
}

void json_bool(struct json *j, const char *key, bool v)
{
	json_key(j, key);
	fputs(v ? "true" : "false", j->f);
}
