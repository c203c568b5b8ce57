/*
 * A failed io_uring submission on the file backend (src/backend/file.c):
 * the bio is failed to its caller, and its ring entry, already published,
 * must never run later.
 *   File "a" is written back while its submission fails (on_error=drop:
 *   its data is reported lost); then file "b" is written and synced, which
 *   submits on the ring again, with a's bio reused for b.
 *   - fsync of "a" reports the error once, then succeeds;
 *   - "b" reads back right from the backend;
 *   - the backend's "a" holds none of b's bytes: a stale entry would have
 *     written b's pages (through the reused bio's iovecs) into "a";
 *   - every bio completes once: a second completion of a bio trips the
 *     engine's assertions, or leaves the device never drained (close).
 * Then the same with a submission failing while a stream of bios is in
 * flight, on_error=retry: the data ends up right.
 * Then as many failed submissions in a row as the ring has entries (one
 * bio each: max_io=4K): their entries, voided, filled the ring, and with
 * no room for one more entry nothing sent them; every later submit
 * failed with EBUSY for good, and the cache's close aborted (no entry for
 * its stop).  Once the failures end, writes go through again.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#include <fcntl.h>
#include <sys/stat.h>

#define SZ (64u << 10)

static char pa[SZ], pb[SZ], back[4 * SZ];
static char *dir;

/* The backend file @name as the file system has it. */
static void read_back(const char *name, size_t len, uint64_t *size)
{
	char path[600];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(fstat(fd, &sb), 0);
	*size = (uint64_t)sb.st_size;
	memset(back, 0, len);
	CHECK_EQ(pread(fd, back, len, 0), (ssize_t)WBC_MIN(len, *size));
	close(fd);
}

int main(void)
{
	dir = t_mkdtemp();
	char spec[512];
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;       /* writeback only when asked */
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *a, *b;
	uint64_t size;
	t_fill(pa, SZ, 1);
	t_fill(pb, SZ, 2);

	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	snprintf(spec, sizeof(spec), "dir:%s,on_error=drop", dir);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &a), 0);
	CHECK_EQ(wbc_pwrite(a, pa, SZ, 0), SZ);
	file_fail_submits(dev, 1, -ENOMEM);
	CHECK_EQ(wbc_fsync(a), -ENOMEM);
	CHECK_EQ(wbc_fsync(a), 0);                /* reported once; dropped */

	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &b), 0);
	CHECK_EQ(wbc_pwrite(b, pb, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(b), 0);
	read_back("b", SZ, &size);
	CHECK_EQ(size, SZ);
	CHECK(!memcmp(back, pb, SZ));
	/* "a" lost its data: the backend may have its size, never b's bytes */
	CHECK_EQ(wbc_fsync(a), 0);
	read_back("a", SZ, &size);
	CHECK(size <= SZ);
	for (size_t i = 0; i < SZ; i++)
		CHECK_EQ(back[i], 0);
	CHECK_EQ(wbc_file_close(a), 0);
	CHECK_EQ(wbc_file_close(b), 0);
	CHECK_EQ(wbc_dev_sync(dev), -ENOMEM);    /* the device saw it too */
	CHECK_EQ(wbc_cache_close(c), 0);

	/* retry policy, a failure in the middle of a stream of bios */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	snprintf(spec, sizeof(spec), "dir:%s,on_error=retry,max_io=16K", dir);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "s", WBC_O_CREAT, &a), 0);
	for (unsigned i = 0; i < 4; i++)
		CHECK_EQ(wbc_pwrite(a, i % 2 ? pb : pa, SZ, (uint64_t)i * SZ), SZ);
	file_fail_submits(dev, 3, -EBADR);
	CHECK_EQ(wbc_fsync(a), -EBADR);           /* pages kept dirty, at risk */
	CHECK_EQ(wbc_fsync(a), 0);                /* written this time */
	read_back("s", sizeof(back), &size);
	CHECK_EQ(size, sizeof(back));
	for (unsigned i = 0; i < 4; i++)
		CHECK(!memcmp(back + (size_t)i * SZ, i % 2 ? pb : pa, SZ));
	CHECK_EQ(wbc_file_close(a), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EBADR);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* a ring full of voided entries: qd=1 makes a ring of 128 (1 + 64
	 * slack, a power of two); 256 failures fill it whatever its size up
	 * to that */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	snprintf(spec, sizeof(spec), "dir:%s,qd=1,max_io=4K,on_error=drop", dir);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "v", WBC_O_CREAT, &a), 0);
	for (unsigned i = 0; i < 256; i++)   /* 256 pages, 256 bios */
		CHECK_EQ(wbc_pwrite(a, pa + (i % 16) * 4096, 4096, (uint64_t)i * 4096), 4096);
	file_fail_submits(dev, 256, -ENOMEM);
	CHECK_EQ(wbc_fsync(a), -ENOMEM);          /* dropped */
	file_fail_submits(dev, 0, 0);             /* whatever is left of them */
	CHECK_EQ(wbc_pwrite(a, pb, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(a), 0);                /* EBUSY, for ever */
	read_back("v", SZ, &size);
	CHECK_EQ(size, 256 * 4096);
	CHECK(!memcmp(back, pb, SZ));
	CHECK_EQ(wbc_file_close(a), 0);
	wbc_dev_sync(dev);                        /* the dropped writes' error */
	CHECK_EQ(wbc_cache_close(c), 0);          /* aborted: no room for its stop */
	t_rmdir(dir);
	return 0;
}
