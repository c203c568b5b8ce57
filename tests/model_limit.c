/*
 * On a model device slower than the writers, the throttle holds dirty +
 * writeback under the limit plus the documented slack at every sample,
 * while the writers really are throttled (they pause, and dirty rises past
 * freerun).  Three writers, 96 MiB, a 50 MB/s device, a 32 MiB cache.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#define WRITERS 3
#define PER_WRITER (32u << 20)

static wbc_cache *c;
static wbc_dev *dev;
static atomic_int left = WRITERS;

static void *writer(void *arg)
{
	long id = (long)arg;
	char name[16], buf[256 << 10];
	snprintf(name, sizeof(name), "w%ld", id);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	t_fill(buf, sizeof(buf), (uint64_t)id);
	for (uint64_t off = 0; off < PER_WRITER; off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	struct wbc_thread_stats ts;
	wbc_thread_stats(&ts);
	CHECK(ts.pauses > 0);                         /* this writer was throttled */
	CHECK(ts.max_pause_ns <= 200ull * 1000 * 1000);
	CHECK_EQ(ts.pages_dirtied, PER_WRITER / 4096);
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_fetch_sub(&left, 1);
	return NULL;
}


int main(void)
{
	struct wbc_config cfg = t_config(32u << 20, 4096);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=50M,lat=1ms,qd=16", &dev), 0);
	pthread_t w[WRITERS], s;
	struct t_limit_watch lw = {
		.c = c, .running = &left,
		.slack = ((uint64_t)WRITERS * throttle_slack_pages(c) + 32) * 4096,
	};
	pthread_create(&s, NULL, t_limit_watch, &lw);
	for (long i = 0; i < WRITERS; i++)
		pthread_create(&w[i], NULL, writer, (void *)i);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	pthread_join(s, NULL);
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("samples %ld, above freerun %ld, pauses %llu, max pause %.1f ms\n",
	       atomic_load(&lw.samples), atomic_load(&lw.over_freerun),
	       (unsigned long long)st.pauses, (double)st.max_pause_ns / 1e6);
	CHECK_EQ(atomic_load(&lw.violations), 0);
	CHECK(atomic_load(&lw.over_freerun) > 0);
	CHECK(st.pauses > 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("model_limit: ok\n");
	return 0;
}
