/*
 * RADOS backend: files striped over objects of a Ceph pool, on librados'
 * asynchronous API.
 *
 *   rados:POOL[/PREFIX][,opts]
 *
 * Options (then the device tunables, which the engine takes out first):
 *   conf=PATH        the cluster's configuration (default: $CEPH_CONF, then
 *                    librados' search: /etc/ceph/ceph.conf, ...)
 *   id=NAME          the client's name (client.NAME; default admin)
 *   object_size=SIZE each file's stripe unit (default 4M; 64K..64M, a power
 *                    of two)
 *   timeout=SECONDS  an operation not answered for that long fails
 *                    (rados_osd_op_timeout and rados_mon_op_timeout; the
 *                    connection at start too); whole seconds (a fraction
 *                    rounds up); default 30, 0: never
 *   window=adaptive  (default) the congestion window of window.c;
 *   window=fixed:N   N I/Os in flight at most
 *   max_io=SIZE      largest I/O (default: the object size, at most 4 MiB)
 *   lock_check=SECONDS  how often the keeper re-asserts the locks (10)
 *
 * Objects.  File NAME is objects "[PREFIX/]NAME.%016x" of the object index
 * (byte offset / object_size).  Object 0 always exists while the file does:
 * it holds the file's size (xattr wbcache.size, decimal), the object size
 * it was made with (wbcache.object_size: an open with another is refused),
 * the extent
 * (xattr wbcache.extent: no object at or beyond it holds data, see below)
 * and the file's lock.
 *
 * I/O.  A writeback I/O (a run of contiguous dirty pages) becomes one
 * rados_aio_write per object it touches, from its pages where they are
 * contiguous in memory, else from one copy of them (librados copies the
 * buffer anyway); a read one rados_aio_read per object, missing objects
 * and the parts past an object's end reading as zeros, and nothing past
 * the file's size.  The I/O completes when all its operations have, with
 * the first error.  I/Os wait in the backend for room in the congestion
 * window (window.c, the NBD backend's: Vegas on the operations' round
 * trips, bytes in flight), reads ahead of writes; one completion thread
 * moves them into the window, issues the operations and completes the
 * I/Os in batches.  librados' callbacks only note results and wake it.
 *
 * Sizes.  The size the engine gives (writes' ends, resize()) is kept in
 * memory and written to object 0's xattr by flush() (fsync, sync) and
 * resize(); a write completes when the cluster acknowledged it (RADOS
 * acknowledges once every replica has it), so flush() has only the size
 * to write.  Crash safety: a cache that dies after writes beyond the
 * recorded size leaves objects past it.  Before any write goes beyond the
 * extent, the extent is raised (synchronously, in submit(), a step of 64
 * objects at a time); opening a file whose extent lies beyond its size
 * removes (and cuts) what lies between, so a later extension reads zeros.
 * resize() down records the new size first, then removes the objects
 * past it and cuts the one holding it (removals that fail stay pending,
 * made before the file grows past that size again); up it only records
 * the size (nothing lies beyond the size while the file is open).
 *
 * Removal (wbc_file_remove): every object of the file, object 0 last, its
 * lock going with it.
 *
 * Locking: one writer per file across machines.  open() takes an
 * exclusive RADOS lock (cls_lock "wbcache") on object 0, cookie unique to
 * this device (host, pid, a random number), without expiry; a cache that
 * finds it held gets -EBUSY.  close() releases it.  A keeper thread
 * re-asserts every open file's lock every 10 s (lock_check=)
 * (LIBRADOS_LOCK_FLAG_MUST_RENEW; a close does not wait for a renewal in
 * flight: the keeper frees the file after it): a lock broken by `wbcache
 * rados-unlock` (wbc_rados_break_lock()) fences the file: its writes fail with EIO from
 * then on (they stay dirty, at risk, as any failed write), instead of
 * mixing with the new owner's.  The break blocklists the holder's client
 * first (as rbd does), so the OSDs refuse what it sends before the keeper
 * notices: writes in flight, and object 0's size records.  A lock is never taken over silently:
 * only the explicit command breaks it (for a cache that died).
 *
 * Faults.  An OSD that stops or a cluster out of reach: librados resends
 * operations once the OSD (or its replacement) is there; after timeout=
 * an operation fails with ETIMEDOUT, reported as EIO, and the engine's
 * policy takes over (on_error=retry keeps the pages dirty and at risk,
 * retries with backoff; fsync reports the error once per handle).  The
 * backend's stats report connected 0 from a transport failure until an
 * operation succeeds again.  A client learns of an OSD that restarted
 * (at a new address) only from a newer OSD map, and librados asks for
 * one on its own only every objecter_tick_interval (5 s), and then only
 * for operations older than objecter_timeout (10 s): so a map watcher
 * thread asks the monitor for the newest map every second while any
 * operation is in flight (I/O, and the synchronous ones: size writes,
 * lock renewals, removals, closes) and none has completed for a
 * second.  It is a thread of its own because the others can wait on
 * the dead OSD themselves (the keeper in a lock renewal, a flush in a
 * size write).
 */
#include "backends.h"

#include <math.h>
#include <rados/librados.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RADOS_QUEUE_DEPTH 256u
#define RADOS_DEFAULT_OBJ (4u << 20)
#define RADOS_DEFAULT_TIMEOUT_S 30.0
#define EXTENT_STEP_OBJS 64
#define LOCK_NAME "wbcache"
#define XATTR_SIZE "wbcache.size"
#define XATTR_EXTENT "wbcache.extent"
/* the object size the file was made with: its layout (a file opened with
 * another one read other objects' bytes, and its open's trim removed
 * data) */
#define XATTR_OBJSIZE "wbcache.object_size"
#define KEEPER_S 10.0
#define STALL_NS (1000ull * 1000000ull)   /* no completion for that long: a new map */
#define COMPLETE_BATCH 64
#define TAKE_BATCH 64
#define OID_MAX 1100

struct rbe;

struct rfile {
	struct rbe *b;
	char *name;                 /* object name prefix: [PREFIX/]NAME */
	struct list_head node;      /* b->files */
	pthread_mutex_t lock;       /* the sizes below */
	uint64_t size;              /* as the engine set it */
	uint64_t durable;           /* in the xattr */
	uint64_t extent;            /* in the xattr: no data at or beyond it */
	/* no object at or past it holds data (<= extent): the extent at
	 * open, raised by every write issued (a failed one's pieces may have
	 * landed), lowered by a trim.  Bounds what a resize or a remove
	 * visits (the size would be 2^40 objects for a sparse file) */
	uint64_t hiwater;
	/* object 0's size and extent writes, one at a time (each a
	 * synchronous op): the extent's raise, flush's size, resize; so an
	 * older size never lands after a newer one.  Lock order:
	 * b->files_lock, then meta_lock, then lock */
	pthread_mutex_t meta_lock;
	/* a shrink whose removals did not all succeed (its size is durable):
	 * objects from the one holding trim_at up to trim_upto may hold old
	 * data; removed before the file grows past trim_at (UINT64_MAX: none).
	 * Written under meta_lock and lock, read under either */
	uint64_t trim_at, trim_upto;
	atomic_bool fenced;         /* our lock was broken: writes fail */
	/* b->files_lock: a flush of every file uses it without that lock (a
	 * synchronous operation, which may wait for a slow OSD); it stays on
	 * the list until they are done */
	unsigned busy;
	/* b->files_lock: the keeper's lock renewal uses it without that lock
	 * (it may wait on a slow OSD for timeout=).  close() does not wait
	 * for it (it runs on the completion thread: every file's completions
	 * waited behind the renewal): it marks the file closed, and the
	 * keeper frees it once its renewal is answered */
	unsigned renewing;
	bool closed;                /* b->files_lock: close() runs: passed by */
	bool orphan;                /* b->files_lock: close() is over: the keeper frees it */
	bool lock_shared;           /* another handle of this backend holds it */
	bool removed;               /* by remove(): close has nothing to write */
};

struct rpiece {
	struct rreq *req;
	struct rpiece *next;        /* the done list */
	rados_completion_t comp;
	uint64_t obj, objoff;
	char *buf;
	size_t len;
};

struct rreq {
	struct wbc_io *io;
	struct rfile *f;
	void *bounce;
	size_t len;                 /* bytes its pieces cover (reads: to the size) */
	uint64_t sent_ns;
	unsigned npieces, left;
	int err;
	struct rpiece piece[];
};

struct rbe {
	rados_t cluster;
	rados_ioctx_t io;
	char *pool, *prefix;
	uint64_t objsize;
	size_t max_io;
	unsigned fixed;
	uint64_t timeout_ns;
	uint64_t keeper_ns;         /* lock_check= */
	char cookie[128];
	pthread_t thread, keeper;
	bool keeper_started;

	pthread_mutex_t lock;       /* queues, done list, flags */
	pthread_cond_t cond;        /* the completion thread waits here */
	struct remote_queue q;        /* waiting for room in the window */
	struct rpiece *done;        /* pieces librados completed */
	struct wbc_io *failed;      /* completed without a request */
	bool sleeping, stop;

	unsigned closing;           /* lock: closes in flight (CLOSE_FLIGHT) */
	int close_err;              /* lock: the first of their errors, for flush */
	pthread_cond_t closing_cond;   /* a close changed state */
	struct list_head closes;    /* lock: struct rclose, by name */
	unsigned close_pass;        /* lock: flush's retries, one pass at a time */

	/* files.  Never held across an operation on the cluster: close()
	 * runs on the completion thread, and every file's completions would
	 * wait behind one slow object */
	pthread_mutex_t files_lock;
	struct list_head files;
	pthread_cond_t files_idle;  /* a file's busy fell to 0 */
	pthread_cond_t keeper_cond;
	bool keeper_stop;

	struct vegas_window win;    /* the completion thread's own */

	_Atomic uint64_t st_window, st_inflight, st_rtt, st_base;
	atomic_uint st_up;
	atomic_bool fail_writes;    /* rados_fail_writes(): a test's fault */
	atomic_bool fail_sizes;     /* rados_fail_sizes(): a test's fault */
	atomic_bool fail_unlocks;   /* rados_fail_unlocks(): a test's fault */
	void (*_Atomic open_pause)(void *);   /* rados_open_pause(): a test's */
	void *open_pause_arg;
	_Atomic uint64_t last_progress_ns;   /* the last completion (or issue from idle) */
	atomic_uint sync_ops;       /* synchronous operations and closes in flight */

	pthread_t watcher;          /* the map watcher */
	bool watcher_started;
	pthread_mutex_t watch_lock;
	pthread_cond_t watch_cond;
	bool watch_stop;            /* watch_lock */
	/* watch_lock: the watcher is in rados_wait_for_latest_osdmap(), which
	 * has no timeout: with the monitor out of reach it waits until the
	 * cluster handle is shut down (-ECANCELED) */
	bool watch_asking;
	_Atomic uint64_t map_requests;   /* the watcher's requests for a newer map */
};

static const struct wbc_backend_ops rados_ops;

/*
 * A file's close: its size write, then its unlock, asynchronous (close
 * runs on the completion thread), in that order.  The unlock waits for
 * the size: a size write that failed leaves the size in object 0 older
 * than data the engine wrote back, and an open that read that size
 * would take the data past it for a dead cache's and trim it.  So a
 * failed close keeps the lock (no other client opens the file) and its
 * size here: an open of the name writes it first, a flush of the device
 * and its destruction try again.  An unlock that failed on the way to
 * the cluster (a timeout) is kept too, its size written (sized cleared),
 * and tried again the same way: no other client could open the file
 * until someone broke the lock.  So is the lock of an open that failed
 * after taking it, when its release failed too (a record of its own).
 * An open of a name waits for its close in flight (whose unlock would
 * otherwise land after the open's lock).
 */
enum { CLOSE_FLIGHT, CLOSE_FAILED, CLOSE_RETRY };
struct rclose {
	struct list_head node;      /* b->closes */
	struct rbe *b;
	uint64_t size;
	bool sized;                 /* a size to write (first) */
	bool unlocking;             /* the size is written: the unlock is out */
	int state;                  /* CLOSE_* (b->lock) */
	unsigned pass;              /* the flush pass that last retried it */
	char name[];
};

/* A synchronous operation (or a close's) begins: from idle, the stall
 * clock starts now. */
static void sync_begin(struct rbe *b)
{
	if (!atomic_fetch_add(&b->sync_ops, 1) &&
	    !atomic_load_explicit(&b->st_inflight, memory_order_relaxed))
		atomic_store_explicit(&b->last_progress_ns, wbc_now_ns(), memory_order_relaxed);
}

/* ... and is answered (an error too): progress. */
static void sync_end(struct rbe *b)
{
	atomic_store_explicit(&b->last_progress_ns, wbc_now_ns(), memory_order_relaxed);
	atomic_fetch_sub(&b->sync_ops, 1);
}

static void oid_of(const char *name, uint64_t idx, char *out)
{
	snprintf(out, OID_MAX, "%s.%016llx", name, (unsigned long long)idx);
}

static void oid(const struct rfile *f, uint64_t idx, char *out)
{
	oid_of(f->name, idx, out);
}

/* An error of librados as the engine's: a transport failure is EIO. */
static int rerr(int r)
{
	if (r == -ETIMEDOUT || r == -ENOTCONN || r == -ESHUTDOWN || r == -ECONNREFUSED ||
	    r == -ECONNRESET || r == -EPIPE || r == -ETIME)
		return -EIO;
	return r;
}

static bool transport_error(int r)
{
	return r == -ETIMEDOUT || r == -ENOTCONN || r == -ESHUTDOWN || r == -ECONNREFUSED ||
	       r == -ECONNRESET || r == -ETIME;
}

/* ------------------------------------------------------------------ */
/* sizes in object 0's xattrs                                           */

/* Attribute @name of object @o as a number (absent: 0, and *@present
 * false where asked). */
static int get_u64_xattr_p(rados_ioctx_t io, const char *o, const char *name, uint64_t *v,
			   bool *present)
{
	char buf[32];
	int r = rados_getxattr(io, o, name, buf, sizeof(buf) - 1);
	if (present)
		*present = r != -ENODATA;
	if (r == -ENODATA) {
		*v = 0;
		return 0;
	}
	if (r == -ERANGE)
		return -EUCLEAN;   /* longer than any number */
	if (r < 0)
		return r;
	buf[r] = '\0';
	/* a size or extent that does not parse is no size: refused (read as
	 * 0, the open would trim every object away) */
	char *end;
	errno = 0;
	unsigned long long n = strtoull(buf, &end, 10);
	if (!r || end != buf + r || errno || buf[0] < '0' || buf[0] > '9')
		return -EUCLEAN;
	*v = n;
	return 0;
}

static int get_u64_xattr(rados_ioctx_t io, const char *o, const char *name, uint64_t *v)
{
	return get_u64_xattr_p(io, o, name, v, NULL);
}

/* Write file @name's size and extent (either may be UINT64_MAX: left as
 * it is). */
static int put_sizes_of(struct rbe *b, const char *name, uint64_t size, uint64_t extent)
{
	char o[OID_MAX], sb[32], eb[32];
	oid_of(name, 0, o);
	if (size != UINT64_MAX && atomic_load(&b->fail_sizes))
		return -EIO;
	rados_write_op_t op = rados_create_write_op();
	if (!op)
		return -ENOMEM;
	rados_write_op_assert_exists(op);
	if (size != UINT64_MAX) {
		int n = snprintf(sb, sizeof(sb), "%llu", (unsigned long long)size);
		rados_write_op_setxattr(op, XATTR_SIZE, sb, (size_t)n);
	}
	if (extent != UINT64_MAX) {
		int n = snprintf(eb, sizeof(eb), "%llu", (unsigned long long)extent);
		rados_write_op_setxattr(op, XATTR_EXTENT, eb, (size_t)n);
	}
	sync_begin(b);
	int r = rados_write_op_operate(op, b->io, o, NULL, 0);
	sync_end(b);
	rados_release_write_op(op);
	return r;
}

static int put_sizes(struct rfile *f, uint64_t size, uint64_t extent)
{
	return put_sizes_of(f->b, f->name, size, extent);
}

/* b->lock: the close of @name known here (in flight or failed), or NULL. */
static struct rclose *close_find_locked(struct rbe *b, const char *name)
{
	assert_held(&b->lock);
	for (struct list_head *pos = b->closes.next; pos != &b->closes; pos = pos->next) {
		struct rclose *rc = container_of(pos, struct rclose, node);
		if (!strcmp(rc->name, name))
			return rc;
	}
	return NULL;
}

static void close_forget_locked(struct rbe *b, struct rclose *rc)
{
	assert_held(&b->lock);
	list_del_init(&rc->node);
	free(rc);
	pthread_cond_broadcast(&b->closing_cond);
}

static int unlock_name(struct rbe *b, const char *name)
{
	char o[OID_MAX];
	oid_of(name, 0, o);
	if (atomic_load(&b->fail_unlocks))
		return -ETIMEDOUT;
	sync_begin(b);
	int r = rados_unlock(b->io, o, LOCK_NAME, b->cookie);
	sync_end(b);
	return r == -ENOENT ? 0 : r;
}

static void unlock_failed(const char *name, int r)
{
	fprintf(stderr, "wbcache: rados: cannot release the lock on %s: %s "
		"(`wbcache rados-unlock` breaks it)\n", name, strerror(-rerr(r)));
}

/* Remove the objects [from, to) and cut object @cut_obj at @cut_off
 * (cut_off 0: none), all at once; -ENOENT is success.  0 or -errno. */
static int trim_objects(struct rfile *f, uint64_t cut_obj, uint64_t cut_off, uint64_t from,
			uint64_t to)
{
	struct rbe *b = f->b;
	char o[OID_MAX];
	int err = 0;
	sync_begin(b);
	if (cut_off) {
		oid(f, cut_obj, o);
		int r = rados_trunc(b->io, o, cut_off);
		if (r < 0 && r != -ENOENT)
			err = r;
	}
	enum { BATCH = 64 };
	for (uint64_t i = from; i < to && !err;) {
		rados_completion_t c[BATCH];
		unsigned n = 0;
		for (; i < to && n < BATCH; i++) {
			if (rados_aio_create_completion2(NULL, NULL, &c[n]) < 0) {
				err = -ENOMEM;
				break;
			}
			oid(f, i, o);
			if (i == 0) {   /* object 0 holds the size and the lock: cut it */
				int r = rados_aio_write_full(b->io, o, c[n], "", 0);
				if (r < 0) {
					rados_aio_release(c[n]);
					err = r;
					break;
				}
			} else if (rados_aio_remove(b->io, o, c[n]) < 0) {
				rados_aio_release(c[n]);
				err = -EIO;
				break;
			}
			n++;
		}
		for (unsigned k = 0; k < n; k++) {
			rados_aio_wait_for_complete(c[k]);
			int r = rados_aio_get_return_value(c[k]);
			if (r < 0 && r != -ENOENT && !err)
				err = r;
			rados_aio_release(c[k]);
		}
	}
	sync_end(b);
	return err;
}

/* Finish a shrink's removals (meta_lock held): 0, or the error (the
 * removals stay pending). */
static int trim_pending_locked(struct rfile *f)
{
	assert_held(&f->meta_lock);
	struct rbe *b = f->b;
	uint64_t at = f->trim_at;
	if (at == UINT64_MAX)
		return 0;
	int r = trim_objects(f, at / b->objsize, at % b->objsize, (at + b->objsize - 1) / b->objsize,
			     f->trim_upto);
	if (!r) {
		pthread_mutex_lock(&f->lock);
		f->trim_at = UINT64_MAX;
		pthread_mutex_unlock(&f->lock);
	}
	return r;
}

/* ------------------------------------------------------------------ */
/* the completion thread                                                */

static void publish(struct rbe *b)
{
	atomic_store_explicit(&b->st_window, window_bytes(&b->win), memory_order_relaxed);
	atomic_store_explicit(&b->st_rtt, (uint64_t)b->win.srtt, memory_order_relaxed);
	atomic_store_explicit(&b->st_base, (uint64_t)b->win.sbase, memory_order_relaxed);
	atomic_store_explicit(&b->st_inflight, b->win.inflight_bytes, memory_order_relaxed);
}

/* librados' callback, on one of its threads: note it, wake the thread. */
static void piece_cb(rados_completion_t c, void *arg)
{
	(void)c;
	struct rpiece *p = arg;
	struct rbe *b = p->req->f->b;
	pthread_mutex_lock(&b->lock);
	p->next = b->done;
	b->done = p;
	bool wake = b->sleeping;
	b->sleeping = false;
	pthread_mutex_unlock(&b->lock);
	if (wake)
		pthread_cond_signal(&b->cond);
}

static void fail_io(struct rbe *b, struct wbc_io *io, int err)
{
	io->res = err;
	pthread_mutex_lock(&b->lock);
	io->backend_data[0] = b->failed;
	b->failed = io;
	pthread_mutex_unlock(&b->lock);
}

/* Gather or scatter @io's iovec to or from @buf (its first @len bytes). */
static void iov_copy(const struct wbc_io *io, char *buf, size_t len, bool to_buf)
{
	size_t at = 0;
	for (int i = 0; i < io->iovcnt && at < len; i++) {
		size_t l = WBC_MIN(io->iov[i].iov_len, len - at);
		if (to_buf)
			memcpy(buf + at, io->iov[i].iov_base, l);
		else
			memcpy(io->iov[i].iov_base, buf + at, l);
		at += l;
	}
}

static bool iov_contiguous(const struct wbc_io *io)
{
	for (int i = 1; i < io->iovcnt; i++)
		if ((char *)io->iov[i - 1].iov_base + io->iov[i - 1].iov_len != io->iov[i].iov_base)
			return false;
	return true;
}

/* Start @io (in the window already). */
static void issue_io(struct rbe *b, struct wbc_io *io, uint64_t now)
{
	struct rfile *f = io->file;
	bool write = io->op == WBC_IO_WRITE;
	size_t len = io->len;
	if (write && (atomic_load_explicit(&f->fenced, memory_order_relaxed) ||
		      atomic_load_explicit(&b->fail_writes, memory_order_relaxed))) {
		fail_io(b, io, -EIO);
		return;
	}
	if (!write) {
		pthread_mutex_lock(&f->lock);
		uint64_t size = f->size;
		pthread_mutex_unlock(&f->lock);
		len = io->off >= size ? 0 : (size_t)WBC_MIN((uint64_t)len, size - io->off);
	}
	unsigned n = 0;
	if (len) {
		uint64_t first = io->off / b->objsize, last = (io->off + len - 1) / b->objsize;
		n = (unsigned)(last - first + 1);
	}
	struct rreq *r = calloc(1, sizeof(*r) + n * sizeof(struct rpiece));
	if (!r) {
		fail_io(b, io, -ENOMEM);
		return;
	}
	r->io = io;
	r->f = f;
	r->len = len;
	r->sent_ns = now;
	r->npieces = r->left = n;
	io->backend_data[1] = r;
	char *buf = io->iov[0].iov_base;
	if (len && !iov_contiguous(io)) {
		if (!(r->bounce = malloc(len))) {
			free(r);
			fail_io(b, io, -ENOMEM);
			return;
		}
		buf = r->bounce;
		if (write)
			iov_copy(io, buf, len, true);
	}
	if (!n) {
		/* a piece-less request (a read at or past the end): done at once */
		struct rpiece *p = calloc(1, sizeof(*p));
		if (!p) {
			free(r);
			fail_io(b, io, -ENOMEM);
			return;
		}
		p->req = r;
		p->next = NULL;
		pthread_mutex_lock(&b->lock);
		p->next = b->done;
		b->done = p;
		pthread_mutex_unlock(&b->lock);
		return;
	}
	/* set up every piece first: a callback may come before the last is sent */
	size_t at = 0;
	for (unsigned i = 0; i < n; i++) {
		struct rpiece *p = &r->piece[i];
		uint64_t off = io->off + at;
		p->req = r;
		p->obj = off / b->objsize;
		p->objoff = off % b->objsize;
		p->len = (size_t)WBC_MIN((uint64_t)(len - at), b->objsize - p->objoff);
		p->buf = buf + at;
		at += p->len;
	}
	for (unsigned i = 0; i < n; i++) {
		struct rpiece *p = &r->piece[i];
		char o[OID_MAX];
		oid(f, p->obj, o);
		int rc = rados_aio_create_completion2(p, piece_cb, &p->comp);
		if (!rc)
			rc = write ? rados_aio_write(b->io, o, p->comp, p->buf, p->len, p->objoff) :
				     rados_aio_read(b->io, o, p->comp, p->buf, p->len, p->objoff);
		if (rc < 0) {
			/* not sent: finish it here as failed */
			if (p->comp)
				rados_aio_release(p->comp);
			p->comp = NULL;
			pthread_mutex_lock(&b->lock);
			if (!r->err)
				r->err = rc;
			p->next = b->done;
			b->done = p;
			pthread_mutex_unlock(&b->lock);
		}
	}
}

/* Settle a completed piece (the completion thread); the request when it
 * was the last: returns it then. */
static struct rreq *settle(struct rbe *b, struct rpiece *p)
{
	struct rreq *r = p->req;
	bool write = r->io->op == WBC_IO_WRITE;
	if (p->comp) {
		atomic_store_explicit(&b->last_progress_ns, wbc_now_ns(), memory_order_relaxed);
		int rc = rados_aio_get_return_value(p->comp);
		rados_aio_release(p->comp);
		p->comp = NULL;
		if (!write && (rc == -ENOENT || (rc >= 0 && (size_t)rc < p->len))) {
			/* a missing object, or one that ends early: zeros */
			size_t got = rc > 0 ? (size_t)rc : 0;
			memset(p->buf + got, 0, p->len - got);
			rc = 0;
		}
		if (rc < 0) {
			if (transport_error(rc))
				atomic_store_explicit(&b->st_up, 0, memory_order_relaxed);
			if (!r->err)
				r->err = rerr(rc);
		} else {
			atomic_store_explicit(&b->st_up, 1, memory_order_relaxed);
		}
	}
	if (!r->npieces) {
		free(p);   /* the placeholder of a piece-less request */
		return r;
	}
	return --r->left ? NULL : r;
}

static void finish_req(struct rbe *b, struct rreq *r, uint64_t now)
{
	struct wbc_io *io = r->io;
	bool write = io->op == WBC_IO_WRITE;
	if (!r->err && r->npieces)
		window_sample(&b->win, write, r->len, r->sent_ns, now);
	if (!r->err && write) {
		struct rfile *f = r->f;
		pthread_mutex_lock(&f->lock);
		f->size = WBC_MAX(f->size, io->off + io->len);
		pthread_mutex_unlock(&f->lock);
	}
	if (!r->err && !write && r->bounce)
		iov_copy(io, r->bounce, r->len, false);
	io->res = r->err ? r->err : write ? (ssize_t)io->len : (ssize_t)r->len;
	free(r->bounce);
	free(r);
}

static void *rados_main(void *arg)
{
	struct rbe *b = arg;
	pthread_setname_np(pthread_self(), "wbc-rados");
	pthread_mutex_lock(&b->lock);
	for (;;) {
		struct rpiece *done = b->done;
		struct wbc_io *failed = b->failed;
		b->done = NULL;
		b->failed = NULL;
		struct wbc_io *take[TAKE_BATCH];
		unsigned nt = rqueue_take(&b->q, &b->win, take, TAKE_BATCH);
		if (!done && !failed && !nt) {
			if (b->stop && !b->win.inflight_ios)
				break;
			b->sleeping = true;
			pthread_cond_wait(&b->cond, &b->lock);
			continue;
		}
		pthread_mutex_unlock(&b->lock);

		uint64_t now = wbc_now_ns();
		if (nt && !atomic_load_explicit(&b->st_inflight, memory_order_relaxed))
			atomic_store_explicit(&b->last_progress_ns, now, memory_order_relaxed);
		for (unsigned i = 0; i < nt; i++)
			issue_io(b, take[i], now);
		struct wbc_io *batch[COMPLETE_BATCH];
		unsigned n = 0;
		while (done || failed) {
			struct wbc_io *io;
			if (done) {
				struct rpiece *p = done;
				done = p->next;
				struct rreq *r = settle(b, p);
				if (!r)
					continue;
				io = r->io;
				finish_req(b, r, now);
			} else {
				io = failed;
				failed = io->backend_data[0];
			}
			io->backend_data[0] = io->backend_data[1] = NULL;
			window_put(&b->win, io->len);
			batch[n++] = io;
			if (n == COMPLETE_BATCH) {
				publish(b);
				wbc_io_complete_batch(batch, n);
				n = 0;
			}
		}
		publish(b);
		if (n)
			wbc_io_complete_batch(batch, n);
		pthread_mutex_lock(&b->lock);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* the lock keeper                                                      */

static int take_lock_of(struct rbe *b, const char *name, uint8_t flags)
{
	char o[OID_MAX];
	oid_of(name, 0, o);
	char desc[160];
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	snprintf(desc, sizeof(desc), "wbcache on %s, pid %d", host, (int)getpid());
	sync_begin(b);
	int r = rados_lock_exclusive(b->io, o, LOCK_NAME, b->cookie, desc, NULL, flags);
	sync_end(b);
	return r;
}

static int take_lock(struct rfile *f, uint8_t flags)
{
	return take_lock_of(f->b, f->name, flags);
}

/* Keep @f listed (its node valid) while files_lock is let go. */
static void file_hold_locked(struct rfile *f)
{
	assert_held(&f->b->files_lock);
	f->busy++;
}

static void file_unhold_locked(struct rfile *f)
{
	assert_held(&f->b->files_lock);
	if (!--f->busy)
		pthread_cond_broadcast(&f->b->files_idle);
}

/* Take @f off the list, once no one uses it without the lock (remove). */
static void file_unlist(struct rfile *f)
{
	struct rbe *b = f->b;
	pthread_mutex_lock(&b->files_lock);
	while (f->busy || f->renewing)
		pthread_cond_wait(&b->files_idle, &b->files_lock);
	list_del_init(&f->node);
	pthread_mutex_unlock(&b->files_lock);
}

/* close() begins: once no flush uses @f, the others (a flush, the
 * keeper, an open of the name) pass it by.  A lock renewal of the keeper
 * in flight is not waited for. */
static void file_close_begin(struct rfile *f)
{
	struct rbe *b = f->b;
	pthread_mutex_lock(&b->files_lock);
	while (f->busy)
		pthread_cond_wait(&b->files_idle, &b->files_lock);
	f->closed = true;
	pthread_mutex_unlock(&b->files_lock);
}

static void free_file(struct rfile *f);

/* ... and ends: @f freed, or left to the keeper (its renewal in flight). */
static void file_close_end(struct rfile *f)
{
	struct rbe *b = f->b;
	pthread_mutex_lock(&b->files_lock);
	bool keep = f->renewing;
	if (keep)
		f->orphan = true;
	else
		list_del_init(&f->node);
	pthread_mutex_unlock(&b->files_lock);
	if (!keep)
		free_file(f);
}

static void *keeper_main(void *arg)
{
	struct rbe *b = arg;
	pthread_setname_np(pthread_self(), "wbc-rados-keep");
	pthread_mutex_lock(&b->files_lock);
	uint64_t next_check = wbc_now_ns() + b->keeper_ns;
	while (!b->keeper_stop) {
		uint64_t now = wbc_now_ns();
		wbc_cond_timedwait_ns(&b->keeper_cond, &b->files_lock,
				      next_check > now ? next_check - now : 0);
		if (b->keeper_stop)
			break;
		now = wbc_now_ns();
		if (now < next_check)
			continue;
		next_check = now + b->keeper_ns;
		struct list_head *next;
		for (struct list_head *pos = b->files.next; pos != &b->files && !b->keeper_stop;
		     pos = next) {
			struct rfile *f = container_of(pos, struct rfile, node);
			next = pos->next;
			if (atomic_load(&f->fenced) || f->closed)
				continue;
			f->renewing++;
			pthread_mutex_unlock(&b->files_lock);
			int r = take_lock(f, LIBRADOS_LOCK_FLAG_MUST_RENEW);
			pthread_mutex_lock(&b->files_lock);
			/* closed meanwhile: its unlock may have come first */
			if (!f->closed && (r == -ENOENT || r == -EBUSY || r == -ESHUTDOWN)) {
				atomic_store(&f->fenced, true);
				fprintf(stderr, "wbcache: rados: the lock on %s was broken: its writes "
					"fail from now on\n", f->name);
			}
			next = pos->next;
			if (!--f->renewing) {
				pthread_cond_broadcast(&b->files_idle);   /* remove */
				if (f->orphan) {   /* its close left it to us */
					list_del_init(&f->node);
					free_file(f);
				}
			}
		}
	}
	pthread_mutex_unlock(&b->files_lock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* the map watcher                                                      */

/* Operations in flight and none answered for STALL_NS: ask the monitor
 * for the newest OSD map, then again each STALL_NS while it lasts.  A
 * client learns of an OSD that restarted (at a new address) only from a
 * newer map; librados asks for one only every objecter_tick_interval
 * (5 s), and only for operations older than objecter_timeout (10 s): a
 * restarted OSD was found up to 5 s late, and operations sent to the dead
 * instance within 10 s of its death waited for timeout=.  Its own thread:
 * the keeper waits out a lock renewal sent to the dead OSD, which a map
 * asked for here ends. */
static void *watcher_main(void *arg)
{
	struct rbe *b = arg;
	pthread_setname_np(pthread_self(), "wbc-rados-map");
	uint64_t last_ask = 0;
	pthread_mutex_lock(&b->watch_lock);
	while (!b->watch_stop) {
		uint64_t now = wbc_now_ns(), wait = STALL_NS;
		if (atomic_load_explicit(&b->st_inflight, memory_order_relaxed) ||
		    atomic_load(&b->sync_ops)) {
			uint64_t due = WBC_MAX(atomic_load_explicit(&b->last_progress_ns,
								    memory_order_relaxed),
					       last_ask) + STALL_NS;
			if (now >= due) {
				/* never asked once watch_stop is set (the handle
				 * may be shut down then) */
				b->watch_asking = true;
				rados_t cl = b->cluster;   /* stop_watcher clears it */
				pthread_mutex_unlock(&b->watch_lock);
				atomic_fetch_add(&b->map_requests, 1);   /* sent */
				rados_wait_for_latest_osdmap(cl);
				last_ask = wbc_now_ns();
				pthread_mutex_lock(&b->watch_lock);
				b->watch_asking = false;
				pthread_cond_broadcast(&b->watch_cond);   /* stop_watcher */
				continue;
			}
			wait = due - now;
		}
		wbc_cond_timedwait_ns(&b->watch_cond, &b->watch_lock, wait);
	}
	pthread_mutex_unlock(&b->watch_lock);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* the operations                                                       */

static int rados_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct rbe *b = ctx;
	/* writes beyond a file's extent raise it first (durably) */
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		if (io->op != WBC_IO_WRITE)
			continue;
		struct rfile *f = io->file;
		uint64_t end = io->off + io->len;
		if (atomic_load(&f->fenced))
			continue;   /* fails when issued; object 0 is another's now */
		pthread_mutex_lock(&f->lock);
		bool beyond = end > f->extent || end > f->trim_at;
		f->hiwater = WBC_MAX(f->hiwater, end);
		pthread_mutex_unlock(&f->lock);
		if (!beyond)
			continue;
		pthread_mutex_lock(&f->meta_lock);
		/* a write past a shrink's pending removals: they go first */
		int r = end > f->trim_at ? trim_pending_locked(f) : 0;
		pthread_mutex_lock(&f->lock);
		uint64_t ext = f->extent;
		pthread_mutex_unlock(&f->lock);
		if (!r && end > ext) {
			uint64_t want = (end + b->objsize - 1) / b->objsize * b->objsize +
					EXTENT_STEP_OBJS * b->objsize;
			r = put_sizes(f, UINT64_MAX, want);
			if (!r) {
				pthread_mutex_lock(&f->lock);
				f->extent = want;
				pthread_mutex_unlock(&f->lock);
			}
		}
		pthread_mutex_unlock(&f->meta_lock);
		if (r < 0) {
			if (transport_error(r))
				atomic_store_explicit(&b->st_up, 0, memory_order_relaxed);
			n = i;   /* queue those before it; the engine fails the rest */
			if (!n) {
				*queued = 0;
				return rerr(r);
			}
			rados_submit(ctx, ios, n, queued);
			return rerr(r);
		}
	}
	pthread_mutex_lock(&b->lock);
	for (unsigned i = 0; i < n; i++)
		rqueue_add(&b->q, ios[i]);
	bool wake = b->sleeping;
	b->sleeping = false;
	pthread_mutex_unlock(&b->lock);
	if (wake)
		pthread_cond_signal(&b->cond);
	*queued = n;
	return 0;
}

static int wait_closes(struct rbe *b);
static int retry_closes(struct rbe *b);

static int flush_file(struct rfile *f)
{
	pthread_mutex_lock(&f->meta_lock);
	pthread_mutex_lock(&f->lock);
	uint64_t size = f->size;
	bool dirty = size != f->durable;
	pthread_mutex_unlock(&f->lock);
	int r = dirty ? put_sizes(f, size, UINT64_MAX) : 0;
	if (dirty && r >= 0) {
		pthread_mutex_lock(&f->lock);
		f->durable = size;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_unlock(&f->meta_lock);
	return r < 0 ? rerr(r) : 0;
}

static int rados_flush(void *ctx, void *file, unsigned flags)
{
	(void)flags;
	struct rbe *b = ctx;
	if (file) {
		struct rfile *f = file;
		if (atomic_load(&f->fenced))
			return -EIO;
		return flush_file(f);
	}
	int err = wait_closes(b);
	int rr = retry_closes(b);
	if (rr && !err)
		err = rr;
	pthread_mutex_lock(&b->files_lock);
	for (struct list_head *pos = b->files.next; pos != &b->files; pos = pos->next) {
		struct rfile *f = container_of(pos, struct rfile, node);
		if (f->closed)
			continue;   /* its close writes its size */
		file_hold_locked(f);
		pthread_mutex_unlock(&b->files_lock);
		int r = atomic_load(&f->fenced) ? -EIO : flush_file(f);
		if (r && !err)
			err = r;
		pthread_mutex_lock(&b->files_lock);
		file_unhold_locked(f);
	}
	pthread_mutex_unlock(&b->files_lock);
	return err;
}

static void rados_caps(void *ctx, struct wbc_backend_caps *caps)
{
	struct rbe *b = ctx;
	caps->max_io = b->max_io;
	caps->queue_depth = WBC_MAX(RADOS_QUEUE_DEPTH, b->fixed);
}

static void free_file(struct rfile *f)
{
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->meta_lock);
	free(f->name);
	free(f);
}

/* An open that failed after it took the lock lets it go: true when the
 * unlock failed too (a timeout: the cluster out of reach), and the lock
 * is owed (else it stayed held for good, told nowhere, and no other
 * cache opened the file until someone broke it by hand). */
static bool open_unlock(struct rbe *b, const char *name)
{
	int r = unlock_name(b, name);
	if (r >= 0)
		return false;
	fprintf(stderr, "wbcache: rados: %s: its lock could not be released after its open "
		"failed: %s; tried again at the next sync or the close of the device\n", name,
		strerror(-rerr(r)));
	return true;
}

/* Open @f (its name set; freed on failure).  @rc: the name's close whose
 * size write failed (held: CLOSE_RETRY); its size is the file's, written
 * first (then rc->sized is cleared), and the lock it kept is ours.  On
 * failure, *@owe: the lock is ours still (its release failed): an
 * unlock is owed. */
static int open_file(struct rbe *b, struct rfile *f, unsigned flags, struct rclose *rc,
		     void **file, uint64_t *size, bool *owe)
{
	char o[OID_MAX];
	oid(f, 0, o);
	uint64_t psize;
	time_t pmtime;
	sync_begin(b);
	int r = rados_stat(b->io, o, &psize, &pmtime);
	sync_end(b);
	bool exists = r == 0;
	if (r < 0 && r != -ENOENT) {
		free_file(f);
		return rerr(r);
	}
	if (!exists && rc)
		rc->sized = false;   /* the file is gone (removed by another) */
	if (!exists && !(flags & WBC_OPEN_CREATE)) {
		free_file(f);
		return -ENOENT;
	}
	void (*pause)(void *) = atomic_exchange(&b->open_pause, NULL);
	if (pause)
		pause(b->open_pause_arg);
	r = take_lock(f, 0);   /* creates object 0 when missing */
	if (!r && rc && rc->sized) {
		/* the lock its close kept was broken (and the file perhaps
		 * opened by another since, its data past the size trimmed):
		 * that size is no longer the file's */
		fprintf(stderr, "wbcache: rados: %s: its lock was broken after its close "
			"failed to write its size (%llu): what was past the size the file has "
			"there is lost\n", f->name, (unsigned long long)rc->size);
		rc->sized = false;
		/* the next sync's error, as a sync's retry would have said */
		pthread_mutex_lock(&b->lock);
		if (!b->close_err)
			b->close_err = -EIO;
		pthread_mutex_unlock(&b->lock);
	}
	if (r == -EEXIST) {
		/* held under our cookie: by a handle of this backend (the engine
		 * opens a name once at a time, but a backend's user may open it
		 * again, as the conformance suite does to read it back), which
		 * knows the sizes */
		pthread_mutex_lock(&b->files_lock);
		for (struct list_head *pos = b->files.next; pos != &b->files; pos = pos->next) {
			struct rfile *g = container_of(pos, struct rfile, node);
			if (!g->closed && !strcmp(g->name, f->name)) {
				pthread_mutex_lock(&g->lock);
				f->size = g->size;
				f->durable = g->durable;
				f->extent = g->extent;
				f->hiwater = g->hiwater;
				f->trim_at = UINT64_MAX;
				pthread_mutex_unlock(&g->lock);
				f->lock_shared = true;
				list_add_tail(&f->node, &b->files);
				break;
			}
		}
		pthread_mutex_unlock(&b->files_lock);
		if (f->lock_shared) {
			*file = f;
			*size = f->size;
			return 0;
		}
		/* no handle holds it: a close of ours whose unlock failed (a
		 * timeout) left it, and it is ours still: open as usual */
		r = 0;
	}
	if (r < 0) {
		/* a timeout tells nothing: an unlock @rc owed is owed still
		 * (forgotten, the lock stayed for good) */
		*owe = rc && transport_error(r);
		free_file(f);
		return rerr(r);
	}
	if (exists) {
		/* removed by another cache between the look and the lock: the
		 * lock made object 0 anew, bare (every file's has its size).
		 * It was opened as an empty file (without O_CREAT too), its
		 * layout unrecorded, and the name stayed, a file of 0 bytes */
		bool sized = true;
		uint64_t v;
		sync_begin(b);
		r = get_u64_xattr_p(b->io, o, XATTR_SIZE, &v, &sized);
		sync_end(b);
		if (r < 0 && r != -EUCLEAN) {   /* a garbled one: said below */
			*owe = open_unlock(b, f->name);
			free_file(f);
			return rerr(r);
		}
		r = 0;
		if (!sized) {
			if (rc)
				rc->sized = false;   /* as above: the file is gone */
			exists = false;
			if (!(flags & WBC_OPEN_CREATE)) {
				/* the object the lock made goes, the lock with it */
				sync_begin(b);
				r = rados_remove(b->io, o);
				sync_end(b);
				if (r < 0 && r != -ENOENT)
					*owe = open_unlock(b, f->name);
				free_file(f);
				return -ENOENT;
			}
		}
	}
	if (!exists) {
		/* made by another cache between the stat and the lock (it
		 * locked, wrote and closed it meanwhile): its layout is there,
		 * and its size, which the create's below would have cut to 0 */
		uint64_t made = 0;
		sync_begin(b);
		r = get_u64_xattr(b->io, o, XATTR_OBJSIZE, &made);
		sync_end(b);
		if (r < 0) {
			*owe = open_unlock(b, f->name);
			free_file(f);
			return rerr(r);
		}
		exists = made != 0;
	}
	uint64_t sz = 0, ext = 0, made_with = 0;
	if (exists) {
		sync_begin(b);
		if (!(r = get_u64_xattr(b->io, o, XATTR_OBJSIZE, &made_with)) &&
		    !(r = get_u64_xattr(b->io, o, XATTR_SIZE, &sz)))
			r = get_u64_xattr(b->io, o, XATTR_EXTENT, &ext);
		sync_end(b);
		/* no file is that large (the offsets past it overflowed: the
		 * trim below computed its objects wrapped around) */
		if (!r && (sz > WBC_MAX_OFFSET || ext > 2 * WBC_MAX_OFFSET))
			r = -EUCLEAN;
		if (r == -EUCLEAN)
			fprintf(stderr, "wbcache: rados: %s: its size attributes (%s, %s, %s) do "
				"not parse (or lie past 2^62): not opened, nothing trimmed\n",
				f->name, XATTR_OBJSIZE, XATTR_SIZE, XATTR_EXTENT);
		if (!r && made_with && made_with != b->objsize) {
			fprintf(stderr, "wbcache: rados: %s was made with object_size=%llu, not %llu: "
				"open it with that\n", f->name, (unsigned long long)made_with,
				(unsigned long long)b->objsize);
			r = -EINVAL;
		}
		/* the size a failed close left here: the data the engine
		 * wrote back reaches it (the extent says so), and the trim
		 * below would take it for a dead cache's */
		if (!r && rc && rc->sized && !(r = put_sizes(f, rc->size, UINT64_MAX))) {
			sz = rc->size;
			rc->sized = false;
		}
	} else {
		/* new: its layout, with it */
		char ob[32];
		int n = snprintf(ob, sizeof(ob), "%llu", (unsigned long long)b->objsize);
		sync_begin(b);
		r = rados_setxattr(b->io, o, XATTR_OBJSIZE, ob, (size_t)n);
		sync_end(b);
	}
	/* what a cache that died left past the size (in the object holding
	 * it too): removed, so that an extension reads zeros; the extent is
	 * then the size, and a write past it raises it first */
	uint64_t size_objs = (sz + b->objsize - 1) / b->objsize;
	if (!r && ext > sz) {
		r = trim_objects(f, sz / b->objsize, sz % b->objsize, size_objs,
				 (ext + b->objsize - 1) / b->objsize);
		if (!r)
			r = put_sizes(f, sz, sz);
		ext = sz;
	} else if (!r && !exists) {
		r = put_sizes(f, 0, 0);
	}
	if (r < 0) {
		if (!rc || !rc->sized)   /* else it keeps the size unwritten */
			*owe = open_unlock(b, f->name);
		free_file(f);
		return rerr(r);
	}
	f->size = f->durable = sz;
	f->extent = f->hiwater = ext;
	f->trim_at = UINT64_MAX;
	pthread_mutex_lock(&b->files_lock);
	list_add_tail(&f->node, &b->files);
	pthread_mutex_unlock(&b->files_lock);
	*file = f;
	*size = sz;
	return 0;
}

static int rados_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct rbe *b = ctx;
	struct rfile *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->b = b;
	wbc_mutex_init(&f->lock);
	wbc_mutex_init(&f->meta_lock);
	list_init(&f->node);
	if (asprintf(&f->name, "%s%s%s", b->prefix ? b->prefix : "", b->prefix ? "/" : "",
		     name) < 0) {
		f->name = NULL;
		free_file(f);
		return -ENOMEM;
	}
	if (strlen(f->name) + 20 > OID_MAX) {
		free_file(f);
		return -ENAMETOOLONG;
	}
	/* the name's close in flight first (its unlock would land after
	 * this open's lock); one whose size write failed is this open's */
	struct rclose *rc;
	pthread_mutex_lock(&b->lock);
	while ((rc = close_find_locked(b, f->name)) && rc->state != CLOSE_FAILED)
		pthread_cond_wait(&b->closing_cond, &b->lock);
	if (rc)
		rc->state = CLOSE_RETRY;
	/* an unlock owed (its close's was lost on the way): an open that
	 * succeeds takes the lock over; one that fails may have failed
	 * before it could, or failed to unlock it too (a timeout), and
	 * forgotten here the lock stayed for good.  Kept: the next sync's
	 * retry_closes unlocks it, or finds it is no longer ours */
	bool unlock_owed = rc && !rc->sized;
	pthread_mutex_unlock(&b->lock);
	bool owe = false;
	int r = open_file(b, f, flags, rc, file, size, &owe);
	if (rc) {
		pthread_mutex_lock(&b->lock);
		/* a size or an unlock still owed */
		if (rc->sized || owe || (r < 0 && unlock_owed)) {
			rc->state = CLOSE_FAILED;
			pthread_cond_broadcast(&b->closing_cond);
		} else {
			close_forget_locked(b, rc);
		}
		pthread_mutex_unlock(&b->lock);
	} else if (owe) {
		/* the failed open's lock: released as a close's that failed
		 * (a sync, the close of the device, an open of the name),
		 * and named by the destruction if it never is */
		size_t len = strlen(name) + strlen(b->prefix ? b->prefix : "") + 2;
		struct rclose *oc = calloc(1, sizeof(*oc) + len);
		if (oc) {
			oc->b = b;
			oc->state = CLOSE_FAILED;
			snprintf(oc->name, len, "%s%s%s", b->prefix ? b->prefix : "",
				 b->prefix ? "/" : "", name);
			pthread_mutex_lock(&b->lock);
			list_add_tail(&oc->node, &b->closes);
			pthread_mutex_unlock(&b->lock);
		}
	}
	return r;
}

/* The close of @name, whose lock was broken (`wbcache rados-unlock`), had
 * size @size to write: the data written back past the size the file has
 * in the cluster is lost (the new owner's open trims it); the next sync's
 * error, once. */
static void fenced_size_lost(struct rbe *b, const char *name, uint64_t size)
{
	fprintf(stderr, "wbcache: rados: %s: its lock was broken before its close wrote its "
		"size (%llu): what was past the size the file has there is lost\n", name,
		(unsigned long long)size);
	pthread_mutex_lock(&b->lock);
	if (!b->close_err)
		b->close_err = -EIO;
	pthread_mutex_unlock(&b->lock);
}

/* @rc's asynchronous part is over, @r the result of its last operation. */
static void close_done(struct rclose *rc, int r)
{
	struct rbe *b = rc->b;
	if (r == -ESHUTDOWN) {
		/* this client is fenced (blocklisted: `wbcache rados-unlock`
		 * broke its lock): the lock is gone, nothing is left to
		 * release, and a size owed never lands (it was said to be
		 * written later, its lock "kept until it is", or the lock to
		 * be released later: neither was so) */
		if (rc->sized && !rc->unlocking)
			fenced_size_lost(b, rc->name, rc->size);
		pthread_mutex_lock(&b->lock);
		b->closing--;
		close_forget_locked(b, rc);
		pthread_mutex_unlock(&b->lock);
		return;
	}
	bool keep = r < 0 && rc->sized && !rc->unlocking;
	/* the unlock lost on the way (the size, if any, is there): nothing
	 * is at risk, the lock is released later */
	bool unlock_later = r < 0 && !keep && transport_error(r);
	if (keep)   /* said while @rc is still this close's alone: once it is
		     * CLOSE_FAILED, an open or a flush may free it */
		fprintf(stderr, "wbcache: rados: %s: its size (%llu) could not be written at "
			"close: %s; its lock is kept until it is (the next open of it, a sync "
			"or the close of the device)\n", rc->name, (unsigned long long)rc->size,
			strerror(-rerr(r)));
	else if (unlock_later)
		fprintf(stderr, "wbcache: rados: %s: its lock could not be released at close: "
			"%s; tried again at the next sync or the close of the device\n",
			rc->name, strerror(-rerr(r)));
	if (unlock_later) {
		rc->sized = false;
		keep = true;
	}
	pthread_mutex_lock(&b->lock);
	b->closing--;
	if (keep) {
		/* kept, locked: retried by an open, a flush, the destruction */
		rc->state = CLOSE_FAILED;
		pthread_cond_broadcast(&b->closing_cond);
		pthread_mutex_unlock(&b->lock);
		return;
	}
	if (r < 0 && !b->close_err)
		b->close_err = rerr(r);
	if (r < 0)
		unlock_failed(rc->name, r);
	close_forget_locked(b, rc);
	pthread_mutex_unlock(&b->lock);
}

static void close_start(struct rclose *rc);

/* A close's size write or unlock is done (librados' thread). */
static void close_cb(rados_completion_t c, void *arg)
{
	struct rclose *rc = arg;
	int r = rados_aio_get_return_value(c);
	rados_aio_release(c);
	sync_end(rc->b);
	if (r == -ENOENT)
		r = 0;   /* the file is gone (its lock broken and removed) */
	if (r >= 0 && rc->sized && !rc->unlocking) {
		rc->unlocking = true;   /* the size is there: the unlock now */
		close_start(rc);
		return;
	}
	close_done(rc, r);
}

/* Send @rc's next operation: the size write, or the unlock. */
static void close_start(struct rclose *rc)
{
	struct rbe *b = rc->b;
	char o[OID_MAX], sb[32];
	oid_of(rc->name, 0, o);
	rados_completion_t c;
	int r = rados_aio_create_completion2(rc, close_cb, &c);
	if (r >= 0 && rc->sized && !rc->unlocking && atomic_load(&b->fail_sizes)) {
		rados_aio_release(c);
		r = -EIO;
	} else if (r >= 0 && (!rc->sized || rc->unlocking) && atomic_load(&b->fail_unlocks)) {
		rados_aio_release(c);
		r = -ETIMEDOUT;
	} else if (r >= 0) {
		sync_begin(b);
		if (rc->sized && !rc->unlocking) {
			/* as put_sizes_of: only on object 0 as it is (a setxattr
			 * alone made it anew after the file was removed, its
			 * lock broken: a file of that size of zeros) */
			int n = snprintf(sb, sizeof(sb), "%llu", (unsigned long long)rc->size);
			rados_write_op_t op = rados_create_write_op();
			r = -ENOMEM;
			if (op) {
				rados_write_op_assert_exists(op);
				rados_write_op_setxattr(op, XATTR_SIZE, sb, (size_t)n);
				r = rados_aio_write_op_operate(op, b->io, c, o, NULL, 0);
				rados_release_write_op(op);
			}
		} else {
			r = rados_aio_unlock(b->io, o, LOCK_NAME, b->cookie, c);
		}
		if (r >= 0)
			return;
		rados_aio_release(c);
		sync_end(b);
	}
	close_done(rc, r);
}

/* close() may run on the completion thread (a file's last write done):
 * its size write and unlock go out asynchronously (struct rclose);
 * flush(NULL) and destroy wait for them. */
static void rados_close_file(void *ctx, void *file)
{
	struct rbe *b = ctx;
	struct rfile *f = file;
	file_close_begin(f);
	if (atomic_load(&f->fenced) && !f->lock_shared && !f->removed) {
		/* the keeper found the lock broken: nothing to release, and a
		 * size owed is lost (it went untold: the engine knew of no
		 * failed write, and a sync passes closed files by) */
		pthread_mutex_lock(&f->lock);
		uint64_t size = f->size;
		bool dirty = size != f->durable;
		pthread_mutex_unlock(&f->lock);
		if (dirty)
			fenced_size_lost(b, f->name, size);
	} else if (!f->lock_shared && !f->removed) {
		pthread_mutex_lock(&f->lock);
		uint64_t size = f->size;
		bool dirty = size != f->durable;
		pthread_mutex_unlock(&f->lock);
		struct rclose *rc = calloc(1, sizeof(*rc) + strlen(f->name) + 1);
		if (!rc) {
			/* no room for the record: synchronously, the unlock only
			 * once the size is there */
			int r = dirty ? put_sizes(f, size, UINT64_MAX) : 0;
			if (r >= 0 && (r = unlock_name(b, f->name)) < 0)
				unlock_failed(f->name, r);
			pthread_mutex_lock(&b->lock);
			if (r < 0 && !b->close_err)
				b->close_err = rerr(r);
			pthread_mutex_unlock(&b->lock);
		} else {
			rc->b = b;
			rc->size = size;
			rc->sized = dirty;
			rc->state = CLOSE_FLIGHT;
			strcpy(rc->name, f->name);
			pthread_mutex_lock(&b->lock);
			list_add_tail(&rc->node, &b->closes);
			b->closing++;
			pthread_mutex_unlock(&b->lock);
			close_start(rc);
		}
	}
	file_close_end(f);
}

/* Wait for the closes in flight; their first error (once). */
static int wait_closes(struct rbe *b)
{
	pthread_mutex_lock(&b->lock);
	while (b->closing)
		pthread_cond_wait(&b->closing_cond, &b->lock);
	int err = b->close_err;
	b->close_err = 0;
	pthread_mutex_unlock(&b->lock);
	return err;
}

/* Write the sizes the closes that failed could not, and unlock those
 * files: 0, or the first error (the closes that fail again stay). */
static int retry_closes(struct rbe *b)
{
	int err = 0;
	pthread_mutex_lock(&b->lock);
	unsigned pass = ++b->close_pass;
	for (;;) {
		struct rclose *rc = NULL;
		for (struct list_head *pos = b->closes.next; pos != &b->closes; pos = pos->next) {
			struct rclose *c = container_of(pos, struct rclose, node);
			if (c->state == CLOSE_FAILED && c->pass != pass) {
				rc = c;
				break;
			}
		}
		if (!rc)
			break;
		rc->state = CLOSE_RETRY;   /* ours: an open of the name waits */
		rc->pass = pass;
		pthread_mutex_unlock(&b->lock);
		/* still ours?  A broken lock: the file may be another's now */
		int r = take_lock_of(b, rc->name, LIBRADOS_LOCK_FLAG_MUST_RENEW);
		/* broken: a size owed is lost; an unlock owed, done by another */
		bool lost = r == -ENOENT || r == -EBUSY || r == -ESHUTDOWN;   /* blocklisted */
		bool again = false;
		if (lost && rc->sized)
			fprintf(stderr, "wbcache: rados: %s: its lock was broken after its close "
				"failed to write its size (%llu): what was past the size the file "
				"has there is lost\n", rc->name, (unsigned long long)rc->size);
		else if (r >= 0 && rc->sized)
			r = put_sizes_of(b, rc->name, rc->size, UINT64_MAX);
		if (lost) {
			if (!err && rc->sized)
				err = -EIO;
		} else if (r >= 0 || r == -ENOENT) {
			rc->sized = false;   /* the size is there */
			int u = unlock_name(b, rc->name);
			if (u < 0 && transport_error(u)) {
				again = true;   /* kept: nothing at risk */
			} else if (u < 0) {
				unlock_failed(rc->name, u);
				if (!err)
					err = rerr(u);
			}
		} else if (!rc->sized && transport_error(r)) {
			again = true;
		} else if (!err) {
			err = rerr(r);
		}
		pthread_mutex_lock(&b->lock);
		if (!again && (lost || r >= 0 || r == -ENOENT)) {
			close_forget_locked(b, rc);
		} else {
			rc->state = CLOSE_FAILED;
			pthread_cond_broadcast(&b->closing_cond);
		}
	}
	pthread_mutex_unlock(&b->lock);
	return err;
}

/*
 * A shrink writes the new size first: once that is durable the shrink is
 * done, whatever the removals of the objects past it do (they can fail
 * half way, an OSD gone: the engine, told the resize failed, would keep
 * pages the cluster no longer has).  Removals that fail stay pending,
 * made before the file grows past the size again (an extension, a write
 * past it), and by the next open after a crash (the extent is past the
 * size).  The data past the size is never read meanwhile (reads stop at
 * the size).
 */
static int rados_resize(void *ctx, void *file, uint64_t size)
{
	struct rbe *b = ctx;
	struct rfile *f = file;
	if (atomic_load(&f->fenced))
		return -EIO;
	pthread_mutex_lock(&f->meta_lock);
	int r = trim_pending_locked(f);
	pthread_mutex_lock(&f->lock);
	uint64_t old = f->size, hi = f->hiwater;
	if (!r && size > old && hi > old) {
		/* an extension over what a failed write left past the size:
		 * removed first, or the resize fails (once the size covers
		 * them, a close or a crash would keep them as the file's) */
		f->trim_at = old;
		f->trim_upto = (hi + b->objsize - 1) / b->objsize;
		f->hiwater = hi = old;
	}
	pthread_mutex_unlock(&f->lock);
	if (!r)
		r = trim_pending_locked(f);
	if (!r)
		r = put_sizes(f, size, UINT64_MAX);
	if (!r) {
		pthread_mutex_lock(&f->lock);
		f->size = f->durable = size;
		/* after a shrink, what lies past the new end goes (its old
		 * bytes, and what a failed write left): the objects wholly
		 * past it, and the one holding it is cut; up to what any
		 * write reached, not the size (a sparse file's); a failure
		 * stays pending, past the size */
		uint64_t from = WBC_MIN(size, old), upto = hi;
		if (upto > from) {
			f->trim_at = from;
			f->trim_upto = (upto + b->objsize - 1) / b->objsize;
			f->hiwater = from;
		}
		pthread_mutex_unlock(&f->lock);
		(void)trim_pending_locked(f);   /* a failure: pending */
	}
	pthread_mutex_unlock(&f->meta_lock);
	return r < 0 ? rerr(r) : 0;
}

/* Remove every object of @f, object 0 last (its lock, ours, goes with
 * it).  Out of the keeper's list first: there is no lock to re-assert. */
static int rbe_remove(void *ctx, void *file)
{
	struct rbe *b = ctx;
	struct rfile *f = file;
	if (atomic_load(&f->fenced))
		return -EIO;
	if (f->lock_shared)
		return -EBUSY;
	file_unlist(f);
	pthread_mutex_lock(&f->lock);
	/* every object that may hold data: up to what writes reached, and
	 * a shrink's removals still pending (not the size: a sparse file's
	 * would be 2^40 objects) */
	uint64_t last = (f->hiwater + b->objsize - 1) / b->objsize;
	if (f->trim_at != UINT64_MAX)
		last = WBC_MAX(last, f->trim_upto);
	pthread_mutex_unlock(&f->lock);
	int r = trim_objects(f, 0, 0, 1, last);
	if (!r) {
		char o[OID_MAX];
		oid(f, 0, o);
		sync_begin(b);
		r = rados_remove(b->io, o);
		sync_end(b);
		if (r == -ENOENT)
			r = 0;
	}
	if (r < 0) {   /* the file stays, locked: back on the keeper's list */
		pthread_mutex_lock(&b->files_lock);
		list_add(&f->node, &b->files);
		pthread_mutex_unlock(&b->files_lock);
		return rerr(r);
	}
	f->removed = true;
	return 0;
}

static void rados_stats(void *ctx, struct wbc_backend_stats *st)
{
	struct rbe *b = ctx;
	st->window_bytes = atomic_load_explicit(&b->st_window, memory_order_relaxed);
	st->inflight_bytes = atomic_load_explicit(&b->st_inflight, memory_order_relaxed);
	st->rtt_ns = atomic_load_explicit(&b->st_rtt, memory_order_relaxed);
	st->min_rtt_ns = atomic_load_explicit(&b->st_base, memory_order_relaxed);
	st->connected = atomic_load_explicit(&b->st_up, memory_order_relaxed);
	st->conns = 1;
	pthread_mutex_lock(&b->lock);
	st->queued_bytes = b->q.bytes;
	pthread_mutex_unlock(&b->lock);
}

static void free_rbe(struct rbe *b)
{
	if (b->io)
		rados_ioctx_destroy(b->io);
	if (b->cluster)
		rados_shutdown(b->cluster);
	pthread_mutex_destroy(&b->lock);
	pthread_mutex_destroy(&b->files_lock);
	pthread_mutex_destroy(&b->watch_lock);
	pthread_cond_destroy(&b->watch_cond);
	pthread_cond_destroy(&b->cond);
	pthread_cond_destroy(&b->keeper_cond);
	pthread_cond_destroy(&b->files_idle);
	pthread_cond_destroy(&b->closing_cond);
	while (!list_empty(&b->closes)) {
		struct list_head *pos = b->closes.next;
		list_del_init(pos);
		free(container_of(pos, struct rclose, node));
	}
	free(b->pool);
	free(b);
}

static void stop_watcher(struct rbe *b)
{
	if (!b->watcher_started)
		return;
	pthread_mutex_lock(&b->watch_lock);
	b->watch_stop = true;
	pthread_cond_broadcast(&b->watch_cond);
	/* a request a monitor answers ends by itself: the handle is shut
	 * down under it only after a second (then it is well inside
	 * librados' wait, which the shutdown ends) */
	uint64_t until = wbc_now_ns() + 1000000000ull, now;
	while (b->watch_asking && (now = wbc_now_ns()) < until)
		wbc_cond_timedwait_ns(&b->watch_cond, &b->watch_lock, until - now);
	bool asking = b->watch_asking;
	pthread_mutex_unlock(&b->watch_lock);
	if (asking) {
		/* its request for a map waits on a monitor that may never
		 * answer (a cluster out of reach: the close hung there, for
		 * good): shutting the handle down ends it.  The watcher asks
		 * no more (watch_stop) and touches the handle no more */
		if (b->io)
			rados_ioctx_destroy(b->io);
		b->io = NULL;
		rados_shutdown(b->cluster);
		b->cluster = NULL;
	}
	pthread_join(b->watcher, NULL);
	b->watcher_started = false;
}

static void rados_destroy(void *ctx)
{
	struct rbe *b = ctx;
	pthread_mutex_lock(&b->lock);
	b->stop = true;
	pthread_mutex_unlock(&b->lock);
	pthread_cond_signal(&b->cond);
	pthread_join(b->thread, NULL);
	int err = wait_closes(b);
	if (err)
		fprintf(stderr, "wbcache: rados: an error no sync reported since: a file's "
			"lock not released at close, or data lost past a size a close could "
			"not write: %s\n", strerror(-err));
	(void)retry_closes(b);
	for (struct list_head *pos = b->closes.next; pos != &b->closes; pos = pos->next) {
		struct rclose *rc = container_of(pos, struct rclose, node);
		if (rc->sized)
			fprintf(stderr, "wbcache: rados: %s: its size (%llu) could not be written: "
				"its lock stays, and no other cache opens it; breaking it "
				"(`wbcache rados-unlock`) loses what was written past the size "
				"it has there\n", rc->name, (unsigned long long)rc->size);
		else
			fprintf(stderr, "wbcache: rados: %s: its lock could not be released: "
				"no other cache opens it until `wbcache rados-unlock` breaks it "
				"(nothing is lost)\n", rc->name);
	}
	if (b->keeper_started) {
		pthread_mutex_lock(&b->files_lock);
		b->keeper_stop = true;
		pthread_mutex_unlock(&b->files_lock);
		pthread_cond_signal(&b->keeper_cond);
		pthread_join(b->keeper, NULL);
	}
	stop_watcher(b);
	free_rbe(b);
}

static const struct wbc_backend_ops rados_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "rados",
	.caps = rados_caps,
	.open = rados_open,
	.close = rados_close_file,
	.remove = rbe_remove,
	.submit = rados_submit,
	.flush = rados_flush,
	.resize = rados_resize,
	.destroy = rados_destroy,
	.stats = rados_stats,
};

/* ------------------------------------------------------------------ */
/* making one                                                           */

struct ropts {
	const char *conf, *id;
	uint64_t objsize;
	uint64_t max_io;
	unsigned fixed;
	double timeout, lock_check;
};

static int parse_opts(char *opts, struct ropts *o, char *err, size_t errlen)
{
	for (char *save = NULL, *kv = strtok_r(opts, ",", &save); kv;
	     kv = strtok_r(NULL, ",", &save)) {
		char *v = strchr(kv, '=');
		uint64_t n = 0;
		bool ok = v != NULL;
		if (ok)
			*v++ = '\0';
		if (!ok) {
			v = NULL;
		} else if (!strcmp(kv, "conf")) {
			o->conf = v;
			ok = *v;
		} else if (!strcmp(kv, "id")) {
			o->id = v;
			ok = *v;
		} else if (!strcmp(kv, "object_size")) {
			ok = !wbc_parse_size(v, &n) && n >= (64u << 10) && n <= (64u << 20) &&
			     !(n & (n - 1));
			o->objsize = n;
		} else if (!strcmp(kv, "max_io")) {
			ok = !wbc_parse_size(v, &n) && n >= 4096 && n <= (64u << 20);
			o->max_io = n;
		} else if (!strcmp(kv, "window")) {
			if (!strcmp(v, "adaptive")) {
				o->fixed = 0;
			} else {
				ok = !strncmp(v, "fixed:", 6) && !wbc_parse_size(v + 6, &n) &&
				     n >= 1 && n <= 4096;
				o->fixed = (unsigned)n;
			}
		} else if (!strcmp(kv, "timeout")) {
			ok = !wbc_parse_time(v, &o->timeout) && o->timeout < 1e6;
		} else if (!strcmp(kv, "lock_check")) {
			ok = !wbc_parse_time(v, &o->lock_check) && o->lock_check >= 0.01 &&
			     o->lock_check < 1e6;
		} else {
			ok = false;
		}
		if (!ok) {
			snprintf(err, errlen, "bad rados option '%s%s%s' (conf=PATH, id=NAME, "
				 "object_size=64K..64M (a power of two), max_io=4K..64M, "
				 "window=adaptive|fixed:1..4096, timeout=SECONDS, lock_check=SECONDS)", kv, v ? "=" : "",
				 v ? v : "");
			return -EINVAL;
		}
	}
	return 0;
}

/* The parse step of connect_spec: @copy (the spec, cut up) into the
 * pool (@copy), *@slash (the prefix, or NULL) and @o.  0 or -EINVAL with
 * a message. */
static int parse_spec(char *copy, char **slash, struct ropts *o, char *err, size_t errlen)
{
	char *opts = strchr(copy, ',');
	if (opts)
		*opts++ = '\0';
	int rc = opts ? parse_opts(opts, o, err, errlen) : 0;
	if ((*slash = strchr(copy, '/')))
		*(*slash)++ = '\0';
	if (!rc && !*copy) {
		snprintf(err, errlen, "rados: no pool (rados:POOL[/PREFIX][,opts])");
		rc = -EINVAL;
	}
	if (!rc && *slash && (!**slash || (*slash)[strlen(*slash) - 1] == '/')) {
		snprintf(err, errlen, "rados: bad prefix '%s'", *slash);
		rc = -EINVAL;
	}
	return rc;
}

int rados_spec_check(const char *spec, char *err, size_t errlen)
{
	char *copy = strdup(spec), *slash;
	struct ropts o = { .objsize = RADOS_DEFAULT_OBJ };
	int rc = copy ? parse_spec(copy, &slash, &o, err, errlen) : -ENOMEM;
	free(copy);
	return rc;
}

/* Connect to the cluster of @spec ("POOL[/PREFIX][,opts]", "rados:" taken
 * off); sets b->cluster, b->io and the options.  0 or -errno with a
 * message. */
static int connect_spec(struct rbe *b, const char *spec, char *err, size_t errlen)
{
	char *copy = strdup(spec);
	if (!copy)
		return -ENOMEM;
	struct ropts o = { .objsize = RADOS_DEFAULT_OBJ, .timeout = RADOS_DEFAULT_TIMEOUT_S,
			   .lock_check = KEEPER_S };
	char *slash;
	int rc = parse_spec(copy, &slash, &o, err, errlen);
	if (!rc) {
		b->pool = copy;   /* the prefix lies in the same allocation */
		b->prefix = slash;
		copy = NULL;
		b->objsize = o.objsize;
		b->max_io = (size_t)(o.max_io ? o.max_io : WBC_MIN(o.objsize, 4u << 20));
		b->fixed = o.fixed;
		b->timeout_ns = wbc_secs_to_ns(o.timeout);
		b->keeper_ns = wbc_secs_to_ns(o.lock_check);
	}
	if (!rc && (rc = rados_create(&b->cluster, o.id ? o.id : NULL)) < 0) {
		b->cluster = NULL;
		snprintf(err, errlen, "rados: cannot create a cluster handle: %s", strerror(-rc));
	}
	if (!rc) {
		rc = rados_conf_read_file(b->cluster, o.conf);   /* NULL: the search path */
		if (rc < 0 && o.conf)
			snprintf(err, errlen, "rados: cannot read %s: %s", o.conf, strerror(-rc));
		else
			rc = 0;   /* no file found: the environment may say all */
	}
	if (!rc)
		rados_conf_parse_env(b->cluster, NULL);   /* CEPH_ARGS */
	if (!rc) {
		/* 0: never, also where ceph.conf or CEPH_ARGS set one (and
		 * client_mount_timeout's own default, 300 s).  librados takes
		 * whole seconds: it refuses "0.5" (EINVAL), and the option kept
		 * its default, 0 (never) for the operations and 300 s for the
		 * connection; a fraction rounds up */
		static const char *const topt[] = { "rados_osd_op_timeout", "rados_mon_op_timeout",
						     "client_mount_timeout" };
		char t[32];
		snprintf(t, sizeof(t), "%.0f", ceil(o.timeout));
		for (size_t i = 0; !rc && i < sizeof(topt) / sizeof(topt[0]); i++)
			if ((rc = rados_conf_set(b->cluster, topt[i], t)) < 0)
				snprintf(err, errlen, "rados: cannot set %s=%s: %s", topt[i], t,
					 strerror(-rc));
	}
	if (!rc) {
		/* the window, not librados' throttle, limits what is in flight */
		rados_conf_set(b->cluster, "objecter_inflight_op_bytes", "2147483648");
		rados_conf_set(b->cluster, "objecter_inflight_ops", "65536");
		rados_conf_set(b->cluster, "log_to_stderr", "false");
		rados_conf_set(b->cluster, "err_to_stderr", "false");
	}
	if (!rc && (rc = rados_connect(b->cluster)) < 0) {
		/* no monitor to ask: librados says ENOENT, "No such file or
		 * directory", which named no file; a configuration without
		 * mon_host (none found, or one without it) is the usual cause */
		char mon[256] = "";
		if (rc == -ENOENT && !rados_conf_get(b->cluster, "mon_host", mon, sizeof(mon)) &&
		    !mon[0])
			snprintf(err, errlen, "rados: cannot connect to the cluster%s%s: no monitor "
				 "address (no mon_host %s, nor a DNS SRV record%s)",
				 o.conf ? " of " : "", o.conf ? o.conf : "",
				 o.conf ? "there" : "in a ceph.conf where librados looks",
				 o.conf ? "" : "; conf=PATH names the configuration");
		else
			snprintf(err, errlen, "rados: cannot connect to the cluster%s%s: %s",
				 o.conf ? " of " : "", o.conf ? o.conf : "", strerror(-rc));
	}
	if (!rc && (rc = rados_ioctx_create(b->cluster, b->pool, &b->io)) < 0) {
		b->io = NULL;
		snprintf(err, errlen, "rados: no pool '%s': %s", b->pool, strerror(-rc));
	}
	free(copy);
	return rc;
}

static struct rbe *new_rbe(void)
{
	struct rbe *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	wbc_mutex_init(&b->lock);
	wbc_mutex_init(&b->files_lock);
	wbc_mutex_init(&b->watch_lock);
	wbc_cond_init(&b->watch_cond);
	pthread_cond_init(&b->cond, NULL);
	wbc_cond_init(&b->keeper_cond);
	wbc_cond_init(&b->files_idle);
	pthread_cond_init(&b->closing_cond, NULL);
	list_init(&b->files);
	list_init(&b->closes);
	return b;
}

int rados_backend_new(const char *spec, const struct wbc_backend_ops **ops, void **ctx,
		      char *err, size_t errlen)
{
	struct rbe *b = new_rbe();
	if (!b)
		return -ENOMEM;
	int rc = connect_spec(b, spec, err, errlen);
	if (!rc) {
		char host[64] = "";
		gethostname(host, sizeof(host) - 1);
		uint64_t rnd = wbc_now_ns() ^ ((uint64_t)(uintptr_t)b << 16);
		snprintf(b->cookie, sizeof(b->cookie), "%s:%d:%016llx", host, (int)getpid(),
			 (unsigned long long)wbc_name_hash((const char *)&rnd) ^ rnd);
		window_init(&b->win, b->fixed, b->max_io, wbc_now_ns());
		atomic_store(&b->st_up, 1);
		publish(b);
		rc = -pthread_create(&b->thread, NULL, rados_main, b);
		if (rc)
			snprintf(err, errlen, "cannot start the rados thread");
	}
	if (!rc) {
		if (pthread_create(&b->keeper, NULL, keeper_main, b)) {
			pthread_mutex_lock(&b->lock);
			b->stop = true;
			pthread_mutex_unlock(&b->lock);
			pthread_cond_signal(&b->cond);
			pthread_join(b->thread, NULL);
			snprintf(err, errlen, "cannot start the rados lock thread");
			rc = -EAGAIN;
		} else {
			b->keeper_started = true;
		}
	}
	if (!rc) {
		if (pthread_create(&b->watcher, NULL, watcher_main, b)) {
			snprintf(err, errlen, "cannot start the rados map thread");
			rc = -EAGAIN;
			rados_destroy(b);   /* stops the others, frees it */
			return rc;
		}
		b->watcher_started = true;
	}
	if (rc) {
		free_rbe(b);
		return rc;
	}
	*ops = &rados_ops;
	*ctx = b;
	return 0;
}

void rados_fail_writes(wbc_dev *dev, bool on)
{
	const struct wbc_backend_ops *ops;
	struct rbe *b = wbc_dev_backend(dev, &ops);
	if (ops == &rados_ops)
		atomic_store(&b->fail_writes, on);
}

void rados_open_pause(wbc_dev *dev, void (*fn)(void *), void *arg)
{
	const struct wbc_backend_ops *ops;
	struct rbe *b = wbc_dev_backend(dev, &ops);
	if (ops == &rados_ops) {
		b->open_pause_arg = arg;
		atomic_store(&b->open_pause, fn);
	}
}

void rados_fail_sizes(wbc_dev *dev, bool on)
{
	const struct wbc_backend_ops *ops;
	struct rbe *b = wbc_dev_backend(dev, &ops);
	if (ops == &rados_ops)
		atomic_store(&b->fail_sizes, on);
}

void rados_fail_unlocks(wbc_dev *dev, bool on)
{
	const struct wbc_backend_ops *ops;
	struct rbe *b = wbc_dev_backend(dev, &ops);
	if (ops == &rados_ops)
		atomic_store(&b->fail_unlocks, on);
}

uint64_t rados_map_requests(wbc_dev *dev)
{
	const struct wbc_backend_ops *ops;
	struct rbe *b = wbc_dev_backend(dev, &ops);
	return ops == &rados_ops ? atomic_load(&b->map_requests) : 0;
}

/* ------------------------------------------------------------------ */
/* breaking a lock (wbcache rados-unlock)                               */

int wbc_rados_break_lock(const char *spec, const char *name, char *msg, size_t msglen)
{
	char dummy[1];
	if (!msg || !msglen) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	msg[0] = '\0';
	if (!spec || !name)
		return -EINVAL;
	if (!strncmp(spec, "rados:", 6))
		spec += 6;
	struct rbe *b = new_rbe();
	if (!b)
		return -ENOMEM;
	int rc = connect_spec(b, spec, msg, msglen);
	struct rfile f = { .b = b };
	if (!rc && asprintf(&f.name, "%s%s%s", b->prefix ? b->prefix : "", b->prefix ? "/" : "",
			    name) < 0) {
		f.name = NULL;
		rc = -ENOMEM;
	}
	if (!rc && strlen(f.name) + 20 > OID_MAX) {   /* as rados_open */
		snprintf(msg, msglen, "%s: name too long", f.name);
		rc = -ENAMETOOLONG;
	}
	char o[OID_MAX];
	if (!rc)
		oid(&f, 0, o);
	int broken = 0;
	/* one listing: the locks held when it looks (a cache that takes the
	 * lock just after, the new owner, keeps it; breaking until none was
	 * left broke that one too) */
	for (bool once = true; !rc && once; once = false) {
		int excl;
		char tag[256], clients[4096], cookies[4096], addrs[4096];
		size_t tl = sizeof(tag), cl = sizeof(clients), kl = sizeof(cookies),
		       al = sizeof(addrs);
		ssize_t n = rados_list_lockers(b->io, o, LOCK_NAME, &excl, tag, &tl, clients, &cl,
					       cookies, &kl, addrs, &al);
		if (n < 0) {
			rc = n == -ENOENT ? -ENOENT : rerr((int)n);
			snprintf(msg, msglen, "%s: %s", f.name,
				 n == -ENOENT ? "no such file" : strerror((int)-n));
			break;
		}
		if (n == 0)
			break;
		const char *c = clients, *k = cookies, *a = addrs;
		for (ssize_t i = 0; i < n && !rc; i++) {
			/* fence the holder first, as rbd does: the OSDs refuse
			 * every operation of that client from now on (data
			 * objects too, and object 0's size records), so a
			 * cache that still runs (stopped, or cut off) cannot
			 * mix what it still sends into the new owner's file */
			int r = rados_blocklist_add(b->cluster, (char *)a, 0);
			if (r < 0) {
				rc = rerr(r);
				snprintf(msg, msglen, "%s: cannot fence %s at %s (osd blocklist add: %s); "
					 "the lock is kept (`ceph osd blocklist add %s`, then "
					 "`rados lock break` breaks it by hand)",
					 f.name, c, a, strerror(-r), a);
				break;
			}
			r = rados_break_lock(b->io, o, LOCK_NAME, c, k);
			if (r < 0 && r != -ENOENT) {
				rc = rerr(r);
				snprintf(msg, msglen, "%s: cannot break the lock of %s (%s): %s",
					 f.name, c, k, strerror(-r));
			} else {
				broken++;
				snprintf(msg, msglen, "%s: fenced %s at %s and broke its lock (cookie %s)",
					 f.name, c, a, k);
			}
			c += strlen(c) + 1;
			k += strlen(k) + 1;
			a += strlen(a) + 1;
		}
	}
	if (!rc && !broken)
		snprintf(msg, msglen, "%s: not locked", f.name);
	/* one line, as wbc_dev_add_msg's: the spec's and the name's bytes
	 * it quotes (a conf= path with a newline in it) */
	wbc_msg_one_line(msg);
	free(f.name);
	free_rbe(b);
	return rc ? rc : broken;
}
