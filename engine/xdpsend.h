/* SPDX-License-Identifier: MIT */
/*
 * What the XDP sender's program (xdpsend.bpf.c) and its driver (xdpsend.c)
 * share: the flow table's entry and each stream's state, which the driver
 * writes through the program's mapped global data before every run.
 */
#ifndef FWB_XDPSEND_H
#define FWB_XDPSEND_H

#include <linux/types.h>
#include "common.h"

#define XDPSEND_HDR4 42		/* Ethernet + IPv4 + UDP */
#define XDPSEND_HDR6 62		/* Ethernet + IPv6 + UDP */
#define XDPSEND_MAX_CPUS 256
#define XDPSEND_MAX_FLOWS (1U << 20)
#define XDPSEND_MAX_STREAMS 8

struct xdpsend_hdr {
	__u8 bytes[64];		/* the flow's first hdr_len bytes */
};

/*
 * A stream's state. The driver sets the schedule and the limits once; the
 * program then sends while BPF_PROG_RUN iterates: a frame not yet due, or past
 * the quota or the deadline, is dropped on the spot (a few tens of ns), so
 * the program itself paces the stream and the driver only keeps runs going.
 */
struct xdpsend_stream {
	__u64 sent;		/* packets of this stream sent so far */
	__u64 quota;		/* packets to send in all */
	__u64 t0;		/* packet 0 is due then (CLOCK_MONOTONIC) ... */
	__u64 interval_q16;	/* ... each next one this much later (ns << 16);
				 * 0: open throttle */
	__u64 deadline;		/* send nothing from then on; 0: none */
	__u64 seq_start;
	__u32 cookie;
	__u32 stream;
	__u32 hold;		/* drop everything (the driver is timing runs) */
	__u32 pad;
	__u64 last_ns;		/* when the last packet went */
	__u64 lag_sum, lag_min, lag_max;	/* send time - due time */
	__u64 lag_hist[FWB_HIST_BUCKETS];
};

#ifndef __BPF__
#include <stdint.h>
#include "packet.h"

/* The driver (xdpsend.c), as `send --via xdp` runs it. */
struct xdp_gen;

/* Load the program and fill its flow table; NULL (with a note) on failure,
 * with *refused set when the kernel does not allow live frames at all. */
struct xdp_gen *xdp_gen_open(const struct frame_spec *f, int ifindex, int threads,
			     uint32_t cookie, uint64_t seq_start,
			     uint32_t batch_size, bool *refused);
/* Stream `stream`'s thread runs on `cpu` (pinned) and sends `quota` packets,
 * due from t0 every interval_ns (0: open throttle), none from `deadline` on
 * (0: none). 0 or -errno. */
int xdp_gen_bind(struct xdp_gen *g, int stream, int cpu, uint64_t quota,
		 uint64_t t0, double interval_ns, uint64_t deadline);
/* Keep the stream's runs going until its quota or deadline, or *stop.
 * 0 or -errno. */
int xdp_gen_run(struct xdp_gen *g, int stream, volatile int *stop);
/* What the program did for the stream. */
const struct xdpsend_stream *xdp_gen_stream(const struct xdp_gen *g, int stream);
void xdp_gen_close(struct xdp_gen *g);

#endif /* !__BPF__ */

#endif
