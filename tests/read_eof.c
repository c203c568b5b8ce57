/*
 * A read at or past the end of a file returns 0 and claims no page: it
 * reads nothing, so it needs none.
 *   1. In a cache whose every page is dirty on a dead device (model
 *      errp=1, retry_timeout=200ms: every write fails, the writer got
 *      -EIO), a read at the file's end and one far past it return 0 (a
 *      page was allocated for them first: both failed with -EIO, the
 *      allocation's "only dead devices hold the pages"), and the bytes
 *      before the end still read.
 *   2. On a healthy device, reads past the end of an empty file and of a
 *      one-byte file add no page to the cache (each left one behind, not
 *      up to date, and its index nodes: a read at 2^40 made nine).
 * No wall-clock assertion: a watchdog (alarm) only bounds a hang.
 */
#include "testutil.h"

#include <signal.h>

#define CHUNK (64u << 10)
#define WATCHDOG_S 120

static char chunk[CHUNK];

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "read_eof: watchdog: a caller hung\n";
	if (write(2, msg, sizeof(msg) - 1)) { /* exiting anyway */ }
	_exit(1);
}

static uint64_t cached(wbc_cache *c)
{
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	return st.cached_bytes;
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG_S);
	char b[64];

	/* 1. every page dirty on a dead device */
	struct wbc_config cfg = t_config(32 * 4096, 4096);
	cfg.dirty_ratio = 100;
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:errp=1,retry_timeout=200ms", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT, &f), 0);
	memset(chunk, 'x', CHUNK);
	uint64_t off = 0;
	ssize_t r;
	while ((r = wbc_pwrite(f, chunk, CHUNK, off)) > 0)
		off += (uint64_t)r;
	CHECK_EQ(r, -EIO);
	CHECK(off > 0);
	CHECK_EQ(wbc_file_size(f), (int64_t)off);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), off), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), off + 4096 * 3 + 5), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 1ull << 40), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), off - 10), 10);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(b[i], 'x');
	printf("1. dead device, every page dirty: reads at and past the end (%llu KiB) "
	       "return 0\n", (unsigned long long)off >> 10);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), -EIO);

	/* 2. reads past the end take no page */
	c = t_quiet_cache(1 << 20);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_CREAT, &f), 0);
	uint64_t before = cached(c);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 0), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 12345), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 1ull << 40), 0);
	CHECK_EQ(cached(c), before);
	CHECK_EQ(wbc_pwrite(f, "y", 1, 0), 1);
	before = cached(c);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 1), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 4096), 0);
	CHECK_EQ(wbc_pread(f, b, sizeof(b), 0), 1);
	CHECK_EQ(b[0], 'y');
	CHECK_EQ(cached(c), before);
	printf("2. reads past the end add no page to the cache\n");
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
