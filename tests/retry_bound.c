/*
 * on_error=retry is bounded by retry_timeout: a store that fails every
 * write does not hang the callers that wait for it, and loses nothing
 * before the bound.
 *   1. Writers: two threads stream to a model device that fails every
 *      write (errp=1, retry_timeout=300ms).  Each gets -EIO from
 *      wbc_pwrite (throttled: the dirty limit fills with failed pages),
 *      and again at its next call, which accepts nothing more.  All that
 *      was accepted is still dirty and counted at risk, nothing lost.
 *      fsync from another handle returns -EIO.  The device's stats say
 *      dead.  Then the store recovers: once fsync has written the pages,
 *      writes are accepted again.
 *   2. A page allocation: in a 32-page cache whose dirty limit is the
 *      whole cache, a writer fills every page with failed writes and then
 *      waits for a free page, not for the throttle: it gets -EIO too.
 *   3. Close of a dead device returns its error and counts what it could
 *      not write as lost.
 *   4. Close of a device that fails for a while (its first two writes,
 *      errn=2, retry_timeout=60) retries until the pages are written:
 *      it reports the error, loses nothing, and wrote the data back.
 *   5. A dead device's pages hold the cache at its dirty limit: a writer
 *      to another, healthy device writes on, also one with strict_limit
 *      (which the pass for nearly clean devices does not let through: it
 *      waited for ever, spinning).
 *   6. The flushers beside a dead device (no periodic pass,
 *      dirty_writeback_centisecs=0): the dead device's flusher, kicked by
 *      every throttled writer of a healthy one before, sends its file
 *      round at most twice a pass (it went round it up to 1,001 times);
 *      the healthy device's flusher, with nothing dirty and the cache
 *      over the background threshold with the dead device's pages,
 *      waits (it could spin for ever holding its work lock on a retry
 *      time left in the past, and a sync of the device waited on it).
 *   7. A group's limit filled by a dead device's pages: a writer to a
 *      healthy device in the same group writes on (it was held until the
 *      dead device came back: for ever here).
 *   8. Failed pages truncated away leave nothing at risk: the device
 *      reports no failing time, and a write that fails once more, after
 *      the device's retry_timeout went by idle (the clock set back),
 *      starts the clock anew: the device is not dead at that first
 *      failure (it was: callers got its error at once, with pages at risk
 *      for a moment, and close did not retry them).
 * No wall-clock assertion: a watchdog (alarm) only bounds a hang.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#include <signal.h>

#define KiB (1u << 10)
#define MiB (1u << 20)
#define CHUNK (64 * KiB)
#define STREAM (64 * MiB)      /* per writer: far beyond the dirty limit */
#define WRITERS 2
/* A hang fails the test (SIGALRM) instead of running until the runner's
 * timeout: each case needs about its retry_timeout. */
#define WATCHDOG_S 120

static char chunk[CHUNK];

struct writer {
	wbc_dev *dev;
	char name[16];
	uint64_t accepted;     /* bytes wbc_pwrite took */
	ssize_t err;           /* what ended the stream */
	ssize_t again;         /* the call after it */
	uint64_t accepted_again;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	wbc_file *f;
	CHECK_EQ(wbc_file_open(w->dev, w->name, WBC_O_CREAT, &f), 0);
	ssize_t r = 0;
	while (w->accepted < STREAM) {
		r = wbc_pwrite(f, chunk, CHUNK, w->accepted);
		if (r < 0)
			break;
		w->accepted += (uint64_t)r;       /* a short count: the error is next */
	}
	w->err = r;
	/* the next call checks before it dirties anything */
	w->again = wbc_pwrite(f, chunk, CHUNK, w->accepted);
	w->accepted_again = w->again > 0 ? (uint64_t)w->again : 0;
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "retry_bound: watchdog: a caller hung\n";
	if (write(2, msg, sizeof(msg) - 1)) { /* exiting anyway */ }
	_exit(1);
}

static wbc_cache *open_cache(uint64_t mem, uint32_t dirty_ratio)
{
	struct wbc_config cfg = t_config(mem, 4096);
	cfg.dirty_ratio = dirty_ratio;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG_S);
	t_fill(chunk, CHUNK, 16);
	struct wbc_stats st;
	struct wbc_dev_stats ds;
	wbc_dev *dev;
	wbc_file *f;

	/* 1. writers */
	wbc_cache *c = open_cache(16 * MiB, 20);
	CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=300ms", &dev), 0);
	struct writer w[WRITERS];
	pthread_t th[WRITERS];
	for (int i = 0; i < WRITERS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].dev = dev;
		snprintf(w[i].name, sizeof(w[i].name), "w%d", i);
		CHECK_EQ(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	uint64_t accepted = 0;
	for (int i = 0; i < WRITERS; i++) {
		pthread_join(th[i], NULL);
		printf("writer %d: %llu KiB accepted, then %zd, then %zd\n", i,
		       (unsigned long long)w[i].accepted / KiB, w[i].err, w[i].again);
		CHECK_EQ(w[i].err, -EIO);
		CHECK_EQ(w[i].again, -EIO);
		CHECK(w[i].accepted < STREAM);
		accepted += w[i].accepted;
	}
	wbc_stats(c, &st);
	wbc_dev_stats(dev, &ds);
	printf("dirty %llu KiB, at risk %llu KiB, limit %llu KiB, lost %llu\n",
	       (unsigned long long)(st.dirty_bytes + st.writeback_bytes) / KiB,
	       (unsigned long long)st.at_risk_bytes / KiB, (unsigned long long)st.limit_bytes / KiB,
	       (unsigned long long)st.lost_bytes);
	/* everything accepted is still in the cache: dirty, at risk */
	CHECK_EQ(st.written_back_bytes, 0);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes, accepted);
	CHECK(st.at_risk_bytes > 0 && st.at_risk_bytes <= accepted);
	CHECK_EQ(ds.at_risk_bytes, st.at_risk_bytes);
	CHECK_EQ(ds.dead_error, -EIO);
	CHECK(ds.failing_ns > 0);
	/* fsync from another handle: the error, at once */
	CHECK_EQ(wbc_file_open(dev, "w0", 0, &f), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);
	/* the store recovers: fsync writes the pages (its first success
	 * reports the error it had not seen yet) and writers are let in */
	model_set_faults(dev, 0, 0, 0);
	int e, tries = 0;
	while ((e = wbc_fsync(f)) && tries++ < 3)
		;
	CHECK_EQ(e, 0);
	wbc_file *g;
	CHECK_EQ(wbc_file_open(dev, "w1", 0, &g), 0);
	CHECK_EQ(wbc_fsync(g), 0);                /* opened after the errors */
	wbc_dev_stats(dev, &ds);
	CHECK_EQ(ds.dead_error, 0);
	CHECK_EQ(ds.at_risk_bytes, 0);
	for (uint64_t off = 0; off < 16 * MiB; off += CHUNK)
		CHECK_EQ(wbc_pwrite(f, chunk, CHUNK, off), CHUNK);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_cache_close_stats(c, &st), -EIO);   /* the device's error, once */
	CHECK_EQ(st.lost_bytes, 0);

	/* 2. a page allocation that only dead pages hold up */
	c = open_cache(32 * 4096, 100);
	CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=200ms", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "p", WBC_O_CREAT, &f), 0);
	uint64_t off = 0;
	ssize_t r;
	while ((r = wbc_pwrite(f, chunk, CHUNK, off)) > 0)
		off += (uint64_t)r;
	CHECK_EQ(r, -EIO);
	wbc_stats(c, &st);
	printf("page allocation: %llu KiB accepted, %llu page waits, at risk %llu KiB\n",
	       (unsigned long long)off / KiB, (unsigned long long)st.page_waits,
	       (unsigned long long)st.at_risk_bytes / KiB);
	CHECK(st.page_waits > 0);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes, off);
	CHECK(st.at_risk_bytes > 0);
	CHECK_EQ(st.lost_bytes, 0);

	/* 3. close of the dead device */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close_stats(c, &st), -EIO);
	printf("close of a dead device: %llu KiB lost\n", (unsigned long long)st.lost_bytes / KiB);
	CHECK_EQ(st.lost_bytes, off);

	/* 4. close through a failure that ends */
	c = open_cache(16 * MiB, 20);
	CHECK_EQ(wbc_dev_add(c, "model:errn=2,retry_timeout=60", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "t", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, chunk, CHUNK, 0), CHUNK);
	CHECK_EQ(wbc_fsync(f), -EIO);             /* the first failed write */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close_stats(c, &st), -EIO);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(st.written_back_bytes, CHUNK);

	/* 5. writers to a healthy device beside a dead one at the limit */
	const char *healthy[] = { "model:bw=1G,strict_limit=1", "model:bw=1G" };
	for (size_t i = 0; i < sizeof(healthy) / sizeof(healthy[0]); i++) {
		wbc_dev *b;
		c = open_cache(16 * MiB, 20);
		/* a second for its writer to reach the limit before it fails */
		CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=1", &dev), 0);
		CHECK_EQ(wbc_dev_add(c, healthy[i], &b), 0);
		CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
		for (off = 0; (r = wbc_pwrite(f, chunk, CHUNK, off)) > 0;)
			off += (uint64_t)r;
		CHECK_EQ(r, -EIO);
		wbc_stats(c, &st);
		printf("%s beside a dead device (%llu of %llu KiB dirty limit): ", healthy[i],
		       (unsigned long long)(st.dirty_bytes + st.writeback_bytes) / KiB,
		       (unsigned long long)st.limit_bytes / KiB);
		CHECK(st.dirty_bytes + st.writeback_bytes >= st.limit_bytes);
		t_stream(b, NULL, "b", STREAM, 5, 1);    /* every write and the fsync succeed */
		wbc_dev_stats(b, &ds);
		printf("%llu MiB written back\n", (unsigned long long)ds.written_back_bytes / MiB);
		CHECK(ds.written_back_bytes >= STREAM);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), -EIO);
	}
	/* 6. the flushers beside a dead device */
	{
		struct wbc_config cfg = t_config(16 * MiB, 4096);
		cfg.dirty_writeback_centisecs = 0;
		wbc_dev *b;
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=1", &dev), 0);
		CHECK_EQ(wbc_dev_add(c, "model:bw=1G", &b), 0);
		CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
		for (off = 0; (r = wbc_pwrite(f, chunk, CHUNK, off)) > 0;)
			off += (uint64_t)r;
		CHECK_EQ(r, -EIO);
		unsigned long long p0 = atomic_load(&dev->wb_passes);
		unsigned long long k0 = atomic_load(&dev->wb_backoff_skips);
		t_stream(b, NULL, "b", STREAM, 5, 1);
		unsigned long long passes = atomic_load(&dev->wb_passes) - p0;
		unsigned long long skips = atomic_load(&dev->wb_backoff_skips) - k0;
		printf("beside a dead device: its flusher: %llu passes, %llu files put back\n",
		       passes, skips);
		CHECK(skips <= 2 * passes);
		for (int i = 0; i < 3; i++) {
			CHECK_EQ(wbc_dev_sync(b), 0);
			unsigned long long t0 = atomic_load(&b->flusher_turns);
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
			unsigned long long turns = atomic_load(&b->flusher_turns) - t0;
			printf("the healthy device's flusher, idle: %llu turns in 100 ms\n", turns);
			CHECK(turns < 100);   /* spinning: millions */
		}
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), -EIO);
	}
	/* 7. a group filled by a dead device's pages */
	{
		wbc_dev *b;
		wbc_group *grp;
		wbc_file *h;
		c = open_cache(32 * MiB, 20);
		CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=300ms", &dev), 0);
		CHECK_EQ(wbc_dev_add(c, "model:bw=1G", &b), 0);
		CHECK_EQ(wbc_group_create(c, 2 * MiB, 0, &grp), 0);
		CHECK_EQ(wbc_file_open_group(dev, "a", WBC_O_CREAT, grp, &f), 0);
		for (off = 0; (r = wbc_pwrite(f, chunk, CHUNK, off)) > 0;)
			off += (uint64_t)r;
		CHECK_EQ(r, -EIO);
		struct wbc_group_stats gs;
		CHECK_EQ(wbc_group_stats(grp, &gs), 0);
		printf("a group of %llu KiB: %llu KiB of the dead device's; ", (unsigned long long)gs.limit_bytes / KiB,
		       (unsigned long long)(gs.dirty_bytes + gs.writeback_bytes) / KiB);
		CHECK(gs.dirty_bytes + gs.writeback_bytes >= gs.limit_bytes);
		alarm(30);
		CHECK_EQ(wbc_file_open_group(b, "b", WBC_O_CREAT, grp, &h), 0);
		for (off = 0; off < 4 * MiB; off += CHUNK)
			CHECK_EQ(wbc_pwrite(h, chunk, CHUNK, off), CHUNK);
		CHECK_EQ(wbc_fsync(h), 0);
		alarm(WATCHDOG_S);
		printf("the healthy device's writer in it wrote 4 MiB\n");
		CHECK_EQ(wbc_file_close(h), 0);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), -EIO);
	}
	/* 8. the clock of failed pages truncated away */
	{
		c = open_cache(16 * MiB, 20);
		CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=60", &dev), 0);
		CHECK_EQ(wbc_file_open(dev, "t", WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, chunk, CHUNK, 0), CHUNK);
		CHECK_EQ(wbc_fsync(f), -EIO);
		CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
		CHECK_EQ(ds.at_risk_bytes, CHUNK);
		CHECK_EQ(wbc_truncate(f, 0), 0);
		CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
		CHECK_EQ(ds.at_risk_bytes, 0);
		/* the device idle past its retry_timeout since that failure */
		uint64_t now = wbc_now_ns(), back = 61ull * 1000 * 1000 * 1000;
		if (now > back) {
			atomic_store(&dev->fail_since, now - back);
			CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
			CHECK_EQ(ds.failing_ns, 0);      /* nothing at risk: not failing */
			CHECK_EQ(ds.dead_error, 0);
			CHECK_EQ(wbc_pwrite(f, chunk, CHUNK, 0), CHUNK);
			CHECK_EQ(wbc_fsync(f), -EIO);
			CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
			printf("a failure after an idle minute: %llu KiB at risk, failing %.3f s, "
			       "dead error %d\n", (unsigned long long)ds.at_risk_bytes / KiB,
			       (double)ds.failing_ns / 1e9, ds.dead_error);
			CHECK_EQ(ds.at_risk_bytes, CHUNK);
			CHECK(ds.failing_ns < back - 1000ull * 1000 * 1000);
			CHECK_EQ(ds.dead_error, 0);
			CHECK_EQ(wbc_truncate(f, 0), 0);
		} else {
			printf("8: not checked (the monotonic clock is under 61 s)\n");
		}
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), -EIO);
	}
	printf("retry_bound: ok\n");
	return 0;
}
