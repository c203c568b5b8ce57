/*
 * Dirty-file tracking per device, the kernel's b_dirty / b_io / b_more_io,
 * with b_dirty kept as time buckets (a timer wheel that grows at its tail):
 *
 *   mark_inode_dirty()            queue_io(T)                 flusher
 *        |                            |                          |
 *        v                            v  whole buckets           v
 *   b_dirty: [t0..][t1..][t2..] ---------------------> b_io --- take head -->
 *   (buckets oldest first, each    start <= T; then       (I_SYNC, off the
 *    a list of files dirtied in    b_more_io's files       lists)
 *    [start, start + width))            ^                    |
 *        ^                              |  used its slice    |
 *        |                          b_more_io <--------------+
 *        +-- still dirty, slice not used: filed in the newest bucket
 *                                                   clean: dropped, iput
 *
 * Dirtying a file is O(1): append it to the newest bucket, or open a new
 * bucket when the newest is older than one width.  Queueing "every file
 * dirtied before T" moves whole buckets to b_io, which is itself a list of
 * buckets (then b_more_io's files, a plain list): the dirty-list lock is
 * never held for a walk over files, and queueing touches bucket headers
 * only, never the files' cache lines.  queue_io moves at most
 * QUEUE_IO_BUCKETS buckets per call, which bounds even the bucket walk.
 *
 * Expiry is exact to one bucket width: a bucket is queued once its start is
 * at or before T, so a file may be written up to one width (dirty_expire/64,
 * 1 to 100 ms) before it is dirty_expire old.  dirtied_when is the time a
 * file went from clean to dirty; a file put back in b_dirty is filed in the
 * newest bucket and its dirtied_when moves forward only to the newest
 * file's there (the kernel's redirty_tail), which never lets a busy file
 * hold a sync back: sync first seals the newest bucket, queues everything
 * up to it, and files put back during the sync go to buckets after the
 * seal.  Buckets are in time order and each file's dirtied_when lies in
 * its bucket's window; inside a bucket, files filed by one drain are
 * newest first CPU by CPU (below), which nothing depends on.
 *
 * Writers take no lock: a file that goes from clean to dirty is pushed on
 * its device's inbox stack for the writer's CPU with one compare-and-swap
 * of the stack's 16-byte top (its newest file, its oldest, its length), so
 * a writer descheduled anywhere in it holds nothing anyone waits for.  The
 * flusher files the inbox in b_dirty before it queues (dirty_drain): it
 * takes each slot's whole chain with one CAS, knowing its ends and length
 * from the top, and when the chains together fit one bucket's window (the
 * common case: the flusher drains every few milliseconds) appends them to
 * it whole, looking at no file but each chain's two ends; chains that span
 * windows are reversed, merged into order and filed bucket by bucket.  The
 * lists are singly linked queues (struct ino_queue): every operation on
 * them is an append, a pop at the head or a splice at either end.
 * Only the flusher changes the lists, under the list lock (which nothing
 * else takes: stats read the counts without it), and it does the per-file
 * work on private lists, then splices them in or out: every hold is O(1)
 * in the number of files (queue_io: at most QUEUE_IO_BUCKETS buckets).
 * A pass takes a whole queued bucket at a time (dirty_take), and puts the
 * files it wrote back in batches (dirty_put, dirty_put_commit).
 *
 * An inode is in the writeback system while I_DIRTY (in the inbox or on
 * one list) or I_SYNC (held by a flusher); it owns one reference then.
 * ino->state changes by CAS (writers only ever add I_DIRTY); the lists and
 * their counts are under dev->list_lock.
 *
 * A file is I_DIRTY before it is filed (pushed, or under the old policy
 * appended): a writer that finds I_DIRTY returns at once, and a sync it
 * then makes would not find the file.  So a writer that may win the
 * clean -> dirty CAS counts itself, from before the CAS until the file is
 * filed, in its slot's marking[] by the parity of dev->mark_epoch, and a
 * sync flips the epoch and waits for the old parity's counts to drain
 * before it drains the inbox (mark_begin, dirty_wait_marks; seq_cst
 * ordering, explained there).  The only wait on writers: they hold no
 * lock across the window but their page's lock (and file_lock=file's
 * inode->file_lock), and take only the list lock in it (old policy), so
 * the sync waits holding none of these.  Writers that find I_DIRTY make
 * no shared write.
 *
 * A file whose write failed under the retry policy is to be written again
 * once its backoff (retry_after) is over, whatever its age: the completion
 * pushes it on one more inbox slot, INBOX_RETRY, which the drain files
 * with b_more_io, as it is (mark_inode_retry; I_RETRY when the flusher
 * holds it, I_SYNC), and a pass that finds a file in its backoff puts it
 * back there too.  Every pass takes b_more_io, so the next one after the
 * backoff (a periodic one, under the background threshold) writes it;
 * filed with the newly dirtied files, it waited until it had been dirty
 * for dirty_expire again, after every failure.  A write whose completion
 * leaves the backend's copy longer than the file (its last page written
 * whole) lists a clean file there too, I_TRIM (mark_inode_trim): the next
 * pass trims the copy, and files pages dirtied since as newly dirty.
 *
 * THE OLD POLICY (dirty_list=list, a device tunable for experiments: the
 * kernel's fs-writeback.c before 2015, its 2014 fs_mark contention).
 * b_dirty is one list in dirtying order (dev->l_dirty, oldest at the
 * head).  A writer that dirties a clean file takes the list lock, stamps
 * dirtied_when and appends the file (__mark_inode_dirty); there is no
 * inbox.  queue_io splices b_more_io into b_io and then walks b_dirty
 * from its oldest file while files are older than the expiry, moving each
 * to b_io, all in one hold of the lock (move_expired_inodes): the hold
 * grows with the number of expired files.  The flusher takes one file
 * from b_io per hold (writeback_sb_inodes), and puts each written file
 * back in a hold of its own (requeue_inode): to b_more_io when its slice
 * ran out, to the tail of b_dirty when still dirty (redirty_tail: its
 * dirtied_when moved to now if older than the newest file's there),
 * off the lists when clean.  Sync stamps the time it starts and queues
 * once what was dirtied up to it.  The same entry points serve both
 * policies (dirty_take, dirty_put, ...); the list_* functions below are
 * the old one's own code.  Hold times are recorded for both (the
 * writers' holds in wall time only: a thread's CPU clock is a system
 * call), as are the queue_io passes, the files they moved and the inodes
 * they walked (wbc_dev_debug).
 */
#include "writeback/writeback.h"


#define BUCKET_MIN_NS (1000ull * 1000)
#define BUCKET_MAX_NS (100ull * 1000 * 1000)

void lock_stat_record(struct lock_stat *ls, uint64_t ns)
{
	unsigned b = ns ? (unsigned)(64 - __builtin_clzll(ns)) : 0;
	atomic_fetch_add_explicit(&ls->hist[WBC_MIN(b, LOCK_HIST_BUCKETS - 1u)], 1,
				  memory_order_relaxed);
	/* the atomic's own type: uint64_t is unsigned long, a different
	 * pointer type to clang's atomic builtins */
	unsigned long long mx = atomic_load_explicit(&ls->max_ns, memory_order_relaxed);
	while (ns > mx && !atomic_compare_exchange_weak(&ls->max_ns, &mx, ns))
		;
}

/*
 * An inbox slot's top, packed in 16 bytes: each word holds an inode's
 * address (64-byte aligned, below 2^48: 42 bits) and 22 of the count's 44
 * bits.  Empty is all zeroes.  The words are read one at a time (a guess:
 * a torn pair fails the CAS, which returns the real value).
 */
#define TOP_PTR_BITS (INODE_ADDR_BITS - 6)
#define TOP_CNT_BITS (64 - TOP_PTR_BITS)
#define TOP_PTR_MASK ((1ull << TOP_PTR_BITS) - 1)

static unsigned __int128 inbox_pack(const struct inode *head, const struct inode *bottom,
				    uint64_t n)
{
	union inbox_top t;
	t.w[0] = ((uintptr_t)head >> 6) | (n << TOP_PTR_BITS);
	t.w[1] = ((uintptr_t)bottom >> 6) | ((n >> TOP_CNT_BITS) << TOP_PTR_BITS);
	return t.v;
}

static struct inbox_chain inbox_unpack(unsigned __int128 v)
{
	union inbox_top t = { .v = v };
	return (struct inbox_chain){
		.head = (struct inode *)(uintptr_t)((t.w[0] & TOP_PTR_MASK) << 6),
		.bottom = (struct inode *)(uintptr_t)((t.w[1] & TOP_PTR_MASK) << 6),
		.n = (t.w[0] >> TOP_PTR_BITS) | ((t.w[1] >> TOP_PTR_BITS) << TOP_CNT_BITS),
	};
}

static unsigned __int128 inbox_load(const struct inbox_slot *in)
{
	union inbox_top t;
	t.w[0] = __atomic_load_n(&in->top.w[0], __ATOMIC_RELAXED);
	t.w[1] = __atomic_load_n(&in->top.w[1], __ATOMIC_RELAXED);
	return t.v;
}

/* Full barrier either way; on failure *@old becomes the value seen. */
static bool inbox_cas(struct inbox_slot *in, unsigned __int128 *old, unsigned __int128 nw)
{
	unsigned __int128 seen = __sync_val_compare_and_swap(&in->top.v, *old, nw);
	if (seen == *old)
		return true;
	*old = seen;
	return false;
}

struct inbox_chain inbox_peek(const struct inbox_slot *in)
{
	return inbox_unpack(inbox_load(in));
}

/*
 * The push: @ino links to the chain's newest file and becomes the newest;
 * the oldest stays (or is @ino on an empty stack).  dirtied_when is read
 * at each try, after the top it replaces was seen: a successful CAS
 * replaced a top whose own push read its time before its CAS, so along a
 * chain times never increase (unless, between a writer's reading the top
 * and its CAS, the flusher took the chain and the same files were pushed
 * back in the same places; then this file is older than the one under it
 * by that delay, which the drain tolerates).
 */
void inbox_push(struct wbc_dev *dev, unsigned slot, struct inode *ino, uint64_t when)
{
	assert(inode_addr_ok(ino));
	struct inbox_slot *in = &dev->inbox[slot];
	/* counted before it can be taken, so the count never dips */
	atomic_fetch_add_explicit(&in->n, 1, memory_order_relaxed);
	unsigned __int128 old = inbox_load(in);
	for (;;) {
		struct inbox_chain c = inbox_unpack(old);
		ino->wb_next = c.head;
		ino->dirtied_when = when ? when : wbc_now_ns();
		if (inbox_cas(in, &old, inbox_pack(ino, c.n ? c.bottom : ino, c.n + 1)))
			return;
		atomic_fetch_add_explicit(&in->retries, 1, memory_order_relaxed);
	}
}

/* Take slot @in's whole chain; false when it is empty.  Only the flusher
 * takes, so a top read whole as zero is empty (a torn pair mixes two
 * non-empty tops, whose head words are never zero). */
static bool inbox_take(struct inbox_slot *in, struct inbox_chain *c)
{
	unsigned __int128 old = inbox_load(in);
	do {
		if (!old)
			return false;
	} while (!inbox_cas(in, &old, 0));
	*c = inbox_unpack(old);
	assert(c->n && c->head && c->bottom && !c->bottom->wb_next);
	return true;
}

/* A list count (nr_b_dirty, ...), changed by the flusher only, under the
 * list lock; stored atomically for stats' reads without the lock. */
static void count_add(uint64_t *c, int64_t d)
{
	__atomic_store_n(c, *c + (uint64_t)d, __ATOMIC_RELAXED);
}

static bool requeue_state(struct inode *ino, bool still_dirty, bool *retry);

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The dirty-list lock, with its hold time recorded (wbc_dev_stats) in wall
 * time and in the holder's CPU time.  A user-space lock holder can be
 * descheduled (preempted, or its virtual CPU stopped by the host) inside
 * any critical section; the wall time then says how long others could
 * have waited, the CPU time how long the section ran.  The CPU clock is
 * read outside the lock (two system calls per hold, a few hundred ns),
 * except after a wait for the lock, which makes its reading an upper
 * bound that never counts the wait.
 */
void dev_list_lock(struct wbc_dev *dev)
{
	uint64_t cpu = thread_cpu_ns();
	if (pthread_mutex_trylock(&dev->list_lock)) {
		atomic_fetch_add_explicit(&dev->list_lock_waits, 1, memory_order_relaxed);
		pthread_mutex_lock(&dev->list_lock);
		/* it waited (spun, slept): that CPU was not spent holding it */
		cpu = thread_cpu_ns();
	}
	dev->list_locked_at = wbc_now_ns();
	dev->list_locked_cpu = cpu;
}

void dev_list_unlock(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	uint64_t held = wbc_now_ns() - dev->list_locked_at;
	uint64_t cpu0 = dev->list_locked_cpu;
	pthread_mutex_unlock(&dev->list_lock);
	uint64_t cpu = thread_cpu_ns() - cpu0;
	lock_stat_record(&dev->list_lock_stat, held);
	/* the window read includes taking the lock: never more than held */
	lock_stat_record(&dev->list_lock_cpu_stat, WBC_MIN(cpu, held));
}

/* One bucket is allocated up front: when b_dirty is empty every bucket is
 * in the pool, so filing a file never fails. */
int dirty_init(struct wbc_dev *dev)
{
	uint64_t expire = (uint64_t)dev->cache->cfg.dirty_expire_centisecs * 10 * 1000 * 1000;
	dev->bucket_ns = WBC_MIN(WBC_MAX(expire / 64, BUCKET_MIN_NS), BUCKET_MAX_NS);
	list_init(&dev->buckets);
	list_init(&dev->io_buckets);
	iq_init(&dev->b_io);
	iq_init(&dev->b_more_io);
	iq_init(&dev->l_dirty);
	/* the inbox slots start zeroed (wbc_zalloc): empty */
	dev->bucket_pool = calloc(1, sizeof(struct dirty_bucket));
	return dev->bucket_pool ? 0 : -ENOMEM;
}

void dirty_destroy(struct wbc_dev *dev)
{
	for (int i = 0; i <= INBOX_RETRY; i++)
		assert(!inbox_load(&dev->inbox[i]) && !atomic_load(&dev->inbox[i].n) &&
		       !atomic_load(&dev->inbox[i].marking[0]) &&
		       !atomic_load(&dev->inbox[i].marking[1]));
	assert(list_empty(&dev->buckets) && list_empty(&dev->io_buckets) &&
	       iq_empty(&dev->b_io) && iq_empty(&dev->b_more_io) && iq_empty(&dev->l_dirty));
	while (dev->bucket_pool) {
		struct dirty_bucket *b = dev->bucket_pool;
		dev->bucket_pool = b->next_free;
		free(b);
	}
}

static struct dirty_bucket *newest_bucket(struct wbc_dev *dev)
{
	return list_empty(&dev->buckets) ? NULL :
		container_of(dev->buckets.prev, struct dirty_bucket, link);
}

/* A free bucket, or NULL without memory (the pool is never empty while
 * b_dirty is, so there is always a newest bucket to fall back on). */
static struct dirty_bucket *bucket_alloc(struct wbc_dev *dev)
{
	struct dirty_bucket *b = dev->bucket_pool;
	if (b)
		dev->bucket_pool = b->next_free;
	else
		b = malloc(sizeof(*b));
	if (b) {
		b->n = 0;
		b->sealed = false;
		iq_init(&b->inodes);
	}
	return b;
}

static void bucket_free(struct wbc_dev *dev, struct dirty_bucket *b)
{
	b->next_free = dev->bucket_pool;
	dev->bucket_pool = b;
}

/* Make @b, allocated by bucket_alloc, the newest bucket, starting at @start. */
static void bucket_open_locked(struct wbc_dev *dev, struct dirty_bucket *b, uint64_t start)
{
	assert_held(&dev->list_lock);
	b->start = b->last = start;
	b->seq = ++dev->bucket_seq;
	list_add_tail(&b->link, &dev->buckets);
	count_add(&dev->nr_buckets, 1);
}

void dirty_add_locked(struct wbc_dev *dev, struct inode *ino, uint64_t when)
{
	assert_held(&dev->list_lock);
	struct dirty_bucket *tail = newest_bucket(dev);
	if (!tail || tail->sealed || when >= tail->start + dev->bucket_ns) {
		struct dirty_bucket *b = bucket_alloc(dev);
		if (b) {
			bucket_open_locked(dev, b, tail ? WBC_MAX(when, tail->last) : when);
			tail = b;
		}
		/* out of memory: the newest bucket takes it (the pool is never
		 * empty while b_dirty is) */
		assert(tail);
	}
	/* in order: never older than the newest file already filed */
	ino->dirtied_when = tail->last = WBC_MAX(when, tail->last);
	iq_add_tail(&tail->inodes, ino);
	tail->n++;
	count_add(&dev->nr_b_dirty, 1);
}

static bool old_list(const struct wbc_dev *dev)
{
	return dev->dirty_list == WBC_DIRTY_LIST_LIST;
}

/* Record a queue_io pass that moved @moved files to b_io and walked
 * @walked inodes of b_dirty, in one hold. */
static void queue_io_count(struct wbc_dev *dev, uint64_t moved, uint64_t walked)
{
	atomic_fetch_add_explicit(&dev->queue_io_passes, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&dev->queue_io_moved, moved, memory_order_relaxed);
	atomic_fetch_add_explicit(&dev->queue_io_walked, walked, memory_order_relaxed);
	/* one pass at a time (under the lock): plain maxima */
	if (moved > atomic_load_explicit(&dev->queue_io_max_moved, memory_order_relaxed))
		atomic_store_explicit(&dev->queue_io_max_moved, moved, memory_order_relaxed);
	if (walked > atomic_load_explicit(&dev->queue_io_max_walked, memory_order_relaxed))
		atomic_store_explicit(&dev->queue_io_max_walked, walked, memory_order_relaxed);
}

/* ---- dirty_list=list: the old single list ---- */

/*
 * __mark_inode_dirty of the old policy: a writer (or a completion) that
 * made @ino dirty, with the lists' reference taken, files it at the tail
 * of b_dirty under the list lock, dirtied now.  The time is read under
 * the lock, so b_dirty stays in order.  With @retry (mark_inode_retry: a
 * write of it failed) it goes to b_more_io instead, its dirtied_when
 * kept.  The hold is recorded in wall time (not in CPU time: two system
 * calls per dirtied file would slow the writers down beyond what the
 * policy costs).
 */
static void list_mark_dirty(struct wbc_dev *dev, struct inode *ino, bool retry)
{
	if (pthread_mutex_trylock(&dev->list_lock)) {
		atomic_fetch_add_explicit(&dev->list_lock_waits, 1, memory_order_relaxed);
		pthread_mutex_lock(&dev->list_lock);
	}
	uint64_t t0 = wbc_now_ns();
	if (retry) {
		iq_add_tail(&dev->b_more_io, ino);
		count_add(&dev->nr_b_more_io, 1);
	} else {
		ino->dirtied_when = t0;
		iq_add_tail(&dev->l_dirty, ino);
		count_add(&dev->nr_b_dirty, 1);
	}
	uint64_t held = wbc_now_ns() - t0;
	pthread_mutex_unlock(&dev->list_lock);
	atomic_fetch_add_explicit(&dev->list_lock_writer_takes, 1, memory_order_relaxed);
	lock_stat_record(&dev->list_lock_stat, held);
}

/*
 * queue_io of the old policy: b_more_io to b_io, then move_expired_inodes:
 * from the oldest file of b_dirty, every file dirtied at or before
 * @older_than moves to b_io, in order, each looked at under the lock.
 * All of it is one hold, whatever the number of files.  Never leaves
 * work for another call (false).
 */
static bool list_queue_io_locked(struct wbc_dev *dev, uint64_t older_than)
{
	assert_held(&dev->list_lock);
	uint64_t more_io = dev->nr_b_more_io, moved = 0, walked = 0;
	iq_splice_tail(&dev->b_io, &dev->b_more_io);
	count_add(&dev->nr_b_io, (int64_t)more_io);
	count_add(&dev->nr_b_more_io, -(int64_t)more_io);
	while (!iq_empty(&dev->l_dirty)) {
		struct inode *ino = dev->l_dirty.head;
		walked++;
		if (ino->dirtied_when > older_than)
			break;
		iq_add_tail(&dev->b_io, iq_pop(&dev->l_dirty));
		moved++;
	}
	count_add(&dev->nr_b_dirty, -(int64_t)moved);
	count_add(&dev->nr_b_io, (int64_t)moved);
	queue_io_count(dev, moved + more_io, walked);
	return false;
}

/*
 * requeue_inode of the old policy, in a hold of its own: a written file
 * that is still dirty goes to b_more_io (@slice_used) or to the tail of
 * b_dirty (redirty_tail: dirtied now if it is older than the newest file
 * there, so b_dirty stays in order); a clean one leaves the lists and its
 * reference is put.
 */
static void list_requeue(struct wbc_dev *dev, struct inode *ino, bool still_dirty,
			 bool slice_used)
{
	dev_list_lock(dev);
	bool retry;
	bool listed = requeue_state(ino, still_dirty, &retry);
	if (listed && (slice_used || retry)) {
		iq_add_tail(&dev->b_more_io, ino);
		count_add(&dev->nr_b_more_io, 1);
	} else if (listed) {
		/* (an emptied queue's tail is stale: look at it only when
		 * there is a head) */
		struct inode *newest = iq_empty(&dev->l_dirty) ? NULL : dev->l_dirty.tail;
		if (newest && ino->dirtied_when < newest->dirtied_when)
			ino->dirtied_when = wbc_now_ns();
		iq_add_tail(&dev->l_dirty, ino);
		count_add(&dev->nr_b_dirty, 1);
	}
	dev_list_unlock(dev);
	if (!listed)
		iput(ino);
}

/* ---- the lists' entry points (both policies) ---- */

uint64_t dirty_seal_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	if (old_list(dev))
		return wbc_now_ns();   /* the sync's start: queue what is older */
	if (!list_empty(&dev->buckets))
		container_of(dev->buckets.prev, struct dirty_bucket, link)->sealed = true;
	return dev->bucket_seq;
}

/*
 * A sync must cover every write that returned before it began, and a
 * writer returns at once when it finds I_DIRTY set: another writer won
 * the clean -> dirty CAS and files the file (inbox_push, or the old
 * policy's list_mark_dirty), but maybe not yet.  So the writer that may
 * win the CAS counts itself in its slot's marking[] from before the CAS
 * until the file is filed, and a sync waits for the counts of the writers
 * that may have won before it began (dirty_wait_marks), then drains.
 *
 * Two counts by the parity of dev->mark_epoch, as SRCU's: the sync flips
 * the epoch and waits only for the old parity, which no writer enters
 * after the flip, so a stream of writers cannot hold it up.  Ordering
 * (Dekker's): the writer's increment and its second read of the epoch,
 * the sync's flip and its reads of the counts are all seq_cst, so either
 * the writer reads the flipped epoch (it moves to the new parity, and
 * the sync need not wait for it: it had not reached the CAS) or the
 * sync reads its increment.  A writer that read the epoch before the
 * flip and counts itself after the sync read its slot sees the flip on
 * its second read.  Had it kept the parity it read first, it would have
 * counted where a later sync does not look.  Syncs of a device run one
 * at a time (its flusher's thread), so a sync that comes after the
 * first flip past a writer's second read finds its file filed.
 */
static unsigned mark_begin(struct wbc_dev *dev, unsigned slot)
{
	atomic_long *m = dev->inbox[slot].marking;
	unsigned e = atomic_load_explicit(&dev->mark_epoch, memory_order_relaxed);
	for (;;) {
		atomic_fetch_add(&m[e & 1], 1);
		unsigned now = atomic_load(&dev->mark_epoch);
		if (now == e)
			return e & 1;
		/* a sync flipped meanwhile: count under its new epoch */
		atomic_fetch_sub_explicit(&m[e & 1], 1, memory_order_relaxed);
		e = now;
	}
}

/* Release: the sync that reads the count drop sees the file filed. */
static void mark_end(struct wbc_dev *dev, unsigned slot, unsigned idx)
{
	atomic_fetch_sub_explicit(&dev->inbox[slot].marking[idx], 1, memory_order_release);
}

void dirty_wait_marks(struct wbc_dev *dev)
{
	unsigned idx = atomic_fetch_add(&dev->mark_epoch, 1) & 1;
	bool waited = false;
	for (unsigned i = 0; i < PCPU_SLOTS; i++) {
		/* a writer in the window holds only its page's lock (and
		 * file_lock=file's inode->file_lock), neither held here, and
		 * waits for nothing a sync holds (the old policy's writer
		 * takes the list lock, which the caller does not hold): it
		 * ends its filing soon, unless descheduled; yield, then
		 * sleep */
		for (unsigned n = 0; atomic_load(&dev->inbox[i].marking[idx]); n++) {
			if (!waited) {
				waited = true;
				atomic_fetch_add_explicit(&dev->mark_waits, 1, memory_order_relaxed);
			}
			if (n < 64) {
				sched_yield();
			} else {
				struct timespec ts = { 0, 50 * 1000 };
				nanosleep(&ts, NULL);
			}
		}
	}
}

void dirty_mark_pause(struct wbc_dev *dev, void (*fn)(void *), void *arg)
{
	dev->mark_pause_arg = arg;
	atomic_store(&dev->mark_pause, fn);
}

/*
 * A page of @ino went dirty (the caller holds a reference and tagged the
 * page first).  The clean -> dirty transition is one CAS on ino->state,
 * and a file that is on no list and not being written is pushed on the
 * inbox stack of the writer's CPU slot (inbox_push).  A file under
 * I_SYNC only gets I_DIRTY: the flusher files it when it puts it back, with
 * its old dirtied_when (an older time only makes expiry earlier).
 *
 * Why a writer may return when it sees I_DIRTY: the flusher clears I_DIRTY
 * before it takes ino->lock to look at the page tags, and the writer tagged
 * its page under ino->lock before it read the state; so either the flusher
 * sees the tag, or the writer sees the state without I_DIRTY.  And a sync
 * it makes after it returned waits for the writer that set I_DIRTY to
 * have filed the file (mark_begin): it would not have found it.
 *
 * The fast path (I_DIRTY already set) makes no shared write; only a
 * writer that read a clean state, and may win the CAS, counts itself.
 */
void mark_inode_dirty(struct inode *ino)
{
	unsigned s = atomic_load_explicit(&ino->state, memory_order_acquire);
	if (s & I_DIRTY)
		return;
	struct wbc_dev *dev = ino->dev;
	unsigned slot = pcpu_slot();
	/* before the CAS: a writer that sees our I_DIRTY and syncs waits */
	unsigned idx = mark_begin(dev, slot);
	do {
		if (s & I_DIRTY)
			goto out;
	} while (!atomic_compare_exchange_weak(&ino->state, &s, s | I_DIRTY));
	if (s & I_SYNC)
		goto out;   /* the flusher (the syncs' thread) puts it back */
	/* the lists' reference, taken before the flusher can see it */
	igrab(ino);
	/* a test's hook (dirty_mark_pause): holds this writer in the window */
	void (*pause)(void *) = atomic_load_explicit(&dev->mark_pause, memory_order_relaxed);
	if (pause && (pause = atomic_exchange(&dev->mark_pause, NULL)))
		pause(dev->mark_pause_arg);
	if (old_list(dev))
		list_mark_dirty(dev, ino, false);
	else
		inbox_push(dev, slot, ino, 0);
	/* A failed fsync marked it (mark_inode_retry) between the CAS and
	 * the filing: the drain that took that mark's flag may have walked
	 * before it was filed.  Filed now (the push is a full barrier), so
	 * the next drain's walk finds it; a mark after this load sets the
	 * flag itself. */
	s = atomic_load(&ino->state);
	if ((s & (I_RETRY | I_SYNC)) == I_RETRY)
		atomic_store(&dev->retry_listed, true);
out:
	mark_end(dev, slot, idx);
}

/*
 * A write of @ino failed (retry policy; the pages are tagged dirty again
 * under ino->lock before this): listed with b_more_io, which every pass
 * takes, so the flusher writes it again once its backoff (retry_after)
 * is over.  Pushed as a new dirty file it was filed dirtied now, and only
 * the pass after it had been dirty for dirty_expire again looked at it.
 * A file under I_SYNC gets I_RETRY with I_DIRTY (dirty_put puts it with
 * b_more_io).  One that is listed (an fsync wrote it where its write had
 * filed it) gets I_RETRY where it is, and the flusher's next drain moves
 * it to b_more_io (retry_listed_move); it stayed in b_dirty until it was
 * due, dirty_expire after it was dirtied.  Its dirtied_when is kept: the
 * data is as old as it was.
 */
void mark_inode_retry(struct inode *ino)
{
	unsigned s = atomic_load_explicit(&ino->state, memory_order_acquire);
	for (;;) {
		if ((s & I_DIRTY) && !(s & I_SYNC)) {
			/* already marked: the mark's flag, or the drain that
			 * took it, moves it (each file is filed in b_dirty
			 * with I_RETRY only by a drain, a put or a writer that
			 * sets the flag again), and every set costs a walk of
			 * b_dirty */
			if (s & I_RETRY)
				return;
			if (!atomic_compare_exchange_weak(&ino->state, &s, s | I_RETRY))
				continue;
			/* after the mark: the drain that sees the flag sees it */
			atomic_store(&ino->dev->retry_listed, true);
			return;
		}
		if (atomic_compare_exchange_weak(&ino->state, &s, s | I_DIRTY | I_RETRY))
			break;
	}
	if (s & I_SYNC)
		return;
	igrab(ino);
	if (old_list(ino->dev))
		list_mark_dirty(ino->dev, ino, true);
	else
		inbox_push(ino->dev, INBOX_RETRY, ino, ino->dirtied_when);
}

/*
 * A listed file with nothing to write whose last handle closes (a
 * truncate to 0 or a remove dropped its pages): without this it held its
 * reference, and the backend's file open, until it was dirty_expire old.
 * Marked as a listed failed file is (I_RETRY), its next drain moves it
 * to b_more_io and the next pass, finding it clean, drops it.  A file
 * dirtied again meanwhile is written at that pass, not later.
 */
void mark_inode_idle(struct inode *ino)
{
	unsigned s = atomic_load_explicit(&ino->state, memory_order_acquire);
	do {
		/* (I_TRIM: with b_more_io already) */
		if ((s & (I_DIRTY | I_SYNC | I_RETRY | I_TRIM)) != I_DIRTY)
			return;
	} while (!atomic_compare_exchange_weak(&ino->state, &s, s | I_RETRY));
	atomic_store(&ino->dev->retry_listed, true);
}

/*
 * Without this a file that a pass wrote (dropped clean, its write still
 * in flight) was listed by the write's completion as newly dirty, to have
 * the backend's copy trimmed to its size: the trim came only once it was
 * dirty_expire old again, the backend's copy padded with zeroes past the
 * file's end for twice dirty_expire after the file was written.  The
 * next pass takes b_more_io; a file dirtied again before it is not
 * written there, early (a file appended to would have gone round every
 * pass), but filed as dirtied then (the flusher, wb_writeback).
 */
void mark_inode_trim(struct inode *ino)
{
	unsigned s = atomic_load_explicit(&ino->state, memory_order_acquire);
	do {
		/* listed: trimmed when the flusher writes it */
		if (s & I_DIRTY)
			return;
	} while (!atomic_compare_exchange_weak(&ino->state, &s, s | I_DIRTY | I_TRIM));
	if (s & I_SYNC)
		return;   /* dirty_put puts it with b_more_io */
	igrab(ino);
	if (old_list(ino->dev)) {
		/* (list_mark_dirty keeps the time of a b_more_io file) */
		ino->dirtied_when = wbc_now_ns();
		list_mark_dirty(ino->dev, ino, true);
	} else {
		inbox_push(ino->dev, INBOX_RETRY, ino, 0);
	}
}

long dirty_inbox_count(struct wbc_dev *dev)
{
	long long n = 0;
	for (int i = 0; i <= INBOX_RETRY; i++)
		n += atomic_load_explicit(&dev->inbox[i].n, memory_order_acquire);
	return (long)WBC_MAX(n, 0);
}

static uint64_t first_when(const struct ino_queue *q)
{
	return q->head->dirtied_when;
}

/* Oldest first: a chain taken from the inbox is newest first. */
static void iq_reverse(struct ino_queue *q)
{
	struct inode *prev = NULL, *cur = q->head;
	q->tail = cur;
	while (cur) {
		struct inode *next = cur->wb_next;
		cur->wb_next = prev;
		prev = cur;
		cur = next;
	}
	q->head = prev;
}

/*
 * The files at the head of @fifo (in dirtying order) that fit in one
 * bucket go to the newest bucket, or to a new one: moved to a private list
 * (no lock), then spliced in one hold.
 */
static void drain_run(struct wbc_dev *dev, struct ino_queue *fifo)
{
	struct dirty_bucket *tail = newest_bucket(dev), *nb = NULL, *into = tail;
	uint64_t cur = tail ? tail->last : 0, limit, when = first_when(fifo);
	if (tail && !tail->sealed && WBC_MAX(when, cur) < tail->start + dev->bucket_ns) {
		limit = tail->start + dev->bucket_ns;
	} else if ((nb = bucket_alloc(dev))) {
		into = NULL;
		limit = WBC_MAX(when, cur) + dev->bucket_ns;
	} else {
		limit = UINT64_MAX;   /* no memory: the newest bucket takes all */
	}
	struct ino_queue run;
	iq_init(&run);
	uint64_t n = 0, first = 0;
	while (!iq_empty(fifo) && (!n || WBC_MAX(first_when(fifo), cur) < limit)) {
		struct inode *ino = iq_pop(fifo);
		/* in order: never older than the newest file already filed */
		cur = ino->dirtied_when = WBC_MAX(ino->dirtied_when, cur);
		if (!n)
			first = cur;
		iq_add_tail(&run, ino);
		n++;
	}
	dev_list_lock(dev);
	if (nb) {
		bucket_open_locked(dev, nb, first);
		into = nb;
	}
	if (into) {
		iq_splice_tail(&into->inodes, &run);
		into->n += n;
		into->last = cur;
		count_add(&dev->nr_b_dirty, (int64_t)n);
	} else {
		/* no bucket and no memory for one: written with b_more_io */
		iq_splice_tail(&dev->b_more_io, &run);
		count_add(&dev->nr_b_more_io, (int64_t)n);
	}
	dev_list_unlock(dev);
}

/*
 * The common case: the @k chains (@total files, dirtied in [@first,
 * @last]) fit in one bucket, the newest or a new one, and go there whole
 * in one hold, without a look at any file but the ends.  False when they
 * do not fit (or no bucket can be had): the caller files them in order.
 * A bucket's files are then newest first chain by chain, and may be
 * older than its start by the time the drain took to take the chains
 * (writers push while it goes from slot to slot): expiry and sync look
 * at buckets, never at the order inside one.
 */
static bool drain_whole(struct wbc_dev *dev, struct ino_queue *lists, unsigned k,
			uint64_t first, uint64_t last, uint64_t total)
{
	struct dirty_bucket *tail = newest_bucket(dev), *into = tail;
	uint64_t start = 0;
	if (!tail || tail->sealed || last >= tail->start + dev->bucket_ns) {
		start = WBC_MAX(first, tail ? tail->last : 0);
		if (last >= start + dev->bucket_ns || !(into = bucket_alloc(dev)))
			return false;
	}
	dev_list_lock(dev);
	if (into != tail)
		bucket_open_locked(dev, into, start);
	for (unsigned j = 0; j < k; j++)
		iq_splice_tail(&into->inodes, &lists[j]);
	into->n += total;
	into->last = WBC_MAX(into->last, last);
	count_add(&dev->nr_b_dirty, (int64_t)total);
	dev_list_unlock(dev);
	return true;
}

/* Files of @q marked I_RETRY, from after @*prev (NULL: the head), at
 * most @budget looked at: moved to @to; *prev the last file kept.  True
 * when @q's end was reached. */
static bool retry_walk_locked(struct wbc_dev *dev, struct ino_queue *q, struct inode **prev,
			      unsigned budget, struct ino_queue *to, uint64_t *moved)
{
	assert_held(&dev->list_lock);
	struct inode *p = *prev, *cur = p ? p->wb_next : q->head;
	for (; cur && budget; budget--) {
		struct inode *next = cur->wb_next;
		if (atomic_load_explicit(&cur->state, memory_order_acquire) & I_RETRY) {
			if (p)
				p->wb_next = next;
			else
				q->head = next;
			if (q->tail == cur)
				q->tail = p;
			cur->wb_next = NULL;
			iq_add_tail(to, cur);
			++*moved;
		} else {
			p = cur;
		}
		cur = next;
	}
	*prev = p;
	return !cur;
}

#define RETRY_WALK_HOLD 64u   /* files looked at per hold of the list lock */

/*
 * The files of b_dirty whose write failed while they were listed
 * (mark_inode_retry: an fsync wrote them), and those with nothing left
 * to write whose last handle closed (mark_inode_idle), go to b_more_io,
 * which every pass takes, there to wait for their backoff.  A walk of
 * b_dirty: after such a mark only, one walk for all the marks before a
 * drain, RETRY_WALK_HOLD files per hold of the lock (only
 * the flusher changes the lists, and writers of the old policy only
 * append, so the place kept between holds stays valid).
 */
static bool retry_listed_take(struct wbc_dev *dev)
{
	return atomic_load_explicit(&dev->retry_listed, memory_order_relaxed) &&
	       atomic_exchange(&dev->retry_listed, false);
}

static void retry_listed_move(struct wbc_dev *dev)
{
	struct inode *prev = NULL;
	struct ino_queue moved;
	iq_init(&moved);
	uint64_t n = 0;
	dev_list_lock(dev);
	if (old_list(dev)) {
		while (!retry_walk_locked(dev, &dev->l_dirty, &prev, RETRY_WALK_HOLD, &moved, &n)) {
			dev_list_unlock(dev);
			dev_list_lock(dev);
		}
	} else {
		for (struct list_head *pos = dev->buckets.next; pos != &dev->buckets;) {
			struct dirty_bucket *b = container_of(pos, struct dirty_bucket, link);
			uint64_t k = 0;
			bool end = retry_walk_locked(dev, &b->inodes, &prev, RETRY_WALK_HOLD, &moved, &k);
			b->n -= k;
			n += k;
			if (end) {
				prev = NULL;
				pos = pos->next;
				if (!b->n) {   /* emptied: back to the pool */
					list_del_init(&b->link);
					count_add(&dev->nr_buckets, -1);
					bucket_free(dev, b);
				}
			}
			dev_list_unlock(dev);
			dev_list_lock(dev);
		}
	}
	count_add(&dev->nr_b_dirty, -(int64_t)n);
	iq_splice_tail(&dev->b_more_io, &moved);
	count_add(&dev->nr_b_more_io, (int64_t)n);
	dev_list_unlock(dev);
}

/*
 * Take every slot's chain (one CAS each) and file them: whole when they
 * fit one bucket (drain_whole), else reversed, merged into dirtying order
 * and filed a bucket at a time.  The slots' counts drop once the files are
 * counted in b_dirty, so the count never dips.
 */
void dirty_drain(struct wbc_dev *dev)
{
	struct ino_queue lists[PCPU_SLOTS];
	uint64_t cnt[PCPU_SLOTS], first = UINT64_MAX, last = 0, total = 0;
	unsigned slot[PCPU_SLOTS], k = 0;
	/* Taken before any slot: a file marked before this is in b_dirty or
	 * in a chain taken below (or its writer's push, still to come, sets
	 * the flag again: mark_inode_dirty), one marked after sets it again
	 * for the next drain.  Taken after the slots, it was lost with a
	 * file pushed to a slot already taken and marked meanwhile: filed by
	 * the next drain, it waited for dirty_expire. */
	bool walk = retry_listed_take(dev);
	if (old_list(dev)) {
		/* no inbox: writers file their files themselves */
		if (walk)
			retry_listed_move(dev);
		return;
	}
	/* the files whose writeback failed: with b_more_io, as they are */
	struct inbox_slot *rin = &dev->inbox[INBOX_RETRY];
	struct inbox_chain rc;
	if (atomic_load_explicit(&rin->n, memory_order_relaxed) && inbox_take(rin, &rc)) {
		struct ino_queue q = { .head = rc.head, .tail = rc.bottom };
		dev_list_lock(dev);
		iq_splice_tail(&dev->b_more_io, &q);
		count_add(&dev->nr_b_more_io, (int64_t)rc.n);
		dev_list_unlock(dev);
		atomic_fetch_sub_explicit(&rin->n, (long long)rc.n, memory_order_release);
	}
	for (unsigned i = 0; i < PCPU_SLOTS; i++) {
		struct inbox_slot *in = &dev->inbox[i];
		struct inbox_chain c;
		if (!atomic_load_explicit(&in->n, memory_order_relaxed) || !inbox_take(in, &c))
			continue;
		lists[k] = (struct ino_queue){ .head = c.head, .tail = c.bottom };
		cnt[k] = c.n;
		/* both ends, for a chain out of order (inbox_push) */
		uint64_t a = c.bottom->dirtied_when, z = c.head->dirtied_when;
		first = WBC_MIN(first, WBC_MIN(a, z));
		last = WBC_MAX(last, WBC_MAX(a, z));
		total += c.n;
		slot[k++] = i;
	}
	if (!k) {
		if (walk)
			retry_listed_move(dev);
		return;
	}
	if (!drain_whole(dev, lists, k, first, last, total)) {
		/* merged by dirtied_when (each chain is in order, reversed) */
		struct ino_queue fifo;
		iq_init(&fifo);
		for (unsigned j = 0; j < k; j++)
			iq_reverse(&lists[j]);
		for (;;) {
			unsigned best = k;
			for (unsigned j = 0; j < k; j++)
				if (!iq_empty(&lists[j]) &&
				    (best == k || first_when(&lists[j]) < first_when(&lists[best])))
					best = j;
			if (best == k)
				break;
			iq_add_tail(&fifo, iq_pop(&lists[best]));
		}
		while (!iq_empty(&fifo))
			drain_run(dev, &fifo);
	}
	/* after the buckets' counts (stats read these first) */
	for (unsigned j = 0; j < k; j++)
		atomic_fetch_sub_explicit(&dev->inbox[slot[j]].n, (long long)cnt[j],
					  memory_order_release);
	/* last: a file marked while still in the inbox is in b_dirty now */
	if (walk)
		retry_listed_move(dev);
}

bool queue_io_locked(struct wbc_dev *dev, uint64_t older_than, uint64_t upto_seq)
{
	assert_held(&dev->list_lock);
	if (old_list(dev))   /* @upto_seq is dirty_seal_locked's time */
		return list_queue_io_locked(dev, WBC_MIN(older_than, upto_seq));
	unsigned moved = 0;
	uint64_t files = dev->nr_b_more_io;
	bool more = false;
	while (!list_empty(&dev->buckets)) {
		struct dirty_bucket *b = container_of(dev->buckets.next, struct dirty_bucket, link);
		if (b->start > older_than || b->seq > upto_seq)
			break;
		if (moved == QUEUE_IO_BUCKETS) {
			more = true;
			break;
		}
		list_move_tail(&b->link, &dev->io_buckets);
		files += b->n;
		count_add(&dev->nr_b_io, (int64_t)b->n);
		count_add(&dev->nr_b_dirty, -(int64_t)b->n);
		count_add(&dev->nr_buckets, -1);
		moved++;
	}
	iq_splice_tail(&dev->b_io, &dev->b_more_io);
	count_add(&dev->nr_b_io, (int64_t)dev->nr_b_more_io);
	count_add(&dev->nr_b_more_io, -(int64_t)dev->nr_b_more_io);
	/* whole buckets: no file is looked at */
	queue_io_count(dev, files, 0);
	return more;
}

/* Whether any file is in the writeback system's lists or inbox (those
 * the flusher holds while it writes them are not counted). */
bool dirty_listed(struct wbc_dev *dev)
{
	return dirty_inbox_count(dev) || count_read(&dev->nr_b_dirty) ||
	       count_read(&dev->nr_b_io) || count_read(&dev->nr_b_more_io);
}

bool dirty_io_empty_locked(struct wbc_dev *dev)
{
	assert_held(&dev->list_lock);
	return list_empty(&dev->io_buckets) && iq_empty(&dev->b_io);
}

static void cursors_reset(struct dirty_batch *b)
{
	b->ahead.at = b->mid.at = NULL;
	b->ahead.n = b->mid.n = 0;
}

void dirty_batch_init(struct dirty_batch *b)
{
	iq_init(&b->files);
	b->n = 0;
	b->trim = false;
	cursors_reset(b);
}

/* The head file left the batch: @c is one file nearer the head. */
static void cursor_shift(struct dirty_batch *b, struct dirty_cursor *c)
{
	if (c->n && !--c->n)
		c->at = NULL;
}

/* Move @c one file on, onto a file at most @to from the head (at most
 * two steps a call, so that a fresh batch does not walk its misses one
 * after another); the file, or NULL when it is there already. */
static struct inode *cursor_step(struct dirty_batch *b, struct dirty_cursor *c, size_t to,
				  int *steps)
{
	if (c->n >= to || *steps >= 2)
		return NULL;
	++*steps;
	c->at = c->at ? c->at->wb_next : b->files.head;
	c->n++;
	return c->at;
}

void dirty_put_init(struct dirty_put *p)
{
	iq_init(&p->redirty);
	iq_init(&p->more_io);
	p->n_redirty = p->n_more_io = 0;
}

size_t dirty_take(struct wbc_dev *dev, struct dirty_batch *b, uint64_t older_than,
		  uint64_t upto_seq, bool *more)
{
	assert(!b->n);
	dev_list_lock(dev);
	if (dirty_io_empty_locked(dev) && (!more || *more)) {
		bool m = queue_io_locked(dev, older_than, upto_seq);
		if (more)
			*more = m;
	}
	if (old_list(dev)) {
		/* one file per hold (writeback_sb_inodes) */
		struct inode *ino = iq_pop(&dev->b_io);
		if (ino) {
			iq_add_tail(&b->files, ino);
			b->n = 1;
		}
	} else if (!list_empty(&dev->io_buckets)) {
		struct dirty_bucket *q = container_of(dev->io_buckets.next, struct dirty_bucket, link);
		iq_splice_tail(&b->files, &q->inodes);
		b->n = q->n;
		list_del_init(&q->link);
		bucket_free(dev, q);
	} else {
		/* b_io's own files (from b_more_io): every file counted in
		 * nr_b_io is here once no bucket is queued */
		iq_splice_tail(&b->files, &dev->b_io);
		b->n = dev->nr_b_io;
	}
	cursors_reset(b);
	count_add(&dev->nr_b_io, -(int64_t)b->n);
	atomic_fetch_add_explicit(&dev->nr_taken, b->n, memory_order_relaxed);
	dev_list_unlock(dev);
	return b->n;
}

struct inode *dirty_next(struct wbc_dev *dev, struct dirty_batch *b)
{
	if (!b->n)
		return NULL;
	struct inode *ino = iq_pop(&b->files);
	b->n--;
	/* Each file is a few cache misses away (another CPU wrote it last):
	 * keep the next DIRTY_AHEAD files' lines in flight (those that
	 * write_inode_pages uses), and at half the distance their pages.
	 * A cursor moves one file per call once under way, onto a file whose
	 * line arrived calls ago. */
	cursor_shift(b, &b->ahead);
	cursor_shift(b, &b->mid);
	struct inode *a;
	int steps = 0;
	while ((a = cursor_step(b, &b->ahead, WBC_MIN(b->n, (size_t)DIRTY_AHEAD), &steps))) {
		__builtin_prefetch(&a->state, 1);
		__builtin_prefetch(&a->lock, 1);
		__builtin_prefetch((char *)&a->lock + 64, 1);
	}
	steps = 0;
	while ((a = cursor_step(b, &b->mid, WBC_MIN(b->ahead.n, (size_t)DIRTY_AHEAD / 2), &steps)))
		inode_prefetch_page(a);
	atomic_fetch_sub_explicit(&dev->nr_taken, 1, memory_order_relaxed);
	/* listed means I_DIRTY without I_SYNC (I_RETRY, I_TRIM maybe), and
	 * writers only ever add I_DIRTY: nothing else can change it now */
	unsigned old = atomic_exchange(&ino->state, I_SYNC);
	assert((old & ~(I_RETRY | I_TRIM)) == I_DIRTY);
	/* a failed write marked it since: written again, not only trimmed */
	b->trim = (old & (I_TRIM | I_RETRY)) == I_TRIM;
	return ino;
}

void dirty_untake(struct wbc_dev *dev, struct dirty_batch *b)
{
	if (!b->n)
		return;
	dev_list_lock(dev);
	/* first in line again: the head of the first queued bucket (its
	 * times are no longer looked at), or of b_io's own files */
	struct ino_queue *to = &dev->b_io;
	if (!list_empty(&dev->io_buckets)) {
		struct dirty_bucket *q = container_of(dev->io_buckets.next, struct dirty_bucket, link);
		q->n += b->n;
		to = &q->inodes;
	}
	iq_splice_head(to, &b->files);
	count_add(&dev->nr_b_io, (int64_t)b->n);
	atomic_fetch_sub_explicit(&dev->nr_taken, b->n, memory_order_relaxed);
	b->n = 0;
	cursors_reset(b);
	dev_list_unlock(dev);
}

/* I_SYNC and I_RETRY off, I_DIRTY on when @still_dirty; true: it stays
 * listed, *@retry: with b_more_io (a write failed meanwhile, or a write's
 * completion listed it to be trimmed: mark_inode_trim, which keeps
 * I_TRIM when nothing else is left to write). */
static bool requeue_state(struct inode *ino, bool still_dirty, bool *retry)
{
	unsigned s = atomic_load(&ino->state), n;
	do {
		assert(s & I_SYNC);
		n = (s & ~(I_SYNC | I_RETRY | I_TRIM)) | (still_dirty ? I_DIRTY : 0);
		if ((s & (I_TRIM | I_RETRY)) == I_TRIM && !still_dirty)
			n |= I_TRIM;
	} while (!atomic_compare_exchange_weak(&ino->state, &s, n));
	*retry = (s & I_RETRY) || (n & I_TRIM);
	return n & I_DIRTY;
}

/*
 * Put an inode back after the flusher wrote it.  @still_dirty: pages (or
 * the backend size) remain dirty; @slice_used: it stopped because its
 * slice ran out (or is to be retried after a failed write: @slice_used,
 * or a write that failed meanwhile, I_RETRY), so it goes to b_more_io and
 * keeps its age.  A file that
 * went clean is dropped from the system (its reference put); a writer that
 * dirties it after that pushes it to the inbox again.
 */
void dirty_put(struct wbc_dev *dev, struct dirty_put *p, struct inode *ino, bool still_dirty,
	       bool slice_used)
{
	if (old_list(dev)) {
		list_requeue(dev, ino, still_dirty, slice_used);   /* at once, no batch */
		return;
	}
	bool retry;
	if (!requeue_state(ino, still_dirty, &retry)) {
		iput(ino);
	} else if (slice_used || retry) {
		iq_add_tail(&p->more_io, ino);
		p->n_more_io++;
	} else {
		iq_add_tail(&p->redirty, ino);
		p->n_redirty++;
	}
}

/* Files put back dirty are filed in the newest bucket, their dirtied_when
 * moved forward only to the newest file's there (the kernel's
 * redirty_tail), or in a new bucket when the newest is sealed. */
void dirty_put_commit(struct wbc_dev *dev, struct dirty_put *p)
{
	if (!p->n_redirty && !p->n_more_io)
		return;
	struct dirty_bucket *tail = newest_bucket(dev), *nb = NULL;
	uint64_t cur = tail ? tail->last : 0, first = 0;
	bool marked = false;
	if (p->n_redirty) {
		if ((!tail || tail->sealed) && (nb = bucket_alloc(dev)))
			tail = NULL;
		for (struct inode *ino = p->redirty.head; ino; ino = ino->wb_next) {
			cur = ino->dirtied_when = WBC_MAX(ino->dirtied_when, cur);
			if (ino == p->redirty.head)
				first = cur;
			/* listed since dirty_put: a failed fsync may have
			 * marked it (mark_inode_retry), and a drain taken
			 * the flag without finding it */
			marked |= atomic_load_explicit(&ino->state, memory_order_acquire) & I_RETRY;
		}
	}
	dev_list_lock(dev);
	if (p->n_redirty) {
		if (nb) {
			bucket_open_locked(dev, nb, first);
			tail = nb;
		}
		if (tail) {
			iq_splice_tail(&tail->inodes, &p->redirty);
			tail->n += p->n_redirty;
			tail->last = cur;
			count_add(&dev->nr_b_dirty, (int64_t)p->n_redirty);
		} else {
			/* no bucket and no memory for one: with b_more_io */
			iq_splice_tail(&p->more_io, &p->redirty);
			p->n_more_io += p->n_redirty;
		}
	}
	iq_splice_tail(&dev->b_more_io, &p->more_io);
	count_add(&dev->nr_b_more_io, (int64_t)p->n_more_io);
	dev_list_unlock(dev);
	p->n_redirty = p->n_more_io = 0;
	/* in b_dirty now: the next drain's walk moves it to b_more_io (a
	 * mark after the load above sets the flag itself) */
	if (marked)
		atomic_store(&dev->retry_listed, true);
}

void dirty_requeue(struct inode *ino, bool still_dirty, bool slice_used)
{
	struct wbc_dev *dev = ino->dev;   /* @ino may be gone after the put */
	struct dirty_put p;
	dirty_put_init(&p);
	dirty_put(dev, &p, ino, still_dirty, slice_used);
	dirty_put_commit(dev, &p);
}
