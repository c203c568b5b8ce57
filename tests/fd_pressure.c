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
 * And one file whose descriptor cannot be reopened (ESTALE) fails its
 * own writeback alone (run_stale), on the ring and the workers.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define N 200
#define PAGE 4096

static int dfd;

static int opener(void *ctx, const char *name, int flags)
{
	(void)ctx;
	int fd = openat(dfd, name, flags | O_CREAT, 0644);
	return fd < 0 ? -errno : fd;
}

/* A 64 MiB cache with a reopening opener device over @dir (dfd). */
static wbc_dev *open_dir_dev(const char *dir, const char *opts, wbc_cache **c)
{
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	struct wbc_config cfg = t_config(64u << 20, PAGE);
	wbc_dev *dev;
	char msg[256] = "";
	CHECK_EQ(wbc_cache_open(&cfg, c), 0);
	CHECK_EQ(wbc_dev_add_opener(*c, dfd, opts, opener, NULL, WBC_OPENER_REOPEN, &dev, msg,
				    sizeof(msg)), 0);
	return dev;
}

static void run(const char *opts)
{
	printf("  opts '%s'\n", opts);
	char *dir = t_mkdtemp();
	wbc_cache *c;
	wbc_dev *dev = open_dir_dev(dir, opts, &c);
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

/* The opener of run_stale: "f5" opens once; a reopen of it fails with
 * ESTALE (its backing file was removed by its owner, as a file handle's
 * open_by_handle_at says then). */
static atomic_int f5_opens;

static int stale_opener(void *ctx, const char *name, int flags)
{
	if (!strcmp(name, "f5") && atomic_fetch_add(&f5_opens, 1) > 0)
		return -ESTALE;
	return opener(ctx, name, flags);
}

/*
 * One file whose descriptor cannot be reopened fails its own writeback,
 * not that of the other files whose I/Os the flusher submitted with it
 * (one submit of its plug: they were failed with its ESTALE, their pages
 * dropped under on_error=drop, and fsync said ESTALE for them).  Every
 * file is opened first (f5's descriptor, among the oldest, is closed for
 * the newer ones), then written; the periodic pass writes them all once
 * they are 1 s old.
 */
static void run_stale(const char *opts)
{
	printf("  a reopen refused, opts '%s'\n", opts);
	char *dir = t_mkdtemp();
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	atomic_store(&f5_opens, 0);
	struct wbc_config cfg = t_config(64u << 20, PAGE);
	cfg.dirty_expire_centisecs = 100;
	cfg.dirty_writeback_centisecs = 1;
	wbc_cache *c;
	wbc_dev *dev;
	char msg[256] = "";
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_opener(c, dfd, opts, stale_opener, NULL, WBC_OPENER_REOPEN, &dev, msg,
				    sizeof(msg)), 0);
	wbc_file *f[N];
	char buf[PAGE];
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f[i]), 0);
	}
	CHECK_EQ(atomic_load(&f5_opens), 1);
	for (int i = 0; i < N; i++) {
		memset(buf, 'a' + i % 26, sizeof(buf));
		CHECK_EQ(wbc_pwrite(f[i], buf, sizeof(buf), 0), PAGE);
	}
	/* the periodic pass writes them all (f5's pages fail and are dropped) */
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), st.dirty_bytes == 0 && st.writeback_bytes == 0)));
	CHECK(atomic_load(&f5_opens) > 1);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		int r = wbc_fsync(f[i]);
		if (i == 5)
			CHECK_EQ(r, -ESTALE);
		else
			bad += r != 0;
	}
	printf("    fsync failures of other files: %d\n", bad);
	for (int i = 0; i < N; i++)
		wbc_file_close(f[i]);
	wbc_cache_close_stats(c, &st);
	printf("    lost %llu bytes, %llu write errors\n", (unsigned long long)st.lost_bytes,
	       (unsigned long long)st.write_errors);
	int missing = 0;
	for (int i = 0; i < N; i++) {
		char name[32], back[PAGE];
		snprintf(name, sizeof(name), "f%d", i);
		int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0);
		memset(buf, 'a' + i % 26, sizeof(buf));
		missing += i != 5 && (pread(fd, back, sizeof(back), 0) != PAGE ||
				      memcmp(back, buf, PAGE));
		close(fd);
	}
	printf("    other files without their data: %d\n", missing);
	CHECK_EQ(bad, 0);
	CHECK_EQ(missing, 0);
	CHECK_EQ(st.lost_bytes, PAGE);
	CHECK_EQ(st.write_errors, 1);
	close(dfd);
	t_rmdir(dir);
}

/* A block device among a reopening device's files: its size asked anew
 * at a resize (it may have grown: lvextend) through a descriptor taken
 * for it, where the one it had may be closed for now (the resize asked
 * descriptor -1, kept the old size and refused a size the device had:
 * EFBIG).  Needs root and a loop device. */
static void run_blk(void)
{
	printf("  a block device whose descriptor was closed for now\n");
	char *dir = t_mkdtemp(), img[600], node[600], cmd[1400], loop[64] = "";
	snprintf(img, sizeof(img), "%s/img", dir);
	snprintf(node, sizeof(node), "%s/blk", dir);
	int ifd = open(img, O_RDWR | O_CREAT, 0600);
	CHECK(ifd >= 0);
	CHECK_EQ(ftruncate(ifd, 1 << 20), 0);
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", img);
	FILE *p = popen(cmd, "r");
	if (!p || !fgets(loop, sizeof(loop), p) || strncmp(loop, "/dev/loop", 9)) {
		printf("    skipped: no loop device here\n");
		if (p)
			pclose(p);
		close(ifd);
		t_rmdir(dir);
		return;
	}
	pclose(p);
	loop[strcspn(loop, "\n")] = 0;
	struct stat st;
	CHECK_EQ(stat(loop, &st), 0);
	CHECK_EQ(mknod(node, S_IFBLK | 0600, st.st_rdev), 0);
	wbc_cache *c;
	wbc_dev *dev = open_dir_dev(dir, "", &c);
	wbc_file *b, *g[N];
	CHECK_EQ(wbc_file_open(dev, "blk", 0, &b), 0);
	CHECK_EQ(wbc_file_size(b), 1 << 20);
	/* more files than descriptors kept: the device's is closed */
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "g%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &g[i]), 0);
	}
	CHECK_EQ(ftruncate(ifd, 2 << 20), 0);
	snprintf(cmd, sizeof(cmd), "losetup -c %s", loop);
	CHECK_EQ(system(cmd), 0);
	int r = wbc_truncate(b, 2 << 20);
	printf("    truncate to the grown device's size: %d\n", r);
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_truncate(b, 3 << 20), -EFBIG);   /* past it */
	for (int i = 0; i < N; i++)
		CHECK_EQ(wbc_file_close(g[i]), 0);
	CHECK_EQ(wbc_file_close(b), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	snprintf(cmd, sizeof(cmd), "losetup -d %s", loop);
	CHECK_EQ(system(cmd), 0);
	close(ifd);
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
	run_stale("on_error=drop");
	run_stale("on_error=drop,uring=0");
	if (!geteuid())
		run_blk();
	printf("ok\n");
	return 0;
}
