/*
 * A dir: device's file replaced in its directory (rename over it) or
 * unlinked by the directory's owner while the cache still holds its dirty
 * pages, with more files written after it than the 64 descriptors a
 * reopening device would keep under a limit of 256: the file keeps its
 * descriptor until its writeback (a name is not reopened), so its pages
 * go to the inode they were written for, the file now at the name keeps
 * its bytes, no file is made at the removed name, and nothing fails or
 * is lost.  A reopen by name (tried once to bound the descriptors) wrote
 * the stale pages over the new file and failed the other with ENOENT.
 */
#include "testutil.h"

#include <fcntl.h>

#define PAGE 4096
#define N 150

static void run(const char *opts)
{
	printf("  opts '%s'\n", opts);
	char *dir = t_mkdtemp(), spec[300];
	snprintf(spec, sizeof(spec), "dir:%s%s", dir, opts);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	struct wbc_config cfg = t_config(64u << 20, PAGE);
	wbc_cache *c;
	wbc_dev *dev;
	char msg[256] = "", buf[PAGE], back[PAGE];
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg)), 0);
	wbc_file *f;
	/* "replaced" and "gone": written through the cache, closed */
	const char *names[] = { "replaced", "gone" };
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(wbc_file_open(dev, names[i], WBC_O_CREAT, &f), 0);
		memset(buf, 'V', sizeof(buf));
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), PAGE);
		CHECK_EQ(wbc_file_close(f), 0);
	}
	/* the directory's owner replaces one and unlinks the other */
	int fd = openat(dfd, "new", O_CREAT | O_RDWR | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	memset(buf, 'N', sizeof(buf));
	CHECK_EQ(pwrite(fd, buf, sizeof(buf), 0), PAGE);
	close(fd);
	CHECK_EQ(renameat(dfd, "new", dfd, "replaced"), 0);
	CHECK_EQ(unlinkat(dfd, "gone", 0), 0);
	/* more files than descriptors kept */
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, 100, 0), 100);
		CHECK_EQ(wbc_file_close(f), 0);
	}
	int r = wbc_cache_sync(c);
	printf("    sync %d\n", r);
	CHECK_EQ(r, 0);
	struct wbc_stats st;
	int rc = wbc_cache_close_stats(c, &st);
	printf("    close %d write_errors %llu lost %llu\n", rc, (unsigned long long)st.write_errors,
	       (unsigned long long)st.lost_bytes);
	CHECK_EQ(rc, 0);
	CHECK_EQ(st.write_errors, 0);
	CHECK_EQ(st.lost_bytes, 0);
	fd = openat(dfd, "replaced", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, back, sizeof(back), 0), PAGE);
	close(fd);
	printf("    replaced holds '%c'\n", back[0]);
	CHECK_EQ(back[0], 'N');
	CHECK(faccessat(dfd, "gone", F_OK, 0) && errno == ENOENT);
	close(dfd);
	t_rmdir(dir);
}

int main(void)
{
	if (!t_nofile(256))
		return 77;
	run(",on_error=drop");
	run(",on_error=drop,uring=0");
	printf("ok\n");
	return 0;
}
