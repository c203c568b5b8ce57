/*
 * The engine's shared objects: the cache, its groups, its devices and
 * their inodes.  Every layer from mm up works on these structures, so
 * they are defined once, here, and each group of fields says which layer
 * owns it:
 *
 *   [mm]   layer mm (src/mm: arena, pages, page index, page counters)
 *   [fs]   layer fs (src/fs: inodes, names, handles, error sequences)
 *   [wb]   layer writeback (src/writeback: dirty lists, bios, flusher)
 *   [th]   layer throttle (src/throttle: thresholds, bandwidth, pauses)
 *   [core] the top (src/core: cache and device lifetime, the I/O paths)
 *
 * The owner sets a field up, tears it down and defines what it means;
 * other layers read it, or change it only as the comment says.  Layers
 * call only down (src/internal.h has the order and the locks).
 *
 * This header includes only the types of the layers (mm/page.h,
 * mm/pagemap.h, mm/counters.h, fs/types.h, writeback/types.h), never
 * what a layer offers as functions: a lower layer that includes it sees
 * the fields of the shared structures and nothing it could call up.
 */
#ifndef WBC_OBJECTS_H
#define WBC_OBJECTS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wbcache.h"
#include "wbcache_backend.h"
#include "base/base.h"
#include "mm/page.h"
#include "mm/pagemap.h"
#include "mm/counters.h"
#include "fs/types.h"
#include "writeback/types.h"

struct backend;          /* bio/bio.h */
struct wbc_bio;          /* bio/bio.h */
struct dirty_bucket;     /* writeback/writeback.h */
struct page_alloc_ops;   /* mm/mm.h */
struct wb_throttle_ops;  /* writeback/writeback.h */
struct dio_range;        /* core/file.c */

/* ------------------------------------------------------------------ */
/* inodes (cached files)                                                */

/* [wb] inode->state */
enum {
	I_DIRTY = 1u << 0,   /* in the inbox or on b_dirty / b_io / b_more_io */
	I_SYNC  = 1u << 1,   /* being written by the flusher, off the lists */
	/* with I_DIRTY: a write failed under the retry policy
	 * (mark_inode_retry): the file goes on b_more_io, which every pass
	 * takes, and is written again once its backoff is over, not only
	 * when it has been dirty for dirty_expire again */
	I_RETRY = 1u << 2,
	/* with I_DIRTY: listed by a write's completion only to trim the
	 * backend's copy back to the file's size (mark_inode_trim), on
	 * b_more_io: the next pass trims it, and does not write pages
	 * dirtied since (they wait for their own expiry) */
	I_TRIM  = 1u << 3,
};

/*
 * Laid out by who touches what, in 64-byte lines (inodes are allocated
 * 64-byte aligned): line 0 is what the dirty lists and the flusher's first
 * look at a file need; lines 1-2 are inode->lock and what writeback and
 * its completion read and write under it; the rest is touched at creation,
 * lookup and teardown.  The layout is by line, not by owner: each field
 * names its owner.
 */
struct inode {
	/* line 0 */
	/* [wb] dirty tracking (dirty.c): state changes by CAS, no lock */
	_Atomic unsigned state;     /* I_DIRTY, I_SYNC */
	/* [fs] handles + dirty lists + bios in flight; atomic: only the drop
	 * to zero happens under its name shard's lock (iput) */
	atomic_uint refs;
	/* [wb] written by the thread that dirties a clean file (before the
	 * push), then by the flusher */
	uint64_t dirtied_when;      /* ns: first dirtied since last clean */
	/* [wb] next on an inbox chain (set before the push), then on b_dirty /
	 * b_io / b_more_io (dev->list_lock) or a flusher's private queue */
	struct inode *wb_next;
	/* [fs] fixed at creation (iget) */
	struct wbc_dev *dev;
	void *obj;                  /* backend object */
	struct wbc_group *group;    /* fixed at creation; may be NULL */

	/* lines 1-2 */
	/* [fs] the inode's lock: guards what follows, the page index and the
	 * flags of its pages (mm/page.h) */
	pthread_mutex_t lock __attribute__((aligned(64)));
	/* inode->lock */
	/* pages DIRTY and WRITEBACK: changed with the flags (mm/page.h) */
	uint64_t nr_dirty, nr_writeback;
	unsigned waiters;           /* [fs] threads in inode_wait_locked */
	uint32_t nr_at_risk;        /* [wb] pages PG_ERROR: failed, to be retried */
	struct pagemap map;         /* [mm] the page index ([fs] made and freed) */
	uint64_t i_size;            /* [fs] */
	/* [fs] size the backend object has (our view); raised by writeback's
	 * completion */
	uint64_t backend_size;
	uint64_t writeback_index;   /* [wb] where the next cyclic pass starts */
	uint64_t retry_after;       /* [wb] ns: no background retry before (errors) */
	uint64_t nr_pages;          /* [mm] pages in the index */
	uint64_t retry_backoff_ns;  /* [wb] */
	struct errseq wb_err;       /* [fs] recorded by writeback's completion */
	/* [wb] dev->flush_gen when a write of the file last completed
	 * (through the cache or direct), or when it was opened with data:
	 * a failed flush of the device is the error of the files written
	 * since its last good one (dev_record_error_files) */
	uint64_t written_gen;
	/* [fs] open handles through the cache and direct (WBC_O_DIRECT):
	 * never both at once (fs/handle.c) */
	uint32_t nr_cached_handles, nr_direct_handles;
	/* [core] direct I/Os in flight (core/file.c): none overlap */
	struct dio_range *dio_ranges;

	/* [fs] */
	pthread_cond_t wait;        /* page unlocked, writeback ended, sizing ended */
	pthread_rwlock_t rwsem;     /* the I/O paths' (core/file.c) */
	/* [core] the old per-file lock of file_lock=file (core/file.c,
	 * writeback/write.c): writers hold it across a page's write,
	 * writeback across the submission of the file's run.  Unused (never
	 * taken) under file_lock=page, the default */
	pthread_mutex_t file_lock;
	char *name;                 /* = name_buf, allocated with the inode */
	uint64_t hash;              /* wbc_name_hash(name), fixed */
	/* its name_shard's lock */
	struct inode *hash_next;
	/* the pointer that points here: O(1) unhash; NULL once unhashed
	 * (wbc_file_remove: a removed file) */
	struct inode **hash_pprev;
	/* its name_shard's lock: the backend opens, closes or removes the
	 * name (INODE_OPENING, INODE_CLOSING, INODE_REMOVING, fs/inode.c);
	 * 0 otherwise */
	uint8_t hstate;
	/* inode->lock (here, beside hstate, where the padding is) */
	bool sizing;                /* [fs] truncate/size sync owns the backend size */
	/* [fs] wbc_file_remove decided to remove it: an opener that took
	 * its reference before the name was shut (INODE_REMOVING) lets go
	 * and looks the name up again (fs/handle.c) */
	bool removing;
	/* [fs] wbc_file_remove calls holding a handle of it: theirs do not
	 * make it busy (the first removes it, the others then get ENOENT) */
	uint8_t nr_removers;
	uint32_t name_cap;          /* bytes of name_buf: fixed */
	char name_buf[];
};

/* Inodes are allocated 64-byte aligned below 2^48 (every Linux user
 * address unless mmap is asked for higher ones): an inbox's top packs
 * two of them with a count into 16 bytes (writeback/dirty.c).  fs
 * allocates them so (inode_new). */
#define INODE_ADDR_BITS 48
static inline bool inode_addr_ok(const void *p)
{
	return !((uintptr_t)p & 63) && !((uintptr_t)p >> INODE_ADDR_BITS);
}

/* ------------------------------------------------------------------ */
/* groups                                                               */

/* [core] a group's pages on one device: made at the first open in the
 * group of a file of that device (core/file.c), before any of its pages
 * is counted, freed with the group.  The throttle takes the group's own
 * pages on dead devices out of the group's domain (dom_group_writer). */
struct wbc_group_dev {
	struct wbc_dev *dev;
	struct wbc_group_dev *next; /* set before it is published */
	struct dirty_ctr ctr;       /* [mm] accounting (mm/account.c) */
};

/* [core] made by wbc_group_create, freed at close */
struct wbc_group {
	struct wbc_cache *cache;
	struct wbc_group *next;     /* set before the group is published */
	uint64_t thresh, bg_thresh; /* [th] pages */
	struct dirty_ctr ctr;       /* [mm] accounting (mm/account.c) */
	/* [core] by device: pushed at the head under the cache's dev_lock,
	 * never removed before close, read without a lock */
	struct wbc_group_dev *_Atomic devs;
};

/* ------------------------------------------------------------------ */
/* device                                                               */

/* [core] made by dev_add_be, stopped by dev_stop and freed by dev_free
 * (core/device.c) once every device of the cache is stopped */
struct wbc_dev {
	struct wbc_cache *cache;
	struct wbc_dev *next;       /* cache->dev_lock */
	unsigned id;
	struct backend *be;

	/* [fs] the name hash, in shards by the name's hash, each with its
	 * lock, so opens and the drops of last references rarely meet
	 * (fs/inode.c) */
	struct name_shard shards[NAME_SHARDS];

	/* [wb] newly dirtied files: a stack per CPU slot that writers push
	 * to and the flusher empties (dirty.c); and one more, INBOX_RETRY
	 * (the last), for the files whose writeback failed (retry policy),
	 * which the flusher files with b_more_io */
	struct inbox_slot inbox[PCPU_SLOTS + 1];
	/* [wb] a listed file's write failed: it is marked I_RETRY where it
	 * is, and the flusher's next drain moves it to b_more_io */
	atomic_bool retry_listed;
	/* [wb] flipped by each sync before it drains the inbox: writers
	 * count their filing in inbox[].marking[mark_epoch & 1], and the
	 * sync waits for the old parity's counts (dirty.c, dirty_wait_marks) */
	atomic_uint mark_epoch;
	/* [wb] syncs that found a writer's filing in progress and waited */
	atomic_ullong mark_waits;
	/* [wb] a test's hook (dirty_mark_pause): called once by the next
	 * writer that wins a clean -> dirty CAS, before it files the file */
	void (*_Atomic mark_pause)(void *);
	void *mark_pause_arg;

	/* [wb] the flusher's lines: its list lock and what it guards */
	pthread_mutex_t list_lock __attribute__((aligned(64)));
	atomic_ullong nr_taken;     /* in a flusher's batch (dirty_take) */
	uint64_t list_locked_at;    /* list_lock: when it was taken (ns) */
	uint64_t list_locked_cpu;   /* list_lock: the holder's CPU time then */
	struct lock_stat list_lock_stat;       /* wall time held */
	struct lock_stat list_lock_cpu_stat;   /* holder's CPU time held */
	atomic_ullong list_lock_waits;         /* takes that found it held */
	/* list_lock: dirty files (dirty.c).  Only the flusher (or close,
	 * after it stopped) changes them, under the lock; it may read them
	 * without.  The counts are stored with atomic stores (count_add), so
	 * that stats read them without the lock. */
	struct list_head buckets;   /* b_dirty: time buckets, oldest first */
	struct dirty_bucket *bucket_pool;   /* free buckets (the flusher's) */
	uint64_t bucket_ns;         /* a bucket's width in time (fixed) */
	struct list_head io_buckets;/* b_io: queued buckets, then ... */
	struct ino_queue b_io;      /* ... these files (from b_more_io) */
	struct ino_queue b_more_io; /* used their slice; taken after b_io */
	uint64_t nr_b_dirty, nr_b_io, nr_b_more_io, nr_buckets, bucket_seq;
	/* list_lock: dirty_list=list (the old policy, dirty.c): b_dirty as
	 * one list in dirtying order, oldest first; writers append to it */
	struct ino_queue l_dirty;
	/* [wb] the lists' counters for wbc_dev_debug: takes of list_lock
	 * by writers (dirty_list=list), queue_io passes, the files they moved
	 * to b_io and the inodes they walked, and the most in one pass */
	atomic_ullong list_lock_writer_takes, queue_io_passes, queue_io_moved,
		      queue_io_walked, queue_io_max_moved, queue_io_max_walked;

	/* [wb] the flusher's work (writeback/flusher.c) */
	pthread_mutex_t work_lock __attribute__((aligned(64)));
	pthread_cond_t work_cond;   /* wakes the flusher */
	pthread_cond_t done_cond;   /* sync work finished */
	struct list_head work_list; /* work_lock */
	bool stop, start_all, kicked;   /* work_lock */
	/* set under work_lock when sync work is queued or the flusher is to
	 * stop; read without it by a pass deciding whether to yield */
	atomic_bool work_hint;
	pthread_t thread;
	bool thread_started;
	/* what the flusher did, for tests: turns of its loop, passes
	 * (wb_writeback calls) and files a pass put back untouched because
	 * their device backs off after errors (retry_after) */
	atomic_ullong flusher_turns, wb_passes, wb_backoff_skips;

	/* [wb] the bio pool (writeback/pool.c) */
	pthread_mutex_t io_lock __attribute__((aligned(64)));
	pthread_cond_t io_cond;
	struct wbc_bio *bio_pool;   /* all bios; io_lock guards the free list */
	struct wbc_bio *bio_free;   /* oldest first ... */
	struct wbc_bio **bio_free_tail;   /* ... and where to append */
	struct iovec *iov_pool;
	struct page **page_pool;
	unsigned inflight, io_waiters;
	/* io_lock: bios in flight by drain epoch, and the epoch new bios
	 * count in (its low bit): a drain waits for the bios before it only
	 * (dev_drain) */
	unsigned inflight_ep[2], io_epoch;
	unsigned nr_bios, bio_wake_batch;   /* fixed */
	unsigned bio_maxp;          /* fixed: pages a bio holds at most */
	uint64_t busy_since;        /* io_lock: when inflight went 0 -> 1 */
	uint64_t busy_ns;           /* io_lock: time with I/O in flight, total */

	struct dirty_ctr ctr;       /* [mm] this device's pages (mm/account.c) */
	struct pcount dirtied_pages;/* [mm] ever dirtied: the dirty rate */
	/* [wb] bytes written back (completion), read by bandwidth */
	atomic_ullong completed_bytes __attribute__((aligned(64)));

	/* [core] tunables (spec options), fixed after add */
	int on_error;                   /* WBC_ON_ERROR_RETRY or _DROP */
	/* retry policy: how long writes may fail without one succeeding
	 * before callers that wait for the device get its error */
	uint64_t retry_timeout_ns;
	unsigned min_ratio, max_ratio;  /* percent of thresh */
	uint64_t max_bytes;             /* 0: none */
	bool strict_limit;
	/* old policies, for experiments (wbcache lab): a fixed writeback
	 * chunk per file and pass (chunk=SIZE; 0: from the bandwidth), and
	 * the 2011 throttle (throttle=2011), a fixed limit on the I/Os in
	 * flight (max_inflight=N; 0: the backend's queue depth) */
	uint64_t chunk_bytes;
	bool throttle_2011;
	unsigned max_inflight;
	/* the old policies, for experiments (wbcache lab): dirty_list
	 * (WBC_DIRTY_LIST_*, writeback/dirty.c) and file_lock
	 * (WBC_FILE_LOCK_*, core/file.c and writeback/write.c) */
	int dirty_list, file_lock;
	/* [core] file_lock=file: takes of a file's lock that found it held,
	 * and the time they waited (ns) */
	atomic_ullong file_lock_waits, file_lock_wait_ns;

	/* [wb] Failing writes (the retry policy; dev_write_failed and _ok in
	 * completions, dev_dead_error for waiters): lock-free, read by
	 * throttled writers.  fail_since: when the first write failed since
	 * the last one that succeeded (ns; 0: none failing); last_err: the
	 * latest write error; at_risk_pages: the device's pages dirty again
	 * after a failed write (its part of the cache's st_at_risk_pages;
	 * fs uncharges the ones it drops). */
	atomic_ullong fail_since __attribute__((aligned(64)));
	atomic_int last_err;
	atomic_llong at_risk_pages;

	/* [th] bandwidth.c: bw_lock (updates); readers use the atomics */
	pthread_mutex_t bw_lock __attribute__((aligned(64)));
	uint64_t bw_stamp_ns, bw_completed, bw_dirtied, bw_busy;
	double balanced_ratelimit;      /* pages/s */
	bool bw_measured;               /* write_bw is a measurement, not INIT_BW */
	atomic_ullong write_bw;         /* bytes/s */
	atomic_ullong avg_write_bw;     /* bytes/s */
	atomic_ullong dirty_ratelimit;  /* pages/s */
	/* flexible proportions: cache->prop_lock */
	double prop_events;             /* completed pages, halved every period */
	/* a local-throttle thread was throttled on the device since the last
	 * rate update (its writers' line is the device's own domain) */
	atomic_bool local_throttled;
	/* the group whose line held a writer to the device since the last
	 * rate update (NULL: none), so that the update balances that line */
	struct wbc_group *_Atomic throttled_group;
	/* pauses of writers to this device, and their total length (ns) */
	atomic_ullong st_pauses, st_paused_ns;

	/* [fs] the device's error sequence (fs/errseq.c, dev_record_error) */
	pthread_mutex_t err_lock __attribute__((aligned(64)));
	struct errseq wb_err;       /* err_lock: any writeback error of the device */
	uint32_t sync_err_since;    /* err_lock: [wb] reported through wbc_dev_sync */
	/* [wb] flushes of the whole device begun, from 1: a write that
	 * completes records it in its file (written_gen); flush_good (the
	 * flusher's) is the generation since which no good flush covers the
	 * writes, the scope of a failed one (dev_record_error_files) */
	atomic_uint_fast64_t flush_gen;
	uint64_t flush_good;
};

/* ------------------------------------------------------------------ */
/* cache                                                                */

/* [core] made by wbc_cache_open, freed by wbc_cache_close (core/cache.c) */
struct wbc_cache {
	struct wbc_config cfg;
	/* [core] this cache's number, unique in the process (never reused,
	 * as an address is): a thread's check interval is one cache's
	 * (throttle.c) */
	uint64_t uid;
	/* [mm] the arena's geometry (mm/arena.c), fixed at open */
	uint32_t page_shift;
	size_t page_size;
	uint64_t nr_pages;
	char *arena;
	size_t arena_len;
	size_t pages_len;           /* bytes mapped for pages[] */
	struct page *pages;
	/* [core] the calls the lower layers make up, set at open:
	 * page_alloc's (mm/mm.h) and the flusher's (writeback/writeback.h) */
	const struct page_alloc_ops *alloc_ops;
	const struct wb_throttle_ops *wb_ops;

	/* [mm] lru_lock and what it guards, on lines of their own: the
	 * arena's geometry above is read by every copy */
	pthread_mutex_t lru_lock __attribute__((aligned(64)));
	pthread_cond_t free_cond;   /* lru_lock: a page was freed */
	struct page *free_list;
	uint64_t nr_free, clock_hand;
	/* free pages kept for memalloc threads (wbc_thread_set_memalloc):
	 * others take the free list only above it, and a page they reclaim
	 * while it is short goes to the free list (set at open; raised for
	 * the deepest memalloc level seen, max_level) */
	uint64_t nr_reserve;
	int max_level;
	unsigned free_waiters;
	unsigned memalloc_waiters;  /* lru_lock: of free_waiters, memalloc threads */
	uint64_t free_gen;          /* lru_lock: pages freed or cleaned (waiters' wakeups) */

	atomic_llong nr_cached;     /* [mm] resident pages (changed with lru_lock) */

	/* read-mostly */
	uint64_t thresh __attribute__((aligned(64)));   /* [th] pages, fixed at open */
	uint64_t bg_thresh;         /* [th] */
	atomic_uint page_waiters;   /* [mm] written only by allocators that wait */

	struct dirty_ctr ctr;       /* [mm] all pages of the cache */
	/* [th] pauses */
	atomic_ullong st_pauses __attribute__((aligned(64))), st_paused_ns, st_max_pause_ns;
	/* [wb] dirty again after a write error (fs uncharges dropped ones) */
	atomic_llong st_at_risk_pages;

	/* [th] flexible proportions */
	pthread_mutex_t prop_lock __attribute__((aligned(64)));
	double prop_total;
	uint64_t prop_stamp_ns;
	/* [core] groups: pushed at the head under dev_lock, never removed
	 * before close, read without a lock (over_bg_thresh runs under
	 * work_lock) */
	struct wbc_group *_Atomic groups;
	struct pcount st_written;   /* [core] bytes through wbc_pwrite */
	/* statistics: written back, write I/Os and errors, lost ([wb]);
	 * read in ([core]); reclaimed and page waits ([mm]) */
	atomic_ullong st_written_back __attribute__((aligned(64))), st_read_in, st_reclaimed,
		      st_write_ios, st_write_errors, st_lost, st_page_waits,
		      st_busy_waits,   /* [mm] waits for a busy file's clean pages */
		      st_flush_errors; /* [core] [wb] backend flushes that failed */

	/* [core] the device list, walked by writeback and throttle under
	 * dev_lock (or without it from a list head read under it: devices
	 * are only added at the head and freed at close) */
	pthread_mutex_t dev_lock __attribute__((aligned(64)));
	struct wbc_dev *devs;       /* dev_lock */
	unsigned nr_devs;
	unsigned min_ratio_sum;     /* dev_lock: the devices' min_ratio, at most 100 */
};

#endif
