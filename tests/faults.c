/*
 * Faults on the model backend, for each: what fsync returns, what the
 * stats count, and what the backend holds once the fault ends.
 *   1. EIO on a byte range, retry policy: fsync fails while the fault
 *      lasts, the bytes are counted at risk (not lost), and after the fault
 *      ends fsync succeeds and the backend holds every byte.
 *   2. The same fault, drop policy: fsync reports the error once, the bytes
 *      are counted lost, the next fsync succeeds, the range is not written.
 *   3. errseq: an error in background writeback is seen once by each
 *      handle open at the time, at its next fsync; by a handle opened
 *      after it while no handle was told (the kernel's SEEN flag), not by
 *      one opened once it was told.  A file written and closed with no
 *      fsync whose writeback fails (drop): its inode goes with its pages,
 *      and the error is the next opener's (it was told to nobody, lost).
 *      A retried error healed before a new handle's first check is not
 *      that handle's (retry_bound.c), nor one whose failed pages were
 *      truncated away before it looked.  A WBC_O_NOERRSEEN handle is told
 *      the error without taking it from the next opener.  None of this
 *      changes when the error counter wraps.
 *   4. EIO with a probability, retry policy: fsync until it succeeds; the
 *      backend ends up right.
 *   5. A stall (no completion for a while) and a bandwidth collapse: fsync
 *      waits them out and returns 0; the data is right.
 *   6. seed=: every seed its own injected faults (errp=), the same seed
 *      the same ones.
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

/* @name written and closed, no fsync, then its writeback failing (the
 * fault at 256K+64K, on the retry policy): no handle was told. */
static void written_closed_failed(wbc_dev *dev, const char *name)
{
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_file_close(f), 0);
	model_set_faults(dev, 256u << 10, 64u << 10, 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
}

/* Which of 64 writes (a page each, fsync'ed one by one, drop policy)
 * fail on a model with errp=0.5 and @seed: a bit each. */
static uint64_t fault_pattern(unsigned seed)
{
	wbc_cache *c = t_quiet_cache(16u << 20);
	wbc_dev *dev;
	wbc_file *f;
	char spec[96];
	snprintf(spec, sizeof(spec), "model:errp=0.5,seed=%u,on_error=drop", seed);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "seed", WBC_O_CREAT, &f), 0);
	uint64_t bits = 0;
	for (unsigned i = 0; i < 64; i++) {
		CHECK_EQ(wbc_pwrite(f, data, 4096, (uint64_t)i * 4096), 4096);
		int e = wbc_fsync(f);
		CHECK(e == 0 || e == -EIO);
		if (e)
			bits |= 1ull << i;
	}
	wbc_file_close(f);
	wbc_cache_close(c);
	return bits;
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
	/* written and closed, its writeback failing, no handle told: a
	 * handle opened then is told while the pages are at risk; one whose
	 * first fsync writes them (the fault over) is not: nothing was lost */
	written_closed_failed(dev, "h");
	CHECK_EQ(wbc_file_open(dev, "h", 0, &f), 0);
	CHECK_EQ(wbc_file_open(dev, "h", 0, &g), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);                 /* at risk still: told */
	model_set_faults(dev, 0, 0, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_fsync(g), -EIO);                 /* opened before f was told */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_close(g), 0);
	written_closed_failed(dev, "i");
	CHECK_EQ(wbc_file_open(dev, "i", 0, &f), 0);
	model_set_faults(dev, 0, 0, 0);
	CHECK_EQ(wbc_fsync(f), 0);                    /* healed before it looked */
	CHECK_EQ(wbc_file_close(f), 0);
	check_backend(dev, "i", SZ);
	/* the failed pages truncated away (the fault still on) heal the
	 * error as their writing would: nothing of them can be lost any
	 * more, and a handle opened after is not told (it was, unless some
	 * other page of the file was written after the truncate) */
	written_closed_failed(dev, "k");
	CHECK_EQ(wbc_file_open(dev, "k", 0, &f), 0);
	CHECK_EQ(wbc_truncate(f, 128u << 10), 0);    /* the fault's range is past it */
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(wbc_file_open(dev, "k", 0, &g), 0);
	CHECK_EQ(wbc_fsync(g), 0);
	CHECK_EQ(wbc_fsync(f), 0);                    /* healed before it looked */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_close(g), 0);
	model_set_faults(dev, 0, 0, 0);
	check_backend(dev, "k", 128u << 10);
	CHECK_EQ(wbc_dev_sync(dev), 0);               /* dev_sync told them already */
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
	/* a file of 5000 bytes lost: 5000 lost, not its last page's padding
	 * past the end (8192) */
	c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "model:bw=500M,err=0+8K,on_error=drop", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "p", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 5000, 0), 5000);
	CHECK_EQ(wbc_fsync(f), -EIO);
	wbc_stats(c, &st);
	printf("2. a file of 5000 bytes lost: %llu bytes lost\n", (unsigned long long)st.lost_bytes);
	CHECK_EQ(st.lost_bytes, 5000);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), -EIO);

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
	/* opened after the error, before any handle was told: told too
	 * (the kernel's SEEN flag) */
	CHECK_EQ(wbc_fsync(late), -EIO);
	CHECK_EQ(wbc_fsync(late), 0);
	wbc_file *later;
	CHECK_EQ(wbc_file_open(dev, "e", 0, &later), 0);
	CHECK_EQ(wbc_fsync(later), 0);                /* opened once told: not */
	wbc_file_close(f);
	wbc_file_close(g);
	wbc_file_close(late);
	wbc_file_close(later);
	/* written and closed with no fsync: the writeback's error, met with
	 * no handle open, is the next opener's (it was no one's: lost) */
	CHECK_EQ(wbc_file_open(dev, "n", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 8192, 0), 8192);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	CHECK_EQ(wbc_file_open(dev, "n", 0, &f), 0);
	CHECK_EQ(wbc_file_check_error(f), -EIO);      /* told once */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_open(dev, "n", 0, &g), 0);
	CHECK_EQ(wbc_fsync(g), 0);                    /* opened once told: not */
	wbc_file_close(f);
	wbc_file_close(g);
	/* WBC_O_NOERRSEEN (a FUSE daemon writing back a file the kernel
	 * forgot): its fsync learns that the writeback failed, and the error
	 * stays the next opener's (its telling marked it seen: the user's
	 * later open and fsync returned 0 for lost data) */
	wbc_file *own;
	CHECK_EQ(wbc_file_open(dev, "q", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 8192, 0), 8192);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	CHECK_EQ(wbc_file_open(dev, "q", WBC_O_NOERRSEEN, &own), 0);
	CHECK_EQ(wbc_fsync(own), -EIO);               /* inherited: told to it */
	CHECK_EQ(wbc_fsync(own), 0);                  /* once */
	CHECK_EQ(wbc_file_close(own), 0);
	CHECK_EQ(wbc_file_open(dev, "q", WBC_O_NOERRSEEN, &own), 0);
	CHECK_EQ(wbc_file_check_error(own), -EIO);    /* still nobody's seen */
	CHECK_EQ(wbc_file_open(dev, "q", 0, &f), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);                 /* the user's, still */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_open(dev, "q", 0, &g), 0);
	CHECK_EQ(wbc_fsync(g), 0);                    /* opened once told: not */
	wbc_file_close(own);
	wbc_file_close(f);
	wbc_file_close(g);
	/* ... also an error of its own writeback (data written through it,
	 * no other handle open) */
	CHECK_EQ(wbc_file_open(dev, "q2", WBC_O_CREAT | WBC_O_NOERRSEEN, &own), 0);
	CHECK_EQ(wbc_pwrite(own, data, 8192, 0), 8192);
	CHECK_EQ(wbc_fsync(own), -EIO);
	CHECK_EQ(wbc_file_close(own), 0);
	CHECK_EQ(wbc_file_open(dev, "q2", 0, &f), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_fsync(f), 0);
	wbc_file_close(f);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);            /* the device's, for the close below */
	CHECK_EQ(wbc_file_open(dev, "q", 0x100, &f), -EINVAL);   /* still refused */
	/* the error counter wrapping (after 2^32 errors) loses nothing: made
	 * to stand at its last value, the next error is told to a handle
	 * opened after it while no handle was told, and, met with no
	 * handle open, to the next opener */
	CHECK_EQ(wbc_file_open(dev, "w", WBC_O_CREAT, &f), 0);
	struct inode *wi = handle_get(f)->inode;
	pthread_mutex_lock(&wi->lock);
	wi->wb_err.seq = UINT32_MAX;
	wi->wb_err.err = -EIO;
	wi->wb_err.seen = true;
	pthread_mutex_unlock(&wi->lock);
	CHECK_EQ(wbc_file_check_error(f), -EIO);      /* the old one, told */
	CHECK_EQ(wbc_pwrite(f, data, 8192, 0), 8192);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);            /* the counter wraps here */
	CHECK_EQ(wbc_file_open(dev, "w", 0, &late), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);
	CHECK_EQ(wbc_fsync(late), -EIO);              /* opened before any was told */
	CHECK_EQ(wbc_fsync(late), 0);
	wbc_file_close(f);
	wbc_file_close(late);
	CHECK_EQ(wbc_file_open(dev, "v", WBC_O_CREAT, &f), 0);
	wi = handle_get(f)->inode;
	pthread_mutex_lock(&wi->lock);
	wi->wb_err.seq = UINT32_MAX;
	wi->wb_err.err = -EIO;
	wi->wb_err.seen = true;
	pthread_mutex_unlock(&wi->lock);
	CHECK_EQ(wbc_file_check_error(f), -EIO);
	CHECK_EQ(wbc_pwrite(f, data, 8192, 0), 8192);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);            /* wraps, no handle open */
	CHECK_EQ(wbc_file_open(dev, "v", 0, &f), 0);
	CHECK_EQ(wbc_file_check_error(f), -EIO);      /* the next opener's */
	wbc_file_close(f);
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
	/* 6. seed=: each seed its own faults (seed=2 was seed=3, seed=0
	 * seed=1: the generator's state was the seed with its low bit set),
	 * the same seed the same ones */
	uint64_t p0 = fault_pattern(0), p1 = fault_pattern(1), p2 = fault_pattern(2),
		 p3 = fault_pattern(3);
	printf("6. errp=0.5 faults by seed: 0 %016llx 1 %016llx 2 %016llx 3 %016llx\n",
	       (unsigned long long)p0, (unsigned long long)p1, (unsigned long long)p2,
	       (unsigned long long)p3);
	CHECK(p0 != p1);
	CHECK(p2 != p3);
	CHECK(p1 != p3);
	CHECK_EQ(fault_pattern(2), p2);
	printf("faults: ok\n");
	return 0;
}
