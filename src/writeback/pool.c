/*
 * The bio pool of a device (layer writeback): at most qd I/Os are in
 * flight per device (the backend's queue depth, or max_inflight=N below it), a pool of qd bios, each with room for the backend's
 * largest I/O in iovecs and pages, bounded by the cache (dev_io_init).
 * Waiters for a bio are woken in batches.  The pool also keeps the time the device had I/O in flight
 * (busy_ns), which the throttle layer's bandwidth estimate reads through
 * dev_busy_ns.
 */
#include "writeback/writeback.h"

/* The pool's page slots (qd bios of maxp each) at most: every page of
 * the cache eight times over, and never less than the default pool's
 * (32 bios of 1 MiB in 4 KiB pages). */
#define POOL_PAGES_PER_PAGE 8u
#define POOL_MIN_SLOTS 8192u

int dev_io_init(struct wbc_dev *dev)
{
	struct backend *be = dev->be;
	struct wbc_cache *c = dev->cache;
	size_t ps = c->page_size;
	/* bounded by what the cache can have in flight at once: a bio holds
	 * no more pages than the cache has, and (each holding at least one)
	 * no more bios are in flight than it has pages; the pool as a whole
	 * stays linear in the cache's pages: a writeback bio is then
	 * smaller than max_io (direct I/O is split at max_io still) */
	uint64_t maxp = WBC_MIN(WBC_MAX(be->max_io / ps, 1), c->nr_pages);
	unsigned qd = WBC_MAX(be->qd, 1u);
	if (dev->max_inflight && dev->max_inflight < qd)
		qd = dev->max_inflight;   /* max_inflight=N, for experiments */
	qd = (unsigned)WBC_MAX(WBC_MIN((uint64_t)qd, c->nr_pages), 1);
	uint64_t slots = WBC_MAX(c->nr_pages * POOL_PAGES_PER_PAGE, POOL_MIN_SLOTS);
	if ((uint64_t)qd * maxp > slots)
		maxp = WBC_MAX(slots / qd, 1);
	dev->bio_maxp = (unsigned)maxp;
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
struct wbc_bio *bio_get(struct wbc_dev *dev, struct bio_plug *plug)
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
	b->epoch = dev->io_epoch & 1;
	dev->inflight_ep[b->epoch]++;
	bio_prefetch_free(dev, dev->bio_free);
	pthread_mutex_unlock(&dev->io_lock);
	b->iovcnt = 0;
	b->nr_pages = 0;
	b->len = 0;
	return b;
}

/* Return the chain @b .. @last (@n bios, linked by next_free) to the pool. */
void bio_put_chain(struct wbc_dev *dev, struct wbc_bio *b, struct wbc_bio *last, unsigned n)
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
	bool emptied = false;
	for (struct wbc_bio *x = b;; x = x->next_free) {
		assert(dev->inflight_ep[x->epoch]);
		emptied |= !--dev->inflight_ep[x->epoch];
		if (x == last)
			break;
	}
	/* Wake waiters in batches, not per bio: a writer that ran out of bios
	 * resumes once a quarter of the pool is free (the kernel's sbitmap
	 * wake batch), a drain when its epoch has nothing in flight.  Every
	 * bio in use is in flight or about to be, so the batch always fills. */
	if (dev->io_waiters && (dev->nr_bios - dev->inflight >= dev->bio_wake_batch || emptied))
		pthread_cond_broadcast(&dev->io_cond);
	pthread_mutex_unlock(&dev->io_lock);
}

void bio_put(struct wbc_dev *dev, struct wbc_bio *b)
{
	bio_put_chain(dev, b, b, 1);
}

/*
 * Wait until every bio of the device in flight now has completed (its
 * completion run to its end).  Not for those submitted meanwhile: they
 * count in the next epoch, so a drain ends however busy the device stays
 * (a sync among fsyncs that keep the device busy).  Epoch g's bios count
 * in slot g & 1.  A switch from g to g + 1 is made once the slot of g - 1
 * is empty, by a drain that found io_epoch still g; so io_epoch at g + 2
 * proves epoch g's bios done, and drains that overlap never wait on an
 * epoch that still takes new bios.
 */
void dev_drain(struct wbc_dev *dev)
{
	pthread_mutex_lock(&dev->io_lock);
	unsigned g = dev->io_epoch;
	while (dev->io_epoch == g && dev->inflight_ep[(g & 1) ^ 1]) {
		dev->io_waiters++;
		pthread_cond_wait(&dev->io_cond, &dev->io_lock);
		dev->io_waiters--;
	}
	if (dev->io_epoch == g)
		dev->io_epoch++;   /* bios from now on: the other slot */
	while ((int)(dev->io_epoch - (g + 2)) < 0 && dev->inflight_ep[g & 1]) {
		dev->io_waiters++;
		pthread_cond_wait(&dev->io_cond, &dev->io_lock);
		dev->io_waiters--;
	}
	pthread_mutex_unlock(&dev->io_lock);
}

uint64_t dev_busy_ns(struct wbc_dev *dev, uint64_t now)
{
	pthread_mutex_lock(&dev->io_lock);
	uint64_t busy = dev->busy_ns + (dev->inflight ? now - dev->busy_since : 0);
	pthread_mutex_unlock(&dev->io_lock);
	return busy;
}
