/*
 * A failed read is an error, never the file's end; a failed remove or
 * flush loses nothing silently.  The backend here (the public interface,
 * tests/store_backend.h) keeps one file of 'A's in memory, in I/Os of at
 * most 4 KiB, and fails on demand: reads at or past an offset, removes, and (through a device
 * model under a stacked device) writes.
 *   1. a read of many pages whose second I/O fails: -EIO, not zeros
 *      cached as the file's bytes; once the backend reads again, every
 *      byte is an 'A', and a one-byte write then fsync keeps the rest;
 *   2. a stacked device over a file whose later pages fail to read: the
 *      upper read fails (a short read of the lower file was taken as its
 *      end: zeros);
 *   3. a remove the backend refuses keeps the file: size, dirty data, and
 *      fsync writes it;
 *   4. a stacked device whose lower device lost a write: wbc_dev_sync
 *      reports it, and so does the next fsync of a handle open then (the
 *      device's flush told only the sync);
 *   5. a device add refused for its tunables leaves the min_ratio sum as
 *      it was (later adds failed: "would add up to 4294967246");
 *   6. readers of a file's tail while a writer appends and evicts: every
 *      byte read is the writer's (a read of many pages zeroed what was
 *      appended after its first page was claimed);
 *   7. a failed flush of the device is the error of the files written
 *      since the last good one, through the cache or direct (not marked
 *      seen by a peek), not of one only read, nor of one written before
 *      that good flush;
 *   8. a direct stacked device whose lower file ends mid-block reads its
 *      last page (the end, not a retry at an unaligned offset);
 *   9. the file backend's worker threads (uring=0) whose preadv fails
 *      after part of a read (this test's own preadv, below, fails past
 *      an offset as a disk's bad sector does): -EIO, not the part read
 *      taken for the file's end and the rest of the pages zeros;
 *  10. a write of a file's last page that fills the store part way, past
 *      the file's size, and then fails (ENOSPC), with on_error=drop: the
 *      backend's size is trimmed back to the file's at the next fsync and
 *      at the close (it stayed larger: the failed write was taken to
 *      have left the backend's size as it was);
 *  11. the worker threads' O_DIRECT read of a file of 5000 bytes that
 *      grows meanwhile (this test's preadv extends it after the read that
 *      found its end): 5000 bytes, the end, as on the ring (it read on
 *      from 5000, which O_DIRECT refuses: EINVAL).
 */
#include "store_backend.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/uio.h>

#define KiB 1024u
#define FSIZE (128 * KiB)

static void reset_store(void)
{
	pthread_mutex_lock(&sb_lock);
	memset(sb_store, 'A', FSIZE);
	sb_size = FSIZE;
	sb_max_io = 4 * KiB;
	sb_fail_read_from = UINT64_MAX;
	sb_fail_remove = sb_fail_flush = false;
	pthread_mutex_unlock(&sb_lock);
}

static wbc_cache *open_cache(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16 << 20;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}

static wbc_dev *add_faulty(wbc_cache *c)
{
	static int ctx;
	wbc_dev *d;
	char msg[256];
	int err = wbc_dev_add_backend_msg(c, &sb_ops, &ctx, "", &d, msg, sizeof(msg));
	if (err)
		fprintf(stderr, "add: %s\n", msg);
	CHECK_EQ(err, 0);
	return d;
}

static size_t count_not(const char *b, size_t n, char want)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += b[i] != want;
	return k;
}

static char buf[FSIZE];

static void case_read_run(void)
{
	reset_store();
	wbc_cache *c = open_cache();
	wbc_dev *d = add_faulty(c);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(d, "f", 0, &h), 0);
	sb_set_fail_read_from(8 * KiB);
	memset(buf, '?', sizeof(buf));
	ssize_t r = wbc_pread(h, buf, FSIZE, 0);
	/* the run from page 0 failed as a whole; nothing past 8 KiB read */
	CHECK(r < 0 || r <= (ssize_t)(8 * KiB));
	if (r > 0)
		CHECK_EQ(count_not(buf, (size_t)r, 'A'), 0);
	r = wbc_pread(h, buf, 4 * KiB, 64 * KiB);
	CHECK_EQ(r, -EIO);
	sb_set_fail_read_from(UINT64_MAX);
	r = wbc_pread(h, buf, FSIZE, 0);
	CHECK_EQ(r, FSIZE);
	CHECK_EQ(count_not(buf, FSIZE, 'A'), 0);
	/* a partial-page write over what was read, then fsync: the page's
	 * other bytes are the backend's, not zeros */
	sb_set_fail_read_from(8 * KiB);
	wbc_file_close(h);
	CHECK_EQ(wbc_cache_close(c), 0);

	c = open_cache();
	d = add_faulty(c);
	CHECK_EQ(wbc_file_open(d, "f", 0, &h), 0);
	memset(buf, '?', sizeof(buf));
	CHECK(wbc_pread(h, buf, FSIZE, 0) <= (ssize_t)(8 * KiB));
	CHECK(wbc_pwrite(h, "B", 1, 12 * KiB) < 0);   /* its page cannot be read */
	sb_set_fail_read_from(UINT64_MAX);
	CHECK_EQ(wbc_pwrite(h, "B", 1, 12 * KiB), 1);
	CHECK_EQ(wbc_fsync(h), 0);
	wbc_file_close(h);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK(sb_is(12 * KiB, 12 * KiB + 1, 'B'));
	CHECK(sb_is(0, 12 * KiB, 'A') && sb_is(12 * KiB + 1, FSIZE, 'A'));
}

static void case_stacked_read(void)
{
	reset_store();
	wbc_cache *c = open_cache();
	wbc_dev *lower = add_faulty(c);
	wbc_file *lh;
	CHECK_EQ(wbc_file_open(lower, "f", 0, &lh), 0);
	/* the lower file's first 64 KiB in its cache, the rest fails */
	CHECK_EQ(wbc_pread(lh, buf, 64 * KiB, 0), 64 * KiB);
	sb_set_fail_read_from(64 * KiB);
	wbc_dev *up;
	char msg[256];
	CHECK_EQ(wbc_dev_add_stacked(c, lower, "f", "", &up, msg, sizeof(msg)), 0);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(up, "", 0, &h), 0);
	memset(buf, '?', sizeof(buf));
	ssize_t r = wbc_pread(h, buf, FSIZE, 0);
	CHECK(r < (ssize_t)FSIZE);
	if (r > 0)
		CHECK_EQ(count_not(buf, (size_t)r, 'A'), 0);
	CHECK_EQ(wbc_pread(h, buf, 4 * KiB, 96 * KiB), -EIO);
	sb_set_fail_read_from(UINT64_MAX);
	CHECK_EQ(wbc_pread(h, buf, FSIZE, 0), FSIZE);
	CHECK_EQ(count_not(buf, FSIZE, 'A'), 0);
	wbc_file_close(h);
	wbc_file_close(lh);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void case_remove(void)
{
	reset_store();
	wbc_cache *c = open_cache();
	wbc_dev *d = add_faulty(c);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(d, "f", 0, &h), 0);
	memset(buf, 'C', 8 * KiB);
	CHECK_EQ(wbc_pwrite(h, buf, 8 * KiB, FSIZE), 8 * KiB);   /* dirty, past the end */
	wbc_file_close(h);
	sb_set(&sb_fail_remove, true);
	CHECK_EQ(wbc_file_remove(d, "f"), -EIO);
	CHECK_EQ(wbc_file_open(d, "f", 0, &h), 0);
	CHECK_EQ(wbc_file_size(h), FSIZE + 8 * KiB);
	memset(buf, 0, 8 * KiB);
	CHECK_EQ(wbc_pread(h, buf, 8 * KiB, FSIZE), 8 * KiB);
	CHECK_EQ(count_not(buf, 8 * KiB, 'C'), 0);
	wbc_file_close(h);
	/* stays dirty, and is written: the backend grows by it */
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(sb_backend_size(), FSIZE + 8 * KiB);
	CHECK(sb_is(FSIZE, FSIZE + 8 * KiB, 'C'));
}

static void case_dev_sync_error(void)
{
	for (int drop = 0; drop <= 1; drop++) {
		wbc_cache *c = open_cache();
		wbc_dev *lower, *up;
		char msg[256];
		CHECK_EQ(wbc_dev_add_msg(c, drop ? "model:errn=1,on_error=drop" : "model:errn=1",
					 &lower, msg, sizeof(msg)), 0);
		CHECK_EQ(wbc_dev_add_msg(c, "stack:0/img", &up, msg, sizeof(msg)), 0);
		wbc_file *h;
		CHECK_EQ(wbc_file_open(up, "", WBC_O_CREAT, &h), 0);
		memset(buf, 'x', 4 * KiB);
		CHECK_EQ(wbc_pwrite(h, buf, 4 * KiB, 0), 4 * KiB);
		CHECK_EQ(wbc_dev_sync(up), -EIO);
		/* the handle open when the write was lost hears of it once */
		CHECK_EQ(wbc_fsync(h), -EIO);
		CHECK_EQ(wbc_fsync(h), 0);
		wbc_file_close(h);
		wbc_cache_close(c);
	}
}

static void case_min_ratio(void)
{
	reset_store();
	wbc_cache *c = open_cache();
	static int ctx;
	wbc_dev *d;
	char msg[256];
	CHECK_EQ(wbc_dev_add_backend_msg(c, &sb_ops, &ctx, "min_ratio=50,max_ratio=10", &d,
					 msg, sizeof(msg)), -EINVAL);
	CHECK_EQ(wbc_dev_add_msg(c, "mem,min_ratio=60", &d, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_dev_add_msg(c, "mem,min_ratio=40", &d, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_dev_add_msg(c, "mem,min_ratio=1", &d, msg, sizeof(msg)), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* 7: a device flush that fails is the error of the files written since
 * the last good one, not of a file only read (a close of any descriptor
 * of it reported the error through the mount); each failed flush, a
 * sync's or an fsync's, is counted (flush_errors: the mount's sync fails
 * with it, which no later write makes good) */
static void case_flush_error_scope(void)
{
	reset_store();
	wbc_cache *c = open_cache();
	wbc_dev *d = add_faulty(c);
	wbc_file *w, *r, *old;
	CHECK_EQ(wbc_file_open(d, "w", 0, &w), 0);
	CHECK_EQ(wbc_file_open(d, "r", 0, &r), 0);
	CHECK_EQ(wbc_file_open(d, "old", 0, &old), 0);
	CHECK_EQ(wbc_pwrite(old, "o", 1, 0), 1);
	CHECK_EQ(wbc_dev_sync(d), 0);          /* old's write is flushed */
	CHECK_EQ(wbc_pread(r, buf, 4 * KiB, 0), 4 * KiB);
	CHECK_EQ(wbc_pwrite(w, "w", 1, 0), 1);
	wbc_file *dw;          /* written direct: no writeback of its own */
	CHECK_EQ(wbc_file_open(d, "dw", WBC_O_DIRECT, &dw), 0);
	memset(buf, 'd', 4 * KiB);
	CHECK_EQ(wbc_pwrite(dw, buf, 4 * KiB, 0), 4 * KiB);
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.flush_errors, 0);
	sb_set(&sb_fail_flush, true);
	CHECK_EQ(wbc_dev_sync(d), -EIO);
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.flush_errors, 1);
	CHECK_EQ(wbc_file_peek_error(dw), -EIO);
	wbc_file_close(dw);
	CHECK_EQ(wbc_file_peek_error(w), -EIO);
	CHECK_EQ(wbc_file_peek_error(w), -EIO);   /* not marked seen */
	CHECK_EQ(wbc_fsync(w), -EIO);
	CHECK_EQ(wbc_fsync(w), 0);
	CHECK_EQ(wbc_file_peek_error(r), 0);
	CHECK_EQ(wbc_fsync(r), 0);
	CHECK_EQ(wbc_fsync(old), 0);
	sb_set(&sb_fail_flush, true);
	CHECK_EQ(wbc_fsync(old), -EIO);
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.flush_errors, 2);
	CHECK_EQ(wbc_dev_sync(d), -EIO);   /* the device's errors have it too */
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.flush_errors, 2);
	wbc_file_close(w);
	wbc_file_close(r);
	wbc_file_close(old);
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* 8: a direct stacked device over a file whose size is not a multiple of
 * the lower device's O_DIRECT alignment reads its last page (the rest
 * after the short read was asked for at an unaligned offset: EINVAL) */
static void case_stacked_direct_tail(void)
{
	char *dir = t_mkdtemp();
	char spec[512], msg[256];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	wbc_cache *lc = open_cache(), *uc = open_cache();
	wbc_dev *lower, *up;
	CHECK_EQ(wbc_dev_add_msg(lc, spec, &lower, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "stack_throttle=direct", &up, msg,
				     sizeof(msg)), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(up, "", WBC_O_CREAT, &f), 0);
	memset(buf, 'a', 1000);
	CHECK_EQ(wbc_pwrite(f, buf, 1000, 0), 1000);
	CHECK_EQ(wbc_fsync(f), 0);
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(uc), 0);
	uc = open_cache();     /* nothing of it cached above */
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "stack_throttle=direct", &up, msg,
				     sizeof(msg)), 0);
	CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
	memset(buf, 0, 4 * KiB);
	CHECK_EQ(wbc_pread(f, buf, 4 * KiB, 0), 1000);
	CHECK_EQ(count_not(buf, 1000, 'a'), 0);
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(uc), 0);
	CHECK_EQ(wbc_cache_close(lc), 0);
	t_rmdir(dir);
}

/* 6: the tail of a file being appended to, read while it is evicted */
#define PS 4096
static wbc_file *tf;
static atomic_int tstop;
static atomic_long tbad;

static unsigned char pat(uint64_t x) { return (unsigned char)((x * 7 + 13) % 251 + 1); }

static void *appender(void *a)
{
	(void)a;
	uint64_t size = (uint64_t)wbc_file_size(tf);
	unsigned char b[256];
	uint64_t seed = 1;
	while (!atomic_load(&tstop) && size < (64u << 20)) {
		size_t len = 1 + t_rand(&seed) % 200;
		for (size_t i = 0; i < len; i++)
			b[i] = pat(size + i);
		CHECK_EQ(wbc_pwrite(tf, b, len, size), (ssize_t)len);
		size += len;
		CHECK_EQ(wbc_fdatasync(tf), 0);
	}
	return NULL;
}

static void *tail_reader(void *a)
{
	(void)a;
	unsigned char *b = malloc(40 * PS);
	CHECK(b);
	while (!atomic_load(&tstop)) {
		int64_t size = wbc_file_size(tf);
		uint64_t off = size > 24 * PS ? (uint64_t)(size - 24 * PS) & ~(uint64_t)(PS - 1) : 0;
		ssize_t n = wbc_pread(tf, b, 40 * PS, off);
		CHECK(n >= 0);
		for (ssize_t i = 0; i < n; i++)
			if (b[i] != pat(off + (uint64_t)i)) {
				if (atomic_fetch_add(&tbad, 1) < 3)
					fprintf(stderr, "byte %llu read as %d, written %d\n",
						(unsigned long long)(off + (uint64_t)i), b[i],
						pat(off + (uint64_t)i));
				break;
			}
	}
	free(b);
	return NULL;
}

static void case_append_race(double secs)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16 * PS;   /* the readers' runs evict the appended pages */
	cfg.page_size = PS;
	wbc_cache *c;
	wbc_dev *d;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &d), 0);
	CHECK_EQ(wbc_file_open(d, "r", WBC_O_CREAT, &tf), 0);
	unsigned char b[PS];
	for (uint64_t o = 0; o < 64 * PS; o += PS) {
		for (int i = 0; i < PS; i++)
			b[i] = pat(o + (uint64_t)i);
		CHECK_EQ(wbc_pwrite(tf, b, PS, o), PS);
	}
	CHECK_EQ(wbc_fsync(tf), 0);
	pthread_t w, r[3];
	CHECK_EQ(pthread_create(&w, NULL, appender, NULL), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pthread_create(&r[i], NULL, tail_reader, NULL), 0);
	struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
	nanosleep(&ts, NULL);
	atomic_store(&tstop, 1);
	pthread_join(w, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(r[i], NULL);
	CHECK_EQ(wbc_fsync(tf), 0);
	int64_t size = wbc_file_size(tf);
	long bad = 0;
	for (uint64_t o = 0; o < (uint64_t)size; o += PS) {
		ssize_t n = wbc_pread(tf, b, PS, o);
		CHECK(n > 0);
		for (ssize_t i = 0; i < n; i++)
			bad += b[i] != pat(o + (uint64_t)i);
	}
	printf("append race: %lld bytes appended, %ld reads wrong, %ld bytes wrong at the end\n",
	       (long long)size - 64 * PS, (long)atomic_load(&tbad), bad);
	CHECK_EQ(atomic_load(&tbad), 0);
	CHECK_EQ(bad, 0);
	wbc_file_close(tf);
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* preadv of the process: with bad_from set, a read of a descriptor of a
 * file of BAD_SIZE bytes stops short before bad_from and a read from it
 * fails with EIO, as a read over a bad sector does. */
#define BAD_SIZE (256 * KiB)
static _Atomic uint64_t bad_from = UINT64_MAX;
/* with grow_on_short set, a file of GROW_SIZE bytes grows right after a
 * read of it returns (see case_pool_grown) */
#define GROW_SIZE 5000
static atomic_bool grow_on_short;

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);
	if (!real)
		real = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "preadv");
	uint64_t from = atomic_load(&bad_from);
	struct stat st;
	if (atomic_load(&grow_on_short) && !fstat(fd, &st) && S_ISREG(st.st_mode) &&
	    st.st_size == (off_t)GROW_SIZE) {
		/* the file grows (another page's writeback) once this read
		 * has found its end */
		ssize_t r = real(fd, iov, cnt, off);
		if (r > 0 && ftruncate(fd, 3 * GROW_SIZE))
			r = -1;
		return r;
	}
	if (from == UINT64_MAX || fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    st.st_size != (off_t)BAD_SIZE)
		return real(fd, iov, cnt, off);
	if ((uint64_t)off >= from) {
		errno = EIO;
		return -1;
	}
	struct iovec v[cnt];
	size_t room = (size_t)(from - (uint64_t)off);
	int k = 0;
	for (; k < cnt && room; k++) {
		v[k] = iov[k];
		if (v[k].iov_len > room)
			v[k].iov_len = room;
		room -= v[k].iov_len;
	}
	return real(fd, v, k, off);
}

/* 10. A write that fills the store part way into a file's last page,
 * past its size (the rest fails with ENOSPC), with on_error=drop: the
 * backend grew past the file's size, and its size is trimmed back all
 * the same (it stayed 6144 for a file of 5000 bytes: the failed write
 * was taken to have left the backend's size as it was). */
static void case_full_tail(void)
{
	reset_store();
	sb_size = 0;
	wbc_cache *c = open_cache();
	static int ctx;
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add_backend(c, &sb_ops, &ctx, "on_error=drop", &d), 0);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(d, "f", 0, &h), 0);
	memset(buf, 'B', 5000);
	CHECK_EQ(wbc_pwrite(h, buf, 5000, 0), 5000);
	CHECK_EQ(wbc_fsync(h), 0);
	CHECK_EQ(sb_backend_size(), 5000);
	sb_set_full_at(6144);
	CHECK_EQ(wbc_pwrite(h, "C", 1, 4500), 1);
	CHECK_EQ(wbc_fsync(h), -ENOSPC);   /* the page's write failed */
	sb_set_full_at(UINT64_MAX);
	CHECK_EQ(wbc_fsync(h), 0);          /* told once */
	uint64_t after_fsync = sb_backend_size();
	CHECK_EQ(wbc_file_close(h), 0);
	CHECK_EQ(wbc_cache_close(c), -ENOSPC);   /* the device's lost write, since no sync */
	printf("   backend size after the failed write: %llu at the next fsync, %llu at the close "
	       "(the file: 5000)\n", (unsigned long long)after_fsync,
	       (unsigned long long)sb_backend_size());
	CHECK_EQ(after_fsync, 5000);
	CHECK_EQ(sb_backend_size(), 5000);
	CHECK(sb_is(0, 4500, 'B') && sb_is(4501, 5000, 'B'));
}

static void case_pool_partial(void)
{
	char *dir = t_mkdtemp();
	char path[512], spec[600];
	snprintf(path, sizeof(path), "%s/disk", dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	static char a[BAD_SIZE];
	memset(a, 'A', sizeof(a));
	CHECK_EQ(write(fd, a, sizeof(a)), (ssize_t)sizeof(a));
	close(fd);
	snprintf(spec, sizeof(spec), "file:%s,uring=0,max_io=1M", path);
	wbc_cache *c = open_cache();
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add(c, spec, &d), 0);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(d, "", 0, &h), 0);
	atomic_store(&bad_from, 64 * KiB);
	static char b[BAD_SIZE];
	memset(b, '?', sizeof(b));
	/* one I/O of the whole file: 64 KiB read, then EIO */
	ssize_t r = wbc_pread(h, b, sizeof(b), 0);
	CHECK(r < 0 || r <= (ssize_t)(64 * KiB));
	if (r > 0)
		CHECK_EQ(count_not(b, (size_t)r, 'A'), 0);
	CHECK_EQ(wbc_pread(h, b, 4 * KiB, 128 * KiB), -EIO);
	atomic_store(&bad_from, UINT64_MAX);
	CHECK_EQ(wbc_pread(h, b, sizeof(b), 0), (ssize_t)sizeof(b));
	CHECK_EQ(count_not(b, sizeof(b), 'A'), 0);
	wbc_file_close(h);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
}

/* An argument runs that case alone. */
/* 11. The file backend's worker threads (uring=0) reading a file whose
 * O_DIRECT read ends off the alignment (its end, 5000 bytes), while it
 * grows (another page's writeback extends it): the read ends there, as on
 * the ring.  It was read on from 5000, an offset O_DIRECT refuses: the
 * read failed with EINVAL. */
static void case_pool_grown(void)
{
	char *dir = t_mkdtemp();
	char path[512], spec[600];
	snprintf(path, sizeof(path), "%s/disk", dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	CHECK(fd >= 0);
	memset(buf, 'A', GROW_SIZE);
	CHECK_EQ(write(fd, buf, GROW_SIZE), GROW_SIZE);
	close(fd);
	snprintf(spec, sizeof(spec), "file:%s,uring=0", path);
	wbc_cache *c = open_cache();
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add(c, spec, &d), 0);
	wbc_file *h;
	CHECK_EQ(wbc_file_open(d, "", 0, &h), 0);
	memset(buf, '?', 8192);
	atomic_store(&grow_on_short, true);
	ssize_t n = wbc_pread(h, buf, 8192, 0);
	atomic_store(&grow_on_short, false);
	printf("   a read of 8 KiB of 5000 bytes that grow meanwhile: %zd\n", n);
	CHECK_EQ(n, GROW_SIZE);
	CHECK_EQ(count_not(buf, GROW_SIZE, 'A'), 0);
	CHECK_EQ(wbc_file_close(h), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
}

int main(int argc, char **argv)
{
	int only = argc > 1 ? atoi(argv[1]) : 0;
	if (!only || only == 1) {
		case_read_run();
		printf("1. read run with a failed I/O: error, nothing cached\n");
	}
	if (!only || only == 2) {
		case_stacked_read();
		printf("2. stacked device, lower read failed: error\n");
	}
	if (!only || only == 3) {
		case_remove();
		printf("3. refused remove keeps the file\n");
	}
	if (!only || only == 4) {
		case_dev_sync_error();
		printf("4. a lower device's lost write: dev_sync and fsync both report it\n");
	}
	if (!only || only == 5) {
		case_min_ratio();
		printf("5. a refused add leaves min_ratio's sum\n");
	}
	if (!only || only == 6) {
		case_append_race(2.0);
		printf("6. reads of an appended tail\n");
	}
	if (!only || only == 7) {
		case_flush_error_scope();
		printf("7. a failed device flush: the error of the file written since, not of others\n");
	}
	if (!only || only == 8) {
		case_stacked_direct_tail();
		printf("8. a direct stacked device reads its unaligned last page\n");
	}
	if (!only || only == 9) {
		case_pool_partial();
		printf("9. a worker's read failed after part of it: error, not zeros\n");
	}
	if (!only || only == 10) {
		case_full_tail();
		printf("10. a write that filled the store past the file's end: size trimmed\n");
	}
	if (!only || only == 11) {
		case_pool_grown();
		printf("11. a worker's direct read that ends off the alignment ends there\n");
	}
	return 0;
}
