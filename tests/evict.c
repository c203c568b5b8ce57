/*
 * Reads after writes across eviction: three files, 8 MiB in all, through a
 * 64 KiB cache.  Every byte read back (from the cache or, after eviction,
 * from the backend) equals what was written, before and after fsync and
 * after reopening in a fresh cache.
 */
#include "testutil.h"

#define NF 3
#define FSZ (8u << 20) / NF
#define PS 4096

static char *data[NF];

static void verify(wbc_file *f, int i)
{
	static char buf[FSZ];
	CHECK_EQ(wbc_pread(f, buf, FSZ, 0), FSZ);
	CHECK(!memcmp(buf, data[i], FSZ));
	/* and in odd-sized pieces, backwards */
	for (uint64_t off = FSZ; off > 0;) {
		size_t len = (size_t)(off < 7777 ? off : 7777);
		off -= len;
		CHECK_EQ(wbc_pread(f, buf, len, off), len);
		CHECK(!memcmp(buf, data[i] + off, len));
	}
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(16 * PS, PS);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f[NF];
	char name[16];
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	for (int i = 0; i < NF; i++) {
		data[i] = malloc(FSZ);
		t_fill(data[i], FSZ, (uint64_t)i + 11);
		snprintf(name, sizeof(name), "e%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT | WBC_O_TRUNC, &f[i]), 0);
	}
	/* interleaved writes, 5000 bytes at a time, unaligned */
	for (uint64_t off = 0; off < FSZ; off += 5000)
		for (int i = 0; i < NF; i++) {
			size_t len = (size_t)(FSZ - off < 5000 ? FSZ - off : 5000);
			CHECK_EQ(wbc_pwrite(f[i], data[i] + off, len, off), len);
		}
	for (int i = 0; i < NF; i++)
		verify(f[i], i);            /* dirty or written back and evicted */
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK(st.reclaimed_pages > 0 && st.read_in_bytes > 0);
	CHECK(st.cached_bytes <= st.mem_bytes);
	for (int i = 0; i < NF; i++)
		CHECK_EQ(wbc_fsync(f[i]), 0);
	for (int i = 0; i < NF; i++)
		verify(f[i], i);
	CHECK_EQ(wbc_cache_close(c), 0);    /* closes the files too */

	/* a fresh cache reads everything from the backend */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	for (int i = 0; i < NF; i++) {
		snprintf(name, sizeof(name), "e%d", i);
		CHECK_EQ(wbc_file_open(dev, name, 0, &f[i]), 0);
		CHECK_EQ(wbc_file_size(f[i]), FSZ);
		verify(f[i], i);
		CHECK_EQ(wbc_file_close(f[i]), 0);
	}
	wbc_stats(c, &st);
	CHECK(st.read_in_bytes >= (uint64_t)NF * FSZ);
	CHECK_EQ(st.written_back_bytes, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	for (int i = 0; i < NF; i++)
		free(data[i]);
	t_rmdir(dir);
	printf("evict: ok\n");
	return 0;
}
