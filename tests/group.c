/*
 * Groups: a tenant whose files are in a group with a 4 MiB limit, writing
 * to a device that holds its writes (none completes until the test lets
 * them), never holds more than its limit (plus slack) dirty; a second
 * tenant in its own group, writing to a fast device, finishes its 64 MiB
 * while the first is held at its limit, so the first tenant's burst does
 * not use up the second's budget; once the writes complete, the first
 * finishes too.  (The first device was a 10 MB/s model: under
 * ThreadSanitizer on a busy machine the second tenant took longer than
 * the first's 4 s, and the test failed on the clock.)
 */
#include "testutil.h"
#include "internal.h"
#include "held_backend.h"

static wbc_cache *c;
static wbc_dev *slow, *fast;
static wbc_group *g1, *g2;
static atomic_int g1_done, violations, samples;

static void *tenant1(void *arg)
{
	(void)arg;
	t_stream(slow, g1, "t1", 40u << 20, 1, 0);
	atomic_store(&g1_done, 1);
	return NULL;
}

static void *sampler(void *arg)
{
	(void)arg;
	uint64_t slack = (throttle_slack_pages(c) + 32) * 4096;
	while (!atomic_load(&g1_done)) {
		struct wbc_group_stats gs;
		wbc_group_stats(g1, &gs);
		if (gs.dirty_bytes + gs.writeback_bytes > gs.limit_bytes + slack) {
			fprintf(stderr, "group 1 at %llu > %llu + %llu\n",
				(unsigned long long)(gs.dirty_bytes + gs.writeback_bytes),
				(unsigned long long)gs.limit_bytes, (unsigned long long)slack);
			atomic_fetch_add(&violations, 1);
		}
		atomic_fetch_add(&samples, 1);
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(128u << 20, 4096);   /* global limit 25.6 MiB */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_group_create(c, 0, 0, &g1), -EINVAL);
	CHECK_EQ(wbc_group_create(c, 0, 101, &g1), -EINVAL);
	CHECK_EQ(wbc_group_create(c, 4u << 20, 0, &g1), 0);
	CHECK_EQ(wbc_group_create(c, 0, 10, &g2), 0);          /* 12.8 MiB */
	struct wbc_group_stats gs;
	CHECK_EQ(wbc_group_stats(g2, &gs), 0);
	CHECK_EQ(gs.thresh_bytes, (128u << 20) / 10 / 4096 * 4096);
	hb_hold = true;
	CHECK_EQ(wbc_dev_add_backend(c, &hb_ops, NULL, "", &slow), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M", &fast), 0);
	pthread_t t1, s;
	pthread_create(&t1, NULL, tenant1, NULL);
	pthread_create(&s, NULL, sampler, NULL);

	/* wait for tenant 1 to reach its group's limit */
	CHECK(T_WAIT_UNTIL((wbc_group_stats(g1, &gs),
			    gs.dirty_bytes + gs.writeback_bytes >= gs.setpoint_bytes)));

	t_stream(fast, g2, "t2", 64u << 20, 2, 0);
	CHECK(hb_count() > 0);               /* tenant 1 is still held back */

	/* its writes complete from now on */
	pthread_mutex_lock(&hb_lock);
	hb_hold = false;
	for (int i = 0; i < hb_nheld; i++)
		wbc_io_complete(hb_held[i], (ssize_t)hb_held[i]->len);
	hb_nheld = 0;
	pthread_mutex_unlock(&hb_lock);
	pthread_join(t1, NULL);
	pthread_join(s, NULL);
	printf("group 1 samples %d\n", atomic_load(&samples));
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK(atomic_load(&samples) > 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("group: ok\n");
	return 0;
}
