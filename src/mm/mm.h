/*
 * Layer mm, on base alone: the page arena, page allocation and reclaim
 * (mm/arena.c, mm/page_alloc.c), the per-file page index (mm/pagemap.h),
 * the page state machine (mm/page.h) and the page counters
 * (mm/counters.h, mm/account.c).  It knows the inode only as the owner of
 * a page index and of the lock that guards it, and the device and group
 * only as domains of the counters.
 *
 * LOCKS (the global order is at the top of src/internal.h).  mm owns
 * cache->lru_lock, with free_cond: the free list, the CLOCK hand, the
 * binding of a page to an inode (page->inode and index, changed under
 * lru_lock AND the inode's lock) and nr_cached.  lru_lock nests inside
 * inode->lock: page_bind and page_release are called with the page's
 * inode->lock held and take lru_lock; reclaim, which holds lru_lock, only
 * TRYLOCKS an inode->lock.  page_free_locked wants lru_lock held;
 * page_alloc, which may wait for writeback to free a page, and
 * page_release_chain and cache_wake_page_waiters want no lock held.  The
 * page index is used under its inode's lock; the counters take no lock.
 *
 * CALLS UP.  None directly: when no page can be had, page_alloc asks the
 * layers above through c->alloc_ops (struct page_alloc_ops, set at open),
 * with no lock held.
 */
#ifndef WBC_MM_H
#define WBC_MM_H

#include "objects.h"

static inline char *page_data(const struct wbc_cache *c, const struct page *p)
{
	return c->arena + ((size_t)(p - c->pages) << c->page_shift);
}

/* What page_alloc asks of the layers above when no page is free and none
 * can be reclaimed (the writeback layer's functions; core/cache.c sets
 * them at open).  Called with no lock held. */
struct page_alloc_ops {
	/* The error of the cache's dead devices when every device that
	 * holds unclean pages is dead, else 0 (cache_dead_error). */
	int (*dead_error)(struct wbc_cache *c, uint64_t now);
	/* Start the writeback that will free pages
	 * (wakeup_flusher_threads). */
	void (*wakeup_writeback)(struct wbc_cache *c, bool start_all);
};

/* arena.c */
/* Sizes of the arena (*arena_len) and of the descriptors (*pages_len) for
 * @nr_pages of 2^@shift bytes: 0 or -ENOMEM (see arena.c). */
int arena_sizes(uint64_t nr_pages, uint32_t shift, size_t *arena_len, size_t *pages_len);
/* Map the arena and the page descriptors of @c (page_shift, page_size,
 * nr_pages, arena_len and pages_len set), commit them, and put every page
 * on the free list.  0, or -errno with nothing mapped. */
int arena_init(struct wbc_cache *c);
/* Unmap what arena_init mapped: 0 or -errno. */
int arena_destroy(struct wbc_cache *c);
bool cache_page_in_arena(const struct wbc_cache *c, const void *addr);

/* page_alloc.c */
/* A free page, waiting for one as long as writeback can free one; NULL
 * and -errno in *@err once only dead devices hold the unfreeable pages
 * (cache_dead_error). */
struct page *page_alloc(struct wbc_cache *c, int *err);
/* A free or reclaimable page now, or NULL: never waits (a reader that
 * holds locked pages of a file must not wait for one). */
struct page *page_try_alloc(struct wbc_cache *c);
/* Grow the reserve for the calling thread's memalloc level L (at an
 * open): 0, or -ENOBUFS when the cache is too small (L(L-1) pages over
 * half of it). */
int page_reserve_level(struct wbc_cache *c);
void page_free_locked(struct wbc_cache *c, struct page *p);  /* lru_lock held */
void page_bind(struct wbc_cache *c, struct page *p, struct inode *ino, uint64_t index);
void page_release(struct wbc_cache *c, struct page *p);  /* unbind + free */
/* page_release of the @n pages chained by next_free from @p, each out of
 * its inode's index and PG_LOCKED since (one lru_lock hold). */
void page_release_chain(struct wbc_cache *c, struct page *p, unsigned n);
void cache_wake_page_waiters(struct wbc_cache *c);

/* account.c: page state changes counted in the domains of a file (its
 * device, its group, the cache); lock-free, per CPU. */
void account_dirtied(struct inode *ino, long n);
void account_writeback(struct inode *ino, long n);   /* dirty -> writeback */
void account_cleaned(struct inode *ino, long n);     /* writeback -> clean */
/* The counters of @dev, @g (may be NULL) and their cache at once. */
void account_domains(struct wbc_dev *dev, struct wbc_group *g, long dirty, long unclean);
/* Group @g's counters of its pages on @dev (made before any is counted). */
struct wbc_group_dev *group_dev(struct wbc_group *g, struct wbc_dev *dev);
void account_dropped(struct inode *ino, long n);     /* dirty -> gone */
void account_redirtied(struct inode *ino, long n);   /* writeback -> dirty */

#endif
