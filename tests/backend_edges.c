/*
 * Backends below the engine, at the edges of their contract
 * (include/wbcache_backend.h):
 *   1. A backend that completes inline (inside submit) and writes at most
 *      a sector per I/O, with a large max_io: every short write's rest is
 *      submitted again from inside its completion; a 64 MiB I/O is 131072
 *      of them.  The file is written back whole (the engine's stack did
 *      not grow with each rest: it overflowed).
 *   2. A stacked device over a device whose backend's largest file is not
 *      a whole number of pages (10000 bytes: 8192 through the lower
 *      cache): the stacked device refuses a write from 8192 on (-EFBIG)
 *      and cuts one across it, as the lower device does, instead of
 *      taking it into its cache and failing its writeback for good; in
 *      stack_throttle=direct too, whose writes the lower device holds
 *      to the same 8192 (direct took up to 10000).
 *   3. A backend of queue_depth UINT_MAX ("any number"): the device is
 *      made (its pool of a bio per I/O in flight was asked for at once:
 *      -ENOMEM) and writes back.
 *   4. A backend of queue_depth 1 completing from its own thread: a
 *      direct write of 1 MiB (16 I/Os of its max_io) has at most one of
 *      them in flight at a time (it had 16).
 *   5. A backend whose results are outside the contract (a positive
 *      "EIO" from open, resize, flush or remove; a read completed with
 *      -100000 or below INT_MIN): each is -EIO to the caller (open
 *      returned 5 and no handle, resize and flush aborted in an assert,
 *      remove returned 1, the read gave -100000, or zeros as data).
 *   6. A child forked after the parent used wbcache uses it too (an
 *      assert that it held no lock it held: the parent's thread id).
 *      A backend that completes an I/O twice (a write, a read): the
 *      process stops at once with a message that says so (the write
 *      tripped an unrelated assert, the read hung for good); so does one
 *      that completes a write and then refuses it in submit.
 *   7. A device's bio pool is bounded by what the cache can have in
 *      flight: a backend of max_io 1 GiB and queue_depth 4096 on a 1 MiB
 *      cache of 512-byte pages is added (it was refused: "cannot start
 *      the flusher: Cannot allocate memory"), and with 4 KiB pages it
 *      reserves well under 1 GiB (VmSize grew ~25 GB), as does
 *      model:max_io=64M,qd=4096 on a 64 MiB cache of 512-byte pages
 *      (12.8 GB); the device still writes back.
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))

#define MiB (1u << 20)

/* ------------------------------------------------------------------ */
/* 1. short writes of a sector, completed inline */

static pthread_mutex_t sec_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *sec_store;
static size_t sec_cap, sec_size;
static unsigned long sec_ios;
static uint64_t sec_max_file;    /* caps.max_file_size */
static unsigned sec_qd = 4;      /* caps.queue_depth */
static size_t sec_max_io = 64 * MiB;   /* caps.max_io */
static int sec_dummy;

static void sec_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = sec_max_io;
	c->queue_depth = sec_qd;
	c->max_file_size = sec_max_file;
}

static int sec_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)name; (void)flags;
	*file = &sec_dummy;
	pthread_mutex_lock(&sec_lock);
	*size = sec_size;
	pthread_mutex_unlock(&sec_lock);
	return 0;
}

static void sec_close(void *ctx, void *file) { (void)ctx; (void)file; }

static int sec_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		size_t want = io->op == WBC_IO_WRITE ? MIN(io->len, (size_t)512) : io->len;
		size_t done = 0;
		pthread_mutex_lock(&sec_lock);
		sec_ios++;
		for (int k = 0; k < io->iovcnt && done < want; k++) {
			size_t m = MIN(io->iov[k].iov_len, want - done);
			uint64_t at = io->off + done;
			if (io->op == WBC_IO_WRITE) {
				CHECK(at + m <= sec_cap);
				memcpy(sec_store + at, io->iov[k].iov_base, m);
				if (at + m > sec_size)
					sec_size = at + m;
			} else {
				m = at >= sec_size ? 0 : MIN(m, sec_size - at);
				memcpy(io->iov[k].iov_base, sec_store + at, m);
				if (m < io->iov[k].iov_len) {
					done += m;
					break;
				}
			}
			done += m;
		}
		pthread_mutex_unlock(&sec_lock);
		io->res = (ssize_t)done;
	}
	wbc_io_complete_batch(ios, n);   /* inline, none of our locks held */
	return 0;
}

static int sec_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file;
	pthread_mutex_lock(&sec_lock);
	if (size > sec_cap) {
		pthread_mutex_unlock(&sec_lock);
		return -EFBIG;
	}
	if (size > sec_size)
		memset(sec_store + sec_size, 0, size - sec_size);
	sec_size = size;
	pthread_mutex_unlock(&sec_lock);
	return 0;
}

static void sec_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops sec_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "sector",
	.caps = sec_caps,
	.open = sec_open,
	.close = sec_close,
	.submit = sec_submit,
	.resize = sec_resize,
	.destroy = sec_destroy,
};

static void short_inline(void)
{
	size_t len = 64 * MiB;
	sec_cap = len;
	CHECK((sec_store = calloc(1, sec_cap)));
	struct wbc_config cfg = t_config(160 * MiB, 4096);
	cfg.dirty_writeback_centisecs = 0;
	cfg.dirty_ratio = 80;
	cfg.dirty_background_ratio = 70;
	wbc_cache *c;
	wbc_dev *d;
	char msg[256];
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_backend_msg(c, &sec_ops, NULL, NULL, &d, msg, sizeof(msg)), 0);
	char *buf = malloc(len);
	CHECK(buf);
	t_fill(buf, len, 7);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(d, "f", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, len, 0), (ssize_t)len);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(sec_size, len);
	CHECK(!memcmp(sec_store, buf, len));
	printf("1. %lu I/Os of at most 512 bytes, inline: %zu bytes written back\n", sec_ios,
	       sec_size);
	free(buf);
	free(sec_store);
}

/* ------------------------------------------------------------------ */
/* 2. a stacked device's largest file is the lower device's */

static void stack_max_file(void)
{
	/* each mode: through the lower cache, and direct (the lower
	 * device's direct writes are held to its limit too: direct took a
	 * write across 8192 whole, to fail with EFBIG at every writeback) */
	for (int direct = 0; direct < 2; direct++) {
		sec_cap = 64 << 10;
		sec_size = 0;
		sec_max_file = 10000;   /* not a multiple of the page: the device's is 8192 */
		CHECK((sec_store = calloc(1, sec_cap)));
		wbc_cache *lc = t_quiet_cache(16 * MiB), *uc = t_quiet_cache(16 * MiB);
		wbc_dev *lower, *up;
		char msg[256];
		CHECK_EQ(wbc_dev_add_backend_msg(lc, &sec_ops, NULL, NULL, &lower, msg, sizeof(msg)),
			 0);
		wbc_file *lf, *f;
		char buf[1000];
		memset(buf, 0x5a, sizeof(buf));
		/* the lower device itself: from 8192 on -EFBIG, across it short */
		CHECK_EQ(wbc_file_open(lower, "x", WBC_O_CREAT, &lf), 0);
		CHECK_EQ(wbc_pwrite(lf, buf, 100, 9000), -EFBIG);
		CHECK_EQ(wbc_pwrite(lf, buf, 1000, 8000), 192);
		CHECK_EQ(wbc_file_close(lf), 0);
		CHECK_EQ(wbc_file_open(lower, "d", WBC_O_CREAT | WBC_O_DIRECT, &lf), 0);
		CHECK_EQ(wbc_pwrite(lf, buf, 100, 9000), -EFBIG);
		CHECK_EQ(wbc_pwrite(lf, buf, 1000, 8000), 192);
		CHECK_EQ(wbc_file_close(lf), 0);
		CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", direct ? "stack_throttle=direct,"
					     "retry_timeout=1" : NULL, &up, msg, sizeof(msg)), 0);
		CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
		/* the same through the stacked device: never taken into its
		 * cache to fail at writeback for good */
		ssize_t r1 = wbc_pwrite(f, buf, 100, 9000), r2 = wbc_pwrite(f, buf, 1000, 8000);
		int e = wbc_fsync(f);
		printf("2. stacked%s over a device whose largest file is 8192: a write at 9000 -> "
		       "%zd, one across 8192 -> %zd, fsync %d\n", direct ? " (direct)" : "", r1, r2,
		       e);
		CHECK_EQ(r1, -EFBIG);
		CHECK_EQ(r2, 192);
		CHECK_EQ(e, 0);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(uc), 0);
		CHECK_EQ(wbc_cache_close(lc), 0);
		CHECK_EQ(sec_size, 8192);
		free(sec_store);
		sec_max_file = 0;
	}
}

/* ------------------------------------------------------------------ */
/* 3. a queue depth of "no limit" */

static void deep_queue(void)
{
	sec_cap = 4 * MiB;
	sec_size = 0;
	sec_qd = UINT32_MAX;
	CHECK((sec_store = calloc(1, sec_cap)));
	wbc_cache *c = t_quiet_cache(16 * MiB);
	wbc_dev *d;
	char msg[256] = "";
	int err = wbc_dev_add_backend_msg(c, &sec_ops, NULL, NULL, &d, msg, sizeof(msg));
	printf("3. queue_depth=%u: %d %s\n", sec_qd, err, msg);
	CHECK_EQ(err, 0);
	t_stream(d, NULL, "f", 4 * MiB, 3, 1);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(sec_size, 4 * MiB);
	free(sec_store);
	sec_qd = 4;
}

/* ------------------------------------------------------------------ */
/* 4. one direct call keeps to the queue depth */

static atomic_int qd_in, qd_max;
static pthread_mutex_t qd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qd_cond = PTHREAD_COND_INITIALIZER;
static struct wbc_io *qd_q[64];
static int qd_n;
static bool qd_stop;

static void qd_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = 64 << 10;
	c->queue_depth = 1;
}

static void *qd_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&qd_lock);
	for (;;) {
		while (!qd_n && !qd_stop)
			pthread_cond_wait(&qd_cond, &qd_lock);
		if (!qd_n)
			break;
		struct wbc_io *io = qd_q[0];
		memmove(qd_q, qd_q + 1, (size_t)--qd_n * sizeof(*qd_q));
		pthread_mutex_unlock(&qd_lock);
		struct timespec ts = { 0, 200 * 1000 };   /* room for another to arrive */
		nanosleep(&ts, NULL);
		if (io->op == WBC_IO_READ)
			for (int k = 0; k < io->iovcnt; k++)
				memset(io->iov[k].iov_base, 0, io->iov[k].iov_len);
		atomic_fetch_sub(&qd_in, 1);
		wbc_io_complete(io, (ssize_t)io->len);
		pthread_mutex_lock(&qd_lock);
	}
	pthread_mutex_unlock(&qd_lock);
	return NULL;
}

static int qd_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	pthread_mutex_lock(&qd_lock);
	for (unsigned i = 0; i < n; i++) {
		int v = atomic_fetch_add(&qd_in, 1) + 1;
		if (v > atomic_load(&qd_max))
			atomic_store(&qd_max, v);
		CHECK(qd_n < 64);
		qd_q[qd_n++] = ios[i];
	}
	pthread_cond_signal(&qd_cond);
	pthread_mutex_unlock(&qd_lock);
	return 0;
}

static int qd_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)name; (void)flags;
	*file = &sec_dummy;
	*size = 0;
	return 0;
}

static int qd_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file; (void)size;
	return 0;
}

static const struct wbc_backend_ops qd_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "qd1",
	.caps = qd_caps,
	.open = qd_open,
	.close = sec_close,
	.submit = qd_submit,
	.resize = qd_resize,
	.destroy = sec_destroy,
};

static void direct_depth(void)
{
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, qd_thread, NULL), 0);
	wbc_cache *c = t_quiet_cache(16 * MiB);
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add_backend(c, &qd_ops, NULL, NULL, &d), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(d, "f", WBC_O_CREAT | WBC_O_DIRECT, &f), 0);
	char *buf = aligned_alloc(4096, MiB);
	CHECK(buf);
	memset(buf, 0x11, MiB);
	CHECK_EQ(wbc_pwrite(f, buf, MiB, 0), (ssize_t)MiB);
	int w = atomic_load(&qd_max);
	atomic_store(&qd_max, 0);
	CHECK_EQ(wbc_pread(f, buf, MiB, 0), (ssize_t)MiB);
	int r = atomic_load(&qd_max);
	printf("4. queue_depth 1, direct 1 MiB in I/Os of 64 KiB: at most %d in flight "
	       "writing, %d reading\n", w, r);
	CHECK_EQ(w, 1);
	CHECK_EQ(r, 1);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	pthread_mutex_lock(&qd_lock);
	qd_stop = true;
	pthread_cond_signal(&qd_cond);
	pthread_mutex_unlock(&qd_lock);
	pthread_join(t, NULL);
	free(buf);
}

/* ------------------------------------------------------------------ */
/* 5. results outside the contract                                      */

static int odd_open_ret, odd_resize_ret, odd_flush_ret, odd_remove_ret;
static ssize_t odd_read_res;     /* 0: the sector backend's own result */
static bool odd_bad_queued;
static uint64_t odd_open_size;   /* not 0: the size open() gives */
static int odd_closes;      /* submit: -EIO, *queued past n, none queued */

static int odd_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	if (odd_open_ret)
		return odd_open_ret;
	int r = sec_open(ctx, name, flags, file, size);
	if (!r && odd_open_size)
		*size = odd_open_size;
	return r;
}

static void odd_close(void *ctx, void *file)
{
	odd_closes++;
	sec_close(ctx, file);
}

static int odd_resize(void *ctx, void *file, uint64_t size)
{
	return odd_resize_ret ? odd_resize_ret : sec_resize(ctx, file, size);
}

static int odd_flush(void *ctx, void *file, unsigned flags)
{
	(void)ctx; (void)file; (void)flags;
	return odd_flush_ret;
}

static int odd_remove(void *ctx, void *file)
{
	(void)ctx; (void)file;
	return odd_remove_ret;
}

static int odd_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	if (odd_bad_queued) {
		*queued = n + 5;
		return -EIO;
	}
	for (unsigned i = 0; i < n; i++) {
		if (ios[i]->op == WBC_IO_READ && odd_read_res) {
			wbc_io_complete(ios[i], odd_read_res);
			continue;
		}
		CHECK_EQ(sec_submit(ctx, &ios[i], 1, queued), 0);
	}
	return 0;
}

static const struct wbc_backend_ops odd_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "odd",
	.caps = sec_caps,
	.open = odd_open,
	.close = odd_close,
	.submit = odd_submit,
	.flush = odd_flush,
	.resize = odd_resize,
	.destroy = sec_destroy,
	.remove = odd_remove,
};

static void odd_results(void)
{
	sec_cap = 1 * MiB;
	sec_size = 0;
	CHECK((sec_store = calloc(1, sec_cap)));
	memset(sec_store, 0x77, 64 << 10);
	sec_size = 64 << 10;     /* the backend holds 64 KiB of 0x77 */
	wbc_cache *c = t_quiet_cache(16 * MiB);
	wbc_dev *d;
	wbc_file *f = NULL;
	CHECK_EQ(wbc_dev_add_backend(c, &odd_ops, NULL, "on_error=drop", &d), 0);
	odd_open_ret = EIO;
	int r = wbc_file_open(d, "f", WBC_O_CREAT, &f);
	printf("5. open() returning EIO (positive): wbc_file_open %d\n", r);
	CHECK_EQ(r, -EIO);
	CHECK(!f);
	odd_open_ret = -(1 << 20);
	r = wbc_file_open(d, "f", WBC_O_CREAT, &f);
	printf("   open() returning -(1 << 20): wbc_file_open %d\n", r);
	CHECK_EQ(r, -EIO);
	odd_open_ret = 0;
	/* a size past 2^62, which no offset reaches: refused, and closed */
	odd_open_size = (1ULL << 62) + 1;
	int closes = odd_closes;
	r = wbc_file_open(d, "f", WBC_O_CREAT, &f);
	printf("   open() giving size 2^62 + 1: wbc_file_open %d\n", r);
	CHECK_EQ(r, -EOVERFLOW);
	CHECK(!f);
	CHECK_EQ(odd_closes, closes + 1);
	odd_open_size = 1ULL << 62;      /* the last size there is */
	CHECK_EQ(wbc_file_open(d, "f", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_size(f), (int64_t)(1ULL << 62));
	CHECK_EQ(wbc_file_close(f), 0);
	odd_open_size = 0;

	/* reads completed with no errno: an error, never data */
	char buf[8192];
	static const ssize_t bad_res[] = { -100000, -((ssize_t)1 << 32), -((ssize_t)1 << 32) + 100 };
	for (unsigned i = 0; i < sizeof(bad_res) / sizeof(bad_res[0]); i++) {
		CHECK_EQ(wbc_file_open(d, "f", 0, &f), 0);
		odd_read_res = bad_res[i];
		memset(buf, 0, sizeof(buf));
		ssize_t n = wbc_pread(f, buf, sizeof(buf), 0);
		printf("   a read completed with %zd: wbc_pread %zd\n", bad_res[i], n);
		CHECK_EQ(n, -EIO);
		odd_read_res = 0;
		CHECK_EQ(wbc_pread(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
		CHECK(buf[0] == 0x77 && buf[sizeof(buf) - 1] == 0x77);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_file_remove(d, "f"), 0);   /* its pages gone: read again */
		sec_size = 64 << 10;
	}

	/* resize, flush, remove returning a positive "EIO" */
	CHECK_EQ(wbc_file_open(d, "f", 0, &f), 0);
	odd_resize_ret = 1;
	r = wbc_truncate(f, 100);
	printf("   resize() returning 1: wbc_truncate %d\n", r);
	CHECK_EQ(r, -EIO);
	/* the size an fsync sets after writing back a page past the end */
	CHECK_EQ(wbc_pwrite(f, buf, 100, 64 << 10), 100);
	r = wbc_fsync(f);
	printf("   resize() returning 1: wbc_fsync %d\n", r);
	CHECK_EQ(r, -EIO);
	odd_resize_ret = 0;
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(sec_size, (64 << 10) + 100);
	odd_flush_ret = EIO;
	r = wbc_fsync(f);
	printf("   flush() returning EIO (positive): wbc_fsync %d\n", r);
	CHECK_EQ(r, -EIO);
	odd_flush_ret = 0;
	/* a refused submit that says it queued more than it was given: none
	 * taken as queued (the fsync waited for good) */
	CHECK_EQ(wbc_pwrite(f, buf, 100, 0), 100);
	odd_bad_queued = true;
	r = wbc_fsync(f);
	odd_bad_queued = false;
	printf("   submit() -EIO with *queued n + 5: wbc_fsync %d\n", r);
	CHECK_EQ(r, -EIO);
	CHECK_EQ(wbc_file_close(f), 0);
	odd_remove_ret = 1;
	r = wbc_file_remove(d, "f");
	printf("   remove() returning 1: wbc_file_remove %d\n", r);
	CHECK_EQ(r, -EIO);
	odd_remove_ret = 0;
	CHECK_EQ(wbc_dev_sync(d), -EIO);   /* the device's, once */
	CHECK_EQ(wbc_cache_close(c), 0);
	free(sec_store);
}

/* ------------------------------------------------------------------ */
/* 6. an I/O completed twice                                            */

static int twice_op = -1;        /* the op completed twice (inline) */

static int twice_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	if (twice_op == 2 && ios[0]->op == WBC_IO_WRITE) {
		/* completed, then refused: the engine ends them too */
		CHECK_EQ(sec_submit(ctx, ios, n, queued), 0);
		*queued = 0;
		return -EIO;
	}
	for (unsigned i = 0; i < n; i++) {
		CHECK_EQ(sec_submit(ctx, &ios[i], 1, queued), 0);
		if (ios[i]->op == twice_op)
			wbc_io_complete(ios[i], (ssize_t)ios[i]->len);
	}
	return 0;
}

static const struct wbc_backend_ops twice_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "twice",
	.caps = sec_caps,
	.open = sec_open,
	.close = sec_close,
	.submit = twice_submit,
	.resize = sec_resize,
	.destroy = sec_destroy,
};

/* In a child: a device whose backend completes @op twice, used; its
 * message (stderr) read into @msg.  Returns the child's wait status. */
static int twice_child(int op, char *msg, size_t msglen)
{
	int fds[2];
	CHECK_EQ(pipe(fds), 0);
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		dup2(fds[1], 2);
		close(fds[0]);
		alarm(60);   /* a hang (before the check) ends as a failure */
		sec_cap = 1 * MiB;
		sec_size = 64 << 10;
		CHECK((sec_store = calloc(1, sec_cap)));
		wbc_cache *c = t_quiet_cache(16 * MiB);
		wbc_dev *d;
		wbc_file *f;
		CHECK_EQ(wbc_dev_add_backend(c, &twice_ops, NULL, NULL, &d), 0);
		CHECK_EQ(wbc_file_open(d, "f", WBC_O_CREAT, &f), 0);
		char buf[4096] = { 1 };
		twice_op = op;
		for (int i = 0; i < 4; i++) {
			wbc_pread(f, buf, sizeof(buf), (uint64_t)i * sizeof(buf));
			wbc_pwrite(f, buf, sizeof(buf), (uint64_t)i * sizeof(buf));
			wbc_fsync(f);
		}
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), 0);
		_exit(0);
	}
	close(fds[1]);
	size_t got = 0;
	ssize_t k;
	while (got + 1 < msglen && (k = read(fds[0], msg + got, msglen - 1 - got)) > 0)
		got += (size_t)k;
	msg[got] = 0;
	close(fds[0]);
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	return st;
}

static void complete_twice(void)
{
	/* first none: a child forked after the parent used wbcache uses it
	 * too (it took the parent's thread id for its own: an assert) */
	wbc_cache *c = t_quiet_cache(16 * MiB);
	wbc_dev *d;
	wbc_file *f;
	CHECK_EQ(wbc_dev_add(c, "mem", &d), 0);
	CHECK_EQ(wbc_file_open(d, "f", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	char msg[1024];
	int st = twice_child(-1, msg, sizeof(msg));
	printf("6. a forked child using wbcache: %s %d \"%.*s\"\n",
	       WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
	       (int)strcspn(msg, "\n"), msg);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	static const char *const how[] = { "completing each read twice",
					   "completing each write twice",
					   "completing writes it refuses" };
	for (int op = 0; op < 3; op++) {
		st = twice_child(op, msg, sizeof(msg));
		printf("   a backend %s: %s %d, \"%.*s\"\n", how[op],
		       WIFSIGNALED(st) ? "signal" : "exit",
		       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
		       (int)strcspn(msg, "\n"), msg);
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
		CHECK(strstr(msg, "a broken backend"));
	}
}

/* ------------------------------------------------------------------ */
/* 7. the bio pool is bounded by the cache */

/* the growth of VmSize (kB) at adding @spec (NULL: the sector backend)
 * to a cache of @mem bytes in pages of @ps; the device writes back */
static long pool_add(const char *spec, uint64_t mem, uint32_t ps)
{
	struct wbc_config cfg = t_config(mem, ps);
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	wbc_dev *d;
	char msg[256] = "";
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	sec_size = 0;
	long before = t_status_kb("VmSize");
	int err = spec ? wbc_dev_add_msg(c, spec, &d, msg, sizeof(msg))
		       : wbc_dev_add_backend_msg(c, &sec_ops, NULL, NULL, &d, msg, sizeof(msg));
	long grew = t_status_kb("VmSize") - before;
	printf("7. %s, %zu-byte pages: add %d %s, VmSize +%ld kB\n",
	       spec ? spec : "max_io 1 GiB, queue_depth 4096", (size_t)ps, err, msg, grew);
	CHECK_EQ(err, 0);
	t_stream(d, NULL, "f", 256 << 10, 3, 1);
	CHECK_EQ(wbc_cache_close(c), 0);
	if (!spec)
		CHECK_EQ(sec_size, 256u << 10);
	return grew;
}

static void pool_bound(void)
{
	sec_cap = 4 * MiB;
	sec_qd = 4096;
	sec_max_io = (size_t)1 << 30;
	CHECK((sec_store = calloc(1, sec_cap)));
	pool_add(NULL, MiB, 512);
	CHECK(pool_add(NULL, MiB, 4096) < (1l << 20));
	CHECK(pool_add("model:max_io=64M,qd=4096", 64 * MiB, 512) < (1l << 20));
	free(sec_store);
	sec_qd = 4;
	sec_max_io = 64 * MiB;
}

/* backend_edges [N]: part N alone */
int main(int argc, char **argv)
{
	int only = argc > 1 ? atoi(argv[1]) : 0;
	void (*parts[])(void) = { short_inline, stack_max_file, deep_queue, direct_depth,
				  odd_results, complete_twice, pool_bound };
	for (int i = 0; i < 7; i++)
		if (!only || only == i + 1)
			parts[i]();
	printf("backend_edges: all passed\n");
	return 0;
}
