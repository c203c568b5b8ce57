/*
 * The throttle with large pages: 1 MiB pages, a 128 MiB cache (a dirty
 * limit of some 25 pages), 12 slow devices, a writer each writing more
 * than the cache holds in all.  The amounts a
 * device may hold unthrottled (its pass) and a writer may dirty between
 * checks are bytes, not pages: counted in pages, each device passed 32
 * pages (32 MiB), and dirty data filled the cache, five times the limit.
 * Dirty + writeback stays under the limit and four pages a writer at
 * every sample (no timing: a bound on the state, sampled every
 * millisecond).
 */
#include "testutil.h"

#include <pthread.h>

#define MiB (1u << 20)
#define NDEV 12
#define PER_WRITER (16u * MiB)   /* 192 MiB in all: more than the cache */

static wbc_dev *devs[NDEV];
static atomic_int left = NDEV;

static void *writer(void *arg)
{
	long i = (long)arg;
	static char buf[MiB];
	wbc_file *f;
	CHECK_EQ(wbc_file_open(devs[i], "f", WBC_O_CREAT, &f), 0);
	for (uint64_t off = 0; off < PER_WRITER; off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_fetch_sub(&left, 1);
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(128 * MiB, MiB);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	for (int i = 0; i < NDEV; i++)
		CHECK_EQ(wbc_dev_add(c, "model:bw=4M", &devs[i]), 0);
	struct wbc_stats st;
	wbc_stats(c, &st);
	/* the limit and four pages a writer (the page being copied, its
	 * device's pass and its check interval, a page each at least with
	 * pages this large): some 73 MiB here.  The per-page minimums let
	 * dirty data fill the whole cache (123-128 MiB) */
	struct t_limit_watch lw = { .c = c, .running = &left, .slack = (uint64_t)NDEV * 4 * MiB };
	pthread_t w[NDEV], s;
	CHECK_EQ(pthread_create(&s, NULL, t_limit_watch, &lw), 0);
	for (long i = 0; i < NDEV; i++)
		CHECK_EQ(pthread_create(&w[i], NULL, writer, (void *)i), 0);
	for (int i = 0; i < NDEV; i++)
		pthread_join(w[i], NULL);
	pthread_join(s, NULL);
	printf("1 MiB pages, %d devices: limit %llu MiB, %ld samples, %ld over it by more than "
	       "4 pages a writer\n", NDEV, (unsigned long long)st.limit_bytes / MiB,
	       atomic_load(&lw.samples), atomic_load(&lw.violations));
	CHECK(atomic_load(&lw.samples) > 0);
	CHECK_EQ(atomic_load(&lw.violations), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("big_pages: ok\n");
	return 0;
}
