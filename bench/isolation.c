/*
 * Hung-device isolation benchmark: a writer to device B streams 256 MiB
 * and fsyncs, five times alone, then five times while device A is stalled
 * (completes nothing) and its own writer holds the cache at its dirty
 * limit.  Prints each run, the medians and their ratio.  B: model:bw=400M;
 * cache 256 MiB.
 */
#include "../tests/testutil.h"
#include "internal.h"
#include "backend/backends.h"

#include <time.h>

#define BYTES (256u << 20)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static wbc_dev *a;

static void *writer_a(void *arg)
{
	(void)arg;
	wbc_file *f;
	static char buf[1 << 20];
	CHECK_EQ(wbc_file_open(a, "a", WBC_O_CREAT, &f), 0);
	for (uint64_t off = 0; off < (128u << 20); off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

#define ROUNDS 5

static int cmp_d(const void *x, const void *y)
{
	double a1 = *(const double *)x, b1 = *(const double *)y;
	return a1 < b1 ? -1 : a1 > b1;
}

static double run_b(wbc_dev *b, const char *name)
{
	wbc_file *f;
	static char buf[1 << 20];
	t_fill(buf, sizeof(buf), 1);
	CHECK_EQ(wbc_file_open(b, name, WBC_O_CREAT | WBC_O_TRUNC, &f), 0);
	double t0 = now_s();
	for (uint64_t off = 0; off < BYTES; off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);
	double t = now_s() - t0;
	CHECK_EQ(wbc_file_close(f), 0);
	return BYTES / t / 1e6;
}

int main(void)
{
	struct wbc_config cfg = t_config(256u << 20, 4096);
	wbc_cache *c;
	wbc_dev *b;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M", &b), 0);
	double alone_r[ROUNDS], stalled_r[ROUNDS];
	for (int i = 0; i < ROUNDS; i++)
		alone_r[i] = run_b(b, "alone");
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M,stall=0s+3600s", &a), 0);
	pthread_t t;
	pthread_create(&t, NULL, writer_a, NULL);
	struct wbc_stats st;
	do {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		wbc_stats(c, &st);
	} while (st.dirty_bytes + st.writeback_bytes < st.setpoint_bytes);
	for (int i = 0; i < ROUNDS; i++)
		stalled_r[i] = run_b(b, "stalled");
	struct wbc_dev_stats as;
	wbc_dev_stats(a, &as);
	CHECK_EQ(as.written_back_bytes, 0);
	printf("writer to B (MB/s), alone:");
	for (int i = 0; i < ROUNDS; i++)
		printf(" %.0f", alone_r[i]);
	printf("; with A stalled holding %.1f MiB dirty:",
	       (double)(st.dirty_bytes + st.writeback_bytes) / (1 << 20));
	for (int i = 0; i < ROUNDS; i++)
		printf(" %.0f", stalled_r[i]);
	qsort(alone_r, ROUNDS, sizeof(double), cmp_d);
	qsort(stalled_r, ROUNDS, sizeof(double), cmp_d);
	printf("\nmedians: alone %.0f MB/s, A stalled %.0f MB/s: ratio %.2f\n",
	       alone_r[ROUNDS / 2], stalled_r[ROUNDS / 2], stalled_r[ROUNDS / 2] / alone_r[ROUNDS / 2]);
	model_release_stall(a);
	pthread_join(t, NULL);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
