/*
 * Dirty thresholds and the writer-side limit.
 *
 *   thresh    = dirty_bytes    or  dirty_ratio% of the cache's pages
 *   bg_thresh = dirty_background_bytes or dirty_background_ratio% of them
 *               (if bg_thresh >= thresh, bg_thresh = thresh / 2, as Linux)
 *
 * Background writeback runs while dirty pages (not counting those under
 * writeback, as in the kernel) exceed bg_thresh.  A writer whose pages push
 * dirty + writeback above thresh waits until completions bring it back
 * under: a hard limit that holds memory for dirty data to thresh plus the
 * pages of one write call's batch (THROTTLE_BATCH).
 */
#include "internal.h"

/* A writer waiting at the limit re-checks at least this often. */
#define LIMIT_WAIT_NS (100ull * 1000 * 1000)

void thresholds_compute(struct wbc_cache *c)
{
	uint64_t n = c->nr_pages;
	const struct wbc_config *cfg = &c->cfg;
	uint64_t t = cfg->dirty_bytes ? cfg->dirty_bytes >> c->page_shift
				      : n * cfg->dirty_ratio / 100;
	uint64_t bg = cfg->dirty_background_bytes ?
		cfg->dirty_background_bytes >> c->page_shift :
		n * cfg->dirty_background_ratio / 100;
	t = WBC_MIN(WBC_MAX(t, 1), n);
	if (bg >= t)
		bg = t / 2;
	c->thresh = t;
	c->bg_thresh = bg;
}

bool over_bg_thresh(struct wbc_cache *c)
{
	return (uint64_t)WBC_MAX(atomic_load(&c->nr_dirty), 0) > c->bg_thresh;
}

static uint64_t dirty_total(struct wbc_cache *c)
{
	long long n = atomic_load(&c->nr_unclean);
	return n > 0 ? (uint64_t)n : 0;
}

void dirty_limit_wake(struct wbc_cache *c)
{
	if (!atomic_load(&c->dirty_waiters) || dirty_total(c) > c->thresh)
		return;
	pthread_mutex_lock(&c->dirty_lock);
	pthread_cond_broadcast(&c->dirty_cond);
	pthread_mutex_unlock(&c->dirty_lock);
}

void balance_dirty_pages(struct wbc_dev *dev)
{
	struct wbc_cache *c = dev->cache;
	(void)dev;
	if (over_bg_thresh(c))
		wakeup_flusher_threads(c, false);
	if (dirty_total(c) <= c->thresh)
		return;
	atomic_fetch_add(&c->st_dirty_waits, 1);
	atomic_fetch_add(&c->dirty_waiters, 1);
	while (dirty_total(c) > c->thresh) {
		wakeup_flusher_threads(c, false);
		pthread_mutex_lock(&c->dirty_lock);
		if (dirty_total(c) > c->thresh)
			wbc_cond_timedwait_ns(&c->dirty_cond, &c->dirty_lock, LIMIT_WAIT_NS);
		pthread_mutex_unlock(&c->dirty_lock);
	}
	atomic_fetch_sub(&c->dirty_waiters, 1);
}
