/*
 * The lock-free hand-over of newly dirtied files (src/writeback/dirty.c):
 *   1. writers on several threads dirty files through the API; every file
 *      is counted while in the inbox, each slot's chain holds as many
 *      files as its top says, newest first, ending at its recorded oldest;
 *      every file is filed exactly once by dirty_drain, in a bucket whose
 *      window holds its dirtied_when, buckets in order (the drain's two
 *      ways are checked in drain_order), and a sync writes every one;
 *   2. the state machine on synthetic files: a file under I_SYNC that is
 *      dirtied is not pushed (the flusher puts it back, listed); a clean
 *      one is pushed once, with the lists' reference; a file that is put
 *      back clean loses that reference;
 *   3. stress: writer threads keep dirtying a set of synthetic files while
 *      this thread plays the flusher (drain, take, put back clean or
 *      dirty); at the end every file is listed at most once, and its
 *      reference count matches whether it is listed;
 *   4. threads push distinct files on one slot while this thread drains
 *      it: every file is taken exactly once;
 *   5. the list lock's waits: a take that finds it held is counted, one
 *      that does not is not;
 *   6. a listed file whose write failed (an fsync wrote it: mark_inode_retry
 *      marks it I_RETRY where it is) reaches b_more_io at the next drains
 *      wherever it was when marked: pushed to a slot the running drain had
 *      already taken, on the flusher's private put-back list, or being
 *      filed by its writer (old policy) when a drain took the flag; it
 *      waited in b_dirty for dirty_expire, its retry flag consumed.  A
 *      second mark of a marked file costs no walk.
 * 3 and 4 are meant for SAN=thread as much as for their checks.
 */
#include "fake_inode.h"

#define THREADS 4
#define FILES_PER 500
#define SYN 64

static wbc_dev *gdev;

static void *api_writer(void *arg)
{
	int id = (int)(intptr_t)arg;
	char buf[4096], name[32];
	t_fill(buf, sizeof(buf), (uint64_t)id);
	for (int i = 0; i < FILES_PER; i++) {
		wbc_file *f;
		snprintf(name, sizeof(name), "w%d-%d", id, i);
		CHECK_EQ(wbc_file_open(gdev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
		CHECK_EQ(wbc_file_close(f), 0);
	}
	return NULL;
}

/* Take everything listed (all calls); returns the count. */
static size_t take_all(struct wbc_dev *dev, struct inode **out, size_t max)
{
	struct dirty_batch b;
	dirty_batch_init(&b);
	size_t n = 0;
	while (n < max) {
		struct inode *ino = dirty_next(dev, &b);
		if (ino)
			out[n++] = ino;
		else if (!dirty_take(dev, &b, UINT64_MAX, UINT64_MAX, NULL))
			break;
	}
	CHECK_EQ(b.n, 0);
	return n;
}

/* What mark_inode_dirty does for a writer on CPU slot @slot, with a
 * chosen time. */
static void push_slot(struct wbc_dev *dev, unsigned slot, struct inode *ino, uint64_t when)
{
	CHECK_EQ(atomic_fetch_or(&ino->state, I_DIRTY), 0);
	igrab(ino);
	inbox_push(dev, slot, ino, when);
}

/* Walk slot @in's chain (nothing pushing): its top's count and oldest are
 * right, times never increase from newest to oldest.  Returns the count. */
static uint64_t check_chain(const struct inbox_slot *in)
{
	struct inbox_chain c = inbox_peek(in);
	uint64_t n = 0, prev = UINT64_MAX;
	struct inode *last = NULL;
	for (struct inode *ino = c.head; ino; ino = ino->wb_next) {
		CHECK(ino->dirtied_when <= prev);
		prev = ino->dirtied_when;
		last = ino;
		n++;
	}
	CHECK_EQ(n, c.n);
	CHECK(last == (n ? c.bottom : NULL));
	return n;
}

/* The drain's two ways: chains that fit one bucket go whole (each slot's
 * files newest first, times untouched); chains that span buckets are
 * merged into dirtying order and filed bucket by bucket. */
static void drain_order(struct wbc_dev *dev)
{
	struct inode *f[4], *got[8];
	for (int i = 0; i < 4; i++)
		f[i] = t_fake_inode(dev);
	uint64_t w = dev->bucket_ns, t = wbc_now_ns() + 1000 * w;
	struct wbc_dev_stats st;

	/* whole: slot 3 has t+1, t+3; slot 5 has t+2, t+4 */
	push_slot(dev, 3, f[0], t + 1);
	push_slot(dev, 5, f[1], t + 2);
	push_slot(dev, 3, f[2], t + 3);
	push_slot(dev, 5, f[3], t + 4);
	CHECK_EQ(dirty_inbox_count(dev), 4);
	CHECK_EQ(check_chain(&dev->inbox[3]), 2);
	CHECK(inbox_peek(&dev->inbox[3]).head == f[2] && inbox_peek(&dev->inbox[3]).bottom == f[0]);
	CHECK_EQ(check_chain(&dev->inbox[5]), 2);
	dirty_drain(dev);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, 4);
	CHECK_EQ(st.dirty_buckets, 1);
	CHECK_EQ(take_all(dev, got, 8), 4);
	CHECK(got[0] == f[2] && got[1] == f[0] && got[2] == f[3] && got[3] == f[1]);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(f[i]->dirtied_when, t + 1 + (uint64_t)i);   /* not clobbered */
		dirty_requeue(f[i], false, false);
	}

	/* spanning: slot 2 has t, t+2w; slot 7 has t+w/2, t+3w */
	t += 10 * w;
	push_slot(dev, 2, f[0], t);
	push_slot(dev, 7, f[1], t + w / 2);
	push_slot(dev, 2, f[2], t + 2 * w);
	push_slot(dev, 7, f[3], t + 3 * w);
	dirty_drain(dev);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, 4);
	CHECK_EQ(st.dirty_buckets, 3);                /* [t, t+w), t+2w, t+3w */
	CHECK_EQ(take_all(dev, got, 8), 4);
	for (int i = 0; i < 4; i++) {
		CHECK(got[i] == f[i]);                    /* dirtying order */
		dirty_requeue(f[i], false, false);
	}
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(atomic_load(&f[i]->refs), 2);
		free(f[i]);
	}
}

/* Keep this thread on one CPU (one inbox slot), so that the files it
 * dirties are filed in the order it dirtied them. */
static void pin_to_one_cpu(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(sched_getcpu(), &set);
	CHECK_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
}

static struct inode *syn[SYN];
static atomic_bool stop;

static void *syn_writer(void *arg)
{
	uint64_t seed = (uint64_t)(intptr_t)arg + 1;
	while (!atomic_load(&stop))
		mark_inode_dirty(syn[t_rand(&seed) % SYN]);
	return NULL;
}

#define PUSHERS 3
#define PUSH_EACH 3000
static struct inode *pushed[PUSHERS][PUSH_EACH];
static atomic_int pushers_done;

/* Every pusher on slot 0, whatever CPU it runs on: the most CAS races. */
static void *one_slot_pusher(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int i = 0; i < PUSH_EACH; i++)
		push_slot(gdev, 0, pushed[id][i], 0);
	atomic_fetch_add(&pushers_done, 1);
	return NULL;
}

/* 4: drain and take while the pushers push; each file is taken once. */
static void one_slot_race(struct wbc_dev *dev)
{
	static struct inode *got[PUSHERS * PUSH_EACH];
	pthread_t th[PUSHERS];
	for (int t = 0; t < PUSHERS; t++)
		for (int i = 0; i < PUSH_EACH; i++)
			pushed[t][i] = t_fake_inode(dev);
	for (int t = 0; t < PUSHERS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, one_slot_pusher, (void *)(intptr_t)t), 0);
	size_t taken = 0;
	for (bool last = false; !last;) {
		last = atomic_load(&pushers_done) == PUSHERS;
		dirty_drain(dev);
		size_t n = take_all(dev, got, PUSHERS * PUSH_EACH);
		for (size_t i = 0; i < n; i++) {
			got[i]->nr_dirty++;                /* times taken */
			dirty_requeue(got[i], false, false);
		}
		taken += n;
	}
	for (int t = 0; t < PUSHERS; t++)
		pthread_join(th[t], NULL);
	CHECK_EQ(taken, PUSHERS * PUSH_EACH);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	CHECK_EQ(check_chain(&dev->inbox[0]), 0);
	for (int t = 0; t < PUSHERS; t++)
		for (int i = 0; i < PUSH_EACH; i++) {
			CHECK_EQ(pushed[t][i]->nr_dirty, 1);
			CHECK_EQ(atomic_load(&pushed[t][i]->state), 0);
			CHECK_EQ(atomic_load(&pushed[t][i]->refs), 2);
			free(pushed[t][i]);
		}
}

/* Hold the list lock until a thread started with @fn(@arg) waits for it
 * (it counts its wait before it blocks; 30 s: a deadline for a count
 * that never comes, not a timing the test relies on). */
static void start_blocked(struct wbc_dev *dev, pthread_t *th, void *(*fn)(void *), void *arg)
{
	struct wbc_dev_debug st;
	CHECK_EQ(wbc_dev_debug(dev, &st), 0);
	uint64_t w0 = st.list_lock_waits;
	CHECK_EQ(pthread_create(th, NULL, fn, arg), 0);
	uint64_t give_up = wbc_now_ns() + 30ull * 1000 * 1000 * 1000;
	do {
		sched_yield();
		CHECK_EQ(wbc_dev_debug(dev, &st), 0);
	} while (st.list_lock_waits == w0 && wbc_now_ns() < give_up);
	CHECK_EQ(st.list_lock_waits, w0 + 1);
}

static void *lock_taker(void *arg)
{
	struct wbc_dev *dev = arg;
	dev_list_lock(dev);
	dev_list_unlock(dev);
	return NULL;
}

/* 5: list_lock_waits counts exactly the takes that found the lock held. */
static void list_lock_waits(struct wbc_dev *dev)
{
	struct wbc_dev_debug st;
	CHECK_EQ(wbc_dev_debug(dev, &st), 0);
	uint64_t w0 = st.list_lock_waits;
	dev_list_lock(dev);                        /* free: not a wait */
	dev_list_unlock(dev);
	CHECK_EQ(wbc_dev_debug(dev, &st), 0);
	CHECK_EQ(st.list_lock_waits, w0);
	dev_list_lock(dev);
	pthread_t th;
	start_blocked(dev, &th, lock_taker, dev);
	dev_list_unlock(dev);
	pthread_join(th, NULL);
	CHECK_EQ(wbc_dev_debug(dev, &st), 0);
	CHECK_EQ(st.list_lock_waits, w0 + 1);
}

static void *drainer(void *arg)
{
	dirty_drain(arg);
	return NULL;
}

static void *dirtier(void *arg)
{
	mark_inode_dirty(arg);
	return NULL;
}

/* Where the listed files are: @dirty in b_dirty, @more in b_more_io. */
static void check_where(struct wbc_dev *dev, const char *what, uint64_t dirty, uint64_t more)
{
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	printf("retry %s: b_dirty %llu, b_more_io %llu (want %llu, %llu)\n", what,
	       (unsigned long long)st.files_dirty, (unsigned long long)st.files_more_io,
	       (unsigned long long)dirty, (unsigned long long)more);
	CHECK_EQ(st.files_dirty, dirty);
	CHECK_EQ(st.files_more_io, more);
}

/* Take @n files off the lists, put back clean. */
static void release_all(struct wbc_dev *dev, size_t n)
{
	struct inode *got[4];
	CHECK_EQ(take_all(dev, got, 4), n);
	for (size_t i = 0; i < n; i++)
		dirty_requeue(got[i], false, false);
	CHECK(!atomic_load(&dev->retry_listed));
}

/* 6: files marked I_RETRY while listed end on b_more_io. */
static void retry_marks(struct wbc_dev *dev, struct wbc_dev *old)
{
	struct inode *x = t_fake_inode(dev), *y = t_fake_inode(dev);
	pthread_t th;
	CHECK(!atomic_load(&dev->retry_listed));
	/* a. x pushed to a slot the drain took already, marked before the
	 * drain walks: the drain is held at the list lock, with y's chain */
	mark_inode_dirty(y);
	dev_list_lock(dev);
	start_blocked(dev, &th, drainer, dev);
	CHECK_EQ(dirty_inbox_count(dev), 1);           /* y: taken, not filed */
	mark_inode_dirty(x);
	mark_inode_retry(x);
	CHECK_EQ(atomic_load(&x->state), I_DIRTY | I_RETRY);
	dev_list_unlock(dev);
	pthread_join(th, NULL);
	dirty_drain(dev);
	check_where(dev, "after a slot's take", 1, 1);
	/* d. marked again (another failed fsync): no new walk */
	mark_inode_retry(x);
	CHECK(!atomic_load(&dev->retry_listed));
	release_all(dev, 2);

	/* b. put back dirty, marked, a drain, then the put's commit */
	struct dirty_batch batch;
	struct dirty_put put;
	dirty_batch_init(&batch);
	dirty_put_init(&put);
	mark_inode_dirty(x);
	dirty_drain(dev);
	CHECK_EQ(dirty_take(dev, &batch, UINT64_MAX, UINT64_MAX, NULL), 1);
	CHECK(dirty_next(dev, &batch) == x);
	dirty_put(dev, &put, x, true, false);          /* still dirty */
	mark_inode_retry(x);
	dirty_drain(dev);                              /* the flusher's, mid-pass */
	dirty_put_commit(dev, &put);
	dirty_drain(dev);
	check_where(dev, "put back", 0, 1);
	release_all(dev, 1);

	/* c. old policy: marked while its writer waits to file it; a drain
	 * takes the flag and walks meanwhile (as retry_listed_move: the flag
	 * taken, then the walk, which cannot find x) */
	struct inode *z = t_fake_inode(old);
	dev_list_lock(old);
	start_blocked(old, &th, dirtier, z);
	mark_inode_retry(z);
	CHECK(atomic_exchange(&old->retry_listed, false));
	dev_list_unlock(old);
	pthread_join(th, NULL);
	dirty_drain(old);
	check_where(old, "being filed (list)", 0, 1);
	release_all(old, 1);
	free(x);
	free(y);
	free(z);
}

int main(void)
{
	struct wbc_config cfg = t_config(64u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;       /* the flusher stays out of it */
	cfg.dirty_background_bytes = 48u << 20;
	cfg.dirty_bytes = 56u << 20;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &gdev), 0);
	struct wbc_dev *dev = gdev;
	struct wbc_dev_stats st;

	/* 1. API writers, then drain */
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, api_writer, (void *)(intptr_t)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	const uint64_t total = THREADS * FILES_PER;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, total);              /* counted in the inbox */
	CHECK_EQ(dirty_inbox_count(dev), total);
	uint64_t chained = 0, retries = 0;
	for (int i = 0; i < PCPU_SLOTS; i++) {
		chained += check_chain(&dev->inbox[i]);
		retries += atomic_load(&dev->inbox[i].retries);
	}
	CHECK_EQ(chained, total);
	struct wbc_dev_debug dbg;
	CHECK_EQ(wbc_dev_debug(dev, &dbg), 0);
	CHECK_EQ(dbg.inbox_push_retries, retries);
	dirty_drain(dev);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	for (int i = 0; i < PCPU_SLOTS; i++)
		CHECK_EQ(check_chain(&dev->inbox[i]), 0);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, total);              /* now in buckets */
	/* Buckets in time order, each file within its bucket's window (it
	 * may precede the start by the drain's own time: allow 1 s) and no
	 * newer than its last; a drain that spans buckets files in order. */
	dev_list_lock(dev);
	uint64_t seen = 0, prev_start = 0;
	struct list_head *bl;
	for (bl = dev->buckets.next; bl != &dev->buckets; bl = bl->next) {
		struct dirty_bucket *b = container_of(bl, struct dirty_bucket, link);
		CHECK(b->start >= prev_start);
		prev_start = b->start;
		uint64_t in_bucket = 0;
		for (struct inode *ino = b->inodes.head; ino; ino = ino->wb_next) {
			CHECK_EQ(atomic_load(&ino->state), I_DIRTY);
			CHECK(ino->dirtied_when < b->start + dev->bucket_ns);
			CHECK(ino->dirtied_when + 1000000000ull > b->start);
			CHECK(ino->dirtied_when <= b->last);
			CHECK_EQ(atomic_load(&ino->refs), 1);   /* the lists' only */
			in_bucket++;
		}
		CHECK_EQ(in_bucket, b->n);
		seen += in_bucket;
	}
	dev_list_unlock(dev);
	CHECK_EQ(seen, total);                         /* each exactly once */
	CHECK_EQ(wbc_dev_sync(dev), 0);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty + st.files_io + st.files_more_io, 0);
	CHECK_EQ(st.written_back_bytes, total * 4096);

	/* 2. the state machine, on synthetic files, one CPU slot */
	cpu_set_t all;
	CHECK_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
	pin_to_one_cpu();
	struct inode *a = t_fake_inode(dev), *got[SYN * 2];
	mark_inode_dirty(a);                           /* clean: pushed */
	CHECK_EQ(atomic_load(&a->state), I_DIRTY);
	CHECK_EQ(atomic_load(&a->refs), 3);
	mark_inode_dirty(a);                           /* already dirty: nothing */
	CHECK_EQ(dirty_inbox_count(dev), 1);
	CHECK_EQ(atomic_load(&a->refs), 3);
	dirty_drain(dev);
	CHECK_EQ(take_all(dev, got, SYN * 2), 1);
	CHECK(got[0] == a);
	CHECK_EQ(atomic_load(&a->state), I_SYNC);
	mark_inode_dirty(a);                           /* under I_SYNC: not pushed */
	CHECK_EQ(atomic_load(&a->state), I_SYNC | I_DIRTY);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	dirty_requeue(a, false, false);                /* redirtied: listed again */
	CHECK_EQ(atomic_load(&a->state), I_DIRTY);
	CHECK_EQ(atomic_load(&a->refs), 3);
	CHECK_EQ(take_all(dev, got, SYN * 2), 1);
	dirty_requeue(a, false, false);                /* clean: reference put */
	CHECK_EQ(atomic_load(&a->state), 0);
	CHECK_EQ(atomic_load(&a->refs), 2);
	/* taken but not reached: back first in line, listed */
	struct inode *b = t_fake_inode(dev), *c3 = t_fake_inode(dev);
	mark_inode_dirty(c3);                          /* a drain's files come */
	mark_inode_dirty(b);                           /* newest first: a, b, c3 */
	mark_inode_dirty(a);
	dirty_drain(dev);
	struct dirty_batch batch;
	dirty_batch_init(&batch);
	CHECK_EQ(dirty_take(dev, &batch, UINT64_MAX, UINT64_MAX, NULL), 3);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_io, 3);                      /* the batch counts */
	CHECK(dirty_next(dev, &batch) == a);
	dirty_untake(dev, &batch);                     /* b, c3 go back */
	CHECK_EQ(batch.n, 0);
	CHECK_EQ(atomic_load(&b->state), I_DIRTY);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_io, 2);
	mark_inode_dirty(a);                           /* written meanwhile */
	dirty_requeue(a, false, true);                 /* slice used: b_more_io */
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_more_io, 1);
	CHECK_EQ(take_all(dev, got, SYN * 2), 3);
	CHECK(got[0] == b && got[1] == c3 && got[2] == a);   /* order kept */
	dirty_requeue(a, false, false);
	dirty_requeue(b, false, false);
	dirty_requeue(c3, false, false);
	CHECK_EQ(atomic_load(&c3->refs), 2);
	CHECK_EQ(atomic_load(&a->refs), 2);
	CHECK_EQ(atomic_load(&b->refs), 2);

	CHECK_EQ(sched_setaffinity(0, sizeof(all), &all), 0);

	/* 2b. the drain's two ways */
	drain_order(dev);

	/* 3. stress: writers dirty, this thread flushes */
	for (int i = 0; i < SYN; i++)
		syn[i] = t_fake_inode(dev);
	for (int i = 0; i < THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, syn_writer, (void *)(intptr_t)i), 0);
	uint64_t rounds = 0, seed = 99;
	struct dirty_put put;
	dirty_put_init(&put);
	/* at least 2,000 rounds and 10,000 files handled, however late the
	 * writers get a CPU */
	for (int r = 0; r < 2000 || rounds < 10000; r++) {
		dirty_drain(dev);
		if (!batch.n)
			dirty_take(dev, &batch, UINT64_MAX, UINT64_MAX, NULL);
		struct inode *ino;
		for (int i = 0; i < 16 && (ino = dirty_next(dev, &batch)); i++) {
			rounds++;
			dirty_put(dev, &put, ino, t_rand(&seed) % 4 == 0, t_rand(&seed) % 2);
		}
		dirty_put_commit(dev, &put);
		if (t_rand(&seed) % 8 == 0)
			dirty_untake(dev, &batch);
	}
	dirty_untake(dev, &batch);
	atomic_store(&stop, true);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	dirty_drain(dev);
	size_t n = take_all(dev, got, SYN * 2);
	CHECK(n <= SYN);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			CHECK(got[i] != got[j]);               /* listed once at most */
	for (int i = 0; i < SYN; i++) {
		bool listed = false;
		for (size_t j = 0; j < n; j++)
			listed |= got[j] == syn[i];
		unsigned s = atomic_load(&syn[i]->state);
		CHECK_EQ(s, listed ? I_SYNC : 0);
		CHECK_EQ(atomic_load(&syn[i]->refs), listed ? 3 : 2);
	}
	for (size_t i = 0; i < n; i++)
		dirty_requeue(got[i], false, false);
	for (int i = 0; i < SYN; i++)
		CHECK_EQ(atomic_load(&syn[i]->refs), 2);

	/* 4. many pushers on one slot, this thread taking */
	one_slot_race(dev);

	/* 5. waits for the list lock */
	list_lock_waits(dev);

	/* 6. files marked for retry while listed */
	wbc_dev *old;
	CHECK_EQ(wbc_dev_add(c, "mem,dirty_list=list", &old), 0);
	retry_marks(dev, old);

	CHECK_EQ(wbc_cache_close(c), 0);
	free(a);
	free(b);
	free(c3);
	for (int i = 0; i < SYN; i++)
		free(syn[i]);
	return 0;
}
