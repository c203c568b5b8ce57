/*
 * The time buckets of dirty-file tracking (src/writeback/dirty.c), driven
 * through the internal API with synthetic files and explicit times, so
 * nothing depends on the clock:
 *   - expiry order: queue_io(T) takes exactly the files filed at or before
 *     T plus at most one bucket width after it, oldest first, in calls of
 *     at most QUEUE_IO_BUCKETS buckets;
 *   - b_more_io: a file that used its slice is taken after the files that
 *     expired by the next queue_io, never before;
 *   - a file put back is filed in the newest bucket, its dirtied_when
 *     moves forward only to the newest file's, and the order holds;
 *   - seal: files filed after a seal are not queued up to the seal (sync);
 *   - the list counts in wbc_dev_stats follow the lists.
 */
#include "fake_inode.h"

#define N 1000

static void file_at(struct wbc_dev *dev, struct inode *ino, uint64_t when)
{
	dev_list_lock(dev);
	ino->state |= I_DIRTY;
	dirty_add_locked(dev, ino, when);
	dev_list_unlock(dev);
}

/* Queue everything up to @t (all calls) and take it: the files in order. */
static size_t take_upto(struct wbc_dev *dev, uint64_t t, uint64_t upto, struct inode **out,
			unsigned *calls)
{
	size_t n = 0;
	bool more = true;
	*calls = 0;
	while (more) {
		dev_list_lock(dev);
		uint64_t before = dev->nr_buckets;
		more = queue_io_locked(dev, t, upto);
		CHECK(before - dev->nr_buckets <= QUEUE_IO_BUCKETS);
		(*calls)++;
		dev_list_unlock(dev);
		/* take what is queued, without queueing more */
		struct dirty_batch b;
		struct inode *ino;
		bool no = false;
		dirty_batch_init(&b);
		while (dirty_take(dev, &b, 0, 0, &no))
			while ((ino = dirty_next(dev, &b)))
				out[n++] = ino;
	}
	return n;
}

static void put_back(struct inode *ino, bool slice_used)
{
	dirty_requeue(ino, true, slice_used);
}

/* take every listed file off the lists (end of a case) */
static void drain(struct wbc_dev *dev, struct inode **buf)
{
	unsigned calls;
	size_t n = take_upto(dev, UINT64_MAX, UINT64_MAX, buf, &calls);
	for (size_t i = 0; i < n; i++)
		buf[i]->state = 0;
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty + st.files_io + st.files_more_io, 0);
}

int main(void)
{
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;   /* the flusher stays out of it */
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	uint64_t w = dev->bucket_ns;
	CHECK(w >= 1000000 && w <= 100000000);
	static struct inode *ino[N], *got[N + 10];
	for (int i = 0; i < N; i++)
		ino[i] = t_fake_inode(dev);

	/* 1. expiry order: four files per bucket width, in time order */
	uint64_t base = 1000 * w;
	for (int i = 0; i < N; i++)
		file_at(dev, ino[i], base + (uint64_t)i * (w / 4));
	struct wbc_dev_stats st;
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, N);
	CHECK(st.dirty_buckets >= N / 4 && st.dirty_buckets <= N / 4 + 1);
	uint64_t t = base + 600 * (w / 4);
	unsigned calls;
	size_t n = take_upto(dev, t, UINT64_MAX, got, &calls);
	CHECK(n >= 601 && n <= 601 + 4);      /* all at or before t, at most a width after */
	CHECK(calls >= 2);                     /* 150 buckets: more than one call */
	for (size_t i = 0; i < n; i++) {
		CHECK(got[i] == ino[i]);           /* oldest first */
		CHECK(got[i]->dirtied_when < t + w);
		CHECK(got[i]->state & I_SYNC);
	}
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_dirty, N - n);
	CHECK_EQ(st.files_io, 0);

	/* 2. b_more_io: got[0] used its slice, got[1] did not */
	put_back(got[0], true);
	put_back(got[1], false);
	for (size_t i = 2; i < n; i++)
		got[i]->state = 0;                 /* written clean: off the lists */
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.files_more_io, 1);
	uint64_t t2 = base + 800 * (w / 4);
	size_t m = take_upto(dev, t2, UINT64_MAX, got + 2, &calls);
	/* the expired ones (600..~800) first, then the b_more_io file last;
	 * got[1] went to the newest bucket, which is not expired */
	CHECK(m >= 2);
	CHECK(got[2 + m - 1] == ino[0]);
	for (size_t i = 2; i < 2 + m - 1; i++) {
		CHECK(got[i] != ino[0] && got[i] != ino[1]);
		CHECK(got[i]->dirtied_when <= t2 + w);
		if (i > 2)
			CHECK(got[i]->dirtied_when >= got[i - 1]->dirtied_when);
	}
	/* 3. got[1] (ino[1]) was filed in the newest bucket: its age moved
	 * forward to the newest file's and no further */
	CHECK_EQ(ino[1]->dirtied_when, base + (uint64_t)(N - 1) * (w / 4));
	for (size_t i = 2; i < 2 + m; i++)
		got[i]->state = 0;
	n = take_upto(dev, UINT64_MAX, UINT64_MAX, got, &calls);
	for (size_t i = 1; i < n; i++)
		CHECK(got[i]->dirtied_when >= got[i - 1]->dirtied_when);
	CHECK(got[n - 1] == ino[1]);               /* filed last */
	for (size_t i = 0; i < n; i++)
		got[i]->state = 0;
	drain(dev, got);

	/* 4. seal: what is filed after it waits, even at the same time */
	for (int i = 0; i < 10; i++)
		file_at(dev, ino[i], base);
	dev_list_lock(dev);
	uint64_t upto = dirty_seal_locked(dev);
	dev_list_unlock(dev);
	for (int i = 10; i < 20; i++)
		file_at(dev, ino[i], base);
	n = take_upto(dev, UINT64_MAX, upto, got, &calls);
	CHECK_EQ(n, 10);
	for (size_t i = 0; i < n; i++) {
		CHECK(got[i] == ino[i]);
		got[i]->state = 0;
	}
	/* a file put back during the "sync" also lands after the seal */
	file_at(dev, ino[20], base);
	n = take_upto(dev, UINT64_MAX, upto, got, &calls);
	CHECK_EQ(n, 0);
	drain(dev, got);

	/* 5. an empty device: nothing queued, one pooled bucket reused */
	n = take_upto(dev, UINT64_MAX, UINT64_MAX, got, &calls);
	CHECK_EQ(n, 0);
	CHECK_EQ(wbc_dev_stats(dev, &st), 0);
	CHECK_EQ(st.dirty_buckets, 0);

	CHECK_EQ(wbc_cache_close(c), 0);
	for (int i = 0; i < N; i++)
		free(ino[i]);
	return 0;
}
