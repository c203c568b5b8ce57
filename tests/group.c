/*
 * Groups: a tenant whose files are in a group with a 4 MiB limit, writing
 * to a slow device, never holds more than its limit (plus slack) dirty; a
 * second tenant in its own group, writing to a fast device, finishes its
 * 64 MiB while the first is still held at its limit, so the first tenant's
 * burst does not use up the second's budget.
 */
#include "testutil.h"
#include "internal.h"

static wbc_cache *c;
static wbc_dev *slow, *fast;
static wbc_group *g1, *g2;
static atomic_int g1_done, violations, samples;

static void *tenant1(void *arg)
{
	(void)arg;
	wbc_file *f;
	char buf[64 << 10];
	t_fill(buf, sizeof(buf), 1);
	CHECK_EQ(wbc_file_open_group(slow, "t1", WBC_O_CREAT, g1, &f), 0);
	for (uint64_t off = 0; off < (40u << 20); off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	CHECK_EQ(wbc_file_close(f), 0);
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
	CHECK_EQ(wbc_dev_add(c, "model:bw=10M", &slow), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M", &fast), 0);
	pthread_t t1, s;
	pthread_create(&t1, NULL, tenant1, NULL);
	pthread_create(&s, NULL, sampler, NULL);

	/* wait for tenant 1 to reach its group's limit */
	for (int i = 0; i < 60000; i++) {
		wbc_group_stats(g1, &gs);
		if (gs.dirty_bytes + gs.writeback_bytes >= gs.setpoint_bytes)
			break;
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	CHECK(gs.dirty_bytes + gs.writeback_bytes >= gs.setpoint_bytes);

	wbc_file *f;
	char buf[64 << 10];
	t_fill(buf, sizeof(buf), 2);
	CHECK_EQ(wbc_file_open_group(fast, "t2", WBC_O_CREAT, g2, &f), 0);
	for (uint64_t off = 0; off < (64u << 20); off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	CHECK(!atomic_load(&g1_done));       /* tenant 1 is still held back */
	CHECK_EQ(wbc_group_stats(g2, &gs), 0);
	CHECK_EQ(wbc_file_close(f), 0);

	pthread_join(t1, NULL);
	pthread_join(s, NULL);
	printf("group 1 samples %d\n", atomic_load(&samples));
	CHECK_EQ(atomic_load(&violations), 0);
	CHECK(atomic_load(&samples) > 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("group: ok\n");
	return 0;
}
