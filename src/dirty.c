/*
 * Dirty-file tracking per device, the kernel's b_dirty / b_io / b_more_io:
 *
 *   mark_inode_dirty()          queue_io()                 flusher
 *        |                          |                        |
 *        v        dirtied <= T      v                        v
 *    b_dirty  ----------------->  b_io  ---- take head ---> (I_SYNC, off
 *   (oldest first)           ^      ^                         the lists)
 *        ^                   |      | splice                   |
 *        | still dirty,      |  b_more_io <--- used its slice -+
 *        +-- slice not used -+-------------------------------- +
 *                                                      clean: dropped, iput
 *
 * An inode is in the writeback system while I_DIRTY (on one list) or I_SYNC
 * (held by a flusher); it owns one reference then.  dirtied_when is the time
 * the inode went from clean to dirty and only moves forward when the inode
 * is put back at the tail of b_dirty (to keep the list ordered).
 * All of this is under dev->list_lock.
 */
#include "internal.h"

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

void mark_inode_dirty(struct inode *ino)
{
	/* Fast path: already queued.  A stale true here is harmless: the
	 * flusher clears the hint before it looks at the page tags, and the
	 * caller tagged its page before calling (see flusher.c). */
	if (atomic_load_explicit(&ino->dirty_hint, memory_order_acquire))
		return;
	struct wbc_dev *dev = ino->dev;
	dev_list_lock(dev);
	if (!(ino->state & I_DIRTY)) {
		atomic_store_explicit(&ino->dirty_hint, true, memory_order_release);
		/* Under I_SYNC the flusher requeues it and keeps its age: an
		 * older dirtied_when only makes expiry earlier, never later. */
		if (!(ino->state & I_SYNC)) {
			ino->dirtied_when = wbc_now_ns();
			list_add_tail(&ino->wb_list, &dev->b_dirty);
			/* the lists' reference, taken before a flusher can
			 * see the inode (and drop it) */
			igrab(ino);
		}
		ino->state |= I_DIRTY;
	}
	dev_list_unlock(dev);
}

void queue_io_locked(struct wbc_dev *dev, uint64_t older_than)
{
	assert_held(&dev->list_lock);
	while (!list_empty(&dev->b_dirty)) {
		struct inode *ino = container_of(dev->b_dirty.next, struct inode, wb_list);
		if (ino->dirtied_when > older_than)
			break;
		list_move_tail(&ino->wb_list, &dev->b_io);
	}
	list_splice_tail_init(&dev->b_more_io, &dev->b_io);
}

struct inode *dirty_take_next_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	if (list_empty(&dev->b_io))
		return NULL;
	struct inode *ino = container_of(dev->b_io.next, struct inode, wb_list);
	list_del_init(&ino->wb_list);
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
		} else {
			if (!list_empty(&dev->b_dirty)) {
				struct inode *tail = container_of(dev->b_dirty.prev,
								  struct inode, wb_list);
				if (tail->dirtied_when > ino->dirtied_when)
					ino->dirtied_when = tail->dirtied_when;
			}
			list_add_tail(&ino->wb_list, &dev->b_dirty);
		}
	} else {
		put = true;
	}
	dev_list_unlock(dev);
	if (put)
		iput(ino);
}
