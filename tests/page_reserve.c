/*
 * The free pages a cache keeps for memalloc threads (wbc_thread_set_memalloc:
 * a stacked device's workers, whose writes into the lower device free the
 * upper device's dirty pages; mm/page_alloc.c):
 *   1. others take free pages only down to the reserve (a 64th of the
 *      cache), a memalloc thread takes them all;
 *   2. a page given back while the reserve is short is the reserve's: a
 *      plain allocation still finds none, a memalloc one takes it;
 *   3. a plain allocation waiting for a page gets one only once the free
 *      pages are above the reserve, and leaves the reserve whole;
 *   4. the reserve stays whole while a writer fills the cache with a
 *      file, and a plain allocation that reclaims while it is short
 *      refills it first.
 * (Without the reserve, 64 writers on a 4 MiB cache under a stacked
 * device of the same cache left every page dirty and the workers waiting
 * for pages only their writes could free: hung.)
 */
#include "testutil.h"
#include "internal.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <unistd.h>

#define PS 4096
#define NPAGES 1024

static struct page *taken[NPAGES];

static void give_back(wbc_cache *c, struct page *p)
{
	pthread_mutex_lock(&c->lru_lock);
	page_free_locked(c, p);
	pthread_mutex_unlock(&c->lru_lock);
}

static uint64_t nr_free(wbc_cache *c)
{
	pthread_mutex_lock(&c->lru_lock);
	uint64_t n = c->nr_free;
	pthread_mutex_unlock(&c->lru_lock);
	return n;
}

static atomic_int waiter_done;

static void *plain_waiter(void *arg)
{
	int err = 0;
	struct page *p = page_alloc(arg, &err);
	CHECK(p);
	atomic_store(&waiter_done, 1);
	return p;
}

/* Stacked levels: the reserve grows at each stack's add, before any of
 * its workers allocates (it grew at their first allocation, when writers
 * had taken the pages above the old reserve: three levels in 128 KiB
 * hung); a level whose L(L-1) pages are over half the cache is refused;
 * stacks chained across caches are each level 1 in the cache their
 * workers write into (a 64 KiB cache under four such was refused). */
static void levels(void)
{
	char msg[512];
	struct wbc_config cfg = t_config(32 * 4096, 4096);
	wbc_cache *c;
	wbc_dev *d[5];
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=100M", &d[0]), 0);
	CHECK_EQ(c->nr_reserve, 2);
	CHECK_EQ(wbc_dev_add_stacked(c, d[0], "img", "", &d[1], msg, sizeof(msg)), 0);
	CHECK_EQ(c->nr_reserve, 2);
	CHECK_EQ(wbc_dev_add_stacked(c, d[1], "", "", &d[2], msg, sizeof(msg)), 0);
	CHECK_EQ(c->nr_reserve, 2);
	CHECK_EQ(wbc_dev_add_stacked(c, d[2], "", "", &d[3], msg, sizeof(msg)), 0);
	CHECK_EQ(c->nr_reserve, 6);   /* 3 levels: 3 * 2 pages */
	CHECK_EQ(wbc_dev_add_stacked(c, d[3], "", "", &d[4], msg, sizeof(msg)), 0);
	CHECK_EQ(c->nr_reserve, 12);
	wbc_dev *d5;
	CHECK_EQ(wbc_dev_add_stacked(c, d[4], "", "", &d5, msg, sizeof(msg)), -ENOBUFS);
	CHECK(strstr(msg, "needs a reserve of 20"));
	CHECK_EQ(wbc_cache_close(c), 0);

	wbc_cache *cs[5];
	for (int i = 0; i < 5; i++) {
		cfg = t_config(i == 3 ? 16 * 4096 : 4096 * 4096, 4096);
		CHECK_EQ(wbc_cache_open(&cfg, &cs[i]), 0);
	}
	CHECK_EQ(wbc_dev_add(cs[0], "model:bw=100M", &d[0]), 0);
	for (int i = 1; i < 5; i++)
		CHECK_EQ(wbc_dev_add_stacked(cs[i], d[i - 1], i == 1 ? "f" : "", "", &d[i], msg,
					     sizeof(msg)), 0);
	for (int i = 4; i >= 0; i--)
		CHECK_EQ(wbc_cache_close(cs[i]), 0);
}

int main(void)
{
	levels();
	struct wbc_config cfg = t_config(NPAGES * PS, PS);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	const uint64_t R = c->nr_reserve;
	CHECK_EQ(R, NPAGES / 64);
	CHECK_EQ(wbc_thread_set_memalloc(0), 0);

	/* 1 */
	unsigned n = 0;
	struct page *p;
	while ((p = page_try_alloc(c)))
		taken[n++] = p;
	CHECK_EQ(n, NPAGES - R);
	CHECK_EQ(wbc_thread_set_memalloc(1), 0);
	while ((p = page_try_alloc(c)))
		taken[n++] = p;
	CHECK_EQ(n, NPAGES);
	CHECK_EQ(wbc_thread_set_memalloc(0), 1);

	/* 2 */
	give_back(c, taken[--n]);
	CHECK(!page_try_alloc(c));
	wbc_thread_set_memalloc(1);
	CHECK((taken[n++] = page_try_alloc(c)));
	wbc_thread_set_memalloc(0);

	/* 3 */
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, plain_waiter, c), 0);
	for (uint64_t i = 0; i < R; i++)
		give_back(c, taken[--n]);
	/* the reserve whole again: the waiter must still wait (a wait of a
	 * few of its 50 ms re-looks; a bug could pass unseen, never fail) */
	usleep(200 * 1000);
	CHECK(!atomic_load(&waiter_done));
	CHECK_EQ(nr_free(c), R);
	give_back(c, taken[--n]);
	void *got;
	CHECK_EQ(pthread_join(t, &got), 0);
	CHECK(got);
	CHECK_EQ(nr_free(c), R);
	give_back(c, got);
	while (n)
		give_back(c, taken[--n]);
	CHECK_EQ(nr_free(c), NPAGES);

	/* 4: a file as large as the cache, written and synced: its pages
	 * clean, all but the reserve's */
	wbc_dev *dev;
	wbc_file *f;
	static char buf[NPAGES * PS];
	t_fill(buf, sizeof(buf), 4);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(nr_free(c), R);
	wbc_thread_set_memalloc(1);
	for (uint64_t i = 0; i < R; i++)
		CHECK((taken[n++] = page_try_alloc(c)));
	wbc_thread_set_memalloc(0);
	CHECK_EQ(nr_free(c), 0);
	CHECK((p = page_try_alloc(c)));   /* reclaimed, after R for the reserve */
	CHECK_EQ(nr_free(c), R);
	give_back(c, p);
	while (n)
		give_back(c, taken[--n]);
	static char back[NPAGES * PS];
	CHECK_EQ(wbc_pread(f, back, sizeof(back), 0), sizeof(back));
	CHECK(!memcmp(back, buf, sizeof(buf)));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("page reserve: %" PRIu64 " pages of %d: ok\n", R, NPAGES);
	return 0;
}
