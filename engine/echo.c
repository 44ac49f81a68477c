// SPDX-License-Identifier: MIT
/*
 * What the echo client and server share: protocol, frame-size and fault
 * options with their checks, sockets, CPU pinning and the report's pieces.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
#include "echo.h"

#ifndef SCTP_NODELAY
#define SCTP_NODELAY 3	/* linux/sctp.h; glibc has no netinet/sctp.h */
#endif

enum echo_proto echo_parse_proto(const char *s)
{
	if (!strcmp(s, "tcp"))
		return ECHO_TCP;
	if (!strcmp(s, "udp"))
		return ECHO_UDP;
	if (!strcmp(s, "sctp"))
		return ECHO_SCTP;
	usage_error("--proto: unknown protocol %s (tcp, udp or sctp)", s);
}

const char *echo_proto_name(enum echo_proto p)
{
	return p == ECHO_TCP ? "tcp" : p == ECHO_UDP ? "udp" : "sctp";
}

const char *echo_family_name(int family)
{
	return family == AF_INET ? "ipv4" : "ipv6";
}

void echo_parse_frame(const char *s, struct echo_frame *f)
{
	const char *dash = strchr(s, '-');

	if (!dash) {
		f->lo = f->hi = parse_u64("frame-size", s, 0, UINT32_MAX);
		return;
	}
	{
		char lo[32];
		size_t n = dash - s;

		if (n == 0 || n >= sizeof(lo) || !dash[1])
			usage_error("--frame-size: %s is not a size or a range "
				    "LO-HI", s);
		memcpy(lo, s, n);
		lo[n] = 0;
		f->lo = parse_u64("frame-size", lo, 0, UINT32_MAX);
		f->hi = parse_u64("frame-size", dash + 1, 0, UINT32_MAX);
	}
	if (f->lo > f->hi)
		usage_error("--frame-size: %s runs backwards (LO-HI with LO <= HI)",
			    s);
}

void echo_check_frame(const struct echo_frame *f, enum echo_proto p,
		      int family)
{
	const char *pn = echo_proto_name(p), *fn = echo_family_name(family);
	uint32_t max = ECHO_STREAM_MAX;
	const char *why = "the engine's limit for a stream message";

	if (f->lo < ECHO_HDR)
		usage_error("--frame-size: %u is below the minimum %d for %s/%s "
			    "(the message header)", f->lo, ECHO_HDR, pn, fn);
	if (p == ECHO_UDP) {
		max = family == AF_INET ? ECHO_UDP_MAX4 : ECHO_UDP_MAX6;
		why = "one datagram without IP fragmentation on a 1500-byte MTU";
	}
	if (f->hi > max)
		usage_error("--frame-size: %u is above the maximum %u for %s/%s "
			    "(%s)", f->hi, max, pn, fn, why);
}

void echo_probe_proto(enum echo_proto p, int family)
{
	int fd;

	if (p != ECHO_SCTP)
		return;
	fd = socket(family, SOCK_STREAM, IPPROTO_SCTP);
	if (fd < 0)
		usage_error("--proto sctp: this kernel has no SCTP (socket: %s)",
			    strerror(errno));
	close(fd);
}

void echo_parse_fault(const char *s, struct echo_fault *f)
{
	static const char *const kinds[] = {
		[FAULT_DROP] = "drop", [FAULT_FOREIGN] = "foreign",
		[FAULT_SIZE] = "size", [FAULT_SEQ] = "seq",
		[FAULT_DELAY] = "delay", [FAULT_MAGIC] = "magic",
	};
	char kind[16], every[24], client[24], tail;
	unsigned int k;

	if (sscanf(s, "%15[a-z]:%23[0-9]:%23[0-9]%c", kind, every, client,
		   &tail) != 3)
		usage_error("--fault: %s is not KIND:EVERY:CLIENT "
			    "(e.g. drop:10:3)", s);
	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (!strcmp(kind, kinds[k]))
			break;
	if (k == sizeof(kinds) / sizeof(kinds[0]))
		usage_error("--fault: unknown kind %s (drop, foreign, size, seq, "
			    "delay or magic)", kind);
	f->kind = k;
	f->every = parse_u64("fault", every, 1, UINT64_MAX);
	f->client = parse_u64("fault", client, 1, ECHO_MAX_CLIENTS);
}

void echo_check_faults(const struct echo_fault *f, int n, uint32_t clients)
{
	for (int i = 0; i < n; i++) {
		if (f[i].client > clients)
			usage_error("--fault: client %u is outside 1..%u",
				    f[i].client, clients);
		if (f[i].kind == FAULT_FOREIGN && clients < 2)
			usage_error("--fault foreign: needs a second client's id "
				    "(--clients 2 or more)");
	}
}

socklen_t echo_sockaddr(const struct bench_addr *a, uint16_t port,
			struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *sin = (void *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr = a->v4;
		return sizeof(*sin);
	}
	{
		struct sockaddr_in6 *sin6 = (void *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = a->v6;
		return sizeof(*sin6);
	}
}

void echo_addr_text(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	const void *a = ss->ss_family == AF_INET ?
		(const void *)&((const struct sockaddr_in *)ss)->sin_addr :
		(const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	if (!inet_ntop(ss->ss_family, a, buf, len))
		snprintf(buf, len, "?");
}

int echo_socket(enum echo_proto p, int family, bool nonblock)
{
	int type = (p == ECHO_UDP ? SOCK_DGRAM : SOCK_STREAM) |
		   (nonblock ? SOCK_NONBLOCK : 0) | SOCK_CLOEXEC;
	int proto = p == ECHO_TCP ? IPPROTO_TCP :
		    p == ECHO_UDP ? IPPROTO_UDP : IPPROTO_SCTP;
	int fd = socket(family, type, proto), one = 1;

	if (fd < 0)
		return -1;
	/* One message per write and a wait for its echo: Nagle would hold a
	 * partial segment for the acknowledgement the echo carries. */
	if (p == ECHO_TCP)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	else if (p == ECHO_SCTP)
		setsockopt(fd, IPPROTO_SCTP, SCTP_NODELAY, &one, sizeof(one));
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	return fd;
}

/* The calling thread (and the threads it starts later) on these CPUs. */
void echo_pin(const int *cpus, int n)
{
	cpu_set_t set;

	if (!n)
		return;
	CPU_ZERO(&set);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		runtime_error("cannot pin to CPU %d...: %s", cpus[0],
			      strerror(errno));
}

/* The whole process, every thread, the ended ones included. */
void echo_json_rusage(struct json *j)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	json_obj(j, "rusage");
	json_num(j, "utime_s", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6);
	json_num(j, "stime_s", ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	json_u64(j, "nvcsw", ru.ru_nvcsw);
	json_u64(j, "nivcsw", ru.ru_nivcsw);
	json_close_obj(j);
}

void echo_json_null(struct json *j, const char *key)
{
	json_num(j, key, NAN);	/* the writer prints non-finite as null */
}
