/*
 * Pages: the descriptor of one arena page and its state machine, the PG_*
 * flags (layer mm).  Every transition of every flag is drawn here, with the
 * function that makes it and the lock it holds (the global lock order is
 * at the top of src/internal.h).  UPTODATE stays set from the first
 * read-in or write on; a page is at most one of DIRTY and WRITEBACK.
 *
 *   [free]  flags 0, on the cache's free list
 *     |  ^
 *     |  +-- page_release, page_release_chain (lru_lock), from truncate and
 *     |      a file's last iput: drop_pages_from_locked (fs/inode.c,
 *     |      inode->lock; never a LOCKED or WRITEBACK page; DIRTY ones are
 *     |      uncharged).  In a teardown batch (fs) the page is set to
 *     |      LOCKED first, still bound, so that reclaim leaves it, and
 *     |      page_release_chain frees it at the batch's end.
 *     |
 *     | page_alloc (mm/page_alloc.c, lru_lock)
 *     v
 *   [in transit]  flags 0, unbound, the allocating thread's
 *     |  ^
 *     |  +-- reclaim: try_reclaim_locked (mm/page_alloc.c, lru_lock, the
 *     |      inode->lock only trylocked) takes a bound page that is none
 *     |      of DIRTY, WRITEBACK, LOCKED out of its index: flags := 0
 *     |
 *     | grab_page (core/file.c, inode->lock): inserted in the index with
 *     | flags := LOCKED, bound by page_bind (lru_lock)
 *     v
 *   [LOCKED, not UPTODATE] --- fill_page (no lock), then -------+
 *     |                        page_unlock(UPTODATE) (no lock)  |
 *     | a write covering the page (grab_page), or one           v
 *     | after fill_page (write_page), inode->lock:       [UPTODATE, clean]
 *     | UPTODATE|DIRTY, tag DIRTY                           |       ^
 *     v                                                     |       |
 *   [DIRTY] <----- a write (grab_page, inode->lock) --------+       |
 *     |  ^                                                          |
 *     |  | end_io failed under the retry policy (wb_end_io,         |
 *     |  | inode->lock): WRITEBACK -> DIRTY|ERROR, tag DIRTY        |
 *     |  +---------------------------+                              |
 *     | write_inode_pages            |                              |
 *     | (writeback/write.c,          |                              |
 *     | inode->lock, not LOCKED):    |                              |
 *     | DIRTY -> WRITEBACK in one    |                              |
 *     | store; tags DIRTY, TOWRITE   |                              |
 *     | off, WRITEBACK on            |                              |
 *     v                              |                              |
 *   [WRITEBACK] ---------------------+                              |
 *     |  writers and truncate wait for it to end (stable pages)     |
 *     |                                                             |
 *     +-- end_io: written, or failed under the drop policy ---------+
 *         (wb_end_io, inode->lock): WRITEBACK off, ERROR off
 *
 * LOCKED and WAITERS, around the copies of readers and writers:
 *   claim    grab_page (core/file.c, inode->lock): sets LOCKED on a page
 *            without it (a writer first waits for WRITEBACK to end); a
 *            write whose data is complete after its copy marks the page
 *            DIRTY in the same hold, before the copy (the flusher never
 *            takes a LOCKED page).
 *   wait     page_wait_unlocked (fs/inode.c, inode->lock): sets WAITERS,
 *            and sleeps on inode->wait when LOCKED was set.  Callers:
 *            grab_page, and sync writeback (write_inode_pages), which
 *            never takes a LOCKED page (background passes skip it).
 *   unlock   page_unlock (core/file.c, no lock): clears LOCKED and
 *            WAITERS (setting UPTODATE after a read-in) in one CAS, and
 *            takes inode->lock only to wake the waiter it saw.  Without
 *            UPTODATE (a failed read-in; a read at or past the end of
 *            the file claims no page) the page stays bound, clean and
 *            not up to date: the next claim reads it in, reclaim may
 *            take it.
 *
 * ERROR marks a page whose last writeback failed (retry policy): counted
 * at risk (cache st_at_risk_pages, dev->at_risk_pages) until it is
 * written, or dropped.
 */
#ifndef WBC_MM_PAGE_H
#define WBC_MM_PAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum {
	PG_UPTODATE  = 1u << 0,  /* data matches the file */
	PG_DIRTY     = 1u << 1,  /* newer than the backend (tag DIRTY)    */
	PG_WRITEBACK = 1u << 2,  /* I/O in flight (tag WRITEBACK)          */
	PG_LOCKED    = 1u << 3,  /* a reader or writer is copying its data */
	PG_ERROR     = 1u << 4,  /* its last writeback failed (retry policy) */
	PG_WAITERS   = 1u << 5,  /* someone waits on ino->wait for PG_LOCKED */
};

struct inode;

/* One page descriptor per arena page; descriptors are allocated with the
 * arena at open and never freed before close. */
struct page {
	struct inode *inode;     /* owner: changed under lru_lock AND inode->lock */
	uint64_t index;          /* page index in the owner */
	_Atomic uint32_t flags;  /* PG_*: see pg_flags() */
	atomic_bool referenced;  /* CLOCK second-chance bit, lock-free */
	bool on_free;            /* lru_lock */
	struct page *next_free;  /* lru_lock */
};

/*
 * Page flags are one atomic word.  They change under the owner's
 * inode->lock, with one exception: the thread that holds PG_LOCKED drops it
 * (and PG_WAITERS) in one atomic step without the lock (page_unlock in
 * core/file.c), so a writer takes the inode lock once per page, before its
 * copy.  A thread that waits for PG_LOCKED sets PG_WAITERS under the inode
 * lock first; the unlocker that sees it takes the lock to wake it.
 * Because a page is claimed only under the inode lock, whoever holds that
 * lock and sees PG_LOCKED clear may change the flags with single atomic
 * steps without racing anything but an unlock of another page.  Loads
 * acquire and the unlock releases: the data copied under PG_LOCKED is
 * visible to whoever sees the page unlocked.
 */
static inline uint32_t pg_flags(struct page *p)
{
	return atomic_load_explicit(&p->flags, memory_order_acquire);
}
static inline void pg_set(struct page *p, uint32_t f)
{
	atomic_fetch_or_explicit(&p->flags, f, memory_order_relaxed);
}
static inline void pg_clear(struct page *p, uint32_t f)
{
	atomic_fetch_and_explicit(&p->flags, ~f, memory_order_relaxed);
}

#endif
