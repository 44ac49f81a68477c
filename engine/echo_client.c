// SPDX-License-Identifier: MIT
/*
 * The echo clients: n clients, each with one socket bound to its own source
 * (UDP: connect()ed to the server), so the gateway sees a flow per client.
 * K threads each run an epoll loop over their share. A cycle: send a message,
 * wait for its echo, time the round trip, next. Every echo is checked: magic,
 * client id, sequence number, size; a cycle ends with the valid echo of its
 * message or with the echo timeout (lost). With --crr every cycle is a TCP
 * connection of its own, as netperf's TCP_CRR.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>
#include "echo.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define MAX_THREADS 64
#define SCRATCH (ECHO_STREAM_MAX + ECHO_HDR)
#define STALL_NS 10000000000ULL	/* a stream write with no progress: broken */
#define EPOLL_EVENTS 256

struct client_cfg {
	enum echo_proto proto;
	int family;
	struct bench_addr server;
	uint16_t port;
	uint32_t clients;
	struct bench_addr *sources;
	char **source_text;
	uint32_t nsources;
	struct echo_frame frame;
	uint64_t seed, count;
	double duration_s, warmup_s;
	int threads, cpus[ECHO_MAX_CPUS], ncpus;
	uint64_t send_to_ns, echo_to_ns, connect_to_ns;
	bool crr;
	struct sockaddr_storage dst;
	socklen_t dstlen;
	uint64_t t0, tw, tend;	/* start, counting from, no cycle after */
	pthread_barrier_t ready;
	volatile int stop;	/* a signal or a failed start: end early */
};

enum cli_state { C_IDLE, C_CONNECT, C_SEND, C_WAIT, C_DONE };

struct cli {
	uint32_t id;
	int fd;
	uint32_t gen;		/* +1 per socket: crr replaces it mid-read */
	enum cli_state state;
	uint32_t events;	/* epoll interest */
	bool end;		/* the cycle under way sends END */
	bool unsent_counted;
	struct sockaddr_storage src;
	socklen_t srclen;
	const char *src_text;
	uint64_t seq;		/* the last message's sequence number */
	uint64_t cycles, t_start, deadline;
	uint8_t hdr[ECHO_HDR];	/* the message being sent; zeros follow */
	uint32_t wlen, woff;
	uint8_t rhdr[ECHO_HDR];	/* the stream's echo being read */
	uint32_t rhave, rlen, rleft;
	bool rbody;
	uint64_t msgs, bytes, sent, unsent, lost, late, foreign, wrong_size,
		 bad_seq, corrupt, connects, connect_failed;
	uint64_t rtt_n, rtt_sum, rtt_min, rtt_max, *hist;
	bool broken;
	char why[120];
};

struct worker {
	struct client_cfg *g;
	struct cli *cl;
	int n, live, ep, idx;
	uint64_t earliest;	/* no deadline before this */
	uint64_t done_ns;
	uint8_t *scratch;
	const uint8_t *zeros;
	char fail[160];
	pthread_t tid;
};

/* --- sockets and states --------------------------------------------------- */

static void set_events(struct worker *w, struct cli *c, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = c };

	if (c->events == ev)
		return;
	epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &e);
	c->events = ev;
}

static void set_deadline(struct worker *w, struct cli *c, uint64_t t)
{
	c->deadline = t;
	if (t && t < w->earliest)
		w->earliest = t;
}

/* Out of the epoll set before close() (see conn_close in echo_server.c): a
 * socket another process holds for a moment would go on being reported, and
 * against this client's next connection. */
static void cli_close(struct worker *w, struct cli *c)
{
	if (c->fd >= 0) {
		epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->gen++;
	c->events = 0;
	c->rhave = 0;
	c->rbody = false;
}

static void cli_finish(struct worker *w, struct cli *c)
{
	cli_close(w, c);
	c->state = C_DONE;
	c->deadline = 0;
	w->live--;
}

static void __attribute__((format(printf, 3, 4)))
cli_break(struct worker *w, struct cli *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	c->broken = true;
	cli_finish(w, c);
}

/*
 * A socket bound to the client's source, connecting to the server; 0, or
 * an errno. Setup errors (no such source here) fail the whole run.
 */
static int cli_open(struct worker *w, struct cli *c)
{
	const struct client_cfg *g = w->g;
	struct epoll_event ev = { .data.ptr = c };
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	int one = 1, err;

	c->fd = echo_socket(g->proto, g->family, true);
	if (c->fd < 0)
		return errno;
	c->gen++;
	if (g->proto != ECHO_UDP) {
		/* The port is picked at connect() by the whole 4-tuple, so
		 * clients sharing one source are not limited by bind(). */
		setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
			   sizeof(one));
		/* crr: close with a reset, so no TIME_WAIT exhausts ports. */
		if (g->crr && !c->end)
			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg,
				   sizeof(lg));
	}
	if (bind(c->fd, (struct sockaddr *)&c->src, c->srclen)) {
		err = errno;
		snprintf(w->fail, sizeof(w->fail),
			 "client %u: cannot bind %s: %s", c->id, c->src_text,
			 strerror(err));
		close(c->fd);
		c->fd = -1;
		return err;
	}
	if (connect(c->fd, (struct sockaddr *)&g->dst, g->dstlen) &&
	    errno != EINPROGRESS) {
		err = errno;
		close(c->fd);
		c->fd = -1;
		return err;
	}
	c->events = g->proto == ECHO_UDP ? EPOLLIN : EPOLLOUT;
	ev.events = c->events;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev)) {
		err = errno;
		close(c->fd);
		c->fd = -1;
		return err;
	}
	return 0;
}

static void try_send(struct worker *w, struct cli *c, uint64_t now);

static void start_send(struct worker *w, struct cli *c, uint64_t now)
{
	const struct client_cfg *g = w->g;
	struct echo_hdr h = { .magic = ECHO_MAGIC, .client = c->id };

	h.seq = ++c->seq;
	h.size = echo_size(&g->frame, g->seed, c->id, h.seq);
	h.flags = c->end ? ECHO_FLAG_END : 0;
	h.sent_ns = now;
	echo_hdr_put(c->hdr, &h);
	c->wlen = h.size;
	c->woff = 0;
	c->unsent_counted = false;
	if (!g->crr)
		c->t_start = now_ns();	/* `now` may be an event's, earlier */
	c->state = C_SEND;
	set_deadline(w, c, now + g->send_to_ns);
	try_send(w, c, now);
}

/* The next cycle, or END when the run is over. */
static void next_cycle(struct worker *w, struct cli *c, uint64_t now)
{
	const struct client_cfg *g = w->g;
	bool more = !g->stop && (g->count ? c->cycles < g->count :
				 now < g->tend);
	int err;

	c->end = !more;
	if (more)
		c->cycles++;
	if (!g->crr) {
		start_send(w, c, now);
		return;
	}
	c->t_start = now;	/* crr: the round trip includes the connect */
	c->state = C_CONNECT;
	err = cli_open(w, c);
	if (!err) {
		set_deadline(w, c, now + g->connect_to_ns);
		return;
	}
	if (w->fail[0]) {
		w->g->stop = 1;
		cli_finish(w, c);
		return;
	}
	/* Refused at once (no socket): counted now, the next cycle from the
	 * timer, so a run of refusals cannot hold up this thread's others. */
	c->connect_failed++;
	set_deadline(w, c, now + 1000000);
}

static void try_send(struct worker *w, struct cli *c, uint64_t now)
{
	const struct client_cfg *g = w->g;

	while (c->woff < c->wlen) {
		struct iovec iov[2];
		struct msghdr m = { .msg_iov = iov };
		ssize_t n;

		if (c->woff < ECHO_HDR) {
			iov[0].iov_base = c->hdr + c->woff;
			iov[0].iov_len = ECHO_HDR - c->woff;
			iov[1].iov_base = (void *)w->zeros;
			iov[1].iov_len = c->wlen - ECHO_HDR;
			m.msg_iovlen = 2;
		} else {
			iov[0].iov_base = (void *)w->zeros;
			iov[0].iov_len = c->wlen - c->woff;
			m.msg_iovlen = 1;
		}
		n = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			/* UDP: an ICMP error of an earlier datagram is
			 * reported once, on this call; the next one goes. */
			if (errno == EINTR || (g->proto == ECHO_UDP &&
					       errno == ECONNREFUSED))
				continue;
			if (errno == EAGAIN || errno == ENOBUFS) {
				set_events(w, c, EPOLLOUT);
				return;
			}
			cli_break(w, c, "send: %s", strerror(errno));
			return;
		}
		c->woff += n;
	}
	if (c->end) {
		cli_finish(w, c);
		return;
	}
	c->sent++;
	c->state = C_WAIT;
	set_deadline(w, c, now_ns() + g->echo_to_ns);
	set_events(w, c, EPOLLIN);
}

/* A client that is done with a connection attempt: its END, or its next cycle. */
static void cli_onward(struct worker *w, struct cli *c, uint64_t now)
{
	if (c->end)
		cli_finish(w, c);
	else
		next_cycle(w, c, now);
}

static void connect_done(struct worker *w, struct cli *c, uint64_t now)
{
	int err = 0;
	socklen_t len = sizeof(err);

	getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
	if (err) {
		c->connect_failed++;
		if (!w->g->crr) {
			cli_break(w, c, "connect: %s", strerror(err));
			return;
		}
		cli_close(w, c);
		cli_onward(w, c, now);
		return;
	}
	c->connects++;
	if (!w->g->crr) {
		c->state = C_IDLE;
		c->deadline = 0;
		set_events(w, c, EPOLLIN);
		return;
	}
	start_send(w, c, now);
}

/* --- echoes --------------------------------------------------------------- */

static bool in_window(const struct client_cfg *g, uint64_t now)
{
	return g->count || (now >= g->tw && now < g->tend);
}

/*
 * A whole echo of `len` bytes (magic already checked). In order: the client
 * id (else foreign), the sequence number (a number never sent: bad_seq),
 * the size field against size(seed, id, seq) and, UDP, the length against
 * the field (else wrong_size), then the one outstanding (else late). An
 * invalid echo is counted and otherwise ignored: the cycle goes on waiting.
 */
static void echo_arrived(struct worker *w, struct cli *c,
			 const struct echo_hdr *h, size_t len, uint64_t now)
{
	const struct client_cfg *g = w->g;
	uint64_t rtt;

	if (h->client != c->id) {
		c->foreign++;
		return;
	}
	if ((h->flags & ECHO_FLAG_END) || !h->seq || h->seq > c->seq) {
		c->bad_seq++;
		return;
	}
	if (h->size != echo_size(&g->frame, g->seed, c->id, h->seq) ||
	    (g->proto == ECHO_UDP && len != h->size)) {
		c->wrong_size++;
		return;
	}
	if (c->state != C_WAIT || h->seq != c->seq) {
		c->late++;
		return;
	}
	rtt = now - c->t_start;
	if (in_window(g, now)) {
		c->msgs++;
		c->bytes += h->size;
		c->hist[fwb_hist_index(rtt)]++;
		c->rtt_n++;
		c->rtt_sum += rtt;
		if (rtt > c->rtt_max)
			c->rtt_max = rtt;
		if (!c->rtt_min || rtt < c->rtt_min)
			c->rtt_min = rtt ? rtt : 1;
	}
	if (g->crr)
		cli_close(w, c);
	next_cycle(w, c, now);
}

/*
 * The length of the stream echo whose header is `h`. Framed by what this
 * client sent when the header names it and a number it sent, by the size
 * field otherwise, so one wrong field (an injected fault) is counted without
 * losing the stream; 0 when neither can frame it.
 */
static uint32_t stream_frame(const struct worker *w, const struct cli *c,
			     const struct echo_hdr *h)
{
	if (h->client == c->id && h->seq >= 1 && h->seq <= c->seq)
		return echo_size(&w->g->frame, w->g->seed, c->id, h->seq);
	if (h->size < ECHO_HDR || h->size > ECHO_STREAM_MAX)
		return 0;
	return h->size;
}

/* The server ended the stream: broken, or in crr this cycle's echo lost. */
static void stream_gone(struct worker *w, struct cli *c, uint64_t now,
			const char *why)
{
	if (w->g->crr && c->state == C_WAIT) {
		c->lost++;
		cli_close(w, c);
		next_cycle(w, c, now);
		return;
	}
	cli_break(w, c, "%s", why);
}

static void stream_receive(struct worker *w, struct cli *c, uint64_t now)
{
	uint32_t gen = c->gen;

	for (;;) {
		ssize_t n = recv(c->fd, w->scratch, SCRATCH, MSG_DONTWAIT);
		const uint8_t *p = w->scratch;

		now = now_ns();	/* an echo of a message sent in this loop */
		if (n == 0) {
			stream_gone(w, c, now,
				    "the server closed the connection");
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				stream_gone(w, c, now, strerror(errno));
			return;
		}
		while (n > 0) {
			struct echo_hdr h;
			uint32_t take;

			if (!c->rbody) {
				take = ECHO_HDR - c->rhave;
				if (take > n)
					take = n;
				memcpy(c->rhdr + c->rhave, p, take);
				c->rhave += take;
				p += take;
				n -= take;
				if (c->rhave < ECHO_HDR)
					break;
				echo_hdr_get(c->rhdr, &h);
				if (h.magic != ECHO_MAGIC) {
					c->corrupt++;
					cli_break(w, c, "corrupt echo: magic "
						  "0x%08x", h.magic);
					return;
				}
				c->rlen = stream_frame(w, c, &h);
				if (!c->rlen) {
					c->corrupt++;
					cli_break(w, c, "corrupt echo: size %u",
						  h.size);
					return;
				}
				c->rleft = c->rlen - ECHO_HDR;
				c->rbody = true;
			}
			take = c->rleft < n ? c->rleft : n;
			c->rleft -= take;
			p += take;
			n -= take;
			if (c->rleft)
				break;
			c->rbody = false;
			c->rhave = 0;
			echo_hdr_get(c->rhdr, &h);
			echo_arrived(w, c, &h, c->rlen, now);
			if (c->gen != gen || c->state == C_DONE)
				return;	/* crr's next connection, or done */
		}
	}
}

static void dgram_receive(struct worker *w, struct cli *c, uint64_t now)
{
	for (;;) {
		ssize_t n = recv(c->fd, w->scratch, SCRATCH,
				 MSG_DONTWAIT | MSG_TRUNC);
		struct echo_hdr h;

		now = now_ns();
		if (n < 0) {
			if (errno == EINTR || errno == ECONNREFUSED)
				continue;
			return;
		}
		if (n < ECHO_HDR || n > SCRATCH) {
			c->corrupt++;
			continue;
		}
		echo_hdr_get(w->scratch, &h);
		if (h.magic != ECHO_MAGIC) {
			c->corrupt++;
			continue;
		}
		echo_arrived(w, c, &h, n, now);
		if (c->state == C_DONE)
			return;
	}
}

static void on_event(struct worker *w, struct cli *c, uint32_t ev)
{
	uint64_t now = now_ns();

	switch (c->state) {
	case C_CONNECT:
		connect_done(w, c, now);
		break;
	case C_SEND:
		try_send(w, c, now);
		break;
	case C_IDLE:
	case C_WAIT:
		if (w->g->proto == ECHO_UDP)
			dgram_receive(w, c, now);
		else
			stream_receive(w, c, now);
		break;
	case C_DONE:
		break;
	}
}

/* A deadline passed. */
static void expire(struct worker *w, struct cli *c, uint64_t now)
{
	const struct client_cfg *g = w->g;

	switch (c->state) {
	case C_CONNECT:
		if (c->fd < 0) {	/* next_cycle() counted it */
			cli_onward(w, c, now);
			return;
		}
		c->connect_failed++;
		if (!g->crr) {
			cli_break(w, c, "connect: no answer in %lu ms",
				  (unsigned long)(g->connect_to_ns / 1000000));
			return;
		}
		cli_close(w, c);
		cli_onward(w, c, now);
		return;
	case C_SEND:
		/* A stream finishes a begun message, or loses its framing. */
		if (g->proto != ECHO_UDP && c->woff) {
			if (c->unsent_counted) {
				cli_break(w, c, "send: no progress in %.0f s",
					  (STALL_NS + g->send_to_ns) / 1e9);
				return;
			}
			if (!c->end)
				c->unsent++;
			c->unsent_counted = true;
			set_deadline(w, c, now + STALL_NS);
			return;
		}
		if (c->end) {
			cli_finish(w, c);
			return;
		}
		c->unsent++;	/* its number is gone: the server sees a gap */
		if (g->crr)
			cli_close(w, c);
		next_cycle(w, c, now);
		return;
	case C_WAIT:
		c->lost++;
		if (g->crr)
			cli_close(w, c);
		next_cycle(w, c, now);
		return;
	default:
		c->deadline = 0;
	}
}

static void check_deadlines(struct worker *w, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	if (now < w->earliest)
		return;
	for (int i = 0; i < w->n; i++) {
		struct cli *c = &w->cl[i];

		if (c->state == C_DONE || !c->deadline)
			continue;
		if (now >= c->deadline)
			expire(w, c, now);
		if (c->state != C_DONE && c->deadline && c->deadline < next)
			next = c->deadline;
	}
	w->earliest = next;
}

static void run_loop(struct worker *w, int until_live_or_connected)
{
	struct epoll_event evs[EPOLL_EVENTS];

	for (;;) {
		uint64_t now = now_ns(), wait;
		int n, ms, pending = 0;

		check_deadlines(w, now);
		if (until_live_or_connected) {
			for (int i = 0; i < w->n; i++)
				pending += w->cl[i].state == C_CONNECT;
			if (!pending)
				return;
		} else if (!w->live) {
			return;
		}
		wait = w->earliest > now ? w->earliest - now : 0;
		ms = wait > 100000000ULL ? 100 :
		     (int)((wait + 999999) / 1000000);
		n = epoll_wait(w->ep, evs, EPOLL_EVENTS, ms);
		for (int i = 0; i < n; i++)
			on_event(w, evs[i].data.ptr, evs[i].events);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct client_cfg *g = w->g;
	uint64_t now;
	int r;

	if (g->ncpus)
		pin_to_cpu(g->cpus[w->idx % g->ncpus]);
	w->live = w->n;
	w->earliest = UINT64_MAX;
	/* Every socket first (crr: none kept), so all start together. */
	for (int i = 0; i < w->n && !g->crr && !w->fail[0]; i++) {
		struct cli *c = &w->cl[i];
		int err = cli_open(w, c);

		now = now_ns();
		if (w->fail[0])
			break;
		if (err) {
			c->connect_failed += g->proto != ECHO_UDP;
			cli_break(w, c, "connect: %s", strerror(err));
		} else if (g->proto == ECHO_UDP) {
			c->state = C_IDLE;
		} else {
			c->state = C_CONNECT;
			set_deadline(w, c, now + g->connect_to_ns);
		}
	}
	if (w->fail[0])
		g->stop = 1;
	else
		run_loop(w, 1);
	r = pthread_barrier_wait(&g->ready);
	if (r == PTHREAD_BARRIER_SERIAL_THREAD) {
		g->t0 = now_ns();
		g->tw = g->t0 + (uint64_t)(g->warmup_s * 1e9);
		g->tend = g->tw + (uint64_t)(g->duration_s * 1e9);
	}
	pthread_barrier_wait(&g->ready);
	now = now_ns();
	for (int i = 0; i < w->n; i++) {
		struct cli *c = &w->cl[i];

		if (g->stop && c->state != C_DONE && w->fail[0])
			cli_finish(w, c);
		else if (c->state == C_IDLE || (g->crr && c->state != C_DONE))
			next_cycle(w, c, now);
	}
	run_loop(w, 0);
	w->done_ns = now_ns();
	return NULL;
}

/* --- options -------------------------------------------------------------- */

static const struct option cli_opts[] = {
	{ "proto", required_argument, NULL, 'P' },
	{ "server", required_argument, NULL, 'S' },
	{ "port", required_argument, NULL, 'p' },
	{ "clients", required_argument, NULL, 'n' },
	{ "sources", required_argument, NULL, 'a' },
	{ "frame-size", required_argument, NULL, 'f' },
	{ "seed", required_argument, NULL, 's' },
	{ "duration", required_argument, NULL, 'd' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "count", required_argument, NULL, 'N' },
	{ "threads", required_argument, NULL, 't' },
	{ "cpus", required_argument, NULL, 'c' },
	{ "send-timeout-ms", required_argument, NULL, 'T' },
	{ "echo-timeout-ms", required_argument, NULL, 'E' },
	{ "connect-timeout-ms", required_argument, NULL, 'C' },
	{ "crr", no_argument, NULL, 'r' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char cli_usage[] =
"usage: fwbench-engine echo --proto tcp|udp --server ADDR --port P --clients N\n"
"         --sources A[,B,...] --frame-size N|LO-HI --seed S\n"
"         (--duration SEC [--warmup SEC] | --count M) [--threads K]\n"
"         [--cpus LIST] [--send-timeout-ms 500] [--echo-timeout-ms 500]\n"
"         [--connect-timeout-ms 5000] [--crr]\n"
"  N clients, each on its own socket from its own source (one per client, or\n"
"  one for all), send a message, wait for its echo, send the next. --crr: a\n"
"  new TCP connection per message. Thread k runs on the k-th of --cpus\n"
"  (round robin). One JSON report on stdout.\n";

static void parse_sources(struct client_cfg *g, const char *list)
{
	char *copy = strdup(list), *tok, *save = NULL;
	uint32_t n = 0;

	g->sources = calloc(ECHO_MAX_CLIENTS, sizeof(*g->sources));
	g->source_text = calloc(ECHO_MAX_CLIENTS, sizeof(*g->source_text));
	if (!copy || !g->sources || !g->source_text)
		runtime_error("--sources: out of memory");
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == ECHO_MAX_CLIENTS)
			usage_error("--sources: more than %d addresses",
				    ECHO_MAX_CLIENTS);
		parse_bench_addr("sources", tok, &g->sources[n]);
		g->source_text[n++] = strdup(tok);
	}
	if (!n)
		usage_error("--sources: no address given");
	g->nsources = n;
	free(copy);
}

static void parse_client(int argc, char **argv, struct client_cfg *g)
{
	const char *proto = NULL, *frame = NULL, *sources = NULL;
	bool have_server = false, have_port = false, have_clients = false,
	     have_seed = false, have_duration = false, have_warmup = false;
	uint64_t send_ms = 500, echo_ms = 500, connect_ms = 5000;
	int opt;

	g->threads = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", cli_opts, NULL)) != -1) {
		switch (opt) {
		case 'P': proto = optarg; break;
		case 'S': parse_bench_addr("server", optarg, &g->server); have_server = true; break;
		case 'p': g->port = parse_u64("port", optarg, 1, 65535); have_port = true; break;
		case 'n': g->clients = parse_u64("clients", optarg, 1, ECHO_MAX_CLIENTS); have_clients = true; break;
		case 'a': sources = optarg; break;
		case 'f': frame = optarg; break;
		case 's': g->seed = parse_u64("seed", optarg, 0, UINT64_MAX); have_seed = true; break;
		case 'd': g->duration_s = parse_double("duration", optarg, 0.001, 86400); have_duration = true; break;
		case 'w': g->warmup_s = parse_double("warmup", optarg, 0, 86400); have_warmup = true; break;
		case 'N': g->count = parse_u64("count", optarg, 1, 1000000000000ULL); break;
		case 't': g->threads = parse_u64("threads", optarg, 1, MAX_THREADS); break;
		case 'c': g->ncpus = parse_cpus("cpus", optarg, g->cpus, ECHO_MAX_CPUS); break;
		case 'T': send_ms = parse_u64("send-timeout-ms", optarg, 1, 3600000); break;
		case 'E': echo_ms = parse_u64("echo-timeout-ms", optarg, 1, 3600000); break;
		case 'C': connect_ms = parse_u64("connect-timeout-ms", optarg, 1, 3600000); break;
		case 'r': g->crr = true; break;
		case 'h': fputs(cli_usage, stdout); exit(0);
		default: usage_error("echo: unknown option or missing value: %s "
				     "(see echo --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("echo: unexpected argument %s", argv[optind]);
	if (!proto || !have_server || !have_port || !have_clients || !sources ||
	    !frame || !have_seed)
		usage_error("echo: --proto, --server, --port, --clients, "
			    "--sources, --frame-size and --seed are required");
	if (have_duration == !!g->count)
		usage_error("echo: give --duration or --count (one of them)");
	if (have_warmup && !have_duration)
		usage_error("--warmup: only with --duration");
	g->proto = echo_parse_proto(proto);
	g->family = g->server.family;
	echo_probe_proto(g->proto, g->family);
	if (g->crr && g->proto != ECHO_TCP)
		usage_error("--crr: a connection per message needs tcp, not %s",
			    echo_proto_name(g->proto));
	echo_parse_frame(frame, &g->frame);
	echo_check_frame(&g->frame, g->proto, g->family);
	parse_sources(g, sources);
	if (g->nsources != 1 && g->nsources != g->clients)
		usage_error("--sources: %u addresses for %u clients (give one "
			    "per client or one for all)", g->nsources,
			    g->clients);
	for (uint32_t i = 0; i < g->nsources; i++)
		if (g->sources[i].family != g->family)
			usage_error("--sources: %s is %s but the server is %s",
				    g->source_text[i],
				    echo_family_name(g->sources[i].family),
				    echo_family_name(g->family));
	g->send_to_ns = send_ms * 1000000ULL;
	g->echo_to_ns = echo_ms * 1000000ULL;
	g->connect_to_ns = connect_ms * 1000000ULL;
	if ((uint32_t)g->threads > g->clients)
		g->threads = g->clients;	/* one per client at most */
	g->dstlen = echo_sockaddr(&g->server, g->port, &g->dst);
}

/* --- report --------------------------------------------------------------- */

enum { T_MSGS, T_BYTES, T_SENT, T_UNSENT, T_LOST, T_LATE, T_FOREIGN,
       T_WRONG_SIZE, T_BAD_SEQ, T_CORRUPT, T_CONNECTS, T_CONNECT_FAILED,
       T_N };
static const char *const count_names[T_N] = {
	"msgs", "bytes", "sent", "unsent", "lost", "late", "foreign",
	"wrong_size", "bad_seq", "corrupt", "connects", "connect_failed",
};

static void cli_counts(const struct cli *c, uint64_t *v)
{
	uint64_t x[T_N] = { c->msgs, c->bytes, c->sent, c->unsent, c->lost,
			    c->late, c->foreign, c->wrong_size, c->bad_seq,
			    c->corrupt, c->connects, c->connect_failed };

	memcpy(v, x, sizeof(x));
}

static double cli_rtt(const struct cli *c, double q)
{
	return hist_percentile(c->hist, c->rtt_n, q, c->rtt_min, c->rtt_max);
}

static void client_report(const struct client_cfg *g, const struct cli *cl,
			  double window_s, const uint64_t *hist)
{
	uint64_t tot[T_N] = { 0 }, v[T_N], broken = 0, n = 0, sum = 0,
		 min = 0, max = 0;
	struct json j;

	for (uint32_t i = 0; i < g->clients; i++) {
		const struct cli *c = &cl[i];

		cli_counts(c, v);
		for (int k = 0; k < T_N; k++)
			tot[k] += v[k];
		broken += c->broken;
		n += c->rtt_n;
		sum += c->rtt_sum;
		if (c->rtt_n && (!min || c->rtt_min < min))
			min = c->rtt_min;
		if (c->rtt_max > max)
			max = c->rtt_max;
	}
	json_begin(&j, stdout);
	json_str(&j, "mode", "echo");
	json_str(&j, "proto", echo_proto_name(g->proto));
	json_str(&j, "family", echo_family_name(g->family));
	json_u64(&j, "clients", g->clients);
	json_u64(&j, "threads", g->threads);
	json_bool(&j, "crr", g->crr);
	json_obj(&j, "frame");
	json_u64(&j, "lo", g->frame.lo);
	json_u64(&j, "hi", g->frame.hi);
	json_close_obj(&j);
	json_u64(&j, "seed", g->seed);
	if (g->count)
		json_u64(&j, "count", g->count);
	else
		echo_json_null(&j, "count");
	json_num(&j, "warmup_s", g->warmup_s);
	json_num(&j, "duration_s", window_s);
	json_obj(&j, "totals");
	for (int k = 0; k < T_N; k++) {
		json_u64(&j, count_names[k], tot[k]);
		if (k == T_BYTES) {
			json_num(&j, "msgs_per_s", window_s > 0 ?
				 tot[T_MSGS] / window_s : 0);
			json_num(&j, "bytes_per_s", window_s > 0 ?
				 tot[T_BYTES] / window_s : 0);
		}
	}
	json_u64(&j, "broken", broken);
	json_close_obj(&j);
	json_latency(&j, "rtt_ns", hist, n, sum, min, max);
	json_arr(&j, "per_client");
	for (uint32_t i = 0; i < g->clients; i++) {
		const struct cli *c = &cl[i];

		cli_counts(c, v);
		json_obj(&j, NULL);
		json_u64(&j, "id", c->id);
		json_str(&j, "source", c->src_text);
		for (int k = 0; k < T_N; k++) {
			json_u64(&j, count_names[k], v[k]);
			if (k == T_BYTES) {
				json_num(&j, "msgs_per_s", window_s > 0 ?
					 c->msgs / window_s : 0);
				json_num(&j, "bytes_per_s", window_s > 0 ?
					 c->bytes / window_s : 0);
				json_num(&j, "rtt_p50_ns", cli_rtt(c, 0.5));
				json_num(&j, "rtt_p99_ns", cli_rtt(c, 0.99));
				json_num(&j, "rtt_mean_ns", c->rtt_n ?
					 (double)c->rtt_sum / c->rtt_n : NAN);
			}
		}
		if (c->broken)
			json_str(&j, "broken", c->why);
		else
			echo_json_null(&j, "broken");
		json_close_obj(&j);
	}
	json_close_arr(&j);
	echo_json_rusage(&j);
	json_end(&j);
}

int cmd_echo(int argc, char **argv)
{
	struct client_cfg *g = calloc(1, sizeof(*g));
	struct worker *w = NULL;
	struct cli *cl = NULL;
	uint64_t *hists = NULL, *hist = NULL, last = 0;
	uint8_t *zeros = NULL;
	sigset_t stops, old;
	int started = 0, ret = EXIT_RUNTIME;
	double window_s;
	struct rlimit rl;

	if (!g)
		runtime_error("echo: out of memory");
	parse_client(argc, argv, g);
	cl = calloc(g->clients, sizeof(*cl));
	w = calloc(g->threads, sizeof(*w));
	/* 37 KB a client, touched only where round trips fall. */
	hists = calloc((size_t)g->clients * FWB_HIST_BUCKETS, sizeof(*hists));
	hist = calloc(FWB_HIST_BUCKETS, sizeof(*hist));
	zeros = calloc(1, g->frame.hi);
	if (!cl || !w || !hists || !hist || !zeros) {
		note("echo: out of memory for %u clients", g->clients);
		goto out;
	}
	for (uint32_t i = 0; i < g->clients; i++) {
		struct cli *c = &cl[i];
		uint32_t s = g->nsources == 1 ? 0 : i;

		c->id = i + 1;
		c->fd = -1;
		c->hist = hists + (size_t)i * FWB_HIST_BUCKETS;
		c->srclen = echo_sockaddr(&g->sources[s], 0, &c->src);
		c->src_text = g->source_text[s];
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	pthread_barrier_init(&g->ready, NULL, g->threads);
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stops, &old);
	for (int t = 0; t < g->threads; t++) {
		uint32_t lo = (uint64_t)g->clients * t / g->threads,
			 hi = (uint64_t)g->clients * (t + 1) / g->threads;

		w[t] = (struct worker){ .g = g, .cl = cl + lo, .n = hi - lo,
					.idx = t, .zeros = zeros,
					.ep = epoll_create1(EPOLL_CLOEXEC),
					.scratch = malloc(SCRATCH) };
		if (w[t].ep < 0 || !w[t].scratch) {
			note("echo: cannot set up thread %d: %s", t,
			     strerror(errno));
			goto out;
		}
	}
	for (; started < g->threads; started++)
		if (pthread_create(&w[started].tid, NULL, worker_main,
				   &w[started])) {
			note("echo: cannot start thread %d", started);
			goto out;
		}
	install_stop_handlers(&g->stop);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	for (int t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	for (int t = 0; t < started; t++) {
		if (w[t].fail[0]) {
			note("echo: %s", w[t].fail);
			started = 0;
			goto out;
		}
		if (w[t].done_ns > last)
			last = w[t].done_ns;
	}
	started = 0;
	/* The counting window: the whole run for --count; else the last
	 * --duration seconds, shorter only if a signal ended the run early. */
	if (g->count)
		window_s = (last - g->t0) / 1e9;
	else
		window_s = ((last < g->tend ? last : g->tend) -
			    (last < g->tw ? last : g->tw)) / 1e9;
	for (uint32_t i = 0; i < g->clients; i++)
		for (uint32_t b = 0; b < FWB_HIST_BUCKETS; b++)
			hist[b] += cl[i].hist[b];
	client_report(g, cl, window_s, hist);
	ret = 0;
out:
	if (started) {
		/* Only a failed start: threads already running see stop (a
		 * thread that never started leaves the barrier short, so the
		 * process exits instead of joining). */
		exit(ret);
	}
	free(hists);
	free(hist);
	free(zeros);
	if (w)
		for (int t = 0; t < g->threads; t++) {
			free(w[t].scratch);
			if (w[t].ep > 0)
				close(w[t].ep);
		}
	free(w);
	free(cl);
	return ret;
}
