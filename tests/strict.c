/*
 * strict_limit: a slow device with strict_limit=1 and max_ratio=10 keeps
 * its dirty pages near its own share of the threshold even while the
 * cache as a whole is far below freerun (where a device without
 * strict_limit runs free: checked on a second, non-strict, device); so
 * does one capped by max_bytes=1M or max_ratio=2, below the room a device
 * gets to ramp up (thresh/8), which was its strict line before.
 */
#include "testutil.h"
#include "internal.h"

static wbc_cache *c;
static atomic_int stop;
static atomic_long over, samples;
static wbc_dev *strict_dev;

static void *sampler(void *arg)
{
	(void)arg;
	uint64_t share = (uint64_t)dev_wb_thresh(strict_dev, (double)c->thresh) * 4096;
	uint64_t slack = (throttle_slack_pages(c) + 32) * 4096;
	while (!atomic_load(&stop)) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(strict_dev, &ds);
		if (ds.dirty_bytes + ds.writeback_bytes > share + slack)
			atomic_fetch_add(&over, 1);
		atomic_fetch_add(&samples, 1);
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static uint64_t write_and_peak(wbc_dev *dev, const char *name, uint64_t bytes)
{
	wbc_file *f;
	char buf[64 << 10];
	uint64_t peak = 0;
	t_fill(buf, sizeof(buf), 3);
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	for (uint64_t off = 0; off < bytes; off += sizeof(buf)) {
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
		struct wbc_dev_stats ds;
		wbc_dev_stats(dev, &ds);
		peak = WBC_MAX(peak, ds.dirty_bytes + ds.writeback_bytes);
	}
	CHECK_EQ(wbc_file_close(f), 0);
	return peak;
}

/* A strict device of @spec (share at most @max_share bytes) writing 12 MiB
 * never holds more than its share and the slack (sampled every ms). */
static uint64_t strict_run(const char *spec, uint64_t max_share)
{
	struct wbc_config cfg = t_config(256u << 20, 4096);   /* thresh 51.2 MiB, freerun 38.4 */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &strict_dev), 0);
	atomic_store(&stop, 0);
	atomic_store(&over, 0);
	atomic_store(&samples, 0);
	pthread_t s;
	pthread_create(&s, NULL, sampler, NULL);
	uint64_t peak_strict = write_and_peak(strict_dev, "s", 12u << 20);
	atomic_store(&stop, 1);
	pthread_join(s, NULL);
	uint64_t share = (uint64_t)dev_wb_thresh(strict_dev, (double)c->thresh) * 4096;
	printf("%s: peak %.1f MiB (share %.1f MiB, slack %.1f MiB), %ld of %ld samples over\n",
	       spec, (double)peak_strict / (1 << 20), (double)share / (1 << 20),
	       (double)(throttle_slack_pages(c) + 32) * 4096 / (1 << 20), atomic_load(&over),
	       atomic_load(&samples));
	CHECK_EQ(atomic_load(&over), 0);
	CHECK(atomic_load(&samples) > 0);
	CHECK(share <= max_share + 4096);
	return share;
}

int main(void)
{
	uint64_t share = strict_run("model:bw=4M,qd=4,strict_limit=1,max_ratio=10",
				    (uint64_t)(0.1 * 51.2 * (1 << 20)));
	wbc_dev *loose;
	CHECK_EQ(wbc_dev_add(c, "model:bw=4M,qd=4", &loose), 0);
	uint64_t peak_loose = write_and_peak(loose, "l", 12u << 20);
	printf("loose device peak %.1f MiB\n", (double)peak_loose / (1 << 20));
	CHECK(peak_loose > 2 * share);   /* without strict_limit it ran free */
	CHECK_EQ(wbc_cache_close(c), 0);
	/* a share under the ramp-up room (thresh/8): the strict line is the
	 * share, not that room (it held 6.4 MiB for a 1 MiB share) */
	strict_run("model:bw=4M,qd=4,strict_limit=1,max_bytes=1M", 1u << 20);
	CHECK_EQ(wbc_cache_close(c), 0);
	strict_run("model:bw=4M,qd=4,strict_limit=1,max_ratio=2", (uint64_t)(0.02 * 51.2 * (1 << 20)));
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("strict: ok\n");
	return 0;
}
