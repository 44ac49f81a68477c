// SPDX-License-Identifier: MIT
/*
 * The user-space receiver: the same counts and latency histogram as the XDP
 * sink, from a UDP socket, for hosts where XDP is not an option and for round
 * trips: with --reflect it sends every packet straight back to its source,
 * and a second `recv` on the sending host, bound to the sender's source port,
 * then measures the round-trip time against the original schedule.
 * Its times include the receiving stack and the wake-up of this process.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "engine.h"

#define BATCH 64
#define BUF_LEN 2048

struct receiver {
	pthread_mutex_t lock;
	uint32_t cookie;
	uint64_t late_ns;
	int hdr_bytes;		/* Ethernet + IP + UDP, to report frame bytes */
	struct fwb_counters c;
	uint64_t hist[FWB_HIST_BUCKETS];
	__u64 next_seq[FWB_MAX_STREAMS];	/* common.h's types: the window's own */
	struct fwb_slot *window;
	int fd, cpu;
	bool reflect;
	volatile int stop;
};

/* Mirrors fwb_sink() in sink.bpf.c; keep the two in step. */
static void account(struct receiver *r, const uint8_t *p, size_t len, uint64_t now)
{
	struct fwb_stamp st;
	__u64 ext, *next;
	uint64_t lat;

	if (len < FWB_STAMP_LEN) {
		r->c.malformed++;
		return;
	}
	memcpy(&st, p, FWB_STAMP_LEN);
	if (!r->cookie || st.cookie != r->cookie) {
		r->c.stale++;
		return;
	}
	if (st.stream >= FWB_MAX_STREAMS) {
		r->c.malformed++;
		return;
	}
	next = &r->next_seq[st.stream];
	if (fwb_seq_extend(*next, st.seq, &ext)) {
		r->c.out_of_window++;
		return;
	}
	switch (fwb_seq_mark(&r->window[fwb_slot_index(st.stream, ext)], next,
			     ext)) {
	case FWB_SEQ_DUPLICATE:
		r->c.duplicated++;
		return;
	case FWB_SEQ_OUT_OF_WINDOW:
		r->c.out_of_window++;
		return;
	case FWB_SEQ_REORDERED:
		r->c.reordered++;
		break;
	case FWB_SEQ_NEW:
		break;
	}
	if (now < st.sched_ns) {
		r->c.early++;
		lat = 0;
	} else {
		lat = now - st.sched_ns;
	}
	if (lat > r->late_ns)
		r->c.late++;
	r->hist[fwb_hist_index(lat)]++;
	r->c.received++;
	r->c.lat_sum_ns += lat;
	r->c.bytes += len + r->hdr_bytes;
	if (!r->c.first_ns)
		r->c.first_ns = now;
	r->c.last_ns = now;
	if (lat > r->c.lat_max_ns)
		r->c.lat_max_ns = lat;
	if (!r->c.lat_min_ns || lat < r->c.lat_min_ns)
		r->c.lat_min_ns = lat ? lat : 1;
}

static void *receiver_main(void *arg)
{
	struct receiver *r = arg;
	static uint8_t bufs[BATCH][BUF_LEN];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_storage from[BATCH];

	if (r->cpu >= 0)
		pin_to_cpu(r->cpu);
	while (!r->stop) {
		int n;
		uint64_t now;

		memset(msgs, 0, sizeof(msgs));
		for (int k = 0; k < BATCH; k++) {
			iov[k].iov_base = bufs[k];
			iov[k].iov_len = BUF_LEN;
			msgs[k].msg_hdr.msg_iov = &iov[k];
			msgs[k].msg_hdr.msg_iovlen = 1;
			msgs[k].msg_hdr.msg_name = &from[k];
			msgs[k].msg_hdr.msg_namelen = sizeof(from[k]);
		}
		n = recvmmsg(r->fd, msgs, BATCH, MSG_WAITFORONE, NULL);
		if (n <= 0)
			continue;	/* timeout (SO_RCVTIMEO) or signal */
		now = now_ns();
		if (r->reflect) {
			for (int k = 0; k < n; k++)
				iov[k].iov_len = msgs[k].msg_len;
			sendmmsg(r->fd, msgs, n, MSG_DONTWAIT);
			continue;
		}
		pthread_mutex_lock(&r->lock);
		for (int k = 0; k < n; k++)
			account(r, bufs[k], msgs[k].msg_len, now);
		pthread_mutex_unlock(&r->lock);
	}
	return NULL;
}

static void recv_arm(void *ctx, uint32_t cookie)
{
	struct receiver *r = ctx;

	pthread_mutex_lock(&r->lock);
	memset(&r->c, 0, sizeof(r->c));
	memset(r->hist, 0, sizeof(r->hist));
	memset(r->next_seq, 0, sizeof(r->next_seq));
	memset(r->window, 0, FWB_WINDOW_SLOTS * sizeof(struct fwb_slot));
	r->cookie = cookie;
	pthread_mutex_unlock(&r->lock);
}

static void recv_report(void *ctx, struct json *j)
{
	struct receiver *r = ctx;

	pthread_mutex_lock(&r->lock);
	json_rx_report(j, r->reflect ? "reflect" : "recv", r->cookie, &r->c,
		       r->hist);
	pthread_mutex_unlock(&r->lock);
}

static const struct option recv_opts[] = {
	{ "bind", required_argument, NULL, 'b' },
	{ "port", required_argument, NULL, 'p' },
	{ "late-us", required_argument, NULL, 'l' },
	{ "cpu", required_argument, NULL, 'c' },
	{ "reflect", no_argument, NULL, 'r' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char recv_usage[] =
"usage: fwbench-engine recv --bind ADDR [--port P] [--late-us US] [--cpu N] [--reflect]\n"
"  Receives engine packets on a UDP socket; reads arm COOKIE | read | quit on stdin.\n";

int cmd_recv(int argc, char **argv)
{
	struct receiver *r = NULL;
	struct rx_ops ops = { .arm = recv_arm, .report = recv_report };
	struct bench_addr addr;
	struct sockaddr_storage ss = { 0 };
	struct timeval tv = { .tv_usec = 100000 };
	bool have_addr = false, reflect = false, running = false;
	uint64_t port = 9, late_ns = 1000000000ULL;
	int opt, cpu = -1, rcvbuf = 32 << 20, ret = EXIT_RUNTIME;
	pthread_t tid;
	struct json j;

	opterr = 0;	/* our own one-line message instead */
	while ((opt = getopt_long(argc, argv, "", recv_opts, NULL)) != -1) {
		switch (opt) {
		case 'b': parse_bench_addr("bind", optarg, &addr); have_addr = true; break;
		case 'p': port = parse_u64("port", optarg, 1, 65535); break;
		case 'l': late_ns = parse_u64("late-us", optarg, 1, 3600000000ULL) * 1000; break;
		case 'c': cpu = parse_u64("cpu", optarg, 0, 1023); break;
		case 'r': reflect = true; break;
		case 'h': fputs(recv_usage, stdout); exit(0);
		default: usage_error("recv: unknown option or missing value: %s "
					    "(see recv --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("recv: unexpected argument %s", argv[optind]);
	if (!have_addr)
		usage_error("recv: --bind is required");
	r = calloc(1, sizeof(*r));
	if (!r) {
		note("out of memory for the receiver");
		goto out;
	}
	pthread_mutex_init(&r->lock, NULL);
	r->late_ns = late_ns;
	r->cpu = cpu;
	r->reflect = reflect;
	r->fd = -1;
	ops.ctx = r;
	r->window = calloc(FWB_WINDOW_SLOTS, sizeof(struct fwb_slot));
	if (!r->window) {
		note("out of memory for the duplicate detector");
		goto out;
	}
	if (addr.family == AF_INET) {
		struct sockaddr_in *sin = (void *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr = addr.v4;
		r->hdr_bytes = 14 + 20 + 8;
	} else {
		struct sockaddr_in6 *sin6 = (void *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = addr.v6;
		r->hdr_bytes = 14 + 40 + 8;
	}
	r->fd = socket(addr.family, SOCK_DGRAM, 0);
	if (r->fd < 0) {
		note("cannot open a UDP socket: %s", strerror(errno));
		goto out;
	}
	setsockopt(r->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
	setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(r->fd, (struct sockaddr *)&ss, sizeof(ss))) {
		note("cannot bind UDP port %lu: %s", (unsigned long)port,
		     strerror(errno));
		goto out;
	}
	if (pthread_create(&tid, NULL, receiver_main, r)) {
		note("cannot start the receiver thread");
		goto out;
	}
	running = true;
	install_stop_handlers(&r->stop);
	json_begin(&j, stdout);
	json_bool(&j, "ready", true);
	json_str(&j, "mode", r->reflect ? "reflect" : "recv");
	json_u64(&j, "port", port);
	json_end(&j);
	control_loop(&ops);
	ret = 0;
out:
	if (running) {
		r->stop = 1;
		pthread_join(tid, NULL);
	}
	if (r) {
		if (r->fd >= 0)
			close(r->fd);
		free(r->window);
		pthread_mutex_destroy(&r->lock);
		free(r);
	}
	return ret;
}
