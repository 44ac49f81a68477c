// SPDX-License-Identifier: MIT
/*
 * accept: a TCP server for the connection generator. Listens on every port
 * of --ports (the wildcard address of both families by default, so it
 * accepts connections to any address a `local` route gives this namespace),
 * accepts in an epoll loop and closes each connection at once, counting it
 * by its local address and port: the endpoint a firewall DNATed it to.
 * Driven over stdin (control_loop): `read` answers the counts since the last
 * read (or arm), `quit` ends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "conn.h"

#define MAX_LISTENERS (2 * CONN_MAX_PORTS)
#define MAX_ENDPOINTS 65536
#define EPOLL_EVENTS 64

struct acceptor {
	int fds[MAX_LISTENERS], nfds, ep, cpu;
	pthread_mutex_t lock;	/* the table and counts: accept thread vs reads */
	struct ep_table table;
	uint64_t accepted, accepted_total, errors, errors_total;
	int first_errno;
	volatile int stop;
};

static void *accept_main(void *arg)
{
	struct acceptor *a = arg;
	struct epoll_event evs[EPOLL_EVENTS];

	if (a->cpu >= 0)
		pin_to_cpu(a->cpu);
	while (!a->stop) {
		int n = epoll_wait(a->ep, evs, EPOLL_EVENTS, 100);

		for (int i = 0; i < n; i++) {
			int lfd = evs[i].data.fd;

			for (;;) {
				struct sockaddr_storage ss;
				socklen_t len = sizeof(ss);
				struct ep_key k;
				int fd = accept4(lfd, NULL, NULL,
						 SOCK_NONBLOCK | SOCK_CLOEXEC);

				if (fd < 0) {
					if (errno == EAGAIN || errno == EINTR)
						break;
					/* Out of descriptors and the like:
					 * counted, and the loop goes on. */
					pthread_mutex_lock(&a->lock);
					a->errors++;
					a->errors_total++;
					if (!a->first_errno)
						a->first_errno = errno;
					pthread_mutex_unlock(&a->lock);
					break;
				}
				if (getsockname(fd, (struct sockaddr *)&ss, &len))
					memset(&ss, 0, sizeof(ss));
				close(fd);
				ep_key_of(&ss, &k);
				pthread_mutex_lock(&a->lock);
				a->accepted++;
				a->accepted_total++;
				ep_add(&a->table, &k);
				pthread_mutex_unlock(&a->lock);
			}
		}
	}
	return NULL;
}

static void acc_reset(struct acceptor *a)
{
	a->accepted = 0;
	a->errors = 0;
	ep_reset(&a->table);
}

static void acc_arm(void *ctx, uint32_t cookie)
{
	struct acceptor *a = ctx;

	pthread_mutex_lock(&a->lock);
	acc_reset(a);
	pthread_mutex_unlock(&a->lock);
}

static void acc_report(void *ctx, struct json *j)
{
	struct acceptor *a = ctx;
	char text[INET6_ADDRSTRLEN];

	pthread_mutex_lock(&a->lock);
	json_str(j, "mode", "accept");
	json_u64(j, "accepted", a->accepted);
	json_u64(j, "accepted_total", a->accepted_total);
	json_u64(j, "errors", a->errors);
	json_u64(j, "errors_total", a->errors_total);
	if (a->first_errno)
		json_str(j, "first_error", strerror(a->first_errno));
	else
		echo_json_null(j, "first_error");
	json_u64(j, "unlisted", a->table.unlisted);
	json_arr(j, "endpoints");
	for (uint32_t i = 0; i < a->table.n; i++) {
		const struct ep_entry *e = &a->table.slot[a->table.order[i]];

		if (!e->count)
			continue;
		ep_addr_text(&e->key, text, sizeof(text));
		json_obj(j, NULL);
		json_str(j, "addr", text);
		json_u64(j, "port", e->key.port);
		json_u64(j, "accepted", e->count);
		json_close_obj(j);
	}
	json_close_arr(j);
	acc_reset(a);
	pthread_mutex_unlock(&a->lock);
}

/* One listener on addr:port; -1 with a note, or -2 for a family this kernel
 * lacks (the wildcard default then listens on the other one only). */
static int listen_on(struct acceptor *a, const struct sockaddr_storage *ss,
		     socklen_t len, uint16_t port, int backlog)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fd, one = 1;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == EAFNOSUPPORT)
			return -2;
		note("accept: socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)ss, len) || listen(fd, backlog)) {
		note("accept: cannot listen on port %u: %s", port,
		     strerror(errno));
		close(fd);
		return -1;
	}
	ev.data.fd = fd;
	if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev)) {
		note("accept: epoll: %s", strerror(errno));
		close(fd);
		return -1;
	}
	a->fds[a->nfds++] = fd;
	return 0;
}

static const struct option acc_opts[] = {
	{ "ports", required_argument, NULL, 'p' },
	{ "bind", required_argument, NULL, 'b' },
	{ "backlog", required_argument, NULL, 'B' },
	{ "cpu", required_argument, NULL, 'c' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 }
};

static const char acc_usage[] =
"usage: fwbench-engine accept --ports LIST [--bind ADDR] [--backlog N]\n"
"         [--cpu N]\n"
"  Listens on every TCP port of LIST (e.g. 8080-8085,9000; the wildcard\n"
"  address of both IP versions unless --bind), accepts and closes each\n"
"  connection at once, and counts it by its local address and port. The\n"
"  backlog (default 65535) is capped by net.core.somaxconn. Prints a ready\n"
"  line; then on stdin: `read` (the counts since the last read, nonzero\n"
"  endpoints only), `arm COOKIE` (start counting afresh), `quit`.\n";

int cmd_accept(int argc, char **argv)
{
	struct acceptor *a = NULL;
	uint16_t ports[CONN_MAX_PORTS];
	struct bench_addr bind_addr;
	bool have_bind = false, running = false;
	int nports = 0, backlog = 65535, cpu = -1, opt, ret = EXIT_RUNTIME;
	struct rx_ops ops = { .arm = acc_arm, .report = acc_report };
	char bind_text[INET6_ADDRSTRLEN] = "any";
	pthread_t tid;
	struct json j;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", acc_opts, NULL)) != -1) {
		switch (opt) {
		case 'p': nports = conn_parse_ports("ports", optarg, ports, CONN_MAX_PORTS); break;
		case 'b':
			parse_bench_addr("bind", optarg, &bind_addr);
			snprintf(bind_text, sizeof(bind_text), "%s", optarg);
			have_bind = true;
			break;
		case 'B': backlog = parse_u64("backlog", optarg, 1, 1 << 30); break;
		case 'c': cpu = parse_u64("cpu", optarg, 0, CPU_SETSIZE - 1); break;
		case 'h': fputs(acc_usage, stdout); return 0;
		default: usage_error("accept: unknown option or missing value: %s "
				     "(see accept --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("accept: unexpected argument %s", argv[optind]);
	if (!nports)
		usage_error("accept: --ports is required");
	a = calloc(1, sizeof(*a));
	if (!a || ep_init(&a->table, MAX_ENDPOINTS)) {
		note("accept: out of memory");
		goto out;
	}
	pthread_mutex_init(&a->lock, NULL);
	a->cpu = cpu;
	a->ep = epoll_create1(EPOLL_CLOEXEC);
	if (a->ep < 0) {
		note("accept: epoll: %s", strerror(errno));
		goto out;
	}
	for (int i = 0; i < nports; i++) {
		struct sockaddr_storage ss;
		socklen_t len;
		int r;

		if (have_bind) {
			len = echo_sockaddr(&bind_addr, ports[i], &ss);
			if (listen_on(a, &ss, len, ports[i], backlog))
				goto out;
			continue;
		}
		for (int fam = 0; fam < 2; fam++) {
			memset(&ss, 0, sizeof(ss));
			if (fam == 0) {
				struct sockaddr_in *sin = (void *)&ss;

				sin->sin_family = AF_INET;
				sin->sin_port = htons(ports[i]);
				len = sizeof(*sin);
			} else {
				struct sockaddr_in6 *sin6 = (void *)&ss;

				sin6->sin6_family = AF_INET6;
				sin6->sin6_port = htons(ports[i]);
				len = sizeof(*sin6);
			}
			r = listen_on(a, &ss, len, ports[i], backlog);
			if (r == -1 || (r == -2 && fam == 0))
				goto out;
		}
	}
	if (pthread_create(&tid, NULL, accept_main, a)) {
		note("accept: cannot start the accept thread");
		goto out;
	}
	running = true;
	ops.ctx = a;
	json_begin(&j, stdout);
	json_bool(&j, "ready", true);
	json_str(&j, "mode", "accept");
	json_str(&j, "bind", bind_text);
	json_arr(&j, "ports");
	for (int i = 0; i < nports; i++)
		json_u64(&j, NULL, ports[i]);
	json_close_arr(&j);
	json_u64(&j, "listeners", a->nfds);
	json_u64(&j, "backlog", backlog);
	json_end(&j);
	control_loop(&ops);
	ret = 0;
out:
	if (running) {
		a->stop = 1;
		pthread_join(tid, NULL);
	}
	if (a) {
		for (int i = 0; i < a->nfds; i++)
			close(a->fds[i]);
		if (a->ep > 0)
			close(a->ep);
		ep_free(&a->table);
		free(a);
	}
	return ret;
}
