/*
 * Faults on the model backend, for each: what fsync returns, what the
 * stats count, and what the backend holds once the fault ends.
 *   1. EIO on a byte range, retry policy: fsync fails while the fault
 *      lasts, the bytes are counted at risk (not lost), and after the fault
 *      ends fsync succeeds and the backend holds every byte.
 *   2. The same fault, drop policy: fsync reports the error once, the bytes
 *      are counted lost, the next fsync succeeds, the range is not written.
 *   3. errseq: an error in background writeback is seen once by each
 *      handle open at the time, at its next fsync; not by a later handle.
 *   4. EIO with a probability, retry policy: fsync until it succeeds; the
 *      backend ends up right.
 *   5. A stall (no completion for a while) and a bandwidth collapse: fsync
 *      waits them out and returns 0; the data is right.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "backend_util.h"

#define SZ (1u << 20)

static char data[SZ], back[SZ];

static void check_backend(wbc_dev *dev, const char *name, uint64_t want_size)
{
	uint64_t size;
	CHECK_EQ(t_backend_read(dev, name, back, SZ, &size), 0);
	CHECK_EQ(size, want_size);
	CHECK(!memcmp(back, data, want_size));
}

int main(void)
{
	t_fill(data, SZ, 9);
	struct wbc_stats st;
	wbc_file *f, *g;
	wbc_dev *dev;

	/* 1. range, retry */
	wbc_cache *c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,max_io=64K,err=256K+64K", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "r", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_fsync(f), -EIO);                 /* still failing: said again */
	wbc_stats(c, &st);
	CHECK(st.write_errors >= 2);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK(st.at_risk_bytes >= (64u << 10));
	CHECK(st.dirty_bytes + st.writeback_bytes >= (64u << 10));   /* not clean */
	CHECK_EQ(wbc_pread(f, back, SZ, 0), SZ);      /* the cache still has it */
	CHECK(!memcmp(back, data, SZ));
	model_set_faults(dev, 0, 0, 0);           /* the fault ends */
	CHECK_EQ(wbc_fsync(f), 0);
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(st.dirty_bytes, 0);
	check_backend(dev, "r", SZ);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* device level: errors since its last sync */
	CHECK_EQ(wbc_dev_sync(dev), 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* 2. range, drop */
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,max_io=64K,err=256K+64K,on_error=drop", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "d", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_fsync(f), 0);                    /* reported once; nothing dirty */
	wbc_stats(c, &st);
	CHECK(st.lost_bytes >= (64u << 10) && st.lost_bytes < SZ);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(st.dirty_bytes, 0);
	uint64_t size;
	CHECK_EQ(t_backend_read(dev, "d", back, SZ, &size), 0);
	CHECK(!memcmp(back, data, 256u << 10));       /* before the range: written */
	CHECK(memcmp(back + (256u << 10), data + (256u << 10), 64u << 10));  /* not */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), -EIO);           /* close says so too */

	/* 3. errseq across handles, error in background writeback */
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,err=0+4K,on_error=drop", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_open(dev, "e", 0, &g), 0);
	CHECK_EQ(wbc_pwrite(f, data, 8192, 0), 8192);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);            /* the writeback fails here */
	wbc_file *late;
	CHECK_EQ(wbc_file_open(dev, "e", 0, &late), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_fsync(g), -EIO);                 /* the other handle sees it too */
	CHECK_EQ(wbc_fsync(g), 0);
	CHECK_EQ(wbc_fsync(late), 0);                 /* opened after: does not */
	wbc_file_close(f);
	wbc_file_close(g);
	wbc_file_close(late);
	CHECK_EQ(wbc_cache_close(c), 0);              /* dev_sync reported it already */

	/* 4. probability, retry */
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,max_io=64K,errp=0.3,seed=5", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "p", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	int tries = 0, e;
	while ((e = wbc_fsync(f)) == -EIO && tries < 200)
		tries++;
	CHECK_EQ(e, 0);
	CHECK(tries > 0);                             /* some writes did fail */
	wbc_stats(c, &st);
	CHECK(st.write_errors > 0);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(st.at_risk_bytes, 0);
	check_backend(dev, "p", SZ);
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(c), -EIO);           /* the device saw errors: said once */

	/* 5. stall, then bandwidth collapse */
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,stall=0s+500ms", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "s", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(f), 0);
	check_backend(dev, "s", SZ);
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(c), 0);
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,sched=0s@1%", &dev), 0);   /* 5 MB/s */
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_fsync(f), 0);
	check_backend(dev, "b", SZ);
	wbc_file_close(f);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("faults: ok\n");
	return 0;
}
