/*
 * The NBD and RADOS backends' window (src/backend/window.c) judges
 * queueing by each sample's round trip against the least one seen in the
 * last 10 to 20 s (the base).  After a device went idle for longer and
 * came back slower, the base from before the idle spell was still
 * believed for another 10 s: every round trip looked queued (a ratio of
 * 0.1 here) and the window shrank toward its floor.  Samples are made up
 * (clock values passed in), nothing sleeps.
 */
#include "testutil.h"
#include "backend/backends.h"

#define MS 1000000ull
#define SEC (1000 * MS)

/* one 64 KiB write sent at @sent, done @rtt later; its base/rtt ratio */
static double sample(struct vegas_window *w, uint64_t sent, uint64_t rtt)
{
	window_sample(w, true, 64 << 10, sent, sent + rtt);
	return w->sbase / w->srtt;
}

int main(void)
{
	struct vegas_window w;
	uint64_t t = 1 * SEC;
	window_init(&w, 0, 1 << 20, t);
	/* busy: round trips of 1 ms, across two base windows */
	for (int i = 0; i < 30; i++, t += SEC)
		sample(&w, t, 1 * MS);
	/* idle for 60 s, then 10 ms a round trip (a slower device) */
	t += 60 * SEC;
	double ratio = 0;
	for (int i = 0; i < 16; i++, t += 50 * MS)
		ratio = sample(&w, t, 10 * MS);
	printf("after 60 s idle, 10 ms round trips against 1 ms before: base/rtt %.2f\n", ratio);
	/* the old base (1 ms) forgotten: the new round trips are the base */
	CHECK(ratio > 0.9);
	/* and within a busy spell the least round trip still counts: one
	 * queued sample does not move the base */
	double r2 = sample(&w, t, 40 * MS);
	CHECK(w.sbase < 11 * MS);
	printf("a 40 ms sample among 10 ms ones: base %.1f ms (ratio %.2f)\n", w.sbase / MS, r2);
	printf("window_base: ok\n");
	return 0;
}
