/*
 * The devices' proportions (throttle/bandwidth.c, PROPORTIONS) count every
 * page whose writeback completed, as the kernel's (wb_domain_writeout_add
 * at each completion): a device's share of the dirty threshold is its
 * part of the recent completions.  The bandwidth update skips its rate
 * measurement for an interval in which the device was busy under 1/8 of
 * the time (a fast device whose writers keep it mostly idle); it skipped
 * the proportion's count with it, and those completions were never
 * counted: a fast device written at a tenth of its speed kept a share of
 * 0 beside a slow device that was busy all along, and its writers were
 * throttled by the slow device's pages (wb_thresh 0, the factor 1/4).
 * Driven with made-up times and counts, as tests/bw_estimate.c.
 */
#include "testutil.h"
#include "internal.h"
#include "bw_drive.h"

int main(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16 << 20;
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	wbc_dev *slow, *fast;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &slow), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &fast), 0);
	const uint64_t ms = 1000000ull;
	/* far ahead of the real clock: the flushers' own updates see a time
	 * before the stamps and leave the estimates alone */
	uint64_t t = wbc_now_ns() + 100000 * 1000 * ms;
	bw_park(slow, t);
	bw_park(fast, t);
	/* 1 s in 200 ms intervals: each device completes 4 MiB per interval;
	 * the slow one is busy all along, the fast one 10 ms of each 200 */
	for (int i = 0; i < 5; i++) {
		t += 200 * ms;
		bw_feed(slow, t, 4 << 20, 200 * ms);
		bw_feed(fast, t, 4 << 20, 10 * ms);
	}
	double fs = prop_fraction(slow), ff = prop_fraction(fast);
	printf("equal completions: share slow %.3f, fast %.3f (expected 0.5 each)\n", fs, ff);
	CHECK(ff > 0.4 && ff < 0.6);
	CHECK(fs > 0.4 && fs < 0.6);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
