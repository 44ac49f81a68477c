// SPDX-License-Identifier: MIT
/*
 * The sender: UDP frames of an exact size written straight to an interface
 * (AF_PACKET, qdisc bypassed), open loop. At a target rate every packet has a
 * scheduled time t0 + i/rate and is sent at or after it, never before; the
 * stamp carries the schedule, not the send time, so a sender that falls
 * behind shows up as latency instead of hiding it (no coordinated omission).
 * A sender that cannot keep up stops at the deadline and reports the rate it
 * achieved, which the caller compares with the offered one.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/if_packet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "engine.h"
#include "packet.h"
#include "xdpsend.h"

#define MAX_THREADS FWB_MAX_STREAMS
#define MAX_BATCH 256
/* Sleep until this close to a due time, then spin (--spin-us). */
#define SPIN_NS_DEFAULT 150000ULL
/* Counts are 64-bit throughout; receivers extend the 32-bit wire numbers. */
#define MAX_COUNT 1000000000000000ULL

struct send_cfg {
	const char *ifname;
	int ifindex;
	struct frame_spec frame;
	uint64_t frame_size, mtu;
	double rate;		/* packets per second, all threads; 0 = open */
	double duration_s;	/* 0 = until count */
	uint64_t count;		/* 0 = until duration */
	int threads, ncpus, cpus[MAX_THREADS];
	uint32_t cookie;
	uint64_t seq_start;	/* first sequence number of every stream */
	uint32_t stream_base;	/* the first thread's stream number */
	uint64_t spin_ns;	/* spin this long before a due time, sleep before */
	int batch;
	bool via_xdp;		/* XDP live frames instead of the packet socket */
	uint32_t xdp_batch;	/* the kernel's page-pool batch per run */
	struct xdp_gen *xdp;
	uint64_t t0;
	volatile int stop;	/* a start failed, or SIGINT/SIGTERM: end early */
};

struct sender {
	const struct send_cfg *cfg;
	int stream;
	double rate;
	uint64_t quota;		/* packets this thread sends; UINT64_MAX = open */
	uint64_t sent, errors, refused, end_ns;
	uint64_t lag_sum, lag_min, lag_max;
	uint64_t *lag_hist;
	const char *fail;
	int fail_errno;
};

static void wait_until(uint64_t t, uint64_t spin_ns)
{
	uint64_t now = now_ns();

	if (t > now + spin_ns) {
		struct timespec ts;
		uint64_t wake = t - spin_ns;

		ts.tv_sec = wake / 1000000000ULL;
		ts.tv_nsec = wake % 1000000000ULL;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
	while (now_ns() < t)
		;
}

/* A packet socket bound to the interface, or -1 with errno set. */
static int open_socket(const struct send_cfg *c)
{
	struct sockaddr_ll sll = {
		.sll_family = AF_PACKET,
		.sll_ifindex = c->ifindex,
		.sll_halen = 6,
	};
	int fd, err, one = 1, sndbuf = 256 << 20;

	fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (fd < 0)
		goto out;
	/* Straight to the driver: the qdisc would only add a queue. */
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	/*
	 * Open loop: a frame the firewall has not taken yet still counts
	 * against the send buffer, so a buffer smaller than the firewall's
	 * input queue would hold the sender to the firewall's pace (closed
	 * loop, no loss). Make it larger than any queue on the path (FORCE:
	 * above wmem_max).
	 */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	memcpy(sll.sll_addr, c->frame.dst_mac, 6);
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll))) {
		err = errno;
		close(fd);
		fd = -1;
		errno = err;
	}
out:
	return fd;
}

static void record_lag(struct sender *s, uint64_t lag)
{
	uint32_t idx = fwb_hist_index(lag);

	s->lag_hist[idx]++;
	s->lag_sum += lag;
	if (lag > s->lag_max)
		s->lag_max = lag;
	if (lag < s->lag_min)
		s->lag_min = lag;
}

/* When packet seq is due: on the schedule, or now at open throttle. */
static uint64_t due_at(const struct send_cfg *c, double interval, uint64_t seq,
		       uint64_t now)
{
	return interval > 0 ? c->t0 + (uint64_t)(seq * interval) : now;
}

/*
 * One stream through the XDP sender: its program paces and stamps, so this
 * only keeps its runs going and collects what it did. A frame the veth peer's
 * ring had no room for is lost past the sender, as a full NIC ring would lose
 * it, and shows at the receiver.
 */
static void send_xdp(struct sender *s, uint64_t deadline, double interval)
{
	const struct send_cfg *c = s->cfg;
	const struct xdpsend_stream *st;
	int r;

	r = xdp_gen_bind(c->xdp, s->stream, c->cpus[s->stream], s->quota, c->t0,
			 interval, deadline == UINT64_MAX ? 0 : deadline);
	if (!r)
		r = xdp_gen_run(c->xdp, s->stream, &((struct send_cfg *)c)->stop);
	if (r) {
		s->fail = "BPF_PROG_RUN of the XDP sender failed";
		s->fail_errno = -r;
		s->end_ns = now_ns();
		return;
	}
	/* The last packet's time, not the run's end: ending a run takes the
	 * kernel 17-25 ms here, which is not sending. */
	st = xdp_gen_stream(c->xdp, s->stream);
	s->end_ns = st->sent ? st->last_ns : now_ns();
	s->sent = st->sent;
	if (interval <= 0) {	/* open throttle: every packet went when due */
		s->lag_hist[0] = st->sent;
		s->lag_min = st->sent ? 0 : UINT64_MAX;
		return;
	}
	s->lag_sum = st->lag_sum;
	s->lag_max = st->lag_max;
	s->lag_min = st->sent ? st->lag_min : UINT64_MAX;
	memcpy(s->lag_hist, st->lag_hist, sizeof(st->lag_hist));
}

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	const struct send_cfg *c = s->cfg;
	uint64_t deadline = c->duration_s > 0 ?
		c->t0 + (uint64_t)(c->duration_s * 1e9) : UINT64_MAX;
	double interval = s->rate > 0 ? 1e9 / s->rate : 0;
	size_t flen = c->frame.wire_len;
	uint8_t *frames = NULL;
	struct mmsghdr msgs[MAX_BATCH];
	struct iovec iov[MAX_BATCH];
	int fd = -1;

	if (c->ncpus)
		pin_to_cpu(c->cpus[s->stream % c->ncpus]);
	if (c->via_xdp) {
		send_xdp(s, deadline, interval);
		goto out;
	}
	frames = malloc(flen * c->batch);
	if (!frames) {
		s->fail = "out of memory for the frames";
		s->fail_errno = ENOMEM;
		goto out;
	}
	fd = open_socket(c);
	if (fd < 0) {
		s->fail = "cannot open a packet socket on the interface";
		s->fail_errno = errno;
		goto out;
	}
	memset(msgs, 0, sizeof(msgs));
	for (int k = 0; k < c->batch; k++) {
		frame_template(&c->frame, frames + k * flen);
		iov[k].iov_base = frames + k * flen;
		iov[k].iov_len = flen;
		msgs[k].msg_hdr.msg_iov = &iov[k];
		msgs[k].msg_hdr.msg_iovlen = 1;
	}
	wait_until(c->t0, c->spin_ns);
	while (s->sent < s->quota && !c->stop) {
		uint64_t now = now_ns(), due, n;
		int k, r, refused;

		if (now >= deadline)
			break;
		if (interval > 0) {
			due = (uint64_t)((now - c->t0) / interval) + 1;
			if (due > s->quota)
				due = s->quota;
			if (due <= s->sent) {
				uint64_t next = due_at(c, interval, s->sent,
						       now);

				wait_until(next < deadline ? next : deadline,
					   c->spin_ns);
				continue;
			}
			n = due - s->sent;
		} else {
			n = s->quota - s->sent;
		}
		if (n > (uint64_t)c->batch)
			n = c->batch;
		for (k = 0; k < (int)n; k++) {
			uint64_t seq = s->sent + k;
			struct fwb_stamp st = {
				.cookie = c->cookie,
				.stream = (uint16_t)(c->stream_base + s->stream),
				.seq = (uint32_t)(c->seq_start + seq),
				.sched_ns = due_at(c, interval, seq, now),
			};

			/* Threads interleave flows to cover all together. */
			frame_fill(&c->frame, frames + k * flen,
				   seq * c->threads + s->stream, &st);
		}
		r = sendmmsg(fd, msgs, n, 0);
		refused = 0;
		if (r < 0) {
			if (errno != ENOBUFS && errno != EAGAIN &&
			    errno != EINTR) {
				s->fail = "send failed";
				s->fail_errno = errno;
				break;
			}
			if (errno != ENOBUFS)
				s->errors++;
			r = 0;
		}
		/*
		 * A frame the next hop refused (ENOBUFS: veth found the peer's
		 * input queue full and dropped it) has left the sender: it is
		 * lost at the firewall's input, as a full NIC ring would lose
		 * it. Count it as sent and go on; sending it again would let
		 * the firewall pace the sender (closed loop).
		 */
		if (r < (int)n && (r > 0 || errno == ENOBUFS))
			refused = 1;
		for (k = 0; k < r + refused; k++)
			record_lag(s, now - due_at(c, interval, s->sent + k,
						   now));
		s->sent += r + refused;
		s->refused += refused;
	}
	s->end_ns = now_ns();
out:
	if (fd >= 0)
		close(fd);
	free(frames);
	return NULL;
}

static const struct option send_opts[] = {
	{ "ifname", required_argument, NULL, 'i' },
	{ "src-mac", required_argument, NULL, 'S' },
	{ "dst-mac", required_argument, NULL, 'D' },
	{ "src", required_argument, NULL, 's' },
	{ "src-count", required_argument, NULL, 'a' },
	{ "dst", required_argument, NULL, 'd' },
	{ "dst-count", required_argument, NULL, 'b' },
	{ "sport", required_argument, NULL, 'p' },
	{ "sport-count", required_argument, NULL, 'P' },
	{ "dport", required_argument, NULL, 'q' },
	{ "frame-size", required_argument, NULL, 'f' },
	{ "mtu", required_argument, NULL, 'm' },
	{ "rate", required_argument, NULL, 'r' },
	{ "duration", required_argument, NULL, 't' },
	{ "count", required_argument, NULL, 'n' },
	{ "threads", required_argument, NULL, 'T' },
	{ "cpus", required_argument, NULL, 'c' },
	{ "cookie", required_argument, NULL, 'k' },
	{ "batch", required_argument, NULL, 'B' },
	{ "payload-text", required_argument, NULL, 'x' },
	{ "seq-start", required_argument, NULL, 'Q' },
	{ "via", required_argument, NULL, 'V' },
	{ "xdp-batch", required_argument, NULL, 'X' },
	{ "stream", required_argument, NULL, 'y' },
	{ "spin-us", required_argument, NULL, 'W' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char send_usage[] =
"usage: fwbench-engine send --ifname IF --src-mac MAC --dst-mac MAC --src ADDR\n"
"         --dst ADDR [--src-count N] [--dst-count N] [--sport P] [--sport-count N]\n"
"         [--dport P] [--frame-size B] [--mtu B] [--rate PPS] (--duration S | --count N)\n"
"         [--threads T] [--cpus LIST] [--cookie C] [--batch N] [--payload-text STR]\n"
"         [--seq-start N] [--via packet|xdp] [--xdp-batch N] [--stream N]\n"
"         [--spin-us U]\n"
"  Frame size includes the 4-byte FCS (RFC 2544): 64..MTU+18. Rate 0 = open throttle.\n"
"  --payload-text writes STR right after the 18-byte stamp of every packet (for\n"
"  content-matching firewalls); the frame must have room for both.\n"
"  --seq-start starts every stream's sequence numbers at N, so a\n"
"  receiver's duplicate and reorder window can be tested at any point.\n"
"  --via xdp sends with XDP live frames (BPF_PROG_RUN, XDP_TX out of --ifname)\n"
"  instead of a packet socket: one CPU of --cpus per thread; the interface's\n"
"  veth peer must take XDP frames (GRO on, or an XDP program), else the kernel\n"
"  drops them unseen. --xdp-batch is the kernel's page-pool batch (default 64).\n"
"  --stream N numbers the threads' streams from N (default 0), so two senders\n"
"  of one trial keep their sequence numbers apart (not with --via xdp).\n"
"  --spin-us U: at a rate, sleep until U microseconds before each due time, then\n"
"  spin (default 150). Two senders sharing a CPU need it well below their\n"
"  packet interval, or the one spinning keeps the other from its schedule.\n"
"  SIGINT or SIGTERM ends the run early; the report says so (`stopped`).\n"
"  Addresses must lie in 198.18.0.0/15 or 2001:2::/48.\n";

static void parse_send(int argc, char **argv, struct send_cfg *c)
{
	struct frame_spec *f = &c->frame;
	bool have_smac = false, have_dmac = false, have_src = false,
	     have_dst = false, have_batch = false;
	size_t min_frame;
	int opt;

	*c = (struct send_cfg){
		.frame = { .src_count = 1, .dst_count = 1, .sport = 10000,
			   .sport_count = 1, .dport = 9 },
		.frame_size = 64, .mtu = 1500, .threads = 1, .batch = 64,
		.xdp_batch = 64, .spin_ns = SPIN_NS_DEFAULT,
	};
	opterr = 0;	/* our own one-line message instead */
	while ((opt = getopt_long(argc, argv, "", send_opts, NULL)) != -1) {
		switch (opt) {
		case 'i': c->ifname = optarg; break;
		case 'S': parse_mac("src-mac", optarg, f->src_mac); have_smac = true; break;
		case 'D': parse_mac("dst-mac", optarg, f->dst_mac); have_dmac = true; break;
		case 's': parse_bench_addr("src", optarg, &f->src); have_src = true; break;
		case 'd': parse_bench_addr("dst", optarg, &f->dst); have_dst = true; break;
		case 'a': f->src_count = parse_u64("src-count", optarg, 1, 1 << 24); break;
		case 'b': f->dst_count = parse_u64("dst-count", optarg, 1, 1 << 24); break;
		case 'p': f->sport = parse_u64("sport", optarg, 1, 65535); break;
		case 'P': f->sport_count = parse_u64("sport-count", optarg, 1, 65535); break;
		case 'q': f->dport = parse_u64("dport", optarg, 1, 65535); break;
		case 'f': c->frame_size = parse_u64("frame-size", optarg, 0, 1 << 20); break;
		case 'm': c->mtu = parse_u64("mtu", optarg, 68, 65535); break;
		case 'r': c->rate = parse_double("rate", optarg, 0, 1e9); break;
		case 't': c->duration_s = parse_double("duration", optarg, 0, 86400); break;
		case 'n': c->count = parse_u64("count", optarg, 1, MAX_COUNT); break;
		case 'T': c->threads = parse_u64("threads", optarg, 1, MAX_THREADS); break;
		case 'c': c->ncpus = parse_cpus("cpus", optarg, c->cpus, MAX_THREADS); break;
		case 'k': c->cookie = parse_u64("cookie", optarg, 1, UINT32_MAX); break;
		case 'x': f->text = optarg; f->text_len = strlen(optarg); break;
		case 'Q': c->seq_start = parse_u64("seq-start", optarg, 0, UINT32_MAX); break;
		case 'V':
			if (!strcmp(optarg, "xdp"))
				c->via_xdp = true;
			else if (strcmp(optarg, "packet"))
				usage_error("--via: %s is not packet or xdp", optarg);
			break;
		case 'y': c->stream_base = parse_u64("stream", optarg, 0, FWB_MAX_STREAMS - 1); break;
		case 'W': c->spin_ns = parse_u64("spin-us", optarg, 0, 1000000) * 1000; break;
		case 'X': c->xdp_batch = parse_u64("xdp-batch", optarg, 1, 256); break;
		case 'B': c->batch = parse_u64("batch", optarg, 1, MAX_BATCH); have_batch = true; break;
		case 'h': fputs(send_usage, stdout); exit(0);
		default: usage_error("send: unknown option or missing value: %s "
					    "(see send --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("send: unexpected argument %s", argv[optind]);
	if (!c->ifname)
		usage_error("send: --ifname is required");
	if (!have_smac || !have_dmac)
		usage_error("send: --src-mac and --dst-mac are required");
	if (!have_src || !have_dst)
		usage_error("send: --src and --dst are required");
	if (f->src.family != f->dst.family)
		usage_error("send: --src and --dst must both be IPv4 or both IPv6");
	bench_addr_check_span("src", &f->src, f->src_count);
	bench_addr_check_span("dst", &f->dst, f->dst_count);
	if (f->sport + f->sport_count - 1 > 65535)
		usage_error("--sport-count: ports run past 65535");
	min_frame = frame_min_size(f->src.family);
	if (c->frame_size < min_frame || c->frame_size > c->mtu + 18)
		usage_error("--frame-size: %lu is outside %zu..%lu (with the FCS; "
			    "MTU %lu + 18)", (unsigned long)c->frame_size,
			    min_frame, (unsigned long)(c->mtu + 18),
			    (unsigned long)c->mtu);
	f->wire_len = c->frame_size - 4;
	if (f->text && !f->text_len)
		usage_error("--payload-text: empty");
	if (f->text_len > frame_payload_len(f) - FWB_STAMP_LEN)
		usage_error("--payload-text: %zu bytes do not fit after the %d-byte "
			    "stamp of a %lu-byte frame (room for %zu)", f->text_len,
			    FWB_STAMP_LEN, (unsigned long)c->frame_size,
			    frame_payload_len(f) - FWB_STAMP_LEN);
	frame_prepare(f);
	if (c->duration_s <= 0 && !c->count)
		usage_error("send: give --duration or --count");
	if (!c->cookie) {
		srandom(now_ns() ^ getpid());
		c->cookie = (uint32_t)random() | 1;
	}
	if (c->stream_base + c->threads > FWB_MAX_STREAMS)
		usage_error("--stream: streams %u..%u run past the receivers' %d",
			    c->stream_base, c->stream_base + c->threads - 1,
			    FWB_MAX_STREAMS);
	c->ifindex = if_index_or_die(c->ifname);
	if (!c->via_xdp)
		return;
	if (c->stream_base)
		usage_error("--stream: the XDP sender numbers its own streams");
	if (have_batch)
		usage_error("--batch: the packet socket's; --via xdp paces per frame");
	if (c->ncpus < c->threads)
		usage_error("--via xdp: give every thread a CPU of its own (--cpus)");
	for (int a = 0; a < c->threads; a++)
		for (int b = a + 1; b < c->threads; b++)
			if (c->cpus[a] == c->cpus[b])
				usage_error("--via xdp: threads %d and %d share CPU %d",
					    a, b, c->cpus[a]);
}

int cmd_send(int argc, char **argv)
{
	struct send_cfg c;
	struct sender s[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	uint64_t sent = 0, errors = 0, refused = 0, end = 0, lag_sum = 0,
		 lag_max = 0, lag_min = UINT64_MAX, *lag_hist = NULL;
	double active_s, achieved;
	struct json j;
	int t, running = 0, ret = EXIT_RUNTIME;

	parse_send(argc, argv, &c);
	memset(s, 0, sizeof(s));
	lag_hist = calloc(FWB_HIST_BUCKETS, sizeof(uint64_t));
	if (!lag_hist) {
		note("out of memory for the send-lag histogram");
		goto out;
	}
	for (t = 0; t < c.threads; t++) {
		uint64_t total = c.count;

		s[t] = (struct sender){ .cfg = &c, .stream = t,
					.rate = c.rate / c.threads,
					.lag_min = UINT64_MAX };
		s[t].lag_hist = calloc(FWB_HIST_BUCKETS, sizeof(uint64_t));
		if (!s[t].lag_hist) {
			note("out of memory for stream %d's send-lag histogram",
			     t);
			goto out;
		}
		if (!total && c.rate > 0)
			total = (uint64_t)(c.rate * c.duration_s + 0.5);
		if (total)
			s[t].quota = total / c.threads +
				     ((uint64_t)t < total % c.threads);
		else
			s[t].quota = UINT64_MAX;
	}
	if (c.via_xdp) {
		bool refused = false;

		c.xdp = xdp_gen_open(&c.frame, c.ifindex, c.threads, c.cookie,
				     c.seq_start, c.xdp_batch, &refused);
		if (!c.xdp) {
			if (refused)
				ret = EXIT_UNSUPPORTED;
			goto out;
		}
	}
	/* Start a little ahead, so every thread's schedule shares t0; the XDP
	 * sender first times its runs (100-200 ms). */
	c.t0 = now_ns() + (c.via_xdp && c.rate > 0 ? 300000000ULL : 2000000ULL);
	install_stop_handlers(&c.stop);
	for (; running < c.threads; running++) {
		if (pthread_create(&tid[running], NULL, sender_main,
				   &s[running])) {
			note("cannot start sender thread %d", running);
			goto out;
		}
	}
	for (t = 0; t < running; t++)
		pthread_join(tid[t], NULL);
	running = 0;
	for (t = 0; t < c.threads; t++) {
		if (s[t].fail) {
			note("stream %d: %s (%s)", t, s[t].fail,
			     strerror(s[t].fail_errno));
			goto out;
		}
		sent += s[t].sent;
		errors += s[t].errors;
		refused += s[t].refused;
		if (s[t].end_ns > end)
			end = s[t].end_ns;
		lag_sum += s[t].lag_sum;
		if (s[t].lag_max > lag_max)
			lag_max = s[t].lag_max;
		if (s[t].lag_min < lag_min)
			lag_min = s[t].lag_min;
		for (unsigned int i = 0; i < FWB_HIST_BUCKETS; i++)
			lag_hist[i] += s[t].lag_hist[i];
	}
	/* The sender's active time: the whole window in duration mode, so a
	 * sender that fell behind shows a lower achieved rate; up to the last
	 * packet when a signal ended the run. */
	active_s = end > c.t0 ? (end - c.t0) / 1e9 : 0;
	if (c.duration_s > 0 && active_s < c.duration_s && !c.stop)
		active_s = c.duration_s;
	achieved = active_s > 0 ? sent / active_s : 0;

	json_begin(&j, stdout);
	json_str(&j, "mode", "send");
	json_str(&j, "via", c.via_xdp ? "xdp" : "packet");
	if (c.via_xdp)
		json_u64(&j, "xdp_batch_size", c.xdp_batch);
	json_u64(&j, "family", c.frame.src.family == AF_INET ? 4 : 6);
	json_u64(&j, "frame_size", c.frame_size);
	json_u64(&j, "payload_len", frame_payload_len(&c.frame));
	json_u64(&j, "payload_text_len", c.frame.text_len);
	json_num(&j, "offered_pps", c.rate);
	json_num(&j, "duration_s", c.duration_s);
	json_u64(&j, "threads", c.threads);
	json_u64(&j, "flows", c.frame.src_count * c.frame.sport_count *
			      c.frame.dst_count);
	json_u64(&j, "cookie", c.cookie);
	json_u64(&j, "t0_ns", c.t0);
	json_bool(&j, "stopped", c.stop);
	json_u64(&j, "end_ns", end);
	json_u64(&j, "sent", sent);
	json_u64(&j, "send_errors", errors);
	json_u64(&j, "refused_by_next_hop", refused);
	json_num(&j, "active_s", active_s);
	json_num(&j, "achieved_pps", achieved);
	json_arr(&j, "streams");
	for (t = 0; t < c.threads; t++) {
		json_obj(&j, NULL);
		json_u64(&j, "stream", c.stream_base + t);
		json_u64(&j, "sent", s[t].sent);
		json_u64(&j, "quota",
			 s[t].quota == UINT64_MAX ? 0 : s[t].quota);
		json_close_obj(&j);
	}
	json_close_arr(&j);
	json_latency(&j, "send_lag_ns", lag_hist, sent, lag_sum,
		     sent ? lag_min : 0, lag_max);
	json_end(&j);
	note("sent %lu packets of %lu B in %.3f s: %.0f pps (offered %.0f)",
	     (unsigned long)sent, (unsigned long)c.frame_size, active_s,
	     achieved, c.rate);
	ret = 0;
out:
	/* Only when a start failed: stop the senders already running. */
	if (running) {
		c.stop = 1;
		for (t = 0; t < running; t++)
			pthread_join(tid[t], NULL);
	}
	for (t = 0; t < c.threads; t++)
		free(s[t].lag_hist);
	free(lag_hist);
	xdp_gen_close(c.xdp);
	return ret;
}
