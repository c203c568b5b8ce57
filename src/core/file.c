/*
 * The I/O paths of files (the top): open and close of handles, read,
 * write, truncate and fsync; the inodes and handles they work on are fs's
 * (fs/inode.c, fs/handle.c).
 *
 * Concurrency.  pread and pwrite hold inode->rwsem shared, so writers to
 * different pages of one file run in parallel; each page is claimed with
 * PG_LOCKED under the short inode->lock and its data is copied with no lock
 * held.  A writer waits for a page under writeback (stable pages: the bytes
 * being written to the backend never change under the I/O).  truncate holds
 * rwsem exclusive.  The backend's size is owned by whoever sets
 * inode->sizing (truncate, size sync); the flusher does not submit for a
 * file while it is set.
 *
 * file_lock=file (a device tunable, for experiments: wbcache lab) renders
 * the old per-file lock instead: each page a writer writes is claimed,
 * copied and dirtied under inode->file_lock, which writeback holds from
 * the collection of each run of the file's pages until its submission
 * (write_page, write_inode_pages), so writers and writeback of one file
 * wait for each other; waits are counted (file_lock_waits in
 * wbc_dev_debug).
 */
#include "core/core.h"

#include <limits.h>

/* ------------------------------------------------------------------ */
/* handles                                                              */

static bool name_ok(const struct backend *be, const char *name)
{
	if (be->single)
		return name[0] == '\0';
	size_t n = strnlen(name, 256);
	return n > 0 && n <= 255 && !strchr(name, '/') && strcmp(name, ".") &&
	       strcmp(name, "..");
}

int wbc_file_open(wbc_dev *dev, const char *name, int flags, wbc_file **out)
{
	return wbc_file_open_group(dev, name, flags, NULL, out);
}

/* Is any page of @ino locked (a copy or a read-in under way)?  Under
 * ino->lock. */
static bool pages_locked_locked(struct inode *ino)
{
	assert_held(&ino->lock);
	uint64_t idx = 0;
	struct page *p;
	while ((p = pm_next(&ino->map, idx, -1, &idx))) {
		if (pg_flags(p) & PG_LOCKED)
			return true;
		if (idx == UINT64_MAX)
			break;
		idx++;
	}
	return false;
}

/*
 * A direct open of @ino (no handle through the cache is open: handle_open
 * saw to that, and none can open while this one is): write back the pages
 * that handles closed before left, wait for them, and drop every page of
 * the file, so that no cached copy outlives the direct I/O to come.  0,
 * or the write error that keeps pages dirty (they stay, the open fails).
 */
static int direct_drop_cache(struct inode *ino, bool mark_seen)
{
	pthread_rwlock_wrlock(&ino->rwsem);   /* no truncate meanwhile */
	int err = 0;
	for (;;) {
		pthread_mutex_lock(&ino->lock);
		if (!ino->nr_pages) {
			pthread_mutex_unlock(&ino->lock);
			break;
		}
		uint32_t seq = ino->wb_err.seq;
		pthread_mutex_unlock(&ino->lock);
		write_inode_all(ino);
		wait_on_writeback_range(ino, 0, UINT64_MAX);
		pthread_mutex_lock(&ino->lock);
		if (ino->wb_err.seq != seq) {
			/* failed: the pages stay dirty (on_error=retry), or
			 * were dropped (drop): the open fails, and that tells
			 * the error (seen, unless the opener asked
			 * WBC_O_NOERRSEEN) */
			err = ino->wb_err.err;
			if (mark_seen)
				ino->wb_err.seen = true;
			pthread_mutex_unlock(&ino->lock);
			break;
		}
		if (!ino->nr_dirty && !ino->nr_writeback && !pages_locked_locked(ino)) {
			drop_pages_from_locked(ino, 0);
			pthread_mutex_unlock(&ino->lock);
			break;
		}
		pthread_mutex_unlock(&ino->lock);
		/* a page still locked by a reader that finished with its
		 * handle (or reclaim's look at it): soon released */
		sched_yield();
	}
	if (!err)
		err = inode_sync_size(ino);
	pthread_rwlock_unlock(&ino->rwsem);
	return err;
}

int wbc_file_open_group(wbc_dev *dev, const char *name, int flags, wbc_group *group,
			wbc_file **out)
{
	if (!dev || !out || (flags & ~(WBC_O_CREAT | WBC_O_TRUNC | WBC_O_DIRECT | WBC_O_NOERRSEEN)) ||
	    (group && group->cache != dev->cache))
		return -EINVAL;
	if (!name)
		name = "";
	if (!name_ok(dev->be, name))
		return -EINVAL;
	bool direct = flags & WBC_O_DIRECT;
	int err = direct ? 0 : page_reserve_level(dev->cache);
	if (!err && group)
		err = group_dev_make(group, dev);   /* before a page is counted */
	if (err)
		return err;
	err = handle_open(dev, name, flags & WBC_O_CREAT, group,
			      direct ? HANDLE_DIRECT : HANDLE_CACHED, flags & WBC_O_NOERRSEEN, out);
	if (err)
		return err;
	if (direct && (err = direct_drop_cache(handle_get(*out)->inode,
					       !(flags & WBC_O_NOERRSEEN)))) {
		wbc_file_close(*out);
		*out = NULL;
		return err;
	}
	if (flags & WBC_O_TRUNC) {
		err = wbc_truncate(*out, 0);
		/* a device (one file of fixed size) cannot be cut: O_TRUNC
		 * means nothing there, as on a block device */
		if (err == -EINVAL && handle_get(*out)->inode->dev->be->single)
			err = 0;
		if (err) {
			wbc_file_close(*out);
			*out = NULL;
			return err;
		}
	}
	return 0;
}

int wbc_file_close(wbc_file *h)
{
	if (!h)
		return 0;
	struct wbc_file *f = handle_get(h);
	if (f) {
		/* the last handle of a file left with nothing to write (a
		 * truncate to 0, a remove): the flusher lets it go at its
		 * next pass, not once it is dirty_expire old */
		struct inode *ino = f->inode;
		pthread_mutex_lock(&ino->lock);
		bool idle = ino->nr_cached_handles + ino->nr_direct_handles == 1 &&
			    !ino->nr_pages && !ino->nr_writeback && !ino->sizing &&
			    ino->i_size == ino->backend_size;
		pthread_mutex_unlock(&ino->lock);
		if (idle)
			mark_inode_idle(ino);
	}
	return handle_close(h);
}

/* ------------------------------------------------------------------ */
/* page claim / release                                                 */

/* A page claim: what the caller asks for and what it got. */
struct claim {
	bool for_write;     /* wait for writeback to end (stable pages) */
	bool nowait;        /* -EAGAIN rather than wait for a locked page or
			     * for a free one (the pages after a read's first) */
	bool full;          /* the write covers the whole page */
	bool alloc_nowait;  /* -EAGAIN rather than wait for a free page (a
			     * writer holding its file's lock, file_lock=file) */
	bool nosleep;       /* -EAGAIN rather than wait for a locked page or
			     * one under writeback (likewise) */
	bool read;          /* a read at @end: -ENODATA, and no page claimed
			     * (none allocated), when @end is at or past the
			     * file's size: a read at the end waits for no free
			     * page, nor fails for want of one */
	uint64_t end;       /* write: its end offset; read: where it reads */
	struct page *spare; /* in: a free page the claim may insert (it is
			     * used or freed; NULL after) */
	/* results */
	bool uptodate;      /* the page held the file's data at claim */
	bool dirtied;       /* the claim already dirtied the page and set i_size */
	bool newly;         /* ... and the page was clean before */
	bool no_page;       /* alloc_nowait: -EAGAIN for want of a free page */
	bool busy;          /* nosleep: -EAGAIN, the page is locked or under
			     * writeback */
	uint64_t isize;     /* i_size at claim, before this write */
};

/*
 * Return page @idx of @ino with PG_LOCKED set, inserting a fresh (not
 * up-to-date) page when absent.  Caller holds rwsem.  A write whose data
 * will be complete after its copy (the page is up to date, or the write
 * covers it) is dirtied here, in the same critical section: the flusher
 * never takes a locked page, so marking before the copy is safe, and the
 * writer then needs no second trip through the inode lock (page_unlock
 * is one atomic step).
 */
static int grab_page(struct inode *ino, uint64_t idx, struct claim *cl, struct page **out)
{
	struct wbc_cache *c = ino->dev->cache;
	struct page *spare = cl->spare, *p;
	int err = 0;
	cl->spare = NULL;
	pthread_mutex_lock(&ino->lock);
	if (cl->read && cl->end >= ino->i_size) {
		/* the size only grows while the caller holds rwsem: checked
		 * once, before any wait or allocation (a read brings no
		 * spare) */
		assert(!spare);
		cl->isize = ino->i_size;
		pthread_mutex_unlock(&ino->lock);
		return -ENODATA;
	}
	for (;;) {
		p = pm_lookup(&ino->map, idx);
		if (p) {
			uint32_t fl = pg_flags(p);
			if (fl & PG_LOCKED) {
				if (cl->nowait || cl->nosleep) {
					cl->busy = cl->nosleep;
					p = NULL;
					err = -EAGAIN;
					break;
				}
				page_wait_unlocked(ino, p);
				continue;
			}
			if (cl->for_write && (fl & PG_WRITEBACK)) {
				if (cl->nosleep) {
					cl->busy = true;
					p = NULL;
					err = -EAGAIN;
					break;
				}
				inode_wait_locked(ino);
				continue;
			}
			pg_set(p, PG_LOCKED);
			break;
		}
		if (spare) {
			err = pm_insert(&ino->map, idx, spare);
			if (err)
				break;
			atomic_store_explicit(&spare->flags, PG_LOCKED, memory_order_relaxed);
			page_bind(c, spare, ino, idx);
			ino->nr_pages++;
			p = spare;
			spare = NULL;
			break;
		}
		pthread_mutex_unlock(&ino->lock);
		spare = cl->nowait || cl->alloc_nowait ? page_try_alloc(c) : page_alloc(c, &err);
		pthread_mutex_lock(&ino->lock);
		if (!spare) {
			if (cl->nowait || cl->alloc_nowait)
				err = -EAGAIN;
			cl->no_page = cl->alloc_nowait;
			break;   /* (waiting:) only dead devices hold the pages */
		}
	}
	cl->isize = ino->i_size;
	cl->dirtied = cl->newly = false;
	if (p) {
		uint32_t fl = pg_flags(p);
		cl->uptodate = fl & PG_UPTODATE;
		if (cl->for_write && (cl->uptodate || cl->full)) {
			cl->dirtied = true;
			cl->newly = !(fl & PG_DIRTY);
			pg_set(p, PG_UPTODATE | PG_DIRTY);
			if (cl->newly) {
				pm_tag_set(&ino->map, idx, PM_TAG_DIRTY);
				ino->nr_dirty++;
			}
			if (cl->end > ino->i_size)
				ino->i_size = cl->end;
		}
	}
	pthread_mutex_unlock(&ino->lock);
	if (spare) {
		pthread_mutex_lock(&c->lru_lock);
		page_free_locked(c, spare);
		pthread_mutex_unlock(&c->lru_lock);
	}
	if (err)
		return err;
	if (!atomic_load_explicit(&p->referenced, memory_order_relaxed))
		atomic_store_explicit(&p->referenced, true, memory_order_relaxed);
	*out = p;
	return 0;
}

/* Drop PG_LOCKED (setting @set) in one atomic step, with no lock held;
 * take the inode lock only to wake a waiter. */
static void page_unlock(struct inode *ino, struct page *p, uint32_t set)
{
	uint32_t old = atomic_load_explicit(&p->flags, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&p->flags, &old,
						      (old | set) & ~(PG_LOCKED | PG_WAITERS),
						      memory_order_release, memory_order_relaxed))
		;
	assert(old & PG_LOCKED);
	if (old & PG_WAITERS) {
		pthread_mutex_lock(&ino->lock);
		inode_wake_locked(ino);
		pthread_mutex_unlock(&ino->lock);
	}
}

/* Read page @p's data from the backend; zeros past the backend's end and
 * past @isize. */
static int fill_page(struct inode *ino, struct page *p, uint64_t isize)
{
	struct wbc_cache *c = ino->dev->cache;
	size_t ps = c->page_size;
	char *data = page_data(c, p);
	uint64_t pos = p->index << c->page_shift;
	if (pos >= isize) {
		memset(data, 0, ps);
		return 0;
	}
	ssize_t n = backend_read_sync(ino->dev->be, ino->obj, data, ps, pos);
	if (n < 0)
		return (int)n;
	atomic_fetch_add(&c->st_read_in, (uint64_t)n);
	size_t valid = (size_t)WBC_MIN((uint64_t)n, isize - pos);
	memset(data + valid, 0, ps - valid);
	return 0;
}

/* The most pages one read brings in with one backend I/O. */
#define READ_RUN 32

/*
 * Read page @first (locked, not up to date, below @isize) from the
 * backend, and with it in the same I/O the pages after it up to @end
 * (bytes, the read's end) that are not up to date either: a read of many
 * pages is one round trip, not one per page.  The pages after the first
 * are claimed without waiting (a locked page, or no free page, ends the
 * run), so a reader holding some never waits while holding them; they are
 * unlocked here, up to date; @first stays locked for the caller.
 */
static int fill_run(struct inode *ino, struct page *first, uint64_t isize, uint64_t end)
{
	struct wbc_cache *c = ino->dev->cache;
	size_t ps = c->page_size;
	uint64_t pos = first->index << c->page_shift;
	uint64_t last = (WBC_MIN(end, isize) - 1) >> c->page_shift;
	struct page *run[READ_RUN];
	struct iovec iov[READ_RUN];
	unsigned n = 0;
	run[n++] = first;
	while (n < READ_RUN && first->index + n <= last) {
		struct claim cl = { .nowait = true };
		struct page *p;
		if (grab_page(ino, first->index + n, &cl, &p))
			break;
		if (cl.uptodate) {
			page_unlock(ino, p, 0);
			break;
		}
		/* the size now: a write may have grown it since @first was
		 * claimed (into a page not yet locked here); what it wrote
		 * past the old size is the file's, not zeros */
		isize = WBC_MAX(isize, cl.isize);
		run[n++] = p;
	}
	for (unsigned i = 0; i < n; i++)
		iov[i] = (struct iovec){ .iov_base = page_data(c, run[i]), .iov_len = ps };
	int err = 0;
	ssize_t r = n == 1 ? backend_read_sync(ino->dev->be, ino->obj, iov[0].iov_base, ps, pos) :
		    backend_rw_sync(ino->dev->be, ino->obj, BIO_READ, iov, (int)n, pos, &err);
	if (err)        /* failed after some bytes: not the object's end */
		r = err;
	if (r >= 0) {
		atomic_fetch_add(&c->st_read_in, (uint64_t)r);
		/* the file's bytes: what the backend gave, up to i_size */
		uint64_t valid = WBC_MIN((uint64_t)r, isize - pos);
		for (unsigned i = 0; i < n; i++) {
			uint64_t at = (uint64_t)i * ps;
			size_t v = valid > at ? (size_t)WBC_MIN(valid - at, ps) : 0;
			memset((char *)iov[i].iov_base + v, 0, ps - v);
		}
	}
	for (unsigned i = 1; i < n; i++)
		page_unlock(ino, run[i], r >= 0 ? PG_UPTODATE : 0);
	return r < 0 ? (int)r : 0;
}

/* ------------------------------------------------------------------ */
/* read / write                                                         */

static int range_check(uint64_t off, size_t len)
{
	if (off > WBC_MAX_OFFSET || len > WBC_MAX_OFFSET - off || len > SSIZE_MAX)
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------------ */
/* direct I/O (WBC_O_DIRECT handles)                                    */

/*
 * A direct handle's I/O goes to the backend from the caller's buffers and
 * waits for it (backend_rw_sync), under rwsem shared (no truncate
 * meanwhile).  No page of the file is cached while a direct handle is
 * open (handle_open refuses a handle through the cache then, and the
 * direct open dropped the pages), so no cached copy goes stale.  Direct
 * I/Os of a file that overlap wait for each other (the backend never has
 * two overlapping I/Os of a file in flight): each in flight is a range
 * on ino->dio_ranges, under ino->lock.
 */
struct dio_range {
	uint64_t start, end;        /* bytes [start, end) */
	struct dio_range *next;
};

static void dio_range_lock(struct inode *ino, struct dio_range *r)
{
	pthread_mutex_lock(&ino->lock);
	for (;;) {
		struct dio_range *o = ino->dio_ranges;
		while (o && (o->end <= r->start || r->end <= o->start))
			o = o->next;
		if (!o)
			break;
		inode_wait_locked(ino);
	}
	r->next = ino->dio_ranges;
	ino->dio_ranges = r;
	pthread_mutex_unlock(&ino->lock);
}

static void dio_range_unlock(struct inode *ino, struct dio_range *r)
{
	pthread_mutex_lock(&ino->lock);
	struct dio_range **pp = &ino->dio_ranges;
	while (*pp != r)
		pp = &(*pp)->next;
	*pp = r->next;
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);
}

/*
 * A direct write that extended the file and stopped short (an error, or a
 * short piece): the pieces submitted with the one that failed may have
 * landed after it, past the size the write returned (the caller was told
 * they were not written).  Cut the backend back to the size, so that a
 * later extension reads zeros there, not them.  Where the backend
 * refuses, backend_size says it may be larger (the next size sync trims
 * it).  Under rwsem exclusive and sizing (the caller's).
 */
static void direct_trim_locked(struct inode *ino, uint64_t end)
{
	assert_held(&ino->lock);
	uint64_t size = ino->i_size;
	if (end <= size)
		return;
	pthread_mutex_unlock(&ino->lock);
	int err = backend_resize(ino->dev->be, ino->obj, size);
	pthread_mutex_lock(&ino->lock);
	ino->backend_size = err ? WBC_MAX(ino->backend_size, end) : size;
}

/* The largest file a direct write may reach (io_begin's for the cache):
 * one from there fails with -EFBIG, one across it is cut (to the
 * alignment). */
static uint64_t direct_max(struct backend *be, size_t page_size, uint64_t off, size_t len)
{
	uint64_t max = __atomic_load_n(&be->max_file, __ATOMIC_RELAXED);
	if (be->single && len > max - WBC_MIN(off, max))   /* a device that grew? */
		max = backend_max_file(be, page_size);
	return max;
}

static ssize_t direct_rw(struct wbc_file *f, int op, const struct iovec *iov, int iovcnt,
			 uint64_t off)
{
	struct inode *ino = f->inode;
	struct wbc_dev *dev = ino->dev;
	struct backend *be = dev->be;
	size_t align = be->dio_align ? be->dio_align : 1, len = 0;
	if (iovcnt < 0 || (iovcnt && !iov) || off % align)
		return -EINVAL;
	for (int i = 0; i < iovcnt; i++) {
		if ((uintptr_t)iov[i].iov_base % align || iov[i].iov_len % align ||
		    (!iov[i].iov_base && iov[i].iov_len) || iov[i].iov_len > SSIZE_MAX - len)
			return -EINVAL;
		len += iov[i].iov_len;
	}
	/* a read may ask for more than a file can hold: it ends at the
	 * end, as one through the cache (wbc_pread: 0 at or past 2^62) */
	if (op == BIO_READ && off >= WBC_MAX_OFFSET)
		return 0;
	int err = op == BIO_READ ? 0 : range_check(off, len);
	if (err)
		return err;
	if (!len)
		return 0;
	struct iovec *cut = NULL;
	if (op == BIO_WRITE) {
		/* the backend's largest file, as a write through the cache
		 * (the kernel's generic_write_checks hold for O_DIRECT too) */
		uint64_t max = direct_max(be, dev->cache->page_size, off, len);
		if (off >= max)
			return -EFBIG;
		if (len > max - off) {
			size_t keep = (size_t)(max - off) / align * align;
			if (!keep)
				return -EFBIG;
			if (!(cut = malloc((size_t)iovcnt * sizeof(*cut))))
				return -ENOMEM;
			int k = 0;
			for (size_t left = keep; left; k++) {
				cut[k] = iov[k];
				cut[k].iov_len = WBC_MIN(cut[k].iov_len, left);
				left -= cut[k].iov_len;
			}
			iov = cut;
			iovcnt = k;
			len = keep;
		}
	}
	/* A write that extends the file holds rwsem exclusive and owns the
	 * backend's size (sizing), as the kernel's extending direct writes
	 * take i_rwsem exclusive: should it stop short, what it left past
	 * the new size is cut with no other I/O of the file running. */
	bool excl = false;
	for (;;) {
		if (excl)
			pthread_rwlock_wrlock(&ino->rwsem);
		else
			pthread_rwlock_rdlock(&ino->rwsem);
		if (op != BIO_WRITE || excl)
			break;
		pthread_mutex_lock(&ino->lock);
		bool extends = off + len > ino->i_size;
		pthread_mutex_unlock(&ino->lock);
		if (!extends)
			break;
		pthread_rwlock_unlock(&ino->rwsem);
		excl = true;
	}
	struct dio_range r = { .start = off, .end = off + len };
	dio_range_lock(ino, &r);
	ssize_t n;
	pthread_mutex_lock(&ino->lock);
	if (excl) {
		while (ino->sizing)
			inode_wait_locked(ino);
		ino->sizing = true;
	}
	uint64_t isize = ino->i_size;
	pthread_mutex_unlock(&ino->lock);
	if (op == BIO_READ && off >= isize) {
		n = 0;
	} else {
		n = backend_rw_sync(be, ino->obj, op, iov, iovcnt, off, NULL);
		if (op == BIO_READ && n > 0)
			n = (ssize_t)WBC_MIN((uint64_t)n, isize - off);   /* past the size: not the file's */
	}
	if (op == BIO_WRITE && (n > 0 || excl)) {
		pthread_mutex_lock(&ino->lock);
		if (n > 0) {
			ino->i_size = WBC_MAX(ino->i_size, off + (uint64_t)n);
			ino->backend_size = WBC_MAX(ino->backend_size, off + (uint64_t)n);
			ino->written_gen = atomic_load_explicit(&dev->flush_gen, memory_order_relaxed);
		}
		if (excl) {
			if (n < 0 || (size_t)n < len)
				direct_trim_locked(ino, off + len);
			ino->sizing = false;
			inode_wake_locked(ino);
		}
		pthread_mutex_unlock(&ino->lock);
		if (n > 0)
			pcount_add(&dev->cache->st_written, n);
	}
	dio_range_unlock(ino, &r);
	pthread_rwlock_unlock(&ino->rwsem);
	free(cut);
	return n;
}

/* The start of wbc_pread and wbc_pwrite: the handle, or NULL with *@ret
 * set (an error, or all a direct handle's I/O did). */
static struct wbc_file *io_begin(wbc_file *h, int op, const void *buf, size_t *lenp,
				 uint64_t off, ssize_t *ret)
{
	size_t len = *lenp;
	struct wbc_file *f = handle_get(h);
	if (!f || (!buf && len)) {
		*ret = !f ? -EBADF : -EINVAL;
		return NULL;
	}
	if (f->direct) {
		struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
		*ret = direct_rw(f, op, &v, 1, off);
		return NULL;
	}
	if (op == BIO_READ && len <= SSIZE_MAX) {
		/* a read may ask for more than a file can hold: it ends at
		 * the end, as the kernel's */
		*ret = 0;
		return off >= WBC_MAX_OFFSET ? NULL : f;
	}
	*ret = range_check(off, len);
	if (*ret)
		return NULL;
	/* the backend's largest file (generic_write_check_limits): a write
	 * from there fails, one across it is short */
	struct backend *be = f->inode->dev->be;
	uint64_t max = __atomic_load_n(&be->max_file, __ATOMIC_RELAXED);
	if (be->single && len > max - WBC_MIN(off, max))   /* a device that grew? */
		max = backend_max_file(be, f->inode->dev->cache->page_size);
	if (len && off >= max) {
		*ret = -EFBIG;
		return NULL;
	}
	if (len > max - off)
		*lenp = (size_t)(max - off);
	return f;
}

ssize_t wbc_pread(wbc_file *h, void *buf, size_t len, uint64_t off)
{
	ssize_t ret;
	struct wbc_file *f = io_begin(h, BIO_READ, buf, &len, off, &ret);
	if (!f)
		return ret;
	int err = 0;
	struct inode *ino = f->inode;
	struct wbc_cache *c = ino->dev->cache;
	size_t done = 0;
	pthread_rwlock_rdlock(&ino->rwsem);
	while (done < len) {
		uint64_t pos = off + done;
		struct page *p;
		struct claim cl = { .read = true, .end = pos };
		err = grab_page(ino, pos >> c->page_shift, &cl, &p);
		if (err == -ENODATA) {
			err = 0;    /* the end of the file */
			break;
		}
		if (err)
			break;
		uint64_t isize = cl.isize;
		if (pos >= isize) {
			page_unlock(ino, p, 0);
			break;
		}
		if (!cl.uptodate && (err = fill_run(ino, p, isize, off + len))) {
			page_unlock(ino, p, 0);
			break;
		}
		size_t poff = (size_t)(pos & (c->page_size - 1));
		size_t n = (size_t)WBC_MIN((uint64_t)WBC_MIN(c->page_size - poff, len - done),
					   isize - pos);
		memcpy((char *)buf + done, page_data(c, p) + poff, n);
		page_unlock(ino, p, PG_UPTODATE);
		done += n;
	}
	pthread_rwlock_unlock(&ino->rwsem);
	return done ? (ssize_t)done : err;
}

/* Copy into one page and mark it dirty.  Returns 1 when the page was
 * newly dirtied, 0 when it was dirty already, or -errno. */
static int write_page_claimed(struct inode *ino, uint64_t pos, const char *src, size_t n,
			      struct claim *claim);

/* Wait until page @idx of @ino is neither locked nor under writeback (or
 * gone), without claiming it. */
static void page_wait_idle(struct inode *ino, uint64_t idx)
{
	pthread_mutex_lock(&ino->lock);
	struct page *p;
	while ((p = pm_lookup(&ino->map, idx))) {
		uint32_t fl = pg_flags(p);
		if (fl & PG_LOCKED)
			page_wait_unlocked(ino, p);
		else if (fl & PG_WRITEBACK)
			inode_wait_locked(ino);
		else
			break;
	}
	pthread_mutex_unlock(&ino->lock);
}

static int write_page(struct inode *ino, uint64_t pos, const char *src, size_t n)
{
	struct wbc_cache *c = ino->dev->cache;
	struct claim cl = { .for_write = true, .full = n == c->page_size, .end = pos + n };
	if (ino->dev->file_lock != WBC_FILE_LOCK_FILE)
		return write_page_claimed(ino, pos, src, n, &cl);
	/*
	 * file_lock=file, the old policy (for experiments): one lock per
	 * file, held across the claim, the copy and the dirtying of the page
	 * (and the read of a partial page first: a sync pass holding the
	 * lock may wait for a claimed page, so the claim keeps it), which
	 * writeback also holds from the collection of each run of the file's
	 * pages until its submission (write_inode_pages): a writer waits
	 * while the file's writeback is being submitted, and writeback for
	 * the file's writers.  A free page is never waited for under it (the
	 * flusher may need the lock to clean one): the lock is dropped, a
	 * page taken, and the claim tried again with it.  Nor does a writer
	 * sleep under it for its page (locked by a reader, or under
	 * writeback): the kernel's lock was a spinlock, and its writers
	 * waited for a request with it dropped.
	 */
	cl.alloc_nowait = cl.nosleep = true;
	for (;;) {
		inode_file_lock(ino);
		int r = write_page_claimed(ino, pos, src, n, &cl);
		inode_file_unlock(ino);
		if (r != -EAGAIN || !(cl.no_page || cl.busy))
			return r;
		if (cl.busy) {
			cl.busy = false;
			page_wait_idle(ino, pos >> c->page_shift);
			continue;
		}
		cl.no_page = false;
		int err = 0;
		if (!(cl.spare = page_alloc(c, &err)))
			return err ? err : -ENOMEM;
	}
}

static int write_page_claimed(struct inode *ino, uint64_t pos, const char *src, size_t n,
			      struct claim *claim)
{
	struct wbc_cache *c = ino->dev->cache;
	size_t poff = (size_t)(pos & (c->page_size - 1));
	struct page *p;
	struct claim cl = *claim;
	claim->spare = NULL;   /* grab_page uses it or frees it */
	int err = grab_page(ino, pos >> c->page_shift, &cl, &p);
	claim->no_page = cl.no_page;
	claim->busy = cl.busy;
	if (err)
		return err;
	/* A page newly dirty puts its file on the dirty lists before its
	 * lock is let go: a writer of the page after this one finds it dirty
	 * and marks nothing, and a sync it makes after its write returns
	 * must find the file (it found none, and returned with the data
	 * unwritten, in the window between the unlock and the mark). */
	if (cl.dirtied) {
		/* the fast path: one trip through the inode lock */
		memcpy(page_data(c, p) + poff, src, n);
		if (cl.newly) {
			account_dirtied(ino, 1);
			mark_inode_dirty(ino);
		}
		page_unlock(ino, p, 0);
	} else {
		/* a partial write to a page not in the cache: read it first */
		if ((err = fill_page(ino, p, cl.isize))) {
			page_unlock(ino, p, 0);
			return err;
		}
		memcpy(page_data(c, p) + poff, src, n);
		pthread_mutex_lock(&ino->lock);
		cl.newly = !(pg_flags(p) & PG_DIRTY);
		pg_set(p, PG_UPTODATE | PG_DIRTY);
		if (cl.newly) {
			pm_tag_set(&ino->map, p->index, PM_TAG_DIRTY);
			ino->nr_dirty++;
		}
		if (cl.end > ino->i_size)
			ino->i_size = cl.end;
		pthread_mutex_unlock(&ino->lock);
		if (cl.newly) {
			account_dirtied(ino, 1);
			mark_inode_dirty(ino);
		}
		page_unlock(ino, p, 0);
	}
	return cl.newly;
}

ssize_t wbc_pwrite(wbc_file *h, const void *buf, size_t len, uint64_t off)
{
	ssize_t ret;
	struct wbc_file *f = io_begin(h, BIO_WRITE, buf, &len, off, &ret);
	if (!f)
		return ret;
	int err = 0;
	struct inode *ino = f->inode;
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	size_t done = 0;
	pthread_rwlock_rdlock(&ino->rwsem);
	while (done < len) {
		uint64_t pos = off + done;
		size_t n = WBC_MIN(c->page_size - (size_t)(pos & (c->page_size - 1)), len - done);
		/* a thread whose last check failed (a dead device) checks
		 * again before it dirties more: it never adds to a dirty limit
		 * that nothing drains */
		if (throttle_due(c) && (err = balance_dirty_pages(dev, ino->group)))
			break;
		if (throttle_owed())
			break;      /* wbc_pwrite_nowait: the rest after the pause */
		int r = write_page(ino, pos, (const char *)buf + done, n);
		if (r < 0) {
			err = r;
			break;
		}
		done += n;
		if (r && throttle_dirtied(c) && (err = balance_dirty_pages(dev, ino->group)))
			break;
		if (throttle_owed())
			break;
	}
	pthread_rwlock_unlock(&ino->rwsem);
	pcount_add(&c->st_written, (long long)done);
	return done ? (ssize_t)done : err;
}

/* The vectored calls: a direct handle's as one direct I/O; through the
 * cache, entry by entry (stopping where one stops short). */
static ssize_t rwv(wbc_file *h, bool write, const struct iovec *iov, int iovcnt, uint64_t off)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (iovcnt < 0 || (iovcnt && !iov))
		return -EINVAL;
	if (f->direct)
		return direct_rw(f, write ? BIO_WRITE : BIO_READ, iov, iovcnt, off);
	size_t done = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > SSIZE_MAX - done)
			return done ? (ssize_t)done : -EINVAL;
		ssize_t r = write ? wbc_pwrite(h, iov[i].iov_base, iov[i].iov_len, off + done)
				  : wbc_pread(h, iov[i].iov_base, iov[i].iov_len, off + done);
		if (r < 0)
			return done ? (ssize_t)done : r;
		done += (size_t)r;
		if ((size_t)r < iov[i].iov_len)
			break;
	}
	return (ssize_t)done;
}

ssize_t wbc_preadv(wbc_file *h, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return rwv(h, false, iov, iovcnt, off);
}

ssize_t wbc_pwritev(wbc_file *h, const struct iovec *iov, int iovcnt, uint64_t off)
{
	return rwv(h, true, iov, iovcnt, off);
}

ssize_t wbc_pwrite_nowait(wbc_file *h, const void *buf, size_t len, uint64_t off,
			  uint64_t *pause_ns)
{
	throttle_defer_begin();
	ssize_t r = wbc_pwrite(h, buf, len, off);
	uint64_t p = throttle_defer_end();
	if (pause_ns)
		*pause_ns = p;
	return r;
}

int64_t wbc_file_size(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	pthread_mutex_lock(&f->inode->lock);
	int64_t s = (int64_t)f->inode->i_size;
	pthread_mutex_unlock(&f->inode->lock);
	return s;
}

int wbc_file_info(wbc_file *h, struct wbc_file_info *info)
{
	struct wbc_file *f = handle_get(h);
	if (!f || !info)
		return !f ? -EBADF : -EINVAL;
	struct inode *ino = f->inode;
	uint64_t psize = ino->dev->cache->page_size;
	memset(info, 0, sizeof(*info));
	pthread_mutex_lock(&ino->lock);
	info->size = ino->i_size;
	info->unwritten_bytes = (ino->nr_dirty + ino->nr_writeback) * psize;
	info->backend_size = ino->backend_size;
	pthread_mutex_unlock(&ino->lock);
	return 0;
}

int wbc_truncate(wbc_file *h, uint64_t size)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (size > WBC_MAX_OFFSET)
		return -EINVAL;
	struct inode *ino = f->inode;
	struct wbc_cache *c = ino->dev->cache;
	struct backend *be = ino->dev->be;
	pthread_rwlock_wrlock(&ino->rwsem);
	pthread_mutex_lock(&ino->lock);
	/* growth past the backend's largest file (inode_newsize_ok); a
	 * shrink to a size still past it is fine; a one-file device's own
	 * resize decides (a device may have grown: lvextend) */
	if (!be->single && size > __atomic_load_n(&be->max_file, __ATOMIC_RELAXED) &&
	    size > ino->i_size) {
		pthread_mutex_unlock(&ino->lock);
		pthread_rwlock_unlock(&ino->rwsem);
		return -EFBIG;
	}
	while (ino->sizing)
		inode_wait_locked(ino);
	ino->sizing = true;
	while (ino->nr_writeback)
		inode_wait_locked(ino);
	/* The backend first, the cache after: a resize the backend refuses
	 * leaves the file as it was.  A refused shrink keeps every byte past
	 * the new size, in the cache (dirty pages too) and in the backend
	 * (else a later extension would show them again, or the dirty
	 * pages' data be lost by a truncate that failed); a refused
	 * extension (a device of fixed size) keeps the old size, else every
	 * later writeback would try to extend it again.  The lock may drop:
	 * readers and writers are shut out (rwsem), writeback too (sizing). */
	pthread_mutex_unlock(&ino->lock);
	int err = backend_resize(be, ino->obj, size);
	pthread_mutex_lock(&ino->lock);
	if (!err) {
		if (size < ino->i_size) {
			drop_pages_from_locked(ino, (size + c->page_size - 1) >> c->page_shift);
			size_t tail = (size_t)(size & (c->page_size - 1));
			struct page *p = tail ? pm_lookup(&ino->map, size >> c->page_shift) : NULL;
			if (p && (pg_flags(p) & PG_UPTODATE))
				memset(page_data(c, p) + tail, 0, c->page_size - tail);
			/* the retry policy's failed pages all cut away:
			 * nothing of theirs can be lost any more, the error
			 * is healed as their writing heals it (end_io.c);
			 * else a handle opened from here on was told, or
			 * not, as some later write of another page happened
			 * to complete before it looked */
			if (!ino->nr_at_risk && ino->wb_err.retried)
				ino->wb_err.seen = ino->wb_err.healed = true;
		}
		ino->i_size = ino->backend_size = size;
	}
	ino->sizing = false;
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);
	pthread_rwlock_unlock(&ino->rwsem);
	return err;
}

/*
 * Remove a file: the one handle (ours) open, the I/O paths shut out
 * (rwsem), no writeback in flight (sizing, as truncate), the backend's
 * remove, and only once it succeeded every page dropped and the inode out
 * of the name table so that the name opens anew.  The inode lives on until our handle's
 * close; with no page and i_size == backend_size that close does nothing
 * but the backend's close.
 */
int wbc_file_remove(wbc_dev *dev, const char *name)
{
	if (!dev || !name || !name_ok(dev->be, name))
		return -EINVAL;
	if (!backend_can_remove(dev->be))
		return -EOPNOTSUPP;
	wbc_file *h;
	/* our handle is a remover's: it and another remover's do not make
	 * the file busy (the first removes it, the others get ENOENT) */
	int err = handle_open(dev, name, false, NULL, HANDLE_REMOVER, false, &h);
	if (err)
		return err;
	struct inode *ino = handle_get(h)->inode;
	/* the name shut first (a new open waits), then ours the one handle
	 * but the removers'; an opener already past the name lets go when it
	 * sees removing */
	if (!inode_removing(ino, true, false)) {
		wbc_file_close(h);   /* another remove took it meanwhile */
		return -ENOENT;
	}
	pthread_rwlock_wrlock(&ino->rwsem);
	pthread_mutex_lock(&ino->lock);
	if (ino->nr_cached_handles + ino->nr_direct_handles > ino->nr_removers) {
		pthread_mutex_unlock(&ino->lock);
		pthread_rwlock_unlock(&ino->rwsem);
		inode_removing(ino, false, false);
		wbc_file_close(h);
		return -EBUSY;
	}
	ino->removing = true;
	while (ino->sizing)
		inode_wait_locked(ino);
	ino->sizing = true;
	while (ino->nr_writeback)
		inode_wait_locked(ino);
	pthread_mutex_unlock(&ino->lock);
	/* the backend first: a remove it refuses leaves the file as it was,
	 * its dirty pages and size too (as a refused truncate) */
	err = backend_remove(dev->be, ino->obj);
	pthread_mutex_lock(&ino->lock);
	if (!err) {
		drop_pages_from_locked(ino, 0);
		ino->i_size = 0;
		ino->backend_size = 0;
	}
	ino->sizing = false;
	if (err)
		ino->removing = false;   /* the file stays as it was */
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);
	inode_removing(ino, false, !err);
	pthread_rwlock_unlock(&ino->rwsem);
	wbc_file_close(h);
	return err;
}

/* ------------------------------------------------------------------ */
/* fsync                                                                */

int wbc_fsync_range(wbc_file *h, uint64_t off, uint64_t len, int datasync)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	/* a range past what a file can hold ends at the file's end */
	if (off > WBC_MAX_OFFSET)
		off = WBC_MAX_OFFSET;
	if (len > WBC_MAX_OFFSET - off)
		len = 0;
	struct inode *ino = f->inode;
	struct wbc_dev *dev = ino->dev;
	uint32_t shift = dev->cache->page_shift;
	uint64_t start = off >> shift;
	uint64_t end = len ? (off + len - 1) >> shift : UINT64_MAX;
	struct wbc_ctl ctl = {
		.sync_mode = WB_SYNC_ALL,
		.nr_to_write = LONG_MAX,
		.range_start = start,
		.range_end = end,
	};
	write_inode_pages(ino, &ctl);
	wait_on_writeback_range(ino, start, end);
	int err = inode_sync_size(ino);
	int ferr = backend_flush(dev->be, ino->obj, datasync);
	/* a failed flush may have lost completed writes (a stacked device's
	 * lower device failed to write them): an error of the file, which
	 * every handle open now sees once, as a failed write's */
	if (ferr) {
		atomic_fetch_add(&dev->cache->st_flush_errors, 1);
		dev_record_error(dev, ferr);
	}
	pthread_mutex_lock(&ino->lock);
	if (ferr)
		errseq_record(&ino->wb_err, ferr);
	int werr = f->noerrseen ?
		   errseq_check_advance_quiet(&ino->wb_err, &f->err_since, &f->err_inherit) :
		   errseq_check_advance(&ino->wb_err, &f->err_since, &f->err_inherit);
	pthread_mutex_unlock(&ino->lock);
	/* err and ferr are in the sequence too: told once, here or by
	 * another call on this handle (wbc_file_check_error) meanwhile */
	(void)err;
	return werr;
}

int wbc_file_check_error(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	pthread_mutex_lock(&f->inode->lock);
	int err = f->noerrseen ?
		  errseq_check_advance_quiet(&f->inode->wb_err, &f->err_since, &f->err_inherit) :
		  errseq_check_advance(&f->inode->wb_err, &f->err_since, &f->err_inherit);
	pthread_mutex_unlock(&f->inode->lock);
	return err;
}

int wbc_file_peek_error(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	pthread_mutex_lock(&f->inode->lock);
	int err = errseq_peek(&f->inode->wb_err, f->err_since);
	pthread_mutex_unlock(&f->inode->lock);
	return err;
}

int wbc_fsync(wbc_file *f) { return wbc_fsync_range(f, 0, 0, 0); }
int wbc_fdatasync(wbc_file *f) { return wbc_fsync_range(f, 0, 0, 1); }
