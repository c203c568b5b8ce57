/*
 * The dirty_list= device tunable (src/writeback/dirty.c): the old single
 * dirty list (dirty_list=list, for experiments) against today's inbox and
 * time buckets (dirty_list=buckets, the default), each doing what it says:
 *   1. writers: under list every file a writer makes dirty is one take of
 *      the device's list lock by the writer (list_lock_writer_takes counts
 *      exactly the files), the file filed at once in b_dirty; under buckets
 *      (named or by default) writers never take the list lock (no take, no
 *      hold recorded while only writers ran);
 *   2. queue_io: under list a sync's queue_io walks every expired file and
 *      moves it to b_io in one pass, one hold of the lock (the most inodes
 *      walked and moved in one pass are both the file count), and the
 *      sync writes them all; under buckets it moves them without walking
 *      any (queue_io_max_walked 0);
 *   3. move_expired_inodes exactly (internal API, synthetic files): queue_io
 *      with an expiry between two sets of files moves exactly the older
 *      set, in dirtying order, after b_more_io's files, walks one file
 *      more (the one that ends the walk), and leaves the newer set in
 *      b_dirty; the flusher takes one file per hold; a file put back dirty
 *      goes to the tail of b_dirty dirtied no earlier than the newest
 *      there (redirty_tail), one whose slice ran out to b_more_io, a clean
 *      one off the lists with its reference put; a file dirtied while the
 *      flusher holds it is not filed by the writer (no list-lock take);
 *   4. stress (for SAN=thread as much as for its checks): writers create
 *      and rewrite files under list while the flusher's periodic passes
 *      (10 ms expiry) and syncs run; at the end everything is written back
 *      and read back right from the backend, and no file is left listed.
 */
#include "fake_inode.h"
#include "backend_util.h"

#include <pthread.h>

#define WRITERS 2
#define FILES 300

struct writer {
	wbc_dev *dev;
	int id, files, rounds;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	char buf[4096], name[32];
	for (int r = 0; r < w->rounds; r++)
		for (int i = 0; i < w->files; i++) {
			wbc_file *f;
			t_fill(buf, sizeof(buf), (uint64_t)(w->id * 100000 + i) * 7 + (uint64_t)r);
			snprintf(name, sizeof(name), "w%d-%d", w->id, i);
			CHECK_EQ(wbc_file_open(w->dev, name, WBC_O_CREAT, &f), 0);
			CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
			CHECK_EQ(wbc_file_close(f), 0);
		}
	return NULL;
}

static void run_writers(wbc_dev *dev, int files, int rounds)
{
	pthread_t th[WRITERS];
	struct writer w[WRITERS];
	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ .dev = dev, .id = i, .files = files, .rounds = rounds };
		CHECK_EQ(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
}

/* Every file of run_writers(@files, @rounds) holds its last round's bytes
 * in the backend. */
static void check_backend(wbc_dev *dev, int files, int rounds)
{
	char want[4096], got[4096], name[32];
	for (int id = 0; id < WRITERS; id++)
		for (int i = 0; i < files; i++) {
			uint64_t size = 0;
			snprintf(name, sizeof(name), "w%d-%d", id, i);
			t_fill(want, sizeof(want), (uint64_t)(id * 100000 + i) * 7 + (uint64_t)(rounds - 1));
			CHECK_EQ(t_backend_read(dev, name, got, sizeof(got), &size), 0);
			CHECK_EQ(size, sizeof(got));
			CHECK(!memcmp(want, got, sizeof(got)));
		}
}

static struct wbc_dev_debug debug_of(wbc_dev *dev)
{
	struct wbc_dev_debug d;
	CHECK_EQ(wbc_dev_debug(dev, &d), 0);
	return d;
}

/* 1 and 2 on one device of @spec; @list: its policy is the old one. */
static void writers_and_sync(wbc_cache *c, const char *spec, bool list)
{
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	const uint64_t total = WRITERS * FILES;
	struct wbc_dev_debug d0 = debug_of(dev);
	CHECK_EQ(d0.dirty_list, list ? 1 : 0);
	CHECK_EQ(d0.file_lock, 0);
	CHECK_EQ(d0.list_lock_holds, 0);
	run_writers(dev, FILES, 1);
	struct wbc_dev_debug d1 = debug_of(dev);
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, total);
	CHECK_EQ(d1.queue_io_passes, 0);          /* the flusher did not run */
	if (list) {
		/* one take per file made dirty, each a recorded hold */
		CHECK_EQ(d1.list_lock_writer_takes, total);
		CHECK_EQ(d1.list_lock_holds, total);
		CHECK_EQ(st.dirty_buckets, 0);
	} else {
		CHECK_EQ(d1.list_lock_writer_takes, 0);
		CHECK_EQ(d1.list_lock_holds, 0);      /* writers took no lock */
		CHECK_EQ(d1.list_lock_waits, 0);
	}
	printf("%s: %llu files dirtied, writers' list-lock takes %llu, holds %llu\n", spec,
	       (unsigned long long)total, (unsigned long long)d1.list_lock_writer_takes,
	       (unsigned long long)d1.list_lock_holds);

	CHECK_EQ(wbc_dev_sync(dev), 0);
	struct wbc_dev_debug d2 = debug_of(dev);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.written_back_bytes, total * 4096);
	CHECK_EQ(st.dirty_bytes, 0);
	CHECK(d2.queue_io_passes >= 1);
	CHECK(d2.queue_io_moved >= total);
	if (list) {
		/* the sync's first pass: every file walked and moved under one
		 * hold (a later pass, the prune, moves only what completions
		 * filed again) */
		CHECK_EQ(d2.queue_io_max_walked, total);
		CHECK_EQ(d2.queue_io_max_moved, total);
		CHECK(d2.queue_io_walked >= total);
	} else {
		CHECK_EQ(d2.queue_io_walked, 0);
		CHECK_EQ(d2.queue_io_max_walked, 0);
		CHECK_EQ(d2.list_lock_writer_takes, 0);
	}
	printf("%s: sync: %llu queue_io passes, %llu files moved (most in one %llu), %llu "
	       "inodes walked (most in one %llu), longest list-lock hold %.1f us\n", spec,
	       (unsigned long long)d2.queue_io_passes, (unsigned long long)d2.queue_io_moved,
	       (unsigned long long)d2.queue_io_max_moved, (unsigned long long)d2.queue_io_walked,
	       (unsigned long long)d2.queue_io_max_walked, (double)d2.list_lock_max_hold_ns / 1e3);
	check_backend(dev, FILES, 1);
}

/* Take every listed file (one per take under list) and put it back
 * clean: its lists' reference put.  Returns how many. */
static size_t clear_lists(struct wbc_dev *dev)
{
	struct dirty_batch b;
	struct inode *ino;
	size_t n = 0;
	dirty_batch_init(&b);
	for (;;) {
		if (!(ino = dirty_next(dev, &b))) {
			if (!dirty_take(dev, &b, UINT64_MAX, UINT64_MAX, NULL))
				break;
			continue;
		}
		dirty_requeue(ino, false, false);
		n++;
	}
	return n;
}

#define OLD 50
#define NEW 30

/* 3: the old list's operations on synthetic files. */
static void list_semantics(wbc_cache *c)
{
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "mem,dirty_list=list", &dev), 0);
	struct inode *f[OLD + NEW + 1];
	for (int i = 0; i < OLD + NEW + 1; i++)
		f[i] = t_fake_inode(dev);
	struct wbc_dev_debug d0 = debug_of(dev);
	for (int i = 0; i < OLD; i++)
		mark_inode_dirty(f[i]);
	uint64_t expiry = wbc_now_ns();
	while (wbc_now_ns() == expiry)
		;   /* the newer files are dirtied strictly after it */
	for (int i = OLD; i < OLD + NEW; i++)
		mark_inode_dirty(f[i]);
	struct wbc_dev_debug d1 = debug_of(dev);
	CHECK_EQ(d1.list_lock_writer_takes - d0.list_lock_writer_takes, OLD + NEW);
	for (int i = 0; i < OLD + NEW; i++) {
		CHECK_EQ(atomic_load(&f[i]->state), I_DIRTY);
		CHECK_EQ(atomic_load(&f[i]->refs), 3);   /* the lists' reference */
		CHECK(i < OLD ? f[i]->dirtied_when <= expiry : f[i]->dirtied_when > expiry);
	}
	/* dirtying a dirty file again: nothing (no take) */
	mark_inode_dirty(f[0]);
	CHECK_EQ(debug_of(dev).list_lock_writer_takes, d1.list_lock_writer_takes);

	/* a file on b_more_io goes first */
	struct inode *x = f[OLD + NEW];
	dev_list_lock(dev);
	atomic_store(&x->state, I_DIRTY);
	igrab(x);
	iq_add_tail(&dev->b_more_io, x);
	dev->nr_b_more_io++;
	bool more = queue_io_locked(dev, expiry, UINT64_MAX);
	CHECK(!more);
	CHECK_EQ(dev->nr_b_io, OLD + 1);
	CHECK_EQ(dev->nr_b_dirty, NEW);
	CHECK_EQ(dev->nr_b_more_io, 0);
	size_t k = 0;
	for (struct inode *ino = dev->b_io.head; ino; ino = ino->wb_next, k++)
		CHECK(ino == (k == 0 ? x : f[k - 1]));
	CHECK_EQ(k, OLD + 1);
	k = 0;
	for (struct inode *ino = dev->l_dirty.head; ino; ino = ino->wb_next, k++)
		CHECK(ino == f[OLD + k]);
	CHECK_EQ(k, NEW);
	dev_list_unlock(dev);
	struct wbc_dev_debug d2 = debug_of(dev);
	CHECK_EQ(d2.queue_io_passes - d1.queue_io_passes, 1);
	CHECK_EQ(d2.queue_io_moved - d1.queue_io_moved, OLD + 1);
	CHECK_EQ(d2.queue_io_walked - d1.queue_io_walked, OLD + 1);   /* OLD, and the stopper */
	CHECK_EQ(d2.queue_io_max_walked, OLD + 1);

	/* one file per take, in b_io's order */
	struct dirty_batch b;
	dirty_batch_init(&b);
	bool no = false;
	CHECK_EQ(dirty_take(dev, &b, 0, 0, &no), 1);
	struct inode *t = dirty_next(dev, &b);
	CHECK(t == x && !dirty_next(dev, &b));
	CHECK_EQ(atomic_load(&x->state), I_SYNC);
	/* dirtied while the flusher holds it: not filed by the writer */
	uint64_t takes = debug_of(dev).list_lock_writer_takes;
	mark_inode_dirty(x);
	CHECK_EQ(atomic_load(&x->state), I_SYNC | I_DIRTY);
	CHECK_EQ(debug_of(dev).list_lock_writer_takes, takes);
	/* put back dirty, slice not used: redirty_tail */
	uint64_t newest = f[OLD + NEW - 1]->dirtied_when;
	dirty_requeue(x, true, false);
	CHECK_EQ(atomic_load(&x->state), I_DIRTY);
	CHECK(dev->l_dirty.tail == x);
	CHECK(x->dirtied_when >= newest);
	CHECK_EQ(dev->nr_b_dirty, NEW + 1);
	/* the next: slice used, to b_more_io */
	CHECK_EQ(dirty_take(dev, &b, 0, 0, &no), 1);
	t = dirty_next(dev, &b);
	CHECK(t == f[0]);
	dirty_requeue(t, true, true);
	CHECK(dev->b_more_io.head == f[0] && dev->nr_b_more_io == 1);
	/* the next: clean, off the lists, reference put */
	CHECK_EQ(dirty_take(dev, &b, 0, 0, &no), 1);
	t = dirty_next(dev, &b);
	CHECK(t == f[1]);
	dirty_requeue(t, false, false);
	CHECK_EQ(atomic_load(&f[1]->state), 0);
	CHECK_EQ(atomic_load(&f[1]->refs), 2);
	CHECK_EQ(dev->nr_b_io, OLD - 2);

	/* b_dirty stayed in dirtying order */
	uint64_t prev = 0;
	for (struct inode *ino = dev->l_dirty.head; ino; ino = ino->wb_next) {
		CHECK(ino->dirtied_when >= prev);
		prev = ino->dirtied_when;
	}
	/* everything else comes off; the references are back to the two
	 * the test holds */
	CHECK_EQ(clear_lists(dev), OLD + NEW);
	for (int i = 0; i < OLD + NEW + 1; i++) {
		CHECK_EQ(atomic_load(&f[i]->state), 0);
		CHECK_EQ(atomic_load(&f[i]->refs), 2);
		free(f[i]);
	}
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty + st.files_io + st.files_more_io, 0);
}

/* 4: writers, periodic passes and syncs at once under list. */
static void stress(void)
{
	struct wbc_config cfg = t_config(64u << 20, 4096);
	cfg.dirty_expire_centisecs = 1;
	cfg.dirty_writeback_centisecs = 1;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "mem,dirty_list=list", &dev), 0);
	const int files = 200, rounds = 5;
	pthread_t th[WRITERS];
	struct writer w[WRITERS];
	for (int i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ .dev = dev, .id = i, .files = files, .rounds = rounds };
		CHECK_EQ(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (int i = 0; i < 5; i++)
		CHECK_EQ(wbc_dev_sync(dev), 0);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(wbc_dev_sync(dev), 0);
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes, 0);
	CHECK_EQ(st.files_dirty + st.files_io + st.files_more_io, 0);
	struct wbc_dev_debug d = debug_of(dev);
	CHECK(d.list_lock_writer_takes >= (uint64_t)WRITERS * files);
	CHECK(d.queue_io_passes > 0);
	printf("stress: %llu writers' takes, %llu waits, %llu queue_io passes, %llu moved\n",
	       (unsigned long long)d.list_lock_writer_takes, (unsigned long long)d.list_lock_waits,
	       (unsigned long long)d.queue_io_passes, (unsigned long long)d.queue_io_moved);
	check_backend(dev, files, rounds);
	CHECK_EQ(wbc_cache_close(c), 0);
}

int main(void)
{
	wbc_cache *c = t_quiet_cache(64u << 20);
	/* bad values are refused */
	wbc_dev *bad;
	char msg[256];
	CHECK_EQ(wbc_dev_add_msg(c, "mem,dirty_list=tree", &bad, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "dirty_list"));
	CHECK_EQ(wbc_dev_add(c, "mem,dirty_list=", &bad), -EINVAL);

	writers_and_sync(c, "mem,dirty_list=list", true);
	writers_and_sync(c, "mem,dirty_list=buckets", false);
	writers_and_sync(c, "mem", false);
	list_semantics(c);
	CHECK_EQ(wbc_cache_close(c), 0);
	stress();
	printf("ok\n");
	return 0;
}
