/*
 * A resize the backend refuses leaves the file as it was: the backend is
 * resized first and the cache follows only once it has been.
 *   1. a refused shrink to 0: -EIO, the size and every byte stay (cache
 *      and backend); once the backend takes resizes, a shrink to 0 and an
 *      extension back read zeros;
 *   2. a refused shrink with dirty data past the new size: the data stays
 *      (not dropped by a truncate that failed), the tail of the page the
 *      size would have cut is not zeroed, and fsync writes it all;
 *   3. a refused O_TRUNC open fails and leaves the file whole; so does a
 *      close and reopen after a refused shrink (nothing pending to lose);
 *   4. a refused extension keeps the old size;
 *   5. the flusher writes a file whose shrink was refused, like any other.
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

static void set_fail(bool on)
{
	pthread_mutex_lock(&lk);
	fail_resize = on;
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
 * backend refuses, which changes nothing. */
static void refused_shrink(wbc_file *f, size_t len, uint64_t to)
{
	set_fail(false);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	memset(buf, 0xAA, len);
	CHECK_EQ(wbc_pwrite(f, buf, len, 0), (ssize_t)len);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(store_is(0, len, 0xAA));
	set_fail(true);
	CHECK_EQ(wbc_truncate(f, to), -EIO);
	CHECK_EQ(wbc_file_size(f), (int64_t)len);
	CHECK_EQ(backend_size(), len);
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

	/* 1. a refused shrink to 0 */
	refused_shrink(f, 1 * MiB, 0);
	CHECK_EQ(wbc_pread(f, rb, 2 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB, 0xAA));
	CHECK(store_is(0, 1 * MiB, 0xAA));
	set_fail(false);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	CHECK_EQ(wbc_truncate(f, 1 * MiB), 0);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB, 0));
	CHECK(store_is(0, 1 * MiB, 0));
	printf("1. refused shrink to 0: size and bytes kept; then done: zeros when extended\n");

	/* 2. dirty data past the refused size */
	const uint64_t cut = 4096 + 100;
	refused_shrink(f, 1 * MiB, 0);
	memset(buf, 0xBB, 4096);
	CHECK_EQ(wbc_pwrite(f, buf, 4096, 512 * KiB), 4096);
	CHECK_EQ(wbc_truncate(f, cut), -EIO);
	CHECK_EQ(wbc_file_size(f), 1 * MiB);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 512 * KiB, 0xAA) && all(rb + 512 * KiB, 4096, 0xBB) &&
	      all(rb + 512 * KiB + 4096, 512 * KiB - 4096, 0xAA));
	set_fail(false);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(store_is(0, 512 * KiB, 0xAA) && store_is(512 * KiB, 512 * KiB + 4096, 0xBB) &&
	      store_is(512 * KiB + 4096, 1 * MiB, 0xAA));
	printf("2. refused shrink past dirty data: kept, tail not zeroed, written by fsync\n");

	/* 3. O_TRUNC refused; a close and reopen after a refused shrink */
	refused_shrink(f, 1 * MiB, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_TRUNC, &f), -EIO);
	CHECK_EQ(wbc_file_open(dev, "f", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 1 * MiB);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB, 0xAA));
	printf("3. refused O_TRUNC open: -EIO, the file whole after a reopen\n");

	/* 4. a refused extension */
	CHECK_EQ(wbc_truncate(f, 2 * MiB), -EIO);
	CHECK_EQ(wbc_file_size(f), 1 * MiB);
	CHECK_EQ(wbc_fsync(f), 0);
	printf("4. refused extension: the old size\n");

	/* 5. the flusher alone */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	f = open_cache(true);
	refused_shrink(f, 1 * MiB, 0);
	memset(buf, 0xCC, 8 * KiB);
	CHECK_EQ(wbc_pwrite(f, buf, 8 * KiB, 3 * MiB), (ssize_t)(8 * KiB));
	CHECK(T_WAIT_UNTIL(backend_size() == 3 * MiB + 8 * KiB &&
			   store_is(3 * MiB, 3 * MiB + 8 * KiB, 0xCC)));
	CHECK(store_is(0, 1 * MiB, 0xAA) && store_is(1 * MiB, 3 * MiB, 0));
	printf("5. the flusher writes the file after a refused shrink\n");
	set_fail(false);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("truncate_fail: ok\n");
	return 0;
}
