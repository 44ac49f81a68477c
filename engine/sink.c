// SPDX-License-Identifier: MIT
/*
 * The XDP sink's loader: attach sink.bpf.c to the server's interface, then
 * arm and read it over stdin (see control_loop). Its counters live in the
 * program's global data, mapped into this process, so arming is a memset and
 * reading is a copy: no system call per bucket.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/if_link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include "engine.h"
#include "sink.skel.h"

struct sink {
	struct fwb_sink *skel;
	struct fwb_slot *window;	/* the map, mapped here: arming clears it */
	size_t window_len;
	struct fwb_series_slot *series;	/* likewise */
	size_t series_len;
	uint64_t base_ns, slot_ns;	/* the series the next arm starts */
	uint32_t reflect_every;		/* and the packets it sends back */
	uint32_t cookie;
};

static void sink_arm(void *ctx, uint32_t cookie)
{
	struct sink *s = ctx;
	struct fwb_sink__bss *bss = s->skel->bss;

	/* Disarm first: packets arriving during the reset count as stale. */
	__atomic_store_n(&bss->cookie, 0, __ATOMIC_SEQ_CST);
	memset(&bss->counters, 0, sizeof(bss->counters));
	memset(bss->hist, 0, sizeof(bss->hist));
	memset(bss->next_seq, 0, sizeof(bss->next_seq));
	memset(s->window, 0, s->window_len);
	memset(s->series, 0, s->series_len);
	memset(bss->spans, 0, sizeof(bss->spans));
	bss->series_base_ns = s->base_ns;
	bss->series_slot_ns = s->slot_ns;
	bss->reflect_every = s->reflect_every;
	__atomic_store_n(&bss->cookie, cookie, __ATOMIC_SEQ_CST);
	s->cookie = cookie;
}

static void sink_report(void *ctx, struct json *j)
{
	struct sink *s = ctx;
	struct fwb_counters c;
	static uint64_t hist[FWB_HIST_BUCKETS];

	memcpy(&c, (void *)&s->skel->bss->counters, sizeof(c));
	memcpy(hist, (void *)s->skel->bss->hist, sizeof(hist));
	json_rx_report(j, "sink", s->cookie, &c, hist);
}

static const char *sink_series(void *ctx, uint64_t base_ns, uint64_t slot_ns)
{
	struct sink *s = ctx;

	if (slot_ns && slot_ns < 1000)
		return "series: slots of at least 1000 ns";
	s->base_ns = base_ns;
	s->slot_ns = slot_ns;
	return NULL;
}

static const char *sink_reflect(void *ctx, uint64_t every)
{
	struct sink *s = ctx;

	if (every > (1U << 30) || (every & (every - 1)))
		return "reflect: EVERY must be 0 or a power of two up to 2^30";
	if (every && s->skel->rodata->match_source)
		return "reflect: this sink counts returning packets (--match-source)";
	s->reflect_every = (uint32_t)every;
	return NULL;
}

/* One stream's span and its slots from the first to the last holding a packet. */
static void json_stream_series(struct json *j, const struct fwb_span *sp,
			       const struct fwb_series_slot *slots)
{
	int first = -1, last = -1;

	for (int k = 0; k < FWB_SERIES_SLOTS; k++)
		if (slots[k].packets) {
			if (first < 0)
				first = k;
			last = k;
		}
	json_u64(j, "received", sp->received);
	json_u64(j, "first_sched_ns", sp->first_sched_ns);
	json_u64(j, "last_sched_ns", sp->last_sched_ns);
	json_u64(j, "first_arrival_ns", sp->first_arrival_ns);
	json_u64(j, "max_gap_ns", sp->max_gap_ns);
	json_u64(j, "max_gap_end_ns", sp->max_gap_end_ns);
	json_u64(j, "outside", sp->outside);
	json_u64(j, "first_slot", first < 0 ? 0 : first);
	json_arr(j, "packets");
	for (int k = first; first >= 0 && k <= last; k++)
		json_u64(j, NULL, slots[k].packets);
	json_close_arr(j);
	json_arr(j, "lat_sum_ns");
	for (int k = first; first >= 0 && k <= last; k++)
		json_u64(j, NULL, slots[k].lat_sum_ns);
	json_close_arr(j);
	json_arr(j, "lat_max_ns");
	for (int k = first; first >= 0 && k <= last; k++)
		json_u64(j, NULL, slots[k].lat_max_ns);
	json_close_arr(j);
}

static void sink_read_series(void *ctx, struct json *j)
{
	struct sink *s = ctx;
	struct fwb_span spans[FWB_SERIES_STREAMS];

	memcpy(spans, (void *)s->skel->bss->spans, sizeof(spans));
	json_u64(j, "cookie", s->cookie);
	json_u64(j, "base_ns", s->skel->bss->series_base_ns);
	json_u64(j, "slot_ns", s->skel->bss->series_slot_ns);
	json_arr(j, "streams");
	for (int t = 0; t < FWB_SERIES_STREAMS; t++) {
		json_obj(j, NULL);
		json_u64(j, "stream", t);
		json_stream_series(j, &spans[t], s->series + t * FWB_SERIES_SLOTS);
		json_close_obj(j);
	}
	json_close_arr(j);
}

static const struct option sink_opts[] = {
	{ "ifname", required_argument, NULL, 'i' },
	{ "port", required_argument, NULL, 'p' },
	{ "ports", required_argument, NULL, 'n' },
	{ "late-us", required_argument, NULL, 'l' },
	{ "xdp-mode", required_argument, NULL, 'x' },
	{ "match-source", no_argument, NULL, 's' },
	{ "reflect-via", required_argument, NULL, 'r' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char sink_usage[] =
"usage: fwbench-engine sink --ifname IF [--port P] [--ports N] [--late-us US]\n"
"         [--xdp-mode native|generic] [--match-source] [--reflect-via tx|redirect]\n"
"  Counts, time-stamps and drops engine packets to UDP ports P..P+N-1 (N 1 by\n"
"  default) in XDP on IF; everything else passes. Then reads commands on stdin:\n"
"  arm COOKIE | read | series BASE_NS SLOT_NS | read-series | reflect EVERY |\n"
"  quit. `series` makes the next arm keep a time series of the first streams\n"
"  by scheduled time (slots of SLOT_NS from BASE_NS, CLOCK_MONOTONIC; 0 0 =\n"
"  none); `reflect` makes it send every packet whose sequence number is a\n"
"  multiple of EVERY (a power of two; 0 = none) back to its source instead of\n"
"  dropping it. --match-source counts packets *from* ports P..P+N-1 instead:\n"
"  on the sending host, the reflected ones, timed as round trips.\n"
"  --reflect-via: XDP_TX (default) or a redirect to IF, which veth needs.\n";

/* An mmapable map into this process, or NULL with a note naming `what`. */
static void *map_shared(const struct bpf_map *map, size_t len, const char *what)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       bpf_map__fd(map), 0);

	if (p != MAP_FAILED)
		return p;
	note("cannot map the sink's %s: %s", what, strerror(errno));
	return NULL;
}

static int silent_libbpf(enum libbpf_print_level level, const char *fmt,
			 va_list ap)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}

int cmd_sink(int argc, char **argv)
{
	const char *ifname = NULL;
	uint64_t port = 9, ports = 1, late_us = 1000000;
	uint32_t flags = XDP_FLAGS_DRV_MODE;
	struct sink s = { 0 };
	struct rx_ops ops = { sink_arm, sink_report, &s, sink_series,
			      sink_read_series, sink_reflect };
	bool match_source = false, redirect = false;
	volatile int stop = 0;
	int opt, ifindex, err, ret = EXIT_RUNTIME;
	struct json j;

	opterr = 0;	/* our own one-line message instead */
	while ((opt = getopt_long(argc, argv, "", sink_opts, NULL)) != -1) {
		switch (opt) {
		case 'i': ifname = optarg; break;
		case 'p': port = parse_u64("port", optarg, 1, 65535); break;
		case 'n': ports = parse_u64("ports", optarg, 1, 1024); break;
		case 'l': late_us = parse_u64("late-us", optarg, 1, 3600000000ULL); break;
		case 'x':
			if (!strcmp(optarg, "native"))
				flags = XDP_FLAGS_DRV_MODE;
			else if (!strcmp(optarg, "generic"))
				flags = XDP_FLAGS_SKB_MODE;
			else
				usage_error("--xdp-mode: %s is not native or generic", optarg);
			break;
		case 's': match_source = true; break;
		case 'r':
			if (!strcmp(optarg, "tx"))
				redirect = false;
			else if (!strcmp(optarg, "redirect"))
				redirect = true;
			else
				usage_error("--reflect-via: %s is not tx or redirect", optarg);
			break;
		case 'h': fputs(sink_usage, stdout); exit(0);
		default: usage_error("sink: unknown option or missing value: %s "
					    "(see sink --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("sink: unexpected argument %s", argv[optind]);
	if (!ifname)
		usage_error("sink: --ifname is required");
	if (port + ports - 1 > 65535)
		usage_error("sink: --ports: ports run past 65535");
	ifindex = if_index_or_die(ifname);
	libbpf_set_print(silent_libbpf);

	s.skel = fwb_sink__open();
	if (!s.skel) {
		note("cannot open the XDP sink: %s", strerror(errno));
		goto out;
	}
	s.skel->rodata->engine_port = port;
	s.skel->rodata->port_count = ports;
	s.skel->rodata->late_ns = late_us * 1000ULL;
	s.skel->rodata->match_source = match_source;
	s.skel->rodata->reflect_redirect = redirect;
	err = fwb_sink__load(s.skel);
	if (err) {
		note("cannot load the XDP sink: %s", strerror(-err));
		goto out;
	}
	s.window_len = (size_t)FWB_WINDOW_SLOTS * sizeof(struct fwb_slot);
	s.window = map_shared(s.skel->maps.window, s.window_len,
			      "duplicate detector");
	s.series_len = (size_t)FWB_SERIES_STREAMS * FWB_SERIES_SLOTS *
		       sizeof(struct fwb_series_slot);
	s.series = map_shared(s.skel->maps.series, s.series_len, "time series");
	if (!s.window || !s.series)
		goto out;
	err = bpf_xdp_attach(ifindex, bpf_program__fd(s.skel->progs.fwb_sink),
			     flags, NULL);
	if (err) {
		note("cannot attach XDP (%s) to %s: %s",
		     flags == XDP_FLAGS_DRV_MODE ? "native" : "generic", ifname,
		     strerror(-err));
		goto out;
	}
	install_stop_handlers(&stop);
	json_begin(&j, stdout);
	json_bool(&j, "ready", true);
	json_str(&j, "mode", "sink");
	json_str(&j, "xdp_mode", flags == XDP_FLAGS_DRV_MODE ? "native" : "generic");
	json_u64(&j, "port", port);
	json_u64(&j, "ports", ports);
	json_bool(&j, "match_source", match_source);
	json_str(&j, "reflect_via", redirect ? "redirect" : "tx");
	json_end(&j);
	control_loop(&ops);
	/* Only our program: one attached in its place meanwhile is someone else's. */
	LIBBPF_OPTS(bpf_xdp_attach_opts, ours,
		    .old_prog_fd = bpf_program__fd(s.skel->progs.fwb_sink));
	bpf_xdp_detach(ifindex, flags | XDP_FLAGS_REPLACE, &ours);
	ret = 0;
out:
	if (s.window)
		munmap(s.window, s.window_len);
	if (s.series)
		munmap(s.series, s.series_len);
	fwb_sink__destroy(s.skel);
	return ret;
}
