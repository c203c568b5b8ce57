/*
 * wbcache private types.
 *
 * LOCK ORDERING (outermost first; a thread holding a lock may take only
 * locks listed below it):
 *
 *   inode->rwsem        pthread rwlock: shared by pread/pwrite, exclusive
 *                       for truncate.  Never taken by flusher or completion.
 *     inode->lock       the inode's page index, the flags of its pages
 *                       (except the lock-free PG_LOCKED release, see
 *                       pg_flags), i_size, backend_size, counters, errseq.
 *       cache->lru_lock free list, CLOCK hand, page->inode/index binding,
 *                       nr_cached.  Reclaim holds lru_lock and only
 *                       TRYLOCKS inode->lock.
 *   dev->list_lock      the time buckets (b_dirty), b_io, b_more_io
 *                       (dirty.c) (leaf).  Only the device's flusher takes
 *                       it (or close, after the flusher stopped): it
 *                       changes the lists in O(1) splices under it; stats
 *                       read the counts without it.  Writers take no lock
 *                       to dirty a file: they push it on the device's
 *                       inbox with a CAS (lock-free), and the flusher
 *                       takes an inbox slot's files with another.
 *   name_shard->lock    one shard of a device's name hash, the drop of
 *                       the last reference of an inode in it (refs is
 *                       atomic; iput takes the lock only to drop to zero),
 *                       and the shard's free inodes (taken again after a
 *                       teardown, never held across it) (leaf).
 *   dev->bw_lock        rate estimation of one device (bandwidth.c; only
 *                       ever trylocked, so no thread waits for it)
 *     cache->dev_lock   the device list, group creation
 *       dev->work_lock  (wakeup_flusher_threads kicks under dev_lock)
 *       cache->prop_lock  flexible proportions of the devices
 *     dev->io_lock      bio pool, in-flight count, busy time (leaf)
 *   dev->work_lock      work queue, flusher wakeups (leaf).
 *   dev->err_lock       the device's errseq (leaf).
 *   handle table lock   (file.c, leaf).
 *   backend-private locks (the mem backend's name shards and object
 *   rwlocks, the model's queue lock, the
 *   file backend's submission lock and descriptor-cache lock) are leaves:
 *   backends call end_io with none of them held; an opener device's
 *   callback runs under the descriptor-cache lock and takes none of ours.
 *
 * No lock is held across backend submission, a wait for I/O, a sleep, or a
 * read-in from the backend (invariant 6 of DESIGN.md): waits use condition
 * variables, which release the mutex.
 */
#ifndef WBC_INTERNAL_H
#define WBC_INTERNAL_H

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

/* ------------------------------------------------------------------ */
/* page index (pagemap.c): a radix tree with per-node tag bitmaps        */

enum pm_tag { PM_TAG_DIRTY, PM_TAG_WRITEBACK, PM_TAG_TOWRITE, PM_NR_TAGS };
#define PM_BITS 6
#define PM_FANOUT (1u << PM_BITS)

struct pm_node;
struct pagemap {
	struct pm_node *root;
	uint64_t count;        /* entries present */
	/* With no tree (root NULL), the entry at index 0 lives here: a file
	 * of one page needs no node (the kernel's xarray does the same). */
	void *single;
	unsigned single_tags;  /* bit t: tag t */
};

void pm_init(struct pagemap *pm);
void pm_destroy(struct pagemap *pm);       /* frees nodes, not entries */
void *pm_lookup(const struct pagemap *pm, uint64_t index);
int pm_insert(struct pagemap *pm, uint64_t index, void *entry);  /* 0, -EEXIST, -ENOMEM */
void *pm_delete(struct pagemap *pm, uint64_t index);             /* removed entry or NULL */
void pm_tag_set(struct pagemap *pm, uint64_t index, enum pm_tag tag);
void pm_tag_clear(struct pagemap *pm, uint64_t index, enum pm_tag tag);
bool pm_tag_get(const struct pagemap *pm, uint64_t index, enum pm_tag tag);
/* First entry at index >= start carrying @tag (or any entry for tag < 0);
 * sets *index.  NULL when none. */
void *pm_next(const struct pagemap *pm, uint64_t start, int tag, uint64_t *index);
bool pm_any_tagged(const struct pagemap *pm, enum pm_tag tag);
void pm_check(const struct pagemap *pm);   /* asserts the structure (tests) */

/* ------------------------------------------------------------------ */
/* pages                                                                */

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

/* ------------------------------------------------------------------ */
/* the engine's side of the backend interface (bio.c)                   */

enum bio_op { BIO_READ = WBC_IO_READ, BIO_WRITE = WBC_IO_WRITE };
enum { WBC_ON_ERROR_RETRY, WBC_ON_ERROR_DROP };

struct wbc_bio;
typedef void (*bio_end_io_t)(struct wbc_bio *bio);

/*
 * One I/O of the engine.  io is what the backend sees (wbcache_backend.h);
 * the rest is the engine's.  off, len, iov and iovcnt describe the whole
 * I/O; after a short write io describes the part still to do (io.iov
 * points into iov, advanced past what was written).
 */
struct wbc_bio {
	struct wbc_io io;
	struct backend *be;
	uint64_t off;           /* byte offset */
	size_t len;             /* bytes */
	struct iovec *iov;
	int iovcnt;
	int res;                /* bytes done or -errno, set before end_io */
	size_t done;            /* bytes written before a short write's rest */
	bio_end_io_t end_io;
	void *priv;
	/* writeback bookkeeping */
	struct inode *inode;
	struct page **pages;
	unsigned nr_pages;
	struct wbc_bio *next_free;
	/* Release on submit, acquire on completion: orders the submitter's
	 * stores for completion threads (visible to ThreadSanitizer, which
	 * cannot see a backend's ordering through the kernel). */
	atomic_int handoff;
};

/* A device's backend: its operations, its context and its capabilities
 * (with the defaults filled in). */
struct backend {
	const struct wbc_backend_ops *ops;
	void *ctx;
	unsigned qd;            /* I/Os in flight at most */
	size_t max_io;          /* largest single I/O in bytes */
	size_t dio_align;       /* caps.align */
	bool single;            /* WBC_BACKEND_ONE_FILE */
};

/* bio.c */
/* Check @ops and fill @be from its caps: 0, or -EINVAL with a message. */
int backend_init(struct backend *be, const struct wbc_backend_ops *ops, void *ctx,
		 char *msg, size_t msglen);
/* Submit @n bios of @op (each with obj, off, len, iov, iovcnt, end_io
 * set): those the backend refuses are ended with its error. */
void bio_submit(struct backend *be, struct wbc_bio **bios, unsigned n);
int backend_open(struct backend *be, const char *name, bool create, void **obj,
		 uint64_t *size);
void backend_close(struct backend *be, void *obj);
int backend_resize(struct backend *be, void *obj, uint64_t size);
int backend_flush(struct backend *be, void *obj, bool datasync);
void backend_destroy(struct backend *be);
/* Read @len bytes at @off of @obj synchronously through submit; returns
 * bytes read (short at end of object) or -errno. */
ssize_t backend_read_sync(struct backend *be, void *obj, void *buf, size_t len, uint64_t off);


/* ------------------------------------------------------------------ */
/* errseq (errseq.c): per-file writeback error sequence                 */

struct errseq {
	uint32_t seq;    /* bumped on each recorded error */
	int err;         /* latest error (negative errno) */
};
void errseq_record(struct errseq *e, int err);
/* Returns the error a handle that sampled *@since has not seen, and
 * advances *@since; 0 when none. */
int errseq_check_advance(const struct errseq *e, uint32_t *since);

/* ------------------------------------------------------------------ */
/* inodes (cached files)                                                */

enum {
	I_DIRTY = 1u << 0,   /* in the inbox or on b_dirty / b_io / b_more_io */
	I_SYNC  = 1u << 1,   /* being written by the flusher, off the lists */
};

/*
 * Laid out by who touches what, in 64-byte lines (inodes are allocated
 * 64-byte aligned): line 0 is what the dirty lists and the flusher's first
 * look at a file need; lines 1-2 are inode->lock and what writeback and
 * its completion read and write under it; the rest is touched at creation,
 * lookup and teardown.
 */
struct inode {
	/* line 0 */
	/* dirty tracking (dirty.c): state changes by CAS, no lock */
	_Atomic unsigned state;     /* I_DIRTY, I_SYNC */
	/* handles + dirty lists + bios in flight; atomic: only the drop to
	 * zero happens under its name shard's lock (iput) */
	atomic_uint refs;
	/* written by the thread that dirties a clean file (before the push),
	 * then by the flusher */
	uint64_t dirtied_when;      /* ns: first dirtied since last clean */
	/* next on an inbox chain (set before the push), then on b_dirty /
	 * b_io / b_more_io (dev->list_lock) or a flusher's private queue */
	struct inode *wb_next;
	struct wbc_dev *dev;
	void *obj;                  /* backend object */
	struct wbc_group *group;    /* fixed at creation; may be NULL */

	/* lines 1-2 */
	pthread_mutex_t lock __attribute__((aligned(64)));
	/* inode->lock */
	uint64_t nr_dirty, nr_writeback;
	unsigned waiters;
	bool sizing;                /* truncate/size sync owns the backend size */
	struct pagemap map;
	uint64_t i_size;
	uint64_t backend_size;      /* size the backend object has (our view) */
	uint64_t writeback_index;   /* where the next cyclic pass starts */
	uint64_t retry_after;       /* ns: no background retry before (errors) */
	uint64_t nr_pages;
	uint64_t retry_backoff_ns;
	struct errseq wb_err;

	pthread_cond_t wait;        /* page unlocked, writeback ended, sizing ended */
	pthread_rwlock_t rwsem;
	char *name;                 /* = name_buf, allocated with the inode */
	uint64_t hash;              /* wbc_name_hash(name), fixed */
	/* its name_shard's lock */
	struct inode *hash_next;
	struct inode **hash_pprev;  /* the pointer that points here: O(1) unhash */
	uint32_t name_cap;          /* bytes of name_buf: fixed */
	char name_buf[];
};

/* A singly linked queue of inodes (linked by wb_next): append, splice at
 * either end and pop from the head, each O(1). */
struct ino_queue {
	struct inode *head, *tail;
};
static inline void iq_init(struct ino_queue *q) { q->head = q->tail = NULL; }
static inline bool iq_empty(const struct ino_queue *q) { return !q->head; }
static inline void iq_add_tail(struct ino_queue *q, struct inode *ino)
{
	ino->wb_next = NULL;
	if (q->head)
		q->tail->wb_next = ino;
	else
		q->head = ino;
	q->tail = ino;
}
static inline struct inode *iq_pop(struct ino_queue *q)
{
	struct inode *ino = q->head;
	if (ino) {
		q->head = ino->wb_next;
		ino->wb_next = NULL;
	}
	return ino;
}
/* All of @from after @to's files; @from becomes empty. */
static inline void iq_splice_tail(struct ino_queue *to, struct ino_queue *from)
{
	if (!from->head)
		return;
	if (to->head)
		to->tail->wb_next = from->head;
	else
		to->head = from->head;
	to->tail = from->tail;
	iq_init(from);
}
/* All of @from before @to's files; @from becomes empty. */
static inline void iq_splice_head(struct ino_queue *to, struct ino_queue *from)
{
	iq_splice_tail(from, to);   /* @to's files after @from's, */
	*to = *from;                /* and that is @to now */
	iq_init(from);
}
/* Inodes are allocated 64-byte aligned below 2^48 (every Linux user
 * address unless mmap is asked for higher ones): an inbox's top packs
 * two of them with a count into 16 bytes (dirty.c). */
#define INODE_ADDR_BITS 48
static inline bool inode_addr_ok(const void *p)
{
	return !((uintptr_t)p & 63) && !((uintptr_t)p >> INODE_ADDR_BITS);
}

struct wbc_file {
	struct inode *inode;
	struct wbc_dev *dev;
	uint32_t err_since;         /* errseq sample: inode->lock */
};

/* ------------------------------------------------------------------ */
/* writeback control and work                                           */

enum wb_sync_mode { WB_SYNC_NONE, WB_SYNC_ALL };
enum wb_reason { WB_REASON_BACKGROUND, WB_REASON_PERIODIC,
		 WB_REASON_START_ALL };

/* Bios a flusher pass holds back to submit together (the kernel's
 * blk_plug), for backends that take a batch (submit_many): flushed at
 * PLUG_MAX bios or the backend's max_io bytes (a streaming write is never
 * held back), before waiting for a bio, and at the end of the pass. */
#define PLUG_MAX 16
struct bio_plug {
	struct wbc_bio *bios[PLUG_MAX];
	unsigned n;
	size_t bytes;
	/* pages moved dirty -> writeback, counted at the flush (one update
	 * of the counters per plug, not per file); all of one group */
	struct wbc_group *acct_group;
	long acct_pages;
};

/* One pass over one inode (the kernel's writeback_control). */
struct wbc_ctl {
	struct bio_plug *plug;      /* NULL: submit each bio at once */
	enum wb_sync_mode sync_mode;
	long nr_to_write;           /* pages; decremented as pages are submitted */
	uint64_t range_start, range_end;   /* page indices, inclusive */
	bool range_cyclic;          /* start at writeback_index, wrap once */
	bool backoff;               /* skip a file in its error backoff */
	long pages_written;
	int err;                    /* first submission error */
	/* out, set at the end of the pass (write_inode_pages) */
	bool backed_off;            /* skipped: in its error backoff */
	bool still_dirty;           /* dirty pages left */
	bool size_dirty;            /* only the backend size is out of date */
};

/* A sync request queued for the flusher (wbc_dev_sync). */
struct wb_work {
	struct list_head list;
	bool done;
	int err;
};

/* ------------------------------------------------------------------ */
/* dirty accounting (throttle.c)                                        */

/*
 * Per-CPU counters.  Hot-path counts (pages dirtied, bytes written) are
 * striped over PCPU_SLOTS slots 64 bytes apart, chosen by the CPU the
 * caller runs on (sched_getcpu reads rseq's cpu_id: no system call), so
 * writers on different CPUs never bounce a cache line per page.  Every
 * slot is an exact atomic, so the sum is exact once updates stop; while
 * they run it may lag by the updates in flight, like the kernel's percpu
 * counters.  Readers (throttle checks, the flusher, stats) sum the slots.
 * Each slot is aligned to its own line; the structures that hold these
 * are allocated 64-byte aligned (wbc_zalloc).
 */
#define PCPU_SLOTS 16
static inline unsigned pcpu_slot(void)
{
	int cpu = sched_getcpu();
	return cpu < 0 ? 0 : (unsigned)cpu % PCPU_SLOTS;
}

struct pcount {
	struct { atomic_llong v; } __attribute__((aligned(64))) s[PCPU_SLOTS];
};
static inline void pcount_add(struct pcount *c, long long n)
{
	atomic_fetch_add_explicit(&c->s[pcpu_slot()].v, n, memory_order_relaxed);
}
long long pcount_sum(struct pcount *c);

/* Pages of one domain (the cache, a device, a group): dirty; and dirty +
 * under writeback in one counter, so that the flusher moving pages from
 * one state to the other never changes the total writers are limited by.
 * Per CPU: both counts of one CPU share its slot. */
struct dirty_ctr {
	struct { atomic_llong dirty, unclean; } __attribute__((aligned(64))) s[PCPU_SLOTS];
};

struct wbc_group {
	struct wbc_cache *cache;
	struct wbc_group *next;     /* set before the group is published */
	uint64_t thresh, bg_thresh; /* pages */
	struct dirty_ctr ctr;
};

/* The numbers of one throttling domain, read once per decision (pages). */
struct dom {
	double dirty, thresh, bg_thresh, freerun, setpoint, limit;
};

/* ------------------------------------------------------------------ */
/* lock hold times                                                      */

#define LOCK_HIST_BUCKETS 32
/* Hold times of one lock: bucket i counts holds in [2^(i-1), 2^i) ns. */
struct lock_stat {
	atomic_ullong hist[LOCK_HIST_BUCKETS];
	atomic_ullong max_ns;
};
void lock_stat_record(struct lock_stat *ls, uint64_t ns);

/* ------------------------------------------------------------------ */
/* device                                                               */

#define NAME_SHARDS 64
struct name_shard {             /* two cache lines each */
	pthread_mutex_t lock;       /* the shard's chains, the drop of the
				     * last reference of its inodes, and
				     * its free inodes */
	struct inode **tab;
	uint32_t size, n;
	/* inodes torn down, kept for reuse (linked by hash_next, oldest
	 * first): a file written back and dropped by the completion thread
	 * gives its memory to a later file a writer creates, without a
	 * free() and a malloc() in two threads' heaps */
	struct inode *free, **free_tail;
	uint32_t nfree;
} __attribute__((aligned(64)));

/*
 * One CPU slot's inbox: a lock-free stack of the files writers on that CPU
 * dirtied, newest first, linked by wb_next.  Its top is one 16-byte word,
 * changed only by compare-and-swap: the newest file, the oldest (the
 * chain's end) and how many (dirty.c, inbox_pack).  A writer pushes with
 * one CAS; the flusher takes the whole chain with another and knows its
 * ends and length without a walk.
 */
struct inbox_slot {
	union inbox_top {
		unsigned __int128 v;
		uint64_t w[2];
	} top;
	/* files pushed here, not yet filed: counted before the push and
	 * dropped after the filing, so a file is always counted */
	atomic_llong n;
	atomic_ullong retries;      /* pushes that lost a CAS race */
} __attribute__((aligned(64)));

struct wbc_dev {
	struct wbc_cache *cache;
	struct wbc_dev *next;       /* cache->dev_lock */
	unsigned id;
	struct backend *be;

	/* the name hash, in shards by the name's hash, each with its lock,
	 * so opens and the drops of last references rarely meet (file.c) */
	struct name_shard shards[NAME_SHARDS];

	/* newly dirtied files: a stack per CPU slot that writers push to
	 * and the flusher empties (dirty.c) */
	struct inbox_slot inbox[PCPU_SLOTS];

	/* the flusher's lines: its list lock and what it guards */
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

	pthread_mutex_t io_lock __attribute__((aligned(64)));
	pthread_cond_t io_cond;
	struct wbc_bio *bio_pool;   /* all bios; io_lock guards the free list */
	struct wbc_bio *bio_free;   /* oldest first ... */
	struct wbc_bio **bio_free_tail;   /* ... and where to append */
	struct iovec *iov_pool;
	struct page **page_pool;
	unsigned inflight, io_waiters;
	unsigned nr_bios, bio_wake_batch;   /* fixed */
	uint64_t busy_since;        /* io_lock: when inflight went 0 -> 1 */
	uint64_t busy_ns;           /* io_lock: time with I/O in flight, total */

	struct dirty_ctr ctr;       /* this device's pages */
	struct pcount dirtied_pages;/* ever dirtied: the dirty rate */
	atomic_ullong completed_bytes __attribute__((aligned(64)));

	/* tunables (spec options), fixed after add */
	int on_error;                   /* WBC_ON_ERROR_RETRY or _DROP */
	/* retry policy: how long writes may fail without one succeeding
	 * before callers that wait for the device get its error */
	uint64_t retry_timeout_ns;
	unsigned min_ratio, max_ratio;  /* percent of thresh */
	uint64_t max_bytes;             /* 0: none */
	bool strict_limit;

	/* Failing writes (the retry policy; dev_write_failed and _ok in
	 * completions, dev_dead_error for waiters): lock-free, read by
	 * throttled writers.  fail_since: when the first write failed since
	 * the last one that succeeded (ns; 0: none failing); last_err: the
	 * latest write error; at_risk_pages: the device's pages dirty again
	 * after a failed write (its part of the cache's st_at_risk_pages). */
	atomic_ullong fail_since __attribute__((aligned(64)));
	atomic_int last_err;
	atomic_llong at_risk_pages;

	/* bandwidth.c: bw_lock (updates); readers use the atomics */
	pthread_mutex_t bw_lock __attribute__((aligned(64)));
	uint64_t bw_stamp_ns, bw_completed, bw_dirtied, bw_busy;
	double balanced_ratelimit;      /* pages/s */
	bool bw_measured;               /* write_bw is a measurement, not INIT_BW */
	atomic_ullong write_bw;         /* bytes/s */
	atomic_ullong avg_write_bw;     /* bytes/s */
	atomic_ullong dirty_ratelimit;  /* pages/s */
	/* flexible proportions: cache->prop_lock */
	double prop_events;             /* completed pages, halved every period */

	pthread_mutex_t err_lock __attribute__((aligned(64)));
	struct errseq wb_err;       /* err_lock: any writeback error of the device */
	uint32_t sync_err_since;    /* err_lock: reported through wbc_dev_sync */
};

/* ------------------------------------------------------------------ */
/* cache                                                                */

struct wbc_cache {
	struct wbc_config cfg;
	uint32_t page_shift;
	size_t page_size;
	uint64_t nr_pages;
	char *arena;
	size_t arena_len;
	size_t pages_len;           /* bytes mapped for pages[] */
	struct page *pages;

	/* lru_lock and what it guards, on lines of their own: the arena's
	 * geometry above is read by every copy */
	pthread_mutex_t lru_lock __attribute__((aligned(64)));
	pthread_cond_t free_cond;   /* lru_lock: a page was freed */
	struct page *free_list;
	uint64_t nr_free, clock_hand;
	unsigned free_waiters;

	atomic_llong nr_cached;     /* resident pages (changed with lru_lock) */

	/* read-mostly */
	uint64_t thresh __attribute__((aligned(64)));   /* pages, fixed at open */
	uint64_t bg_thresh;
	atomic_uint page_waiters;   /* written only by allocators that wait */

	struct dirty_ctr ctr;       /* all pages of the cache */
	atomic_ullong st_pauses __attribute__((aligned(64))), st_paused_ns, st_max_pause_ns;
	atomic_llong st_at_risk_pages;  /* dirty again after a write error */

	pthread_mutex_t prop_lock __attribute__((aligned(64)));  /* flexible proportions */
	double prop_total;
	uint64_t prop_stamp_ns;
	/* groups: pushed at the head under dev_lock, never removed before
	 * close, read without a lock (over_bg_thresh runs under work_lock) */
	struct wbc_group *_Atomic groups;
	struct pcount st_written;   /* bytes through wbc_pwrite */
	atomic_ullong st_written_back __attribute__((aligned(64))), st_read_in, st_reclaimed,
		      st_write_ios, st_write_errors, st_lost, st_page_waits;

	pthread_mutex_t dev_lock __attribute__((aligned(64)));
	struct wbc_dev *devs;       /* dev_lock */
	unsigned nr_devs;
};

/*
 * Page flags are one atomic word.  They change under the owner's
 * inode->lock, with one exception: the thread that holds PG_LOCKED drops it
 * (and PG_WAITERS) in one atomic step without the lock (page_unlock in
 * file.c), so a writer takes the inode lock once per page, before its copy.
 * A thread that waits for PG_LOCKED sets PG_WAITERS under the inode lock
 * first; the unlocker that sees it takes the lock to wake it.  Because a
 * page is claimed only under the inode lock, whoever holds that lock and
 * sees PG_LOCKED clear may change the flags with single atomic steps
 * without racing anything but an unlock of another page.  Loads acquire
 * and the unlock releases: the data copied under PG_LOCKED is visible to
 * whoever sees the page unlocked.
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

static inline char *page_data(const struct wbc_cache *c, const struct page *p)
{
	return c->arena + ((size_t)(p - c->pages) << c->page_shift);
}

/* cache.c */
/* A free page, waiting for one as long as writeback can free one; NULL
 * and -errno in *@err once only dead devices hold the unfreeable pages
 * (cache_dead_error). */
struct page *page_alloc(struct wbc_cache *c, int *err);
void page_free_locked(struct wbc_cache *c, struct page *p);  /* lru_lock held */
void page_bind(struct wbc_cache *c, struct page *p, struct inode *ino, uint64_t index);
void page_release(struct wbc_cache *c, struct page *p);  /* unbind + free */
/* page_release of the @n pages chained by next_free from @p, each out of
 * its inode's index and PG_LOCKED since (one lru_lock hold). */
void page_release_chain(struct wbc_cache *c, struct page *p, unsigned n);
void cache_wake_page_waiters(struct wbc_cache *c);
bool cache_page_in_arena(const struct wbc_cache *c, const void *addr);

/* file.c */
struct inode *iget(struct wbc_dev *dev, const char *name, bool create,
		   struct wbc_group *group, int *err);
void igrab(struct inode *ino);
void iput(struct inode *ino);
void inode_wait_locked(struct inode *ino);
void inode_wake_locked(struct inode *ino);
/* ino->lock held: wait once for @p's PG_LOCKED to clear (the caller looks
 * the page up again afterwards). */
void page_wait_unlocked(struct inode *ino, struct page *p);
int inode_sync_size(struct inode *ino);
int names_init(struct wbc_dev *dev);
/* Returns the inodes still hashed (0 when all were released). */
size_t names_destroy(struct wbc_dev *dev);
/* Give back half of the inode memory kept for reuse. */
void names_trim(struct wbc_dev *dev);
void inode_drop_all_pages(struct inode *ino);

/* dirty.c: dirty files per device in time buckets, under the timed
 * dirty-list lock */
struct dirty_bucket {
	struct list_head link;      /* dev->buckets */
	struct ino_queue inodes;    /* files filed here */
	uint64_t start;             /* ns; no file here is older */
	uint64_t last;              /* ns; the newest file's dirtied_when */
	uint64_t n;                 /* files */
	uint64_t seq;               /* creation order */
	bool sealed;                /* takes no more files */
	struct dirty_bucket *next_free;
};

int dirty_init(struct wbc_dev *dev);
void dirty_destroy(struct wbc_dev *dev);
void dev_list_lock(struct wbc_dev *dev);
void dev_list_unlock(struct wbc_dev *dev);
void mark_inode_dirty(struct inode *ino);
/* Push @ino (just made I_DIRTY, its lists' reference taken) on inbox slot
 * @slot, dirtied at @when (0: now, read at each try).  mark_inode_dirty
 * uses the writer's CPU slot. */
void inbox_push(struct wbc_dev *dev, unsigned slot, struct inode *ino, uint64_t when);
/* An inbox slot's chain: its newest file (the head; each links to the
 * next older by wb_next), its oldest, and how many. */
struct inbox_chain {
	struct inode *head, *bottom;
	uint64_t n;
};
/* Slot @in's chain as it is (read word by word: while nothing pushes). */
struct inbox_chain inbox_peek(const struct inbox_slot *in);
/* Stats' reading of a list count the flusher stores (no lock). */
static inline uint64_t count_read(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}
/* File the inbox's files in b_dirty (the flusher, or close after it
 * stopped): built privately, spliced in one hold per bucket. */
void dirty_drain(struct wbc_dev *dev);
/* Files in the inbox (pushed, not yet filed; may count a file being
 * filed twice, never none). */
long dirty_inbox_count(struct wbc_dev *dev);
/* File @ino (not on a list) in b_dirty as dirtied at @when. */
void dirty_add_locked(struct wbc_dev *dev, struct inode *ino, uint64_t when);
/* Move the buckets that start at or before @older_than and were created
 * no later than bucket @upto_seq (at most QUEUE_IO_BUCKETS of them), then
 * b_more_io, to b_io.  Returns true when buckets that qualify are left for
 * another call. */
#define QUEUE_IO_BUCKETS 64
bool queue_io_locked(struct wbc_dev *dev, uint64_t older_than, uint64_t upto_seq);
/* Close the newest bucket, so files filed later go to newer ones; returns
 * its sequence number, the @upto_seq that queues what is dirty now (sync). */
uint64_t dirty_seal_locked(struct wbc_dev *dev);
bool dirty_listed(struct wbc_dev *dev);
bool dirty_io_empty_locked(struct wbc_dev *dev);   /* b_io empty */
/*
 * The flusher's side works on private lists and splices them in or out in
 * O(1) holds of the list lock:
 *
 *   dirty_take     a whole queued bucket (or b_io's own files) becomes the
 *                  flusher's batch; when b_io is empty it first runs
 *                  queue_io(@older_than, @upto_seq) (only while *@more,
 *                  which takes queue_io's result; always when @more is
 *                  NULL).  Returns the files taken.
 *   dirty_next     the next file of the batch, now I_SYNC (no lock).
 *   dirty_untake   the files of the batch not reached go back to the head
 *                  of b_io, in order.
 *   dirty_put      a written file: dropped (clean), or kept for the commit:
 *                  to b_more_io (@slice_used) or to the newest bucket.
 *   dirty_put_commit  splices what dirty_put kept.
 */
/* Files a pass took, in order; dirty_next keeps the next DIRTY_AHEAD
 * files' cache lines in flight, and at half that distance (their lines
 * arrived) their pages.  A cursor is the files' sentinel (n 0) or the
 * n-th file from the head. */
#define DIRTY_AHEAD 8
struct dirty_cursor {
	struct inode *at;           /* the n-th file; NULL when n is 0 */
	size_t n;
};
struct dirty_batch {
	struct ino_queue files;
	size_t n;
	struct dirty_cursor ahead, mid;
};
struct dirty_put {
	struct ino_queue redirty, more_io;
	size_t n_redirty, n_more_io;
};
void dirty_batch_init(struct dirty_batch *b);
void dirty_put_init(struct dirty_put *p);
size_t dirty_take(struct wbc_dev *dev, struct dirty_batch *b, uint64_t older_than,
		  uint64_t upto_seq, bool *more);
struct inode *dirty_next(struct wbc_dev *dev, struct dirty_batch *b);
void dirty_untake(struct wbc_dev *dev, struct dirty_batch *b);
void dirty_put(struct wbc_dev *dev, struct dirty_put *p, struct inode *ino, bool still_dirty,
	       bool slice_used);
void dirty_put_commit(struct wbc_dev *dev, struct dirty_put *p);
/* dirty_put and dirty_put_commit of one file */
void dirty_requeue(struct inode *ino, bool still_dirty, bool slice_used);

/* flusher.c */
void bio_prefetch(const struct wbc_bio *b, int stage);
/* A backend completing several bios in one thread brackets their end_io
 * calls with these: the counters, the bios' return to the pool and the
 * page waiters' wakeup are done once for the batch. */
void bio_end_batch_begin(void);
void bio_end_batch_end(void);
/* In a batch, the teardown of a file whose last reference a completion
 * dropped is finished at the batch's end: its pages (out of the index,
 * PG_LOCKED, so that reclaim leaves them) go back in one lru_lock hold,
 * then its memory (inode_dispose).  False outside a batch. */
bool end_batch_defer_page(struct page *p);
bool end_batch_defer_inode(struct inode *ino);
void inode_dispose(struct inode *ino);   /* file.c: inode_free in its shard */
void inode_prefetch_unhash(const struct inode *ino);   /* file.c: a hint */
void inode_prefetch_page(const struct inode *ino);     /* file.c: a hint */
int flusher_start(struct wbc_dev *dev);
void flusher_stop(struct wbc_dev *dev);
void flusher_kick(struct wbc_dev *dev, bool start_all);
/* Kick the flusher of every device that has dirty pages. */
void wakeup_flusher_threads(struct wbc_cache *c, bool start_all);
int flusher_queue_sync(struct wbc_dev *dev);
long write_inode_pages(struct inode *ino, struct wbc_ctl *ctl);
void wait_on_writeback_range(struct inode *ino, uint64_t start, uint64_t end);
int dev_io_init(struct wbc_dev *dev);
void dev_io_destroy(struct wbc_dev *dev);

/* throttle.c */
void thresholds_compute(struct wbc_cache *c);
bool over_bg_thresh(struct wbc_cache *c);
/* Dirty pages above the background threshold of the cache or of the
 * group furthest above its own; 0 or less when none is above. */
long over_bg_pages(struct wbc_cache *c);
/* Pause the calling thread as the control line says.  Returns 0, or the
 * device's error when the thread is to be throttled and the device is
 * dead (dev_dead_error): the thread then stays due (throttle_due) and
 * must not dirty more before a call that returns 0. */
int balance_dirty_pages(struct wbc_dev *dev, struct wbc_group *grp);
/* Count one newly dirtied page; true when the caller should call
 * balance_dirty_pages (its thread reached its check interval). */
bool throttle_dirtied(void);
/* Between these, balance_dirty_pages owes its pause instead of sleeping
 * (wbc_pwrite_nowait): throttle_owed() is then true and the write stops
 * there; end returns the pause. */
void throttle_defer_begin(void);
bool throttle_owed(void);
uint64_t throttle_defer_end(void);
/* The calling thread is due for balance_dirty_pages (its last one failed). */
bool throttle_due(void);
void account_dirtied(struct inode *ino, long n);
void account_writeback(struct inode *ino, long n);   /* dirty -> writeback */
void account_cleaned(struct inode *ino, long n);     /* writeback -> clean */
/* The counters of @dev, @g (may be NULL) and their cache at once. */
void account_domains(struct wbc_dev *dev, struct wbc_group *g, long dirty, long unclean);
void account_dropped(struct inode *ino, long n);     /* dirty -> gone */
void account_redirtied(struct inode *ino, long n);   /* writeback -> dirty */
long ctr_dirty(struct dirty_ctr *c);
long ctr_unclean(struct dirty_ctr *c);
void ctr_set_unclean(struct dirty_ctr *c, long v);   /* tests */
double pos_ratio_cubic(double setpoint, double dirty, double limit);
void dom_global(struct wbc_cache *c, struct dom *d);
void dom_group(struct wbc_group *g, struct dom *d);
double wb_pos_ratio(struct wbc_dev *dev, const struct dom *d, double *wb_thresh);
double dev_wb_thresh(struct wbc_dev *dev, double thresh);
/* The most pages one thread may dirty past the limit before it checks:
 * the documented slack of invariant 2, per writing thread. */
uint64_t throttle_slack_pages(struct wbc_cache *c);

/* bandwidth.c */
void bandwidth_update(struct wbc_dev *dev, uint64_t now);   /* any thread */
void prop_account(struct wbc_dev *dev, uint64_t pages);
double prop_fraction(struct wbc_dev *dev);
long writeback_slice_pages(struct wbc_dev *dev);
#define WBC_INIT_BW (100ull << 20)   /* Linux INIT_BW: 100 MB/s before any sample */

/* errors (flusher.c) */
void dev_record_error(struct wbc_dev *dev, int err);
/* Default of the retry_timeout tunable: the SCSI disk driver's default
 * command timeout (sd, 30 s): a store that completes no write for that
 * long is not coming back soon. */
#define WBC_RETRY_TIMEOUT_NS (30ull * 1000 * 1000 * 1000)
/* The device's write error when it holds pages whose writes failed and
 * none of its writes succeeded for at least its retry_timeout (retry
 * policy): waiting for it is waiting for nothing.  Else 0. */
int dev_dead_error(struct wbc_dev *dev, uint64_t now);
/* The error of the cache's dead devices when every device that holds
 * unclean pages is dead (no page will be freed until one recovers);
 * 0 when some device holding them is alive, or none holds any. */
int cache_dead_error(struct wbc_cache *c, uint64_t now);

#endif
