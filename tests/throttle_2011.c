/*
 * throttle=2011 (a device tunable, for experiments: the writeback lab):
 * the IO-less throttle as first posted in 2011, with the max-pause and
 * pass-good areas above the limit (src/throttle/throttle.c, THE 2011
 * RULE), against the current rule at chosen states.
 *
 * 1. The rule's step alone (throttle_2011_step): below the limit the
 *    pause is pages / task_ratelimit in whole jiffies (1 ms), at most
 *    200 ms, and the writer is let go; in the max-pause area (limit,
 *    limit + limit/16) every pause is the 200 ms maximum and the writer
 *    is let go after it, however much its device holds; in the pass-good
 *    area (up to limit + limit/8) only a writer whose device is below its
 *    share is let go; beyond, every writer pauses again.  The next check
 *    comes after sqrt(thresh - dirty) pages, 1 over thresh, at most 8
 *    while the device is over its share.
 * 2. Through balance_dirty_pages, with the cache's and the devices'
 *    counters set (no I/O): the same states on a throttle=2011 device and
 *    on a current one.  A deferred check (wbc_pwrite_nowait's mode)
 *    gives the pause owed; a writer thread shows whether the writer is
 *    let go after one pause or held: the test waits until the thread
 *    returned or paused a second time (counted by the device's pause
 *    counter, wbc_dev_stats().pauses), whichever comes first, so the
 *    outcome depends on no timing.
 */
#include "testutil.h"
#include "internal.h"

#include <math.h>
#include <pthread.h>

#define MS (1000ull * 1000)

static struct dom domain(double dirty)
{
	/* thresh 1000 pages, bg_thresh 500 */
	struct dom d = { .dirty = dirty, .thresh = 1000, .bg_thresh = 500, .freerun = 750,
			 .setpoint = 875, .limit = 1000 };
	return d;
}

static void step_rule(void)
{
	struct step_2011 st;
	struct dom d;

	/* below the limit (above the setpoint): nr_dirtied / rate, in
	 * jiffies, capped; let go */
	d = domain(900);
	throttle_2011_step(&d, 50, 100, 1000, 50, &st);       /* 50 pages at 1000/s */
	CHECK_EQ(st.pause_ns, 50 * MS);
	CHECK(!st.again);
	CHECK_EQ(st.next_check, 10);                          /* sqrt(1000 - 900) */
	throttle_2011_step(&d, 50, 100, 100, 50, &st);        /* 500 ms: capped */
	CHECK_EQ(st.pause_ns, 200 * MS);
	throttle_2011_step(&d, 50, 100, 1e6, 1, &st);         /* 1 us: under half a jiffy */
	CHECK_EQ(st.pause_ns, 0);
	throttle_2011_step(&d, 50, 100, 1000, 2, &st);        /* 2 ms */
	CHECK_EQ(st.pause_ns, 2 * MS);
	throttle_2011_step(&d, 150, 100, 1000, 50, &st);      /* device over its share */
	CHECK_EQ(st.next_check, 8);
	CHECK(!st.again);

	/* the max-pause area: pos_ratio is 0 over the limit (rate < 1):
	 * every pause the maximum, every writer let go after it */
	for (double dirty = 1000; dirty < 1062.5; dirty += 10)
		for (double wb_dirty = 0; wb_dirty <= 1000; wb_dirty += 100) {
			d = domain(dirty);
			throttle_2011_step(&d, wb_dirty, 100, 0, 1, &st);
			CHECK_EQ(st.pause_ns, 200 * MS);
			CHECK(!st.again);
			CHECK_EQ(st.next_check, 1);           /* at or over thresh */
		}
	/* the pass-good area: let go only below the device's share */
	for (double dirty = 1063; dirty < 1125; dirty += 10) {
		d = domain(dirty);
		throttle_2011_step(&d, 99, 100, 0, 1, &st);
		CHECK_EQ(st.pause_ns, 200 * MS);
		CHECK(!st.again);
		throttle_2011_step(&d, 101, 100, 0, 1, &st);
		CHECK_EQ(st.pause_ns, 200 * MS);
		CHECK(st.again);
	}
	/* beyond: everyone pauses again */
	d = domain(1125);
	throttle_2011_step(&d, 0, 100, 0, 1, &st);
	CHECK(st.again);
	d = domain(2000);
	throttle_2011_step(&d, 0, 100, 0, 1, &st);
	CHECK(st.again);
	printf("1. the 2011 step: jiffy pauses capped at 200 ms below the limit; 200 ms and let "
	       "go in the max-pause area; let go below its share in the pass-good area; held "
	       "beyond\n");
}

/* ------------------------------------------------------------------ */

struct writer {
	wbc_dev *dev;
	atomic_bool done;
	struct wbc_thread_stats st;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	throttle_dirtied(w->dev->cache);
	CHECK_EQ(balance_dirty_pages(w->dev, NULL), 0);
	wbc_thread_stats(&w->st);
	atomic_store(&w->done, true);
	return NULL;
}

static uint64_t dev_pauses(wbc_dev *dev)
{
	struct wbc_dev_stats ds;
	CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
	return ds.pauses;
}

/* A writer to @dev checks the throttle with the counters as they are:
 * true when it was let go after exactly one pause, false when it paused
 * a second time (held); then the cache's count is set to @release (below
 * the limit) so that a held writer returns. */
static bool let_go(wbc_cache *c, wbc_dev *dev, long release)
{
	struct writer w = { .dev = dev };
	uint64_t p0 = dev_pauses(dev);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, writer_main, &w), 0);
	while (!atomic_load(&w.done) && dev_pauses(dev) < p0 + 2)
		usleep(1000);
	bool done = atomic_load(&w.done);
	ctr_set_unclean(&c->ctr, release);
	pthread_join(t, NULL);
	if (done)
		CHECK_EQ(w.st.pauses, 1);
	else
		CHECK(w.st.pauses >= 2);
	return done;
}

/* The pause a deferred check of a writer to @dev owes (0: none). */
static uint64_t owed(wbc_dev *dev)
{
	throttle_dirtied(dev->cache);
	throttle_defer_begin();
	CHECK_EQ(balance_dirty_pages(dev, NULL), 0);
	return throttle_defer_end();
}

static void areas(void)
{
	/* 1000 pages: thresh 200, bg_thresh 100, freerun 150, setpoint
	 * 175, limit 200; the max-pause area up to 212.5, pass-good up to
	 * 225; two devices, a share of 100 each (no completions yet) */
	struct wbc_config cfg = t_config(1000 * 4096, 4096);
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *old, *cur, *bad;
	CHECK_EQ(wbc_dev_add(c, "mem,throttle=2011", &old), 0);
	CHECK_EQ(wbc_dev_add(c, "mem,throttle=current", &cur), 0);
	CHECK_EQ(wbc_dev_add(c, "mem,throttle=2012", &bad), -EINVAL);
	CHECK(old->throttle_2011 && !cur->throttle_2011);
	struct dom gd;
	dom_global(c, &gd);
	CHECK(fabs(gd.limit - 200) < 1e-9 && fabs(gd.freerun - 150) < 1e-9);
	CHECK(fabs(dev_wb_thresh(old, gd.thresh) - 100) < 1e-9);

	/* below freerun: neither pauses */
	ctr_set_unclean(&c->ctr, 100);
	ctr_set_unclean(&old->ctr, 50);
	ctr_set_unclean(&cur->ctr, 50);
	CHECK_EQ(owed(old), 0);
	CHECK_EQ(owed(cur), 0);

	/* the max-pause area, each device holding 100 (its share) */
	ctr_set_unclean(&c->ctr, 205);
	ctr_set_unclean(&old->ctr, 100);
	ctr_set_unclean(&cur->ctr, 100);
	struct wbc_dev_stats s0, s1;
	CHECK_EQ(wbc_dev_stats(old, &s0), 0);
	uint64_t p_old = owed(old), p_cur = owed(cur);
	CHECK_EQ(wbc_dev_stats(old, &s1), 0);
	printf("   max-pause area: 2011 owes %.1f ms, current %.1f ms\n", (double)p_old / 1e6,
	       (double)p_cur / 1e6);
	CHECK_EQ(p_old, 200 * MS);                 /* the maximum, whatever the device */
	CHECK(p_cur > 0 && p_cur < 200 * MS);      /* what the device needs to drain */
	CHECK_EQ(s1.pauses, s0.pauses + 1);        /* counted for the device */
	CHECK_EQ(s1.paused_ns, s0.paused_ns + 200 * MS);
	/* ... and let go after that one pause, where the current rule holds
	 * its writer until the cache is below the limit */
	CHECK(let_go(c, old, 205));
	ctr_set_unclean(&c->ctr, 205);
	CHECK(!let_go(c, cur, 150));
	ctr_set_unclean(&c->ctr, 205);

	/* a device holding almost nothing (a disk whose queue runs dry):
	 * the current rule lets its writer through (the pass), the 2011
	 * rule pauses it the maximum like every other writer */
	ctr_set_unclean(&old->ctr, 10);
	ctr_set_unclean(&cur->ctr, 10);
	CHECK_EQ(owed(cur), 0);
	CHECK_EQ(owed(old), 200 * MS);

	/* the pass-good area: the 2011 writer is let go when its device is
	 * below its share, held when over it */
	ctr_set_unclean(&c->ctr, 220);
	ctr_set_unclean(&old->ctr, 50);
	CHECK(let_go(c, old, 220));
	ctr_set_unclean(&c->ctr, 220);
	ctr_set_unclean(&old->ctr, 150);
	CHECK(!let_go(c, old, 150));

	/* beyond the areas: held either way */
	ctr_set_unclean(&c->ctr, 240);
	ctr_set_unclean(&old->ctr, 50);
	CHECK(!let_go(c, old, 150));
	/* ... and a deferred check (wbc_pwrite_nowait) there owes its pause
	 * and leaves the writer due, as the current rule's at the limit: it
	 * checks again before it dirties a page (it was given the next
	 * check's page, one a pause past the limit) */
	ctr_set_unclean(&c->ctr, 240);
	ctr_set_unclean(&cur->ctr, 100);
	CHECK_EQ(owed(old), 200 * MS);
	bool due_old = throttle_due(c);
	CHECK_EQ(owed(cur) > 0, 1);
	bool due_cur = throttle_due(c);
	printf("   beyond the areas, deferred: 2011 writer %s, current %s\n",
	       due_old ? "due" : "NOT due", due_cur ? "due" : "NOT due");
	CHECK(due_cur);
	CHECK(due_old);

	ctr_set_unclean(&c->ctr, 0);
	ctr_set_unclean(&old->ctr, 0);
	ctr_set_unclean(&cur->ctr, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("2. through balance_dirty_pages: 200 ms and let go in the max-pause area (current: "
	       "a drain-bounded pause, held); no pass for a nearly clean device; pass-good "
	       "below the share only; held beyond\n");
}

int main(void)
{
	step_rule();
	areas();
	printf("ok\n");
	return 0;
}
