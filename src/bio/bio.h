/*
 * Layer bio, the engine's lowest: its side of the backend interface
 * (include/wbcache_backend.h).  A device's backend with its capabilities
 * (struct backend), the engine's I/O (struct wbc_bio), submission in
 * batches, completion (wbc_io_complete: short writes resubmitted for the
 * rest), and a synchronous read for cache misses (bio/bio.c).  It knows
 * nothing of pages, files or devices: a bio carries the writeback
 * layer's bookkeeping as pointers it never follows, and the writeback
 * layer's completion batching (wbc_io_complete_batch) lives there.
 *
 * LOCKS (the global order is at the top of src/internal.h).  bio owns no
 * lock (backend_read_sync waits on a lock of its own call).  Callers hold
 * no lock of the engine across a submission or a backend call (open,
 * close, resize, flush, a synchronous read).  end_io runs in whichever
 * thread completes the bio, the submitter's for a bio the backend
 * refused, with no lock of the engine held; backends hold none of theirs
 * either (backend/backends.h).
 */
#ifndef WBC_BIO_H
#define WBC_BIO_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wbcache_backend.h"
#include "base/base.h"

enum bio_op { BIO_READ = WBC_IO_READ, BIO_WRITE = WBC_IO_WRITE };

struct inode;
struct page;
struct wbc_bio;
typedef void (*bio_end_io_t)(struct wbc_bio *bio);

/*
 * One I/O of the engine.  io is what the backend sees (wbcache_backend.h);
 * the rest is the engine's.  off, len, iov and iovcnt describe the whole
 * I/O; after a short write io describes the part still to do (io.iov
 * points into iov, advanced past what was written).
 */
struct wbc_bio {
	struct wbc_io io;
	struct backend *be;
	uint64_t off;           /* byte offset */
	size_t len;             /* bytes */
	struct iovec *iov;
	int iovcnt;
	int res;                /* bytes done or -errno, set before end_io */
	size_t done;            /* bytes written before a short write's rest */
	bio_end_io_t end_io;
	void *priv;
	/* writeback bookkeeping (the writeback layer's: its bio pool and
	 * completion) */
	struct inode *inode;
	struct page **pages;
	unsigned nr_pages;
	struct wbc_bio *next_free;
	unsigned epoch;         /* the pool's drain epoch at bio_get (0 or 1) */
	/* Release on submit, acquire on completion: orders the submitter's
	 * stores for completion threads (visible to ThreadSanitizer, which
	 * cannot see a backend's ordering through the kernel).  1 while the
	 * backend holds the bio; its completion (or its refusal) takes it
	 * back to 0, once: a second is a broken backend's (bio_take). */
	atomic_int handoff;
};

/* A device's backend: its operations, its context and its capabilities
 * (with the defaults filled in). */
struct backend {
	const struct wbc_backend_ops *ops;
	void *ctx;
	unsigned qd;            /* I/Os in flight at most */
	size_t max_io;          /* largest single I/O in bytes */
	size_t dio_align;       /* caps.align */
	bool single;            /* WBC_BACKEND_ONE_FILE */
	/* caps.max_file_size, at most WBC_MAX_OFFSET, in whole pages but
	 * for a one-file device (a page past it is never written back: a
	 * file size limit's SIGXFSZ); atomic: a one-file device's
	 * is asked again when a write or a truncate goes past it (a device
	 * that grew) */
	uint64_t max_file;
	/* close() calls so far, and how many there were when the last flush
	 * of the whole device began (dev_stop: a flush after the closes no
	 * flush followed) */
	atomic_uint closes;
	atomic_uint flushed_closes;
};
/* Ask @be's caps for its largest file again: store and return it (whole
 * pages of @page_size but for a one-file device). */
uint64_t backend_max_file(struct backend *be, size_t page_size);

/* Check @ops and fill @be from its caps: 0, or -EINVAL with a message. */
int backend_init(struct backend *be, const struct wbc_backend_ops *ops, void *ctx,
		 char *msg, size_t msglen);
/* Submit @n bios of @op (each with obj, off, len, iov, iovcnt, end_io
 * set): those the backend refuses are ended with its error. */
void bio_submit(struct backend *be, struct wbc_bio **bios, unsigned n);
int backend_open(struct backend *be, const char *name, bool create, void **obj,
		 uint64_t *size);
void backend_close(struct backend *be, void *obj);
int backend_resize(struct backend *be, void *obj, uint64_t size);
int backend_flush(struct backend *be, void *obj, bool datasync);
void backend_destroy(struct backend *be);
/* The backend's remove operation: -EOPNOTSUPP where it has none. */
int backend_remove(struct backend *be, void *obj);
bool backend_can_remove(const struct backend *be);
/* Read @len bytes at @off of @obj synchronously through submit; returns
 * bytes read (short at end of object) or -errno. */
ssize_t backend_read_sync(struct backend *be, void *obj, void *buf, size_t len, uint64_t off);
/* Read or write (@op, enum bio_op) the bytes of @iov at @off of @obj
 * synchronously, in I/Os of at most max_io bytes submitted together
 * (direct I/O: the buffers are the caller's, aligned as the backend
 * asks).  Returns the bytes done up to the first I/O that failed or came
 * back short (a read: the object ends there), or, when none were, that
 * I/O's -errno.  @errp (may be NULL) gets the -errno that ended it early,
 * 0 when it ended at a short I/O or at the end: a count short of @iov
 * with *@errp < 0 is an error, not the object's end. */
ssize_t backend_rw_sync(struct backend *be, void *obj, int op, const struct iovec *iov,
			int iovcnt, uint64_t off, int *errp);

#endif
