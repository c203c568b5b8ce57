/*
 * The model's head (seek=, for experiments: the writeback lab): an I/O
 * that does not begin where the one before it ended pays the seek in
 * device time and is counted; contiguous I/Os pay nothing.  Asserted on
 * the model's own counters (wbc_dev_backend_stats: seeks, seek_ns), which
 * count the I/Os the model was given, never on how long anything took.
 */
#include "testutil.h"
#include "wbcache_backend.h"

#define MiB (1ull << 20)

static struct wbc_backend_stats bstats(wbc_dev *dev)
{
	struct wbc_backend_stats st;
	CHECK_EQ(wbc_dev_backend_stats(dev, &st), 0);
	return st;
}

/* Write @len bytes at @off and fsync: the file's dirty pages go to the
 * model in one sync pass, in offset order. */
static void put(wbc_file *f, const char *buf, uint64_t len, uint64_t off)
{
	CHECK_EQ(wbc_pwrite(f, buf, len, off), (long long)len);
	CHECK_EQ(wbc_fsync(f), 0);
}

int main(void)
{
	static char buf[8 * MiB];
	t_fill(buf, sizeof(buf), 7);
	/* no background or periodic writeback: only the fsyncs write, so
	 * the order of the I/Os is the test's */
	struct wbc_config cfg = t_config(64 * MiB, 4096);
	cfg.dirty_writeback_centisecs = 0;
	cfg.dirty_bytes = 48 * MiB;
	cfg.dirty_background_bytes = 40 * MiB;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);

	/* bad values are refused */
	wbc_dev *bad;
	CHECK_EQ(wbc_dev_add(c, "model:seek=x", &bad), -EINVAL);
	CHECK_EQ(wbc_dev_add(c, "model:seek=-1ms", &bad), -EINVAL);

	/* 1 ms per seek, 1 MiB I/Os (the model's max_io) */
	const uint64_t seek_ns = 1000 * 1000;
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "model:bw=2G,seek=1ms", &dev), 0);
	wbc_file *a, *b;
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &a), 0);
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &b), 0);

	/* 1. a stream: eight contiguous 1 MiB I/Os, in two fsyncs, pay no
	 * seek (the first I/O of all pays none: the head starts there) */
	put(a, buf, 4 * MiB, 0);
	put(a, buf, 4 * MiB, 4 * MiB);
	struct wbc_backend_stats st = bstats(dev);
	printf("stream: %llu seeks\n", (unsigned long long)st.seeks);
	CHECK_EQ(st.seeks, 0);
	CHECK_EQ(st.seek_ns, 0);
	struct wbc_dev_stats ds;
	CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
	CHECK_EQ(ds.written_back_bytes, 8 * MiB);

	/* 2. alternating files, 1 MiB at a time: every switch is a seek,
	 * also where the other file continues where it left off */
	int switches = 0;
	for (int i = 0; i < 8; i++) {
		wbc_file *f = i % 2 ? a : b;
		uint64_t off = i % 2 ? 8 * MiB + (uint64_t)(i / 2) * MiB : (uint64_t)(i / 2) * MiB;
		put(f, buf, MiB, off);
		switches++;
	}
	st = bstats(dev);
	printf("alternating: %llu seeks, %llu ns\n", (unsigned long long)st.seeks,
	       (unsigned long long)st.seek_ns);
	CHECK_EQ(st.seeks, switches);
	CHECK_EQ(st.seek_ns, (uint64_t)switches * seek_ns);

	/* 3. one file: a jump is a seek, continuing is not (the loop ended
	 * with a at [11M, 12M): 12M continues it, 20M jumps, 21M continues,
	 * 2M jumps back) */
	put(a, buf, MiB, 12 * MiB);
	put(a, buf, MiB, 20 * MiB);
	put(a, buf, MiB, 21 * MiB);
	put(a, buf, MiB, 2 * MiB);
	st = bstats(dev);
	CHECK_EQ(st.seeks, switches + 2);

	/* 4. reads move the head too: read a's first MiB (a miss: the cache
	 * dropped nothing yet, so drop it by direct open) */
	CHECK_EQ(wbc_file_close(b), 0);
	wbc_file *d;
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_DIRECT, &d), 0);
	static char rbuf[MiB];
	CHECK_EQ(wbc_pread(d, rbuf, MiB, 0), (long long)MiB);
	CHECK(!memcmp(rbuf, buf, MiB));
	CHECK_EQ(wbc_file_close(d), 0);
	st = bstats(dev);
	CHECK_EQ(st.seeks, switches + 3);
	CHECK_EQ(st.seek_ns, (uint64_t)(switches + 3) * seek_ns);

	/* 5. without seek= the model still counts discontiguous I/Os, and
	 * charges nothing for them */
	wbc_dev *flat;
	CHECK_EQ(wbc_dev_add(c, "model:bw=2G", &flat), 0);
	wbc_file *x, *y;
	CHECK_EQ(wbc_file_open(flat, "x", WBC_O_CREAT, &x), 0);
	CHECK_EQ(wbc_file_open(flat, "y", WBC_O_CREAT, &y), 0);
	put(x, buf, MiB, 0);
	put(y, buf, MiB, 0);
	put(x, buf, MiB, MiB);
	st = bstats(flat);
	CHECK_EQ(st.seeks, 2);
	CHECK_EQ(st.seek_ns, 0);
	CHECK_EQ(st.conns, 0);             /* no transport */

	CHECK_EQ(wbc_file_close(a), 0);
	CHECK_EQ(wbc_file_close(x), 0);
	CHECK_EQ(wbc_file_close(y), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("ok\n");
	return 0;
}
