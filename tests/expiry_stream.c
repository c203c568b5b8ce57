/*
 * A file dirtied while a streaming writer keeps one background pass going
 * is written while the writer still runs: the pass queues what is due
 * each time its lists run empty (it queued only what was dirtied before
 * it began, and the streaming file, going round on b_more_io, kept it
 * going, and the periodic pass behind it, for as long as the writer
 * wrote: a page dirtied 2 s in was still unwritten 10 s later).  The
 * wait for it is bounded by 60 s (a watchdog), not timed.
 */
#include "testutil.h"

#include <pthread.h>

#define MiB (1u << 20)

static wbc_file *big, *small;
static atomic_int stop;

static void *streamer(void *arg)
{
	(void)arg;
	char *buf = malloc(MiB);
	CHECK(buf);
	memset(buf, 'x', MiB);
	uint64_t off = 0;
	while (!atomic_load(&stop)) {
		CHECK_EQ(wbc_pwrite(big, buf, MiB, off), MiB);
		off = (off + MiB) % (1024ull * MiB);
	}
	free(buf);
	return NULL;
}

static uint64_t unwritten(wbc_file *f)
{
	struct wbc_file_info fi;
	CHECK_EQ(wbc_file_info(f, &fi), 0);
	return fi.unwritten_bytes;
}

int main(void)
{
	struct wbc_config cfg = t_config(256 * MiB, 4096);
	cfg.dirty_expire_centisecs = 100;
	cfg.dirty_writeback_centisecs = 50;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=50M,lat=1ms,qd=8", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "big", WBC_O_CREAT, &big), 0);
	CHECK_EQ(wbc_file_open(dev, "small", WBC_O_CREAT, &small), 0);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, streamer, NULL), 0);
	/* background writeback of the stream under way */
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), st.written_back_bytes >= 100 * MiB)));
	char b[4096];
	memset(b, 'y', sizeof(b));
	CHECK_EQ(wbc_pwrite(small, b, sizeof(b), 0), sizeof(b));
	bool written = T_WAIT_UNTIL(unwritten(small) == 0);
	uint64_t streamed = (wbc_stats(c, &st), st.written_back_bytes);
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("the small file %s while the stream ran (%llu MiB written back by then)\n",
	       written ? "was written" : "was NOT written", (unsigned long long)(streamed >> 20));
	CHECK(written);
	CHECK_EQ(wbc_file_close(big), 0);
	CHECK_EQ(wbc_file_close(small), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
