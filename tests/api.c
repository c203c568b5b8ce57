/*
 * Bad arguments get an error, never a crash: configuration, device specs,
 * names, offsets, and handles used after close.
 */
#include "testutil.h"
#include "wbcache_backend.h"

/* the mem backend, naming no largest file */
static const struct wbc_backend_ops *big_inner;
static void big_caps(void *ctx, struct wbc_backend_caps *caps)
{
	big_inner->caps(ctx, caps);
	caps->max_file_size = 0;
}
static void no_destroy(void *ctx) { (void)ctx; }   /* the mem device's */
static int no_open(void *ctx, const char *name, int flags)
{
	(void)ctx; (void)name; (void)flags;
	return -ENOENT;
}

#include <limits.h>

/* refused by the check, with a reason, and by the open alike */
#define CHECK_REFUSED(cfgp, cp)                                                     \
	do {                                                                          \
		const char *why_ = wbc_config_check(cfgp);                            \
		CHECK(why_ != NULL && why_[0]);                                       \
		CHECK_EQ(wbc_cache_open(cfgp, cp), -EINVAL);                          \
	} while (0)

int main(void)
{
	struct wbc_config cfg;
	wbc_cache *c = NULL;

	/* configuration */
	CHECK_REFUSED(NULL, &c);
	cfg = t_config(1 << 20, 3000);
	CHECK_REFUSED(&cfg, &c);          /* not a power of two */
	cfg = t_config(1 << 20, 0);
	CHECK_REFUSED(&cfg, &c);
	cfg = t_config(1 << 20, 256);
	CHECK_REFUSED(&cfg, &c);          /* below 512 */
	cfg = t_config(64 << 20, 2 << 20);
	CHECK_REFUSED(&cfg, &c);          /* above 1 MiB */
	cfg = t_config(0, 4096);
	CHECK_REFUSED(&cfg, &c);          /* zero budget */
	cfg = t_config(15 * 4096, 4096);
	CHECK_REFUSED(&cfg, &c);          /* fewer than 16 pages */
	cfg = t_config(1 << 20, 4096);
	cfg.dirty_ratio = 101;
	CHECK_REFUSED(&cfg, &c);
	cfg = t_config(1 << 20, 4096);
	cfg.dirty_background_ratio = 200;
	CHECK_REFUSED(&cfg, &c);
	cfg = t_config(1 << 20, 4096);
	cfg.dirty_ratio = 0;
	CHECK_REFUSED(&cfg, &c);          /* no dirty limit at all */
	cfg = t_config(1 << 20, 4096);
	cfg.dirty_bytes = 100;
	CHECK_REFUSED(&cfg, &c);          /* below two pages */
	cfg = t_config(64 << 10, 4096);   /* 16 pages, 1%: under one page */
	cfg.dirty_ratio = 1;
	CHECK_REFUSED(&cfg, &c);          /* a ratio's limit below two pages */
	cfg.dirty_ratio = 13;             /* 2.08 pages */
	CHECK(wbc_config_check(&cfg) == NULL);
	CHECK(c == NULL);
	cfg = t_config(1 << 20, 4096);
	cfg.reserved[7] = 1;
	CHECK_REFUSED(&cfg, &c);          /* a tunable this version has not (was taken) */
	CHECK(strstr(wbc_config_check(&cfg), "wbc_config_init"));
	CHECK(c == NULL);

	cfg = t_config(1 << 20, 4096);
	cfg.dirty_ratio = 0;
	cfg.dirty_bytes = 64 << 10;                             /* bytes instead of ratio */
	CHECK(wbc_config_check(&cfg) == NULL);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.thresh_bytes, 64 << 10);
	CHECK_EQ(st.bg_thresh_bytes, 32 << 10);                 /* bg >= thresh: halved */
	CHECK_EQ(wbc_stats(c, NULL), -EINVAL);
	{
		/* bytes are rounded up to whole pages, as the kernel rounds
		 * them (domain_dirty_limits): a background threshold of one
		 * byte is one page, not none */
		struct wbc_config cfg2 = t_config(1 << 20, 4096);
		cfg2.dirty_bytes = (64 << 10) + 1;
		cfg2.dirty_background_bytes = 1;
		wbc_cache *c2;
		CHECK_EQ(wbc_cache_open(&cfg2, &c2), 0);
		CHECK_EQ(wbc_stats(c2, &st), 0);
		printf("dirty_bytes 65537, dirty_background_bytes 1: thresholds %llu, %llu bytes\n",
		       (unsigned long long)st.thresh_bytes, (unsigned long long)st.bg_thresh_bytes);
		CHECK_EQ(st.thresh_bytes, 68 << 10);
		CHECK_EQ(st.bg_thresh_bytes, 4096);
		/* so are a device's max_bytes and a group's limit (rounded
		 * down: 64 KiB); under two pages refused alike */
		wbc_dev *d2;
		CHECK_EQ(wbc_dev_add(c2, "mem,max_bytes=65537", &d2), 0);
		struct wbc_dev_stats ds;
		CHECK_EQ(wbc_dev_stats(d2, &ds), 0);
		printf("max_bytes 65537: the device's share %llu bytes\n",
		       (unsigned long long)ds.wb_thresh_bytes);
		CHECK_EQ(ds.wb_thresh_bytes, 68 << 10);
		wbc_group *g;
		CHECK_EQ(wbc_group_create(c2, 8191, 0, &g), -EINVAL);
		CHECK_EQ(wbc_group_create(c2, (64 << 10) + 1, 0, &g), 0);
		struct wbc_group_stats gs;
		CHECK_EQ(wbc_group_stats(g, &gs), 0);
		printf("a group of 65537 bytes: limit %llu bytes\n", (unsigned long long)gs.thresh_bytes);
		CHECK_EQ(gs.thresh_bytes, 68 << 10);
		CHECK_EQ(wbc_cache_close(c2), 0);
	}

	/* device specs */
	wbc_dev *dev = NULL;
	char msg[256];
	const char *bad[] = { "", "nope", "file:", "dir:", "dir:/nonexistent-wbcache/x",
			      "dir:/tmp,qd=0", "dir:/tmp,qd=99999", "dir:/tmp,bogus=1",
			      "dir:/tmp,qd=abc", "dir:/tmp,qd", "dir:/tmp,max_io=1",
			      "dir:/tmp,direct=2", "mem:x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		int e = wbc_dev_add_msg(c, bad[i], &dev, msg, sizeof(msg));
		if (e >= 0 || !msg[0]) {
			fprintf(stderr, "spec '%s' accepted (%d) or no message\n", bad[i], e);
			return 1;
		}
	}
	CHECK_EQ(wbc_dev_add(c, NULL, &dev), -EINVAL);
	CHECK(dev == NULL);
	/* an opener's bad flags or descriptor: said, not "missing argument" */
	CHECK_EQ(wbc_dev_add_opener(c, 0, "", no_open, NULL, 0x100, &dev, msg, sizeof(msg)),
		 -EINVAL);
	printf("opener, open_flags 0x100: %s\n", msg);
	CHECK(strstr(msg, "open_flags 0x100"));
	CHECK_EQ(wbc_dev_add_opener(c, -1, "", no_open, NULL, 0, &dev, msg, sizeof(msg)), -EINVAL);
	printf("opener, fs_fd -1: %s\n", msg);
	CHECK(strstr(msg, "fs_fd -1"));
	CHECK_EQ(wbc_dev_add_opener(c, 0, "", NULL, NULL, 0, &dev, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "missing argument"));
	CHECK(dev == NULL);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);

	/* names and flags */
	wbc_file *f = NULL;
	char longname[300];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	const char *badnames[] = { "", ".", "..", "a/b", "/abs", longname };
	for (size_t i = 0; i < sizeof(badnames) / sizeof(*badnames); i++)
		CHECK_EQ(wbc_file_open(dev, badnames[i], WBC_O_CREAT, &f), -EINVAL);
	CHECK_EQ(wbc_file_open(dev, "x", 0x100, &f), -EINVAL);
	CHECK_EQ(wbc_file_open(dev, "missing", 0, &f), -ENOENT);
	CHECK_EQ(wbc_file_open(NULL, "x", WBC_O_CREAT, &f), -EINVAL);
	CHECK_EQ(wbc_file_open(dev, "x", WBC_O_CREAT, &f), 0);

	/* offsets */
	char b[16] = "0123456789";
	CHECK_EQ(wbc_pwrite(f, b, 10, UINT64_MAX - 3), -EINVAL);
	CHECK_EQ(wbc_pwrite(f, b, 10, (1ull << 62) - 5), -EINVAL);
	CHECK_EQ(wbc_pwrite(f, b, SIZE_MAX, 0), -EINVAL);
	/* a read past what a file holds is past its end, as the kernel's */
	CHECK_EQ(wbc_pread(f, b, 10, UINT64_MAX - 3), 0);
	CHECK_EQ(wbc_pread(f, b, 10, (1ull << 62) - 5), 0);
	CHECK_EQ(wbc_pread(f, b, (size_t)SSIZE_MAX + 1, 0), -EINVAL);
	CHECK_EQ(wbc_pwrite(f, NULL, 10, 0), -EINVAL);
	CHECK_EQ(wbc_pread(f, NULL, 10, 0), -EINVAL);
	CHECK_EQ(wbc_truncate(f, 1ull << 63), -EINVAL);
	CHECK_EQ(wbc_fsync_range(f, UINT64_MAX, 1, 0), 0);      /* past the end: nothing */
	CHECK_EQ(wbc_fsync_range(f, 0, UINT64_MAX, 0), 0);      /* to the end */
	CHECK_EQ(wbc_file_info(f, NULL), -EINVAL);
	CHECK_EQ(wbc_pwrite(f, b, 0, 0), 0);
	CHECK_EQ(wbc_pwrite(f, b, 10, 0), 10);
	CHECK_EQ(wbc_pread(f, b, 10, 100), 0);                  /* past EOF */
	/* the backend's largest file (mem: 2^40): a write from there is
	 * EFBIG, one across it short, a truncate past it EFBIG, at once (it
	 * was taken into the cache, and its writeback failed for good) */
	CHECK_EQ(wbc_pwrite(f, b, 10, 1ull << 40), -EFBIG);
	CHECK_EQ(wbc_pwrite(f, b, 10, (1ull << 40) - 4), 4);
	CHECK_EQ(wbc_file_size(f), 1ull << 40);
	CHECK_EQ(wbc_truncate(f, (1ull << 40) + 1), -EFBIG);
	CHECK_EQ(wbc_pwrite(f, b, 0, 1ull << 40), 0);
	CHECK_EQ(wbc_truncate(f, 10), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	/* a backend that names no largest file: 2^62, the last bytes allowed */
	{
		const struct wbc_backend_ops *mops;
		void *mctx = wbc_dev_backend(dev, &mops);
		static struct wbc_backend_ops big;
		big = *mops;
		big.caps = big_caps;
		big.destroy = no_destroy;
		big_inner = mops;
		wbc_dev *bd;
		wbc_file *bf;
		CHECK_EQ(wbc_dev_add_backend(c, &big, mctx, "", &bd), 0);
		CHECK_EQ(wbc_file_open(bd, "big", WBC_O_CREAT, &bf), 0);
		CHECK_EQ(wbc_pwrite(bf, b, 10, (1ull << 62) - 10), 10);
		CHECK_EQ(wbc_file_size(bf), 1ull << 62);
		CHECK_EQ(wbc_pwrite(bf, b, 10, (1ull << 62) - 5), -EINVAL);
		CHECK_EQ(wbc_truncate(bf, 10), 0);
		CHECK_EQ(wbc_file_close(bf), 0);
	}

	/* use after close */
	wbc_file *g;
	CHECK_EQ(wbc_file_open(dev, "x", 0, &g), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_pwrite(f, b, 1, 0), -EBADF);
	CHECK_EQ(wbc_pread(f, b, 1, 0), -EBADF);
	CHECK_EQ(wbc_fsync(f), -EBADF);
	CHECK_EQ(wbc_truncate(f, 0), -EBADF);
	CHECK_EQ(wbc_file_size(f), -EBADF);
	CHECK_EQ(wbc_file_close(f), -EBADF);
	CHECK_EQ(wbc_pread(g, b, 10, 0), 10);                   /* the other handle lives */
	CHECK_EQ(wbc_pwrite((wbc_file *)(uintptr_t)0x12345, b, 1, 0), -EBADF);
	/* the closed handle's slot with its free generation (even): no
	 * handle ever had it */
	CHECK_EQ(wbc_file_size((wbc_file *)((uintptr_t)f + 1)), -EBADF);
	CHECK_EQ(wbc_file_close((wbc_file *)((uintptr_t)f + 1)), -EBADF);
	CHECK_EQ(wbc_file_close(NULL), 0);

	/* file: devices hold exactly one file, named "" */
	CHECK_EQ(wbc_dev_sync(NULL), -EINVAL);
	CHECK_EQ(wbc_cache_sync(NULL), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);                         /* closes g */
	CHECK_EQ(wbc_file_close(g), -EBADF);
	CHECK_EQ(wbc_cache_close(NULL), 0);
	CHECK(wbc_strerror(-EINVAL) != NULL);
	CHECK(!strcmp(wbc_strerror(-EIO), strerror(EIO)));
	CHECK(!strcmp(wbc_strerror(EIO), strerror(EIO)));
	/* any int: INT_MIN has no positive counterpart (UBSan caught the
	 * negation); it is no errno value */
	CHECK(wbc_strerror(INT_MIN) && *wbc_strerror(INT_MIN));
	CHECK(wbc_strerror(INT_MAX) && *wbc_strerror(INT_MAX));

	/* lock-hold percentiles: the last histogram entry has no upper bound
	 * (it counts every hold from 2^30 ns on): a hold of 5 s is 5 s, not
	 * 2^31 ns, which is shorter than every hold there (it was) */
	{
		struct wbc_dev_debug dd;
		memset(&dd, 0, sizeof(dd));
		CHECK_EQ(wbc_lock_hold_percentile(&dd, 99), 0);          /* no holds */
		dd.list_lock_hold_hist[31] = 4;
		dd.list_lock_holds = 4;
		dd.list_lock_max_hold_ns = 5000000000ull;
		CHECK_EQ(wbc_lock_hold_percentile(&dd, 50), 5000000000ull);
		CHECK_EQ(wbc_lock_hold_percentile(&dd, 100), 5000000000ull);
		dd.list_lock_cpu_hist[31] = 4;
		dd.list_lock_max_cpu_ns = 3000000000ull;
		CHECK_EQ(wbc_lock_cpu_percentile(&dd, 99), 3000000000ull);
		/* below it, the entry's upper bound, or the longest if shorter */
		dd.list_lock_hold_hist[3] = 96;   /* [4, 8) ns */
		dd.list_lock_holds = 100;
		CHECK_EQ(wbc_lock_hold_percentile(&dd, 50), 8);
		CHECK_EQ(wbc_lock_hold_percentile(&dd, 99), 5000000000ull);
	}

	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "file:%s/img", dir);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "name", 0, &f), -EINVAL);
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	/* a file on a file system: its largest file, found by the backend
	 * (ext4 with 4 KiB blocks: 16 TiB), is refused at once */
	{
		const struct wbc_backend_ops *fops;
		void *fctx = wbc_dev_backend(dev, &fops);
		struct wbc_backend_caps caps = { 0 };
		fops->caps(fctx, &caps);
		printf("largest file on %s's file system: %llu\n", dir,
		       (unsigned long long)caps.max_file_size);
		if (caps.max_file_size) {
			CHECK_EQ(wbc_pwrite(f, b, 10, caps.max_file_size), -EFBIG);
			CHECK_EQ(wbc_pwrite(f, b, 10, caps.max_file_size - 3), 3);
			CHECK_EQ(wbc_truncate(f, 0), 0);
		}
	}
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
	printf("api: ok\n");
	return 0;
}
