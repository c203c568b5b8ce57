/*
 * A writer that finds no free page waits for writeback instead of failing:
 * device A completes nothing (a model stall) and holds 60 of the arena's
 * 64 pages dirty or under writeback; a writer to device B (which passes
 * the throttle: B is clean) takes the last free pages and must then wait
 * in page allocation (counted in page_waits) until B's own pages are
 * written and can be reused.  Nothing fails; when A's stall ends its pages
 * are written too, and every byte of both files is on its backend.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "backend_util.h"

#define PS 4096
#define NP 64

static wbc_dev *b;
static char bdata[32 * PS];

static void *writer_b(void *arg)
{
	(void)arg;
	wbc_file *f;
	CHECK_EQ(wbc_file_open(b, "b", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, bdata, sizeof(bdata), 0), sizeof(bdata));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(NP * PS, PS);
	cfg.dirty_ratio = 100;
	cfg.dirty_background_ratio = 90;
	wbc_cache *c;
	wbc_dev *a;
	wbc_file *fa;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=100M,stall=0s+3600s", &a), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &b), 0);
	static char adata[60 * PS];
	t_fill(adata, sizeof(adata), 1);
	t_fill(bdata, sizeof(bdata), 2);
	CHECK_EQ(wbc_file_open(a, "a", WBC_O_CREAT, &fa), 0);
	CHECK_EQ(wbc_pwrite(fa, adata, sizeof(adata), 0), sizeof(adata));

	pthread_t t;
	pthread_create(&t, NULL, writer_b, NULL);
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), st.page_waits > 0)));           /* B's writer had to wait for a page */
	CHECK(st.cached_bytes <= st.mem_bytes);
	struct wbc_dev_stats ds;
	wbc_dev_stats(a, &ds);
	CHECK_EQ(ds.written_back_bytes, 0);

	model_release_stall(a);
	pthread_join(t, NULL);
	CHECK_EQ(wbc_fsync(fa), 0);
	static char back[60 * PS];
	uint64_t size;
	CHECK_EQ(t_backend_read(a, "a", back, sizeof(back), &size), 0);
	CHECK_EQ(size, sizeof(adata));
	CHECK(!memcmp(back, adata, sizeof(adata)));
	CHECK_EQ(t_backend_read(b, "b", back, sizeof(bdata), &size), 0);
	CHECK_EQ(size, sizeof(bdata));
	CHECK(!memcmp(back, bdata, sizeof(bdata)));
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("pagewait: ok (page waits %llu)\n", (unsigned long long)st.page_waits);
	return 0;
}
