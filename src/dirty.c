/*
 * Dirty-file tracking per device, the kernel's b_dirty / b_io / b_more_io,
 * with b_dirty kept as time buckets (a timer wheel that grows at its tail):
 *
 *   mark_inode_dirty()            queue_io(T)                 flusher
 *        |                            |                          |
 *        v                            v  whole buckets           v
 *   b_dirty: [t0..][t1..][t2..] ---------------------> b_io --- take head -->
 *   (buckets oldest first, each    start <= T; then       (I_SYNC, off the
 *    a list of files dirtied in    b_more_io's files       lists)
 *    [start, start + width))            ^                    |
 *        ^                              |  used its slice    |
 *        |                          b_more_io <--------------+
 *        +-- still dirty, slice not used: filed in the newest bucket
 *                                                   clean: dropped, iput
 *
 * Dirtying a file is O(1): append it to the newest bucket, or open a new
 * bucket when the newest is older than one width.  Queueing "every file
 * dirtied before T" moves whole buckets to b_io, which is itself a list of
 * buckets (then b_more_io's files, a plain list): the dirty-list lock is
 * never held for a walk over files, and queueing touches bucket headers
 * only, never the files' cache lines.  queue_io moves at most
 * QUEUE_IO_BUCKETS buckets per call, which bounds even the bucket walk.
 *
 * Expiry is exact to one bucket width: a bucket is queued once its start is
 * at or before T, so a file may be written up to one width (dirty_expire/64,
 * 1 to 100 ms) before it is dirty_expire old.  dirtied_when is the time a
 * file went from clean to dirty; a file put back in b_dirty is filed in the
 * newest bucket and its dirtied_when moves forward only to the newest
 * file's there (the kernel's redirty_tail), which keeps the files in order and
 * never lets a busy file hold a sync back: sync first seals the newest
 * bucket, queues everything up to it, and files put back during the sync go
 * to buckets after the seal.
 *
 * An inode is in the writeback system while I_DIRTY (on one list) or I_SYNC
 * (held by a flusher); it owns one reference then.  All of this is under
 * dev->list_lock.
 */
#include "internal.h"

struct dirty_bucket {
	struct list_head link;      /* dev->buckets */
	struct list_head inodes;    /* files filed here, in filing order */
	uint64_t start;             /* ns; no file here is older */
	uint64_t last;              /* ns; the newest file's dirtied_when */
	uint64_t n;                 /* files */
	uint64_t seq;               /* creation order */
	bool sealed;                /* takes no more files */
	struct dirty_bucket *next_free;
};

#define BUCKET_MIN_NS (1000ull * 1000)
#define BUCKET_MAX_NS (100ull * 1000 * 1000)

void lock_stat_record(struct lock_stat *ls, uint64_t ns)
{
	unsigned b = ns ? (unsigned)(64 - __builtin_clzll(ns)) : 0;
	atomic_fetch_add_explicit(&ls->hist[WBC_MIN(b, LOCK_HIST_BUCKETS - 1u)], 1,
				  memory_order_relaxed);
	uint64_t mx = atomic_load_explicit(&ls->max_ns, memory_order_relaxed);
	while (ns > mx && !atomic_compare_exchange_weak(&ls->max_ns, &mx, ns))
		;
}

/* The dirty-list lock, with its hold time recorded (wbc_dev_stats). */
void dev_list_lock(struct wbc_dev *dev)
{
	pthread_mutex_lock(&dev->list_lock);
	dev->list_locked_at = wbc_now_ns();
}

void dev_list_unlock(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	uint64_t held = wbc_now_ns() - dev->list_locked_at;
	pthread_mutex_unlock(&dev->list_lock);
	lock_stat_record(&dev->list_lock_stat, held);
}

/* One bucket is allocated up front: when b_dirty is empty every bucket is
 * in the pool, so filing a file never fails. */
int dirty_init(struct wbc_dev *dev)
{
	uint64_t expire = (uint64_t)dev->cache->cfg.dirty_expire_centisecs * 10 * 1000 * 1000;
	dev->bucket_ns = WBC_MIN(WBC_MAX(expire / 64, BUCKET_MIN_NS), BUCKET_MAX_NS);
	list_init(&dev->buckets);
	list_init(&dev->io_buckets);
	list_init(&dev->b_io);
	list_init(&dev->b_more_io);
	dev->bucket_pool = calloc(1, sizeof(struct dirty_bucket));
	return dev->bucket_pool ? 0 : -ENOMEM;
}

void dirty_destroy(struct wbc_dev *dev)
{
	assert(list_empty(&dev->buckets) && list_empty(&dev->io_buckets) &&
	       list_empty(&dev->b_io) && list_empty(&dev->b_more_io));
	while (dev->bucket_pool) {
		struct dirty_bucket *b = dev->bucket_pool;
		dev->bucket_pool = b->next_free;
		free(b);
	}
}

void dirty_add_locked(struct wbc_dev *dev, struct inode *ino, uint64_t when)
{
	assert_held(&dev->list_lock);
	struct dirty_bucket *tail = list_empty(&dev->buckets) ? NULL :
		container_of(dev->buckets.prev, struct dirty_bucket, link);
	if (!tail || tail->sealed || when >= tail->start + dev->bucket_ns) {
		struct dirty_bucket *b = dev->bucket_pool;
		if (b)
			dev->bucket_pool = b->next_free;
		else
			b = malloc(sizeof(*b));
		if (b) {
			b->start = b->last = tail ? WBC_MAX(when, tail->last) : when;
			b->n = 0;
			b->seq = ++dev->bucket_seq;
			b->sealed = false;
			list_init(&b->inodes);
			list_add_tail(&b->link, &dev->buckets);
			dev->nr_buckets++;
			tail = b;
		}
		/* out of memory: the newest bucket takes it (the pool is never
		 * empty while b_dirty is) */
		assert(tail);
	}
	/* in order: never older than the newest file already filed */
	ino->dirtied_when = tail->last = WBC_MAX(when, tail->last);
	list_add_tail(&ino->wb_list, &tail->inodes);
	tail->n++;
	dev->nr_b_dirty++;
}

uint64_t dirty_seal_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	if (!list_empty(&dev->buckets))
		container_of(dev->buckets.prev, struct dirty_bucket, link)->sealed = true;
	return dev->bucket_seq;
}

void mark_inode_dirty(struct inode *ino)
{
	/* Fast path: already queued.  A stale true here is harmless: the
	 * flusher clears the hint before it looks at the page tags, and the
	 * caller tagged its page before calling (see flusher.c). */
	if (atomic_load_explicit(&ino->dirty_hint, memory_order_acquire))
		return;
	struct wbc_dev *dev = ino->dev;
	uint64_t now = wbc_now_ns();
	dev_list_lock(dev);
	if (!(ino->state & I_DIRTY)) {
		atomic_store_explicit(&ino->dirty_hint, true, memory_order_release);
		/* Under I_SYNC the flusher requeues it and keeps its age: an
		 * older dirtied_when only makes expiry earlier, never later. */
		if (!(ino->state & I_SYNC)) {
			/* the lists' reference, taken before a flusher can
			 * see the inode (and drop it); lock-free */
			igrab(ino);
			dirty_add_locked(dev, ino, now);
		}
		ino->state |= I_DIRTY;
	}
	dev_list_unlock(dev);
}

bool queue_io_locked(struct wbc_dev *dev, uint64_t older_than, uint64_t upto_seq)
{
	assert_held(&dev->list_lock);
	unsigned moved = 0;
	bool more = false;
	while (!list_empty(&dev->buckets)) {
		struct dirty_bucket *b = container_of(dev->buckets.next, struct dirty_bucket, link);
		if (b->start > older_than || b->seq > upto_seq)
			break;
		if (moved == QUEUE_IO_BUCKETS) {
			more = true;
			break;
		}
		list_move_tail(&b->link, &dev->io_buckets);
		dev->nr_b_io += b->n;
		dev->nr_b_dirty -= b->n;
		dev->nr_buckets--;
		moved++;
	}
	list_splice_tail_init(&dev->b_more_io, &dev->b_io);
	dev->nr_b_io += dev->nr_b_more_io;
	dev->nr_b_more_io = 0;
	return more;
}

bool dirty_io_empty_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	return list_empty(&dev->io_buckets) && list_empty(&dev->b_io);
}

struct inode *dirty_take_next_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	struct list_head *from = &dev->b_io;
	struct dirty_bucket *b = NULL;
	if (!list_empty(&dev->io_buckets)) {
		b = container_of(dev->io_buckets.next, struct dirty_bucket, link);
		from = &b->inodes;
	} else if (list_empty(&dev->b_io)) {
		return NULL;
	}
	struct inode *ino = container_of(from->next, struct inode, wb_list);
	list_del_init(&ino->wb_list);
	if (b && !--b->n) {
		assert(list_empty(&b->inodes));
		list_del_init(&b->link);
		b->next_free = dev->bucket_pool;
		dev->bucket_pool = b;
	}
	dev->nr_b_io--;
	ino->state = (ino->state & ~I_DIRTY) | I_SYNC;
	atomic_store_explicit(&ino->dirty_hint, false, memory_order_release);
	return ino;
}

/*
 * Put an inode back after the flusher wrote it.  @still_dirty: pages (or
 * the backend size) remain dirty; @slice_used: it stopped because its
 * slice ran out, so it goes to b_more_io and keeps its age.
 */
void dirty_requeue(struct inode *ino, bool still_dirty, bool slice_used)
{
	struct wbc_dev *dev = ino->dev;
	bool put = false;
	dev_list_lock(dev);
	assert(ino->state & I_SYNC);
	ino->state &= ~I_SYNC;
	if (still_dirty || (ino->state & I_DIRTY)) {
		if (!(ino->state & I_DIRTY)) {
			ino->state |= I_DIRTY;
			atomic_store_explicit(&ino->dirty_hint, true, memory_order_release);
		}
		if (slice_used) {
			list_add_tail(&ino->wb_list, &dev->b_more_io);
			dev->nr_b_more_io++;
		} else {
			dirty_add_locked(dev, ino, ino->dirtied_when);
		}
	} else {
		put = true;
	}
	dev_list_unlock(dev);
	if (put)
		iput(ino);
}
