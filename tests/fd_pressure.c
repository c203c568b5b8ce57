/*
 * An opener device that reopens (WBC_OPENER_REOPEN) keeps a bounded
 * cache of descriptors (src/backend/file.c): idle ones are closed and
 * reopened when I/O needs them.  When the rest of the process has taken
 * every other descriptor (RLIMIT_NOFILE reached), a reopen fails with
 * EMFILE; the backend then closes one of its own idle descriptors and
 * tries again, so that:
 *   - 200 files written through the cache (more than the 64 descriptors
 *     it keeps under a limit of 256) are all written back and fsync'd
 *     with no error, while the process holds every other descriptor;
 *   - with on_error=drop nothing is lost;
 *   - a file opened while no descriptor is free opens (an idle one of
 *     another file is closed for it);
 *   - the backing files hold the data.
 * Before, the writeback of every file whose descriptor had been closed
 * failed with EMFILE (fsync: "Too many open files"; under on_error=drop,
 * its pages lost) although 64 idle descriptors of the cache were open.
 */
#include "testutil.h"

#include <fcntl.h>

#define N 200
#define PAGE 4096

static int dfd;

static int opener(void *ctx, const char *name, int flags)
{
	(void)ctx;
	int fd = openat(dfd, name, flags | O_CREAT, 0644);
	return fd < 0 ? -errno : fd;
}

static void run(const char *opts)
{
	printf("  opts '%s'\n", opts);
	char *dir = t_mkdtemp();
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	struct wbc_config cfg = t_config(64u << 20, PAGE);
	wbc_cache *c;
	wbc_dev *dev;
	char msg[256] = "";
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_opener(c, dfd, opts, opener, NULL, WBC_OPENER_REOPEN, &dev, msg,
				    sizeof(msg)), 0);
	wbc_file *f[N + 1];
	char buf[PAGE];
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f[i]), 0);
		memset(buf, 'a' + i % 26, sizeof(buf));
		CHECK_EQ(wbc_pwrite(f[i], buf, sizeof(buf), 0), PAGE);
	}
	/* the rest of the process takes every descriptor left */
	int hog[1024], nhog = 0;
	while (nhog < 1024 && (hog[nhog] = dup(0)) >= 0)
		nhog++;
	CHECK(nhog < 1024);
	CHECK_EQ(errno, EMFILE);
	printf("    %d descriptors taken\n", nhog);
	/* a new file opens: a descriptor of the cache's is closed for it */
	CHECK_EQ(wbc_file_open(dev, "new", WBC_O_CREAT, &f[N]), 0);
	CHECK_EQ(wbc_pwrite(f[N], buf, 100, 0), 100);
	int r = wbc_dev_sync(dev);
	printf("    sync %d\n", r);
	CHECK_EQ(r, 0);
	int bad = 0;
	for (int i = 0; i <= N; i++)
		bad += wbc_fsync(f[i]) != 0;
	printf("    fsync failures %d\n", bad);
	CHECK_EQ(bad, 0);
	for (int i = 0; i <= N; i++)
		CHECK_EQ(wbc_file_close(f[i]), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_cache_close_stats(c, &st), 0);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(st.write_errors, 0);
	while (nhog)
		close(hog[--nhog]);
	for (int i = 0; i < N; i++) {
		char name[32], back[PAGE];
		snprintf(name, sizeof(name), "f%d", i);
		int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0);
		CHECK_EQ(pread(fd, back, sizeof(back), 0), PAGE);
		memset(buf, 'a' + i % 26, sizeof(buf));
		CHECK(!memcmp(back, buf, PAGE));
		close(fd);
	}
	close(dfd);
	t_rmdir(dir);
}

int main(void)
{
	if (!t_nofile(256))
		return 77;
	run("");
	run("on_error=drop");
	run("uring=0");
	printf("ok\n");
	return 0;
}
