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
 * The backend here (the public interface, tests/store_backend.h) keeps
 * one file in memory.
 */
#include "store_backend.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

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
	sb_set(&sb_fail_resize, false);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	memset(buf, 0xAA, len);
	CHECK_EQ(wbc_pwrite(f, buf, len, 0), (ssize_t)len);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(sb_is(0, len, 0xAA));
	sb_set(&sb_fail_resize, true);
	CHECK_EQ(wbc_truncate(f, to), -EIO);
	CHECK_EQ(wbc_file_size(f), (int64_t)len);
	CHECK_EQ(sb_backend_size(), len);
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
	CHECK_EQ(wbc_dev_add_backend(c, &sb_ops, NULL, "", &dev), 0);
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
	CHECK(sb_is(0, 1 * MiB, 0xAA));
	sb_set(&sb_fail_resize, false);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	CHECK_EQ(wbc_truncate(f, 1 * MiB), 0);
	CHECK_EQ(wbc_pread(f, rb, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK(all(rb, 1 * MiB, 0));
	CHECK(sb_is(0, 1 * MiB, 0));
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
	sb_set(&sb_fail_resize, false);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(sb_is(0, 512 * KiB, 0xAA) && sb_is(512 * KiB, 512 * KiB + 4096, 0xBB) &&
	      sb_is(512 * KiB + 4096, 1 * MiB, 0xAA));
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
	CHECK(T_WAIT_UNTIL(sb_backend_size() == 3 * MiB + 8 * KiB &&
			   sb_is(3 * MiB, 3 * MiB + 8 * KiB, 0xCC)));
	CHECK(sb_is(0, 1 * MiB, 0xAA) && sb_is(1 * MiB, 3 * MiB, 0));
	printf("5. the flusher writes the file after a refused shrink\n");
	sb_set(&sb_fail_resize, false);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("truncate_fail: ok\n");
	return 0;
}
