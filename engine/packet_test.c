// SPDX-License-Identifier: MIT
/*
 * Checks the sender's frames (packet.c) against frames built independently
 * (byte by byte, checksums summed big-endian as RFC 1071 writes them): an
 * IPv4 frame and an IPv6 frame with an odd-length text, byte for byte; the
 * IPv6 checksum that sums to zero, which must go out as 0xffff; and the
 * round robin that gives every flow the same share.
 * Exit 0 and "ok" on success; prints every failure otherwise.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "packet.h"

#define ETH_LEN 14

/* 64-byte frame, 198.18.0.2:10000 -> 198.19.0.2:9, flow 5 (the IP id). */
static const uint8_t gold_v4[] =
	"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00\x45\x00"
	"\x00\x2e\x00\x05\x40\x00\x40\x11\xae\x90\xc6\x12\x00\x02\xc6\x13"
	"\x00\x02\x27\x10\x00\x09\x00\x1a\x00\x00\x44\x33\x22\x11\x03\x00"
	"\x07\x00\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01";

/*
 * 128-byte frame, flow 7 of 3 sources x 2 ports x 2 destinations:
 * 2001:2:0:1::3 port 5000 -> 2001:2:0:2::3 port 53, text "hello".
 */
static const uint8_t gold_v6[] =
	"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x86\xdd\x60\x00"
	"\x00\x00\x00\x46\x11\x40\x20\x01\x00\x02\x00\x00\x00\x01\x00\x00"
	"\x00\x00\x00\x00\x00\x03\x20\x01\x00\x02\x00\x00\x00\x02\x00\x00"
	"\x00\x00\x00\x00\x00\x03\x13\x88\x00\x35\x00\x46\x59\x52\xef\xbe"
	"\xad\xde\x01\x00\xfe\xff\xff\xff\x15\xcd\x5b\x07\x00\x00\x00\x00"
	"\x68\x65\x6c\x6c\x6f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";

/* The one's complement sum of big-endian words, folded, not inverted. */
static uint32_t be_sum(uint32_t sum, const uint8_t *p, size_t len)
{
	for (; len > 1; p += 2, len -= 2)
		sum += (uint32_t)p[0] << 8 | p[1];
	if (len)
		sum += (uint32_t)p[0] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/* The UDP-over-IPv6 sum with the checksum field as found: 0xffff if valid. */
static uint32_t udp6_sum(const uint8_t *f, size_t wire_len)
{
	const uint8_t *ip6 = f + ETH_LEN, *udp = ip6 + 40;
	size_t ulen = wire_len - ETH_LEN - 40;
	uint8_t pseudo[8] = { 0 };

	pseudo[0] = ulen >> 24;
	pseudo[1] = ulen >> 16;
	pseudo[2] = ulen >> 8;
	pseudo[3] = ulen;
	pseudo[7] = 17;
	return be_sum(be_sum(be_sum(0, ip6 + 8, 32), pseudo, 8), udp, ulen);
}

static int same(const char *what, const uint8_t *got, const uint8_t *want,
		size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i]) {
			printf("FAIL %s: byte %zu is %02x, expected %02x\n",
			       what, i, got[i], want[i]);
			return 1;
		}
	return 0;
}

static void base_spec(struct frame_spec *f, const char *src, const char *dst)
{
	static const uint8_t smac[6] = { 2, 0, 0, 0, 0, 1 };
	static const uint8_t dmac[6] = { 2, 0, 0, 0, 0, 2 };

	memset(f, 0, sizeof(*f));
	memcpy(f->src_mac, smac, 6);
	memcpy(f->dst_mac, dmac, 6);
	parse_bench_addr("src", src, &f->src);
	parse_bench_addr("dst", dst, &f->dst);
	f->src_count = f->dst_count = f->sport_count = 1;
}

static int check_v4(uint8_t *buf)
{
	struct fwb_stamp st = { 0x11223344, 3, 7, 0x0102030405060708ULL };
	struct frame_spec f;
	int bad = 0;

	base_spec(&f, "198.18.0.2", "198.19.0.2");
	f.sport = 10000;
	f.dport = 9;
	f.wire_len = 64 - 4;
	frame_prepare(&f);
	frame_template(&f, buf);
	frame_fill(&f, buf, 5, &st);
	bad |= same("IPv4 frame", buf, gold_v4, f.wire_len);
	if (be_sum(0, buf + ETH_LEN, 20) != 0xffff) {
		printf("FAIL IPv4 header checksum does not verify\n");
		bad = 1;
	}
	if (frame_payload_len(&f) != FWB_STAMP_LEN) {
		printf("FAIL IPv4 payload of a 64-byte frame: %zu bytes\n",
		       frame_payload_len(&f));
		bad = 1;
	}
	return bad;
}

static int check_v6(uint8_t *buf)
{
	struct fwb_stamp st = { 0xdeadbeef, 1, 0xfffffffe, 123456789 };
	struct frame_spec f;
	uint32_t x;
	uint16_t w;
	int bad = 0;

	base_spec(&f, "2001:2:0:1::2", "2001:2:0:2::2");
	f.src_count = 3;
	f.sport = 5000;
	f.sport_count = 2;
	f.dst_count = 2;
	f.dport = 53;
	f.wire_len = 128 - 4;
	f.text = "hello";	/* odd: its last byte sums as a half word */
	f.text_len = 5;
	frame_prepare(&f);
	frame_template(&f, buf);
	frame_fill(&f, buf, 7, &st);
	bad |= same("IPv6 frame", buf, gold_v6, f.wire_len);
	if (udp6_sum(buf, f.wire_len) != 0xffff) {
		printf("FAIL IPv6 UDP checksum does not verify\n");
		bad = 1;
	}

	/*
	 * A sum of zero is sent as 0xffff (0 would mean none). Choose the
	 * stamp's time so that the words sum to 0xffff with the field at 0:
	 * its first word (an even offset in the datagram) makes up the rest.
	 */
	st.sched_ns = 0;
	frame_fill(&f, buf, 7, &st);
	memset(buf + ETH_LEN + 40 + 6, 0, 2);
	x = udp6_sum(buf, f.wire_len);
	w = 0xffff - x;
	st.sched_ns = (uint64_t)(w >> 8) | (uint64_t)(w & 0xff) << 8;
	frame_fill(&f, buf, 7, &st);
	if (buf[ETH_LEN + 40 + 6] != 0xff || buf[ETH_LEN + 40 + 7] != 0xff) {
		printf("FAIL a zero IPv6 UDP checksum went out as %02x%02x, "
		       "not ffff\n", buf[ETH_LEN + 40 + 6],
		       buf[ETH_LEN + 40 + 7]);
		bad = 1;
	}
	if (udp6_sum(buf, f.wire_len) != 0xffff) {
		printf("FAIL the 0xffff IPv6 UDP checksum does not verify\n");
		bad = 1;
	}
	return bad;
}

/* Every flow once per src_count * sport_count * dst_count frames. */
static int check_flows(uint8_t *buf)
{
	struct fwb_stamp st = { 1, 0, 0, 0 };
	struct frame_spec f;
	uint64_t flows, n;
	uint8_t *seen;
	int bad = 0;

	base_spec(&f, "198.18.0.10", "198.19.0.20");
	f.src_count = 5;
	f.sport = 1000;
	f.sport_count = 3;
	f.dport = 9;
	f.dst_count = 7;
	f.wire_len = 64 - 4;
	flows = f.src_count * f.sport_count * f.dst_count;
	seen = calloc(flows, 1);
	if (!seen) {
		printf("FAIL out of memory for %llu flows\n",
		       (unsigned long long)flows);
		bad = 1;
		goto out;
	}
	frame_prepare(&f);
	frame_template(&f, buf);
	for (n = 0; n < 2 * flows; n++) {
		const uint8_t *ip = buf + ETH_LEN, *udp = ip + 20;
		uint64_t s, p, d, k;

		frame_fill(&f, buf, n, &st);
		s = ip[15] - 10;
		d = ip[19] - 20;
		p = (udp[0] << 8 | udp[1]) - 1000;
		if (s >= f.src_count || p >= f.sport_count ||
		    d >= f.dst_count) {
			printf("FAIL flow %llu outside the ranges\n",
			       (unsigned long long)n);
			bad = 1;
			goto out;
		}
		k = (d * f.sport_count + p) * f.src_count + s;
		if (k != n % flows) {
			printf("FAIL frame %llu carries flow %llu\n",
			       (unsigned long long)n, (unsigned long long)k);
			bad = 1;
			goto out;
		}
		seen[k]++;
	}
	for (n = 0; n < flows; n++)
		if (seen[n] != 2) {
			printf("FAIL flow %llu sent %u times in two rounds\n",
			       (unsigned long long)n, seen[n]);
			bad = 1;
			goto out;
		}
out:
	free(seen);
	return bad;
}

int main(void)
{
	uint8_t buf[1518];
	int bad = 0;

	if (frame_min_size(AF_INET) != 64 || frame_min_size(AF_INET6) != 84) {
		printf("FAIL smallest frames: %zu and %zu bytes\n",
		       frame_min_size(AF_INET), frame_min_size(AF_INET6));
		bad = 1;
	}
	bad |= check_v4(buf);
	bad |= check_v6(buf);
	bad |= check_flows(buf);
	if (!bad)
		printf("ok\n");
	return bad;
}
