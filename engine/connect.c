// SPDX-License-Identifier: MIT
/*
 * connect: an open-loop TCP connection generator. Connection i is due at
 * t0 + i / rate and is started at or after that time (its lag recorded),
 * never held back by the ones still in flight; it goes to target(i) (a
 * seeded pure function, conn.h) from source i % nsources. Each is a
 * nonblocking connect() watched by epoll: established (writable) within
 * --timeout-ms, or failed by its error's class. On establishment TCP_INFO's
 * tcpi_rtt is the kernel's own SYN -> SYN-ACK time (free of this program's
 * wake-ups); with tcpi_total_retrans > 0 the SYN was sent again, so the
 * sample is left out (Karn) and the connection counts as slow. It is then
 * closed with a reset (SO_LINGER 0): no TIME_WAIT, so thousands a second do
 * not run out of ephemeral ports. Thread k owns connections k, k + K, ...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "conn.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define MAX_THREADS 64
#define MAX_SOURCES 4096
#define EPOLL_EVENTS 256
#define RING_MAX (1U << 20)

struct ccfg {
	struct conn_target *targets;
	uint32_t ntargets;
	struct sockaddr_storage src[MAX_SOURCES];
	socklen_t srclen[MAX_SOURCES];
	char *src_text[MAX_SOURCES];
	uint32_t nsrc;
	int family;
	double rate, interval_ns, duration_s;
	uint64_t n;		/* connections in all */
	uint64_t seed, timeout_ns, slow_ns, spin_ns;
	int threads, cpus[ECHO_MAX_CPUS], ncpus;
	FILE *samples;
	uint64_t t0;
	pthread_barrier_t ready;
	volatile int stop;
};

/* One connection in flight; a ring of them per thread, oldest first, so the
 * oldest deadline is always at the head (every timeout is the same). */
struct flight {
	int fd;			/* -1: done */
	uint32_t gen;
	uint32_t target;
	uint64_t t_call;
};

struct stat_h {
	uint64_t n, sum, min, max, *hist;
};

struct cthread {
	struct ccfg *g;
	int idx, ep;
	struct flight *ring;
	uint32_t cap, head, tail, gen;
	uint64_t next_i, last_start;
	uint64_t attempted, connected, failed[CF_N], slow, retransmitted,
		 skipped;
	int first_other;
	struct stat_h lag, rtt, user;
	char fail[160];
	pthread_t tid;
};

static void stat_add(struct stat_h *s, uint64_t v)
{
	s->hist[fwb_hist_index(v)]++;
	s->sum += v;
	if (!s->n || v < s->min)
		s->min = v;
	if (v > s->max)
		s->max = v;
	s->n++;
}

static void fail_conn(struct cthread *w, int err)
{
	enum conn_fail c = conn_fail_class(err);

	w->failed[c]++;
	if (c == CF_OTHER && !w->first_other)
		w->first_other = err;
}

static void finish(struct cthread *w, struct flight *f)
{
	/* No other process holds these descriptors (CLOEXEC, no fork), so
	 * close() also takes them out of the epoll set. */
	close(f->fd);
	f->fd = -1;
}

static void log_sample(struct cthread *w, const struct flight *f,
		       uint32_t rtt_us, uint64_t user_ns, uint32_t retrans)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char text[INET6_ADDRSTRLEN];
	struct ep_key k;

	if (getsockname(f->fd, (struct sockaddr *)&ss, &len))
		return;
	ep_key_of(&ss, &k);
	ep_addr_text(&k, text, sizeof(text));
	fprintf(w->g->samples, "%s %u %s %u %llu %u\n", text, k.port,
		w->g->targets[f->target].text, rtt_us,
		(unsigned long long)user_ns, retrans);
}

static void established(struct cthread *w, struct flight *f, uint64_t now)
{
	const struct ccfg *g = w->g;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	uint64_t user = now - f->t_call;
	bool retrans;

	memset(&ti, 0, sizeof(ti));
	getsockopt(f->fd, IPPROTO_TCP, TCP_INFO, &ti, &len);
	retrans = ti.tcpi_total_retrans > 0;
	w->connected++;
	stat_add(&w->user, user);
	if (retrans)
		w->retransmitted++;
	else
		stat_add(&w->rtt, (uint64_t)ti.tcpi_rtt * 1000);
	if (retrans || user > g->slow_ns)
		w->slow++;
	if (g->samples)
		log_sample(w, f, ti.tcpi_rtt, user, ti.tcpi_total_retrans);
}

static void on_event(struct cthread *w, uint64_t data)
{
	struct flight *f = &w->ring[(uint32_t)data & (w->cap - 1)];
	int err = 0;
	socklen_t len = sizeof(err);

	if (f->fd < 0 || f->gen != (uint32_t)(data >> 32))
		return;
	getsockopt(f->fd, SOL_SOCKET, SO_ERROR, &err, &len);
	if (err)
		fail_conn(w, err);
	else
		established(w, f, now_ns());
	finish(w, f);
}

/* A socket for connection i, made before it is due so that only connect()
 * falls at its due time; -1 with w->fail set when the source cannot be bound
 * (a setup error: the run ends), or -1 with errno. */
static int prepare(struct cthread *w, uint64_t i)
{
	const struct ccfg *g = w->g;
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	uint32_t src = g->nsrc ? i % g->nsrc : 0;
	int one = 1, fd;

	fd = socket(g->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    IPPROTO_TCP);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	if (!g->nsrc)
		return fd;
	/* The port is picked at connect() by the whole 4-tuple, so one source
	 * is not limited to the ports bind() could hand out. */
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&g->src[src], g->srclen[src])) {
		snprintf(w->fail, sizeof(w->fail), "cannot bind %s: %s",
			 g->src_text[src], strerror(errno));
		close(fd);
		w->g->stop = 1;
		return -1;
	}
	return fd;
}

/* Connection i, due at `due`, on the socket prepare() made for it. */
static void start(struct cthread *w, uint64_t i, uint64_t due, int fd)
{
	const struct ccfg *g = w->g;
	struct epoll_event ev = { .events = EPOLLOUT };
	uint32_t slot = w->tail & (w->cap - 1);
	struct flight *f = &w->ring[slot];

	if (w->tail - w->head == w->cap) {
		w->skipped++;	/* more in flight than the ring holds */
		close(fd);
		return;
	}
	*f = (struct flight){ .fd = -1, .gen = ++w->gen,
			      .target = conn_pick(g->seed, i, g->ntargets) };
	w->tail++;
	w->attempted++;
	f->t_call = now_ns();
	stat_add(&w->lag, f->t_call > due ? f->t_call - due : 0);
	w->last_start = f->t_call;
	if (connect(fd, (struct sockaddr *)&g->targets[f->target].ss,
		    g->targets[f->target].len) && errno != EINPROGRESS) {
		fail_conn(w, errno);
		close(fd);
		return;
	}
	f->fd = fd;
	ev.data.u64 = (uint64_t)f->gen << 32 | slot;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev)) {
		fail_conn(w, errno);
		finish(w, f);
	}
}

/* Drop finished connections from the head; fail the timed-out ones. */
static void expire(struct cthread *w, uint64_t now)
{
	while (w->head != w->tail) {
		struct flight *f = &w->ring[w->head & (w->cap - 1)];

		if (f->fd >= 0) {
			if (now < f->t_call + w->g->timeout_ns)
				return;
			w->failed[CF_TIMEOUT]++;
			finish(w, f);
		}
		w->head++;
	}
}

static void *thread_main(void *arg)
{
	struct cthread *w = arg;
	struct ccfg *g = w->g;
	struct epoll_event evs[EPOLL_EVENTS];
	int next_fd = -1;	/* the socket of connection next_i */

	if (g->ncpus)
		pin_to_cpu(g->cpus[w->idx % g->ncpus]);
	/* Timers fire on time, not up to 50 us late (the default slack). */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	w->next_i = w->idx;
	if (pthread_barrier_wait(&g->ready) == PTHREAD_BARRIER_SERIAL_THREAD)
		g->t0 = now_ns() + 1000000;	/* every thread waiting by then */
	pthread_barrier_wait(&g->ready);
	for (;;) {
		uint64_t now = now_ns(), wake = UINT64_MAX, due = 0;
		struct timespec ts;
		int n;

		expire(w, now);
		while (w->next_i < g->n && !g->stop) {
			due = conn_due(g->t0, g->interval_ns, w->next_i);
			if (next_fd < 0 && !w->fail[0])
				next_fd = prepare(w, w->next_i);
			if (w->fail[0])
				break;
			if (due > now)
				break;
			if (next_fd >= 0) {
				start(w, w->next_i, due, next_fd);
			} else {
				/* No socket (out of descriptors, say):
				 * attempted, and failed by its errno. */
				w->attempted++;
				fail_conn(w, errno);
			}
			next_fd = -1;
			w->next_i += g->threads;
			now = now_ns();
		}
		if (w->next_i < g->n && !g->stop)
			wake = due;
		else if (w->head == w->tail)
			break;
		if (w->head != w->tail) {
			const struct flight *f = &w->ring[w->head & (w->cap - 1)];
			uint64_t t = f->fd >= 0 ? f->t_call + g->timeout_ns : now;

			if (t < wake)
				wake = t;
		}
		/* Sleep until spin_ns before the next due time, then poll. */
		wake = wake > now + g->spin_ns ? wake - g->spin_ns - now : 0;
		if (wake > 100000000ULL)
			wake = 100000000ULL;
		ts.tv_sec = wake / 1000000000ULL;
		ts.tv_nsec = wake % 1000000000ULL;
		n = epoll_pwait2(w->ep, evs, EPOLL_EVENTS, &ts, NULL);
		for (int i = 0; i < n; i++)
			on_event(w, evs[i].data.u64);
	}
	if (next_fd >= 0)
		close(next_fd);
	return NULL;
}

/* --- options -------------------------------------------------------------- */

static const struct option conn_opts[] = {
	{ "targets", required_argument, NULL, 'T' },
	{ "src", required_argument, NULL, 'a' },
	{ "rate", required_argument, NULL, 'r' },
	{ "duration", required_argument, NULL, 'd' },
	{ "count", required_argument, NULL, 'N' },
	{ "seed", required_argument, NULL, 's' },
	{ "timeout-ms", required_argument, NULL, 't' },
	{ "slow-ms", required_argument, NULL, 'S' },
	{ "threads", required_argument, NULL, 'k' },
	{ "cpus", required_argument, NULL, 'c' },
	{ "spin-us", required_argument, NULL, 'W' },
	{ "samples", required_argument, NULL, 'L' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char conn_usage[] =
"usage: fwbench-engine connect --targets FILE|- --rate R (--duration SEC |\n"
"         --count N) [--src A[,B,...]] [--seed 1] [--timeout-ms 2000]\n"
"         [--slow-ms 50] [--threads K] [--cpus LIST] [--spin-us 50]\n"
"         [--samples FILE]\n"
"  Opens TCP connections at R a second, open loop (connection i due at\n"
"  t0 + i/R), each to a target drawn uniformly with the seed from FILE\n"
"  (lines ADDR PORT; - reads stdin) from the sources in turn, and closes each\n"
"  with a reset once established. A connection not established within\n"
"  --timeout-ms fails; one slower than --slow-ms (connect() to writable) or\n"
"  whose SYN was sent again is slow. --spin-us: sleep until U microseconds\n"
"  before a due time, then poll. --samples: a line per established\n"
"  connection (SRC SPORT DST DPORT RTT_US USER_NS RETRANS). Thread k runs on\n"
"  the k-th of --cpus (round robin). One JSON report on stdout.\n";

static void parse_sources(struct ccfg *g, const char *list)
{
	char *copy = strdup(list), *tok, *save = NULL;

	if (!copy)
		runtime_error("--src: out of memory");
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		struct bench_addr a;

		if (g->nsrc == MAX_SOURCES)
			usage_error("--src: more than %d addresses", MAX_SOURCES);
		parse_bench_addr("src", tok, &a);
		g->srclen[g->nsrc] = echo_sockaddr(&a, 0, &g->src[g->nsrc]);
		g->src_text[g->nsrc++] = strdup(tok);
	}
	free(copy);
	if (!g->nsrc)
		usage_error("--src: no address given");
}

static void parse_connect(int argc, char **argv, struct ccfg *g)
{
	const char *targets = NULL, *sources = NULL, *samples = NULL;
	bool have_duration = false, have_rate = false;
	uint64_t timeout_ms = 2000, slow_ms = 50, spin_us = 50;
	FILE *f;
	int opt;

	g->threads = 1;
	g->seed = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", conn_opts, NULL)) != -1) {
		switch (opt) {
		case 'T': targets = optarg; break;
		case 'a': sources = optarg; break;
		case 'r': g->rate = parse_double("rate", optarg, 0.001, 1e7); have_rate = true; break;
		case 'd': g->duration_s = parse_double("duration", optarg, 0.001, 86400); have_duration = true; break;
		case 'N': g->n = parse_u64("count", optarg, 1, 1000000000000ULL); break;
		case 's': g->seed = parse_u64("seed", optarg, 0, UINT64_MAX); break;
		case 't': timeout_ms = parse_u64("timeout-ms", optarg, 1, 3600000); break;
		case 'S': slow_ms = parse_u64("slow-ms", optarg, 0, 3600000); break;
		case 'k': g->threads = parse_u64("threads", optarg, 1, MAX_THREADS); break;
		case 'c': g->ncpus = parse_cpus("cpus", optarg, g->cpus, ECHO_MAX_CPUS); break;
		case 'W': spin_us = parse_u64("spin-us", optarg, 0, 1000000); break;
		case 'L': samples = optarg; break;
		case 'h': fputs(conn_usage, stdout); exit(0);
		default: usage_error("connect: unknown option or missing value: %s "
				     "(see connect --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("connect: unexpected argument %s", argv[optind]);
	if (!targets || !have_rate)
		usage_error("connect: --targets and --rate are required");
	if (have_duration == !!g->n)
		usage_error("connect: give --duration or --count (one of them)");
	if (have_duration)
		g->n = (uint64_t)ceil(g->duration_s * g->rate - 1e-9);
	if (!g->n)
		usage_error("connect: --duration %g at --rate %g is no connection",
			    g->duration_s, g->rate);
	g->interval_ns = 1e9 / g->rate;
	g->timeout_ns = timeout_ms * 1000000ULL;
	g->slow_ns = slow_ms * 1000000ULL;
	g->spin_ns = spin_us * 1000ULL;
	if (strcmp(targets, "-")) {
		f = fopen(targets, "r");
		if (!f)
			usage_error("--targets: cannot read %s: %s", targets,
				    strerror(errno));
	} else {
		f = stdin;
	}
	g->ntargets = conn_parse_targets(f, targets, &g->targets);
	if (f != stdin)
		fclose(f);
	g->family = g->targets[0].ss.ss_family;
	if (sources)
		parse_sources(g, sources);
	for (uint32_t i = 0; i < g->nsrc; i++)
		if (g->src[i].ss_family != g->family)
			usage_error("--src: %s is %s but the targets are %s",
				    g->src_text[i],
				    echo_family_name(g->src[i].ss_family),
				    echo_family_name(g->family));
	if ((uint64_t)g->threads > g->n)
		g->threads = g->n;
	if (samples) {
		g->samples = fopen(samples, "w");
		if (!g->samples)
			usage_error("--samples: cannot write %s: %s", samples,
				    strerror(errno));
	}
}

/* --- report --------------------------------------------------------------- */

static const struct hist_q qs[] = {
	{ "p01", 0.01 }, { "p50", 0.50 }, { "p90", 0.90 }, { "p99", 0.99 },
	{ "p99_9", 0.999 },
};

static void stat_merge(struct stat_h *into, const struct stat_h *s)
{
	if (s->n && (!into->n || s->min < into->min))
		into->min = s->min;
	if (s->max > into->max)
		into->max = s->max;
	into->n += s->n;
	into->sum += s->sum;
	for (uint32_t b = 0; b < FWB_HIST_BUCKETS; b++)
		into->hist[b] += s->hist[b];
}

static void json_stat(struct json *j, const char *key, const struct stat_h *s)
{
	json_latency_qs(j, key, s->hist, s->n, s->sum, s->min, s->max, qs,
			sizeof(qs) / sizeof(qs[0]));
}

static void report(const struct ccfg *g, const struct cthread *w,
		   struct stat_h *tot, uint64_t end)
{
	uint64_t attempted = 0, connected = 0, failed[CF_N] = { 0 }, slow = 0,
		 retrans = 0, skipped = 0, last = g->t0;
	int other = 0;
	struct json j;

	for (int t = 0; t < g->threads; t++) {
		attempted += w[t].attempted;
		connected += w[t].connected;
		for (int c = 0; c < CF_N; c++)
			failed[c] += w[t].failed[c];
		slow += w[t].slow;
		retrans += w[t].retransmitted;
		skipped += w[t].skipped;
		if (!other)
			other = w[t].first_other;
		if (w[t].last_start > last)
			last = w[t].last_start;
		stat_merge(&tot[0], &w[t].lag);
		stat_merge(&tot[1], &w[t].rtt);
		stat_merge(&tot[2], &w[t].user);
	}
	json_begin(&j, stdout);
	json_str(&j, "mode", "connect");
	json_str(&j, "family", echo_family_name(g->family));
	json_num(&j, "rate", g->rate);
	json_u64(&j, "threads", g->threads);
	json_u64(&j, "seed", g->seed);
	json_u64(&j, "targets", g->ntargets);
	json_u64(&j, "sources", g->nsrc);
	json_u64(&j, "scheduled", g->n);
	json_num(&j, "schedule_s", g->n / g->rate);
	json_num(&j, "elapsed_s", (end - g->t0) / 1e9);
	/* What the starts achieved: n - 1 intervals from the first to the last. */
	json_num(&j, "start_rate", attempted > 1 && last > g->t0 ?
		 (attempted - 1) / ((last - g->t0) / 1e9) : NAN);
	json_u64(&j, "timeout_ms", g->timeout_ns / 1000000);
	json_u64(&j, "slow_ms", g->slow_ns / 1000000);
	json_u64(&j, "spin_us", g->spin_ns / 1000);
	json_bool(&j, "stopped", g->stop);
	json_u64(&j, "attempted", attempted);
	json_u64(&j, "connected", connected);
	json_obj(&j, "failed");
	for (int c = 0; c < CF_N; c++)
		json_u64(&j, conn_fail_names[c], failed[c]);
	json_close_obj(&j);
	if (other)
		json_str(&j, "first_other_error", strerror(other));
	else
		echo_json_null(&j, "first_other_error");
	json_u64(&j, "slow", slow);
	json_u64(&j, "retransmitted", retrans);
	json_u64(&j, "skipped", skipped);
	json_stat(&j, "lag_ns", &tot[0]);
	json_stat(&j, "rtt_ns", &tot[1]);
	json_stat(&j, "connect_ns", &tot[2]);
	json_hist(&j, "rtt_hist", tot[1].hist);
	json_hist(&j, "connect_hist", tot[2].hist);
	json_hist(&j, "lag_hist", tot[0].hist);
	echo_json_rusage(&j);
	json_end(&j);
}

int cmd_connect(int argc, char **argv)
{
	struct ccfg *g = calloc(1, sizeof(*g));
	struct cthread *w = NULL;
	struct stat_h tot[3] = { 0 };
	uint64_t per_thread, *hists = NULL, end;
	int started = 0, ret = EXIT_RUNTIME;
	sigset_t stops, old;
	struct rlimit rl;
	uint32_t cap = 1024;

	if (!g)
		runtime_error("connect: out of memory");
	parse_connect(argc, argv, g);
	/* Room for every connection of a thread's timeout window, twice. */
	per_thread = (uint64_t)(g->rate / g->threads * g->timeout_ns / 1e9 * 2) + 1024;
	while (cap < per_thread && cap < RING_MAX)
		cap *= 2;
	w = calloc(g->threads, sizeof(*w));
	hists = calloc((size_t)(3 * g->threads + 3) * FWB_HIST_BUCKETS,
		       sizeof(*hists));
	if (!w || !hists) {
		note("connect: out of memory");
		goto out;
	}
	for (int k = 0; k < 3; k++)
		tot[k].hist = hists + (size_t)(3 * g->threads + k) * FWB_HIST_BUCKETS;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int t = 0; t < g->threads; t++) {
		uint64_t *h = hists + (size_t)3 * t * FWB_HIST_BUCKETS;

		w[t] = (struct cthread){ .g = g, .idx = t, .cap = cap,
			.ep = epoll_create1(EPOLL_CLOEXEC),
			.ring = calloc(cap, sizeof(struct flight)),
			.lag.hist = h, .rtt.hist = h + FWB_HIST_BUCKETS,
			.user.hist = h + 2 * FWB_HIST_BUCKETS };
		if (w[t].ep < 0 || !w[t].ring) {
			note("connect: cannot set up thread %d: %s", t,
			     strerror(errno));
			goto out;
		}
	}
	pthread_barrier_init(&g->ready, NULL, g->threads);
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stops, &old);
	for (; started < g->threads; started++)
		if (pthread_create(&w[started].tid, NULL, thread_main,
				   &w[started])) {
			note("connect: cannot start thread %d", started);
			/* The barrier is short a thread: nothing to join. */
			exit(EXIT_RUNTIME);
		}
	install_stop_handlers(&g->stop);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	for (int t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	end = now_ns();
	for (int t = 0; t < started; t++)
		if (w[t].fail[0]) {
			note("connect: %s", w[t].fail);
			goto out;
		}
	if (g->samples && fclose(g->samples)) {
		g->samples = NULL;
		note("connect: --samples: %s", strerror(errno));
		goto out;
	}
	g->samples = NULL;
	report(g, w, tot, end);
	ret = 0;
out:
	if (g->samples)
		fclose(g->samples);
	if (w)
		for (int t = 0; t < g->threads; t++) {
			free(w[t].ring);
			if (w[t].ep > 0)
				close(w[t].ep);
		}
	free(w);
	free(hists);
	free(g->targets);
	free(g);
	return ret;
}
