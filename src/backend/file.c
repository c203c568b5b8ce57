/*
 * File backend: one regular file or block device ("file:"), or a directory
 * with one backing file per cached file ("dir:").  Data I/O goes through
 * one io_uring per device, with O_DIRECT so that data is cached once (in
 * wbcache) and not again in the kernel's page cache.  Where the file system
 * refuses O_DIRECT (tmpfs), files are opened buffered with a one-line
 * warning.
 *
 * Threads: any thread submits (sq_lock serializes the submission ring): a
 * batch of I/Os becomes one io_uring_submit.  One reaper thread per
 * backend waits for completions, takes every one that is ready and
 * completes them as one batch (wbc_io_complete_batch).  -EAGAIN and
 * -EINTR are retried here (RETRY_MAX times); a short write is completed
 * as such, and the engine submits its rest.
 *
 * Where the kernel refuses io_uring (a seccomp profile that blocks it, as
 * container runtimes' defaults do; kernel.io_uring_disabled=2), or with
 * uring=0, I/O goes to a pool of worker threads instead, each doing one
 * preadv/pwritev at a time (as many as the queue depth, at most
 * POOL_MAX): the same I/Os, results and descriptors, without the ring.
 *
 * Descriptors.  An object normally keeps its descriptor while it is open.
 * Objects of an opener device that may reopen (WBC_OPENER_REOPEN) share
 * a cache of descriptors instead: an object's descriptor is opened when
 * I/O or a call needs it, held while any does (users), and closed again,
 * least recently used first, once more than fd_cap are open, or when an
 * open finds the process out of descriptors (EMFILE, ENFILE).  A million
 * cached files then need no million descriptors.  A dir: device's files
 * keep theirs: a name is not the file (its owner may rename or remove
 * it, and a reopen by name would write the cache's pages into whatever
 * file has the name now).
 */
#include "backends.h"

#include <sched.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Largest I/O when the block layer's limit cannot be read. */
#define FALLBACK_MAX_IO (4u << 20)
/* Ring entries beyond qd, for reads from any number of reader threads. */
#define RING_SLACK 64
/* Completions the reaper takes at once: one batch for the engine. */
#define REAP_BATCH 64
/* Times an I/O is sent again after -EAGAIN or -EINTR (the workers:
 * EINTR) before it fails with it: a file system that answers one of them
 * for good (a FUSE server's error) had the reaper, or a worker, send it
 * for ever, and its reader hung. */
#define RETRY_MAX 100

struct fobj {
	int fd;                 /* -1: closed for now (reopenable objects) */
	bool blk;
	uint64_t blk_size;      /* a device's size; a file's at its open */
	int refs;               /* single mode: opens of "" */
	/* its name was made by this open; the directory is synced at its
	 * next flush (an fsync of the file alone need not keep the entry
	 * that names it), then cleared (atomic: flushes race) */
	bool new_entry;
	/* reopenable objects, under fbe.fd_lock */
	char *name;
	int oflags;             /* the open flags that worked */
	unsigned users;         /* I/O in flight and calls using fd */
	struct fobj *lru_prev, *lru_next;   /* while fd >= 0: MRU first */
};

struct fbe {
	char *path;
	struct file_opener opener;      /* fn NULL: open by name in dirfd */
	bool dir;
	bool direct;
	int dirfd;
	struct fobj *single;
	pthread_mutex_t lock;   /* single->refs, warned */
	bool warned;
	struct io_uring ring;
	pthread_mutex_t sq_lock;
	unsigned fail_submits;  /* sq_lock: tests, file_fail_submits() */
	int fail_err;
	size_t max_io, dio_align;   /* caps */
	uint64_t max_file;          /* caps.max_file_size (0: not found) */
	unsigned qd;
	pthread_t reaper;
	/* the worker pool, where io_uring is not used (see above) */
	bool pool;
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct wbc_io *pool_head, *pool_tail;   /* pool_lock; linked by backend_data[1] */
	bool pool_stop;                         /* pool_lock */
	unsigned nworkers;
	pthread_t *workers;
	bool reopen;            /* descriptors are cached, see above */
	pthread_mutex_t fd_lock;
	struct fobj *lru_head, *lru_tail;
	unsigned nr_open, fd_cap;
};

static char stop_marker;
static char void_marker;   /* an entry voided after a failed submit */

static void warn_buffered(struct fbe *f)
{
	pthread_mutex_lock(&f->lock);
	if (!f->warned)
		fprintf(stderr, "wbcache: O_DIRECT refused on %s; using buffered I/O\n", f->path);
	f->warned = true;
	pthread_mutex_unlock(&f->lock);
}

static int open_obj(struct fbe *f, int dirfd, const char *name, bool create, struct fobj **out)
{
	int fd, oflags = O_RDWR | O_CLOEXEC | (f->direct ? O_DIRECT : 0);
	bool made = false;
	if (f->opener.fn) {
		fd = f->opener.fn(f->opener.ctx, name, oflags);
		if (fd == -EINVAL && f->direct) {
			oflags &= ~O_DIRECT;
			fd = f->opener.fn(f->opener.ctx, name, oflags);
		}
		if (fd < 0)
			return fd;
	} else {
		int flags = O_RDWR | O_CLOEXEC | (f->dir ? O_NOFOLLOW : 0);
		/* a create says whether it made the name (O_EXCL), then opens
		 * what is there.  Where that is not there either, a plain
		 * O_CREAT, taken as made (at worst one directory sync too
		 * many): a name removed between the two, or a dangling
		 * symbolic link (file:), which O_EXCL refuses as there and
		 * only O_CREAT makes the target of (alternating the first
		 * two, a run on such a link failed with EEXIST) */
		static const int mks[] = { O_CREAT | O_EXCL, 0, O_CREAT };
		for (unsigned s = create ? 0 : 1;; s++) {
			int mk = mks[s];
			fd = openat(dirfd, name, flags | mk | (oflags & O_DIRECT), 0644);
			if (fd < 0 && errno == EINVAL && (oflags & O_DIRECT)) {
				oflags &= ~O_DIRECT;
				/* O_DIRECT is refused after the create
				 * (do_dentry_open): an O_EXCL one that got
				 * this far found no name, and may have made
				 * it; O_EXCL again said EEXIST, and the open
				 * that followed took the new file for one
				 * that was there (its directory never synced) */
				if (mk)
					mk = O_CREAT;
				fd = openat(dirfd, name, flags | mk, 0644);
			}
			if (fd >= 0) {
				made = mk != 0;
				break;
			}
			if (!create || s == 2 || errno != (s == 0 ? EEXIST : ENOENT))
				return -errno;
		}
	}
	struct stat st;
	int e = fstat(fd, &st) ? -errno : S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) ? 0 :
		S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	if (e) {
		close(fd);
		return e;
	}
	/* said once it is a file the device uses (not for /dev/null,
	 * refused) */
	if (f->direct && !(oflags & O_DIRECT))
		warn_buffered(f);
	struct fobj *o = calloc(1, sizeof(*o));
	if (!o) {
		close(fd);
		return -ENOMEM;
	}
	o->fd = fd;
	o->oflags = oflags;
	o->new_entry = made;
	o->blk = S_ISBLK(st.st_mode);
	o->blk_size = (uint64_t)st.st_size;
	if (o->blk && ioctl(fd, BLKGETSIZE64, &o->blk_size))
		o->blk_size = 0;
	*out = o;
	return 0;
}

static uint64_t obj_size(struct fobj *o)
{
	if (o->blk)
		return __atomic_load_n(&o->blk_size, __ATOMIC_RELAXED);
	struct stat st;
	return fstat(o->fd, &st) ? 0 : (uint64_t)st.st_size;
}

/* ---- the descriptor cache of reopenable objects (fd_lock) ---- */

static void lru_unlink_locked(struct fbe *f, struct fobj *o)
{
	assert_held(&f->fd_lock);
	*(o->lru_prev ? &o->lru_prev->lru_next : &f->lru_head) = o->lru_next;
	*(o->lru_next ? &o->lru_next->lru_prev : &f->lru_tail) = o->lru_prev;
	o->lru_prev = o->lru_next = NULL;
}

static void lru_push_locked(struct fbe *f, struct fobj *o)
{
	assert_held(&f->fd_lock);
	o->lru_prev = NULL;
	o->lru_next = f->lru_head;
	*(f->lru_head ? &f->lru_head->lru_prev : &f->lru_tail) = o;
	f->lru_head = o;
}

/* Close the least recently used idle descriptor: false when every one
 * open is in use (or none is). */
static bool lru_evict_one_locked(struct fbe *f)
{
	assert_held(&f->fd_lock);
	for (struct fobj *o = f->lru_tail; o; o = o->lru_prev)
		if (!o->users) {
			lru_unlink_locked(f, o);
			close(o->fd);
			o->fd = -1;
			f->nr_open--;
			return true;
		}
	return false;
}

/* Close idle descriptors, oldest first, down to fd_cap. */
static void lru_trim_locked(struct fbe *f)
{
	assert_held(&f->fd_lock);
	while (f->nr_open > f->fd_cap && lru_evict_one_locked(f))
		;
}

/* An open that failed for want of a descriptor (the process's limit, or
 * the system's), which closing one of the cache's idle ones may give. */
static bool out_of_fds(int err)
{
	return err == -EMFILE || err == -ENFILE;
}

/* The object's descriptor, held until obj_put_fd (reopened if it was
 * closed); -errno when it cannot be reopened.  Out of descriptors (the
 * rest of the process took them), idle ones of the cache are closed for
 * it, oldest first: a file's writeback does not fail with EMFILE while
 * the cache itself holds descriptors it does not need. */
static int obj_get_fd(struct fbe *f, struct fobj *o)
{
	if (!f->reopen)
		return o->fd;
	pthread_mutex_lock(&f->fd_lock);
	if (o->fd < 0) {
		int fd;
		while (out_of_fds(fd = f->opener.fn(f->opener.ctx, o->name, o->oflags)) &&
		       lru_evict_one_locked(f))
			;
		if (fd < 0) {
			pthread_mutex_unlock(&f->fd_lock);
			return fd;
		}
		o->fd = fd;
		f->nr_open++;
	} else {
		lru_unlink_locked(f, o);
	}
	lru_push_locked(f, o);
	o->users++;
	int fd = o->fd;
	lru_trim_locked(f);
	pthread_mutex_unlock(&f->fd_lock);
	return fd;
}

static void obj_put_fd(struct fbe *f, struct fobj *o)
{
	if (!f->reopen)
		return;
	pthread_mutex_lock(&f->fd_lock);
	assert(o->users > 0);
	o->users--;
	pthread_mutex_unlock(&f->fd_lock);
}

static int file_open(void *ctx, const char *name, unsigned flags, void **obj, uint64_t *size)
{
	struct fbe *f = ctx;
	bool create = flags & WBC_OPEN_CREATE;
	struct fobj *o;
	if (!f->dir) {
		pthread_mutex_lock(&f->lock);
		f->single->refs++;
		pthread_mutex_unlock(&f->lock);
		o = f->single;
	} else {
		int err;
		while (out_of_fds(err = open_obj(f, f->dirfd, name, create, &o)) && f->reopen) {
			/* an idle descriptor of another file for this one */
			pthread_mutex_lock(&f->fd_lock);
			bool freed = lru_evict_one_locked(f);
			pthread_mutex_unlock(&f->fd_lock);
			if (!freed)
				break;
		}
		if (err)
			return err;
	}
	*obj = o;
	/* a file of a directory was just opened: its size is the one its
	 * type check read (one fstat less per open) */
	*size = f->dir ? o->blk_size : obj_size(o);
	if (f->reopen) {
		if (!(o->name = strdup(name))) {
			close(o->fd);
			free(o);
			return -ENOMEM;
		}
		pthread_mutex_lock(&f->fd_lock);
		f->nr_open++;
		lru_push_locked(f, o);
		lru_trim_locked(f);
		pthread_mutex_unlock(&f->fd_lock);
	}
	return 0;
}

static void file_close(void *ctx, void *obj)
{
	struct fbe *f = ctx;
	struct fobj *o = obj;
	if (!f->dir) {
		pthread_mutex_lock(&f->lock);
		o->refs--;
		pthread_mutex_unlock(&f->lock);
		return;
	}
	if (f->reopen) {
		pthread_mutex_lock(&f->fd_lock);
		assert(!o->users);
		if (o->fd >= 0) {
			lru_unlink_locked(f, o);
			f->nr_open--;
		}
		pthread_mutex_unlock(&f->fd_lock);
		free(o->name);
	}
	if (o->fd >= 0)
		close(o->fd);
	free(o);
}

/* Put @io on the ring (sq_lock held): false when the ring is full.  The
 * ring holds no unsubmitted entry while sq_lock is free (every holder
 * submits before it lets go, and without SQPOLL the kernel consumes a
 * submission in the call), so only a batch larger than the ring fills it. */
/* The rest of a read that came back short before the file's end (ring
 * only: io->backend_data[1] while it is in flight; the pool's workers loop
 * in pool_rw instead, and use backend_data[1] as their queue's link). */
struct read_rest {
	size_t done;            /* bytes of the I/O read so far */
	int iovcnt;
	struct iovec iov[];     /* what is left of the I/O's iovec */
};

static bool prep_io_locked(struct fbe *f, struct wbc_io *io, int fd)
{
	assert_held(&f->sq_lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	if (!sqe)
		return false;
	struct read_rest *rest = io->backend_data[1];
	if (io->op == WBC_IO_WRITE)
		io_uring_prep_writev(sqe, fd, io->iov, (unsigned)io->iovcnt, io->off);
	else if (rest)
		io_uring_prep_readv(sqe, fd, rest->iov, (unsigned)rest->iovcnt, io->off + rest->done);
	else
		io_uring_prep_readv(sqe, fd, io->iov, (unsigned)io->iovcnt, io->off);
	io_uring_sqe_set_data(sqe, io);
	/* publish the I/O to the reaper: everything this thread (and the
	 * engine before it) wrote is visible to it (ThreadSanitizer cannot
	 * see the kernel's ordering through the ring); backend_data[0] is
	 * its count of retries (reaper_main) */
	__atomic_store_n(&io->backend_data[0], io->backend_data[0], __ATOMIC_RELEASE);
	return true;
}

/* Submit what the ring holds (sq_lock held).  On failure its entries are
 * still published in the ring, and the next submit would start them; a
 * failed io_uring_enter consumed none, and no kernel thread reads the
 * ring between submits (no SQPOLL): they are still ours to turn into
 * no-ops, whose completions the reaper ignores (ring_void_locked). */
static int ring_submit_locked(struct fbe *f)
{
	assert_held(&f->sq_lock);
	if (f->fail_submits) {
		f->fail_submits--;
		return f->fail_err;
	}
	/* Until the ring holds nothing unsubmitted: a submit may take fewer
	 * than it was given (without IORING_SETUP_SUBMIT_ALL the kernel stops
	 * after an entry that fails to start, whose error comes back as its
	 * completion), and the rest would wait for another caller's submit.
	 * EBUSY (completions it cannot post yet) and EAGAIN pass once the
	 * reaper, which never needs this lock to reap, has taken some. */
	while (io_uring_sq_ready(&f->ring)) {
		int r = io_uring_submit(&f->ring);
		if (r == -EBUSY || r == -EAGAIN)
			sched_yield();
		else if (r < 0 && r != -EINTR)
			return r;
	}
	return 0;
}

/* Make room in a ring that a failed submit left full of voided no-ops
 * (sq_lock held): they are sent (and their completions ignored), or else
 * every later entry would find the ring full, for good.  0 when there was
 * nothing to send or it was sent; else the failed submit's error (the
 * no-ops stay, still void). */
static int ring_room_locked(struct fbe *f)
{
	assert_held(&f->sq_lock);
	if (io_uring_sq_space_left(&f->ring) || !io_uring_sq_ready(&f->ring))
		return 0;
	return ring_submit_locked(f);
}

/* Void the entries still unsubmitted in the ring (after a failed submit). */
static void ring_void_locked(struct fbe *f)
{
	assert_held(&f->sq_lock);
	struct io_uring_sq *sq = &f->ring.sq;
	for (unsigned h = io_uring_smp_load_acquire(sq->khead); h != sq->sqe_tail; h++) {
		struct io_uring_sqe *sqe = &sq->sqes[h & sq->ring_mask];
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, &void_marker);
	}
}

/* ---- the worker pool (no io_uring) ---- */

#define POOL_MAX 64u

/* One I/O, whole or until a failure or the end of the file (a short
 * result, as the ring gives it).  A write that fails after some progress
 * is short (the engine sends the rest, which then fails); a read is not:
 * a short read is the file's end, and the pages past the bytes read would
 * be taken for a hole (zeros) where a bad sector failed.  A direct read
 * that stopped off its alignment stopped at the end, as in read_goes_on
 * (the rest cannot be asked for: EINVAL once the file grew meanwhile). */
static ssize_t pool_rw(struct fbe *f, struct wbc_io *io, int fd)
{
	struct fobj *o = io->file;
	size_t align = io->op == WBC_IO_READ && (o->oflags & O_DIRECT) ? f->dio_align : 0;
	struct iovec iov[io->iovcnt];
	memcpy(iov, io->iov, sizeof(iov));
	struct iovec *v = iov;
	int cnt = io->iovcnt;
	size_t done = 0;
	unsigned tries = 0;
	while (done < io->len) {
		ssize_t r = io->op == WBC_IO_WRITE ? pwritev(fd, v, cnt, (off_t)(io->off + done)) :
						     preadv(fd, v, cnt, (off_t)(io->off + done));
		if (r < 0 && errno == EINTR && tries++ < RETRY_MAX)
			continue;   /* as the ring's reaper: not for ever */
		if (r < 0)
			return done && io->op == WBC_IO_WRITE ? (ssize_t)done : -errno;
		if (r == 0)
			break;   /* a read at the end of the file */
		done += (size_t)r;
		if (align && done % align)
			break;   /* the end, too */
		iov_advance(&v, &cnt, (size_t)r);
	}
	return (ssize_t)done;
}

static void *worker_main(void *arg)
{
	pthread_setname_np(pthread_self(), "wbc-fileio");
	struct fbe *f = arg;
	pthread_mutex_lock(&f->pool_lock);
	for (;;) {
		while (!f->pool_head && !f->pool_stop)
			pthread_cond_wait(&f->pool_cond, &f->pool_lock);
		struct wbc_io *io = f->pool_head;
		if (!io)
			break;   /* stopped, nothing left */
		f->pool_head = io->backend_data[1];
		if (!f->pool_head)
			f->pool_tail = NULL;
		pthread_mutex_unlock(&f->pool_lock);
		io->res = pool_rw(f, io, (int)(intptr_t)io->backend_data[0]);
		obj_put_fd(f, io->file);
		wbc_io_complete_batch(&io, 1);
		pthread_mutex_lock(&f->pool_lock);
	}
	pthread_mutex_unlock(&f->pool_lock);
	return NULL;
}

/* An I/O whose file's descriptor could not be reopened (reopenable
 * objects: its name gone, ESTALE, EMFILE) fails alone, completed here:
 * an error returned by submit would fail the I/Os after it too, other
 * files' among them (the flusher's plug sends several files' at once). */
static int pool_submit(struct fbe *f, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	int err = 0;
	unsigned k = 0;
	*queued = 0;
	pthread_mutex_lock(&f->sq_lock);   /* the tests' failures, as the ring's submits */
	if (f->fail_submits) {
		f->fail_submits--;
		err = f->fail_err;
	}
	pthread_mutex_unlock(&f->sq_lock);
	if (err)
		return err;
	struct wbc_io *head = NULL, *tail = NULL, *failed = NULL;
	for (; k < n; k++) {
		int fd = obj_get_fd(f, ios[k]->file);
		if (fd < 0) {
			ios[k]->res = fd;
			ios[k]->backend_data[1] = failed;
			failed = ios[k];
			continue;
		}
		ios[k]->backend_data[0] = (void *)(intptr_t)fd;
		ios[k]->backend_data[1] = NULL;
		if (tail)
			tail->backend_data[1] = ios[k];
		else
			head = ios[k];
		tail = ios[k];
	}
	if (head) {
		pthread_mutex_lock(&f->pool_lock);
		if (f->pool_tail)
			f->pool_tail->backend_data[1] = head;
		else
			f->pool_head = head;
		f->pool_tail = tail;
		if (k > 1)
			pthread_cond_broadcast(&f->pool_cond);
		else
			pthread_cond_signal(&f->pool_cond);
		pthread_mutex_unlock(&f->pool_lock);
	}
	while (failed) {   /* after the others are queued: each its own error */
		struct wbc_io *io = failed;
		failed = io->backend_data[1];
		io->backend_data[1] = NULL;
		wbc_io_complete(io, io->res);
	}
	*queued = k;
	return 0;
}

/* The workers end once nothing is queued (no I/O is in flight at the
 * backend's destroy: the interface's promise). */
static void pool_stop(struct fbe *f)
{
	pthread_mutex_lock(&f->pool_lock);
	f->pool_stop = true;
	pthread_cond_broadcast(&f->pool_cond);
	pthread_mutex_unlock(&f->pool_lock);
	for (unsigned i = 0; i < f->nworkers; i++)
		pthread_join(f->workers[i], NULL);
	free(f->workers);
	pthread_mutex_destroy(&f->pool_lock);
	pthread_cond_destroy(&f->pool_cond);
}

/* Start @n workers; 0 or -errno (then none runs). */
static int pool_start(struct fbe *f, unsigned n)
{
	wbc_mutex_init(&f->pool_lock);
	pthread_cond_init(&f->pool_cond, NULL);
	f->workers = calloc(n, sizeof(*f->workers));
	int rc = f->workers ? 0 : -ENOMEM;
	for (; !rc && f->nworkers < n; f->nworkers++)
		if ((rc = -pthread_create(&f->workers[f->nworkers], NULL, worker_main, f)))
			break;
	if (rc)
		pool_stop(f);
	else
		f->pool = true;
	return rc;
}

/* ---- submission ---- */

/* Queue @n I/Os, as one submission where the ring has room for them.
 * Their descriptors are taken first (fd_lock, never under sq_lock); those
 * of I/Os not queued are put back.  One whose descriptor cannot be had
 * is completed with that error, alone (see pool_submit). */
#define SUBMIT_CHUNK 64
static int file_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct fbe *f = ctx;
	if (f->pool)
		return pool_submit(f, ios, n, queued);
	int err = 0;
	*queued = 0;
	while (*queued < n && !err) {
		struct wbc_io *const *chunk = ios + *queued;
		int fds[SUBMIT_CHUNK], fd_err = 0;
		unsigned k = 0, m = WBC_MIN(n - *queued, (unsigned)SUBMIT_CHUNK), prepped = 0;
		for (; k < m; k++)
			if ((fds[k] = obj_get_fd(f, chunk[k]->file)) < 0) {
				fd_err = fds[k];
				break;
			}
		pthread_mutex_lock(&f->sq_lock);
		int r = k ? ring_room_locked(f) : 0;
		while (!r && prepped < k && prep_io_locked(f, chunk[prepped], fds[prepped]))
			prepped++;
		if (!r && prepped)
			r = ring_submit_locked(f);
		if (r < 0) {
			/* the ring's entries are taken in order, the no-ops of
			 * earlier failures first, then these: those taken
			 * before the failure are in flight, the rest are
			 * voided and not queued */
			unsigned left = io_uring_sq_ready(&f->ring);
			prepped = left >= prepped ? 0 : prepped - left;
			ring_void_locked(f);
		}
		pthread_mutex_unlock(&f->sq_lock);
		if (r < 0) {
			err = r;
		} else if (!prepped && k) {
			err = -EBUSY;   /* a ring without one free entry */
		}
		for (unsigned i = prepped; i < k; i++)
			obj_put_fd(f, chunk[i]->file);
		*queued += prepped;
		if (!err && fd_err && prepped == k) {
			/* the I/O whose descriptor could not be had fails
			 * alone, completed here (see pool_submit) */
			wbc_io_complete(chunk[k], fd_err);
			++*queued;
		}
	}
	return err;
}

void file_fail_submits(wbc_dev *dev, unsigned n, int err)
{
	const struct wbc_backend_ops *ops;
	struct fbe *f = wbc_dev_backend(dev, &ops);
	if (!f || strcmp(ops->name, "file"))
		return;
	pthread_mutex_lock(&f->sq_lock);
	f->fail_submits = n;
	f->fail_err = err;
	pthread_mutex_unlock(&f->sq_lock);
}

/* Queue one I/O again (-EAGAIN, -EINTR): false when it cannot be. */
static bool requeue(struct fbe *f, struct wbc_io *io)
{
	struct fobj *o = io->file;
	pthread_mutex_lock(&f->sq_lock);
	bool ok = !ring_room_locked(f) && prep_io_locked(f, io, o->fd);
	if (ok && ring_submit_locked(f) < 0 && io_uring_sq_ready(&f->ring)) {   /* not taken */
		ring_void_locked(f);
		ok = false;
	}
	pthread_mutex_unlock(&f->sq_lock);
	return ok;
}

/*
 * A read of @res bytes (> 0), less than the rest of @io: the end of the
 * file, or a part read before an error (io_uring completes a read that
 * failed after some progress, or that a retry ended early, with the bytes
 * done, as preadv does).  The engine takes a short read for the file's
 * end and caches zeros past it: only the end may be.  So below the file's
 * size (its size now) the rest is read on, until it is all read, fails
 * (the whole I/O fails) or finds the end (0).  A direct read that stopped
 * off its alignment stopped at the end (the rest could not be asked for).
 * True when the rest is to be queued (io->backend_data[1] set, io->res
 * the result should that fail); false with *@res unchanged otherwise.
 */
static bool read_goes_on(struct fbe *f, struct wbc_io *io, int *res)
{
	struct read_rest *rest = io->backend_data[1];
	size_t done = (rest ? rest->done : 0) + (size_t)*res;
	struct fobj *o = io->file;
	if (done >= io->len || (f->dio_align && (o->oflags & O_DIRECT) && done % f->dio_align))
		return false;
	if (io->off + done >= obj_size(o))
		return false;   /* the end */
	if (!rest) {
		rest = malloc(sizeof(*rest) + (size_t)io->iovcnt * sizeof(struct iovec));
		if (!rest) {
			*res = -ENOMEM;   /* short before the end: never taken for it */
			return false;
		}
		rest->done = 0;
		rest->iovcnt = io->iovcnt;
		memcpy(rest->iov, io->iov, (size_t)io->iovcnt * sizeof(struct iovec));
		io->backend_data[1] = rest;
	}
	/* the iovec advanced past what this completion read */
	struct iovec *v = rest->iov;
	int cnt = rest->iovcnt;
	iov_advance(&v, &cnt, (size_t)*res);
	memmove(rest->iov, v, (size_t)cnt * sizeof(*v));
	rest->iovcnt = cnt;
	rest->done = done;
	io->res = -EIO;   /* should the rest not be queued */
	return true;
}

static void *reaper_main(void *arg)
{
	pthread_setname_np(pthread_self(), "wbc-reap");
	struct fbe *f = arg;
	for (;;) {
		struct io_uring_cqe *cqe;
		int r = io_uring_wait_cqe(&f->ring, &cqe);
		if (r == -EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "wbcache: io_uring wait failed: %s\n", strerror(-r));
			abort();
		}
		/* every completion ready now, as one batch */
		struct io_uring_cqe *cqes[REAP_BATCH];
		struct wbc_io *done[REAP_BATCH], *again[REAP_BATCH];
		unsigned got = io_uring_peek_batch_cqe(&f->ring, cqes, REAP_BATCH), n = 0, na = 0;
		bool stop = false;
		for (unsigned i = 0; i < got; i++) {
			void *data = io_uring_cqe_get_data(cqes[i]);
			int res = cqes[i]->res;
			if (data == &stop_marker) {
				stop = true;
				continue;
			}
			if (data == &void_marker)
				continue;
			struct wbc_io *io = data;
			uintptr_t tries = (uintptr_t)__atomic_load_n(&io->backend_data[0],
								    __ATOMIC_ACQUIRE);
			if ((res == -EAGAIN || res == -EINTR) && tries < RETRY_MAX) {
				io->backend_data[0] = (void *)(tries + 1);
				io->res = res;   /* if it cannot be queued again */
				again[na++] = io;
				continue;
			}
			if (io->op == WBC_IO_READ && res > 0 && read_goes_on(f, io, &res)) {
				again[na++] = io;   /* its rest, from where it stopped */
				continue;
			}
			if (io->op == WBC_IO_READ && io->backend_data[1]) {
				struct read_rest *rest = io->backend_data[1];
				/* an error after part of it fails all of it (the
				 * part read is not the file: its end is not there) */
				if (res >= 0)
					res = (int)(rest->done + (size_t)res);
				free(rest);
				io->backend_data[1] = NULL;
			}
			io->res = res;
			obj_put_fd(f, io->file);
			done[n++] = io;
		}
		io_uring_cq_advance(&f->ring, got);
		/* queued again once their completions are off the ring (a
		 * submitter may be waiting for room there, holding sq_lock) */
		for (unsigned i = 0; i < na; i++) {
			struct wbc_io *io = again[i];
			if (requeue(f, io))
				continue;
			if (io->backend_data[1]) {   /* the rest of a read, not sent */
				free(io->backend_data[1]);
				io->backend_data[1] = NULL;
				if (io->res >= 0)
					io->res = -EIO;
			}
			obj_put_fd(f, io->file);
			done[n++] = io;
		}
		if (n)
			wbc_io_complete_batch(done, n);
		if (stop)
			return NULL;
	}
}

static int parent_dir_fd(const char *path);

/* fsync of the directory holding the device's files (dir:) or its file
 * (file:): 0 or -1 with errno */
static int sync_parent(struct fbe *f)
{
	if (f->dir)
		return fsync(f->dirfd);
	int dfd = parent_dir_fd(f->path);
	if (dfd < 0)
		return -1;
	int r = fsync(dfd), e = errno;
	close(dfd);
	errno = e;
	return r;
}

static int file_flush(void *ctx, void *obj, unsigned flags)
{
	struct fbe *f = ctx;
	bool datasync = flags & WBC_FLUSH_DATASYNC;
	struct fobj *o = obj ? obj : f->single;
	int r;
	if (o) {
		int fd = obj_get_fd(f, o);
		if (fd < 0)
			return fd;
		r = datasync ? fdatasync(fd) : fsync(fd);
		int e = errno;
		obj_put_fd(f, o);
		errno = e;
		/* the entry of a file this device made, once: its data is
		 * durable only with a name (kept set on failure: tried again
		 * at the next flush) */
		if (!r && __atomic_load_n(&o->new_entry, __ATOMIC_ACQUIRE)) {
			r = sync_parent(f);
			if (!r)
				__atomic_store_n(&o->new_entry, false, __ATOMIC_RELEASE);
		}
	} else {
		r = syncfs(f->dirfd);
	}
	return r ? -errno : 0;
}

static int file_resize(void *ctx, void *obj, uint64_t size)
{
	struct fbe *f = ctx;
	struct fobj *o = obj;
	if (o->blk) {
		/* the device may have grown or shrunk since (lvextend): its
		 * size now (through a descriptor taken: a reopenable one may
		 * be closed for now) */
		uint64_t now;
		int fd = obj_get_fd(f, o);
		if (fd < 0)
			return fd;
		if (!ioctl(fd, BLKGETSIZE64, &now))
			__atomic_store_n(&o->blk_size, now, __ATOMIC_RELAXED);
		obj_put_fd(f, o);
		uint64_t end = __atomic_load_n(&o->blk_size, __ATOMIC_RELAXED);
		/* a device cannot be cut (ftruncate: EINVAL): cut and
		 * extended again, its old bytes would read back */
		return size == end ? 0 : size > end ? -EFBIG : -EINVAL;
	}
	int fd = obj_get_fd(f, o);
	if (fd < 0)
		return fd;
	int r = ftruncate(fd, (off_t)size) ? -errno : 0;
	obj_put_fd(f, o);
	return r;
}

static void file_destroy(void *ctx)
{
	struct fbe *f = ctx;
	if (f->pool) {
		pool_stop(f);
		goto closed;
	}
	pthread_mutex_lock(&f->sq_lock);
	/* the reaper waits for this: a submit that failed is tried again
	 * (EAGAIN and EBUSY pass; anything else would leave it waiting) */
	f->fail_submits = 0;
	int r;
	/* no I/O is in flight (the interface's promise), but no-ops voided
	 * by failed submits may fill the ring: sent first */
	while ((r = ring_room_locked(f)) < 0) {
		fprintf(stderr, "wbcache: file backend: submit at close: %s\n", strerror(-r));
		sleep(1);
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	assert(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, &stop_marker);
	while ((r = ring_submit_locked(f)) < 0) {
		fprintf(stderr, "wbcache: file backend: submit at close: %s\n", strerror(-r));
		sleep(1);
	}
	pthread_mutex_unlock(&f->sq_lock);
	pthread_join(f->reaper, NULL);
	io_uring_queue_exit(&f->ring);
closed:
	if (f->single) {
		close(f->single->fd);
		free(f->single);
	}
	if (f->dirfd >= 0)
		close(f->dirfd);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->sq_lock);
	pthread_mutex_destroy(&f->fd_lock);
	free(f->path);
	free(f);
}

static void file_caps(void *ctx, struct wbc_backend_caps *caps)
{
	struct fbe *f = ctx;
	caps->queue_depth = f->qd;
	caps->max_io = f->max_io;
	caps->align = f->dio_align;
	caps->flags = f->dir ? 0 : WBC_BACKEND_ONE_FILE;
	/* a device's size now (a resize reads it again: lvextend) */
	caps->max_file_size = f->single && f->single->blk ?
			      __atomic_load_n(&f->single->blk_size, __ATOMIC_RELAXED) : f->max_file;
}

/*
 * The largest file the file system of directory @dirfd takes (its
 * s_maxbytes: 16 TiB on ext4 with 4 KiB blocks), found by truncating an
 * unnamed file there; 0 where it cannot be found: no O_TMPFILE (or no
 * write access), files that are not sparse (a truncate would allocate),
 * or an answer other than EFBIG or EINVAL.  Under a file size limit of
 * the process (RLIMIT_FSIZE, `ulimit -f`), that limit: no writeback can
 * go past it (a write there raises SIGXFSZ), and a buffered write(2)
 * past it fails with EFBIG, as a write here then does.
 */
/* The process's file size limit (RLIMIT_FSIZE), or INT64_MAX. */
static uint64_t fsize_limit(void)
{
	struct rlimit rl;
	if (!getrlimit(RLIMIT_FSIZE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    (uint64_t)rl.rlim_cur < (uint64_t)INT64_MAX)
		return rl.rlim_cur ? (uint64_t)rl.rlim_cur : 1;
	return (uint64_t)INT64_MAX;
}

static uint64_t fs_max_file(int dirfd)
{
	/* the search stays at or under the process's limit: a truncate
	 * past it would raise SIGXFSZ; without an answer, that limit */
	uint64_t cap = fsize_limit(), none = cap < (uint64_t)INT64_MAX ? cap : 0;
	if (cap < (1u << 20))
		return cap;
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		/* no O_TMPFILE there: a name of its own, removed at once */
		char name[64];
		static atomic_uint seq;
		snprintf(name, sizeof(name), ".wbcache-probe-%d-%u", (int)getpid(),
			 atomic_fetch_add(&seq, 1));
		fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0 && unlinkat(dirfd, name, 0)) {
			/* it stays (an append-only directory): left empty,
			 * never grown */
			close(fd);
			return none;
		}
	}
	if (fd < 0)
		return none;
	struct stat st;
	uint64_t lo = 0, hi = cap;   /* lo fits, hi + 1 does not */
	if (ftruncate(fd, 1 << 20) || fstat(fd, &st) || st.st_blocks) {
		lo = none;
	} else if (!ftruncate(fd, (off_t)hi)) {
		lo = hi;
	} else {
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo + 1) / 2;
			if (!ftruncate(fd, (off_t)mid)) {
				lo = mid;
			} else if (errno == EFBIG || errno == EINVAL) {
				hi = mid - 1;
			} else {
				lo = none;   /* ENOSPC, EIO, EDQUOT: no answer */
				break;
			}
		}
	}
	close(fd);
	/* what the engine holds anyway needs no naming */
	return lo >= WBC_MAX_OFFSET ? 0 : lo;
}

/* The directory holding the file at @path, through symbolic links: a
 * descriptor, or -1 with errno. */
static int parent_dir_fd(const char *path)
{
	char *d = realpath(path, NULL), *slash = d ? strrchr(d, '/') : NULL;
	int dfd = !d ? -1 : open(slash ? (slash == d ? "/" : (*slash = 0, d)) : ".",
				 O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	free(d);
	errno = e;
	return dfd;
}

static const struct wbc_backend_ops file_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "file",
	.caps = file_caps,
	.open = file_open,
	.close = file_close,
	.submit = file_submit,
	.flush = file_flush,
	.resize = file_resize,
	.destroy = file_destroy,
};

/* A queue attribute of the block device holding @fd (itself, when it is
 * one), from sysfs; 0 when unknown. */
static unsigned long blk_queue_attr(int fd, const char *attr)
{
	struct stat st;
	if (fstat(fd, &st))
		return 0;
	dev_t d = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	char path[160];
	/* a whole disk has queue/, a partition has its disk's above it */
	const char *fmt[] = { "/sys/dev/block/%u:%u/queue/%s", "/sys/dev/block/%u:%u/../queue/%s" };
	for (size_t i = 0; i < sizeof(fmt) / sizeof(fmt[0]); i++) {
		snprintf(path, sizeof(path), fmt[i], major(d), minor(d), attr);
		FILE *fp = fopen(path, "r");
		if (!fp)
			continue;
		unsigned long v = 0;
		int n = fscanf(fp, "%lu", &v);
		fclose(fp);
		if (n == 1 && v)
			return v;
	}
	return 0;
}

/* The block layer's largest request for the device holding @fd, in bytes;
 * 0 when unknown (not on a block device). */
static size_t blk_max_io(int fd)
{
	return (size_t)blk_queue_attr(fd, "max_sectors_kb") << 10;
}

/* The queue depth for I/O to the device holding @fd: the block layer's
 * request queue size (nr_requests: what the kernel itself keeps in
 * flight to the device), within [QD_MIN, QD_MAX]; QD_MIN when unknown. */
#define QD_MIN 32u
#define QD_MAX 256u
static unsigned blk_queue_depth(int fd)
{
	unsigned long n = fd >= 0 ? blk_queue_attr(fd, "nr_requests") : 0;
	return n < QD_MIN ? QD_MIN : n > QD_MAX ? QD_MAX : (unsigned)n;
}

/*
 * The alignment O_DIRECT I/O on @fd needs (offsets, lengths, buffers), in
 * bytes; 0 when the file system does no direct I/O on it or it is unknown.
 * statx(STATX_DIOALIGN) (Linux 6.1) answers for the file; else the block
 * device's logical block size: BLKSSZGET for a device, sysfs for the one a
 * file system is on.
 */
static size_t dio_align_of(int fd)
{
#ifdef STATX_DIOALIGN
	struct statx sx;
	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) && (sx.stx_mask & STATX_DIOALIGN))
		return sx.stx_dio_offset_align ?
		       WBC_MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align) : 0;
#endif
	struct stat st;
	int ssz;
	if (!fstat(fd, &st) && S_ISBLK(st.st_mode) && !ioctl(fd, BLKSSZGET, &ssz) && ssz > 0)
		return (size_t)ssz;
	return blk_queue_attr(fd, "logical_block_size");
}

/* dio_align_of() for new files in directory @dirfd: asked of an unnamed
 * file made there for the question (O_TMPFILE: gone at its close), else
 * of the directory's device. */
static size_t dio_align_dir(int dirfd)
{
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EINVAL) {
		/* O_DIRECT refused, or O_TMPFILE unknown: which? */
		fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0) {
			close(fd);
			return 0;    /* no direct I/O here: files go buffered */
		}
	}
	if (fd < 0)
		return dio_align_of(dirfd);
	size_t a = dio_align_of(fd);
	close(fd);
	return a;
}

int file_backend_new(const char *path, bool dir, bool direct, bool uring, unsigned qd, size_t max_io,
		     const struct file_opener *opener, const struct wbc_backend_ops **ops,
		     void **ctx, char *err, size_t errlen)
{
	struct fbe *f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path))) {
		free(f);
		return -ENOMEM;
	}
	f->dir = dir;
	f->direct = direct;
	f->dirfd = -1;
	wbc_mutex_init(&f->lock);
	wbc_mutex_init(&f->sq_lock);
	wbc_mutex_init(&f->fd_lock);
	int rc = 0, probe_fd;
	if (opener) {
		f->opener = *opener;
		f->reopen = opener->flags & WBC_OPENER_REOPEN;
		struct rlimit rl;
		/* a quarter of the descriptors this process may have */
		f->fd_cap = !getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY ?
			    (unsigned)WBC_MAX(rl.rlim_cur / 4, 64) : 4096;
		f->dirfd = fcntl(opener->fs_fd, F_DUPFD_CLOEXEC, 0);
		if (f->dirfd < 0) {
			rc = -errno;
			snprintf(err, errlen, "bad file system descriptor: %s", strerror(errno));
		}
		probe_fd = f->dirfd;
	} else if (dir) {
		f->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (f->dirfd < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot open directory %s: %s", path, strerror(errno));
		}
		probe_fd = f->dirfd;
	} else {
		rc = open_obj(f, AT_FDCWD, path, true, &f->single);
		struct stat st;
		if (rc == -EINVAL && !stat(path, &st) && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
			snprintf(err, errlen, "cannot use %s: not a regular file or a block device",
				 path);
		else if (rc)
			snprintf(err, errlen, "cannot open %s: %s", path, strerror(-rc));
		probe_fd = rc ? -1 : f->single->fd;
	}
	if (!rc && !qd)
		qd = blk_queue_depth(probe_fd);
	/* every I/O in flight holds its file's descriptor: with descriptors
	 * opened on demand, no more I/Os than half the descriptors kept */
	if (f->reopen && qd > f->fd_cap / 2)
		qd = WBC_MAX(f->fd_cap / 2, 1u);
	bool ring = false;
	if (!rc && uring) {
		/* SUBMIT_ALL (5.18): an entry that fails to start does not
		 * hold back the ones after it */
		int r = io_uring_queue_init(qd + RING_SLACK, &f->ring, IORING_SETUP_SUBMIT_ALL);
		if (r == -EINVAL)
			r = io_uring_queue_init(qd + RING_SLACK, &f->ring, 0);
		if (!r) {
			ring = true;
		} else if (r == -EPERM || r == -ENOSYS || r == -EACCES) {
			/* refused, not failed: the worker pool does the I/O */
			fprintf(stderr, "wbcache: io_uring refused here (%s); %s: I/O through "
				"worker threads\n", strerror(-r), path);
		} else {
			rc = r;
			snprintf(err, errlen, "io_uring setup failed: %s", strerror(-r));
		}
	}
	if (!rc && ring) {
		rc = -pthread_create(&f->reaper, NULL, reaper_main, f);
		if (rc) {
			io_uring_queue_exit(&f->ring);
			snprintf(err, errlen, "cannot start the completion thread");
		}
	} else if (!rc) {
		rc = pool_start(f, WBC_MIN(qd, POOL_MAX));
		if (rc)
			snprintf(err, errlen, "cannot start the I/O threads");
	}
	if (rc) {
		if (f->single) {
			close(f->single->fd);
			free(f->single);
		}
		if (f->dirfd >= 0)
			close(f->dirfd);
		free(f->path);
		free(f);
		return rc;
	}
	if (!max_io)
		max_io = blk_max_io(probe_fd);
	/* the largest file: a directory's file system's (a regular file's:
	 * its own directory's, through symbolic links); none named for a
	 * device, which may grow (lvextend: a resize reads its size again) */
	if (f->single && f->single->blk) {
		f->max_file = 0;   /* file_caps: its size now */
	} else if (f->dirfd >= 0) {
		f->max_file = fs_max_file(f->dirfd);
	} else {
		int dfd = parent_dir_fd(path);
		if (dfd >= 0) {
			f->max_file = fs_max_file(dfd);
			close(dfd);
		} else if (fsize_limit() < (uint64_t)INT64_MAX) {
			f->max_file = fsize_limit();
		}
	}
	if (direct && f->single)
		/* opened buffered where O_DIRECT was refused */
		f->dio_align = fcntl(f->single->fd, F_GETFL) & O_DIRECT ?
			       dio_align_of(f->single->fd) : 0;
	else if (direct)
		f->dio_align = dio_align_dir(probe_fd);
	f->qd = qd;
	f->max_io = max_io ? max_io : FALLBACK_MAX_IO;
	if (f->dio_align)   /* an I/O split at max_io stays aligned */
		f->max_io = WBC_MAX(f->max_io / f->dio_align * f->dio_align, f->dio_align);
	*ops = &file_ops;
	*ctx = f;
	return 0;
}
