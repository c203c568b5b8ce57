/*
 * Reclaim beside a file whose lock is held (mm/page_alloc.c): the clean
 * pages the sweep passes over because their file's lock is held are
 * taken once it is let go, without a start-all kick of the flushers.
 *
 * A block export is one file that holds every page of the cache: its
 * lock is held by its writers, readers and writeback much of the time,
 * and a holder preempted on a busy machine holds it for milliseconds.
 * An allocation that met it so counted every page unreclaimable, kicked
 * every flusher to write back all they had (pages just dirtied, far
 * under the background threshold: a block export's unflushed write was
 * in the plugin at once) and slept up to 50 ms.
 *
 * Here: file a's 200 pages clean, file b's one page dirty, no free page
 * above the reserve; with a's lock held, an allocation waits, and once
 * the lock is let go it takes one of a's pages: no page wait counted, b's
 * page still dirty and nothing written back.  Twice: the second time
 * every page of a is touched again while the allocation waits (a hot
 * file's readers): the turn after the wait passed them all over for
 * their second chance, and the allocation waited as for writeback and
 * kicked the flushers all the same.
 */
#include "testutil.h"
#include "internal.h"

#include <inttypes.h>

#define PS 4096
#define NPAGES 256

static struct page *taken[NPAGES];

static uint64_t nr_free(wbc_cache *c)
{
	pthread_mutex_lock(&c->lru_lock);
	uint64_t n = c->nr_free;
	pthread_mutex_unlock(&c->lru_lock);
	return n;
}

static void give_back(wbc_cache *c, struct page *p)
{
	pthread_mutex_lock(&c->lru_lock);
	page_free_locked(c, p);
	pthread_mutex_unlock(&c->lru_lock);
}

static void *allocator(void *arg)
{
	int err = 0;
	struct page *p = page_alloc(arg, &err);
	CHECK(p);
	return p;
}

/* Take every free page above the reserve, hold a's lock, allocate in a
 * thread, let the lock go (@touch: a's pages touched again first); give
 * the pages back. */
static void one_case(wbc_cache *c, wbc_file *a, bool touch)
{
	struct wbc_stats st0, st;
	wbc_stats(c, &st0);
	CHECK_EQ(st0.dirty_bytes, PS);
	unsigned n = 0;
	while (nr_free(c) > c->nr_reserve)
		CHECK((taken[n++] = page_try_alloc(c)));

	struct inode *ia = handle_get(a)->inode;
	uint64_t busy0 = atomic_load(&c->st_busy_waits), waits0 = atomic_load(&c->st_page_waits);
	pthread_mutex_lock(&ia->lock);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, allocator, c), 0);
	/* the allocator has found a's pages busy (twice), or (the code
	 * before) given up on them and waited as for writeback */
	bool seen = T_WAIT_UNTIL(atomic_load(&c->st_busy_waits) >= busy0 + 2 ||
				 atomic_load(&c->st_page_waits) > waits0);
	if (touch && seen) {
		/* every page of a touched again meanwhile (its readers), the
		 * allocation asleep or about to look: its next turn finds
		 * them all referenced, and the lock free */
		pthread_mutex_lock(&c->lru_lock);
		for (uint64_t i = 0; i < c->nr_pages; i++)
			if (c->pages[i].inode == ia)
				atomic_store(&c->pages[i].referenced, true);
		pthread_mutex_unlock(&ia->lock);
		pthread_mutex_unlock(&c->lru_lock);
	} else {
		pthread_mutex_unlock(&ia->lock);
	}
	CHECK(seen);
	void *got;
	CHECK_EQ(pthread_join(t, &got), 0);
	CHECK(got);
	wbc_stats(c, &st);
	if (st.page_waits != st0.page_waits || st.dirty_bytes != PS ||
	    st.written_back_bytes != st0.written_back_bytes) {
		fprintf(stderr, "FAIL%s: an allocation beside a busy file's clean pages waited as for "
			"writeback (%" PRIu64 " page waits) and the flushers wrote back what was "
			"dirty (%" PRIu64 " bytes dirty of %d, %" PRIu64 " bytes written back)\n",
			touch ? " (its pages touched again)" : "", st.page_waits - st0.page_waits,
			st.dirty_bytes, PS,
			st.written_back_bytes - st0.written_back_bytes);
		exit(1);
	}
	give_back(c, got);
	while (n)
		give_back(c, taken[--n]);
}

int main(void)
{
	wbc_cache *c = t_quiet_cache(NPAGES * PS);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	static char buf[200 * PS];   /* a multiple of 8 pages */
	t_fill(buf, sizeof(buf), 7);
	wbc_file *a, *b;
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &a), 0);
	/* 8 pages at a time, each written back: never over the background
	 * threshold, so no writer kicked the flusher (a kick it served late,
	 * after b's write, wrote b's page: the allocation took it) */
	for (size_t off = 0; off < sizeof(buf); off += 8 * PS) {
		CHECK_EQ(wbc_pwrite(a, buf + off, 8 * PS, off), 8 * PS);
		CHECK_EQ(wbc_fsync(a), 0);
	}
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &b), 0);
	CHECK_EQ(wbc_pwrite(b, buf, PS, 0), PS);

	one_case(c, a, false);
	one_case(c, a, true);

	/* a's data whole: the page taken was a clean one */
	static char back[200 * PS];
	CHECK_EQ(wbc_pread(a, back, sizeof(back), 0), sizeof(back));
	CHECK(!memcmp(back, buf, sizeof(back)));
	uint64_t looks = atomic_load(&c->st_busy_waits);
	CHECK_EQ(wbc_file_close(a), 0);
	CHECK_EQ(wbc_file_close(b), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("reclaim beside a busy file: %" PRIu64 " busy looks, no page wait, b's page still "
	       "dirty: ok\n", looks);
	return 0;
}
