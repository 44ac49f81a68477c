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

/*
 * Whether the kernel refuses live frames outright. Some (seen: a 6.18 VM
 * kernel) load the program and run it in plain BPF_PROG_RUN but answer
 * EPERM to BPF_F_TEST_XDP_LIVE_FRAMES. One iteration with no stream bound
 * to any CPU returns XDP_ABORTED, so nothing leaves.
 */
static bool live_frames_refused(struct xdp_gen *g)
{
	struct xdp_md ctx = { .data_end = (uint32_t)g->len,
			      .ingress_ifindex = (uint32_t)g->ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, opts,
		    .data_in = g->frame, .data_size_in = (uint32_t)g->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx), .repeat = 1,
		    .flags = BPF_F_TEST_XDP_LIVE_FRAMES);

	if (!bpf_prog_test_run_opts(g->prog_fd, &opts) ||
	    (errno != EPERM && errno != EOPNOTSUPP && errno != EINVAL))
		return false;
	note("send --via xdp: this kernel refuses XDP live frames "
	     "(BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: %s)",
	     strerror(errno));
	return true;
}

struct xdp_gen *xdp_gen_open(const struct frame_spec *f, int ifindex, int threads,
			     uint32_t cookie, uint64_t seq_start,
			     uint32_t batch_size, bool *refused)
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
	if (live_frames_refused(g)) {
		*refused = true;
		goto fail;
	}
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
 * Runs until the stream is done. A run's iterations are fixed when it starts,
 * and starting or ending one costs 17-25 ms here, during which nothing is
 * sent: a paced stream must be one run, or its packets would leave in bursts
 * after every gap. So the driver first times a dropping iteration (two held
 * runs of different lengths: the difference is the iterations' time, the rest
 * the runs' fixed cost) and sizes the run to end just past the deadline: the
 * packets due (sent at an assumed TX_NS each) plus dropping iterations for the
 * rest. Past the deadline every iteration drops at once, so overshooting costs
 * little; falling short costs a gap, so the estimate errs long. Open throttle
 * and --count runs go in chunks of CHUNK_NS.
 */
#define CAL_ITERS (1U << 20)
#define TX_NS 300.0		/* a sending iteration, at least (measured 600-800) */
#define OPEN_TX_NS 500.0
#define CHUNK_NS 1e9

static double drop_ns(struct xdp_gen *g, struct xdpsend_stream *st,
		      struct bpf_test_run_opts *opts)
{
	uint64_t t[3];

	st->hold = 1;
	t[0] = now_ns();
	opts->repeat = CAL_ITERS;
	bpf_prog_test_run_opts(g->prog_fd, opts);
	t[1] = now_ns();
	opts->repeat = 2 * CAL_ITERS;
	bpf_prog_test_run_opts(g->prog_fd, opts);
	t[2] = now_ns();
	st->hold = 0;
	/* At least a few ns: a faster figure would size runs too short. */
	double d = ((double)(t[2] - t[1]) - (double)(t[1] - t[0])) / CAL_ITERS;
	return d > 5 ? d : 5;
}

int xdp_gen_run(struct xdp_gen *g, int stream, volatile int *stop)
{
	struct xdpsend_stream *st = &g->skel->bss->streams[stream];
	struct xdp_md ctx = { .data_end = (uint32_t)g->len,
			      .ingress_ifindex = (uint32_t)g->ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, opts,
		    .data_in = g->frame, .data_size_in = (uint32_t)g->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx),
		    .batch_size = g->batch_size,
		    .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
	double rate = st->interval_q16 ? 65536.0 * 1e9 / st->interval_q16 : 0;
	double d = rate > 0 ? drop_ns(g, st, &opts) : 0;

	while (!*stop) {
		uint64_t t = now_ns();
		double left, n;

		if (st->sent >= st->quota || (st->deadline && t >= st->deadline))
			return 0;
		if (rate > 0) {
			/* what is left of the schedule, from the later of now and t0 */
			double due = (double)(st->quota - st->sent) / rate * 1e9;
			double from = t < st->t0 ? (double)(st->t0 - t) : 0;

			left = st->deadline ? (double)(st->deadline - t) :
					      from + due;
			if (left > from + due)
				left = from + due;
			n = (st->quota - st->sent) * 1.0;
			if (left - n * TX_NS > 0)
				n += (left - n * TX_NS) / d;
			n *= 1.02;
		} else {
			left = st->deadline ? (double)(st->deadline - t) : CHUNK_NS;
			if (left > CHUNK_NS)
				left = CHUNK_NS;
			n = left / OPEN_TX_NS;
		}
		if (n < 1024)
			n = 1024;
		opts.repeat = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
		/* A signal cuts a run short (EINTR); one that ends the sender
		 * ends the process, any other is no reason to stop. */
		if (bpf_prog_test_run_opts(g->prog_fd, &opts) && errno != EINTR)
			return -errno;
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
