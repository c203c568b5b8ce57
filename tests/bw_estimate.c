/*
 * The write bandwidth estimate (throttle/bandwidth.c) over an interval
 * longer than its 3 s window: the rate is what the device wrote over the
 * time it was busy, the whole interval (it divided all the bytes by the
 * window's 3 s: a device idle between updates for 10 s, writing 5 MiB/s
 * all along, measured 16.7 MiB/s, and the throttle let writers run at
 * that).  The estimate is driven with made-up times and counts (the
 * device's real flusher sees times before them and does nothing).
 */
#include "testutil.h"
#include "internal.h"
#include "bw_drive.h"

#define MiB (1024.0 * 1024.0)

int main(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16 << 20;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	const uint64_t s = 1000000000ull;
	/* far ahead of the real clock: the flusher's own updates see a time
	 * before the stamp and leave the estimate alone */
	uint64_t t = wbc_now_ns() + 100000 * s;
	bw_park(dev, t);

	/* 1: 50 MiB in 10 s, busy all along: 5 MiB/s (the first measurement
	 * replaces the initial guess) */
	t += 10 * s;
	bw_feed(dev, t, 50 << 20, 10 * s);
	double bw = (double)atomic_load(&dev->write_bw) / MiB;
	printf("10 s interval at 5 MiB/s: write_bw %.2f MiB/s\n", bw);
	CHECK(bw > 4.9 && bw < 5.1);
	/* 2: then 1 s at 20 MiB/s: a third of the way (1 s of the 3 s window) */
	t += 1 * s;
	bw_feed(dev, t, 20 << 20, 1 * s);
	bw = (double)atomic_load(&dev->write_bw) / MiB;
	printf("then 1 s at 20 MiB/s: write_bw %.2f MiB/s (expected 10)\n", bw);
	CHECK(bw > 9.9 && bw < 10.1);
	/* 3: 8 s, busy 4 of them, 40 MiB: 10 MiB/s over the busy time */
	t += 8 * s;
	bw_feed(dev, t, 40 << 20, 4 * s);
	bw = (double)atomic_load(&dev->write_bw) / MiB;
	printf("8 s, busy 4, 40 MiB: write_bw %.2f MiB/s (expected 10)\n", bw);
	CHECK(bw > 9.9 && bw < 10.1);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
