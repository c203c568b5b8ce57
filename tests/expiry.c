/*
 * Periodic expiry: a page dirtied and left alone (far below the background
 * threshold, no fsync) reaches the backend once it is older than
 * dirty_expire_centisecs.  The control: with periodic writeback off
 * (dirty_writeback_centisecs = 0) nothing else writes it, so its arrival is
 * due to expiry.  The test polls the backing file (up to 60 s) instead of
 * assuming any timing.
 *
 * Then the backend's padding: a periodic pass writes a 5-byte file's page
 * whole, and the engine trims the backend's copy back to 5 bytes at the
 * next pass after the write completed (the completion listed the file
 * anew, dirtied then, and the trim waited a whole dirty_expire more: 2 s
 * here, a minute at the defaults).  Its bound is just under the expiry,
 * which that path could never beat (the file was listed dirtied at the
 * completion, before the write is seen done here); the fix trims it at
 * the next pass, 0.1 s.  A file written to again before that pass is not written
 * early: its new bytes wait for their own expiry (a pass that took the
 * file to trim it once wrote them too, a few passes later than the
 * first write instead of dirty_expire).  On both dirty-list policies.
 */
#include "testutil.h"

#include <fcntl.h>
#include <sys/stat.h>
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

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t backend_size(const char *path)
{
	struct stat sb;
	return stat(path, &sb) ? UINT64_MAX : (uint64_t)sb.st_size;
}

static void trim(const char *dir, const char *policy)
{
	char spec[600], path[700], path2[700];
	snprintf(spec, sizeof(spec), "dir:%s%s", dir, policy);
	snprintf(path, sizeof(path), "%s/t", dir);
	snprintf(path2, sizeof(path2), "%s/a", dir);
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_expire_centisecs = 200;           /* 2 s */
	cfg.dirty_writeback_centisecs = 10;         /* every 100 ms */
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f, *g;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "t", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &g), 0);
	CHECK_EQ(wbc_pwrite(f, "hello", 5, 0), 5);
	CHECK_EQ(wbc_pwrite(g, "hello", 5, 0), 5);
	/* both written by the periodic pass that finds them expired */
	struct wbc_file_info fi, gi;
	CHECK(T_WAIT_UNTIL((wbc_file_info(f, &fi), wbc_file_info(g, &gi),
			    !fi.unwritten_bytes && !gi.unwritten_bytes)));
	double written = now_s();
	/* at once, before the next pass: @g's new bytes are younger than
	 * the expiry */
	CHECK_EQ(wbc_pwrite(g, " world", 6, 5), 6);
	CHECK(T_WAIT_UNTIL(backend_size(path) == 5));
	double trimmed = now_s() - written;
	/* the file written again waits for its expiry */
	while (now_s() - written < 1.0) {
		CHECK_EQ(wbc_file_info(g, &gi), 0);
		CHECK(gi.unwritten_bytes > 0);
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	CHECK(T_WAIT_UNTIL((wbc_file_info(g, &gi), !gi.unwritten_bytes)));
	CHECK(T_WAIT_UNTIL(backend_size(path2) == 11));
	printf("trim%s: backend copy trimmed %.2f s after its write, the file written "
	       "again %.2f s after it\n", policy, trimmed, now_s() - written);
	CHECK(trimmed < 1.9);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK(backend_has(path2, "hello world", 11));
	unlink(path);
	unlink(path2);
}

int main(void)
{
	char *dir = t_mkdtemp();
	run(dir, 0, 0);     /* control: periodic writeback off */
	run(dir, 5, 1);     /* every 50 ms, expire after 200 ms */
	trim(dir, "");
	trim(dir, ",dirty_list=list");
	t_rmdir(dir);
	printf("expiry: ok\n");
	return 0;
}
