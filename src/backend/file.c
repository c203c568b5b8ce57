/*
 * File backend: one regular file or block device ("file:"), or a directory
 * with one backing file per cached file ("dir:").  Data I/O goes through
 * one io_uring per device, with O_DIRECT so that data is cached once (in
 * wbcache) and not again in the kernel's page cache.  Where the file system
 * refuses O_DIRECT (tmpfs), files are opened buffered with a one-line
 * warning.
 *
 * Threads: any thread submits (sq_lock serializes the submission ring); one
 * reaper thread per backend waits for completions and runs end_io.  A short
 * write is resubmitted for its remainder; -EAGAIN and -EINTR are retried.
 *
 * Descriptors.  An object normally keeps its descriptor while it is open.
 * Objects of an opener device that may reopen (WBC_OPENER_REOPEN) share a
 * cache of descriptors instead: an object's descriptor is opened when I/O
 * or a call needs it, held while any does (users), and closed again, least
 * recently used first, once more than fd_cap are open.  A million cached
 * files then need no million descriptors.
 */
#include "../internal.h"

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

struct fobj {
	int fd;                 /* -1: closed for now (reopenable objects) */
	bool blk;
	uint64_t blk_size;
	int refs;               /* single mode: opens of "" */
	/* reopenable objects, under fbe.fd_lock */
	char *name;
	int oflags;             /* the open flags that worked */
	unsigned users;         /* I/O in flight and calls using fd */
	struct fobj *lru_prev, *lru_next;   /* while fd >= 0: MRU first */
};

struct fbe {
	char *path;
	struct backend_opener opener;   /* fn NULL: open by name in dirfd */
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
	pthread_t reaper;
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
	if (f->opener.fn) {
		fd = f->opener.fn(f->opener.ctx, name, oflags);
		if (fd == -EINVAL && f->direct) {
			oflags &= ~O_DIRECT;
			fd = f->opener.fn(f->opener.ctx, name, oflags);
			if (fd >= 0)
				warn_buffered(f);
		}
		if (fd < 0)
			return fd;
	} else {
		int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
		if (f->dir)
			flags |= O_NOFOLLOW;
		fd = openat(dirfd, name, flags | (f->direct ? O_DIRECT : 0), 0644);
		if (fd < 0 && errno == EINVAL && f->direct) {
			fd = openat(dirfd, name, flags, 0644);
			if (fd >= 0)
				warn_buffered(f);
		}
		if (fd < 0)
			return -errno;
	}
	struct stat st;
	if (fstat(fd, &st) || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
		int e = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return e;
	}
	struct fobj *o = calloc(1, sizeof(*o));
	if (!o) {
		close(fd);
		return -ENOMEM;
	}
	o->fd = fd;
	o->oflags = oflags;
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
		return o->blk_size;
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

/* Close idle descriptors, oldest first, down to fd_cap. */
static void lru_trim_locked(struct fbe *f)
{
	assert_held(&f->fd_lock);
	struct fobj *o = f->lru_tail;
	while (f->nr_open > f->fd_cap && o) {
		struct fobj *prev = o->lru_prev;
		if (!o->users) {
			lru_unlink_locked(f, o);
			close(o->fd);
			o->fd = -1;
			f->nr_open--;
		}
		o = prev;
	}
}

/* The object's descriptor, held until obj_put_fd (reopened if it was
 * closed); -errno when it cannot be reopened. */
static int obj_get_fd(struct fbe *f, struct fobj *o)
{
	if (!f->reopen)
		return o->fd;
	pthread_mutex_lock(&f->fd_lock);
	if (o->fd < 0) {
		int fd = f->opener.fn(f->opener.ctx, o->name, o->oflags);
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

static int file_open(struct backend *be, const char *name, bool create, void **obj,
		     uint64_t *size)
{
	struct fbe *f = be->priv;
	struct fobj *o;
	if (!f->dir) {
		pthread_mutex_lock(&f->lock);
		f->single->refs++;
		pthread_mutex_unlock(&f->lock);
		o = f->single;
	} else {
		int err = open_obj(f, f->dirfd, name, create, &o);
		if (err)
			return err;
	}
	*obj = o;
	*size = obj_size(o);
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

static void file_close(struct backend *be, void *obj)
{
	struct fbe *f = be->priv;
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

/* Queue @bio's remaining part on the ring.  sq_lock must not be held. */
static int queue_bio(struct fbe *f, struct wbc_bio *bio)
{
	struct fobj *o = bio->obj;
	pthread_mutex_lock(&f->sq_lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	if (!sqe) {
		io_uring_submit(&f->ring);
		sqe = io_uring_get_sqe(&f->ring);
	}
	if (!sqe) {
		pthread_mutex_unlock(&f->sq_lock);
		return -EBUSY;
	}
	uint64_t off = bio->off + bio->done;
	if (bio->op == BIO_WRITE)
		io_uring_prep_writev(sqe, o->fd, bio->iov, (unsigned)bio->iovcnt, off);
	else
		io_uring_prep_readv(sqe, o->fd, bio->iov, (unsigned)bio->iovcnt, off);
	io_uring_sqe_set_data(sqe, bio);
	/* publish the bio to the reaper: every read and write of it by this
	 * thread is done (ThreadSanitizer cannot see the kernel's ordering) */
	atomic_store_explicit(&bio->handoff, 1, memory_order_release);
	int r;
	if (f->fail_submits) {
		f->fail_submits--;
		r = f->fail_err;
	} else {
		do
			r = io_uring_submit(&f->ring);
		while (r == -EINTR || r == -EAGAIN || r == -EBUSY);
	}
	if (r < 0) {
		/* The caller fails the bio and reuses it, but its entry is
		 * published in the ring, and the next submit would start it.
		 * A failed io_uring_enter consumed no entry, and no kernel
		 * thread reads the ring between submits (no SQPOLL): it is
		 * still ours to turn into a no-op, whose completion the
		 * reaper ignores. */
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, &void_marker);
	}
	pthread_mutex_unlock(&f->sq_lock);
	return r < 0 ? r : 0;
}

/* Tests: the next @n submissions fail with @err as io_uring_submit()
 * would, their entries left in the ring. */
void file_fail_submits(struct backend *be, unsigned n, int err)
{
	struct fbe *f = be->priv;
	pthread_mutex_lock(&f->sq_lock);
	f->fail_submits = n;
	f->fail_err = err;
	pthread_mutex_unlock(&f->sq_lock);
}

static int file_submit(struct backend *be, struct wbc_bio *bio)
{
	struct fbe *f = be->priv;
	bio->done = 0;
	int fd = obj_get_fd(f, bio->obj);
	if (fd < 0)
		return fd;
	int err = queue_bio(f, bio);
	if (err)
		obj_put_fd(f, bio->obj);
	return err;
}

/* Drop the first @n bytes of bio's iovec array (after a short write). */
static void iov_advance(struct wbc_bio *bio, size_t n)
{
	int i = 0;
	while (i < bio->iovcnt && n >= bio->iov[i].iov_len)
		n -= bio->iov[i++].iov_len;
	memmove(bio->iov, bio->iov + i, (size_t)(bio->iovcnt - i) * sizeof(*bio->iov));
	bio->iovcnt -= i;
	if (n) {
		bio->iov[0].iov_base = (char *)bio->iov[0].iov_base + n;
		bio->iov[0].iov_len -= n;
	}
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
		void *data = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&f->ring, cqe);
		if (data == &stop_marker)
			return NULL;
		if (data == &void_marker)
			continue;
		struct wbc_bio *bio = data;
		(void)atomic_load_explicit(&bio->handoff, memory_order_acquire);
		bool retry = res == -EAGAIN || res == -EINTR;
		if (bio->op == BIO_WRITE && res > 0 && bio->done + (size_t)res < bio->len) {
			iov_advance(bio, (size_t)res);
			bio->done += (size_t)res;
			retry = true;
		}
		if (retry && !queue_bio(f, bio))
			continue;
		bio->res = res < 0 ? res : (int)(bio->done + (size_t)res);
		obj_put_fd(f, bio->obj);
		bio->end_io(bio);
	}
}

static int file_flush(struct backend *be, void *obj, bool datasync)
{
	struct fbe *f = be->priv;
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
	} else {
		r = syncfs(f->dirfd);
	}
	return r ? -errno : 0;
}

static int file_setsize(struct backend *be, void *obj, uint64_t size)
{
	struct fbe *f = be->priv;
	struct fobj *o = obj;
	if (o->blk)
		return size <= o->blk_size ? 0 : -EFBIG;
	int fd = obj_get_fd(f, o);
	if (fd < 0)
		return fd;
	int r = ftruncate(fd, (off_t)size) ? -errno : 0;
	obj_put_fd(f, o);
	return r;
}

static void file_destroy(struct backend *be)
{
	struct fbe *f = be->priv;
	pthread_mutex_lock(&f->sq_lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
	if (!sqe) {
		io_uring_submit(&f->ring);
		sqe = io_uring_get_sqe(&f->ring);
	}
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, &stop_marker);
	io_uring_submit(&f->ring);
	pthread_mutex_unlock(&f->sq_lock);
	pthread_join(f->reaper, NULL);
	io_uring_queue_exit(&f->ring);
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
	free(be);
}

static const struct backend_ops file_ops = {
	.kind = "file",
	.open = file_open,
	.close = file_close,
	.submit = file_submit,
	.flush = file_flush,
	.setsize = file_setsize,
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

int file_backend_create(const char *path, bool dir, bool direct, unsigned qd,
			size_t max_io, const struct backend_opener *opener,
			struct backend **out, char *err, size_t errlen)
{
	struct backend *be = calloc(1, sizeof(*be));
	struct fbe *f = calloc(1, sizeof(*f));
	if (!be || !f || !(f->path = strdup(path))) {
		free(be);
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
		if (rc)
			snprintf(err, errlen, "cannot open %s: %s", path, strerror(-rc));
		probe_fd = rc ? -1 : f->single->fd;
	}
	if (!rc) {
		rc = io_uring_queue_init(qd + RING_SLACK, &f->ring, 0);
		if (rc)
			snprintf(err, errlen, "io_uring setup failed: %s", strerror(-rc));
	}
	if (!rc) {
		rc = -pthread_create(&f->reaper, NULL, reaper_main, f);
		if (rc) {
			io_uring_queue_exit(&f->ring);
			snprintf(err, errlen, "cannot start the completion thread");
		}
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
		free(be);
		return rc;
	}
	if (!max_io)
		max_io = blk_max_io(probe_fd);
	if (direct && f->single)
		/* opened buffered where O_DIRECT was refused */
		be->dio_align = fcntl(f->single->fd, F_GETFL) & O_DIRECT ?
				dio_align_of(f->single->fd) : 0;
	else if (direct)
		be->dio_align = dio_align_dir(probe_fd);
	be->ops = &file_ops;
	be->qd = qd;
	be->max_io = max_io ? max_io : FALLBACK_MAX_IO;
	be->single = !dir;
	be->priv = f;
	*out = be;
	return 0;
}
