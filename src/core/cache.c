/*
 * Cache lifetime, tunables and statistics (the top): the arena is mm's
 * (mm/arena.c), the thresholds throttle's; open sets the calls the lower
 * layers make up.
 */
#include "core/core.h"

#include <limits.h>
#include <time.h>

#define MIN_PAGES 16
#define MIN_PAGE_SIZE 512u          /* smallest O_DIRECT logical block */
#define MAX_PAGE_SIZE (1u << 20)

void wbc_config_init(struct wbc_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mem_bytes = 64ull << 20;
	cfg->page_size = 4096;
	/* the defaults of /proc/sys/vm */
	cfg->dirty_ratio = 20;
	cfg->dirty_background_ratio = 10;
	cfg->dirty_expire_centisecs = 3000;
	cfg->dirty_writeback_centisecs = 500;
}

const char *wbc_config_check(const struct wbc_config *cfg)
{
	if (!cfg)
		return "no configuration";
	uint32_t ps = cfg->page_size;
	if (ps < MIN_PAGE_SIZE || ps > MAX_PAGE_SIZE || (ps & (ps - 1)))
		return "the page size must be a power of two from 512 to 1M";
	if (cfg->mem_bytes / ps < MIN_PAGES)
		return "the memory must hold at least 16 pages";
	if (cfg->dirty_ratio > 100 || cfg->dirty_background_ratio > 100)
		return "a ratio is a percentage: 0 to 100";
	if (!cfg->dirty_bytes && !cfg->dirty_ratio)
		return "dirty_ratio 0 needs dirty_bytes (a zero dirty limit could never "
		       "make progress)";
	if (cfg->dirty_bytes && cfg->dirty_bytes < 2 * (uint64_t)ps)
		return "dirty_bytes must be at least two pages";   /* the kernel's floor */
	if (!cfg->dirty_bytes && cfg->mem_bytes / ps * cfg->dirty_ratio / 100 < 2)
		return "dirty_ratio gives a dirty limit under two pages of this memory "
		       "(raise it, or the memory, or set dirty_bytes)";
	/* a tunable of a later version set there would be ignored unsaid,
	 * and so would a configuration never initialised */
	for (size_t i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			return "the reserved fields must be zero (fill the configuration with "
			       "wbc_config_init() first)";
	return NULL;
}

static int config_check(const struct wbc_config *cfg)
{
	return wbc_config_check(cfg) ? -EINVAL : 0;
}

/* The calls the lower layers make up: page_alloc's, when no page can be
 * had (mm/mm.h), and the flusher's (writeback/writeback.h). */
static const struct page_alloc_ops alloc_ops = {
	.dead_error = cache_dead_error,
	.wakeup_writeback = wakeup_flusher_threads,
};
static const struct wb_throttle_ops wb_ops = {
	.over_bg_pages = over_bg_pages,
	.slice_pages = writeback_slice_pages,
	.bandwidth_update = bandwidth_update,
};

int wbc_cache_open(const struct wbc_config *cfg, wbc_cache **out)
{
	if (!cfg || !out)
		return -EINVAL;
	int err = config_check(cfg);
	if (err)
		return err;
	uint32_t shift = (uint32_t)__builtin_ctz(cfg->page_size);
	uint64_t nr_pages = cfg->mem_bytes >> shift;
	size_t arena_len, pages_len;
	if ((err = arena_sizes(nr_pages, shift, &arena_len, &pages_len)))
		return err;
	struct wbc_cache *c = wbc_zalloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	static atomic_uint_fast64_t next_uid;
	c->uid = atomic_fetch_add(&next_uid, 1) + 1;
	c->cfg = *cfg;
	c->page_size = cfg->page_size;
	c->page_shift = shift;
	c->nr_pages = nr_pages;
	c->arena_len = arena_len;
	c->pages_len = pages_len;
	c->alloc_ops = &alloc_ops;
	c->wb_ops = &wb_ops;
	if ((err = arena_init(c))) {
		free(c);
		return err;
	}
	wbc_mutex_init(&c->prop_lock);
	c->prop_stamp_ns = wbc_now_ns();
	wbc_mutex_init(&c->dev_lock);
	thresholds_compute(c);
	*out = c;
	return 0;
}

int wbc_cache_sync(wbc_cache *c)
{
	if (!c)
		return -EINVAL;
	int first = 0;
	pthread_mutex_lock(&c->dev_lock);
	struct wbc_dev *devs = c->devs;
	pthread_mutex_unlock(&c->dev_lock);
	/* Devices are only added at the head and freed at close, so the list
	 * from @devs on is stable without the lock. */
	for (struct wbc_dev *d = devs; d; d = d->next) {
		int err = wbc_dev_sync(d);
		if (err && !first)
			first = err;
	}
	return first;
}

/* Retries at close: the first after CLOSE_RETRY_MIN_NS, doubling to
 * CLOSE_RETRY_MAX_NS (the flusher's backoff of a failed file). */
#define CLOSE_RETRY_MIN_NS (100ull * 1000 * 1000)
#define CLOSE_RETRY_MAX_NS (5000ull * 1000 * 1000)

/*
 * The retry policy at close: pages whose writes failed are not given up
 * at the first failure, but synced again, with a backoff, until they are
 * written or their device is dead (dev_dead_error: it failed every write
 * for its retry_timeout).  What is left then, dev_stop drops and counts
 * lost.  Returns the first error a sync returned.
 */
static int close_retry(struct wbc_cache *c)
{
	int first = 0;
	uint64_t backoff = CLOSE_RETRY_MIN_NS;
	for (;;) {
		uint64_t now = wbc_now_ns(), wait = backoff;
		bool pending = false;
		/* devices are only added at the head: the list is stable */
		for (struct wbc_dev *d = c->devs; d; d = d->next) {
			if (d->on_error != WBC_ON_ERROR_RETRY || ctr_unclean(&d->ctr) <= 0 ||
			    dev_dead_error(d, now))
				continue;
			pending = true;
			/* not past the moment it is given up */
			uint64_t since = atomic_load(&d->fail_since);
			if (since && since + d->retry_timeout_ns > now)
				wait = WBC_MIN(wait, since + d->retry_timeout_ns - now);
		}
		if (!pending)
			return first;
		struct timespec ts = { .tv_sec = (time_t)(wait / 1000000000ull),
				       .tv_nsec = (long)(wait % 1000000000ull) };
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		backoff = WBC_MIN(backoff * 2, CLOSE_RETRY_MAX_NS);
		for (struct wbc_dev *d = c->devs; d; d = d->next) {
			if (d->on_error != WBC_ON_ERROR_RETRY || ctr_unclean(&d->ctr) <= 0)
				continue;
			int e = wbc_dev_sync(d);
			if (e && !first)
				first = e;
		}
	}
}

int wbc_cache_close_stats(wbc_cache *c, struct wbc_stats *st)
{
	if (!c)
		return 0;
	int err = wbc_cache_sync(c);
	int rerr = close_retry(c);
	if (rerr && !err)
		err = rerr;
	/* every device stopped before any is freed: a device's flusher,
	 * completion thread or stacked writer walks the list (bandwidth
	 * shares, thresholds, dead pages) until it has stopped */
	for (struct wbc_dev *d = c->devs; d; d = d->next) {
		int serr = dev_stop(d);
		if (serr && !err)
			err = serr;
	}
	struct wbc_dev *d = c->devs;
	while (d) {
		struct wbc_dev *next = d->next;
		dev_free(d);
		d = next;
	}
	c->devs = NULL;
	c->nr_devs = 0;
	assert(ctr_dirty(&c->ctr) == 0 || err);
	if (st)
		wbc_stats(c, st);   /* lost_bytes: what could not be written */
	int uerr = arena_destroy(c);
	if (uerr && !err)
		err = uerr;
	pthread_mutex_destroy(&c->prop_lock);
	for (struct wbc_group *g = atomic_load(&c->groups), *next; g; g = next) {
		next = g->next;
		for (struct wbc_group_dev *gd = atomic_load(&g->devs), *gnext; gd; gd = gnext) {
			gnext = gd->next;
			free(gd);
		}
		free(g);
	}
	pthread_mutex_destroy(&c->dev_lock);
	free(c);
	return err;
}

int wbc_cache_close(wbc_cache *c)
{
	return wbc_cache_close_stats(c, NULL);
}

/* ------------------------------------------------------------------ */
/* stats                                                                */

int wbc_stats(wbc_cache *c, struct wbc_stats *st)
{
	if (!c || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	uint64_t ps = c->page_size;
	st->page_size = ps;
	st->mem_bytes = c->arena_len;
	st->cached_bytes = (uint64_t)atomic_load(&c->nr_cached) * ps;
	/* one load of the total, so dirty + writeback is a value it had */
	uint64_t unclean = (uint64_t)ctr_unclean(&c->ctr);
	uint64_t dirty = WBC_MIN((uint64_t)ctr_dirty(&c->ctr), unclean);
	st->dirty_bytes = dirty * ps;
	st->writeback_bytes = (unclean - dirty) * ps;
	struct dom d;
	dom_global(c, &d);
	st->bg_thresh_bytes = c->bg_thresh * ps;
	st->thresh_bytes = c->thresh * ps;
	st->freerun_bytes = (uint64_t)d.freerun * ps;
	st->setpoint_bytes = (uint64_t)d.setpoint * ps;
	st->limit_bytes = (uint64_t)d.limit * ps;
	st->pauses = atomic_load(&c->st_pauses);
	st->paused_ns = atomic_load(&c->st_paused_ns);
	st->max_pause_ns = atomic_load(&c->st_max_pause_ns);
	st->written_bytes = (uint64_t)pcount_sum(&c->st_written);
	st->written_back_bytes = atomic_load(&c->st_written_back);
	st->read_in_bytes = atomic_load(&c->st_read_in);
	st->reclaimed_pages = atomic_load(&c->st_reclaimed);
	st->write_ios = atomic_load(&c->st_write_ios);
	st->write_errors = atomic_load(&c->st_write_errors);
	st->lost_bytes = atomic_load(&c->st_lost);
	st->at_risk_bytes = (uint64_t)WBC_MAX(atomic_load(&c->st_at_risk_pages), 0) * ps;
	st->page_waits = atomic_load(&c->st_page_waits);
	st->flush_errors = atomic_load(&c->st_flush_errors);
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *dv = c->devs; dv; dv = dv->next) {
		st->write_bw += atomic_load(&dv->write_bw);
		st->nr_devices++;
	}
	pthread_mutex_unlock(&c->dev_lock);
	return 0;
}

const char *wbc_strerror(int err)
{
	/* INT_MIN has no positive counterpart (negating it overflows); it is
	 * no errno value either */
	if (err == INT_MIN)
		return "Unknown error";
	return strerror(err < 0 ? -err : err);
}

const char *wbc_version(void)
{
	return WBCACHE_VERSION;
}
