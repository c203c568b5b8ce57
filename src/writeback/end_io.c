/*
 * The completion of writeback bios (layer writeback): pages clean, or
 * dirty again under the retry policy, counters, waiters woken; a batch of
 * completions in one thread settles what they share once
 * (wbc_io_complete_batch); and the state of the retry policy, a device's
 * failing writes (dev_dead_error).
 */
#include "writeback/writeback.h"

/* Background retries of a file whose writeback failed (retry policy). */
#define RETRY_MIN_NS (100ull * 1000 * 1000)
#define RETRY_MAX_NS (5000ull * 1000 * 1000)

/* ------------------------------------------------------------------ */
/* errors                                                               */

/*
 * How long the device has failed (the retry policy's bound).  A failed
 * write starts the clock unless it runs with pages at risk; a write that
 * succeeds stops it.
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
	/* with no page at risk (this write's are counted after) the clock
	 * that runs is of failed pages since truncated away: it says nothing
	 * of these, which get their retry_timeout from now (they were dead at
	 * their first failure after the device had been idle that long) */
	if (atomic_load(&dev->at_risk_pages) <= 0) {
		atomic_store(&dev->fail_since, now ? now : 1);
		return;
	}
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
 * named: fs's teardown batch, open with this one), page waiters, bios
 * last (a drained device runs no completion). */
static void end_batch_flush(void)
{
	if (!eb.dev)
		return;
	end_batch_settle();
	inode_teardown_flush();
	cache_wake_page_waiters(eb.dev->cache);
	if (eb.nbios)   /* nothing of the device is touched after this */
		bio_put_chain(eb.dev, eb.bios, eb.last, eb.nbios);
	eb.bios = eb.last = NULL;
	eb.nbios = 0;
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

void wb_end_io(struct wbc_bio *bio)
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
		if (retry)
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
	if (err && !retry) {
		/* lost: the file's bytes the write did not reach (not what a
		 * short write wrote before the error, nor a tail page's
		 * padding past the file's end) */
		uint64_t from = bio->off + WBC_MIN(bio->done, len);
		uint64_t to = WBC_MIN(bio->off + len, WBC_MAX(ino->i_size, from));
		atomic_fetch_add(&c->st_lost, to - from);
	}
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
	ino->nr_at_risk += (uint32_t)at_risk_delta;   /* mod 2^32: may be negative */
	if (err) {
		/* healable only while every unseen error is a retried write's
		 * (a flush's error before it must not be healed with it) */
		bool other = ino->wb_err.seq && !ino->wb_err.seen && !ino->wb_err.retried;
		errseq_record(&ino->wb_err, err);
		ino->wb_err.retried = retry && !other;
	} else {
		/* the retry policy's error healed: every page it failed is
		 * written now (or truncated away), nothing was lost, and a
		 * handle opened from here on is not told (those open at the
		 * error still are, once) */
		if (!ino->nr_at_risk && ino->wb_err.retried)
			ino->wb_err.seen = ino->wb_err.healed = true;
		ino->backend_size = WBC_MAX(ino->backend_size, bio->off + len);
		ino->written_gen = atomic_load_explicit(&dev->flush_gen, memory_order_relaxed);
	}
	/* a write that failed after part of it (a short write's rest) may
	 * have grown the backend that far, past i_size with a tail page: it
	 * is trimmed as after any write */
	if (err && bio->done)
		ino->backend_size = WBC_MAX(ino->backend_size, bio->off + WBC_MIN(bio->done, len));
	size_dirty = (!err || bio->done) && ino->backend_size != ino->i_size;
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
	if (retry)
		mark_inode_retry(ino);   /* the flusher retries after the backoff */
	else if (size_dirty)
		mark_inode_trim(ino);    /* the flusher's next pass fixes the size */
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
	/* the cache misses of the whole batch in flight at once (each bio
	 * taken over from its submitter first) */
	for (unsigned i = 0; i < n; i++)
		(void)atomic_load_explicit(&container_of(ios[i], struct wbc_bio, io)->handoff,
					   memory_order_acquire);
	for (int stage = 0; stage < 2; stage++)
		for (unsigned i = 0; i < n; i++)
			bio_prefetch(container_of(ios[i], struct wbc_bio, io), stage);
	bio_end_batch_begin();
	for (unsigned i = 0; i < n; i++)
		wbc_io_complete(ios[i], ios[i]->res);
	bio_end_batch_end();
}
