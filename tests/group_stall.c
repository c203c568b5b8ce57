/*
 * A stalled device does not hold up a group's writers to another device.
 * Device A completes nothing (stall) and a writer in group G fills G's
 * dirty limit with A's pages; a second writer in G, to healthy device B
 * (none of G's pages on it), gets 4 MiB through and fsyncs within the
 * wait bound while A is still stalled.  Before, the pass of a nearly
 * clean device was refused to every writer of a group at its limit, and
 * the B writer paused (1 ms at a time) for as long as A stalled.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#define MiB (1u << 20)

static atomic_int done;
static wbc_dev *ga, *gb;
static wbc_group *gg;

static void *stream_a(void *arg)
{
	(void)arg;
	t_stream(ga, gg, "a", 64u * MiB, 1, 0);
	return NULL;
}

static void *stream_b(void *arg)
{
	(void)arg;
	t_stream(gb, gg, "b", 4u * MiB, 2, 1);
	atomic_store(&done, 1);
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(64u * MiB, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=100M,stall=0s+3600s", &ga), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M", &gb), 0);
	CHECK_EQ(wbc_group_create(c, 4u * MiB, 0, &gg), 0);
	pthread_t ta, tb;
	CHECK_EQ(pthread_create(&ta, NULL, stream_a, NULL), 0);
	struct wbc_group_stats gs;
	CHECK(T_WAIT_UNTIL((wbc_group_stats(gg, &gs),
			    gs.dirty_bytes + gs.writeback_bytes >= gs.limit_bytes)));
	CHECK_EQ(pthread_create(&tb, NULL, stream_b, NULL), 0);
	int ok = T_WAIT_UNTIL(atomic_load(&done));
	struct wbc_dev_stats bs;
	wbc_dev_stats(gb, &bs);
	wbc_group_stats(gg, &gs);
	printf("group writer to B beside stalled A: %s (B wrote back %llu KiB, %llu pauses; "
	       "group %llu KiB unclean of %llu)\n", ok ? "done" : "NOT done after 60 s",
	       (unsigned long long)bs.written_back_bytes >> 10, (unsigned long long)bs.pauses,
	       (unsigned long long)(gs.dirty_bytes + gs.writeback_bytes) >> 10,
	       (unsigned long long)gs.limit_bytes >> 10);
	model_release_stall(ga);
	CHECK_EQ(pthread_join(tb, NULL), 0);
	CHECK_EQ(pthread_join(ta, NULL), 0);
	CHECK(ok);
	CHECK(bs.written_back_bytes >= 4u * MiB);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
