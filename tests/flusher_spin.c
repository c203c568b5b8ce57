/*
 * The flusher never goes round and round a file it cannot write.
 *   1. A file whose size is being set: a truncate waits in the backend's
 *      resize (held here until the test lets it go), with dirty pages
 *      below the new size and the cache over its background threshold.
 *      Writeback skips the file while its size is set; the flusher's pass
 *      came back to it at once, over and over, for as long as the resize
 *      took (900,000 list passes in 0.9 s).  Now the pass ends when the
 *      file comes round again and the next waits for its retry: a few
 *      passes while the resize lasts.  The resize then ends, and the
 *      truncate and the data are right.
 * (The dead-device cases are in retry_bound.c.)  No wall-clock assertion:
 * the bound counts passes, 1000 for each 200 ms the test was away (a
 * flusher's retries: about 40), a spin makes hundreds of thousands.
 */
#include "testutil.h"
#include "internal.h"
#include "held_backend.h"

#define KiB (1u << 10)
#define MiB (1u << 20)
#define PS 4096

/* the held backend's resize, held until let go */
static bool hold_resize, in_resize;
static uint64_t resized_to = UINT64_MAX;

static int held_resize(uint64_t size)
{
	pthread_mutex_lock(&hb_lock);
	in_resize = true;
	pthread_cond_broadcast(&hb_cond);
	while (hold_resize)
		pthread_cond_wait(&hb_cond, &hb_lock);
	in_resize = false;
	resized_to = size;
	pthread_mutex_unlock(&hb_lock);
	return 0;
}

static wbc_file *f;

static void *truncator(void *arg)
{
	(void)arg;
	CHECK_EQ(wbc_truncate(f, 1 * MiB), 0);
	return NULL;
}

/* the truncate has the file's size flag (it waits for the held write) */
static bool sizing(void)
{
	struct inode *ino = handle_get(f)->inode;
	pthread_mutex_lock(&ino->lock);
	bool s = ino->sizing;
	pthread_mutex_unlock(&ino->lock);
	return s;
}

static uint64_t queue_io_passes(wbc_dev *dev)
{
	struct wbc_dev_debug d;
	CHECK_EQ(wbc_dev_debug(dev, &d), 0);
	return d.queue_io_passes;
}

int main(void)
{
	struct wbc_config cfg = t_config(16 * MiB, PS);
	cfg.dirty_writeback_centisecs = 0;          /* no periodic pass */
	cfg.dirty_background_bytes = 64 * PS;       /* 2 MiB dirty is well over it */
	cfg.dirty_bytes = 8 * MiB;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	hb_max_io = PS;   /* one page an I/O, one I/O in flight */
	hb_qd = 1;
	hb_resize = held_resize;
	CHECK_EQ(wbc_dev_add_backend(c, &hb_ops, NULL, "", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);

	static char buf[2 * MiB];
	t_fill(buf, sizeof(buf), 7);
	pthread_mutex_lock(&hb_lock);
	hb_hold = true;
	hold_resize = true;
	pthread_mutex_unlock(&hb_lock);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	/* the flusher has one write out (queue depth 1), held */
	pthread_mutex_lock(&hb_lock);
	while (!hb_nheld)
		pthread_cond_wait(&hb_cond, &hb_lock);
	pthread_mutex_unlock(&hb_lock);
	/* the truncate sets the size flag and waits for that write ... */
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, truncator, NULL), 0);
	CHECK(T_WAIT_UNTIL(sizing()));
	/* ... which ends now; the truncate goes on into the resize, held */
	pthread_mutex_lock(&hb_lock);
	hb_hold = false;
	while (!in_resize) {
		for (int i = 0; i < hb_nheld; i++)
			wbc_io_complete(hb_held[i], (ssize_t)hb_held[i]->len);
		hb_nheld = 0;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&hb_cond, &hb_lock, &ts);
	}
	pthread_mutex_unlock(&hb_lock);

	struct wbc_stats st;
	wbc_stats(c, &st);
	uint64_t p0 = queue_io_passes(dev), s0 = atomic_load(&dev->wb_passes);
	uint64_t t0 = wbc_now_ns();
	struct timespec ts = { 0, 200 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	uint64_t passes = atomic_load(&dev->wb_passes) - s0, lists = queue_io_passes(dev) - p0;
	/* the passes counted over the time this thread was really away: a
	 * sleep of 200 ms may last seconds on a loaded machine, and the
	 * flusher's retries (about 200 list passes a second) add up */
	uint64_t ms = (wbc_now_ns() - t0) / 1000000;
	printf("1. while a resize is held (%llu KiB dirty): %llu writeback passes, %llu list "
	       "passes in %llu ms\n", (unsigned long long)st.dirty_bytes / KiB,
	       (unsigned long long)passes, (unsigned long long)lists, (unsigned long long)ms);
	CHECK(st.dirty_bytes > 0);
	/* fewer than 1000 per 200 ms (spinning: hundreds of thousands) */
	CHECK(lists < 1000 * WBC_MAX(ms, 200ull) / 200);

	pthread_mutex_lock(&hb_lock);
	hold_resize = false;
	pthread_cond_broadcast(&hb_cond);
	pthread_mutex_unlock(&hb_lock);
	CHECK_EQ(pthread_join(t, NULL), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	pthread_mutex_lock(&hb_lock);
	CHECK_EQ(resized_to, 1 * MiB);
	pthread_mutex_unlock(&hb_lock);
	static char rb[2 * MiB];
	CHECK_EQ(wbc_pread(f, rb, sizeof(rb), 0), (ssize_t)(1 * MiB));
	CHECK(!memcmp(rb, buf, 1 * MiB));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("flusher_spin: ok\n");
	return 0;
}
