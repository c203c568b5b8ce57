/*
 * wbc_cache_close with a device still busy: no device is freed while
 * another runs (src/core/cache.c).  Devices in add order: "mem", B (a
 * mem device's backend behind a wrapper whose writes fail with EIO while
 * `failing`, and whose close of file "c" ends the failure and lasts until
 * a write went through),
 * A ("mem", added last, stopped first).  B holds at-risk data of "d" and
 * an open handle on "c" at the close: while B's backend closes "c", B's
 * flusher retries d's writes, they succeed, and the bandwidth update walks
 * the cache's device list.  A was freed by then, and that walk read it (a
 * use after free: AddressSanitizer reports it; make check SAN=address).
 * Now every device is stopped before any is freed; the test checks that
 * the close ends with d's data written and nothing lost.
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>
#include <stdatomic.h>

static const struct wbc_backend_ops *mops;
static atomic_bool failing, let_through;
static void *file_c;

static int w_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	int r = mops->open(ctx, name, flags, file, size);
	if (!r && !strcmp(name, "c"))
		file_c = *file;
	return r;
}

static void w_close(void *ctx, void *file)
{
	if (file == file_c) {
		atomic_store(&failing, false);
		/* B's flusher writes meanwhile: until a write went through
		 * (its retry may be seconds off, its backoff grown; 60 s at
		 * most: the close's outcome is checked either way) */
		for (int i = 0; i < 6000 && !atomic_load(&let_through); i++)
			usleep(10 * 1000);
		usleep(100 * 1000);
	}
	mops->close(ctx, file);
}

static int w_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	/* slow (busy time: the bandwidth update measures only a device that
	 * was busy for much of its interval) */
	usleep(100 * 1000);
	if (!atomic_load(&failing)) {
		int r = mops->submit(ctx, ios, n, queued);
		atomic_store(&let_through, true);
		return r;
	}
	for (unsigned i = 0; i < n; i++)
		wbc_io_complete(ios[i], -EIO);
	return 0;
}

static void w_destroy(void *ctx) { (void)ctx; }   /* the mem device's, freed by it */

int main(void)
{
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = 1;
	cfg.dirty_expire_centisecs = 1;
	wbc_cache *c;
	wbc_dev *d0, *inner, *b, *a;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &d0), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &inner), 0);
	void *mctx = wbc_dev_backend(inner, &mops);
	CHECK(mctx && mops);
	static struct wbc_backend_ops wrap;
	wrap = *mops;
	wrap.open = w_open;
	wrap.close = w_close;
	wrap.submit = w_submit;
	wrap.destroy = w_destroy;
	CHECK_EQ(wbc_dev_add_backend(c, &wrap, mctx, "retry_timeout=0.3", &b), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &a), 0);
	(void)a;
	(void)d0;

	wbc_file *fd, *fc;
	char buf[8192];
	t_fill(buf, sizeof(buf), 3);
	/* the bandwidth update walks the device list once each 3 s period
	 * (the shares' aging): let one period pass first, so that the update
	 * of B's first good write in the close walks it (the walk is what
	 * read the freed device; the test passes or fails on the close's
	 * outcome either way, and under AddressSanitizer on the walk) */
	usleep(3100 * 1000);
	atomic_store(&failing, true);
	CHECK_EQ(wbc_file_open(b, "d", WBC_O_CREAT, &fd), 0);
	CHECK_EQ(wbc_pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_open(b, "c", WBC_O_CREAT, &fc), 0);
	/* its writes fail and are retried: at risk at the close */
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), st.at_risk_bytes > 0)));
	/* the handles stay open: the close closes them (c last, slowly) */
	int r = wbc_cache_close_stats(c, &st);
	printf("close %d (%s), %llu bytes lost\n", r, wbc_strerror(r),
	       (unsigned long long)st.lost_bytes);
	CHECK_EQ(st.lost_bytes, 0);
	printf("close_stop: ok\n");
	return 0;
}
