/*
 * wbc_file_remove(): a file's cached pages are dropped, never written, and
 * the backend's copy deleted; an open file is refused (-EBUSY), a missing
 * one is -ENOENT, and a backend that cannot remove says so (-EOPNOTSUPP).
 */
#include "testutil.h"

static void written_then_removed(const char *spec)
{
	struct wbc_config cfg = t_config(4 << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;    /* nothing written back unasked */
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	static char buf[64 << 10];
	t_fill(buf, sizeof(buf), 3);
	wbc_file *f, *g;
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);                      /* in the backend */
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 1 << 20), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_remove(dev, "a"), -EBUSY);
	CHECK_EQ(wbc_file_close(f), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK(st.dirty_bytes >= sizeof(buf));
	CHECK_EQ(wbc_file_remove(dev, "a"), 0);
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.dirty_bytes, 0);                    /* dropped, not written */
	CHECK_EQ(wbc_file_remove(dev, "a"), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "a", 0, &f), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_size(f), 0);                  /* a new, empty file */
	char back[16];
	CHECK_EQ(wbc_pread(f, back, sizeof(back), 0), 0);
	/* a second handle open: refused, the file stays */
	CHECK_EQ(wbc_file_open(dev, "a", 0, &g), 0);
	CHECK_EQ(wbc_pwrite(f, "x", 1, 0), 1);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), -EBUSY);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), 0);
	CHECK_EQ(wbc_file_remove(dev, "../a"), -EINVAL);
	CHECK_EQ(wbc_file_remove(NULL, "a"), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("  %s: removed\n", spec);
}

int main(void)
{
	written_then_removed("mem");
	written_then_removed("model:bw=100M");

	/* a directory's files belong to the directory */
	char *dir = t_mkdtemp();
	char spec[4200];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(4 << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), -EOPNOTSUPP);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
	printf("remove: ok\n");
	return 0;
}
