/*
 * Two ways a writer's check interval left a cache over its limits:
 *   2. A writer's last pages take the cache over its background threshold
 *      (no periodic writeback): background writeback starts.  The check
 *      interval below freerun is about the square root of the room left,
 *      and only a check wakes the flushers: pages that crossed the line
 *      between two checks stayed dirty for good (18 of 48 cases here).
 *   1. A thread that wrote into a big cache, then into a small one: its
 *      interval was the big cache's (thread-local), and the small cache
 *      held 14 times its limit before the thread's first check there.
 *   3. Two writers, stepped in turn (semaphores, no timing), each check
 *      just under the background threshold and together write past it,
 *      each short of its next check: no check woke a flusher, and the
 *      cache stayed over the threshold for good; now a flusher looks
 *      once a second by itself, also one that went to sleep while its
 *      device was still clean (the test waits for that first: such a
 *      flusher armed no check and slept for good, and the test passed
 *      only when the flusher was still starting).
 */
#include "testutil.h"
#include "internal.h"

#include <semaphore.h>

static wbc_file *tf;
static sem_t go[2], stepped[2];
static uint64_t tbase;
static const int tpages[2] = { 8, 7 };

static void *stepper(void *arg)
{
	int id = (int)(intptr_t)arg;
	static char page[4096];
	uint64_t at = tbase + (uint64_t)id * 1000;
	sem_wait(&go[id]);
	CHECK_EQ(wbc_pwrite(tf, page, 4096, at * 4096), 4096);   /* checked before it */
	sem_post(&stepped[id]);
	sem_wait(&go[id]);
	for (int i = 1; i < tpages[id]; i++)
		CHECK_EQ(wbc_pwrite(tf, page, 4096, (at + (uint64_t)i) * 4096), 4096);
	sem_post(&stepped[id]);
	return NULL;
}

static void two_writers(void)
{
	struct wbc_config cfg = t_config(64 << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	wbc_dev *d;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &d), 0);
	CHECK_EQ(wbc_file_open(d, "x", WBC_O_CREAT, &tf), 0);
	/* the flusher asleep on a clean device first (it armed no check
	 * while its device had no dirty page: the test passed only when it
	 * was still starting when the pages below were written).  Asleep,
	 * not a sleep's guess: once it has turned, it holds work_lock until
	 * its wait lets it go (a clean device gives it no work) */
	CHECK(T_WAIT_UNTIL(atomic_load(&d->flusher_turns) >= 1));
	pthread_mutex_lock(&d->work_lock);
	pthread_mutex_unlock(&d->work_lock);
	struct wbc_stats st;
	wbc_stats(c, &st);
	uint64_t bg = st.bg_thresh_bytes / 4096, pre = bg - 8;
	static char page[4096];
	for (uint64_t i = 0; i < pre; i++)
		CHECK_EQ(wbc_pwrite(tf, page, 4096, i * 4096), 4096);
	tbase = pre + 10;
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		sem_init(&go[i], 0, 0);
		sem_init(&stepped[i], 0, 0);
		CHECK_EQ(pthread_create(&t[i], NULL, stepper, (void *)(intptr_t)i), 0);
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 2; i++) {
			sem_post(&go[i]);
			sem_wait(&stepped[i]);
		}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	wbc_stats(c, &st);
	printf("two writers: %llu pages dirty, the background threshold %llu\n",
	       (unsigned long long)st.dirty_bytes / 4096, (unsigned long long)bg);
	CHECK(st.dirty_bytes + st.writeback_bytes > st.bg_thresh_bytes ||
	      st.written_back_bytes > 0);   /* over it, or writeback began */
	bool below = T_WAIT_UNTIL((wbc_stats(c, &st), st.writeback_bytes == 0 &&
						       st.dirty_bytes <= st.bg_thresh_bytes));
	if (!below)
		fprintf(stderr, "two writers: %llu pages dirty, none written back\n",
			(unsigned long long)st.dirty_bytes / 4096);
	CHECK(below);
	CHECK_EQ(wbc_file_close(tf), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void crossing(void)
{
	static char page[4096];
	for (int extra = 1; extra <= 48; extra++) {
		struct wbc_config cfg = t_config(16 << 20, 4096);
		cfg.dirty_ratio = 50;
		cfg.dirty_background_ratio = 10;
		cfg.dirty_writeback_centisecs = 0;
		wbc_cache *c;
		wbc_dev *d;
		wbc_file *f;
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add(c, "mem", &d), 0);
		CHECK_EQ(wbc_file_open(d, "x", WBC_O_CREAT, &f), 0);
		struct wbc_stats st;
		wbc_stats(c, &st);
		uint64_t n = st.bg_thresh_bytes / 4096 + (uint64_t)extra;
		for (uint64_t i = 0; i < n; i++)
			CHECK_EQ(wbc_pwrite(f, page, 4096, i * 4096), 4096);
		bool below = T_WAIT_UNTIL((wbc_stats(c, &st), st.writeback_bytes == 0 &&
							       st.dirty_bytes <= st.bg_thresh_bytes));
		if (!below) {
			fprintf(stderr, "%llu pages (the background threshold and %d): %llu dirty, "
				"no background writeback\n", (unsigned long long)n, extra,
				(unsigned long long)st.dirty_bytes / 4096);
			exit(1);
		}
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), 0);
	}
	printf("2. the background threshold crossed by 1..48 pages: written back down to it\n");
}

static void two_caches(void)
{
	struct wbc_config ca = t_config(1u << 30, 4096), cb = t_config(16u << 20, 4096);
	cb.dirty_bytes = 64 << 10;            /* 16 pages */
	wbc_cache *a, *b;
	CHECK_EQ(wbc_cache_open(&ca, &a), 0);
	CHECK_EQ(wbc_cache_open(&cb, &b), 0);
	wbc_dev *da, *db;
	CHECK_EQ(wbc_dev_add(a, "mem", &da), 0);
	CHECK_EQ(wbc_dev_add(b, "model:bw=1M", &db), 0);
	wbc_file *fa, *fb;
	CHECK_EQ(wbc_file_open(da, "a", WBC_O_CREAT, &fa), 0);
	CHECK_EQ(wbc_file_open(db, "b", WBC_O_CREAT, &fb), 0);
	static char buf[4096];
	for (int i = 0; i < 4; i++)           /* the big cache's interval */
		CHECK_EQ(wbc_pwrite(fa, buf, sizeof(buf), i * 4096ull), 4096);
	uint64_t peak = 0;
	for (int i = 0; i < 400; i++) {
		CHECK_EQ(wbc_pwrite(fb, buf, sizeof(buf), i * 4096ull), 4096);
		struct wbc_stats st;
		wbc_stats(b, &st);
		peak = WBC_MAX(peak, st.dirty_bytes + st.writeback_bytes);
	}
	struct wbc_stats st;
	wbc_stats(b, &st);
	uint64_t bound = st.limit_bytes + throttle_slack_pages(b) * 4096;
	printf("1. after a 1 GiB cache, a cache with a 64 KiB limit: peak %llu KiB (limit and "
	       "slack %llu KiB)\n", (unsigned long long)peak >> 10, (unsigned long long)bound >> 10);
	CHECK(peak <= bound);
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_file_close(fb), 0);
	CHECK_EQ(wbc_cache_close(b), 0);
	CHECK_EQ(wbc_cache_close(a), 0);
}

int main(void)
{
	two_caches();   /* first: the thread's interval not yet another test's */
	crossing();
	two_writers();
	printf("bg_kick: ok\n");
	return 0;
}
