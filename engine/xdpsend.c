// SPDX-License-Identifier: MIT
/*
 * The XDP sender's driver: load xdpsend.bpf.c (attached nowhere), fill its
 * flow table with the headers frame_fill() gives each flow, then send by
 * BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: each run hands `repeat`
 * frames from a kernel page pool to the program, whose XDP_TX sends them out
 * of the sender's interface to its veth peer, no socket and no skb on the
 * way (the technique of xdp-tools' xdp-trafficgen, whose Debian build does
 * not load on this kernel).
 *
 * veth takes XDP frames only into a peer with NAPI (GRO on, or an XDP
 * program); otherwise the kernel drops them where the sender cannot see it.
 * The caller sees to that (fwbench turns GRO on at the firewall's ingress).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/bpf.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "engine.h"
#include "packet.h"
#include "xdpsend.h"
#include "xdpsend.skel.h"

struct xdp_gen {
	struct fwb_xdpsend *skel;
	uint8_t *frame;		/* the template every page starts as */
	size_t len;
	int ifindex, prog_fd;
	uint32_t batch_size;
};

static int silent(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

struct xdp_gen *xdp_gen_open(const struct frame_spec *f, int ifindex, int threads,
			     uint32_t cookie, uint64_t seq_start,
			     uint32_t batch_size)
{
	uint64_t nflows = f->src_count * f->sport_count * f->dst_count;
	size_t hdr = f->src.family == AF_INET ? XDPSEND_HDR4 : XDPSEND_HDR6;
	struct fwb_stamp zero = { 0 };
	struct xdp_gen *g;
	uint8_t *buf;
	int map_fd;

	if (threads > XDPSEND_MAX_STREAMS) {
		note("send --via xdp: %d threads, at most %d", threads,
		     XDPSEND_MAX_STREAMS);
		return NULL;
	}
	if (nflows > XDPSEND_MAX_FLOWS) {
		note("send --via xdp: %lu flows, at most %u",
		     (unsigned long)nflows, XDPSEND_MAX_FLOWS);
		return NULL;
	}
	g = calloc(1, sizeof(*g));
	buf = calloc(1, f->wire_len);
	if (!g || !buf)
		goto nomem;
	g->len = f->wire_len;
	g->ifindex = ifindex;
	g->batch_size = batch_size;
	g->frame = malloc(f->wire_len);
	if (!g->frame)
		goto nomem;
	frame_template(f, g->frame);
	libbpf_set_print(silent);
	g->skel = fwb_xdpsend__open();
	if (!g->skel) {
		note("send --via xdp: cannot open the program: %s",
		     strerror(errno));
		goto fail;
	}
	g->skel->rodata->hdr_len = (uint32_t)hdr;
	g->skel->rodata->threads = (uint32_t)threads;
	g->skel->rodata->nflows = nflows;
	bpf_map__set_max_entries(g->skel->maps.flows, (uint32_t)nflows);
	if (fwb_xdpsend__load(g->skel)) {
		note("send --via xdp: the kernel will not load the program: %s",
		     strerror(errno));
		goto fail;
	}
	map_fd = bpf_map__fd(g->skel->maps.flows);
	for (uint64_t n = 0; n < nflows; n++) {
		struct xdpsend_hdr e = { 0 };
		uint32_t key = (uint32_t)n;

		memcpy(buf, g->frame, f->wire_len);
		frame_fill(f, buf, n, &zero);
		memcpy(e.bytes, buf, hdr);
		if (bpf_map_update_elem(map_fd, &key, &e, BPF_ANY)) {
			note("send --via xdp: cannot fill the flow table: %s",
			     strerror(errno));
			goto fail;
		}
	}
	for (int t = 0; t < threads; t++) {
		struct xdpsend_stream *st = &g->skel->bss->streams[t];

		memset(st, 0, sizeof(*st));
		st->cookie = cookie;
		st->stream = (uint32_t)t;
		st->seq_start = seq_start;
	}
	g->prog_fd = bpf_program__fd(g->skel->progs.fwb_xdpsend);
	free(buf);
	return g;
nomem:
	note("send --via xdp: out of memory");
fail:
	free(buf);
	xdp_gen_close(g);
	return NULL;
}

int xdp_gen_bind(struct xdp_gen *g, int stream, int cpu, uint64_t quota,
		 uint64_t t0, double interval_ns, uint64_t deadline)
{
	struct xdpsend_stream *st = &g->skel->bss->streams[stream];

	if (cpu < 0 || cpu >= XDPSEND_MAX_CPUS)
		return -EINVAL;
	st->quota = quota;
	st->t0 = t0;
	st->interval_q16 = interval_ns > 0 ? (uint64_t)(interval_ns * 65536.0) : 0;
	st->deadline = deadline;
	g->skel->bss->cpu_stream[cpu] = (uint32_t)stream + 1;
	return 0;
}

/*
 * Runs until the stream is done. How many iterations a run should have is
 * learnt as it goes: each lasts about RUN_NS at the rate the last one
 * iterated, so a run never overshoots the deadline by much (what is left
 * after it drops at once) and the start cost of a run stays a few percent.
 */
#define RUN_NS 250000000ULL
#define FIRST_RUN 65536U

int xdp_gen_run(struct xdp_gen *g, int stream, volatile int *stop)
{
	struct xdpsend_stream *st = &g->skel->bss->streams[stream];
	struct xdp_md ctx = { .data_end = (uint32_t)g->len,
			      .ingress_ifindex = (uint32_t)g->ifindex };
	uint64_t repeat = FIRST_RUN;

	while (!*stop) {
		LIBBPF_OPTS(bpf_test_run_opts, opts,
			    .data_in = g->frame, .data_size_in = (uint32_t)g->len,
			    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx),
			    .repeat = (uint32_t)repeat, .batch_size = g->batch_size,
			    .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
		uint64_t t = now_ns(), left, took;

		if (st->sent >= st->quota || (st->deadline && t >= st->deadline))
			return 0;
		if (bpf_prog_test_run_opts(g->prog_fd, &opts))
			return errno == EINTR ? 0 : -errno;
		took = now_ns() - t;
		left = st->deadline ? st->deadline - (t + took < st->deadline ?
						       t + took : st->deadline) : RUN_NS;
		if (left > RUN_NS)
			left = RUN_NS;
		/* iterations per ns so far, times the time left (at least a
		 * little, so a quota in a count run always advances) */
		repeat = took ? (uint64_t)((double)repeat / took * left) : repeat;
		if (repeat < 1024)
			repeat = 1024;
		if (repeat > UINT32_MAX)
			repeat = UINT32_MAX;
	}
	return 0;
}

const struct xdpsend_stream *xdp_gen_stream(const struct xdp_gen *g, int stream)
{
	return &g->skel->bss->streams[stream];
}

void xdp_gen_close(struct xdp_gen *g)
{
	if (!g)
		return;
	fwb_xdpsend__destroy(g->skel);
	free(g->frame);
	free(g);
}
