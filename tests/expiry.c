/*
 * Periodic expiry: a page dirtied and left alone (far below the background
 * threshold, no fsync) reaches the backend once it is older than
 * dirty_expire_centisecs.  The control: with periodic writeback off
 * (dirty_writeback_centisecs = 0) nothing else writes it, so its arrival is
 * due to expiry.  The test polls the backing file (up to 60 s) instead of
 * assuming any timing.
 */
#include "testutil.h"

#include <fcntl.h>
#include <time.h>

static int backend_has(const char *path, const char *want, size_t len)
{
	char buf[64];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = pread(fd, buf, len, 0);
	close(fd);
	return n == (ssize_t)len && !memcmp(buf, want, len);
}

static void run(const char *dir, unsigned writeback_cs, int expect_written)
{
	char spec[600], path[700];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	snprintf(path, sizeof(path), "%s/x%u", dir, writeback_cs);
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_expire_centisecs = 20;            /* 200 ms */
	cfg.dirty_writeback_centisecs = writeback_cs;
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, path + strlen(dir) + 1, WBC_O_CREAT, &f), 0);
	const char msg[] = "expired data";
	CHECK_EQ(wbc_pwrite(f, msg, sizeof(msg), 0), sizeof(msg));
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK(st.dirty_bytes > 0 && st.dirty_bytes < st.bg_thresh_bytes);
	int seen = 0;
	/* written: poll until it shows up; not written: watch for 1 s */
	int polls = expect_written ? 6000 : 100;
	for (int i = 0; i < polls && !seen; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		seen = backend_has(path, msg, sizeof(msg));
	}
	CHECK_EQ(seen, expect_written);
	if (expect_written) {
		/* and the cache knows the page is clean */
		for (int i = 0; i < 6000; i++) {
			wbc_stats(c, &st);
			if (!st.dirty_bytes && !st.writeback_bytes)
				break;
			struct timespec ts = { 0, 10 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		CHECK_EQ(st.dirty_bytes, 0);
		CHECK(st.written_back_bytes >= 4096);
	}
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK(backend_has(path, msg, sizeof(msg)));   /* close writes it anyway */
}

int main(void)
{
	char *dir = t_mkdtemp();
	run(dir, 0, 0);     /* control: periodic writeback off */
	run(dir, 5, 1);     /* every 50 ms, expire after 200 ms */
	t_rmdir(dir);
	printf("expiry: ok\n");
	return 0;
}
