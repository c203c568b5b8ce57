/*
 * The device model's times and ranges at the extremes a spec can give
 * (src/backend/model.c): each is converted without overflow.
 *   1. stall=0+100000000000 (more nanoseconds than 64 bits hold): while a write
 *      waits in the stall, the model's thread sleeps; it does not wake
 *      again and again (the wait overflowed to 1 ns: a busy loop).  Once
 *      the stall is released, fsync returns 0 and the data is there.
 *   2. err=1M+<2^64 - 1> (the range's end is past 2^64): every write at
 *      or after 1 MiB fails, every write below succeeds.
 *   3. iops=0.000000000001 (one I/O per 31,700 years): a write stays in flight; it
 *      did complete at once when its due time overflowed.  That write
 *      never completes, so the test ends without closing the cache.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "backend_util.h"

#define SZ (64u << 10)
#define MiB (1u << 20)
/* Timed waits the model's thread may begin while nothing changes: one
 * per wakeup by a submission, a few at most (thousands when it spun). */
#define MAX_IDLE_WAITS 10
#define IDLE_NS (200 * 1000 * 1000)

static wbc_cache *c;   /* case 3 leaves it open: reachable to the end */
static char data[2 * MiB], back[2 * MiB];

static void *fsync_main(void *arg)
{
	return (void *)(intptr_t)wbc_fsync(arg);
}

static wbc_cache *open_cache(void)
{
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;        /* only what the test asks */
	wbc_cache *cache;
	CHECK_EQ(wbc_cache_open(&cfg, &cache), 0);
	return cache;
}

/* Start an fsync of @f in a thread and wait until its I/O is queued. */
static pthread_t fsync_start(wbc_dev *dev, wbc_file *f)
{
	pthread_t t;
	struct wbc_dev_stats ds;
	CHECK_EQ(pthread_create(&t, NULL, fsync_main, f), 0);
	CHECK(T_WAIT_UNTIL((wbc_dev_stats(dev, &ds), ds.writeback_bytes > 0)));
	return t;
}

int main(void)
{
	wbc_dev *dev;
	wbc_file *f;
	struct wbc_stats st;
	struct wbc_dev_stats ds;
	t_fill(data, sizeof(data), 3);

	/* 1. a stall beyond the clock */
	c = open_cache();
	CHECK_EQ(wbc_dev_add(c, "model:stall=0+100000000000", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "s", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	pthread_t t = fsync_start(dev, f);
	uint64_t w0 = model_waits(dev);
	struct timespec idle = { 0, IDLE_NS };
	nanosleep(&idle, NULL);
	uint64_t w1 = model_waits(dev);
	wbc_dev_stats(dev, &ds);
	printf("stall=0+100000000000: %llu waits of the model in %d ms\n", (unsigned long long)(w1 - w0),
	       IDLE_NS / 1000000);
	CHECK_EQ(ds.written_back_bytes, 0);        /* still stalled */
	CHECK(w1 - w0 <= MAX_IDLE_WAITS);
	model_release_stall(dev);
	void *ret;
	pthread_join(t, &ret);
	CHECK_EQ((intptr_t)ret, 0);
	uint64_t size;
	CHECK_EQ(t_backend_read(dev, "s", back, SZ, &size), 0);
	CHECK_EQ(size, SZ);
	CHECK(!memcmp(back, data, SZ));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* 2. an error range whose end is past 2^64 */
	c = open_cache();
	CHECK_EQ(wbc_dev_add(c, "model:max_io=64K,err=1M+18446744073709551615", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 2 * MiB, 0), 2 * MiB);
	CHECK_EQ(wbc_fsync(f), -EIO);
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, MiB);           /* all of [1M, 2M), nothing below */
	CHECK_EQ(st.written_back_bytes, MiB);
	CHECK_EQ(t_backend_read(dev, "e", back, MiB, &size), 0);
	CHECK(!memcmp(back, data, MiB));
	model_set_faults(dev, 0, 0, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), -EIO);        /* the device's error, once */

	/* 3. an I/O rate too slow to count */
	c = open_cache();
	CHECK_EQ(wbc_dev_add(c, "model:iops=0.000000000001", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "i", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	fsync_start(dev, f);
	nanosleep(&idle, NULL);
	wbc_dev_stats(dev, &ds);
	CHECK_EQ(ds.written_back_bytes, 0);
	CHECK_EQ(ds.writeback_bytes, SZ);
	printf("model_time: ok\n");
	/* the fsync waits for a write due in 31,700 years: end here */
	fflush(stdout);
	exit(0);
}
