// SPDX-License-Identifier: MIT
/*
 * The echo server: echoes every client's messages and validates them per
 * client id (gaps, reordering, foreign ids, wrong sizes, corrupt messages).
 * `--server threads` gives each TCP connection a thread of its own with
 * blocking reads and writes; `--server epoll` serves every connection (or the
 * one UDP socket) from one thread and one epoll loop, non-blocking, partial
 * reads and writes buffered. Runs until stdin ends (or says `quit`) or a
 * SIGINT/SIGTERM, then prints one JSON report.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>
#include "echo.h"

#define UDP_BATCH 64
#define UDP_BUF 2048		/* above the largest datagram message, 1472 */
#define SRC_SLOTS 16384		/* UDP sources: a power of two, > 2 x 4096 */
#define CONN_STACK (256 << 10)	/* a connection thread needs little */
#define EPOLL_EVENTS 256

/* Per client id: its validation counts and the echo a delay fault holds. */
struct srv_client {
	pthread_mutex_t lock;	/* crr: one client's connections overlap */
	uint64_t last_seq;
	uint64_t received, echoed, end_seen, gaps, reordered, foreign,
		 wrong_size, corrupt, faulted;
	uint8_t *held;
	uint32_t held_len;
};

/* A UDP source and the client id it first claimed (0: none yet). */
struct src_slot {
	bool used;
	sa_family_t family;
	uint16_t port;
	uint8_t addr[16];
	uint32_t id;
};

struct server;

/* A stream connection; `in`/`out` buffer partial messages (epoll only). */
struct conn {
	struct server *s;
	int fd;
	uint32_t bound;		/* the client id it first claimed, 0: none */
	uint8_t *in, *out;
	size_t in_len, in_cap, out_len, out_off, out_cap;
	bool writing;		/* output pending: reading paused */
	struct conn *prev, *next;
};

struct server {
	enum echo_proto proto;
	int family;
	bool threads;
	uint32_t clients;
	struct echo_frame frame;
	uint64_t seed;
	struct echo_fault faults[ECHO_MAX_FAULTS];
	int nfaults, cpus[ECHO_MAX_CPUS], ncpus;
	struct bench_addr bind;
	uint16_t port;
	int fd;			/* listening (stream) or the UDP socket */
	int wake;		/* eventfd: the epoll loop's stop signal */
	struct srv_client *c;	/* [1..clients] */
	struct src_slot *src;	/* UDP */
	uint32_t unbindable;	/* a source the full table cannot bind */
	pthread_mutex_t lock;	/* guards the fields below */
	pthread_cond_t gone;
	uint64_t stray_foreign, stray_corrupt, connections;
	int live, peak;		/* connection threads */
	struct conn *conns;
	volatile int stop;	/* the threads' */
	volatile int signalled;	/* SIGINT or SIGTERM */
};

/* What to send back for one message. */
struct verdict {
	bool echo;		/* the message, as the faults left it */
	uint8_t *held;		/* a delayed echo, sent first; caller frees */
	uint32_t held_len;
};

/* --- validation and faults ------------------------------------------------ */

/* A corrupt message: on its client when the peer is bound to one. */
static void count_corrupt(struct server *s, uint32_t bound)
{
	if (bound) {
		pthread_mutex_lock(&s->c[bound].lock);
		s->c[bound].corrupt++;
		pthread_mutex_unlock(&s->c[bound].lock);
		return;
	}
	pthread_mutex_lock(&s->lock);
	s->stray_corrupt++;
	pthread_mutex_unlock(&s->lock);
}

static void apply_faults(struct server *s, struct srv_client *c,
			 struct echo_hdr *h, bool *hold, struct verdict *v)
{
	for (int i = 0; i < s->nfaults; i++) {
		const struct echo_fault *f = &s->faults[i];

		if (f->client != h->client || h->seq % f->every)
			continue;
		c->faulted++;
		switch (f->kind) {
		case FAULT_DROP:
			v->echo = false;
			break;
		case FAULT_FOREIGN:
			h->client = h->client % s->clients + 1;
			break;
		case FAULT_SIZE:
			h->size++;
			break;
		case FAULT_SEQ:
			h->seq += ECHO_FAULT_SEQ_SHIFT;
			break;
		case FAULT_DELAY:
			*hold = true;
			break;
		case FAULT_MAGIC:
			h->magic = ~ECHO_MAGIC;
			break;
		}
	}
}

/*
 * One whole message, `len` bytes (a datagram's length, or what the stream's
 * size field framed), magic already checked, from a peer bound to *bound.
 * A foreign message is counted and not echoed: nobody's data.
 */
static void srv_message(struct server *s, uint32_t *bound, uint8_t *msg,
			size_t len, bool dgram, struct verdict *v)
{
	struct srv_client *c;
	struct echo_hdr h, orig;
	bool hold = false;

	memset(v, 0, sizeof(*v));
	echo_hdr_get(msg, &h);
	if (!*bound) {
		if (h.client < 1 || h.client > s->clients) {
			pthread_mutex_lock(&s->lock);
			s->stray_foreign++;
			pthread_mutex_unlock(&s->lock);
			return;
		}
		*bound = h.client;
	}
	c = &s->c[*bound];
	pthread_mutex_lock(&c->lock);
	if (h.client != *bound) {
		c->foreign++;
		goto out;
	}
	if (h.seq > c->last_seq) {
		c->gaps += h.seq - c->last_seq - 1;
		c->last_seq = h.seq;
	} else {
		c->reordered++;
	}
	if (h.size != echo_size(&s->frame, s->seed, h.client, h.seq) ||
	    (dgram && len != h.size))
		c->wrong_size++;
	if (h.flags & ECHO_FLAG_END) {
		c->end_seen++;
		goto out;
	}
	c->received++;
	v->echo = true;
	orig = h;
	apply_faults(s, c, &h, &hold, v);
	if (memcmp(&orig, &h, sizeof(h)))
		echo_hdr_put(msg, &h);
	if (hold && v->echo) {
		uint8_t *copy = malloc(len);

		if (copy) {
			memcpy(copy, msg, len);
			v->echo = false;
			/* Two delays in a row: the older one goes now. */
			v->held = c->held;
			v->held_len = c->held_len;
			c->held = copy;
			c->held_len = len;
		}
	} else if (v->echo && c->held) {
		v->held = c->held;
		v->held_len = c->held_len;
		c->held = NULL;
	}
	c->echoed += !!v->held + v->echo;
out:
	pthread_mutex_unlock(&c->lock);
}

/* --- threads: a thread per connection ------------------------------------- */

/* Bytes read until n, end of stream or an error. */
static size_t read_full(int fd, uint8_t *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);

		if (r > 0)
			got += r;
		else if (r < 0 && errno == EINTR)
			continue;
		else
			break;
	}
	return got;
}

static bool write_full(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= w;
	}
	return true;
}

static void conn_link(struct server *s, struct conn *cn)
{
	cn->next = s->conns;
	if (s->conns)
		s->conns->prev = cn;
	s->conns = cn;
}

static void conn_unlink(struct server *s, struct conn *cn)
{
	if (cn->prev)
		cn->prev->next = cn->next;
	else
		s->conns = cn->next;
	if (cn->next)
		cn->next->prev = cn->prev;
}

static void *conn_main(void *arg)
{
	struct conn *cn = arg;
	struct server *s = cn->s;
	uint8_t *buf = malloc(ECHO_STREAM_MAX);
	struct echo_hdr h;
	struct verdict v;
	size_t got;

	while (buf) {
		bool ok = true;

		got = read_full(cn->fd, buf, ECHO_HDR);
		if (got < ECHO_HDR) {
			if (got && !s->stop)
				count_corrupt(s, cn->bound);
			break;
		}
		echo_hdr_get(buf, &h);
		/* A bad header desynchronises the stream: count, close. */
		if (h.magic != ECHO_MAGIC || h.size < ECHO_HDR ||
		    h.size > ECHO_STREAM_MAX) {
			count_corrupt(s, cn->bound);
			break;
		}
		got = read_full(cn->fd, buf + ECHO_HDR, h.size - ECHO_HDR);
		if (got < h.size - ECHO_HDR) {
			if (!s->stop)
				count_corrupt(s, cn->bound);
			break;
		}
		srv_message(s, &cn->bound, buf, h.size, false, &v);
		if (v.held) {
			ok = write_full(cn->fd, v.held, v.held_len);
			free(v.held);
		}
		if (ok && v.echo)
			ok = write_full(cn->fd, buf, h.size);
		if (!ok)
			break;
	}
	free(buf);
	pthread_mutex_lock(&s->lock);
	conn_unlink(s, cn);
	close(cn->fd);
	s->live--;
	pthread_cond_signal(&s->gone);
	pthread_mutex_unlock(&s->lock);
	free(cn);
	return NULL;
}

/* An accepted connection's state (NULL and the descriptor closed when out of
 * memory); TCP without Nagle, so an echo leaves as soon as it is written. */
static struct conn *conn_new(struct server *s, int fd)
{
	struct conn *cn;
	int one = 1;

	if (s->proto == ECHO_TCP)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	cn = calloc(1, sizeof(*cn));
	if (!cn) {
		close(fd);
		return NULL;
	}
	cn->s = s;
	cn->fd = fd;
	return cn;
}

static void *accept_main(void *arg)
{
	struct server *s = arg;
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, CONN_STACK);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (;;) {
		int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		struct conn *cn;
		pthread_t tid;

		if (fd < 0) {
			if (s->stop)
				break;
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			note("echo-server: accept: %s", strerror(errno));
			usleep(10000);	/* out of descriptors: no busy loop */
			continue;
		}
		cn = conn_new(s, fd);
		if (!cn)
			continue;
		pthread_mutex_lock(&s->lock);
		s->connections++;
		conn_link(s, cn);
		if (++s->live > s->peak)
			s->peak = s->live;
		pthread_mutex_unlock(&s->lock);
		if (pthread_create(&tid, &attr, conn_main, cn)) {
			note("echo-server: cannot start a connection thread");
			pthread_mutex_lock(&s->lock);
			conn_unlink(s, cn);
			s->live--;
			pthread_mutex_unlock(&s->lock);
			close(fd);
			free(cn);
		}
	}
	pthread_attr_destroy(&attr);
	return NULL;
}

/* Wake every blocked connection thread and wait until all have ended. */
static void threads_stop(struct server *s, pthread_t acceptor)
{
	shutdown(s->fd, SHUT_RDWR);	/* accept() returns */
	pthread_join(acceptor, NULL);
	pthread_mutex_lock(&s->lock);
	for (struct conn *cn = s->conns; cn; cn = cn->next)
		shutdown(cn->fd, SHUT_RDWR);
	while (s->live)
		pthread_cond_wait(&s->gone, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

/* --- epoll: one loop ------------------------------------------------------ */

static bool grow(uint8_t **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 4096;
	uint8_t *p;

	if (need <= *cap)
		return true;
	while (n < need)
		n *= 2;
	p = realloc(*buf, n);
	if (!p)
		return false;
	*buf = p;
	*cap = n;
	return true;
}

static bool out_append(struct conn *cn, const uint8_t *p, size_t n)
{
	if (!grow(&cn->out, &cn->out_cap, cn->out_len + n))
		return false;
	memcpy(cn->out + cn->out_len, p, n);
	cn->out_len += n;
	return true;
}

/*
 * Out of the epoll set before close(): close() drops the registration only
 * with the last reference to the socket's file, and anything may hold one for
 * a moment (a reader of /proc/PID/fd or fdinfo, lsof, ss -p, bpftool's task
 * iterator). Until that reference goes, epoll_wait() would go on reporting
 * the socket with this, freed, conn as its data: a use after free, then a
 * double free of its buffers.
 */
static void conn_close(struct server *s, int ep, struct conn *cn)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, cn->fd, NULL);
	conn_unlink(s, cn);
	close(cn->fd);
	free(cn->in);
	free(cn->out);
	free(cn);
}

/* Write what is pending; false when the connection failed. */
static bool conn_flush(int ep, struct conn *cn)
{
	struct epoll_event ev = { .data.ptr = cn };

	while (cn->out_off < cn->out_len) {
		ssize_t w = send(cn->fd, cn->out + cn->out_off,
				 cn->out_len - cn->out_off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0)
			return false;
		cn->out_off += w;
	}
	if (cn->out_off == cn->out_len) {
		cn->out_off = cn->out_len = 0;
		if (cn->writing) {
			cn->writing = false;
			ev.events = EPOLLIN;
			epoll_ctl(ep, EPOLL_CTL_MOD, cn->fd, &ev);
		}
	} else if (!cn->writing) {
		/* Hold off reading until the peer takes its echoes. */
		cn->writing = true;
		ev.events = EPOLLOUT;
		epoll_ctl(ep, EPOLL_CTL_MOD, cn->fd, &ev);
	}
	return true;
}

/* Read once, echo every whole message read; false: close the connection. */
static bool conn_read(struct server *s, struct conn *cn)
{
	size_t off = 0;
	ssize_t r;

	if (!grow(&cn->in, &cn->in_cap, cn->in_len + 4096))
		return false;
	r = recv(cn->fd, cn->in + cn->in_len, cn->in_cap - cn->in_len, 0);
	if (r < 0)
		return errno == EAGAIN || errno == EINTR;
	if (r == 0) {
		if (cn->in_len)
			count_corrupt(s, cn->bound);	/* ended mid-message */
		return false;
	}
	cn->in_len += r;
	while (cn->in_len - off >= ECHO_HDR) {
		struct echo_hdr h;
		struct verdict v;
		bool ok = true;

		echo_hdr_get(cn->in + off, &h);
		if (h.magic != ECHO_MAGIC || h.size < ECHO_HDR ||
		    h.size > ECHO_STREAM_MAX) {
			count_corrupt(s, cn->bound);
			return false;
		}
		if (cn->in_len - off < h.size) {
			if (!grow(&cn->in, &cn->in_cap, h.size + 4096))
				return false;
			break;
		}
		srv_message(s, &cn->bound, cn->in + off, h.size, false, &v);
		if (v.held) {
			ok = out_append(cn, v.held, v.held_len);
			free(v.held);
		}
		if (ok && v.echo)
			ok = out_append(cn, cn->in + off, h.size);
		if (!ok)
			return false;
		off += h.size;
	}
	if (off) {
		memmove(cn->in, cn->in + off, cn->in_len - off);
		cn->in_len -= off;
	}
	return true;
}

static void stream_accept(struct server *s, int ep)
{
	for (;;) {
		int fd = accept4(s->fd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event ev = { .events = EPOLLIN };
		struct conn *cn;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				note("echo-server: accept: %s",
				     strerror(errno));
			return;
		}
		cn = conn_new(s, fd);
		if (!cn)
			continue;
		ev.data.ptr = cn;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			free(cn);
			continue;
		}
		conn_link(s, cn);
		pthread_mutex_lock(&s->lock);
		s->connections++;
		pthread_mutex_unlock(&s->lock);
	}
}

/* An epoll set holding the server's socket and its wake-up descriptor, each
 * event carrying the address of the descriptor's field in `s`. */
static int server_epoll(struct server *s)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		runtime_error("echo-server: epoll: %s", strerror(errno));
	ev.data.ptr = &s->fd;
	epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
	ev.data.ptr = &s->wake;
	epoll_ctl(ep, EPOLL_CTL_ADD, s->wake, &ev);
	return ep;
}

static void *stream_epoll_main(void *arg)
{
	struct server *s = arg;
	struct epoll_event evs[EPOLL_EVENTS];
	int ep = server_epoll(s);

	while (!s->stop) {
		int n = epoll_wait(ep, evs, EPOLL_EVENTS, -1);

		for (int i = 0; i < n; i++) {
			struct conn *cn = evs[i].data.ptr;
			bool ok = true;

			if (evs[i].data.ptr == &s->fd) {
				stream_accept(s, ep);
				continue;
			}
			if (evs[i].data.ptr == &s->wake)
				continue;	/* s->stop is set */
			if (cn->writing)
				ok = conn_flush(ep, cn);
			else if (evs[i].events &
				 (EPOLLIN | EPOLLHUP | EPOLLERR))
				ok = conn_read(s, cn) && conn_flush(ep, cn);
			if (!ok)
				conn_close(s, ep, cn);
		}
	}
	while (s->conns)
		conn_close(s, ep, s->conns);
	close(ep);
	return NULL;
}

/* The client id a UDP source is bound to, by open addressing. */
static uint32_t *src_binding(struct server *s,
			     const struct sockaddr_storage *ss)
{
	struct src_slot key = { .used = true, .family = ss->ss_family };
	uint64_t h = 1469598103934665603ULL;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)ss;

		key.port = sin->sin_port;
		memcpy(key.addr, &sin->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *sin6 = (const void *)ss;

		key.port = sin6->sin6_port;
		memcpy(key.addr, &sin6->sin6_addr, 16);
	}
	for (int i = 0; i < 16; i++)
		h = (h ^ key.addr[i]) * 1099511628211ULL;
	h = (h ^ key.port) * 1099511628211ULL;
	for (uint32_t i = 0; i < SRC_SLOTS; i++) {
		struct src_slot *sl = &s->src[(h + i) & (SRC_SLOTS - 1)];

		if (!sl->used) {
			*sl = key;
			return &sl->id;
		}
		if (sl->family == key.family && sl->port == key.port &&
		    !memcmp(sl->addr, key.addr, 16))
			return &sl->id;
	}
	s->unbindable = 0;
	return &s->unbindable;
}

/* One datagram for sendmmsg(): `buf` back to where the datagram `from` came from. */
static void queue_out(struct mmsghdr *out, struct iovec *ov, void *buf,
		      size_t len, const struct mmsghdr *from)
{
	ov->iov_base = buf;
	ov->iov_len = len;
	out->msg_hdr.msg_name = from->msg_hdr.msg_name;
	out->msg_hdr.msg_namelen = from->msg_hdr.msg_namelen;
	out->msg_hdr.msg_iov = ov;
	out->msg_hdr.msg_iovlen = 1;
}

static void *udp_epoll_main(void *arg)
{
	struct server *s = arg;
	static uint8_t bufs[UDP_BATCH][UDP_BUF];
	struct sockaddr_storage from[UDP_BATCH];
	struct mmsghdr in[UDP_BATCH], out[2 * UDP_BATCH];
	struct iovec iv[UDP_BATCH], ov[2 * UDP_BATCH];
	uint8_t *held[UDP_BATCH];
	struct epoll_event evs[2];
	int ep = server_epoll(s);

	while (!s->stop) {
		int n = epoll_wait(ep, evs, 2, -1);

		if (n <= 0 || s->stop)
			continue;
		for (;;) {
			int got, no = 0, nh = 0;

			memset(in, 0, sizeof(in));
			for (int k = 0; k < UDP_BATCH; k++) {
				iv[k].iov_base = bufs[k];
				iv[k].iov_len = UDP_BUF;
				in[k].msg_hdr.msg_iov = &iv[k];
				in[k].msg_hdr.msg_iovlen = 1;
				in[k].msg_hdr.msg_name = &from[k];
				in[k].msg_hdr.msg_namelen = sizeof(from[k]);
			}
			got = recvmmsg(s->fd, in, UDP_BATCH, MSG_DONTWAIT,
				       NULL);
			if (got <= 0)
				break;
			memset(out, 0, sizeof(out));
			for (int k = 0; k < got; k++) {
				uint32_t *bound = src_binding(s, &from[k]);
				size_t len = in[k].msg_len;
				struct verdict v;
				struct echo_hdr h;

				if (len < ECHO_HDR ||
				    (in[k].msg_hdr.msg_flags & MSG_TRUNC)) {
					count_corrupt(s, *bound);
					continue;
				}
				echo_hdr_get(bufs[k], &h);
				if (h.magic != ECHO_MAGIC) {
					count_corrupt(s, *bound);
					continue;
				}
				srv_message(s, bound, bufs[k], len, true, &v);
				if (v.held) {
					held[nh++] = v.held;
					queue_out(&out[no], &ov[no], v.held,
						  v.held_len, &in[k]);
					no++;
				}
				if (v.echo) {
					queue_out(&out[no], &ov[no], bufs[k], len,
						  &in[k]);
					no++;
				}
			}
			/* A blocking socket: echoes wait for room. */
			for (int sent = 0; sent < no;) {
				int w = sendmmsg(s->fd, out + sent, no - sent,
						 0);

				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0) {
					sent++;	/* e.g. unreachable: skip it */
					continue;
				}
				sent += w;
			}
			for (int k = 0; k < nh; k++)
				free(held[k]);
			if (got < UDP_BATCH)
				break;
		}
	}
	close(ep);
	return NULL;
}

/* --- options, lifecycle, report ------------------------------------------- */

static const struct option srv_opts[] = {
	{ "proto", required_argument, NULL, 'P' },
	{ "bind", required_argument, NULL, 'b' },
	{ "port", required_argument, NULL, 'p' },
	{ "server", required_argument, NULL, 'm' },
	{ "clients", required_argument, NULL, 'n' },
	{ "frame-size", required_argument, NULL, 'f' },
	{ "seed", required_argument, NULL, 's' },
	{ "cpus", required_argument, NULL, 'c' },
	{ "fault", required_argument, NULL, 'F' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char srv_usage[] =
"usage: fwbench-engine echo-server --proto tcp|udp --bind ADDR --port P\n"
"         --server threads|epoll --clients N --frame-size N|LO-HI --seed S\n"
"         [--cpus LIST] [--fault KIND:EVERY:CLIENT]...\n"
"  Echoes the echo clients' messages and validates them per client, every\n"
"  thread on the --cpus given. Prints a ready line, runs until stdin ends (or\n"
"  reads quit) or SIGINT/SIGTERM, then prints the report. --fault (tests\n"
"  only): drop, foreign, size, seq, delay or magic (break) the echo of client\n"
"  CLIENT's every EVERY-th message. --bind 0.0.0.0 or :: takes every local\n"
"  address of that family (a prefix held as local, as DNAT's endpoints).\n";

/* A benchmarking address, or the wildcard of a family (0.0.0.0, ::): every
 * address the namespace holds as local, as a DNAT's endpoints in a whole
 * prefix are. Nothing is ever sent to the wildcard itself. */
static void parse_bind(const char *text, struct bench_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!strcmp(text, "0.0.0.0")) {
		a->family = AF_INET;
		return;
	}
	if (!strcmp(text, "::")) {
		a->family = AF_INET6;
		return;
	}
	parse_bench_addr("bind", text, a);
}

static void parse_server(int argc, char **argv, struct server *s)
{
	const char *proto = NULL, *model = NULL, *frame = NULL;
	bool have_bind = false, have_port = false, have_clients = false,
	     have_seed = false;
	int opt;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", srv_opts, NULL)) != -1) {
		switch (opt) {
		case 'P': proto = optarg; break;
		case 'b': parse_bind(optarg, &s->bind); have_bind = true; break;
		case 'p': s->port = parse_u64("port", optarg, 0, 65535); have_port = true; break;
		case 'm': model = optarg; break;
		case 'n': s->clients = parse_u64("clients", optarg, 1, ECHO_MAX_CLIENTS); have_clients = true; break;
		case 'f': frame = optarg; break;
		case 's': s->seed = parse_u64("seed", optarg, 0, UINT64_MAX); have_seed = true; break;
		case 'c': s->ncpus = parse_cpus("cpus", optarg, s->cpus, ECHO_MAX_CPUS); break;
		case 'F':
			if (s->nfaults == ECHO_MAX_FAULTS)
				usage_error("--fault: more than %d", ECHO_MAX_FAULTS);
			echo_parse_fault(optarg, &s->faults[s->nfaults++]);
			break;
		case 'h': fputs(srv_usage, stdout); exit(0);
		default: usage_error("echo-server: unknown option or missing value: %s "
				     "(see echo-server --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("echo-server: unexpected argument %s", argv[optind]);
	if (!proto || !have_bind || !have_port || !model || !have_clients ||
	    !frame || !have_seed)
		usage_error("echo-server: --proto, --bind, --port, --server, "
			    "--clients, --frame-size and --seed are required");
	s->proto = echo_parse_proto(proto);
	s->family = s->bind.family;
	echo_probe_proto(s->proto, s->family);
	if (!strcmp(model, "threads"))
		s->threads = true;
	else if (strcmp(model, "epoll"))
		usage_error("--server: unknown model %s (threads or epoll)", model);
	if (s->threads && s->proto == ECHO_UDP)
		usage_error("--server threads: udp has no connection per client "
			    "to give a thread (the seed ran threads for stream "
			    "protocols only); use --server epoll");
	echo_parse_frame(frame, &s->frame);
	echo_check_frame(&s->frame, s->proto, s->family);
	echo_check_faults(s->faults, s->nfaults, s->clients);
}

/* Until stdin ends or says quit, or a stop signal. */
static void wait_for_stop(volatile int *signalled)
{
	char line[256];
	size_t have = 0;

	while (!*signalled) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 200) <= 0)
			continue;
		r = read(0, line + have, sizeof(line) - 1 - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return;
		have += r;
		line[have] = 0;
		for (char *nl; (nl = strchr(line, '\n'));) {
			if (!strncmp(line, "quit", 4))
				return;
			have -= nl + 1 - line;
			memmove(line, nl + 1, have + 1);
		}
		if (have == sizeof(line) - 1)
			have = 0;	/* an overlong line: not quit */
	}
}

static void counts_json(struct json *j, const uint64_t *v)
{
	static const char *const names[] = {
		"received", "echoed", "end_seen", "gaps", "reordered",
		"foreign", "wrong_size", "corrupt", "faulted",
	};

	for (int i = 0; i < 9; i++)
		json_u64(j, names[i], v[i]);
}

static void client_counts(const struct srv_client *c, uint64_t *v)
{
	uint64_t x[9] = { c->received, c->echoed, c->end_seen, c->gaps,
			  c->reordered, c->foreign, c->wrong_size, c->corrupt,
			  c->faulted };

	memcpy(v, x, sizeof(x));
}

static void server_report(struct server *s)
{
	uint64_t tot[9] = { 0 }, v[9];
	struct json j;

	for (uint32_t i = 1; i <= s->clients; i++) {
		client_counts(&s->c[i], v);
		for (int k = 0; k < 9; k++)
			tot[k] += v[k];
	}
	tot[5] += s->stray_foreign;
	tot[7] += s->stray_corrupt;
	json_begin(&j, stdout);
	json_str(&j, "mode", "echo-server");
	json_str(&j, "proto", echo_proto_name(s->proto));
	json_str(&j, "family", echo_family_name(s->family));
	json_str(&j, "server", s->threads ? "threads" : "epoll");
	json_u64(&j, "clients", s->clients);
	json_u64(&j, "port", s->port);
	json_obj(&j, "frame");
	json_u64(&j, "lo", s->frame.lo);
	json_u64(&j, "hi", s->frame.hi);
	json_close_obj(&j);
	json_u64(&j, "seed", s->seed);
	json_u64(&j, "connections", s->connections);
	json_obj(&j, "totals");
	counts_json(&j, tot);
	json_close_obj(&j);
	json_arr(&j, "per_client");
	for (uint32_t i = 1; i <= s->clients; i++) {
		client_counts(&s->c[i], v);
		json_obj(&j, NULL);
		json_u64(&j, "id", i);
		counts_json(&j, v);
		json_close_obj(&j);
	}
	json_close_arr(&j);
	echo_json_rusage(&j);
	/* main and the loop or the acceptor, plus the connection threads */
	json_u64(&j, "threads", 2 + s->peak);
	json_end(&j);
}

static int open_listener(struct server *s)
{
	struct sockaddr_storage ss;
	socklen_t len = echo_sockaddr(&s->bind, s->port, &ss);
	int one = 1, buf = 8 << 20;

	s->fd = echo_socket(s->proto, s->family, s->proto != ECHO_UDP &&
			    !s->threads);
	if (s->fd < 0) {
		note("echo-server: cannot open a %s socket: %s",
		     echo_proto_name(s->proto), strerror(errno));
		return -1;
	}
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* UDP: every client's message may arrive at once; room for all. */
	if (s->proto == ECHO_UDP &&
	    setsockopt(s->fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)))
		setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (bind(s->fd, (struct sockaddr *)&ss, len)) {
		note("echo-server: cannot bind %s port %u: %s",
		     echo_proto_name(s->proto), s->port, strerror(errno));
		return -1;
	}
	if (s->proto != ECHO_UDP && listen(s->fd, 4096)) {
		note("echo-server: cannot listen: %s", strerror(errno));
		return -1;
	}
	len = sizeof(ss);
	getsockname(s->fd, (struct sockaddr *)&ss, &len);
	s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return 0;
}

/* Enough descriptors for 4096 connections. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int cmd_echo_server(int argc, char **argv)
{
	struct server *s = calloc(1, sizeof(*s));
	sigset_t stops, old;
	pthread_t tid;
	bool running = false;
	struct json j;
	int ret = EXIT_RUNTIME;

	if (!s)
		runtime_error("echo-server: out of memory");
	s->fd = s->wake = -1;
	parse_server(argc, argv, s);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->gone, NULL);
	s->c = calloc(s->clients + 1, sizeof(*s->c));
	if (s->proto == ECHO_UDP)
		s->src = calloc(SRC_SLOTS, sizeof(*s->src));
	if (!s->c || (s->proto == ECHO_UDP && !s->src)) {
		note("echo-server: out of memory for %u clients", s->clients);
		goto out;
	}
	for (uint32_t i = 0; i <= s->clients; i++)
		pthread_mutex_init(&s->c[i].lock, NULL);
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	echo_pin(s->cpus, s->ncpus);
	if (open_listener(s))
		goto out;
	s->wake = eventfd(0, EFD_CLOEXEC);
	if (s->wake < 0) {
		note("echo-server: eventfd: %s", strerror(errno));
		goto out;
	}
	/* Stop signals reach the main thread only: the others start blocked. */
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stops, &old);
	if (pthread_create(&tid, NULL, s->threads ? accept_main :
			   s->proto == ECHO_UDP ? udp_epoll_main :
			   stream_epoll_main, s)) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		note("echo-server: cannot start a thread");
		goto out;
	}
	running = true;
	install_stop_handlers(&s->signalled);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	json_begin(&j, stdout);
	json_str(&j, "mode", "echo-server");
	json_bool(&j, "ready", true);
	json_u64(&j, "port", s->port);
	json_str(&j, "proto", echo_proto_name(s->proto));
	json_str(&j, "family", echo_family_name(s->family));
	json_str(&j, "server", s->threads ? "threads" : "epoll");
	json_u64(&j, "clients", s->clients);
	json_end(&j);
	wait_for_stop(&s->signalled);
	ret = 0;
out:
	if (running) {
		s->stop = 1;
		if (s->threads) {
			threads_stop(s, tid);
		} else {
			uint64_t one = 1;

			if (write(s->wake, &one, sizeof(one)) < 0)
				note("echo-server: cannot wake the loop");
			pthread_join(tid, NULL);
		}
	}
	if (!ret)
		server_report(s);
	if (s->fd >= 0)
		close(s->fd);
	if (s->wake >= 0)
		close(s->wake);
	if (s->c)
		for (uint32_t i = 0; i <= s->clients; i++)
			free(s->c[i].held);
	free(s->c);
	free(s->src);
	free(s);
	return ret;
}
