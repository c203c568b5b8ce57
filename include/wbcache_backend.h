/*
 * wbcache backend interface: storage of your own behind a wbcache device.
 *
 * A backend is an operations table (struct wbc_backend_ops) and a context
 * pointer of the backend's choosing.  wbc_dev_add_backend() makes a device
 * of them: the device's flusher writes dirty pages back through the
 * table, and reads of pages not in the cache go through it too.  The
 * backends wbcache ships (mem, model, file:, dir:, the opener device) are
 * written on this interface and nothing else.
 *
 * Files.  A backend stores files by name (a flat name: no '/' but where
 * the caller's own names have them; "" for a WBC_BACKEND_ONE_FILE
 * backend).  open() returns the backend's handle of a file, an opaque
 * pointer the engine passes back with every call on that file.
 *
 * I/O.  The engine describes each read or write as a struct wbc_io and
 * hands the backend a batch of them with submit().  An I/O's buffers are
 * cache pages (an iovec); they stay valid and unchanged until the I/O is
 * completed.  The backend completes every I/O it accepted exactly once,
 * with wbc_io_complete() (one) or wbc_io_complete_batch() (several at
 * once: cheaper, the engine settles its counters and wakes its waiters
 * once per batch), from any thread, possibly before submit() returns.
 * A second completion of an I/O (before the engine submits it again)
 * stops the process with a message (abort).
 *
 * Results.  A completion's result is the number of bytes done or a
 * negative errno (above -4096; one below, or more than len, is -EIO).
 *   - A write that did less than asked (0 < res < len) is a short write:
 *     the engine submits the rest as a new I/O.  A write that did nothing
 *     (res == 0) fails with -EIO.
 *   - A read that did less than asked means the file ends there; the
 *     engine reads the rest as zeros.
 *   - An error fails the whole I/O.  A failed write's pages stay dirty and
 *     are retried later (the device's on_error=retry, the default) or are
 *     dropped and counted lost (on_error=drop); either way every handle of
 *     the file open at the time gets the error from its next fsync
 *     (errseq), and wbc_dev_sync() reports it once.
 *
 * Threads.  Any thread may call any operation, several at once, except
 * destroy (called once, when nothing else runs).  In particular:
 *   - submit() is called by the device's flusher, by threads that read
 *     pages not in the cache, by threads syncing, and from inside
 *     wbc_io_complete() (the rest of a short write);
 *   - close() and resize() may be called from inside wbc_io_complete():
 *     the last write of a file whose handles are all closed drops the
 *     engine's last reference to it.
 * So a backend calls wbc_io_complete*() with none of its own locks held,
 * and its operations must not wait for a completion they would deliver
 * themselves on the same thread.
 *
 * Ordering.  The engine never has two I/Os in flight that overlap, and
 * writes to different ranges of a file may complete in any order.  flush()
 * is called once the writes it must make durable have completed.  No I/O
 * of a file is in flight while close() runs on it.  No write of a file is
 * in flight while resize() runs on it, and none starts before it returns
 * (reads of the file below the new size may run meanwhile).
 *
 * Everything here is thread-safe in the sense of include/wbcache.h.
 */
#ifndef WBCACHE_BACKEND_H
#define WBCACHE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wbcache.h"

#ifdef __cplusplus
extern "C" {
#endif

enum wbc_io_op {
	WBC_IO_READ = 0,
	WBC_IO_WRITE = 1,
};

/*
 * One I/O.  The engine owns the structure and fills it before submit();
 * the backend reads it and may use backend_data while the I/O is in
 * flight.  It must not be touched after its completion.
 */
struct wbc_io {
	int op;                     /* enum wbc_io_op */
	int iovcnt;                 /* >= 1 */
	void *file;                 /* the backend's handle from open() */
	uint64_t off;               /* byte offset in the file */
	size_t len;                 /* bytes: the sum of the iovec's lengths */
	const struct iovec *iov;    /* the cache pages to write, or to read into */
	/* wbc_io_complete_batch(): the result of each I/O, set by the backend
	 * before the call (wbc_io_complete() takes it as an argument) */
	ssize_t res;
	/* the backend's own, while the I/O is in flight (zero at submit) */
	void *backend_data[2];
	uint64_t reserved[4];       /* zero */
};

/* What a backend can do, reported by its caps() operation.  Zero means
 * "the default" for every field. */
struct wbc_backend_caps {
	size_t max_io;              /* largest single I/O in bytes; default 1 MiB;
				     * at most 1 GiB; rounded down to a
				     * multiple of align; raised to the
				     * cache's page size (a page is the least
				     * one I/O carries) */
	unsigned queue_depth;       /* I/Os in flight at most; default 32;
				     * the engine sends at most 4096.  It
				     * bounds writeback and each direct
				     * I/O call; reads of pages not in the
				     * cache and other threads' direct I/O
				     * come on top: submit queues what it
				     * cannot start yet */
	/* every I/O's offset, length and buffer address must be a multiple
	 * of this (O_DIRECT's logical block size); 0: anything goes.  A
	 * cache page smaller than this is refused at wbc_dev_add_backend() */
	size_t align;
	unsigned flags;             /* WBC_BACKEND_* */
	unsigned reserved_u;
	/* the largest file it holds, in bytes (a file system's s_maxbytes);
	 * 0: 2^62.  A write through the cache that starts there fails with
	 * -EFBIG and one across it is short, a truncate past it -EFBIG, at
	 * once, as the kernel's: not taken into the cache and never
	 * written */
	uint64_t max_file_size;
	uint64_t reserved[3];
};
/* The backend holds a single file, named "" (a block device, an NBD
 * export): the engine opens no other name. */
#define WBC_BACKEND_ONE_FILE 1u

/* open() flags */
#define WBC_OPEN_CREATE 1u          /* create the file if it is missing */
/* flush() flags */
#define WBC_FLUSH_DATASYNC 1u       /* data (and the size) only, as fdatasync */

/*
 * What a backend reports of its transport (a network backend's window
 * and round trips: nbd; the model's seeks), through its stats() operation and
 * wbc_dev_backend_stats().  Zero where a backend has no such figure.
 */
struct wbc_backend_stats {
	uint64_t window_bytes;      /* bytes it lets be in flight now (its
				     * congestion window, or a fixed limit) */
	uint64_t inflight_bytes;    /* bytes of I/O in flight now */
	uint64_t queued_bytes;      /* bytes of I/O waiting for room in the window */
	uint64_t rtt_ns;            /* round-trip time of its I/Os, smoothed */
	uint64_t min_rtt_ns;        /* the round trip the same I/Os take with no
				     * queue (the window's base), smoothed */
	uint64_t reconnects;        /* connections made again after a loss */
	uint32_t connected;         /* connections up now */
	uint32_t conns;             /* connections it keeps when all are up */
	/* a device with a head (the model's seek=, for experiments): I/Os
	 * that did not begin where the one before them ended (another file,
	 * or another offset), and the device time they paid for it */
	uint64_t seeks;
	uint64_t seek_ns;
	uint64_t reserved[6];       /* zero: room for more */
};

/*
 * The operations.  Set size to sizeof(struct wbc_backend_ops): a later
 * version appends operations, and reads only those a backend's size
 * covers.  Every operation returns 0 or a negative errno unless said
 * (a positive value, or one below -4095, is taken as -EIO).
 */
struct wbc_backend_ops {
	size_t size;
	const char *name;           /* for messages: "mem", "nbd", ... */

	/* Required.  Fill @caps (zeroed by the caller). */
	void (*caps)(void *ctx, struct wbc_backend_caps *caps);

	/* Required.  Open file @name; with WBC_OPEN_CREATE, create it when
	 * it does not exist (else -ENOENT).  Sets *file and *size (its size
	 * in the backend).  The engine opens each name once at a time and
	 * closes it before it opens it again; only a file it removed
	 * (remove() succeeded) may be closed after the name is opened anew,
	 * as a new file. */
	int (*open)(void *ctx, const char *name, unsigned flags, void **file,
		    uint64_t *size);
	/* Required.  Release a handle from open(): no I/O on it is in flight. */
	void (*close)(void *ctx, void *file);

	/* Required.  Queue @n I/Os (n >= 1), as one submission where the
	 * backend can (one doorbell, one system call).  Returns 0 when all
	 * were queued: each is completed later, exactly once.  Else a
	 * negative errno, with *queued set to how many of the first were
	 * queued (those are completed; the rest, ios[*queued..n-1], are not
	 * and must not be: the engine fails them with the returned error). */
	int (*submit)(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued);

	/* Optional (NULL: completed writes are durable already).  Make the
	 * writes to @file completed before the call durable; @file NULL:
	 * every file of the backend.  wbc_cache_close() calls it with NULL
	 * once more after the files it closed itself (handles left open,
	 * files still listed), before destroy(): a close() whose work goes
	 * on after it returns, and can fail, reports that failure here. */
	int (*flush)(void *ctx, void *file, unsigned flags);

	/* Required.  Set @file's size to @size: cut, or extend with zeros.  A
	 * WBC_BACKEND_ONE_FILE backend of fixed size returns -EFBIG above it,
	 * -EINVAL below it (a device cannot be cut: cut and extended again,
	 * its old bytes would read back as the file's) and succeeds, doing
	 * nothing, at it. */
	int (*resize)(void *ctx, void *file, uint64_t size);

	/* Required.  Free the backend: called once, by wbc_cache_close(),
	 * after every file was closed and every I/O completed. */
	void (*destroy)(void *ctx);

	/* Optional (NULL, or beyond a shorter table's size: none).  Fill
	 * @st (zeroed by the caller) with the figures of the backend's
	 * transport, for wbc_dev_backend_stats().  Any thread, any time but
	 * during destroy; it must not wait for I/O. */
	void (*stats)(void *ctx, struct wbc_backend_stats *st);

	/* Optional (NULL, or beyond a shorter table's size: files cannot be
	 * removed, wbc_file_remove() answers -EOPNOTSUPP).  Remove the file
	 * @file is open on and everything stored for it; no I/O on it is in
	 * flight and none follows, only close().  A backend whose files live
	 * apart from the cache's (a pool of objects) needs it: nothing else
	 * ever deletes them. */
	int (*remove)(void *ctx, void *file);
};

/*
 * Add a device whose storage is the backend @ops with context @ctx.  @opts
 * holds the per-device tunables of wbc_dev_add() (min_ratio=, max_ratio=,
 * max_bytes=, strict_limit=, on_error=, retry_timeout=, and chunk= and
 * throttle= for experiments; comma separated;
 * NULL or "" for none).  On success the device owns @ctx: ops->destroy(ctx)
 * is called when the cache closes.  On failure @ctx stays the caller's
 * (destroy is not called).  Returns 0 and sets *out, -EINVAL for a missing
 * operation, a bad option or caps the cache cannot meet (an alignment
 * above the page size), -ENOMEM.
 */
int wbc_dev_add_backend(wbc_cache *cache, const struct wbc_backend_ops *ops, void *ctx,
			const char *opts, wbc_dev **out);
/* The same with a one-line reason for a failure in @msg (may be NULL). */
int wbc_dev_add_backend_msg(wbc_cache *cache, const struct wbc_backend_ops *ops, void *ctx,
			    const char *opts, wbc_dev **out, char *msg, size_t msglen);

/* Complete @io with @res (bytes done, or a negative errno). */
void wbc_io_complete(struct wbc_io *io, ssize_t res);
/* Complete @n I/Os, each with its io->res. */
void wbc_io_complete_batch(struct wbc_io *const *ios, unsigned n);

/* The backend of @dev: returns its context and sets *@ops (when @ops is
 * not NULL).  For a backend's own controls (a test hook, a knob). */
void *wbc_dev_backend(wbc_dev *dev, const struct wbc_backend_ops **ops);

/* The transport figures of @dev's backend (its stats() operation): 0,
 * -EOPNOTSUPP when the backend reports none (@st is zeroed then), -EINVAL
 * for NULL arguments. */
int wbc_dev_backend_stats(wbc_dev *dev, struct wbc_backend_stats *st);

/* Parse a size with an optional K, M, G or T suffix (powers of 1024; "KiB"
 * and "KB" mean the same): for backends' option strings.  0 or -EINVAL. */
int wbc_parse_size(const char *s, uint64_t *out);
/* Parse a duration in seconds: "2", "0.5s", "250ms", "100us" (a plain
 * decimal: no sign, space, hex or exponent, and a point whatever the
 * locale).  0 or -EINVAL. */
int wbc_parse_time(const char *s, double *out);

#ifdef __cplusplus
}
#endif
#endif
