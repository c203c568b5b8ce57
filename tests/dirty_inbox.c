/*
 * The lock-free hand-over of newly dirtied files (src/dirty.c):
 *   1. writers on several threads dirty files through the API; every file
 *      is counted while in the inbox, filed exactly once by dirty_drain,
 *      in a bucket whose window holds its dirtied_when, buckets in order
 *      (the drain's two ways are checked in drain_order), and
 *      a sync writes every one of them;
 *   2. the state machine on synthetic files: a file under I_SYNC that is
 *      dirtied is not pushed (the flusher puts it back, listed); a clean
 *      one is pushed once, with the lists' reference; a file that is put
 *      back clean loses that reference;
 *   3. stress: writer threads keep dirtying a set of synthetic files while
 *      this thread plays the flusher (drain, take, put back clean or
 *      dirty); at the end every file is listed at most once, and its
 *      reference count matches whether it is listed.  Meant for
 *      SAN=thread as much as for its checks.
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
	struct inbox_slot *in = &dev->inbox[slot];
	CHECK_EQ(atomic_fetch_or(&ino->state, I_DIRTY), 0);
	igrab(ino);
	atomic_fetch_add(&in->n, 1);
	pthread_mutex_lock(&in->lock);
	ino->dirtied_when = when;
	list_add_tail(&ino->wb_list, &in->files);
	in->listed++;
	pthread_mutex_unlock(&in->lock);
}

/* The drain's two ways: lists that fit one bucket go whole (each slot's
 * files in their order, times untouched); lists that span buckets are
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
	dirty_drain(dev);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, 4);
	CHECK_EQ(st.dirty_buckets, 1);
	CHECK_EQ(take_all(dev, got, 8), 4);
	CHECK(got[0] == f[0] && got[1] == f[2] && got[2] == f[1] && got[3] == f[3]);
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
	/* every append was a timed hold of an inbox lock */
	CHECK(st.inbox_lock_holds >= total);
	uint64_t in_hist = 0;
	for (int i = 0; i < 32; i++)
		in_hist += st.inbox_lock_hold_hist[i];
	CHECK_EQ(in_hist, st.inbox_lock_holds);
	CHECK(st.inbox_lock_max_hold_ns > 0);
	CHECK(wbc_inbox_lock_percentile(&st, 100) >= st.inbox_lock_max_hold_ns);
	dirty_drain(dev);
	CHECK_EQ(dirty_inbox_count(dev), 0);
	for (int i = 0; i < PCPU_SLOTS; i++)
		CHECK(list_empty(&dev->inbox[i].files));
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
		for (struct list_head *l = b->inodes.next; l != &b->inodes; l = l->next) {
			struct inode *ino = container_of(l, struct inode, wb_list);
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
	mark_inode_dirty(a);
	mark_inode_dirty(b);
	mark_inode_dirty(c3);
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

	CHECK_EQ(wbc_cache_close(c), 0);
	free(a);
	free(b);
	free(c3);
	for (int i = 0; i < SYN; i++)
		free(syn[i]);
	return 0;
}
