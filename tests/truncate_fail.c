/*
 * A shrink the backend refuses (its resize fails) must not let the bytes
 * it was to cut come back.  The truncate returns the error; the file is
 * the new size at once, and the backend still holds the old bytes past
 * it until a later cut succeeds.  Before that cut:
 *   1. a truncate that extends the file again reads zeros there (the
 *      backend is cut first, then extended), in the cache and in the
 *      backend;
 *   2. a write far past the cut, while the backend still refuses: reads
 *      see zeros up to it, not the old bytes; fsync fails (the cut, which
 *      must come before the write, is refused) and keeps the data dirty;
 *      once the backend takes resizes again fsync succeeds, and the
 *      backend holds zeros up to the write;
 *   3. the same through the flusher alone: while the backend refuses, no
 *      write past the cut reaches it (it would be cut after); once it
 *      takes resizes the flusher cuts, then writes, and the backend ends
 *      as the file is; the refused cuts are the file's error, reported
 *      once;
 *   4. a direct open, which writes back first: it fails while the cut is
 *      refused, then succeeds, and direct reads see zeros past the cut.
 * The backend here (the public interface) keeps one file in memory.
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define CAP (8 * MiB)

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static unsigned char store[CAP];
static uint64_t store_size;
static bool fail_resize;
static uint64_t refused, cut_at = UINT64_MAX;   /* a refused shrink's target */
static unsigned long writes_past_cut;           /* while refused: must stay 0 */
static int dummy;

static void b_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = 256 * KiB;
	c->queue_depth = 4;
}

static int b_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)name; (void)flags;
	*file = &dummy;
	pthread_mutex_lock(&lk);
	*size = store_size;
	pthread_mutex_unlock(&lk);
	return 0;
}

static void b_close(void *ctx, void *file) { (void)ctx; (void)file; }

static int b_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		CHECK(io->off + io->len <= CAP);
		pthread_mutex_lock(&lk);
		if (io->op == WBC_IO_WRITE && fail_resize && io->off + io->len > cut_at)
			writes_past_cut++;
		if (io->op == WBC_IO_WRITE && io->off > store_size)   /* a hole: zeros */
			memset(store + store_size, 0, io->off - store_size);
		uint64_t at = io->off;
		size_t done = 0;
		for (int k = 0; k < io->iovcnt; k++) {
			size_t len = io->iov[k].iov_len;
			if (io->op == WBC_IO_WRITE) {
				memcpy(store + at, io->iov[k].iov_base, len);
				done += len;
			} else {
				size_t v = at >= store_size ? 0 : (size_t)(store_size - at < len ? store_size - at : len);
				memcpy(io->iov[k].iov_base, store + at, v);
				done += v;
				if (v < len)
					break;
			}
			at += len;
		}
		if (io->op == WBC_IO_WRITE && at > store_size)
			store_size = at;
		pthread_mutex_unlock(&lk);
		wbc_io_complete(io, (ssize_t)done);
	}
	return 0;
}

static int b_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file;
	if (size > CAP)
		return -EFBIG;
	pthread_mutex_lock(&lk);
	int err = 0;
	if (fail_resize) {
		refused++;
		err = -EIO;
	} else {
		if (size > store_size)
			memset(store + store_size, 0, size - store_size);
		store_size = size;
	}
	pthread_mutex_unlock(&lk);
	return err;
}

static void b_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops ops = {
	.size = sizeof(ops), .name = "refuses-shrinks", .caps = b_caps, .open = b_open,
	.close = b_close, .submit = b_submit, .resize = b_resize, .destroy = b_destroy,
};

static void set_fail(bool on, uint64_t cut)
{
	pthread_mutex_lock(&lk);
	fail_resize = on;
	cut_at = cut;
	pthread_mutex_unlock(&lk);
}

/* the backend holds @c at [from, to) */
static bool store_is(uint64_t from, uint64_t to, int c)
{
	pthread_mutex_lock(&lk);
	bool ok = to <= store_size;
	for (uint64_t i = from; ok && i < to; i++)
		ok = store[i] == (unsigned char)c;
	pthread_mutex_unlock(&lk);
	return ok;
}

static uint64_t backend_size(void)
{
	pthread_mutex_lock(&lk);
	uint64_t s = store_size;
	pthread_mutex_unlock(&lk);
	return s;
}

static bool all(const unsigned char *b, size_t n, int c)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)c)
			return false;
	return true;
}

static unsigned char buf[4 * MiB], rb[4 * MiB];

/* A file of @len bytes of 0xAA, written back; then a shrink to @to that the
 * backend refuses. */
static void refused_shrink(wbc_file *f, size_t len, uint64_t to)
{
	set_fail(false, UINT64_MAX);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	memset(buf, 0xAA, len);
	CHECK_EQ(wbc_pwrite(f, buf, len, 0), (ssize_t)len);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(store_is(0, len, 0xAA));
	set_fail(true, to);
	CHECK_EQ(wbc_truncate(f, to), -EIO);
	CHECK_EQ(wbc_file_size(f), (int64_t)to);   /* the file is the new size */
	CHECK_EQ(backend_size(), len);              /* the backend is not */
}

static wbc_cache *c;
static wbc_dev *dev;

/* a cache on the backend above; @periodic: the flusher's periodic pass
 * every 10 ms, writing what was dirtied 10 ms before */
static wbc_file *open_cache(bool periodic)
{
	struct wbc_config cfg = t_config(64 * MiB, 4096);
	cfg.dirty_writeback_centisecs = periodic ? 1 : 0;
	cfg.dirty_expire_centisecs = 1;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_backend(c, &ops, NULL, "", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT, &f), 0);
	return f;
}

int main(void)
{
	wbc_file *f = open_cache(false);

	/* 1. a refused shrink to 0, then an extension back to 1 MiB */
	refused_shrink(f, 1 * MiB, 0);
	set_fail(false, UINT64_MAX);
	CHECK_EQ(wbc_truncate(f, 1 * MiB), 0);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB, 0));
	CHECK_EQ(backend_size(), 1 * MiB);
	CHECK(store_is(0, 1 * MiB, 0));
	printf("1. refused shrink to 0, truncate back to 1 MiB: zeros in the cache and the backend\n");

	/* 2. a write past the cut while the backend refuses */
	refused_shrink(f, 1 * MiB, 0);
	CHECK_EQ(wbc_pwrite(f, "Z", 1, 1 * MiB - 1), 1);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB - 1, 0) && rb[1 * MiB - 1] == 'Z');
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(rb[1 * MiB - 1] == 'Z');
	pthread_mutex_lock(&lk);
	CHECK_EQ(writes_past_cut, 0);
	pthread_mutex_unlock(&lk);
	set_fail(false, UINT64_MAX);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(backend_size(), 1 * MiB);
	CHECK(store_is(0, 1 * MiB - 1, 0) && store_is(1 * MiB - 1, 1 * MiB, 'Z'));
	printf("2. write past a refused cut: zeros read; fsync -EIO until the backend cuts, "
	       "then the backend holds zeros up to it\n");

	/* 3. the flusher alone: shrink to an offset inside a page, data 3 MiB on */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	f = open_cache(true);
	const uint64_t cut = 10 * 4096 + 100, far = 3 * MiB;
	refused_shrink(f, 2 * MiB, cut);
	memset(buf, 0xBB, 8 * KiB);
	CHECK_EQ(wbc_pwrite(f, buf, 8 * KiB, far), (ssize_t)(8 * KiB));
	CHECK_EQ(wbc_pwrite(f, buf, 10, cut), 10);   /* in the page the cut falls in */
	pthread_mutex_lock(&lk);
	uint64_t r0 = refused;
	pthread_mutex_unlock(&lk);
	/* the flusher tries the cut (refused) and writes nothing past it */
	CHECK(T_WAIT_UNTIL(({ pthread_mutex_lock(&lk); bool t = refused > r0 + 1;
			      pthread_mutex_unlock(&lk); t; })));
	pthread_mutex_lock(&lk);
	unsigned long past = writes_past_cut;
	uint64_t tries = refused - r0;
	pthread_mutex_unlock(&lk);
	CHECK_EQ(past, 0);
	CHECK(store_is(0, 2 * MiB, 0xAA));
	set_fail(false, UINT64_MAX);
	CHECK(T_WAIT_UNTIL(backend_size() == far + 8 * KiB && store_is(far, far + 8 * KiB, 0xBB)));
	CHECK(store_is(0, cut, 0xAA) && store_is(cut, cut + 10, 0xBB) &&
	      store_is(cut + 10, far, 0));
	CHECK_EQ(wbc_pread(f, rb, 4 * MiB, 0), (ssize_t)(far + 8 * KiB));
	CHECK(all(rb, cut, 0xAA) && all(rb + cut, 10, 0xBB) && all(rb + cut + 10, far - cut - 10, 0));
	CHECK_EQ(wbc_file_check_error(f), -EIO);   /* the refused cuts: reported once */
	CHECK_EQ(wbc_file_check_error(f), 0);
	printf("3. the flusher: %llu refused cuts, no write past the cut meanwhile; then cut "
	       "and written, zeros between\n", (unsigned long long)tries);

	/* 4. a direct open writes back first: refused, then done */
	refused_shrink(f, 1 * MiB, 4096);
	CHECK_EQ(wbc_pwrite(f, "Y", 1, 512 * KiB), 1);   /* held back by the cut */
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_file *d;
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_DIRECT, &d), -EIO);
	set_fail(false, UINT64_MAX);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_DIRECT, &d), 0);
	CHECK_EQ(wbc_pread(d, rb, 1 * MiB, 0), (ssize_t)(512 * KiB + 1));
	CHECK(all(rb, 4096, 0xAA) && all(rb + 4096, 512 * KiB - 4096, 0) && rb[512 * KiB] == 'Y');
	CHECK(store_is(4096, 512 * KiB, 0));
	CHECK_EQ(wbc_file_close(d), 0);
	printf("4. direct open: -EIO while the cut is refused, then zeros past it\n");

	CHECK_EQ(wbc_cache_close(c), 0);
	printf("truncate_fail: ok\n");
	return 0;
}
