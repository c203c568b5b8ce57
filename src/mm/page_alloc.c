/*
 * Page allocation and reclaim (layer mm).
 *
 * Invariants (the memory bound):
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
 * page kicks every flusher and waits for a completion to free one (the
 * writeback layer's calls, through cache->alloc_ops).
 *
 * The reserve (the kernel's PF_MEMALLOC reserves): a thread that cleans
 * one device's pages by writing them into another device of the same
 * cache (a stacked device's worker: wbc_thread_set_memalloc) needs pages
 * of that cache to do it.  When every page is dirty or in writeback, the
 * pages of the upper device, its writes would wait for pages only its
 * own writes can free (64 writers on a 4 MiB cache hung so).  The last
 * nr_reserve free pages are its alone: other threads take the free list
 * only above them, and a page they reclaim while the reserve is short
 * refills it first; they wait as for writeback when none is left.  A
 * thread writing into a stacked device of the same cache has a higher
 * level and leaves those under it a part (keep_free).
 */
#include "mm/mm.h"

/* Pages examined per lru_lock hold before the lock is dropped, so that one
 * allocation never holds the lock for a walk proportional to the arena. */
#define RECLAIM_BATCH 1024
/* A waiter for a free page re-kicks the flushers this often. */
#define PAGE_WAIT_NS (50ull * 1000 * 1000)
/* A sweep that passed over clean pages of a file whose lock was held
 * looks again after this long, doubling up to BUSY_WAIT_MAX_NS (a lock
 * let go wakes nobody). */
#define BUSY_WAIT_NS (250ull * 1000)
#define BUSY_WAIT_MAX_NS (4ull * 1000 * 1000)

void page_free_locked(struct wbc_cache *c, struct page *p)
{
	assert_held(&c->lru_lock);
	assert(!p->inode && !p->on_free);
	atomic_store_explicit(&p->flags, 0, memory_order_relaxed);
	p->on_free = true;
	p->next_free = c->free_list;
	c->free_list = p;
	c->nr_free++;
	c->free_gen++;
	/* one waiter, unless the page is the reserve's: then the waiter
	 * woken might be one that may not take it */
	if (c->free_waiters) {
		if (c->nr_free > c->nr_reserve)
			pthread_cond_signal(&c->free_cond);
		else if (c->memalloc_waiters)
			pthread_cond_broadcast(&c->free_cond);
	}
}

/* wbc_thread_set_memalloc: this thread may take the reserve */
static __thread int memalloc;   /* 0, or the thread's level: 1 takes all */

int wbc_thread_set_memalloc(int on)
{
	int was = memalloc;
	memalloc = on < 0 ? 0 : on;
	return was;
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

/* Try to evict the page under the CLOCK hand.  lru_lock held.  *busy
 * counts the pages passed over only because their file's lock was held
 * (clean, as far as a look without the lock sees).  @force: no second
 * chance (the bit is cleared all the same). */
static bool try_reclaim_locked(struct wbc_cache *c, struct page *p, uint64_t *busy, bool force)
{
	assert_held(&c->lru_lock);
	struct inode *ino = p->inode;
	if (!ino)
		return false;           /* free or in transit */
	if (atomic_exchange_explicit(&p->referenced, false, memory_order_relaxed) && !force)
		return false;           /* second chance */
	if (pthread_mutex_trylock(&ino->lock)) {
		/* lock order is inode -> lru: never wait here */
		if (!(pg_flags(p) & (PG_DIRTY | PG_WRITEBACK | PG_LOCKED)))
			(*busy)++;
		return false;
	}
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
	/* the pages just cleaned before the look at the waiters; an
	 * allocator registers before its last sweep (page_alloc_mode): it
	 * sees the pages, or this sees it */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&c->page_waiters, memory_order_relaxed))
		return;
	pthread_mutex_lock(&c->lru_lock);
	c->free_gen++;
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
static struct page *page_alloc_mode(struct wbc_cache *c, int *err, bool wait);

struct page *page_alloc(struct wbc_cache *c, int *err)
{
	return page_alloc_mode(c, err, true);
}

struct page *page_try_alloc(struct wbc_cache *c)
{
	int err;
	return page_alloc_mode(c, &err, false);
}

/* page_alloc(); without @wait, NULL instead of a wait for writeback. */
/* An allocator that waits is registered (free_waiters, page_waiters)
 * from before its last sweep until it returns: a page freed or cleaned
 * after that sweep wakes it, or moves free_gen, which it checks before
 * it sleeps.  (Registered only at the wait, not its sweeps before, so
 * the common allocation touches no shared counter.) */
static void waiter_unregister_locked(struct wbc_cache *c, bool *registered)
{
	assert_held(&c->lru_lock);
	if (!*registered)
		return;
	*registered = false;
	c->free_waiters--;
	if (memalloc)
		c->memalloc_waiters--;
	atomic_fetch_sub(&c->page_waiters, 1);
}

/* The free pages the calling thread leaves: the reserve, or for a
 * memalloc thread of level L what levels under it need (R - R/L: level 1
 * takes all, level 2 half, ...; a stack over a stack whose workers took
 * all hung: the pages they dirtied needed the lower workers' writes) */
static uint64_t keep_free(struct wbc_cache *c)
{
	assert_held(&c->lru_lock);
	if (!memalloc)
		return c->nr_reserve;
	return c->nr_reserve - WBC_MAX(c->nr_reserve / (uint64_t)memalloc, 1);
}

/* A deeper memalloc level than seen: the reserve at least L(L-1) pages,
 * so that every level's share R/L is larger than the next one's (two
 * levels with one share: the upper took what the lower needed; a third
 * level in a 64 KiB cache hung); at most half the cache. */
static void reserve_level_locked(struct wbc_cache *c)
{
	assert_held(&c->lru_lock);
	if (memalloc <= c->max_level)
		return;
	c->max_level = memalloc;
	uint64_t want = (uint64_t)memalloc * (uint64_t)(memalloc - 1);
	c->nr_reserve = WBC_MAX(c->nr_reserve, WBC_MIN(want, c->nr_pages / 2));
}

/* At the open of a file by a memalloc thread (a stacked device opens its
 * lower file so): the reserve grown before its first allocation (grown
 * only then, plain writers had taken every page above the old reserve,
 * and a level-3 worker, left less than its share, waited for pages its
 * own writes held: three levels in a 128 KiB cache hung).  -ENOBUFS when
 * half the cache is less than L(L-1) pages: two levels would share one
 * share (four levels in a 64 KiB cache hung). */
int page_reserve_level(struct wbc_cache *c)
{
	if (!memalloc)
		return 0;
	if ((uint64_t)memalloc * (uint64_t)(memalloc - 1) > c->nr_pages / 2)
		return -ENOBUFS;
	pthread_mutex_lock(&c->lru_lock);
	reserve_level_locked(c);
	pthread_mutex_unlock(&c->lru_lock);
	return 0;
}

static struct page *page_alloc_mode(struct wbc_cache *c, int *err, bool wait)
{
	uint64_t swept = 0, gen = 0, busy = 0, busy_wait = BUSY_WAIT_NS;
	bool waited = false, dead_seen = false, registered = false;
	pthread_mutex_lock(&c->lru_lock);
	reserve_level_locked(c);
	for (;;) {
		struct page *p = c->free_list;
		if (p && c->nr_free > keep_free(c)) {
			c->free_list = p->next_free;
			c->nr_free--;
			p->on_free = false;
			p->next_free = NULL;
			waiter_unregister_locked(c, &registered);
			pthread_mutex_unlock(&c->lru_lock);
			return p;
		}
		uint64_t batch = WBC_MIN((uint64_t)RECLAIM_BATCH, c->nr_pages);
		for (uint64_t i = 0; i < batch; i++) {
			p = &c->pages[c->clock_hand];
			if (++c->clock_hand == c->nr_pages)
				c->clock_hand = 0;
			/* registered (two turns found nothing): a clean page
			 * touched again since the last turn is taken all the
			 * same.  (A hot file's readers touched every clean
			 * page during a wait: the one turn after it passed
			 * them all over, and the allocation waited as for
			 * writeback and kicked every flusher to write all.) */
			if (try_reclaim_locked(c, p, &busy, registered)) {
				atomic_fetch_add(&c->st_reclaimed, 1);
				if (c->nr_free < keep_free(c)) {
					page_free_locked(c, p);   /* the reserve first */
					continue;
				}
				waiter_unregister_locked(c, &registered);
				pthread_mutex_unlock(&c->lru_lock);
				return p;
			}
		}
		swept += batch;
		/* Two full turns clear every referenced bit and visit every page
		 * once more: nothing is reclaimable now. */
		if (swept < 2 * c->nr_pages) {
			pthread_mutex_unlock(&c->lru_lock);
			pthread_mutex_lock(&c->lru_lock);
			continue;
		}
		if (!wait) {
			pthread_mutex_unlock(&c->lru_lock);
			*err = -EAGAIN;
			return NULL;
		}
		if (!registered) {
			/* registered, then one more full turn: a page cleaned
			 * before is found by it, one cleaned after wakes us */
			registered = true;
			c->free_waiters++;
			if (memalloc)
				c->memalloc_waiters++;
			atomic_fetch_add(&c->page_waiters, 1);
			atomic_thread_fence(memory_order_seq_cst);
			gen = c->free_gen;
			swept = c->nr_pages;
			busy = 0;
			continue;
		}
		/* Clean pages passed over because their file's lock was held
		 * (a file that takes every page of the cache, as a block
		 * export's one file, has its lock held by its writers, its
		 * readers and writeback most of the time; a holder preempted
		 * on a busy machine holds it for milliseconds): they are
		 * free to take once it is let go.  Look again soon, without
		 * kicking the flushers: a start-all kick here wrote back
		 * pages just dirtied, far under every threshold (a block
		 * export's unflushed write was in the plugin at once), and
		 * the wait was up to PAGE_WAIT_NS.  (A lock holder never
		 * waits for a page: a claim lets its file's lock go first.) */
		if (busy) {
			atomic_fetch_add(&c->st_busy_waits, 1);
			busy = 0;
			if (c->free_gen == gen)
				wbc_cond_timedwait_ns(&c->free_cond, &c->lru_lock, busy_wait);
			busy_wait = WBC_MIN(busy_wait * 2, BUSY_WAIT_MAX_NS);
			gen = c->free_gen;
			swept = c->nr_pages;   /* one turn: the referenced bits are clear */
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
		int e = c->alloc_ops->dead_error(c, wbc_now_ns());
		if (e && dead_seen) {
			pthread_mutex_lock(&c->lru_lock);
			waiter_unregister_locked(c, &registered);
			pthread_mutex_unlock(&c->lru_lock);
			*err = e;
			return NULL;
		}
		dead_seen = e != 0;
		c->alloc_ops->wakeup_writeback(c, true);
		pthread_mutex_lock(&c->lru_lock);
		/* a page freed or cleaned since the sweep: look again */
		if (c->free_gen == gen)
			wbc_cond_timedwait_ns(&c->free_cond, &c->lru_lock, PAGE_WAIT_NS);
		gen = c->free_gen;
		swept = 0;
	}
}
