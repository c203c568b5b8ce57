/*
 * The backend conformance suite: the same checks against every backend
 * (mem, model, dir:, file:, the opener device, the dirstore example of
 * examples/, nbd against an nbdkit server where nbdkit is installed, rados
 * on the Ceph test cluster where it runs (tests/ceph.h), the
 * stacked device in each of its modes, over a model device in the same
 * cache), and against a torture backend written here on the public
 * interface that plays every freedom the contract gives a backend:
 * short writes, completions out of order, from its own thread or inline
 * in submit, one at a time or in batches, and failing writes.
 *
 * Each backend, through the engine (a 1 MiB cache, so files are larger
 * than the cache and reads miss):
 *   A  files written in odd-sized pieces read back right, from the
 *      backend itself (its read path) and through the cache (misses);
 *   B  partial pages overwritten in place;
 *   C  truncate down (not on a page boundary) and up (zeros), with the
 *      backend's size following (a device of fixed size, nbd: EFBIG
 *      beyond its end, EINVAL below it, O_TRUNC ignored);
 *   D  fsync and sync succeed (flush where the backend has one);
 *   E  4 threads writing at once, each its own range;
 *   F  (where faults can be injected) a write error is reported by fsync
 *      once to every handle open at the time (errseq), the data stays
 *      and is written once the fault ends.
 * The torture backend also checks the engine's side of the contract on
 * every I/O: len is the iovec's sum and at most max_io, backend_data is
 * zero at submit, and no two I/Os of a file in flight overlap; and each
 * of its modes must have been exercised (short writes seen, reordered
 * completions seen, ...), so a mode that silently did nothing fails.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "dirstore.h"
#include "nbdkit.h"
#include "ceph.h"

#include <fcntl.h>
#include <pthread.h>

#define MEM (1u << 20)
#define BIG (3u * 1024 * 1024 + 123)
#define MAX_IO (64u << 10)

static char *dir;
static uint64_t seed = 1;

/* ------------------------------------------------------------------ */
/* the torture backend                                                  */

enum {
	T_SHORT = 1,      /* writes complete short (the engine sends the rest) */
	T_REORDER = 2,    /* completions in reverse order of submission */
	T_BATCH = 4,      /* wbc_io_complete_batch, else one by one */
	T_INLINE = 8,     /* completed in submit, before it returns */
};

struct tfile {
	char name[64];
	char *data;
	size_t size, cap;
	bool used;
};

#define T_FILES 64
#define T_PEND 1024
struct torture {
	unsigned mode;
	pthread_mutex_t lock;       /* everything below */
	pthread_cond_t cond;
	struct tfile files[T_FILES];
	struct wbc_io *pend[T_PEND];
	unsigned npend;
	bool stop, fail;
	uint64_t rng;
	pthread_t thread;
	/* what happened */
	unsigned long shorts, reordered, batches, singles, inlined, failed, ios;
	size_t max_read;            /* the largest read I/O */
};

static void t_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->queue_depth = 16;
	caps->max_io = MAX_IO;
}

static int t_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct torture *t = ctx;
	CHECK(strlen(name) < sizeof(t->files[0].name));
	pthread_mutex_lock(&t->lock);
	struct tfile *free_slot = NULL, *f = NULL;
	for (int i = 0; i < T_FILES && !f; i++) {
		if (t->files[i].used && !strcmp(t->files[i].name, name))
			f = &t->files[i];
		else if (!t->files[i].used && !free_slot)
			free_slot = &t->files[i];
	}
	if (!f && (flags & WBC_OPEN_CREATE) && free_slot) {
		f = free_slot;
		f->used = true;
		strcpy(f->name, name);
	}
	int err = f ? 0 : (flags & WBC_OPEN_CREATE) ? -ENOSPC : -ENOENT;
	if (f) {
		*file = f;
		*size = f->size;
	}
	pthread_mutex_unlock(&t->lock);
	return err;
}

static void t_close(void *ctx, void *file)
{
	(void)ctx;
	(void)file;
}

/* t->lock held: make @f at least @size bytes (zeros). */
static void t_grow(struct tfile *f, size_t size)
{
	if (size > f->cap) {
		size_t cap = size * 2;
		CHECK((f->data = realloc(f->data, cap)));
		f->cap = cap;
	}
	if (size > f->size)
		memset(f->data + f->size, 0, size - f->size);
	if (size > f->size)
		f->size = size;
}

/* Do @io on the store (t->lock held): its result. */
static ssize_t t_do(struct torture *t, struct wbc_io *io)
{
	struct tfile *f = io->file;
	size_t want = io->len;
	if (io->op == WBC_IO_WRITE) {
		if (t->fail) {
			t->failed++;
			return -EIO;
		}
		if ((t->mode & T_SHORT) && want > 1) {
			want = 1 + (size_t)(t_rand(&t->rng) % (want - 1));
			t->shorts++;
		}
		t_grow(f, io->off + want);
	}
	size_t done = 0;
	for (int i = 0; i < io->iovcnt && done < want; i++) {
		size_t n = WBC_MIN(io->iov[i].iov_len, want - done);
		uint64_t at = io->off + done;
		if (io->op == WBC_IO_WRITE) {
			memcpy(f->data + at, io->iov[i].iov_base, n);
		} else {
			n = at >= f->size ? 0 : WBC_MIN(n, f->size - at);
			memcpy(io->iov[i].iov_base, f->data + at, n);
			if (n < io->iov[i].iov_len) {
				done += n;
				break;   /* the file ends here: a short read */
			}
		}
		done += n;
	}
	return (ssize_t)done;
}

/* The engine's side of the contract, checked at each submit (lock held). */
static void t_check_io(struct torture *t, struct wbc_io *io)
{
	size_t sum = 0;
	for (int i = 0; i < io->iovcnt; i++)
		sum += io->iov[i].iov_len;
	CHECK(io->iovcnt >= 1 && sum == io->len && io->len >= 1);
	CHECK(io->len <= MAX_IO);
	CHECK(!io->backend_data[0] && !io->backend_data[1]);
	CHECK(io->op == WBC_IO_READ || io->op == WBC_IO_WRITE);
	for (unsigned i = 0; i < t->npend; i++) {
		struct wbc_io *o = t->pend[i];
		if (o->file == io->file)
			CHECK(io->off + io->len <= o->off || o->off + o->len <= io->off);
	}
}

/* Complete @ios (none of our locks held), as the mode says. */
static void t_complete(struct torture *t, struct wbc_io **ios, unsigned n)
{
	if (t->mode & T_BATCH) {
		wbc_io_complete_batch(ios, n);
	} else {
		for (unsigned i = 0; i < n; i++)
			wbc_io_complete(ios[i], ios[i]->res);
	}
}

static int t_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct torture *t = ctx;
	pthread_mutex_lock(&t->lock);
	for (unsigned i = 0; i < n; i++) {
		t_check_io(t, ios[i]);
		if (ios[i]->op == WBC_IO_READ && ios[i]->len > t->max_read)
			t->max_read = ios[i]->len;
	}
	t->ios += n;
	if (t->mode & T_INLINE) {
		struct wbc_io *done[64];
		CHECK(n <= 64);
		for (unsigned i = 0; i < n; i++) {
			done[i] = ios[i];
			done[i]->res = t_do(t, done[i]);
		}
		t->inlined += n;
		t->batches += (t->mode & T_BATCH) != 0;
		t->singles += (t->mode & T_BATCH) ? 0 : n;
		pthread_mutex_unlock(&t->lock);
		*queued = n;
		t_complete(t, done, n);
		return 0;
	}
	CHECK(t->npend + n <= T_PEND);
	for (unsigned i = 0; i < n; i++)
		t->pend[t->npend++] = ios[i];
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	*queued = n;
	return 0;
}

static void *t_main(void *arg)
{
	struct torture *t = arg;
	pthread_mutex_lock(&t->lock);
	for (;;) {
		while (!t->npend && !t->stop)
			pthread_cond_wait(&t->cond, &t->lock);
		if (!t->npend)
			break;
		/* let a few gather, so there is an order to change */
		pthread_mutex_unlock(&t->lock);
		usleep(200);
		pthread_mutex_lock(&t->lock);
		unsigned n = t->npend;
		struct wbc_io *ios[T_PEND];
		for (unsigned i = 0; i < n; i++)
			ios[i] = t->pend[(t->mode & T_REORDER) ? n - 1 - i : i];
		if ((t->mode & T_REORDER) && n > 1)
			t->reordered++;
		t->npend = 0;
		for (unsigned i = 0; i < n; i++)
			ios[i]->res = t_do(t, ios[i]);
		t->batches += (t->mode & T_BATCH) != 0;
		t->singles += (t->mode & T_BATCH) ? 0 : n;
		pthread_mutex_unlock(&t->lock);
		t_complete(t, ios, n);
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static int t_resize(void *ctx, void *file, uint64_t size)
{
	struct torture *t = ctx;
	struct tfile *f = file;
	pthread_mutex_lock(&t->lock);
	for (unsigned i = 0; i < t->npend; i++)
		CHECK(t->pend[i]->file != file || t->pend[i]->op == WBC_IO_READ);
	if (size < f->size)
		f->size = size;
	else
		t_grow(f, size);
	pthread_mutex_unlock(&t->lock);
	return 0;
}

static void t_destroy(void *ctx)
{
	struct torture *t = ctx;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	for (int i = 0; i < T_FILES; i++)
		free(t->files[i].data);
	printf("    torture: %lu I/Os, %lu short, %lu reordered batches, %lu batch and %lu single "
	       "completions, %lu inline, %lu failed\n", t->ios, t->shorts, t->reordered, t->batches,
	       t->singles, t->inlined, t->failed);
	/* every mode asked for was exercised */
	CHECK(!(t->mode & T_SHORT) || t->shorts > 0);
	CHECK(!(t->mode & T_REORDER) || t->reordered > 0);
	CHECK(!(t->mode & T_BATCH) || t->batches > 0);
	CHECK((t->mode & T_BATCH) || t->singles > 0);
	CHECK(!(t->mode & T_INLINE) || t->inlined > 0);
	CHECK(t->failed > 0);   /* check F ran */
	/* a read of many pages missing from the cache was one I/O, not one
	 * per page (check A reads 3 MiB at once through a 1 MiB cache) */
	CHECK(t->max_read > 4096);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
	free(t);
}

static const struct wbc_backend_ops torture_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "torture",
	.caps = t_caps,
	.open = t_open,
	.close = t_close,
	.submit = t_submit,
	.resize = t_resize,
	.destroy = t_destroy,
};

/* ------------------------------------------------------------------ */
/* the backends under test                                              */

struct bcase {
	const char *name;
	const char *spec;           /* a device spec, or NULL: made by make() */
	bool one_file;
	unsigned tmode;             /* torture: its mode */
	int kind;                   /* fault injection: see fault() */
};
enum { K_NONE, K_MODEL, K_FILE, K_TORTURE, K_OPENER, K_DIRSTORE, K_NBD, K_STACK, K_RADOS };
static const char *ceph_dir;

/* The case under way is a device of fixed size (an NBD export): the
 * backend's size is the device's, at least what was written, and does not
 * follow truncation. */
static bool fixed_size;
/* K_STACK: the spec is the stacked device's, over device 0 of the same
 * cache, a model device (faults are injected there, under it) */
#define STACK_LOWER "model:lat=50us,qd=8,max_io=64K,retry_timeout=60"
static wbc_dev *stack_lower;

static int opener_open(void *ctx, const char *name, int flags)
{
	int fd = openat(*(int *)ctx, name, flags | O_CREAT, 0644);
	return fd < 0 ? -errno : fd;
}
static int opener_dirfd = -1;

static void fault(const struct bcase *b, wbc_dev *dev, bool on)
{
	switch (b->kind) {
	case K_MODEL:
		model_set_faults(dev, 0, on ? UINT64_MAX / 2 : 0, 0);
		break;
	case K_FILE:
	case K_OPENER:
		file_fail_submits(dev, on ? 1000000 : 0, -EIO);
		break;
	case K_NBD: {
		/* nbdkit's error filter fails writes while this file exists */
		char trigger[700];
		snprintf(trigger, sizeof(trigger), "%s/nbd-errors", dir);
		if (on)
			CHECK(!mknod(trigger, S_IFREG | 0644, 0));
		else
			CHECK(!unlink(trigger));
		break;
	}
	case K_RADOS:
		rados_fail_writes(dev, on);
		break;
	case K_STACK:
		model_set_faults(stack_lower, 0, on ? UINT64_MAX / 2 : 0, 0);
		break;
	case K_TORTURE: {
		struct torture *t = wbc_dev_backend(dev, NULL);
		pthread_mutex_lock(&t->lock);
		t->fail = on;
		pthread_mutex_unlock(&t->lock);
		break;
	}
	}
}

static const char *fname(const struct bcase *b, const char *name)
{
	return b->one_file ? "" : name;
}

/* The backend's bytes of @name equal @want (@len bytes): read with the
 * backend's own read path, in page-sized aligned reads as the engine
 * makes them (O_DIRECT backends need that). */
static void check_backend(wbc_dev *dev, const char *name, const char *want, size_t len)
{
	size_t cap = (len + 4096) & ~(size_t)4095;
	char *back = aligned_alloc(4096, cap);
	void *obj;
	uint64_t size, off = 0;
	CHECK(back);
	CHECK_EQ(backend_open(dev->be, name, false, &obj, &size), 0);
	if (fixed_size)
		CHECK(size >= len);
	else
		CHECK_EQ(size, len);
	for (;;) {
		ssize_t n = backend_read_sync(dev->be, obj, back + off, 4096, off);
		CHECK(n >= 0 && n <= 4096);
		off += (uint64_t)n;
		if (n < 4096 || (fixed_size && off >= len))
			break;
	}
	backend_close(dev->be, obj);
	CHECK_EQ(fixed_size ? WBC_MIN(off, len) : off, len);
	CHECK(!memcmp(back, want, len));
	free(back);
}

/* Through the cache (the 1 MiB cache holds a fraction of it: misses). */
static void check_cached(wbc_file *f, const char *want, size_t len)
{
	char *back = malloc(len + 1);
	CHECK(back);
	ssize_t n = wbc_pread(f, back, len + 1, 0);
	if (fixed_size)   /* a device: its size, whatever was written */
		CHECK(n >= (ssize_t)len);
	else
		CHECK_EQ(n, (ssize_t)len);
	CHECK(!memcmp(back, want, len));
	free(back);
}

struct writer {
	wbc_dev *dev;
	const char *name;
	uint64_t base;
	char *data;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	wbc_file *f;
	CHECK_EQ(wbc_file_open(w->dev, w->name, WBC_O_CREAT, &f), 0);
	/* 4 KiB pieces in a shuffled order */
	unsigned order[128];
	uint64_t s = w->base + 7;
	for (unsigned i = 0; i < 128; i++)
		order[i] = i;
	for (unsigned i = 127; i > 0; i--) {
		unsigned j = (unsigned)(t_rand(&s) % (i + 1)), x = order[i];
		order[i] = order[j];
		order[j] = x;
	}
	for (unsigned i = 0; i < 128; i++)
		CHECK_EQ(wbc_pwrite(f, w->data + order[i] * 4096u, 4096, w->base + order[i] * 4096u),
			 4096);
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

static void run_case(const struct bcase *b)
{
	printf("  %s\n", b->name);
	fflush(stdout);
	struct wbc_config cfg = t_config(MEM, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	char msg[256], spec[700];
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	if (b->kind == K_TORTURE) {
		struct torture *t = calloc(1, sizeof(*t));
		CHECK(t);
		t->mode = b->tmode;
		t->rng = 12345;
		pthread_mutex_init(&t->lock, NULL);
		pthread_cond_init(&t->cond, NULL);
		CHECK_EQ(pthread_create(&t->thread, NULL, t_main, t), 0);
		CHECK_EQ(wbc_dev_add_backend_msg(c, &torture_ops, t, "retry_timeout=60", &dev, msg,
						 sizeof(msg)), 0);
	} else if (b->kind == K_OPENER) {
		CHECK((opener_dirfd = open(dir, O_RDONLY | O_DIRECTORY)) >= 0);
		CHECK_EQ(wbc_dev_add_opener(c, opener_dirfd, "max_io=64K", opener_open, &opener_dirfd,
					    WBC_OPENER_REOPEN, &dev, msg, sizeof(msg)), 0);
	} else if (b->kind == K_DIRSTORE) {
		const struct wbc_backend_ops *ops;
		void *ctx;
		CHECK_EQ(dirstore_new(dir, 0, 2, &ops, &ctx), 0);
		CHECK_EQ(wbc_dev_add_backend_msg(c, ops, ctx, NULL, &dev, msg, sizeof(msg)), 0);
	} else {
		if (b->kind == K_STACK)
			CHECK_EQ(wbc_dev_add_msg(c, STACK_LOWER, &stack_lower, msg, sizeof(msg)), 0);
		if (b->kind == K_RADOS)
			snprintf(spec, sizeof(spec), b->spec, (int)getpid(), ceph_dir);
		else
			snprintf(spec, sizeof(spec), b->spec, dir);
		if (wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg))) {
			fprintf(stderr, "%s: %s\n", spec, msg);
			exit(1);
		}
	}

	/* A: odd-sized pieces, read back from the backend and through the cache */
	char *big = malloc(BIG), *small = malloc(1000);
	CHECK(big && small);
	t_fill(big, BIG, seed++);
	t_fill(small, 1000, seed++);
	wbc_file *fa, *fs;
	CHECK_EQ(wbc_file_open(dev, fname(b, "big"), WBC_O_CREAT | WBC_O_TRUNC, &fa), 0);
	for (size_t off = 0, step = 1; off < BIG; off += step, step = step * 3 % 200000 + 1)
		CHECK_EQ(wbc_pwrite(fa, big + off, WBC_MIN(step, BIG - off), off),
			 (ssize_t)WBC_MIN(step, BIG - off));
	CHECK_EQ(wbc_fsync(fa), 0);
	check_backend(dev, fname(b, "big"), big, BIG);
	struct wbc_stats st0, st1;
	CHECK_EQ(wbc_stats(c, &st0), 0);
	check_cached(fa, big, BIG);
	CHECK_EQ(wbc_stats(c, &st1), 0);
	CHECK(st1.read_in_bytes > st0.read_in_bytes);   /* misses read the backend */
	if (!b->one_file) {
		CHECK_EQ(wbc_file_open(dev, "small", WBC_O_CREAT | WBC_O_TRUNC, &fs), 0);
		CHECK_EQ(wbc_pwrite(fs, small, 1000, 0), 1000);
		CHECK_EQ(wbc_file_close(fs), 0);
		CHECK_EQ(wbc_cache_sync(c), 0);
		check_backend(dev, "small", small, 1000);
	}

	/* B: partial pages in place */
	uint64_t s = seed++;
	for (int i = 0; i < 20; i++) {
		size_t off = (size_t)(t_rand(&s) % (BIG - 10000)), len = 1 + (size_t)(t_rand(&s) % 9000);
		t_fill(big + off, len, seed++);
		CHECK_EQ(wbc_pwrite(fa, big + off, len, off), (ssize_t)len);
	}
	CHECK_EQ(wbc_fdatasync(fa), 0);
	check_backend(dev, fname(b, "big"), big, BIG);

	/* C: truncate down (mid-page), then up: zeros (a device of fixed
	 * size is neither cut, EINVAL, nor extended, EFBIG: its size stays) */
	size_t cut = 1234567, up = 2000000;
	if (fixed_size) {
		int64_t size = wbc_file_size(fa);
		CHECK_EQ(wbc_truncate(fa, (uint64_t)1 << 50), -EFBIG);
		CHECK_EQ(wbc_truncate(fa, cut), -EINVAL);
		CHECK_EQ(wbc_file_size(fa), size);
		CHECK_EQ(wbc_truncate(fa, (uint64_t)size), 0);
		check_cached(fa, big, BIG);
		goto truncated;
	}
	CHECK_EQ(wbc_truncate(fa, cut), 0);
	CHECK_EQ(wbc_fsync(fa), 0);
	check_backend(dev, fname(b, "big"), big, cut);
	CHECK_EQ(wbc_truncate(fa, up), 0);
	memset(big + cut, 0, up - cut);
	CHECK_EQ(wbc_fsync(fa), 0);
	check_backend(dev, fname(b, "big"), big, up);
	check_cached(fa, big, up);
truncated:
	CHECK_EQ(wbc_file_close(fa), 0);

	/* D: sync of everything */
	CHECK_EQ(wbc_cache_sync(c), 0);
	CHECK_EQ(wbc_dev_sync(dev), 0);

	/* E: 4 threads at once, each its range (its file, or its part of
	 * the one file) */
	pthread_t th[4];
	struct writer w[4];
	char names[4][16];
	char *edata = malloc(4 << 19);
	CHECK(edata);
	t_fill(edata, 4 << 19, seed++);
	for (int i = 0; i < 4; i++) {
		snprintf(names[i], sizeof(names[i]), "t%d", i);
		w[i] = (struct writer){ dev, fname(b, names[i]),
					b->one_file ? (uint64_t)i << 19 : 0, edata + ((size_t)i << 19) };
		CHECK_EQ(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(wbc_cache_sync(c), 0);
	if (b->one_file)
		check_backend(dev, "", edata, 4 << 19);
	else
		for (int i = 0; i < 4; i++)
			check_backend(dev, names[i], edata + ((size_t)i << 19), 1 << 19);

	/* F: a write error reaches every handle open at the time, once */
	if (b->kind != K_NONE && b->kind != K_DIRSTORE) {
		wbc_file *h1, *h2;
		char *edat = malloc(65536);
		CHECK(edat);
		t_fill(edat, 65536, seed++);
		CHECK_EQ(wbc_file_open(dev, fname(b, "err"), WBC_O_CREAT | WBC_O_TRUNC, &h1), 0);
		CHECK_EQ(wbc_file_open(dev, fname(b, "err"), 0, &h2), 0);
		CHECK_EQ(wbc_pwrite(h1, edat, 65536, 0), 65536);
		fault(b, dev, true);
		CHECK_EQ(wbc_fsync(h1), -EIO);
		fault(b, dev, false);
		CHECK_EQ(wbc_fsync(h1), 0);          /* retried and written */
		CHECK_EQ(wbc_fsync(h2), -EIO);       /* h2 sees it once ... */
		CHECK_EQ(wbc_fsync(h2), 0);          /* ... and only once */
		check_backend(dev, fname(b, "err"), edat, 65536);
		CHECK_EQ(wbc_file_close(h1), 0);
		CHECK_EQ(wbc_file_close(h2), 0);
		free(edat);
		CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* the device's error, reported once */
		CHECK_EQ(wbc_dev_sync(dev), 0);
		/* under a stacked device the lower device has its own to
		 * report (its cache's write errors; none direct) */
		if (b->kind == K_STACK)
			CHECK_EQ(wbc_dev_sync(stack_lower), strstr(b->spec, "direct") ? 0 : -EIO);
	}
	struct wbc_stats end;
	CHECK_EQ(wbc_cache_close_stats(c, &end), 0);
	CHECK_EQ(end.lost_bytes, 0);
	if (opener_dirfd >= 0) {
		close(opener_dirfd);
		opener_dirfd = -1;
	}
	free(big);
	free(small);
	free(edata);
}

int main(void)
{
	dir = t_mkdtemp();
	char sub[600];
	static const struct bcase cases[] = {
		{ "mem", "mem", false, 0, K_NONE },
		{ "model", "model:lat=50us,qd=8,max_io=64K", false, 0, K_MODEL },
		/* the model storing a write's data when it is submitted */
		{ "model, send=1", "model:lat=50us,qd=8,max_io=64K,send=1", false, 0, K_MODEL },
		{ "dir", "dir:%s,max_io=64K", false, 0, K_FILE },
		{ "file", "file:%s/one,max_io=64K", true, 0, K_FILE },
		/* without io_uring: the worker threads */
		{ "dir, worker threads", "dir:%s,max_io=64K,uring=0", false, 0, K_FILE },
		{ "file, worker threads", "file:%s/one,max_io=64K,uring=0", true, 0, K_FILE },
		{ "opener", NULL, false, 0, K_OPENER },
		{ "dirstore (examples/)", NULL, false, 0, K_DIRSTORE },
		{ "torture: single completions", NULL, false, 0, K_TORTURE },
		{ "torture: batches", NULL, false, T_BATCH, K_TORTURE },
		{ "torture: short writes", NULL, false, T_SHORT, K_TORTURE },
		{ "torture: out of order, batches", NULL, false, T_REORDER | T_BATCH, K_TORTURE },
		{ "torture: out of order, short, single", NULL, false, T_REORDER | T_SHORT, K_TORTURE },
		{ "torture: inline", NULL, false, T_INLINE, K_TORTURE },
		{ "torture: inline, short, batches", NULL, false, T_INLINE | T_SHORT | T_BATCH,
		  K_TORTURE },
		/* an nbdkit server (when installed) in the case's directory */
		{ "nbd", "nbd+unix:///?socket=%s/nbd.sock,max_io=64K", true, 0, K_NBD },
		/* the Ceph test cluster (where it runs), 64 KiB objects */
		{ "rados", "rados:wbc/conformance%d,conf=%s/ceph.conf,object_size=64K,max_io=64K,"
			   "retry_timeout=60", false, 0, K_RADOS },
		{ "stack, global throttle", "stack:0/img,stack_throttle=global", true, 0, K_STACK },
		{ "stack, local throttle", "stack:0/img,stack_throttle=local", true, 0, K_STACK },
		{ "stack, direct", "stack:0/img,stack_throttle=direct", true, 0, K_STACK },
	};
	size_t ran = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* each backend in a directory of its own */
		snprintf(sub, sizeof(sub), "%s/%zu", dir, i);
		CHECK_EQ(mkdir(sub, 0755), 0);
		char *top = dir;
		dir = sub;
		struct t_nbdkit server = { .pid = 0 };
		fixed_size = cases[i].kind == K_NBD;
		if (cases[i].kind == K_NBD) {
			if (!t_nbdkit_available()) {
				printf("  %s: skipped, nbdkit is not installed\n", cases[i].name);
				dir = top;
				continue;
			}
			char trigger[700];
			snprintf(trigger, sizeof(trigger), "error-pwrite-file=%s/nbd-errors", dir);
			t_nbdkit_start(&server, dir, "nbd", (const char *[]){ "--filter=error",
				"memory", "64M", "error-pwrite=EIO", "error-pwrite-rate=1", trigger,
				NULL });
		}
		if (cases[i].kind == K_RADOS) {
			char why[512];
			if (!(ceph_dir = t_ceph_start(why, sizeof(why)))) {
				printf("  %s: skipped, %s\n", cases[i].name, why);
				dir = top;
				continue;
			}
		}
		run_case(&cases[i]);
		if (cases[i].kind == K_NBD)
			t_nbdkit_stop(&server);
		dir = top;
		ran++;
	}
	t_rmdir(dir);
	printf("conformance: %zu backends passed\n", ran);
	return 0;
}
