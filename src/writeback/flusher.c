/*
 * The flusher (layer writeback): one thread per device, and its passes over
 * the device's dirty files.
 *
 * DESIGN.  Each device owns one flusher thread.  It sleeps on work_cond and
 * takes work in this order on every wakeup:
 *   1. sync work (wbc_dev_sync, cache close): queued items, FIFO;
 *   2. start-all (the page allocator ran out of clean pages);
 *   3. periodic expiry (kupdate): every dirty_writeback interval, the files
 *      dirtied more than dirty_expire ago;
 *   4. background: while the cache's (or a group's) dirty pages exceed
 *      bg_thresh; or, kicked by a writer that the throttle holds back,
 *      the pages this device has dirty now.
 * A non-sync pass stops as soon as sync work is queued, so sync never waits
 * behind a long background pass.  fsync does its own writeback in the
 * calling thread with the same write_inode_pages(); the two never submit the
 * same page, because a page leaves DIRTY and enters WRITEBACK under the
 * inode lock.
 */
#include "writeback/writeback.h"

#include <limits.h>

/* A background pass that found nothing it could write (pages locked by
 * writers, file being resized) retries after this long. */
#define BACKGROUND_RETRY_NS (10ull * 1000 * 1000)
/* How often a flusher looks at the background threshold by itself (at
 * most: a periodic pass due sooner comes first): writers' checks
 * wake it when they take the cache over, but two writers that each
 * checked just under it can together cross it, each short of its next
 * check (the kernel has the same gap). */
#define BG_CHECK_NS (1000ull * 1000 * 1000)
#define NS_PER_CENTISEC (10ull * 1000 * 1000)

/* ------------------------------------------------------------------ */
/* passes over the device's dirty files                                 */

/* Sync work or a stop is waiting: a non-sync pass yields.  A hint read
 * without the lock: a pass that misses it yields one file later. */
static bool work_pending(struct wbc_dev *dev)
{
	return atomic_load_explicit(&dev->work_hint, memory_order_relaxed);
}

static void work_hint_update_locked(struct wbc_dev *dev)
{
	assert_held(&dev->work_lock);
	atomic_store_explicit(&dev->work_hint, dev->stop || !list_empty(&dev->work_list),
			      memory_order_relaxed);
}

/* Files put back per hold of the list lock; the clock is read once per
 * batch.  A pass files the inbox every DRAIN_EVERY files. */
#define WB_BATCH 16
#define DRAIN_EVERY 4096
#define BG_CHECK_PAGES 256

/* @ino, taken by a pass, was listed only to have the backend's copy
 * trimmed to its size (mark_inode_trim): trimmed now, unless a write of it
 * is still in flight (its completion lists it again) or a resize is under
 * way.  Returns whether it has dirty pages: written to since, it is put
 * back as dirtied now (in b_dirty's newest bucket), not written early. */
static bool trim_taken(struct inode *ino)
{
	pthread_mutex_lock(&ino->lock);
	bool dirty = ino->nr_dirty > 0;
	bool trim = !dirty && !ino->nr_writeback && !ino->sizing &&
		    ino->backend_size != ino->i_size;
	pthread_mutex_unlock(&ino->lock);
	if (trim)
		inode_sync_size(ino);   /* the kernel's write_inode: metadata */
	return dirty;
}

/* A pass put @ino back untouched: true when it is the first such file
 * come round again (the pass has seen every file it can take; compared
 * as a number, the first may be gone by now), else remember the first. */
static bool came_round(uintptr_t *first, struct inode *ino)
{
	if ((uintptr_t)ino == *first)
		return true;
	if (!*first)
		*first = (uintptr_t)ino;
	return false;
}

/*
 * Background, periodic and start-all writeback (WB_SYNC_NONE).
 * Returns the pages submitted.  Files come a queued bucket at a time and
 * go back in batches of WB_BATCH; the files of a bucket not reached (the
 * pass ended) go back to the head of b_io in their order.
 */
static long wb_writeback(struct wbc_dev *dev, enum wb_reason reason, long nr_pages)
{
	struct wbc_cache *c = dev->cache;
	uint64_t expire = c->cfg.dirty_expire_centisecs * NS_PER_CENTISEC;
	uint64_t now = wbc_now_ns();
	uint64_t older_than = now;
	if (reason == WB_REASON_PERIODIC)
		older_than = now > expire ? now - expire : 0;
	struct dirty_batch batch;
	struct dirty_put put;
	dirty_batch_init(&batch);
	dirty_put_init(&put);
	struct bio_plug plug = { .n = 0, .bytes = 0 };
	long total = 0, skipped = 0, slice = c->wb_ops->slice_pages(dev);
	uintptr_t first_put_back = 0;
	atomic_fetch_add_explicit(&dev->wb_passes, 1, memory_order_relaxed);
	unsigned long files = 0;
	/* Background: pages this pass may write before it looks at the
	 * threshold again.  Summing the per-CPU counters for every file
	 * would read lines the writers are writing; a quarter of the excess,
	 * at most BG_CHECK_PAGES, overshoots the threshold by little. */
	long bg_budget = 0;
	while (nr_pages > 0) {
		if (reason == WB_REASON_BACKGROUND && bg_budget <= 0) {
			long over = c->wb_ops->over_bg_pages(c);
			if (over <= 0)
				break;
			bg_budget = WBC_MIN(WBC_MAX(over / 4, 1), BG_CHECK_PAGES);
		}
		if (work_pending(dev))
			break;
		struct inode *ino = dirty_next(dev, &batch);
		if (!ino) {
			/* a pass that comes back to the same files (ones it
			 * cannot write now) must not sit on their bios */
			plug_flush(dev, &plug);
			dirty_put_commit(dev, &put);
			dirty_drain(dev);
			/* background and periodic passes queue what is due
			 * now, as the kernel's wb_writeback: a pass that a
			 * streaming file keeps going (its pages go round on
			 * b_more_io) still takes the files dirtied after it
			 * began, and the periodic pass it holds off is not
			 * needed for them */
			if (reason == WB_REASON_BACKGROUND || reason == WB_REASON_PERIODIC) {
				now = wbc_now_ns();
				older_than = reason == WB_REASON_BACKGROUND ? now :
					     now > expire ? now - expire : 0;
			}
			if (!dirty_take(dev, &batch, older_than, UINT64_MAX, NULL))
				break;
			slice = c->wb_ops->slice_pages(dev);
			continue;
		}
		if (batch.trim) {
			dirty_put(dev, &put, ino, trim_taken(ino), false);
			if (put.n_redirty + put.n_more_io >= WB_BATCH)
				dirty_put_commit(dev, &put);
			continue;
		}
		struct wbc_ctl ctl = {
			.plug = &plug,
			.sync_mode = WB_SYNC_NONE,
			.nr_to_write = WBC_MIN(slice, nr_pages),
			.range_start = 0,
			.range_end = UINT64_MAX,
			.range_cyclic = true,
			.backoff = true,
		};
		long n = write_inode_pages(ino, &ctl);
		/* Bios wait in the plug only while files keep adding to it:
		 * someone may wait for them (truncate, fsync, a writer). */
		if (!n)
			plug_flush(dev, &plug);
		if (ctl.backed_off) {
			/* with b_more_io, its age kept: a later pass (the next
			 * periodic one, too) writes it once the backoff is over
			 * (filed with the newest files, it waited until it was
			 * dirty_expire old again) */
			dirty_put(dev, &put, ino, true, true);
			atomic_fetch_add_explicit(&dev->wb_backoff_skips, 1, memory_order_relaxed);
			/* the first file put back untouched came round again:
			 * every file left waits (for its retry here), another
			 * turn writes nothing (compared as a number: it may be
			 * gone by now) */
			if (came_round(&first_put_back, ino) || ++skipped > 1000)
				break;
			continue;
		}
		if (ctl.size_dirty)
			inode_sync_size(ino);   /* the kernel's write_inode: metadata */
		dirty_put(dev, &put, ino, ctl.still_dirty, ctl.nr_to_write <= 0);
		if (put.n_redirty + put.n_more_io >= WB_BATCH)
			dirty_put_commit(dev, &put);
		/* dirty and nothing written: its size is being set (truncate,
		 * fsync), its pages are busy; the pass comes back to it at
		 * once (it went round such a file as long as a resize took) */
		if (!n && ctl.still_dirty && came_round(&first_put_back, ino))
			break;
		/* progress: the files put back untouched come round again
		 * behind it (a failed file waits on b_more_io, which every
		 * turn takes, beside one that needs many slices: the pass
		 * ended after a slice or two of that one) */
		if (n > 0)
			first_put_back = 0;
		nr_pages -= n;
		total += n;
		bg_budget -= WBC_MAX(n, 1);
		if (++files % WB_BATCH == 0)
			c->wb_ops->bandwidth_update(dev, wbc_now_ns());
		/* file what writers dirtied meanwhile while it is still warm
		 * in the caches */
		if (files % DRAIN_EVERY == 0)
			dirty_drain(dev);
	}
	plug_flush(dev, &plug);
	dirty_untake(dev, &batch);
	dirty_put_commit(dev, &put);
	c->wb_ops->bandwidth_update(dev, wbc_now_ns());
	return total;
}

/*
 * Visit every file listed on @dev now: the inbox filed, b_io, b_more_io
 * and the buckets up to the newest, which is sealed, so files dirtied or
 * put back meanwhile land in later buckets and wait for the next walk (no
 * livelock).  Each is taken off the lists for @visit, which returns
 * where it goes: clean (dropped), still dirty (put back), or to be
 * retried after a failed write (put back with b_more_io, which the next
 * pass takes, its age kept).
 */
enum walk_put { WALK_CLEAN, WALK_DIRTY, WALK_RETRY };
static void walk_listed(struct wbc_dev *dev, enum walk_put (*visit)(struct inode *ino, void *arg),
			void *arg)
{
	bool more = true;
	struct dirty_batch batch;
	struct dirty_put put;
	dirty_batch_init(&batch);
	dirty_put_init(&put);
	dirty_drain(dev);
	dev_list_lock(dev);
	uint64_t upto = dirty_seal_locked(dev);
	dev_list_unlock(dev);
	for (;;) {
		struct inode *ino = dirty_next(dev, &batch);
		if (!ino) {
			dirty_put_commit(dev, &put);
			if (!dirty_take(dev, &batch, UINT64_MAX, upto, &more))
				break;
			dev->cache->wb_ops->bandwidth_update(dev, wbc_now_ns());
			continue;
		}
		enum walk_put to = visit(ino, arg);
		dirty_put(dev, &put, ino, to != WALK_CLEAN, to == WALK_RETRY);
		if (put.n_redirty + put.n_more_io >= WB_BATCH)
			dirty_put_commit(dev, &put);
	}
}

/*
 * After a sync: the sync's own completions put files back on the lists to
 * have their size set, which the sync then did.  Drop every listed file
 * that has nothing left to write, as a pass of the flusher would; without
 * it such a file (and its backing descriptor) stays until the next
 * periodic pass, which dirty_writeback_centisecs=0 turns off.  A file
 * with pages at risk (the sync's write failed) stays with b_more_io, to
 * be retried after its backoff.
 */
static enum walk_put prune_visit(struct inode *ino, void *unused)
{
	(void)unused;
	pthread_mutex_lock(&ino->lock);
	bool still = ino->nr_dirty || ino->nr_writeback || ino->backend_size != ino->i_size;
	bool retry = ino->nr_dirty && ino->nr_at_risk;
	pthread_mutex_unlock(&ino->lock);
	return retry ? WALK_RETRY : still ? WALK_DIRTY : WALK_CLEAN;
}

/* A sync's files: written, remembered to wait for and to set sizes. */
struct sync_walk {
	struct inode **touched;
	size_t nr, cap;
	int err;
};

static enum walk_put sync_visit(struct inode *ino, void *arg)
{
	struct sync_walk *w = arg;
	enum walk_put still_dirty = write_inode_all(ino) ? WALK_DIRTY : WALK_CLEAN;
	if (w->nr == w->cap) {
		size_t ncap = w->cap ? w->cap * 2 : 64;
		struct inode **t = realloc(w->touched, ncap * sizeof(*t));
		if (!t) {
			/* cannot remember it: wait for it now */
			wait_on_writeback_range(ino, 0, UINT64_MAX);
			int e = inode_sync_size(ino);
			if (e && !w->err)
				w->err = e;
			return still_dirty;
		}
		w->touched = t;
		w->cap = ncap;
	}
	igrab(ino);
	w->touched[w->nr++] = ino;
	return still_dirty;
}

/* Sync work: write every dirty file of the device once, wait, flush. */
static int wb_sync(struct wbc_dev *dev)
{
	struct sync_walk w = { 0 };

	/* I/O started before the sync (by background passes, on files that
	 * are now off the lists) must be complete before sync returns. */
	dev_drain(dev);
	/* a file a writer made dirty before the sync began, not yet in the
	 * inbox, is not found by the walk: wait for its filing.  A second
	 * writer of it found it dirty and returned; its write must be in
	 * this sync (mark_inode_dirty) */
	dirty_wait_marks(dev);
	walk_listed(dev, sync_visit, &w);
	struct inode **touched = w.touched;
	size_t nr = w.nr;
	int err = w.err;
	dev_drain(dev);
	for (size_t i = 0; i < nr; i++) {
		int e = inode_sync_size(touched[i]);
		if (e && !err)
			err = e;
	}
	/* a failed flush may have lost completed writes of any file written
	 * since the last good one (a stacked device's lower device failed
	 * to write them): their error, as wbc_fsync_range makes it its
	 * file's, and the device's (taken below) */
	/* writes that complete from here on may miss this flush: they
	 * count in the next generation */
	uint64_t gen = atomic_fetch_add(&dev->flush_gen, 1);
	int e = backend_flush(dev->be, NULL, false);
	if (e) {
		atomic_fetch_add(&dev->cache->st_flush_errors, 1);
		dev_record_error_files(dev, e, dev->flush_good);
	} else
		dev->flush_good = gen + 1;
	/* the files this sync wrote are let go only now: one whose last
	 * reference this is (written, closed) is still in the name table
	 * when a failed flush is made its error above, and its teardown
	 * keeps the error by name for the next opener (fs/inode.c) */
	for (size_t i = 0; i < nr; i++)
		iput(touched[i]);
	free(touched);
	walk_listed(dev, prune_visit, NULL);
	pthread_mutex_lock(&dev->err_lock);
	bool no = false;   /* wbc_dev_sync: the errors since its last call */
	e = errseq_check_advance(&dev->wb_err, &dev->sync_err_since, &no);
	pthread_mutex_unlock(&dev->err_lock);
	if (e && !err)
		err = e;
	return err;
}

/* ------------------------------------------------------------------ */
/* the thread                                                           */

/* The throttle layer's over_bg_thresh, through the hook set at open. */
static bool wb_over_bg_thresh(struct wbc_cache *c)
{
	return c->wb_ops->over_bg_pages(c) > 0;
}

static void *flusher_main(void *arg)
{
	pthread_setname_np(pthread_self(), "wbc-flush");
	struct wbc_dev *dev = arg;
	struct wbc_cache *c = dev->cache;
	uint64_t interval = c->cfg.dirty_writeback_centisecs * NS_PER_CENTISEC;
	uint64_t next_periodic = wbc_now_ns() + interval;
	uint64_t retry_at = 0;
	bool kick_pending = false;

	pthread_mutex_lock(&dev->work_lock);
	/* a sync queued before the stop is served: its caller waits for it */
	while (!dev->stop || !list_empty(&dev->work_list)) {
		atomic_fetch_add_explicit(&dev->flusher_turns, 1, memory_order_relaxed);
		if (!list_empty(&dev->work_list)) {
			struct wb_work *w = container_of(dev->work_list.next, struct wb_work, list);
			list_del_init(&w->list);
			work_hint_update_locked(dev);
			pthread_mutex_unlock(&dev->work_lock);
			int err = wb_sync(dev);
			pthread_mutex_lock(&dev->work_lock);
			w->err = err;
			w->done = true;
			pthread_cond_broadcast(&dev->done_cond);
			continue;
		}
		if (dev->start_all) {
			dev->start_all = false;
			pthread_mutex_unlock(&dev->work_lock);
			long n = ctr_dirty(&dev->ctr);
			wb_writeback(dev, WB_REASON_START_ALL, WBC_MAX(n, 1));
			pthread_mutex_lock(&dev->work_lock);
			continue;
		}
		uint64_t now = wbc_now_ns();
		if (interval && now >= next_periodic) {
			next_periodic = now + interval;
			pthread_mutex_unlock(&dev->work_lock);
			/* files listed without dirty pages (a size to trim
			 * after writeback) expire too */
			long n = ctr_dirty(&dev->ctr);
			if (n > 0 || dirty_listed(dev))
				wb_writeback(dev, WB_REASON_PERIODIC, WBC_MAX(n, 1));
			names_trim(dev);
			c->wb_ops->bandwidth_update(dev, wbc_now_ns());
			pthread_mutex_lock(&dev->work_lock);
			continue;
		}
		/* A pass that wrote nothing (every file waits for its retry
		 * after errors, or is busy) is not repeated before retry_at,
		 * kicks or not: a dead device beside live ones is kicked by
		 * every throttled writer.  A kick that comes meanwhile is
		 * served then. */
		bool kicked = dev->kicked || kick_pending;
		dev->kicked = false;
		kick_pending = false;
		long ndirty = ctr_dirty(&dev->ctr);
		if (ndirty <= 0)
			retry_at = 0;   /* nothing left to retry */
		bool due = !retry_at || now >= retry_at;
		bool over = ndirty > 0 && wb_over_bg_thresh(c);
		if (over && due) {
			pthread_mutex_unlock(&dev->work_lock);
			long n = wb_writeback(dev, WB_REASON_BACKGROUND, LONG_MAX);
			retry_at = n ? 0 : wbc_now_ns() + BACKGROUND_RETRY_NS;
			pthread_mutex_lock(&dev->work_lock);
			if (n)
				continue;
		} else if (kicked && ndirty > 0 && due) {
			/* a writer to this device is throttled while the cache
			 * is under bg_thresh (the other pages are some other
			 * device's, in writeback): write what this device has */
			pthread_mutex_unlock(&dev->work_lock);
			long n = wb_writeback(dev, WB_REASON_START_ALL, ndirty);
			retry_at = n ? 0 : wbc_now_ns() + BACKGROUND_RETRY_NS;
			pthread_mutex_lock(&dev->work_lock);
			continue;
		} else if (kicked && ndirty > 0) {
			kick_pending = true;
		}
		if (dev->kicked || !list_empty(&dev->work_list) || dev->start_all || dev->stop)
			continue;
		/* Wait for the next thing due: the periodic pass, a retry
		 * (only while this device has dirty pages that one could
		 * write), or a kick.  What is due already is done at the top
		 * of the loop, and each of those moves its own time on: the
		 * loop never turns without waiting or working (it once spun
		 * under work_lock on a retry time left in the past while
		 * another device's pages kept the cache over the threshold). */
		now = wbc_now_ns();
		/* the background check armed whatever ndirty was: a flusher
		 * that slept on a clean device is not woken by the writers
		 * that then dirty it just under the threshold, and cross it */
		uint64_t wake = WBC_MIN(interval ? next_periodic : UINT64_MAX, now + BG_CHECK_NS);
		if (retry_at && (kick_pending || wb_over_bg_thresh(c)))
			wake = WBC_MIN(wake, retry_at);
		if (wake <= now)
			continue;
		if (wake == UINT64_MAX)
			pthread_cond_wait(&dev->work_cond, &dev->work_lock);
		else
			wbc_cond_timedwait_ns(&dev->work_cond, &dev->work_lock, wake - now);
	}
	pthread_mutex_unlock(&dev->work_lock);
	return NULL;
}

int flusher_start(struct wbc_dev *dev)
{
	int err = pthread_create(&dev->thread, NULL, flusher_main, dev);
	if (err)
		return -err;
	dev->thread_started = true;
	return 0;
}

void flusher_stop(struct wbc_dev *dev)
{
	if (!dev->thread_started)
		return;
	pthread_mutex_lock(&dev->work_lock);
	dev->stop = true;
	work_hint_update_locked(dev);
	pthread_cond_signal(&dev->work_cond);
	pthread_mutex_unlock(&dev->work_lock);
	pthread_join(dev->thread, NULL);
	dev->thread_started = false;
	dev_drain(dev);
}

void flusher_kick(struct wbc_dev *dev, bool start_all)
{
	pthread_mutex_lock(&dev->work_lock);
	bool was = start_all ? dev->start_all : dev->kicked;
	if (start_all)
		dev->start_all = true;
	else
		dev->kicked = true;
	if (!was)
		pthread_cond_signal(&dev->work_cond);
	pthread_mutex_unlock(&dev->work_lock);
}

void wakeup_flusher_threads(struct wbc_cache *c, bool start_all)
{
	/* a dead device's pages wait for their retries (its flusher keeps
	 * their time): a kick from the writers of the others would only
	 * send it round them again */
	uint64_t now = start_all ? 0 : wbc_now_ns();
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next)
		if (ctr_dirty(&d->ctr) > 0 && (start_all || !dev_dead_error(d, now)))
			flusher_kick(d, start_all);
	pthread_mutex_unlock(&c->dev_lock);
}

int flusher_queue_sync(struct wbc_dev *dev)
{
	struct wb_work w = { .done = false };
	list_init(&w.list);
	pthread_mutex_lock(&dev->work_lock);
	if (dev->stop) {
		pthread_mutex_unlock(&dev->work_lock);
		return -ESHUTDOWN;
	}
	list_add_tail(&w.list, &dev->work_list);
	work_hint_update_locked(dev);
	pthread_cond_signal(&dev->work_cond);
	while (!w.done)
		pthread_cond_wait(&dev->done_cond, &dev->work_lock);
	pthread_mutex_unlock(&dev->work_lock);
	return w.err;
}
