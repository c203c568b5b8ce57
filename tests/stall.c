/*
 * A stalled device does not stall writers to another device: device A
 * completes no I/O at all (a model stall), its writer fills the dirty
 * limit and is throttled; a writer to device B writes 48 MiB and fsyncs,
 * and finishes while A has still completed nothing.  Then A's stall is
 * released and everything drains.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

static wbc_cache *c;
static wbc_dev *a, *b;
static atomic_int a_done;

static void *writer_a(void *arg)
{
	(void)arg;
	t_stream(a, NULL, "a", 64u << 20, 1, 0);
	atomic_store(&a_done, 1);
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(64u << 20, 4096);   /* limit 12.8 MiB */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=100M,stall=0s+3600s", &a), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M", &b), 0);
	pthread_t ta;
	pthread_create(&ta, NULL, writer_a, NULL);

	/* wait until A's writer has pushed the cache to its limit */
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st),
			    st.dirty_bytes + st.writeback_bytes >= st.setpoint_bytes)));

	/* B's writer gets through while A completes nothing */
	t_stream(b, NULL, "b", 48u << 20, 2, 1);
	struct wbc_dev_stats as, bs;
	wbc_dev_stats(a, &as);
	wbc_dev_stats(b, &bs);
	printf("B wrote back %llu MiB while A wrote back %llu bytes (A dirty+wb %llu MiB)\n",
	       (unsigned long long)bs.written_back_bytes >> 20,
	       (unsigned long long)as.written_back_bytes,
	       (unsigned long long)(as.dirty_bytes + as.writeback_bytes) >> 20);
	CHECK_EQ(as.written_back_bytes, 0);
	CHECK(bs.written_back_bytes >= (48u << 20));
	CHECK(!atomic_load(&a_done));                 /* A's writer is still held */

	model_release_stall(a);
	pthread_join(ta, NULL);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("stall: ok\n");
	return 0;
}
