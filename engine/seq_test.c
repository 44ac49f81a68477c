// SPDX-License-Identifier: MIT
/*
 * Checks the duplicate and reorder window of common.h against an exact
 * reference (a bit per sequence number, kept for the whole run): millions of
 * packets on one stream, past the 2^21 where the old fixed bitmap wrapped and
 * past the 2^32 where the wire's sequence number does, with losses, reorders,
 * copies and packets behind the window injected all along, then a few
 * hand-made cases at the window's edge and at the start of a stream.
 * Exit 0 on success; prints the first failure otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"

static const char *name[] = { "new", "reordered", "duplicate", "out-of-window" };

struct stream {
	struct fwb_slot *slots;		/* all streams' slots, as the receivers hold them */
	__u64 next[FWB_MAX_STREAMS];
};

/* What a receiver does with one packet: extend, find the slot, mark. */
static enum fwb_seq_class classify(struct stream *s, uint32_t stream,
				   uint32_t wire, __u64 *ext)
{
	if (fwb_seq_extend(s->next[stream], wire, ext))
		return FWB_SEQ_OUT_OF_WINDOW;
	return fwb_seq_mark(&s->slots[fwb_slot_index(stream, *ext)],
			    &s->next[stream], *ext);
}

/* The reference: exact memory of every number, the same window rule. */
struct reference {
	uint8_t *seen;		/* one byte per number past base */
	uint64_t base, len, next;
};

static enum fwb_seq_class expect(struct reference *r, uint64_t ext)
{
	uint64_t i = ext - r->base;

	if (r->next && (ext >> 6) + FWB_WINDOW_WORDS <= (r->next - 1) >> 6)
		return FWB_SEQ_OUT_OF_WINDOW;
	if (r->seen[i])
		return FWB_SEQ_DUPLICATE;
	r->seen[i] = 1;
	if (ext < r->next)
		return FWB_SEQ_REORDERED;
	r->next = ext + 1;
	return FWB_SEQ_NEW;
}

static uint64_t rng = 88172645463325252ULL;

static uint64_t xorshift(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int check(const char *what, uint64_t ext, int got, int want)
{
	if (got == want)
		return 0;
	printf("FAIL %s: sequence %llu was %s, expected %s\n", what,
	       (unsigned long long)ext, name[got], name[want]);
	return 1;
}

/*
 * One stream of `n` numbers from `base`: in order, except that each number is
 * lost, held back (delivered up to `depth` later), or followed by a copy of a
 * recent number, and now and then a number from far behind the window shows
 * up. Every packet's class must equal the reference's.
 */
static int random_stream(struct stream *s, uint32_t stream, uint64_t base,
			 uint64_t n, uint64_t depth, uint64_t counts[4])
{
	struct reference ref = { calloc(n, 1), base, n, 0 };
	uint64_t *held = calloc(depth, sizeof(uint64_t)), nheld = 0;
	int bad = 0;

	if (!ref.seen || !held) {
		printf("FAIL out of memory for a stream of %llu\n",
		       (unsigned long long)n);
		bad = 1;
		goto out;
	}
	for (uint64_t i = 0; i < n && !bad; i++) {
		__u64 ext = base + i, got_ext;
		uint64_t r = xorshift() % 1000;
		int got, want;

		if (r < 20)			/* lost */
			continue;
		if (r < 40 && nheld < depth) {	/* comes later */
			held[nheld++] = ext;
			continue;
		}
		want = expect(&ref, ext);
		got = classify(s, stream, (uint32_t)ext, &got_ext);
		bad |= check("in order", ext, got, want);
		if (got != FWB_SEQ_OUT_OF_WINDOW && got_ext != ext) {
			printf("FAIL extend: wire %u became %llu, not %llu\n",
			       (uint32_t)ext, (unsigned long long)got_ext,
			       (unsigned long long)ext);
			bad = 1;
		}
		counts[got]++;
		if (r < 60 && nheld) {		/* a held one arrives */
			uint64_t k = xorshift() % nheld, late = held[k];

			held[k] = held[--nheld];
			want = expect(&ref, late);
			got = classify(s, stream, (uint32_t)late, &got_ext);
			bad |= check("reordered", late, got, want);
			counts[got]++;
		}
		if (r >= 60 && r < 75 && i > 0) {	/* a copy of a recent one */
			uint64_t back = 1 + xorshift() % (i < depth ? i : depth);

			if (ref.seen[i - back]) {
				want = expect(&ref, ext - back);
				got = classify(s, stream, (uint32_t)(ext - back),
					       &got_ext);
				bad |= check("copy", ext - back, got, want);
				counts[got]++;
			}
		}
		if (r == 999 && i > 2 * FWB_WINDOW) {	/* from far behind */
			uint64_t old = ext - FWB_WINDOW - 64 - xorshift() % FWB_WINDOW;

			want = expect(&ref, old);
			got = classify(s, stream, (uint32_t)old, &got_ext);
			bad |= check("far behind", old, got, want);
			counts[got]++;
		}
	}
out:
	free(ref.seen);
	free(held);
	return bad;
}

static int expect_class(struct stream *s, uint32_t stream, uint64_t wire,
			int want, const char *what)
{
	__u64 ext = 0;

	return check(what, wire, classify(s, stream, (uint32_t)wire, &ext), want);
}

int main(void)
{
	struct stream s = { .slots = calloc(FWB_WINDOW_SLOTS, sizeof(struct fwb_slot)) };
	uint64_t counts[4] = { 0 }, c2[4] = { 0 }, top;
	__u64 ext = 0;
	int bad = 0;

	if (!s.slots) {
		printf("FAIL out of memory for the window\n");
		return 1;
	}
	/*
	 * 5 M numbers on stream 0 from 0 (past 2^21), and 5 M on stream 1 from
	 * 2^32 - 2^21 (past the wire's wrap), interleaved with nothing shared.
	 */
	bad |= random_stream(&s, 0, 0, 5000000, 5000, counts);
	bad |= random_stream(&s, 1, (1ULL << 32) - (1ULL << 21), 5000000, 200000, c2);
	for (int k = 0; k < 4; k++)
		counts[k] += c2[k];
	printf("random streams: %llu new, %llu reordered, %llu duplicates, "
	       "%llu out of window\n", (unsigned long long)counts[0],
	       (unsigned long long)counts[1], (unsigned long long)counts[2],
	       (unsigned long long)counts[3]);
	for (int k = 0; k < 4; k++)
		if (!counts[k]) {
			printf("FAIL coverage: no %s packet was exercised\n", name[k]);
			bad = 1;
		}

	/* Stream 2: the old detector's wrap, 2^21, exactly. */
	memset(s.next, 0, sizeof(s.next));
	for (uint64_t q = 0; q < (1ULL << 21) + 100; q++)
		bad |= expect_class(&s, 2, q, FWB_SEQ_NEW, "straight run");
	top = (1ULL << 21) + 99;
	bad |= expect_class(&s, 2, (1ULL << 21) + 5, FWB_SEQ_DUPLICATE, "copy past 2^21");
	bad |= expect_class(&s, 2, top + 2, FWB_SEQ_NEW, "skip one");
	bad |= expect_class(&s, 2, top + 1, FWB_SEQ_REORDERED, "the skipped one");
	bad |= expect_class(&s, 2, top + 1, FWB_SEQ_DUPLICATE, "and its copy");
	/* The oldest word still in the window, and the one before it. */
	top += 2;
	bad |= expect_class(&s, 2, ((top >> 6) - FWB_WINDOW_WORDS + 1) << 6,
			    FWB_SEQ_DUPLICATE, "window's oldest word");
	bad |= expect_class(&s, 2, (((top >> 6) - FWB_WINDOW_WORDS + 1) << 6) - 1,
			    FWB_SEQ_OUT_OF_WINDOW, "just behind the window");

	/* Stream 3: a jump of many windows (a long loss), then the old ones. */
	bad |= expect_class(&s, 3, 1000, FWB_SEQ_NEW, "start");
	bad |= expect_class(&s, 3, 1000 + 10 * FWB_WINDOW, FWB_SEQ_NEW, "after a long loss");
	bad |= expect_class(&s, 3, 1001, FWB_SEQ_OUT_OF_WINDOW, "before the loss");
	bad |= expect_class(&s, 3, 1000 + 10 * FWB_WINDOW - 1, FWB_SEQ_REORDERED,
			    "just before the jump");

	/* Stream 4: a stream whose first number is not 0. */
	bad |= expect_class(&s, 4, 100, FWB_SEQ_NEW, "first at 100");
	bad |= expect_class(&s, 4, 5, FWB_SEQ_REORDERED, "an earlier one");
	bad |= expect_class(&s, 4, 0xfffffff0U, FWB_SEQ_OUT_OF_WINDOW,
			    "before number 0");
	bad |= expect_class(&s, 4, 101, FWB_SEQ_NEW, "and on");

	/* Stream 5: across the wire's wrap, in order and with a copy. */
	bad |= expect_class(&s, 5, 0xffffffffU, FWB_SEQ_NEW, "last before the wrap");
	bad |= expect_class(&s, 5, 1, FWB_SEQ_NEW, "after the wrap");
	bad |= expect_class(&s, 5, 0, FWB_SEQ_REORDERED, "the wrap itself, late");
	bad |= expect_class(&s, 5, 0xffffffffU, FWB_SEQ_DUPLICATE, "copy across the wrap");
	if (fwb_seq_extend(s.next[5], 2, &ext) || ext != (1ULL << 32) + 2) {
		printf("FAIL extend after the wrap: %llu\n", (unsigned long long)ext);
		bad = 1;
	}
	free(s.slots);
	if (!bad)
		printf("ok\n");
	return bad;
}
