/*
 * The flusher: one thread per device, and the writeback of one file.
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
 *
 * Writing one file (write_inode_pages, the kernel's write_cache_pages):
 * find the next page with tag T (DIRTY, or TOWRITE for sync) at or after
 * the resume point, take it and its contiguous tagged neighbours up to the
 * backend's max I/O, move them DIRTY -> WRITEBACK under the inode lock,
 * drop the lock, submit one vectored I/O.  At most qd I/Os are in flight
 * per device (a pool of qd bios).  Sync first tags every DIRTY page in range
 * TOWRITE, and then writes only TOWRITE pages: pages dirtied after the tag
 * walk wait for the next sync, so a busy writer cannot livelock fsync.
 *
 * Page states (inode->lock):
 *
 *   clean --write--> DIRTY --write_inode_pages--> WRITEBACK --end_io--> clean
 *                      ^ (writers wait for WRITEBACK to end: stable pages)
 */
#include "internal.h"

#include <limits.h>

/* A background pass that found nothing it could write (pages locked by
 * writers, file being resized) retries after this long. */
#define BACKGROUND_RETRY_NS (10ull * 1000 * 1000)
/* Background retries of a file whose writeback failed (retry policy). */
#define RETRY_MIN_NS (100ull * 1000 * 1000)
#define RETRY_MAX_NS (5000ull * 1000 * 1000)
#define NS_PER_CENTISEC (10ull * 1000 * 1000)

/* ------------------------------------------------------------------ */
/* bio pool                                                             */

int dev_io_init(struct wbc_dev *dev)
{
	struct backend *be = dev->be;
	size_t ps = dev->cache->page_size;
	unsigned maxp = (unsigned)WBC_MAX(be->max_io / ps, 1);
	unsigned qd = WBC_MAX(be->qd, 1u);
	dev->bio_pool = calloc(qd, sizeof(*dev->bio_pool));
	dev->iov_pool = calloc((size_t)qd * maxp, sizeof(*dev->iov_pool));
	dev->page_pool = calloc((size_t)qd * maxp, sizeof(*dev->page_pool));
	if (!dev->bio_pool || !dev->iov_pool || !dev->page_pool)
		return -ENOMEM;
	dev->nr_bios = qd;
	dev->bio_wake_batch = WBC_MAX(qd / 4, 1u);
	for (unsigned i = 0; i < qd; i++) {
		struct wbc_bio *b = &dev->bio_pool[i];
		b->iov = &dev->iov_pool[(size_t)i * maxp];
		b->pages = &dev->page_pool[(size_t)i * maxp];
		b->next_free = dev->bio_free;
		dev->bio_free = b;
		if (!b->next_free)
			dev->bio_free_tail = &b->next_free;
	}
	wbc_mutex_init(&dev->io_lock);
	wbc_cond_init(&dev->io_cond);
	return 0;
}

void dev_io_destroy(struct wbc_dev *dev)
{
	free(dev->bio_pool);
	free(dev->iov_pool);
	free(dev->page_pool);
}

static unsigned bio_max_pages(struct wbc_dev *dev)
{
	return (unsigned)WBC_MAX(dev->be->max_io >> dev->cache->page_shift, 1);
}

static void plug_flush(struct wbc_dev *dev, struct bio_plug *p);

/* The next bio to be taken was last written by the completion thread:
 * start moving its lines (the bio, its iovec and page slots, found by
 * its index without a load) while the caller fills this one. */
static void bio_prefetch_free(struct wbc_dev *dev, struct wbc_bio *b)
{
	if (!b)
		return;
	size_t i = (size_t)(b - dev->bio_pool), maxp = bio_max_pages(dev);
	__builtin_prefetch(b, 1);
	__builtin_prefetch((char *)b + 64, 1);
	__builtin_prefetch(&dev->iov_pool[i * maxp], 1);
	__builtin_prefetch(&dev->page_pool[i * maxp], 1);
}

/* A free bio; waits for one (after submitting what @plug holds back, so
 * that the wait can end). */
static struct wbc_bio *bio_get(struct wbc_dev *dev, struct bio_plug *plug)
{
	pthread_mutex_lock(&dev->io_lock);
	if (!dev->bio_free && plug && plug->n) {
		pthread_mutex_unlock(&dev->io_lock);
		plug_flush(dev, plug);
		pthread_mutex_lock(&dev->io_lock);
	}
	while (!dev->bio_free) {
		dev->io_waiters++;
		pthread_cond_wait(&dev->io_cond, &dev->io_lock);
		dev->io_waiters--;
	}
	struct wbc_bio *b = dev->bio_free;
	if (!(dev->bio_free = b->next_free))
		dev->bio_free_tail = &dev->bio_free;
	if (!dev->inflight++)
		dev->busy_since = wbc_now_ns();
	bio_prefetch_free(dev, dev->bio_free);
	pthread_mutex_unlock(&dev->io_lock);
	b->iovcnt = 0;
	b->nr_pages = 0;
	b->len = 0;
	return b;
}

/* Return the chain @b .. @last (@n bios, linked by next_free) to the pool. */
static void bio_put_chain(struct wbc_dev *dev, struct wbc_bio *b, struct wbc_bio *last, unsigned n)
{
	pthread_mutex_lock(&dev->io_lock);
	/* at the tail: the head, taken next, stays put, so bio_get can
	 * start the next one's lines moving ahead of use */
	last->next_free = NULL;
	*dev->bio_free_tail = b;
	dev->bio_free_tail = &last->next_free;
	assert(dev->inflight >= n);
	dev->inflight -= n;
	if (!dev->inflight)
		dev->busy_ns += wbc_now_ns() - dev->busy_since;
	/* Wake waiters in batches, not per bio: a writer that ran out of bios
	 * resumes once a quarter of the pool is free (the kernel's sbitmap
	 * wake batch), a drain when nothing is in flight.  Every bio in use
	 * is in flight or about to be, so the batch always fills. */
	if (dev->io_waiters && (dev->nr_bios - dev->inflight >= dev->bio_wake_batch ||
				!dev->inflight))
		pthread_cond_broadcast(&dev->io_cond);
	pthread_mutex_unlock(&dev->io_lock);
}

static void bio_put(struct wbc_dev *dev, struct wbc_bio *b)
{
	bio_put_chain(dev, b, b, 1);
}

/* Wait until no bio of the device is in flight. */
static void dev_drain(struct wbc_dev *dev)
{
	pthread_mutex_lock(&dev->io_lock);
	while (dev->inflight) {
		dev->io_waiters++;
		pthread_cond_wait(&dev->io_cond, &dev->io_lock);
		dev->io_waiters--;
	}
	pthread_mutex_unlock(&dev->io_lock);
}

/*
 * How long the device has failed (the retry policy's bound).  A failed
 * write starts the clock unless it runs; a write that succeeds stops it.
 * Waiters compare with retry_timeout (dev_dead_error): a store that
 * failed every write for that long makes callers that wait for it fail
 * with its error, while its pages stay dirty, at risk and retried in the
 * background; the first write that succeeds ends it.
 *
 *   write:   ok  ok  FAIL  FAIL ... FAIL  FAIL   ok
 *   clock:   -   -   t0 ----------------------->  -
 *   waiters: wait ......... (t0 + retry_timeout) fail ... | wait again
 */
static void dev_write_failed(struct wbc_dev *dev, int err, uint64_t now)
{
	atomic_store_explicit(&dev->last_err, err, memory_order_relaxed);
	unsigned long long none = 0;
	atomic_compare_exchange_strong(&dev->fail_since, &none, now ? now : 1);
}

static void dev_write_ok(struct wbc_dev *dev)
{
	/* a load first: a healthy device's line stays shared */
	if (atomic_load_explicit(&dev->fail_since, memory_order_relaxed))
		atomic_store(&dev->fail_since, 0);
}

int dev_dead_error(struct wbc_dev *dev, uint64_t now)
{
	if (dev->on_error != WBC_ON_ERROR_RETRY)
		return 0;   /* drop: failed pages are cleaned, nothing waits */
	uint64_t since = atomic_load(&dev->fail_since);
	/* with no page at risk the clock says nothing of the writes to come
	 * (the failed pages were truncated away): they get their try */
	if (!since || atomic_load(&dev->at_risk_pages) <= 0 || now < since ||
	    now - since < dev->retry_timeout_ns)
		return 0;
	int err = atomic_load_explicit(&dev->last_err, memory_order_relaxed);
	return err ? err : -EIO;
}

int cache_dead_error(struct wbc_cache *c, uint64_t now)
{
	int err = 0;
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next) {
		if (ctr_unclean(&d->ctr) <= 0)
			continue;
		int e = dev_dead_error(d, now);
		if (!e) {
			err = 0;   /* a live device will free pages */
			break;
		}
		if (!err)
			err = e;
	}
	pthread_mutex_unlock(&c->dev_lock);
	return err;
}

/* ------------------------------------------------------------------ */
/* writeback completion                                                 */

/*
 * Completions of one batch (bio_end_batch_begin .. _end), in one thread:
 * what every completion would do to shared cache lines (the statistics,
 * the dirty counters, the bio pool's lock, the page waiters' check) is
 * summed here and done once.  Sums are per device and group: a bio of
 * another settles what was summed first.  A completion that wakes a
 * waiter on its file settles the sums before the wakeup, so whoever
 * waited (fsync) finds the counters up to date, as without a batch.
 */
struct end_batch {
	bool open;
	unsigned depth;                /* nested begins (a batch's short write resubmitted
					* to a backend that completes inline) */
	struct wbc_dev *dev;
	struct wbc_group *group;
	uint64_t bytes, ios;
	long cleaned;
	struct wbc_bio *bios, *last;   /* to put back, linked by next_free */
	unsigned nbios;
};
static _Thread_local struct end_batch eb;

/* Settle the sums (not the bios). */
static void end_batch_settle(void)
{
	if (eb.bytes) {
		struct wbc_cache *c = eb.dev->cache;
		atomic_fetch_add(&c->st_written_back, eb.bytes);
		atomic_fetch_add(&c->st_write_ios, eb.ios);
		atomic_fetch_add(&eb.dev->completed_bytes, eb.bytes);
		eb.bytes = eb.ios = 0;
	}
	if (eb.cleaned) {
		account_domains(eb.dev, eb.group, 0, -eb.cleaned);
		eb.cleaned = 0;
	}
}

/* Settle everything: sums, torn-down files (pages, then the inodes they
 * named: fs's teardown batch, open with this one), bios last (a drained
 * device runs no completion), page waiters. */
static void end_batch_flush(void)
{
	if (!eb.dev)
		return;
	end_batch_settle();
	inode_teardown_flush();
	if (eb.nbios)
		bio_put_chain(eb.dev, eb.bios, eb.last, eb.nbios);
	eb.bios = eb.last = NULL;
	eb.nbios = 0;
	cache_wake_page_waiters(eb.dev->cache);
	eb.dev = NULL;
	eb.group = NULL;
}

/* A backend completing several bios in one thread brackets their end_io
 * calls with these (wbc_io_complete_batch): the counters, the bios'
 * return to the pool and the page waiters' wakeup are done once for the
 * batch. */
static void bio_end_batch_begin(void)
{
	if (!eb.depth++) {
		eb.open = true;
		inode_teardown_begin();
	}
}

static void bio_end_batch_end(void)
{
	assert(eb.open && eb.depth);
	if (--eb.depth)
		return;     /* the outermost batch settles */
	end_batch_flush();
	eb.open = false;
	inode_teardown_end();
}

/* Start summing for @dev and @g (settling sums of another pair first). */
static void end_batch_for(struct wbc_dev *dev, struct wbc_group *g)
{
	if (eb.dev != dev) {
		end_batch_flush();
		eb.dev = dev;
		eb.group = g;
	} else if (eb.group != g) {
		end_batch_settle();
		eb.group = g;
	}
}

static void wb_end_io(struct wbc_bio *bio)
{
	(void)atomic_load_explicit(&bio->handoff, memory_order_acquire);
	struct inode *ino = bio->inode;
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	unsigned n = bio->nr_pages;
	size_t len = bio->len;
	int err = bio->res < 0 ? bio->res : ((size_t)bio->res != len ? -EIO : 0);
	bool size_dirty, retry = err && dev->on_error == WBC_ON_ERROR_RETRY;
	long at_risk_delta = 0;

	if (eb.open)
		end_batch_for(dev, ino->group);
	/* Counters first: whoever waits for these pages (fsync) finds them
	 * up to date when it wakes. */
	if (err) {
		atomic_fetch_add(&c->st_write_errors, 1);
		if (!retry)
			atomic_fetch_add(&c->st_lost, len);
		else
			dev_write_failed(dev, err, wbc_now_ns());
		dev_record_error(dev, err);
	} else {
		dev_write_ok(dev);
		if (eb.open) {
			eb.bytes += len;
			eb.ios++;
		} else {
			atomic_fetch_add(&c->st_written_back, len);
			atomic_fetch_add(&c->st_write_ios, 1);
			atomic_fetch_add(&dev->completed_bytes, len);
		}
	}
	pthread_mutex_lock(&ino->lock);
	for (unsigned i = 0; i < n; i++) {
		struct page *p = bio->pages[i];
		assert(p->inode == ino && (pg_flags(p) & PG_WRITEBACK));
		pg_clear(p, PG_WRITEBACK);
		pm_tag_clear(&ino->map, p->index, PM_TAG_WRITEBACK);
		if (retry) {
			/* Retry policy: dirty again, at risk until written */
			pg_set(p, PG_DIRTY);
			pm_tag_set(&ino->map, p->index, PM_TAG_DIRTY);
			if (!(pg_flags(p) & PG_ERROR)) {
				pg_set(p, PG_ERROR);
				at_risk_delta++;
			}
		} else if (pg_flags(p) & PG_ERROR) {
			/* written at last (or dropped by the drop policy) */
			pg_clear(p, PG_ERROR);
			at_risk_delta--;
		}
	}
	ino->nr_writeback -= n;
	if (retry) {
		ino->nr_dirty += n;
		/* back off: 100 ms doubling to 5 s between background retries */
		ino->retry_backoff_ns = WBC_MIN(WBC_MAX(ino->retry_backoff_ns * 2, RETRY_MIN_NS),
						RETRY_MAX_NS);
		ino->retry_after = wbc_now_ns() + ino->retry_backoff_ns;
	} else if (!err) {
		ino->retry_backoff_ns = 0;
		ino->retry_after = 0;
	}
	if (err)
		errseq_record(&ino->wb_err, err);
	else
		ino->backend_size = WBC_MAX(ino->backend_size, bio->off + len);
	size_dirty = !err && ino->backend_size != ino->i_size;
	/* counters before the wakeup: an fsync that wakes sees them settled */
	if (at_risk_delta) {
		atomic_fetch_add(&c->st_at_risk_pages, at_risk_delta);
		atomic_fetch_add(&dev->at_risk_pages, at_risk_delta);
	}
	if (retry) {
		account_redirtied(ino, n);
	} else if (eb.open) {
		eb.cleaned += n;
	} else {
		account_cleaned(ino, n);
	}
	if (ino->waiters && eb.open)
		end_batch_settle();
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);

	if (!eb.open)
		cache_wake_page_waiters(c);
	if (size_dirty || retry)
		mark_inode_dirty(ino);   /* the flusher fixes the size, or retries */
	iput(ino);
	/* last: a drained device (inflight 0) has no completion still running */
	if (eb.open) {
		bio->next_free = eb.bios;
		eb.bios = bio;
		if (!eb.last)
			eb.last = bio;
		eb.nbios++;
	} else {
		bio_put(dev, bio);
	}
}

/*
 * Start the cache misses that completing @b will take, so that a backend
 * completing a batch has them all in flight at once instead of one after
 * another: stage 0 (the bio itself loaded) the inode, the bio's page
 * list and the backend object; stage 1 (stage 0 done for the batch) the
 * page descriptors.  The flusher wrote these lines on another CPU, and
 * the writer before it: each is a miss.  A hint; harmless for any bio.
 */
static void bio_prefetch(const struct wbc_bio *b, int stage)
{
	if (b->end_io != wb_end_io)
		return;
	if (stage == 0) {
		const char *ino = (const char *)b->inode;
		for (size_t off = 0; off < sizeof(struct inode); off += 64)
			__builtin_prefetch(ino + off, 1);
		__builtin_prefetch(b->pages, 0);
		__builtin_prefetch(b->io.file, 1);
	} else {
		for (unsigned i = 0; i < WBC_MIN(b->nr_pages, 4u); i++)
			__builtin_prefetch(b->pages[i], 1);
		/* the completion may drop the file's last reference */
		inode_prefetch_unhash(b->inode);
	}
}

void wbc_io_complete_batch(struct wbc_io *const *ios, unsigned n)
{
	/* the cache misses of the whole batch in flight at once */
	for (int stage = 0; stage < 2; stage++)
		for (unsigned i = 0; i < n; i++)
			bio_prefetch(container_of(ios[i], struct wbc_bio, io), stage);
	bio_end_batch_begin();
	for (unsigned i = 0; i < n; i++)
		wbc_io_complete(ios[i], ios[i]->res);
	bio_end_batch_end();
}

/* ------------------------------------------------------------------ */
/* writing one inode                                                    */

/* Tag every DIRTY page in [start, end] TOWRITE (the sync snapshot). */
static void tag_pages_locked(struct inode *ino, uint64_t start, uint64_t end)
{
	assert_held(&ino->lock);
	uint64_t idx = start;
	while (idx <= end && pm_next(&ino->map, idx, PM_TAG_DIRTY, &idx) && idx <= end) {
		pm_tag_set(&ino->map, idx, PM_TAG_TOWRITE);
		if (idx == UINT64_MAX)
			break;
		idx++;
	}
}

void wait_on_writeback_range(struct inode *ino, uint64_t start, uint64_t end)
{
	uint64_t idx;
	pthread_mutex_lock(&ino->lock);
	while (pm_next(&ino->map, start, PM_TAG_WRITEBACK, &idx) && idx <= end)
		inode_wait_locked(ino);
	pthread_mutex_unlock(&ino->lock);
}

/* Add page @p to @b, merging with the previous iovec when the two pages
 * are neighbours in the arena. */
static void bio_add_page(struct wbc_cache *c, struct wbc_bio *b, struct page *p)
{
	char *data = page_data(c, p);
	struct iovec *last = b->iovcnt ? &b->iov[b->iovcnt - 1] : NULL;
	if (last && (char *)last->iov_base + last->iov_len == data) {
		last->iov_len += c->page_size;
	} else {
		b->iov[b->iovcnt].iov_base = data;
		b->iov[b->iovcnt].iov_len = c->page_size;
		b->iovcnt++;
	}
	b->pages[b->nr_pages++] = p;
	b->len += c->page_size;
}

/* Count the plug's pages moved dirty -> writeback. */
static void plug_account(struct wbc_dev *dev, struct bio_plug *p)
{
	if (p->acct_pages)
		account_domains(dev, p->acct_group, -p->acct_pages, 0);
	p->acct_pages = 0;
}

static void plug_flush(struct wbc_dev *dev, struct bio_plug *p)
{
	if (!p)
		return;
	plug_account(dev, p);
	if (!p->n)
		return;
	bio_submit(dev->be, p->bios, p->n);
	p->n = 0;
	p->bytes = 0;
}

static void submit_bio_write(struct wbc_dev *dev, struct inode *ino, struct wbc_bio *b,
			     uint64_t first_index, struct bio_plug *plug)
{
	b->io.op = WBC_IO_WRITE;
	b->io.file = ino->obj;
	b->off = first_index << dev->cache->page_shift;
	b->end_io = wb_end_io;
	b->inode = ino;
	igrab(ino);
	if (plug) {
		plug->bios[plug->n++] = b;
		plug->bytes += b->len;
		if (plug->n == PLUG_MAX || plug->bytes >= dev->be->max_io)
			plug_flush(dev, plug);
		return;
	}
	bio_submit(dev->be, &b, 1);
}

/* Under ino->lock: the next page tagged @tag in [*idx, *end], wrapping
 * once to [0, cyc_start) for a cyclic pass. */
static bool next_tagged_locked(struct inode *ino, enum pm_tag tag, uint64_t *idx, uint64_t *end,
			       bool *wrapped, uint64_t cyc_start, uint64_t *first)
{
	assert_held(&ino->lock);
	for (;;) {
		if (pm_next(&ino->map, *idx, tag, first) && *first <= *end)
			return true;
		if (*wrapped)
			return false;
		*wrapped = true;
		*idx = 0;
		*end = cyc_start - 1;
	}
}

/* Under ino->lock, at the end of a pass: the cyclic resume point and what
 * the flusher needs to know to put the file back. */
static void pass_end_locked(struct inode *ino, struct wbc_ctl *ctl, uint64_t idx)
{
	assert_held(&ino->lock);
	if (ctl->range_cyclic)
		ino->writeback_index = idx;
	ctl->still_dirty = ino->nr_dirty > 0;
	ctl->size_dirty = !ctl->still_dirty && !ino->nr_writeback &&
			  ino->backend_size != ino->i_size;
}

/*
 * Write the dirty pages of @ino as @ctl says.  Returns the pages submitted.
 * The caller holds a reference on @ino and no lock.  A file with one run
 * of dirty pages costs one hold of ino->lock: tagging (sync), the backoff
 * check (ctl->backoff), finding and claiming the pages, and the end-of-pass
 * state (ctl->still_dirty, ctl->size_dirty) happen in it.  Background
 * passes take their bio before the lock (the file is on the lists because
 * it has dirty pages); sync passes only once they found a page.
 */
long write_inode_pages(struct inode *ino, struct wbc_ctl *ctl)
{
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	bool sync = ctl->sync_mode == WB_SYNC_ALL;
	enum pm_tag tag = sync ? PM_TAG_TOWRITE : PM_TAG_DIRTY;
	unsigned maxp = bio_max_pages(dev);
	long written = 0;
	struct wbc_bio *b = sync ? NULL : bio_get(dev, ctl->plug);

	ctl->backed_off = false;
	pthread_mutex_lock(&ino->lock);
	if (sync)
		tag_pages_locked(ino, ctl->range_start, ctl->range_end);
	if (ctl->backoff && ino->retry_after && ino->retry_after > wbc_now_ns()) {
		/* failed recently: its turn comes after the backoff */
		ctl->backed_off = true;
		pass_end_locked(ino, ctl, ino->writeback_index);
		pthread_mutex_unlock(&ino->lock);
		if (b)
			bio_put(dev, b);
		return 0;
	}
	uint64_t idx = ctl->range_cyclic ? ino->writeback_index : ctl->range_start;
	uint64_t end = ctl->range_end;
	uint64_t cyc_start = idx;
	bool wrapped = !ctl->range_cyclic || idx == 0;

	for (;;) {
		uint64_t first;
		if (ctl->nr_to_write <= 0 ||
		    !next_tagged_locked(ino, tag, &idx, &end, &wrapped, cyc_start, &first)) {
			/* done, or the whole file was visited (resume at 0) */
			pass_end_locked(ino, ctl, ctl->nr_to_write <= 0 ? idx : 0);
			break;
		}
		if (ino->sizing) {
			/* truncate or a size sync owns the file's I/O now */
			if (!sync) {
				pass_end_locked(ino, ctl, first);
				break;
			}
			inode_wait_locked(ino);
			continue;
		}
		if (!b) {
			/* never wait for a bio under the lock */
			pthread_mutex_unlock(&ino->lock);
			b = bio_get(dev, ctl->plug);
			pthread_mutex_lock(&ino->lock);
			continue;
		}
		uint64_t i = first;
		while (b->nr_pages < maxp && b->iovcnt < IOV_MAX && ctl->nr_to_write > 0 &&
		       i <= end) {
			struct page *p = pm_lookup(&ino->map, i);
			if (!p || !pm_tag_get(&ino->map, i, tag))
				break;
			uint32_t fl = pg_flags(p);
			if (fl & PG_LOCKED) {
				/* a writer is copying into it: sync waits for
				 * it, background passes skip it */
				if (b->nr_pages == 0 && sync)
					page_wait_unlocked(ino, p);
				break;
			}
			assert((fl & PG_DIRTY) && !(fl & PG_WRITEBACK));
			/* DIRTY -> WRITEBACK in one store: with ino->lock held
			 * and PG_LOCKED clear, nothing else changes the flags */
			atomic_store_explicit(&p->flags, (fl & ~PG_DIRTY) | PG_WRITEBACK,
					      memory_order_relaxed);
			pm_tag_clear(&ino->map, i, PM_TAG_DIRTY);
			pm_tag_clear(&ino->map, i, PM_TAG_TOWRITE);
			pm_tag_set(&ino->map, i, PM_TAG_WRITEBACK);
			bio_add_page(c, b, p);
			ctl->nr_to_write--;
			if (i == UINT64_MAX)
				break;
			i++;
		}
		unsigned n = b->nr_pages;
		if (!n) {
			if (sync)
				continue;   /* waited for the locked page: look again */
			/* first page locked by a writer: skip it this pass */
			idx = first + 1;
			continue;
		}
		ino->nr_dirty -= n;
		ino->nr_writeback += n;
		idx = i;
		/* look ahead, so a file written in one I/O costs one hold */
		uint64_t next;
		bool last = ctl->nr_to_write <= 0 ||
			    !next_tagged_locked(ino, tag, &idx, &end, &wrapped, cyc_start, &next);
		if (last)
			pass_end_locked(ino, ctl, ctl->nr_to_write <= 0 ? idx : 0);
		pthread_mutex_unlock(&ino->lock);
		if (ctl->plug) {
			struct bio_plug *p = ctl->plug;
			if (p->acct_pages && p->acct_group != ino->group)
				plug_account(dev, p);
			p->acct_group = ino->group;
			p->acct_pages += n;
		} else {
			account_writeback(ino, n);
		}
		submit_bio_write(dev, ino, b, first, ctl->plug);
		b = NULL;
		written += n;
		if (last) {
			ctl->pages_written += written;
			return written;
		}
		if (!sync)
			b = bio_get(dev, ctl->plug);
		pthread_mutex_lock(&ino->lock);
	}
	pthread_mutex_unlock(&ino->lock);
	if (b)
		bio_put(dev, b);
	ctl->pages_written += written;
	return written;
}

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

/*
 * Background, periodic and start-all writeback (WB_SYNC_NONE).
 * Returns the pages submitted.  Files come a queued bucket at a time and
 * go back in batches of WB_BATCH; the files of a bucket not reached (the
 * pass ended) go back to the head of b_io in their order.
 */
static long wb_writeback(struct wbc_dev *dev, enum wb_reason reason, long nr_pages)
{
	struct wbc_cache *c = dev->cache;
	uint64_t now = wbc_now_ns();
	uint64_t older_than = now;
	if (reason == WB_REASON_PERIODIC) {
		uint64_t expire = c->cfg.dirty_expire_centisecs * NS_PER_CENTISEC;
		older_than = now > expire ? now - expire : 0;
	}
	struct dirty_batch batch;
	struct dirty_put put;
	dirty_batch_init(&batch);
	dirty_put_init(&put);
	struct bio_plug plug = { .n = 0, .bytes = 0 };
	long total = 0, skipped = 0, slice = writeback_slice_pages(dev);
	unsigned long files = 0;
	/* Background: pages this pass may write before it looks at the
	 * threshold again.  Summing the per-CPU counters for every file
	 * would read lines the writers are writing; a quarter of the excess,
	 * at most BG_CHECK_PAGES, overshoots the threshold by little. */
	long bg_budget = 0;
	while (nr_pages > 0) {
		if (reason == WB_REASON_BACKGROUND && bg_budget <= 0) {
			long over = over_bg_pages(c);
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
			if (!dirty_take(dev, &batch, older_than, UINT64_MAX, NULL))
				break;
			slice = writeback_slice_pages(dev);
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
			dirty_put(dev, &put, ino, true, false);
			if (++skipped > 1000)
				break;
			continue;
		}
		if (ctl.size_dirty)
			inode_sync_size(ino);   /* the kernel's write_inode: metadata */
		dirty_put(dev, &put, ino, ctl.still_dirty, ctl.nr_to_write <= 0);
		if (put.n_redirty + put.n_more_io >= WB_BATCH)
			dirty_put_commit(dev, &put);
		nr_pages -= n;
		total += n;
		bg_budget -= WBC_MAX(n, 1);
		if (++files % WB_BATCH == 0)
			bandwidth_update(dev, wbc_now_ns());
		/* file what writers dirtied meanwhile while it is still warm
		 * in the caches */
		if (files % DRAIN_EVERY == 0)
			dirty_drain(dev);
	}
	plug_flush(dev, &plug);
	dirty_untake(dev, &batch);
	dirty_put_commit(dev, &put);
	bandwidth_update(dev, wbc_now_ns());
	return total;
}

/*
 * Visit every file listed on @dev now: the inbox filed, b_io, b_more_io
 * and the buckets up to the newest, which is sealed, so files dirtied or
 * put back meanwhile land in later buckets and wait for the next walk (no
 * livelock).  Each is taken off the lists for @visit, which returns
 * whether it is still dirty (put back) or clean (dropped).
 */
static void walk_listed(struct wbc_dev *dev, bool (*visit)(struct inode *ino, void *arg),
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
			bandwidth_update(dev, wbc_now_ns());
			continue;
		}
		dirty_put(dev, &put, ino, visit(ino, arg), false);
		if (put.n_redirty >= WB_BATCH)
			dirty_put_commit(dev, &put);
	}
}

/*
 * After a sync: the sync's own completions put files back on the lists to
 * have their size set, which the sync then did.  Drop every listed file
 * that has nothing left to write, as a pass of the flusher would; without
 * it such a file (and its backing descriptor) stays until the next
 * periodic pass, which dirty_writeback_centisecs=0 turns off.
 */
static bool prune_visit(struct inode *ino, void *unused)
{
	(void)unused;
	pthread_mutex_lock(&ino->lock);
	bool still = ino->nr_dirty || ino->nr_writeback || ino->backend_size != ino->i_size;
	pthread_mutex_unlock(&ino->lock);
	return still;
}

/* A sync's files: written, remembered to wait for and to set sizes. */
struct sync_walk {
	struct inode **touched;
	size_t nr, cap;
	int err;
};

static bool sync_visit(struct inode *ino, void *arg)
{
	struct sync_walk *w = arg;
	struct wbc_ctl ctl = {
		.sync_mode = WB_SYNC_ALL,
		.nr_to_write = LONG_MAX,
		.range_start = 0,
		.range_end = UINT64_MAX,
	};
	write_inode_pages(ino, &ctl);
	if (w->nr == w->cap) {
		size_t ncap = w->cap ? w->cap * 2 : 64;
		struct inode **t = realloc(w->touched, ncap * sizeof(*t));
		if (!t) {
			/* cannot remember it: wait for it now */
			wait_on_writeback_range(ino, 0, UINT64_MAX);
			int e = inode_sync_size(ino);
			if (e && !w->err)
				w->err = e;
			return ctl.still_dirty;
		}
		w->touched = t;
		w->cap = ncap;
	}
	igrab(ino);
	w->touched[w->nr++] = ino;
	return ctl.still_dirty;
}

/* Sync work: write every dirty file of the device once, wait, flush. */
static int wb_sync(struct wbc_dev *dev)
{
	struct sync_walk w = { 0 };

	/* I/O started before the sync (by background passes, on files that
	 * are now off the lists) must be complete before sync returns. */
	dev_drain(dev);
	walk_listed(dev, sync_visit, &w);
	struct inode **touched = w.touched;
	size_t nr = w.nr;
	int err = w.err;
	dev_drain(dev);
	for (size_t i = 0; i < nr; i++) {
		int e = inode_sync_size(touched[i]);
		if (e && !err)
			err = e;
		iput(touched[i]);
	}
	free(touched);
	walk_listed(dev, prune_visit, NULL);
	int e = backend_flush(dev->be, NULL, false);
	if (e && !err)
		err = e;
	pthread_mutex_lock(&dev->err_lock);
	e = errseq_check_advance(&dev->wb_err, &dev->sync_err_since);
	pthread_mutex_unlock(&dev->err_lock);
	if (e && !err)
		err = e;
	return err;
}

/* ------------------------------------------------------------------ */
/* the thread                                                           */

static void *flusher_main(void *arg)
{
	pthread_setname_np(pthread_self(), "wbc-flush");
	struct wbc_dev *dev = arg;
	struct wbc_cache *c = dev->cache;
	uint64_t interval = c->cfg.dirty_writeback_centisecs * NS_PER_CENTISEC;
	uint64_t next_periodic = wbc_now_ns() + interval;
	uint64_t retry_at = 0;

	pthread_mutex_lock(&dev->work_lock);
	while (!dev->stop) {
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
			bandwidth_update(dev, wbc_now_ns());
			pthread_mutex_lock(&dev->work_lock);
			continue;
		}
		bool kicked = dev->kicked;
		dev->kicked = false;
		long ndirty = ctr_dirty(&dev->ctr);
		bool over = ndirty > 0 && over_bg_thresh(c);
		if (ndirty > 0 && ((kicked || now >= retry_at) && over)) {
			pthread_mutex_unlock(&dev->work_lock);
			long n = wb_writeback(dev, WB_REASON_BACKGROUND, LONG_MAX);
			retry_at = n ? 0 : wbc_now_ns() + BACKGROUND_RETRY_NS;
			pthread_mutex_lock(&dev->work_lock);
			if (n)
				continue;
		} else if (kicked && ndirty > 0) {
			/* a writer to this device is throttled while the cache
			 * is under bg_thresh (the other pages are some other
			 * device's, in writeback): write what this device has */
			pthread_mutex_unlock(&dev->work_lock);
			long n = wb_writeback(dev, WB_REASON_START_ALL, ndirty);
			retry_at = n ? 0 : wbc_now_ns() + BACKGROUND_RETRY_NS;
			pthread_mutex_lock(&dev->work_lock);
			continue;
		}
		if (dev->kicked || !list_empty(&dev->work_list) || dev->start_all || dev->stop)
			continue;
		uint64_t wake = interval ? next_periodic : UINT64_MAX;
		if (retry_at && over_bg_thresh(c))
			wake = WBC_MIN(wake, retry_at);
		if (wake == UINT64_MAX)
			pthread_cond_wait(&dev->work_cond, &dev->work_lock);
		else if (wake > now)
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
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next)
		if (ctr_dirty(&d->ctr) > 0)
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
