/*
 * Layer writeback: the dirty files of each device (writeback/dirty.c),
 * the bio pool (writeback/pool.c), the completion of writeback bios and
 * its batching, and the retry policy's state (writeback/end_io.c),
 * writing one file (writeback/write.c), and the flusher thread
 * (writeback/flusher.c).  Above fs, mm and bio; below throttle.
 *
 * LOCKS (the global order is at the top of src/internal.h).  writeback
 * owns, per device: list_lock (the dirty lists: a leaf, taken only by
 * the device's flusher, or by close after it stopped), work_lock (the
 * work queue and the flusher's wakeups: a leaf, taken with dev_lock held
 * by wakeup_flusher_threads) and io_lock (the bio pool, the in-flight
 * count and the busy time: a leaf).  It takes inode->lock to write a
 * file and to complete its bios, never with one of its own held, and
 * holds no lock across a submission or a wait for a bio.  Call
 * write_inode_pages, wait_on_writeback_range, flusher_queue_sync,
 * flusher_stop and the dirty_* functions that are not *_locked with no
 * lock held; flusher_kick with none or dev_lock; mark_inode_dirty under
 * any lock but list_lock (it takes none: a CAS and a lock-free push;
 * under dirty_list=list, the old policy, it takes list_lock, a leaf).
 * Under file_lock=file write_inode_pages takes the file's file_lock: call
 * it without that lock or inode->lock held.
 *
 * CALLS UP.  None directly: the flusher asks the throttle layer for the
 * background threshold, a file's slice and the bandwidth estimate
 * through cache->wb_ops (struct wb_throttle_ops, set at open), with no
 * lock held but work_lock for over_bg_pages.  The throttle layer reads
 * the device's busy time through dev_busy_ns.
 */
#ifndef WBC_WRITEBACK_H
#define WBC_WRITEBACK_H

#include "fs/fs.h"
#include "bio/bio.h"

/* struct ino_queue (writeback/types.h): append, splice at either end and
 * pop from the head, each O(1). */
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

/* What dev->on_error holds (a tunable): the retry policy keeps a failed
 * page dirty and retries it, the drop policy cleans it and counts it
 * lost. */
enum { WBC_ON_ERROR_RETRY, WBC_ON_ERROR_DROP };

/* What dev->dirty_list and dev->file_lock hold (tunables, for
 * experiments: the old policies, rendered beside today's; the first of
 * each is the default).  dirty_list=list: b_dirty is one list in
 * dirtying order, appended to by writers under the list lock and walked
 * by queue_io under it (dirty.c).  file_lock=file: one lock per file,
 * held by writers across a page's write and by writeback across the
 * submission of the file's run (core/file.c, write_inode_pages). */
enum { WBC_DIRTY_LIST_BUCKETS, WBC_DIRTY_LIST_LIST };
enum { WBC_FILE_LOCK_PAGE, WBC_FILE_LOCK_FILE };

/* file_lock=file: take @ino's file lock (inode->file_lock: after rwsem,
 * before inode->lock), counting the takes that had to wait and the time
 * they waited. */
static inline void inode_file_lock(struct inode *ino)
{
	if (!pthread_mutex_trylock(&ino->file_lock))
		return;
	/* counted before it blocks: a waiter can be seen waiting */
	atomic_fetch_add_explicit(&ino->dev->file_lock_waits, 1, memory_order_relaxed);
	uint64_t t0 = wbc_now_ns();
	pthread_mutex_lock(&ino->file_lock);
	atomic_fetch_add_explicit(&ino->dev->file_lock_wait_ns, wbc_now_ns() - t0,
				  memory_order_relaxed);
}

static inline void inode_file_unlock(struct inode *ino)
{
	assert_held(&ino->file_lock);
	pthread_mutex_unlock(&ino->file_lock);
}


/* What the flusher asks of the throttle layer above it: the throttle's
 * functions, set at open (core/cache.c) in cache->wb_ops. */
struct wb_throttle_ops {
	/* over_bg_pages: dirty pages above the background threshold of the
	 * cache or of the group furthest above its own; 0 or less when none
	 * is above.  May be called with work_lock held. */
	long (*over_bg_pages)(struct wbc_cache *c);
	/* writeback_slice_pages: the pages one file may write per pass */
	long (*slice_pages)(struct wbc_dev *dev);
	/* bandwidth_update: a chance to update the device's estimates */
	void (*bandwidth_update)(struct wbc_dev *dev, uint64_t now);
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
/* dirty.c: dirty files per device in time buckets, under the timed
 * dirty-list lock                                                      */

void lock_stat_record(struct lock_stat *ls, uint64_t ns);

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
/* A write of @ino failed under the retry policy (its pages dirty again,
 * tagged, its retry_after set): the file is listed with b_more_io, so
 * that a pass takes it again once its backoff is over (marked dirty, it
 * waited until it was dirty_expire old again: half a minute between
 * retries).  Like mark_inode_dirty: no lock but the caller's reference;
 * the file keeps its place when it is listed already. */
void mark_inode_retry(struct inode *ino);
/* @ino, listed, has nothing left to write (no page, its size at the
 * backend) and its last handle is closing: to b_more_io (as a listed
 * mark_inode_retry file), so that the next pass drops it */
void mark_inode_idle(struct inode *ino);
/* A write of @ino completed and left the backend's copy of it longer than
 * the file (whole pages written past its size): a clean file is listed
 * with b_more_io, I_TRIM, dirtied now, so that the next pass trims it
 * (listed as newly dirty, it waited until it was dirty_expire old again).
 * A listed file is trimmed when its data is written; one the flusher
 * holds is put with b_more_io.  Like mark_inode_dirty: no lock but the
 * caller's reference. */
void mark_inode_trim(struct inode *ino);
/* The inbox slot of mark_inode_retry's and mark_inode_trim's files
 * (dev->inbox[INBOX_RETRY]) */
#define INBOX_RETRY PCPU_SLOTS
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
/* A sync, before it drains: wait until every writer that may have made a
 * file dirty before this call has filed it (in the inbox, or the old
 * policy's b_dirty), so that the drain and the walk find it.  Its
 * writers hold no lock the caller may hold: call it with none held.
 * One at a time per device (the flusher's thread). */
void dirty_wait_marks(struct wbc_dev *dev);
/* A test's hook: the next writer that makes a clean file of @dev dirty
 * calls @fn(@arg) between its CAS and its filing, once. */
void dirty_mark_pause(struct wbc_dev *dev, void (*fn)(void *), void *arg);
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
	/* the file dirty_next returned last was listed only to be trimmed
	 * (I_TRIM, mark_inode_trim) */
	bool trim;
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

/* pool.c */
static inline unsigned bio_max_pages(struct wbc_dev *dev)
{
	return dev->bio_maxp;   /* dev_io_init */
}
int dev_io_init(struct wbc_dev *dev);
void dev_io_destroy(struct wbc_dev *dev);
/* Time the device had I/O in flight since it was made, up to @now (ns;
 * io_lock). */
uint64_t dev_busy_ns(struct wbc_dev *dev, uint64_t now);

/* end_io.c: errors (the retry policy) */
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

/* write.c */
long write_inode_pages(struct inode *ino, struct wbc_ctl *ctl);
/* Start writing every dirty page of @ino (a sync pass over the whole
 * file, no plug); returns whether dirty pages are left (ctl.still_dirty). */
bool write_inode_all(struct inode *ino);
void wait_on_writeback_range(struct inode *ino, uint64_t start, uint64_t end);

/* flusher.c */
int flusher_start(struct wbc_dev *dev);
void flusher_stop(struct wbc_dev *dev);
void flusher_kick(struct wbc_dev *dev, bool start_all);
/* Kick the flusher of every device that has dirty pages. */
void wakeup_flusher_threads(struct wbc_cache *c, bool start_all);
int flusher_queue_sync(struct wbc_dev *dev);

/* ------------------------------------------------------------------ */
/* between the files of this folder, not for the layers above           */

/* pool.c */
/* A free bio; waits for one (after submitting what @plug holds back, so
 * that the wait can end). */
struct wbc_bio *bio_get(struct wbc_dev *dev, struct bio_plug *plug);
/* Return the chain @b .. @last (@n bios, linked by next_free) to the pool. */
void bio_put_chain(struct wbc_dev *dev, struct wbc_bio *b, struct wbc_bio *last, unsigned n);
void bio_put(struct wbc_dev *dev, struct wbc_bio *b);
/* Wait until no bio of the device is in flight. */
void dev_drain(struct wbc_dev *dev);
/* end_io.c: the end_io of a writeback bio */
void wb_end_io(struct wbc_bio *bio);
/* write.c: submit what @p holds back, and count its pages */
void plug_flush(struct wbc_dev *dev, struct bio_plug *p);
/* write_inode_pages' side (write.c): under file_lock=file, the file's
 * lock around a run's collection and submission; the unlock submits
 * what @plug holds first (the run goes out under the lock).  No-ops
 * under file_lock=page. */
static inline void wb_file_lock(struct inode *ino)
{
	if (ino->dev->file_lock == WBC_FILE_LOCK_FILE)
		inode_file_lock(ino);
}
static inline void wb_file_unlock(struct inode *ino, struct bio_plug *plug)
{
	if (ino->dev->file_lock == WBC_FILE_LOCK_FILE) {
		plug_flush(ino->dev, plug);
		inode_file_unlock(ino);
	}
}

#endif
