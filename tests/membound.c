/*
 * Memory bound (invariants 1 and 2): writing 64 MiB from two threads
 * through a 1 MiB cache never holds file data outside the arena, never
 * grows the heap with the data, and never lets dirty + writeback pages
 * pass the limit by more than the documented slack (throttle_slack_pages()
 * per writing thread).  A third thread samples the counters throughout.
 */
#include "testutil.h"
#include "internal.h"

#include <malloc.h>

#define PS 4096
#define NPAGES 256
#define WRITERS 2
#define PER_WRITER (32u << 20)

static wbc_cache *c;
static wbc_dev *dev;
static atomic_int writers_left = WRITERS;
static atomic_long violations, samples;

static void *writer(void *arg)
{
	long id = (long)arg;
	char name[24], buf[64 << 10];
	snprintf(name, sizeof(name), "m%ld", id);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT | WBC_O_TRUNC, &f), 0);
	t_fill(buf, sizeof(buf), (uint64_t)id);
	for (uint64_t off = 0; off < PER_WRITER; off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_fetch_sub(&writers_left, 1);
	return NULL;
}

static void *sampler(void *arg)
{
	(void)arg;
	uint64_t slack = (uint64_t)WRITERS * throttle_slack_pages(c) * PS;
	while (atomic_load(&writers_left) > 0) {
		struct wbc_stats st;
		wbc_stats(c, &st);
		if (st.cached_bytes > st.mem_bytes ||
		    st.dirty_bytes + st.writeback_bytes > st.limit_bytes + slack) {
			fprintf(stderr, "sample: cached %llu dirty %llu wb %llu thresh %llu\n",
				(unsigned long long)st.cached_bytes, (unsigned long long)st.dirty_bytes,
				(unsigned long long)st.writeback_bytes, (unsigned long long)st.thresh_bytes);
			atomic_fetch_add(&violations, 1);
		}
		atomic_fetch_add(&samples, 1);
		sched_yield();
	}
	return NULL;
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(NPAGES * PS, PS);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	struct mallinfo2 before = mallinfo2();

	pthread_t w[WRITERS], s;
	pthread_create(&s, NULL, sampler, NULL);
	for (long i = 0; i < WRITERS; i++)
		pthread_create(&w[i], NULL, writer, (void *)i);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	pthread_join(s, NULL);

	struct mallinfo2 after = mallinfo2();
	long long grew = (long long)after.uordblks - (long long)before.uordblks;
	printf("heap grew %lld bytes while %u MiB went through a %u KiB cache; %ld samples\n",
	       grew, WRITERS * (PER_WRITER >> 20), NPAGES * PS >> 10, atomic_load(&samples));
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK(atomic_load(&samples) > 0);
	/* metadata only: far less than one MiB, against 64 MiB of data */
	CHECK(grew < (1 << 20));

	/* every resident page's data lies in the arena; the arena is the
	 * only page memory */
	uint64_t resident = 0;
	pthread_mutex_lock(&c->lru_lock);
	for (uint64_t i = 0; i < c->nr_pages; i++) {
		struct page *p = &c->pages[i];
		CHECK(cache_page_in_arena(c, page_data(c, p)));
		CHECK(cache_page_in_arena(c, page_data(c, p) + PS - 1));
		resident += p->inode != NULL;
	}
	pthread_mutex_unlock(&c->lru_lock);
	CHECK(resident <= NPAGES);
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK_EQ(st.mem_bytes, NPAGES * PS);
	CHECK_EQ(st.written_bytes, (uint64_t)WRITERS * PER_WRITER);
	CHECK(st.reclaimed_pages + st.cached_bytes / PS >= (uint64_t)WRITERS * PER_WRITER / PS / 2);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
	printf("membound: ok\n");
	return 0;
}
