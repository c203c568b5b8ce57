/*
 * Cache lifetime, tunables and the page arena.
 *
 * Invariants (DESIGN.md 1):
 *   1. All page memory is one mmap()ed arena made at open; nothing else ever
 *      holds file data.  Page descriptors are one array made at open.
 *   2. A page is in exactly one state: on the free list (inode == NULL,
 *      on_free), in transit (inode == NULL, !on_free: owned by the thread
 *      that took it from page_alloc), or bound to an inode's page index.
 *   3. Only clean, unlocked pages not under writeback are reclaimed; dirty
 *      pages stay until written.
 *
 * Reclaim is CLOCK: a hand sweeps the arena; a page touched since the last
 * sweep (referenced) gets a second chance.  The sweep holds lru_lock and
 * only trylocks the owner's inode->lock (the lock order is inode -> lru), so
 * a busy inode is simply passed over.  A writer that finds no reclaimable
 * page kicks every flusher and waits for a completion to free one.
 */
#include "internal.h"

#include <limits.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Pages examined per lru_lock hold before the lock is dropped, so that one
 * allocation never holds the lock for a walk proportional to the arena. */
#define RECLAIM_BATCH 1024
/* A waiter for a free page re-kicks the flushers this often. */
#define PAGE_WAIT_NS (50ull * 1000 * 1000)
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

static int config_check(const struct wbc_config *cfg)
{
	uint32_t ps = cfg->page_size;
	if (ps < MIN_PAGE_SIZE || ps > MAX_PAGE_SIZE || (ps & (ps - 1)))
		return -EINVAL;
	if (cfg->mem_bytes / ps < MIN_PAGES)
		return -EINVAL;
	if (cfg->dirty_ratio > 100 || cfg->dirty_background_ratio > 100)
		return -EINVAL;
	if (!cfg->dirty_bytes && !cfg->dirty_ratio)
		return -EINVAL;   /* a zero dirty limit could never make progress */
	if (cfg->dirty_bytes && cfg->dirty_bytes < 2 * (uint64_t)ps)
		return -EINVAL;   /* the kernel's floor: two pages */
	return 0;
}

/* The arena's alignment: one transparent huge page (x86-64's PMD size). */
#define ARENA_HUGE (2ul << 20)

/* The unit of mmap and munmap lengths (4 KiB on x86-64).  munmap refuses
 * an unaligned address, and a length it must round: every length passed
 * to them is rounded up to this first. */
static size_t sys_page_size(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	return ps > 0 ? (size_t)ps : 4096;
}

/* @len rounded up to whole system pages; 0 when that overflows. */
static size_t map_round(size_t len)
{
	size_t sp = sys_page_size();
	return len > SIZE_MAX - (sp - 1) ? 0 : (len + sp - 1) & ~(sp - 1);
}

/* Unmap what arena_map(@len) returned.  0 or -errno (a bad address or
 * length: a bug, never a condition to live with). */
static int arena_unmap(void *p, size_t len)
{
	if (munmap(p, map_round(len))) {
		int err = -errno;
		assert(!"munmap of an arena failed");
		return err;
	}
	return 0;
}

/*
 * Address space for the page arena or the page descriptors, aligned to
 * 2 MiB, so that transparent huge pages can back it where the kernel
 * allows them (the kernel's own page cache lives in the direct map's large
 * pages): a cache that touches gigabytes of pages takes a TLB miss per
 * 2 MiB, not per 4 KiB.  O_DIRECT buffers need 4 KiB alignment, which this
 * exceeds.  Maps 2 MiB more than asked and trims both ends; the trims
 * work in whole system pages (an unaligned tail would make munmap fail
 * and leak the 2 MiB slack at every open).  Nothing is committed here:
 * arena_populate does that once every mapping of the cache exists.
 * Returns the address, or NULL (and -errno in *err).
 */
static char *arena_map(size_t len, int *err)
{
	size_t rlen = map_round(len);
	if (!rlen || rlen > SIZE_MAX - ARENA_HUGE) {
		*err = -ENOMEM;
		return NULL;
	}
	size_t maplen = rlen + ARENA_HUGE;
	char *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*err = -errno;
		return NULL;
	}
	char *a = (char *)(((uintptr_t)p + ARENA_HUGE - 1) & ~(uintptr_t)(ARENA_HUGE - 1));
	size_t head = (size_t)(a - p), tail = maplen - head - rlen;
	if ((head && munmap(p, head)) || (tail && munmap(a + rlen, tail))) {
		*err = -errno;
		assert(!"trimming the arena mapping failed");
		/* whatever is still mapped of it: munmap ignores holes */
		munmap(p, maplen);
		return NULL;
	}
	return a;
}

/* Back [a, a + len) with memory now where the kernel can, so that no
 * write pays for a first-touch fault later; zeroed, as anonymous memory
 * is.  A hint both: the pages fault in on use if refused. */
static void arena_populate(char *a, size_t len)
{
#ifdef MADV_HUGEPAGE
	(void)madvise(a, map_round(len), MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
	/* an old kernel, or no memory for it now */
	(void)madvise(a, map_round(len), MADV_POPULATE_WRITE);
#endif
}

/*
 * Sizes of the arena (*arena_len) and of the descriptors (*pages_len) for
 * @nr_pages of 2^@shift bytes, checked before anything is mapped: 0, or
 * -ENOMEM when they do not fit in size_t, or when the two together exceed
 * the machine's memory (the arena is committed at open and never swapped
 * by design: a cache larger than RAM could only be refused by the
 * out-of-memory killer).
 */
static int arena_sizes(uint64_t nr_pages, uint32_t shift, size_t *arena_len, size_t *pages_len)
{
	if (nr_pages > (SIZE_MAX >> shift) || nr_pages > SIZE_MAX / sizeof(struct page))
		return -ENOMEM;
	*arena_len = (size_t)(nr_pages << shift);
	*pages_len = (size_t)nr_pages * sizeof(struct page);
	if (*arena_len > SIZE_MAX - *pages_len)
		return -ENOMEM;
	long phys = sysconf(_SC_PHYS_PAGES);
	uint64_t ram = UINT64_MAX;       /* unknown: mmap is the judge */
	if (phys > 0 && (uint64_t)phys <= UINT64_MAX / sys_page_size())
		ram = (uint64_t)phys * sys_page_size();
	return (uint64_t)*arena_len + *pages_len > ram ? -ENOMEM : 0;
}

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
	c->cfg = *cfg;
	c->page_size = cfg->page_size;
	c->page_shift = shift;
	c->nr_pages = nr_pages;
	c->arena_len = arena_len;
	c->pages_len = pages_len;
	/* the arena first: when it cannot be had, nothing else was mapped;
	 * the page descriptors too (writeback and reclaim walk them); both
	 * committed only once both exist */
	c->arena = arena_map(c->arena_len, &err);
	if (c->arena)
		c->pages = (struct page *)arena_map(c->pages_len, &err);
	if (!c->pages) {
		if (c->arena)
			arena_unmap(c->arena, c->arena_len);
		free(c);
		return err;
	}
	arena_populate(c->arena, c->arena_len);
	arena_populate((char *)c->pages, c->pages_len);
	wbc_mutex_init(&c->lru_lock);
	wbc_cond_init(&c->free_cond);
	wbc_mutex_init(&c->prop_lock);
	c->prop_stamp_ns = wbc_now_ns();
	wbc_mutex_init(&c->dev_lock);
	/* Free list in arena order, so a streaming writer gets neighbouring
	 * pages and writeback can merge them into fewer iovecs. */
	for (uint64_t i = c->nr_pages; i-- > 0;) {
		c->pages[i].on_free = true;
		c->pages[i].next_free = c->free_list;
		c->free_list = &c->pages[i];
	}
	c->nr_free = c->nr_pages;
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

void dev_destroy(struct wbc_dev *dev);   /* device.c */

/* Retries at close: the first after CLOSE_RETRY_MIN_NS, doubling to
 * CLOSE_RETRY_MAX_NS (the flusher's backoff of a failed file). */
#define CLOSE_RETRY_MIN_NS (100ull * 1000 * 1000)
#define CLOSE_RETRY_MAX_NS (5000ull * 1000 * 1000)

/*
 * The retry policy at close: pages whose writes failed are not given up
 * at the first failure, but synced again, with a backoff, until they are
 * written or their device is dead (dev_dead_error: it failed every write
 * for its retry_timeout).  What is left then, dev_destroy drops and counts
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
	struct wbc_dev *d = c->devs;
	while (d) {
		struct wbc_dev *next = d->next;
		dev_destroy(d);
		d = next;
	}
	c->devs = NULL;
	c->nr_devs = 0;
	assert(ctr_dirty(&c->ctr) == 0 || err);
	if (st)
		wbc_stats(c, st);   /* lost_bytes: what could not be written */
	int uerr = arena_unmap(c->arena, c->arena_len);
	if (!uerr)
		uerr = arena_unmap(c->pages, c->pages_len);
	if (uerr && !err)
		err = uerr;
	pthread_mutex_destroy(&c->lru_lock);
	pthread_cond_destroy(&c->free_cond);
	pthread_mutex_destroy(&c->prop_lock);
	for (struct wbc_group *g = atomic_load(&c->groups), *next; g; g = next) {
		next = g->next;
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

bool cache_page_in_arena(const struct wbc_cache *c, const void *addr)
{
	const char *p = addr;
	return p >= c->arena && p < c->arena + c->arena_len;
}

/* ------------------------------------------------------------------ */
/* page allocation and reclaim                                          */

void page_free_locked(struct wbc_cache *c, struct page *p)
{
	assert_held(&c->lru_lock);
	assert(!p->inode && !p->on_free);
	atomic_store_explicit(&p->flags, 0, memory_order_relaxed);
	p->on_free = true;
	p->next_free = c->free_list;
	c->free_list = p;
	c->nr_free++;
	if (c->free_waiters)
		pthread_cond_signal(&c->free_cond);
}

void page_bind(struct wbc_cache *c, struct page *p, struct inode *ino, uint64_t index)
{
	assert_held(&ino->lock);
	pthread_mutex_lock(&c->lru_lock);
	p->inode = ino;
	p->index = index;
	/* counted under lru_lock with the binding: never above nr_pages */
	atomic_fetch_add(&c->nr_cached, 1);
	pthread_mutex_unlock(&c->lru_lock);
	atomic_store_explicit(&p->referenced, true, memory_order_relaxed);
}

/* Unbind a page from its inode (whose lock is held, page already removed
 * from the index) and return it to the free list. */
void page_release(struct wbc_cache *c, struct page *p)
{
	assert_held(&p->inode->lock);
	pthread_mutex_lock(&c->lru_lock);
	p->inode = NULL;
	atomic_fetch_sub(&c->nr_cached, 1);
	page_free_locked(c, p);
	pthread_mutex_unlock(&c->lru_lock);
}

void page_release_chain(struct wbc_cache *c, struct page *p, unsigned n)
{
	pthread_mutex_lock(&c->lru_lock);
	for (unsigned i = 0; i < n; i++) {
		struct page *next = p->next_free;
		assert(pg_flags(p) == PG_LOCKED && !p->on_free);
		p->inode = NULL;
		p->next_free = NULL;
		page_free_locked(c, p);
		p = next;
	}
	atomic_fetch_sub(&c->nr_cached, n);
	pthread_mutex_unlock(&c->lru_lock);
}

/* Try to evict the page under the CLOCK hand.  lru_lock held. */
static bool try_reclaim_locked(struct wbc_cache *c, struct page *p)
{
	assert_held(&c->lru_lock);
	struct inode *ino = p->inode;
	if (!ino)
		return false;           /* free or in transit */
	if (atomic_exchange_explicit(&p->referenced, false, memory_order_relaxed))
		return false;           /* second chance */
	if (pthread_mutex_trylock(&ino->lock))
		return false;           /* lock order is inode -> lru: never wait */
	bool ok = !(pg_flags(p) & (PG_DIRTY | PG_WRITEBACK | PG_LOCKED));
	if (ok) {
		void *e = pm_delete(&ino->map, p->index);
		assert(e == p);
		(void)e;
		ino->nr_pages--;
		p->inode = NULL;
		atomic_fetch_sub(&c->nr_cached, 1);
		atomic_store_explicit(&p->flags, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&ino->lock);
	return ok;
}

void cache_wake_page_waiters(struct wbc_cache *c)
{
	if (!atomic_load_explicit(&c->page_waiters, memory_order_relaxed))
		return;
	pthread_mutex_lock(&c->lru_lock);
	pthread_cond_broadcast(&c->free_cond);
	pthread_mutex_unlock(&c->lru_lock);
}

/*
 * Take a page for new data: from the free list, else by reclaiming a clean
 * one, else wait until writeback cleans one.  Returns a page in transit
 * (unbound, flags 0).  A full arena of dirty pages is being written back
 * by the flushers kicked here, and the wait ends when one is cleaned;
 * except when every device that holds them is dead (its writes failing
 * for its retry_timeout): then, after a second look, NULL and that error.
 */
struct page *page_alloc(struct wbc_cache *c, int *err)
{
	uint64_t swept = 0;
	bool waited = false, dead_seen = false;
	pthread_mutex_lock(&c->lru_lock);
	for (;;) {
		struct page *p = c->free_list;
		if (p) {
			c->free_list = p->next_free;
			c->nr_free--;
			p->on_free = false;
			p->next_free = NULL;
			pthread_mutex_unlock(&c->lru_lock);
			return p;
		}
		for (unsigned i = 0; i < RECLAIM_BATCH; i++) {
			p = &c->pages[c->clock_hand];
			if (++c->clock_hand == c->nr_pages)
				c->clock_hand = 0;
			if (try_reclaim_locked(c, p)) {
				pthread_mutex_unlock(&c->lru_lock);
				atomic_fetch_add(&c->st_reclaimed, 1);
				return p;
			}
		}
		swept += RECLAIM_BATCH;
		/* Two full turns clear every referenced bit and visit every page
		 * once more: nothing is reclaimable now. */
		if (swept < 2 * c->nr_pages) {
			pthread_mutex_unlock(&c->lru_lock);
			pthread_mutex_lock(&c->lru_lock);
			continue;
		}
		if (!waited) {
			waited = true;
			atomic_fetch_add(&c->st_page_waits, 1);
		}
		pthread_mutex_unlock(&c->lru_lock);
		/* Dead devices hold the pages: fail on the second time in a
		 * row (the first may have missed a page some reader or writer
		 * held for its copy, and freed since). */
		int e = cache_dead_error(c, wbc_now_ns());
		if (e && dead_seen) {
			*err = e;
			return NULL;
		}
		dead_seen = e != 0;
		wakeup_flusher_threads(c, true);
		pthread_mutex_lock(&c->lru_lock);
		c->free_waiters++;
		atomic_fetch_add(&c->page_waiters, 1);
		wbc_cond_timedwait_ns(&c->free_cond, &c->lru_lock, PAGE_WAIT_NS);
		atomic_fetch_sub(&c->page_waiters, 1);
		c->free_waiters--;
		swept = 0;
	}
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
