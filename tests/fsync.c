/*
 * fsync durability: once wbc_fsync / wbc_fdatasync / wbc_fsync_range /
 * wbc_dev_sync returns 0, a separate plain open()+read() of the backing
 * file sees the data and the size, while the cache is still open (nothing
 * was closed or flushed by other means).  Covers the dir: backend (one
 * backing file per cached file) and the file: backend (one file).
 */
#include "testutil.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>

#define SZ (3u << 20)

/* This test's fsync(2) counts the syncs of a directory (the inode watched)
 * and fails the next @dir_fail of them with EIO. */
static atomic_ulong dir_syncs;
static atomic_ulong watch_ino;
static atomic_int dir_fail;

int fsync(int fd)
{
	static int (*real)(int);
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	struct stat st;
	if (!fstat(fd, &st) && S_ISDIR(st.st_mode) && st.st_ino == atomic_load(&watch_ino)) {
		atomic_fetch_add(&dir_syncs, 1);
		if (atomic_load(&dir_fail) > 0) {
			atomic_fetch_sub(&dir_fail, 1);
			errno = EIO;
			return -1;
		}
	}
	return real(fd);
}

/* And its openat(2) is a file system that refuses O_DIRECT for names
 * beginning "nodio", as the kernel does: after the file is made. */
int openat(int dirfd, const char *name, int flags, ...)
{
	static int (*real)(int, const char *, int, ...);
	if (!real)
		real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	const char *base = strrchr(name, '/');
	if ((flags & O_DIRECT) && !strncmp(base ? base + 1 : name, "nodio", 5)) {
		int fd = real(dirfd, name, flags & ~O_DIRECT, mode);
		if (fd < 0)
			return fd;
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return real(dirfd, name, flags, mode);
}

static void watch_dir(const char *path)
{
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	atomic_store(&watch_ino, st.st_ino);
	atomic_store(&dir_syncs, 0);
}

/* Directory syncs counted while @name is opened (WBC_O_CREAT), written and
 * fsynced on @dev. */
static unsigned long dir_syncs_of(wbc_dev *dev, const char *name, const char *data)
{
	wbc_file *f;
	atomic_store(&dir_syncs, 0);
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 10, 0), 10);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	return atomic_load(&dir_syncs);
}

static void expect_file(const char *path, const char *want, uint64_t off, uint64_t len,
			int64_t size)
{
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	if (size >= 0)
		CHECK_EQ(st.st_size, size);
	char *buf = malloc(len);
	CHECK_EQ(pread(fd, buf, len, (off_t)off), len);
	CHECK(!memcmp(buf, want + off, len));
	free(buf);
	close(fd);
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[800], path[700];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	/* expiry off and a big cache: only fsync can put the data there */
	struct wbc_config cfg = t_config(64u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;
	cfg.dirty_ratio = 90;
	cfg.dirty_background_ratio = 80;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	char *data = malloc(SZ);
	t_fill(data, SZ, 7);

	/* fsync: whole file, unaligned size; the file's name is made durable
	 * too: the store directory synced at the file's first fsync, not
	 * after */
	watch_dir(dir);
	wbc_file *a;
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &a), 0);
	CHECK_EQ(wbc_pwrite(a, data, SZ - 123, 0), SZ - 123);
	snprintf(path, sizeof(path), "%s/a", dir);
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_size, 0);                       /* not written yet */
	CHECK_EQ(wbc_fsync(a), 0);
	CHECK_EQ(atomic_load(&dir_syncs), 1);
	expect_file(path, data, 0, SZ - 123, SZ - 123);
	CHECK_EQ(wbc_pwrite(a, data, 10, 0), 10);
	CHECK_EQ(wbc_fsync(a), 0);
	CHECK_EQ(atomic_load(&dir_syncs), 1);          /* once is enough */

	/* overwrite in the middle, fdatasync */
	t_fill(data + 1000, 50000, 8);
	CHECK_EQ(wbc_pwrite(a, data + 1000, 50000, 1000), 50000);
	CHECK_EQ(wbc_fdatasync(a), 0);
	expect_file(path, data, 0, SZ - 123, SZ - 123);

	/* fsync_range: the range is on the backend */
	wbc_file *b;
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &b), 0);
	CHECK_EQ(wbc_pwrite(b, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync_range(b, 1u << 20, 12345, 1), 0);
	snprintf(path, sizeof(path), "%s/b", dir);
	expect_file(path, data, 1u << 20, 12345, -1);

	/* device sync: everything, including b's other bytes */
	wbc_file *d;
	CHECK_EQ(wbc_file_open(dev, "d", WBC_O_CREAT, &d), 0);
	CHECK_EQ(wbc_pwrite(d, data, 777, 5), 777);
	CHECK_EQ(wbc_dev_sync(dev), 0);
	expect_file(path, data, 0, SZ, SZ);
	snprintf(path, sizeof(path), "%s/d", dir);
	char *dd = calloc(1, 782);
	memcpy(dd + 5, data, 777);
	expect_file(path, dd, 0, 782, 782);
	free(dd);

	/* truncate is on the backend at once */
	CHECK_EQ(wbc_truncate(a, 4097), 0);
	snprintf(path, sizeof(path), "%s/a", dir);
	expect_file(path, data, 0, 4097, 4097);

	struct wbc_stats s;
	wbc_stats(c, &s);
	CHECK_EQ(s.dirty_bytes, 0);
	wbc_file_close(a);
	wbc_file_close(b);
	wbc_file_close(d);
	/* a file that was there already: no directory sync */
	CHECK_EQ(dir_syncs_of(dev, "a", data), 0);
	/* on a file system that refuses O_DIRECT (after the create): the
	 * file the device made is still named durably (its O_EXCL open,
	 * tried again without O_DIRECT, said EEXIST: taken as there) */
	unsigned long n = dir_syncs_of(dev, "nodio", data);
	printf("a file made where O_DIRECT is refused: %lu directory sync(s) at its fsync\n", n);
	CHECK_EQ(n, 1);
	atomic_store(&dir_syncs, 0);
	/* a failed sync of the directory is fsync's error, and is tried
	 * again at the next */
	wbc_file *e;
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_CREAT, &e), 0);
	CHECK_EQ(wbc_pwrite(e, data, 10, 0), 10);
	atomic_store(&dir_fail, 1);
	CHECK_EQ(wbc_fsync(e), -EIO);
	CHECK_EQ(atomic_load(&dir_syncs), 1);
	CHECK_EQ(wbc_fsync(e), 0);
	CHECK_EQ(atomic_load(&dir_syncs), 2);
	wbc_file_close(e);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* syncfs's: an error since the last */
	CHECK_EQ(wbc_dev_sync(dev), 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* file: backend, one backing file */
	/* (the device's own new file is named durably at its first fsync) */
	snprintf(path, sizeof(path), "%s/single.img", dir);
	snprintf(spec, sizeof(spec), "file:%s", path);
	atomic_store(&dir_syncs, 0);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	wbc_file *one;
	CHECK_EQ(wbc_file_open(dev, "", 0, &one), 0);
	CHECK_EQ(wbc_pwrite(one, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(one), 0);
	CHECK_EQ(atomic_load(&dir_syncs), 1);
	expect_file(path, data, 0, SZ, SZ);
	wbc_file_close(one);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* file: on a dangling symbolic link: its target is made, as
	 * open(2) with O_CREAT makes it, and named durably (the create's
	 * O_EXCL refused the link as there, the open without O_CREAT found
	 * nothing: the device was refused, EEXIST) */
	char link[720], target[720];
	snprintf(link, sizeof(link), "%s/link.img", dir);
	snprintf(target, sizeof(target), "%s/target.img", dir);
	CHECK_EQ(symlink("target.img", link), 0);
	snprintf(spec, sizeof(spec), "file:%s", link);
	atomic_store(&dir_syncs, 0);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	int ae = wbc_dev_add(c, spec, &dev);
	printf("file: on a dangling symbolic link: wbc_dev_add %d\n", ae);
	CHECK_EQ(ae, 0);
	CHECK_EQ(wbc_file_open(dev, "", 0, &one), 0);
	CHECK_EQ(wbc_pwrite(one, data, 5000, 0), 5000);
	CHECK_EQ(wbc_fsync(one), 0);
	CHECK_EQ(atomic_load(&dir_syncs), 1);
	expect_file(target, data, 0, 5000, 5000);
	wbc_file_close(one);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(unlink(link), 0);
	CHECK_EQ(unlink(target), 0);

	free(data);
	t_rmdir(dir);
	printf("fsync: ok\n");
	return 0;
}
