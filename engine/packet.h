/* SPDX-License-Identifier: MIT */
/*
 * The sender's frames: Ethernet, IPv4 or IPv6, UDP, the stamp, then the
 * payload text and zeros. Pure functions of their inputs, so the frames can
 * be checked without an interface (packet_test.c).
 */
#ifndef FWB_PACKET_H
#define FWB_PACKET_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"
#include "util.h"

/*
 * What every frame of a run shares, and how its flows vary: flow n takes
 * source address src + n % src_count, then source port, then destination
 * address, round robin, so every flow gets the same share.
 */
struct frame_spec {
	uint8_t src_mac[6], dst_mac[6];
	struct bench_addr src, dst;	/* the first flow's; same family */
	uint64_t src_count, dst_count;
	uint16_t sport, dport;
	uint64_t sport_count;
	size_t wire_len;	/* written: the frame less its 4-byte FCS */
	const char *text;	/* written right after the stamp, or NULL */
	size_t text_len;
	uint32_t text_sum;	/* its checksum share, by frame_prepare() */
};

/* The IP header's length for a family: 20 or 40 bytes. */
size_t frame_l3_len(int family);
/* The smallest frame, FCS included, that carries the stamp: 64 or 84. */
size_t frame_min_size(int family);
/* UDP payload bytes: the stamp, the text and zeros. */
size_t frame_payload_len(const struct frame_spec *f);

/* Once, after the text is set: its checksum share, for frame_fill(). */
void frame_prepare(struct frame_spec *f);
/* Everything the same in every frame, into wire_len bytes at frame. */
void frame_template(const struct frame_spec *f, uint8_t *frame);
/* Over a frame_template(): flow n's addresses and port, stamp, checksums. */
void frame_fill(const struct frame_spec *f, uint8_t *frame, uint64_t n,
		const struct fwb_stamp *st);

/*
 * RFC 1071: csum_add() sums 16-bit words as they lie in memory, so the value
 * csum_fold() returns (folded, inverted) is stored as it is, in any byte order.
 */
uint32_t csum_add(uint32_t sum, const void *buf, size_t len);
uint16_t csum_fold(uint32_t sum);

#endif
