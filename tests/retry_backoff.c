/*
 * on_error=retry: a page whose write failed is written again in the
 * background once its backoff (100 ms doubling to 5 s) is over, not only
 * when it has been dirty for dirty_expire again.  The failed file was
 * pushed as a newly dirtied one (dirtied now), and a file the flusher
 * found in its backoff was filed with the newest files: with the
 * cache under its background threshold only a periodic pass takes it,
 * and only once it is dirty_expire old (half a minute by default, here
 * an hour), so the data stayed at risk for that long after each failure.
 *
 * A device fails its first three writes (errn=3); one page is written
 * and synced (the sync fails: at risk).  Without any sync after that,
 * the flusher's retries must write it (two more failures, then success)
 * within the wait's bound, far under the hour of dirty_expire: at risk
 * and dirty back to 0, three write errors, the data on the backend.
 * Both dirty-list policies.  The same after a failed fsync of the file
 * instead of a sync: the file stays listed in b_dirty where its write
 * filed it while the fsync writes it, and kept its place there after
 * the failure (retried only when it was due, an hour later).
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#define PS 4096

static void run(const char *opts, bool by_fsync)
{
	struct wbc_config cfg = t_config(4 << 20, PS);
	cfg.dirty_expire_centisecs = 360000;     /* an hour */
	cfg.dirty_writeback_centisecs = 10;
	wbc_cache *c;
	wbc_dev *d;
	wbc_file *f;
	char spec[128];
	snprintf(spec, sizeof(spec), "model:bw=100M,errn=3%s", opts);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &d), 0);
	CHECK_EQ(wbc_file_open(d, "x", WBC_O_CREAT, &f), 0);
	static char page[PS], back[PS];
	t_fill(page, PS, 7);
	CHECK_EQ(wbc_pwrite(f, page, PS, 0), PS);
	/* by the file's fsync: the file stays listed where its write put it
	 * (not due for an hour) while the fsync writes it */
	CHECK((by_fsync ? wbc_fsync(f) : wbc_dev_sync(d)) < 0);
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, PS);
	CHECK_EQ(st.write_errors, 1);
	/* the retries, in the background only */
	bool written = T_WAIT_UNTIL((wbc_stats(c, &st), st.at_risk_bytes == 0 &&
				     st.dirty_bytes == 0 && st.writeback_bytes == 0));
	if (!written)
		fprintf(stderr, "%s: still at risk %llu, %llu write errors\n", spec,
			(unsigned long long)st.at_risk_bytes, (unsigned long long)st.write_errors);
	CHECK(written);
	CHECK_EQ(st.write_errors, 3);
	CHECK_EQ(st.lost_bytes, 0);
	/* on the backend: the cache's copy dropped, read back (the sync
	 * tells the background retries' errors, once) */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(d), -EIO);
	CHECK_EQ(wbc_dev_sync(d), 0);
	CHECK_EQ(wbc_file_open(d, "x", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, back, PS, 0), PS);
	CHECK(!memcmp(back, page, PS));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("%s: after a failed %s, retried in the background, at risk 0\n", spec,
	       by_fsync ? "fsync" : "sync");
}

/*
 * A file in its backoff (every write of it fails: a range of the model)
 * beside a file that needs many slices (chunk=64K, 4 MiB): each complete
 * periodic pass writes the whole of the second, as it did when the failed
 * file was filed in b_dirty (dirtied anew: not due again in that pass).
 * With the failed file on b_more_io, which every turn of a pass takes, a
 * pass ended as soon as that file came round again (it was "the first
 * file put back untouched"), after a slice or two of the other: the
 * second file's data waited for dozens of passes.  Counted in passes,
 * not in time: the pass that began once the big file was due has ended
 * when another has begun.
 */
static void run_beside(const char *opts)
{
	struct wbc_config cfg = t_config(64 << 20, PS);
	cfg.dirty_expire_centisecs = 100;
	cfg.dirty_writeback_centisecs = 20;
	cfg.dirty_background_ratio = 50;          /* periodic passes only */
	cfg.dirty_ratio = 60;
	wbc_cache *c;
	wbc_dev *d;
	wbc_file *bad, *big;
	char spec[128];
	snprintf(spec, sizeof(spec), "model:err=16M+4K,chunk=64K%s", opts);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &d), 0);
	static char page[PS];
	t_fill(page, PS, 9);
	CHECK_EQ(wbc_file_open(d, "bad", WBC_O_CREAT, &bad), 0);
	CHECK_EQ(wbc_pwrite(bad, page, PS, 16 << 20), PS);
	CHECK(wbc_dev_sync(d) < 0);               /* at risk, in its backoff */
	CHECK_EQ(wbc_file_open(d, "big", WBC_O_CREAT, &big), 0);
	for (uint64_t off = 0; off < (4u << 20); off += PS)
		CHECK_EQ(wbc_pwrite(big, page, PS, off), PS);
	/* the big file due (a wait for a state, not a timing) */
	struct timespec due = { 1, 300 * 1000 * 1000 };
	nanosleep(&due, NULL);
	unsigned long long p0 = atomic_load(&d->wb_passes);
	CHECK(T_WAIT_UNTIL(atomic_load(&d->wb_passes) >= p0 + 2));
	struct wbc_stats st;
	wbc_stats(c, &st);
	/* dirty (not yet sent): the failing page at most (none while a
	 * retry of it is out) */
	printf("%s: beside a failing file, after a whole periodic pass: %llu bytes dirty "
	       "(4 MiB before)\n", spec, (unsigned long long)st.dirty_bytes);
	CHECK(st.dirty_bytes <= PS);
	CHECK_EQ(st.at_risk_bytes, PS);
	model_set_faults(d, 0, 0, 0);             /* the fault ends */
	CHECK_EQ(wbc_file_close(big), 0);
	CHECK_EQ(wbc_file_close(bad), 0);
	/* (the background retries' failures told once, if any came) */
	int e = wbc_dev_sync(d);
	CHECK(e == 0 || e == -EIO);
	CHECK_EQ(wbc_dev_sync(d), 0);
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

int main(void)
{
	run("", false);
	run(",dirty_list=list", false);
	run("", true);
	run(",dirty_list=list", true);
	run_beside("");
	run_beside(",dirty_list=list");
	printf("retry_backoff: ok\n");
	return 0;
}
