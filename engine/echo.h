/* SPDX-License-Identifier: MIT */
/*
 * The echo modes (seed 001): n clients, each with a socket of its own, send a
 * message, wait for its echo and send the next; one server echoes them, with
 * a thread per connection or one epoll loop, and both ends validate every
 * message. What the two ends share: the message, its size function, the
 * protocol and frame-size checks, the injected faults and the report pieces.
 */
#ifndef FWB_ECHO_H
#define FWB_ECHO_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include "engine.h"

/*
 * The message: a 32-byte little-endian header, then padding (zeros) to `size`
 * bytes in all. `flags` ECHO_FLAG_END marks a client's last message, which the
 * server checks for gaps but neither echoes nor counts as data. `sent_ns` is
 * information only: the client times the round trip itself.
 */
#define ECHO_MAGIC 0x31455746U	/* "FWE1" */
#define ECHO_HDR 32
#define ECHO_FLAG_END 1U

struct echo_hdr {
	uint32_t magic;
	uint32_t client;
	uint32_t size;
	uint32_t flags;
	uint64_t seq;
	uint64_t sent_ns;
};

static inline void echo_hdr_put(uint8_t *p, const struct echo_hdr *h)
{
	uint32_t w[4] = { htole32(h->magic), htole32(h->client),
			  htole32(h->size), htole32(h->flags) };
	uint64_t d[2] = { htole64(h->seq), htole64(h->sent_ns) };

	memcpy(p, w, 16);
	memcpy(p + 16, d, 16);
}

static inline void echo_hdr_get(const uint8_t *p, struct echo_hdr *h)
{
	uint32_t w[4];
	uint64_t d[2];

	memcpy(w, p, 16);
	memcpy(d, p + 16, 16);
	h->magic = le32toh(w[0]);
	h->client = le32toh(w[1]);
	h->size = le32toh(w[2]);
	h->flags = le32toh(w[3]);
	h->seq = le64toh(d[0]);
	h->sent_ns = le64toh(d[1]);
}

#define ECHO_MAX_CLIENTS 4096
#define ECHO_STREAM_MAX 65536	/* the largest message over TCP (and SCTP) */
/* One datagram on a 1500-byte MTU: 1500 - IP header - 8 (UDP). */
#define ECHO_UDP_MAX4 1472
#define ECHO_UDP_MAX6 1452
#define ECHO_MAX_FAULTS 16
#define ECHO_MAX_CPUS 64

enum echo_proto { ECHO_TCP, ECHO_UDP, ECHO_SCTP };

/* Message sizes: lo == hi for a fixed size. */
struct echo_frame {
	uint32_t lo, hi;
};

/*
 * The size of client c's message number s, a pure function of (seed, c, s),
 * so client and server know every message's size without sharing state, even
 * after a loss:
 *
 *   size(seed, c, s) = lo + splitmix64(seed ^ (c << 40) ^ s) % (hi - lo + 1)
 *
 * with Vigna's splitmix64 (all mod 2^64):
 *   z = x + 0x9e3779b97f4a7c15;
 *   z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9;
 *   z = (z ^ z >> 27) * 0x94d049bb133111eb;
 *   return z ^ z >> 31.
 * fwbench.traffic.echo.frame_size() computes the same; keep the two in step.
 */
static inline uint64_t echo_splitmix64(uint64_t x)
{
	uint64_t z = x + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint32_t echo_size(const struct echo_frame *f, uint64_t seed,
				 uint32_t client, uint64_t seq)
{
	uint64_t x = seed ^ ((uint64_t)client << 40) ^ seq;

	if (f->lo == f->hi)
		return f->lo;
	return f->lo + (uint32_t)(echo_splitmix64(x) % (f->hi - f->lo + 1));
}

/*
 * Faults the server injects into its echoes, for tests of the validation:
 * applied to client `client`'s data messages whose seq % every == 0.
 */
enum echo_fault_kind {
	FAULT_DROP,	/* no echo */
	FAULT_FOREIGN,	/* echoed with another client's id */
	FAULT_SIZE,	/* echoed with a wrong size field, length unchanged */
	FAULT_SEQ,	/* echoed with seq + ECHO_FAULT_SEQ_SHIFT */
	FAULT_DELAY,	/* held, sent just before that client's next echo */
	FAULT_MAGIC,	/* echoed with a broken magic: corrupt */
};
#define ECHO_FAULT_SEQ_SHIFT 1000000ULL

struct echo_fault {
	enum echo_fault_kind kind;
	uint64_t every;
	uint32_t client;
};

/* Options and checks (echo.c); all exit with one line on bad input. */
enum echo_proto echo_parse_proto(const char *s);
const char *echo_proto_name(enum echo_proto p);
const char *echo_family_name(int family);
void echo_parse_frame(const char *s, struct echo_frame *f);
void echo_check_frame(const struct echo_frame *f, enum echo_proto p,
		      int family);
/* --proto sctp on a kernel without SCTP: one line, EXIT_USAGE. */
void echo_probe_proto(enum echo_proto p, int family);
void echo_parse_fault(const char *s, struct echo_fault *f);
void echo_check_faults(const struct echo_fault *f, int n, uint32_t clients);

/* Sockets. */
socklen_t echo_sockaddr(const struct bench_addr *a, uint16_t port,
			struct sockaddr_storage *ss);
void echo_addr_text(const struct sockaddr_storage *ss, char *buf, size_t len);
/* A socket of the protocol, the stream ones with Nagle off; -1 and errno. */
int echo_socket(enum echo_proto p, int family, bool nonblock);
void echo_pin(const int *cpus, int n);

/* Reports. */
void echo_json_rusage(struct json *j);

/* JSON null, for a field that has no value. */
void echo_json_null(struct json *j, const char *key);

#endif
