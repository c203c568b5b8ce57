/*
 * stack: a device whose storage is one file of another wbcache device, in
 * the same cache or another (the user-space loop device).  The device
 * holds a single file (WBC_BACKEND_ONE_FILE) whose bytes are the lower
 * file's.  Written on the public interface alone: the lower file is a
 * handle of the lower device (wbc_file_open), opened when the device is
 * made and closed when it is destroyed.
 *
 *   submit   queues the I/Os and wakes a worker; it never waits;
 *   workers  (workers=N, default 4) each take up to BATCH queued I/Os
 *            (direct: one), do them with wbc_pwritev / wbc_preadv on the
 *            lower file (which may wait: for the lower device's throttle,
 *            its free pages, its backend) and complete them together with
 *            wbc_io_complete_batch, holding none of our locks;
 *   flush    wbc_fsync (wbc_fdatasync) of the lower file: the lower
 *            device's pages of it written back and its backend flushed,
 *            the lower device's write errors returned (the engine records
 *            them for every handle of the upper file);
 *   resize   wbc_truncate of the lower file.
 *
 * How the workers' writes into the lower device are throttled is the
 * device's stack_throttle= option:
 *   global  like any writer's: against the whole cache's dirty pages,
 *           which the upper device's own pages fill, so that the upper's
 *           writeback is slowed by a throttle its own dirty pages cause
 *           (the loop device's trouble in Linux until loop used direct
 *           I/O; kept to show it);
 *   local   (default) against the lower device's own pages and share
 *           alone (wbc_thread_set_local_throttle, the kernel's
 *           PF_LOCAL_THROTTLE, which loop's worker sets);
 *   direct  the lower file is opened WBC_O_DIRECT: writes and reads go to
 *           the lower device's backend, bypassing its cache (loop's direct
 *           I/O).  The lower device refuses a direct open while the file
 *           is open through its cache and an open through its cache while
 *           the direct one lasts (-EBUSY), and the direct open writes back
 *           and drops what its cache held of the file: no stale copy is
 *           ever seen through either device.  I/O must then be aligned as
 *           the lower backend asks: the device reports that alignment as
 *           its own (its cache pages must be at least that large).
 */
#include "backends.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STACK_QD 32
#define STACK_MAX_IO (1u << 20)
#define BATCH 8
#define DEFAULT_WORKERS 4
#define MAX_WORKERS 64

struct stack {
	wbc_file *lf;               /* the lower file (fixed) */
	int mode;                   /* WBC_STACK_* */
	size_t align;               /* direct: the lower backend's */
	uint64_t max_file;          /* the lower backend's largest file */
	unsigned nworkers;
	int level;                  /* 1; over a stack whose workers write through the same cache, 1 + its level (the reserve's share) */
	const void *lcache;         /* the cache the workers write into (an identity only) */
	pthread_mutex_t lock;       /* the queue and stop */
	pthread_cond_t cond;
	struct wbc_io **q;          /* a ring of cap entries */
	size_t head, n, cap;
	bool stop;
	pthread_t threads[MAX_WORKERS];
};

static void stack_caps(void *ctx, struct wbc_backend_caps *caps)
{
	struct stack *s = ctx;
	caps->queue_depth = STACK_QD;
	caps->max_io = STACK_MAX_IO;
	caps->align = s->align;
	caps->flags = WBC_BACKEND_ONE_FILE;
	caps->max_file_size = s->max_file;
}

static int stack_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct stack *s = ctx;
	(void)name;     /* "": the engine opens no other name of a one-file device */
	(void)flags;
	int64_t sz = wbc_file_size(s->lf);
	if (sz < 0)
		return (int)sz;
	*file = s;
	*size = (uint64_t)sz;
	return 0;
}

static void stack_close(void *ctx, void *file)
{
	(void)ctx;
	(void)file;     /* the lower file stays open until destroy */
}

static int stack_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct stack *s = ctx;
	pthread_mutex_lock(&s->lock);
	if (s->n + n > s->cap) {
		/* grow the ring (at most STACK_QD writes are in flight, but
		 * reads come from any number of threads) */
		size_t cap = WBC_MAX(s->cap * 2, s->n + n);
		struct wbc_io **q = malloc(cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&s->lock);
			*queued = 0;
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->n; i++)
			q[i] = s->q[(s->head + i) % s->cap];
		free(s->q);
		s->q = q;
		s->head = 0;
		s->cap = cap;
	}
	for (unsigned i = 0; i < n; i++)
		s->q[(s->head + s->n++) % s->cap] = ios[i];
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	*queued = n;
	return 0;
}

/*
 * A read of the lower file.  wbc_preadv, as preadv, returns the bytes
 * read before an error part way; a short read here means the file ends
 * there (the engine zero-fills the rest and caches it), so the rest is
 * asked for again: 0 is the end, an error fails the whole I/O.
 */
static ssize_t stack_read(struct stack *s, const struct wbc_io *io)
{
	ssize_t r = wbc_preadv(s->lf, io->iov, io->iovcnt, io->off);
	if (r < 0)
		return r;
	size_t done = (size_t)r, at = 0;
	int64_t lsize = wbc_file_size(s->lf);
	if (lsize < 0 || io->off + done >= (uint64_t)lsize)
		return (ssize_t)done;   /* the file's end (a direct lower file
					 * refuses an unaligned read past it) */
	for (int i = 0; i < io->iovcnt && done < io->len; i++) {
		size_t l = io->iov[i].iov_len;
		while (done < at + l) {
			size_t skip = done - at;
			ssize_t m = wbc_pread(s->lf, (char *)io->iov[i].iov_base + skip, l - skip,
					      io->off + done);
			if (m <= 0)
				return m < 0 ? m : (ssize_t)done;
			done += (size_t)m;
		}
		at += l;
	}
	return (ssize_t)done;
}

static void *stack_worker(void *arg)
{
	struct stack *s = arg;
	pthread_setname_np(pthread_self(), "wbc-stack");
	if (s->mode == WBC_STACK_LOCAL)
		wbc_thread_set_local_throttle(1);
	/* through the lower device's cache, which may be the upper's: its
	 * reserve pages (every other page may be the upper's, dirty); a
	 * stack over a stack leaves the one under it a part of them */
	if (s->mode != WBC_STACK_DIRECT)
		wbc_thread_set_memalloc(s->level);
	/* direct: each I/O waits for the lower backend; completed at once,
	 * its pages are clean sooner than if it waited for a batch's last */
	unsigned batch_max = s->mode == WBC_STACK_DIRECT ? 1 : BATCH;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->n && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		if (!s->n)
			break;
		struct wbc_io *batch[BATCH];
		unsigned k = 0;
		while (k < batch_max && s->n) {
			batch[k++] = s->q[s->head];
			s->head = (s->head + 1) % s->cap;
			s->n--;
		}
		if (s->n)
			pthread_cond_signal(&s->cond);   /* more for another worker */
		pthread_mutex_unlock(&s->lock);
		for (unsigned i = 0; i < k; i++) {
			struct wbc_io *io = batch[i];
			io->res = io->op == WBC_IO_WRITE ?
				  wbc_pwritev(s->lf, io->iov, io->iovcnt, io->off) :
				  stack_read(s, io);
		}
		wbc_io_complete_batch(batch, k);   /* no lock of ours held */
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int stack_flush(void *ctx, void *file, unsigned flags)
{
	struct stack *s = ctx;
	(void)file;     /* one file: NULL (all files) is the same */
	return flags & WBC_FLUSH_DATASYNC ? wbc_fdatasync(s->lf) : wbc_fsync(s->lf);
}

static int stack_resize(void *ctx, void *file, uint64_t size)
{
	struct stack *s = ctx;
	(void)file;
	return wbc_truncate(s->lf, size);
}

static void stack_stop(struct stack *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->threads[i], NULL);
}

static void stack_destroy(void *ctx)
{
	struct stack *s = ctx;
	stack_stop(s);
	wbc_file_close(s->lf);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s->q);
	free(s);
}

static const struct wbc_backend_ops stack_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "stack",
	.caps = stack_caps,
	.open = stack_open,
	.close = stack_close,
	.submit = stack_submit,
	.flush = stack_flush,
	.resize = stack_resize,
	.destroy = stack_destroy,
};

static const char *const mode_names[] = {
	[WBC_STACK_GLOBAL] = "global", [WBC_STACK_LOCAL] = "local", [WBC_STACK_DIRECT] = "direct",
};

/* Parse "stack_throttle=MODE,workers=N" (any order, either left out). */
static int stack_parse(const char *opts, int *mode, unsigned *workers, char *err, size_t errlen)
{
	*mode = WBC_STACK_LOCAL;
	*workers = DEFAULT_WORKERS;
	const char *tok = opts;
	while (tok && *tok) {
		const char *next = strchr(tok, ',');
		size_t len = next ? (size_t)(next - tok) : strlen(tok);
		char kv[64];
		bool ok = len < sizeof(kv);
		if (ok) {
			memcpy(kv, tok, len);
			kv[len] = '\0';
			char *val = strchr(kv, '=');
			ok = val != NULL;
			if (ok) {
				*val++ = '\0';
				uint64_t v = 0;   /* read below also when it did not parse */
				if (!strcmp(kv, "stack_throttle")) {
					ok = false;
					for (int m = 0; m < 3; m++)
						if (!strcmp(val, mode_names[m])) {
							*mode = m;
							ok = true;
						}
				} else if (!strcmp(kv, "workers")) {
					ok = !wbc_parse_size(val, &v) && v >= 1 && v <= MAX_WORKERS;
					*workers = (unsigned)v;
				} else {
					ok = false;
				}
			}
		}
		if (!ok) {
			snprintf(err, errlen, "bad stack option '%.*s' (stack_throttle=global|local|"
				 "direct, workers=1..%d)", (int)len, tok, MAX_WORKERS);
			return -EINVAL;
		}
		tok = next ? next + 1 : NULL;
	}
	return 0;
}

int stack_spec_check(const char *opts, char *err, size_t errlen)
{
	int mode;
	unsigned workers;
	return stack_parse(opts, &mode, &workers, err, errlen);
}

int stack_backend_new(wbc_dev *lower, const void *lower_cache, uint64_t lower_max,
		      const char *name, const char *opts, const struct wbc_backend_ops **ops,
		      void **ctx, char *err, size_t errlen)
{
	int mode;
	unsigned workers;
	int rc = stack_parse(opts, &mode, &workers, err, errlen);
	if (rc)
		return rc;
	struct stack *s = calloc(1, sizeof(*s));
	if (!s || !(s->q = malloc(4 * STACK_QD * sizeof(*s->q)))) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->cap = 4 * STACK_QD;
	s->mode = mode;
	s->level = 1;
	s->lcache = lower_cache;
	/* a device of one file (file:, NBD, a stacked one) has no file of
	 * another name: its open says only EINVAL */
	const struct wbc_backend_ops *lops;
	void *lctx = wbc_dev_backend(lower, &lops);
	struct wbc_backend_caps lc;
	memset(&lc, 0, sizeof(lc));
	lops->caps(lctx, &lc);
	/* only a lower stack whose workers write into the cache ours write
	 * into shares its reserve: one over another cache's is level 1 there */
	if (lops == &stack_ops && ((struct stack *)lctx)->lcache == lower_cache)
		s->level = ((struct stack *)lctx)->level +
			   (((struct stack *)lctx)->mode == WBC_STACK_DIRECT ? 0 : 1);
	if ((lc.flags & WBC_BACKEND_ONE_FILE) && name[0]) {
		snprintf(err, errlen, "stack: the device under it holds only one file, and "
			 "'%s' is not it (its file has no name: stack:N/ with no NAME)", name);
		free(s->q);
		free(s);
		return -EINVAL;
	}
	if (!(lc.flags & WBC_BACKEND_ONE_FILE) && !name[0]) {
		/* the other way round: its open said only "Invalid argument" */
		snprintf(err, errlen, "stack: the device under it holds files by name, and the "
			 "lower file has none (stack:N/NAME with a NAME)");
		free(s->q);
		free(s);
		return -EINVAL;
	}
	/* opened at the workers' level: the lower cache grows its reserve
	 * for them now, before writers fill it */
	int was = wbc_thread_set_memalloc(mode == WBC_STACK_DIRECT ? 0 : s->level);
	rc = wbc_file_open(lower, name, WBC_O_CREAT | (mode == WBC_STACK_DIRECT ? WBC_O_DIRECT : 0),
			   &s->lf);
	wbc_thread_set_memalloc(was);
	if (rc) {
		if (rc == -ENOBUFS)
			snprintf(err, errlen, "stack: a stack %d levels deep over one cache needs "
				 "a reserve of %d of its pages, at most half of it: a cache of "
				 "%d pages or more, fewer levels, or stack_throttle=direct",
				 s->level, s->level * (s->level - 1),
				 2 * s->level * (s->level - 1));
		else if (rc == -EBUSY)
			snprintf(err, errlen, "stack: the lower file '%s' is open %s: "
				 "stack_throttle=direct and the lower device's cache cannot "
				 "share it", name, mode == WBC_STACK_DIRECT ?
				 "through the lower device's cache" : "direct");
		else
			snprintf(err, errlen, "stack: cannot open the lower file '%s': %s", name,
				 wbc_strerror(rc));
		free(s->q);
		free(s);
		return rc;
	}
	/* the lower file's largest size is this device's: the lower
	 * device's (its backend's in whole pages of that cache: a write
	 * past that into it fails, and this device's pages it refuses would
	 * be retried for good).  Direct too: the lower device's direct
	 * writes are held to the same limit, not to its backend's own (a
	 * backend of 10000 bytes takes 8192 in 4 KiB pages; taken up to
	 * 10000 here, the last page failed with EFBIG at every writeback).
	 * In direct mode its alignment too */
	s->max_file = lower_max;
	if (mode == WBC_STACK_DIRECT)
		s->align = lc.align;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	for (; s->nworkers < workers; s->nworkers++) {
		rc = pthread_create(&s->threads[s->nworkers], NULL, stack_worker, s);
		if (rc) {
			snprintf(err, errlen, "stack: cannot start a worker: %s", strerror(rc));
			stack_destroy(s);
			return -rc;
		}
	}
	*ops = &stack_ops;
	*ctx = s;
	return 0;
}
