/*
 * The engine's side of the backend interface (wbcache_backend.h): checking
 * a backend's operations and capabilities, submitting bios as batches of
 * struct wbc_io, completing them (from any thread), the rest of a short
 * write, and a synchronous read for cache misses.  A batch of completions
 * (wbc_io_complete_batch) opens the writeback layer's completion batch,
 * and is there (writeback/end_io.c).
 *
 * A bio's io is filled here, just before the backend sees it, from the
 * engine's description (off, len, iov); after a short write io describes
 * the rest, the engine's fields still the whole I/O.
 */
#include "bio/bio.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_IO (1u << 20)
#define MAX_MAX_IO ((size_t)1 << 30)   /* an I/O's result fits an int */
#define DEFAULT_QD 32u
/* The most I/Os a device keeps in flight, whatever its backend takes (one
 * that says "any number", UINT_MAX, is sent this many: the device's pool
 * holds a bio for each, with room for its largest I/O, made at once) */
#define MAX_QD 4096u
/* The most I/Os one submit() is given (a flusher's plug holds fewer). */
#define SUBMIT_MAX 64u

int backend_init(struct backend *be, const struct wbc_backend_ops *ops, void *ctx,
		 char *msg, size_t msglen)
{
	/* a table built against an older header is shorter: no operation
	 * this version requires may lie beyond its size */
	if (!ops || ops->size < offsetof(struct wbc_backend_ops, destroy) + sizeof(ops->destroy) ||
	    !ops->caps || !ops->open || !ops->close || !ops->submit || !ops->resize ||
	    !ops->destroy) {
		snprintf(msg, msglen, "backend '%s' lacks a required operation (caps, open, close, "
			 "submit, resize, destroy) or its table's size is wrong",
			 ops && ops->name ? ops->name : "?");
		return -EINVAL;
	}
	struct wbc_backend_caps caps;
	memset(&caps, 0, sizeof(caps));
	ops->caps(ctx, &caps);
	if (caps.align & (caps.align - 1)) {
		snprintf(msg, msglen, "backend '%s': alignment %zu is not a power of two",
			 ops->name ? ops->name : "?", caps.align);
		return -EINVAL;
	}
	be->ops = ops;
	be->ctx = ctx;
	be->qd = caps.queue_depth ? WBC_MIN(caps.queue_depth, MAX_QD) : DEFAULT_QD;
	/* at most 1 GiB (an I/O's result is an int: 2 GiB done read as an
	 * error), and a multiple of the alignment (direct I/O is split at
	 * max_io: each piece must stay aligned) */
	be->max_io = caps.max_io ? WBC_MIN(caps.max_io, MAX_MAX_IO) : DEFAULT_MAX_IO;
	if (caps.align)
		be->max_io = WBC_MAX(be->max_io / caps.align * caps.align, caps.align);
	be->dio_align = caps.align;
	be->single = caps.flags & WBC_BACKEND_ONE_FILE;
	return 0;   /* max_file: backend_max_file, once the page size is known */
}

/* A backend's result as an errno: 0 or above -4096, else -EIO (a positive
 * "EIO", or a code out of errno's range: the engine's errors are
 * negative errnos, and an assert or a caller testing < 0 met these) */
static int be_err(int err)
{
	return err > 0 || err < -4095 ? -EIO : err;
}

uint64_t backend_max_file(struct backend *be, size_t page_size)
{
	struct wbc_backend_caps caps;
	memset(&caps, 0, sizeof(caps));
	be->ops->caps(be->ctx, &caps);
	uint64_t m = caps.max_file_size ? WBC_MIN(caps.max_file_size, WBC_MAX_OFFSET)
					: WBC_MAX_OFFSET;
	if (!be->single)   /* its writeback writes whole pages, then trims */
		m = m / page_size * page_size;
	__atomic_store_n(&be->max_file, m, __ATOMIC_RELAXED);
	return m;
}

int backend_open(struct backend *be, const char *name, bool create, void **obj, uint64_t *size)
{
	*size = 0;
	int err = be_err(be->ops->open(be->ctx, name, create ? WBC_OPEN_CREATE : 0, obj, size));
	if (!err && *size > WBC_MAX_OFFSET) {
		/* past every offset the engine addresses: open(2) without
		 * O_LARGEFILE answers such a file so */
		be->ops->close(be->ctx, *obj);
		err = -EOVERFLOW;
	}
	return err;
}

void backend_close(struct backend *be, void *obj)
{
	be->ops->close(be->ctx, obj);
	atomic_fetch_add_explicit(&be->closes, 1, memory_order_relaxed);
}

int backend_resize(struct backend *be, void *obj, uint64_t size)
{
	return be_err(be->ops->resize(be->ctx, obj, size));
}

int backend_flush(struct backend *be, void *obj, bool datasync)
{
	if (!obj)   /* the closes so far: this flush reports their failures */
		atomic_store_explicit(&be->flushed_closes,
				      atomic_load_explicit(&be->closes, memory_order_relaxed),
				      memory_order_relaxed);
	if (!be->ops->flush)
		return 0;
	return be_err(be->ops->flush(be->ctx, obj, datasync ? WBC_FLUSH_DATASYNC : 0));
}

bool backend_can_remove(const struct backend *be)
{
	return be->ops->size >= offsetof(struct wbc_backend_ops, remove) + sizeof(be->ops->remove) &&
	       be->ops->remove;
}

int backend_remove(struct backend *be, void *obj)
{
	if (!backend_can_remove(be))
		return -EOPNOTSUPP;
	return be_err(be->ops->remove(be->ctx, obj));
}

void backend_destroy(struct backend *be)
{
	be->ops->destroy(be->ctx);
}

/* Fill @b's io for its submission, from the engine's description. */
static void bio_fill_io(struct wbc_bio *b)
{
	struct wbc_io *io = &b->io;
	io->iov = b->iov;
	io->iovcnt = b->iovcnt;
	io->off = b->off;
	io->len = b->len;
	io->res = 0;
	io->backend_data[0] = io->backend_data[1] = NULL;
	/* publish the bio to whichever thread completes it */
	atomic_store_explicit(&b->handoff, 1, memory_order_release);
}

/* After a short write of @n bytes: @b's io becomes the rest.  Its iovec
 * is the engine's (b->iov): the first entry left is shortened in place
 * (the bio's pages are its page list, not its iovec). */
static void bio_advance_io(struct wbc_bio *b, size_t n)
{
	struct wbc_io *io = &b->io;
	struct iovec *v = b->iov + (io->iov - b->iov);
	int cnt = io->iovcnt;
	b->done += n;
	io->off += n;
	io->len -= n;
	iov_advance(&v, &cnt, n);
	io->iov = v;
	io->iovcnt = cnt;
	io->res = 0;
	io->backend_data[0] = io->backend_data[1] = NULL;
	atomic_store_explicit(&b->handoff, 1, memory_order_release);
}

/* Take @b over from its submitter, once: a second completion of the same
 * submission (or one of an I/O its submit refused) would end it again
 * (its pages cleaned twice, or a synchronous read's waiter, gone, woken:
 * a hang or worse) */
static void bio_take(struct wbc_bio *b)
{
	if (!atomic_exchange_explicit(&b->handoff, 0, memory_order_acq_rel)) {
		fprintf(stderr, "wbcache: an I/O completed twice, or completed and refused by "
			"its submit: a broken backend\n");
		abort();
	}
}

/* Submit what bio_fill_io prepared; the refused are ended with the error. */
static void submit_filled(struct backend *be, struct wbc_bio **bios, unsigned n)
{
	while (n) {
		struct wbc_io *ios[SUBMIT_MAX];
		unsigned k = WBC_MIN(n, SUBMIT_MAX), queued = 0;
		for (unsigned i = 0; i < k; i++)
			ios[i] = &bios[i]->io;
		int err = be->ops->submit(be->ctx, ios, k, &queued);
		if (!err)
			queued = k;
		else if (be_err(err) != err)
			err = -EIO;
		/* a count past what it was given says nothing of which it
		 * took: none were (a completion of one is caught), where all
		 * would wait for completions that may never come */
		if (queued > k)
			err = -EIO, queued = 0;
		for (unsigned i = queued; i < k; i++) {
			/* not the backend's: a completion of it, before or
			 * after, is caught */
			bio_take(bios[i]);
			bios[i]->res = err;
			bios[i]->end_io(bios[i]);
		}
		bios += k;
		n -= k;
	}
}

void bio_submit(struct backend *be, struct wbc_bio **bios, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct wbc_bio *b = bios[i];
		b->be = be;
		b->done = 0;
		b->res = 0;
		bio_fill_io(b);
	}
	submit_filled(be, bios, n);
}

/*
 * The rest of a short write this thread is submitting: a backend that
 * completes inside submit ends it inside that submit, and when it is
 * short again its rest is left to the submitting frame (again set), not
 * submitted from inside the completion.  Else each rest of one I/O took a
 * level of the stack: a backend writing a sector at a time of a 64 MiB
 * I/O completed inline overflowed it (131072 levels).  Only the bio whose
 * rest this frame submits is left to it: the wait is the unwinding of
 * that submit, which waits for nothing of the bio's.
 */
static _Thread_local struct {
	struct wbc_bio *bio;
	bool again;
} rest;

static void submit_rest(struct wbc_bio *b)
{
	if (rest.bio == b) {
		rest.again = true;      /* the frame below submits it */
		return;
	}
	struct wbc_bio *was = rest.bio;
	bool was_again = rest.again;
	rest.bio = b;
	do {
		rest.again = false;
		/* b is not touched after this unless it came back short
		 * inline: else it may be ended and reused already */
		submit_filled(b->be, &b, 1);
	} while (rest.again);
	rest.bio = was;
	rest.again = was_again;
}

void wbc_io_complete(struct wbc_io *io, ssize_t res)
{
	struct wbc_bio *b = container_of(io, struct wbc_bio, io);
	bio_take(b);
	if (res > (ssize_t)io->len || res < -4095)
		res = -EIO;     /* more than asked, or no errno: a broken backend
				 * (below INT_MIN it read as bytes done) */
	if (io->op == WBC_IO_WRITE && res >= 0 && (size_t)res < io->len) {
		if (res == 0) {
			res = -EIO;     /* no progress: never loop */
		} else {
			/* a short write: submit the rest */
			bio_advance_io(b, (size_t)res);
			submit_rest(b);
			return;
		}
	}
	b->res = res < 0 ? (int)res : (int)(b->done + (size_t)res);
	b->end_io(b);
}

/* ------------------------------------------------------------------ */
/* synchronous I/O through the asynchronous interface                   */

struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned left;          /* bios not yet ended */
};

static void sync_end_io(struct wbc_bio *bio)
{
	(void)atomic_load_explicit(&bio->handoff, memory_order_acquire);
	struct sync_wait *w = bio->priv;
	pthread_mutex_lock(&w->lock);
	if (!--w->left)
		pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Submit @n bios (op, obj, off, len, iov, iovcnt set) and wait for all. */
static void submit_wait(struct backend *be, struct wbc_bio **bios, unsigned n)
{
	struct sync_wait w = { .left = n };
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	for (unsigned i = 0; i < n; i++) {
		bios[i]->end_io = sync_end_io;
		bios[i]->priv = &w;
	}
	bio_submit(be, bios, n);
	pthread_mutex_lock(&w.lock);
	while (w.left)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
}

ssize_t backend_read_sync(struct backend *be, void *obj, void *buf, size_t len, uint64_t off)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct wbc_bio bio = {
		.io = { .op = WBC_IO_READ, .file = obj },
		.off = off, .len = len, .iov = &iov, .iovcnt = 1,
	};
	struct wbc_bio *b = &bio;
	submit_wait(be, &b, 1);
	return bio.res;
}

/* Bios one round of backend_rw_sync submits at once (at most the
 * backend's queue depth: a direct write of 1 MiB sent 16 I/Os at once to
 * a backend of queue_depth=1). */
#define RW_SYNC_BIOS 16u

ssize_t backend_rw_sync(struct backend *be, void *obj, int op, const struct iovec *iov,
			int iovcnt, uint64_t off, int *errp)
{
	size_t total = 0;
	unsigned round_max = WBC_MIN(RW_SYNC_BIOS, WBC_MAX(be->qd, 1u));
	if (errp)
		*errp = 0;
	int vi = 0;
	size_t vskip = 0;       /* bytes of iov[vi] already taken */
	while (vi < iovcnt) {
		struct wbc_bio bios[RW_SYNC_BIOS], *bp[RW_SYNC_BIOS];
		/* each bio's own iovec: a short write advances it in place */
		struct iovec *vecs[RW_SYNC_BIOS];
		unsigned n = 0;
		size_t round = 0;
		int err = 0;
		while (vi < iovcnt && n < round_max) {
			/* up to max_io bytes and IOV_MAX entries from here */
			int cnt = 0, v = vi;
			size_t skip = vskip, len = 0;
			while (v < iovcnt && len < be->max_io && cnt < IOV_MAX) {
				size_t take = WBC_MIN(iov[v].iov_len - skip, be->max_io - len);
				len += take;
				cnt += take > 0;
				if (skip + take < iov[v].iov_len) {
					skip += take;
					break;
				}
				v++;
				skip = 0;
			}
			if (!len) {     /* only empty entries were left */
				vi = iovcnt;
				break;
			}
			struct iovec *vec = malloc((size_t)cnt * sizeof(*vec));
			if (!vec) {
				err = -ENOMEM;
				break;
			}
			int k = 0;
			size_t left = len;
			for (int j = vi; k < cnt; j++) {
				size_t from = j == vi ? vskip : 0;
				size_t take = WBC_MIN(iov[j].iov_len - from, left);
				if (!take)
					continue;
				vec[k].iov_base = (char *)iov[j].iov_base + from;
				vec[k].iov_len = take;
				left -= take;
				k++;
			}
			vi = v;
			vskip = skip;
			vecs[n] = vec;
			bios[n] = (struct wbc_bio){
				.io = { .op = op, .file = obj },
				.off = off + total + round, .len = len, .iov = vec, .iovcnt = cnt,
			};
			bp[n] = &bios[n];
			round += len;
			n++;
		}
		if (n)
			submit_wait(be, bp, n);
		/* in order: stop at the first that failed or came back short;
		 * the bios submitted before an allocation failed count */
		bool stop = false;
		for (unsigned i = 0; i < n; i++) {
			free(vecs[i]);
			if (stop)
				continue;
			if (bios[i].res < 0) {
				err = bios[i].res;
				stop = true;
			} else {
				total += (size_t)bios[i].res;
				stop = (size_t)bios[i].res < bios[i].len;
				if (stop)
					err = 0;   /* the object's end, whatever failed after */
			}
		}
		if (stop || err) {
			if (errp)
				*errp = err;
			return total ? (ssize_t)total : err;
		}
	}
	return (ssize_t)total;
}
