/*
 * Direct writes at the edges of what the backend takes.
 *
 * 1. A direct write split into pieces (max_io) whose middle piece fails:
 *    the pieces after it were written too, past the size the write
 *    returned, and an extension of the file (wbc_truncate) then read them
 *    back as file data where zeros belong (the bytes of a write the
 *    caller was told failed).  The backend is now cut back to the size.
 * 2. A direct read at or past 2^62, or across it: 0 and the file's
 *    bytes, as through the cache (it was -EINVAL).
 * 3. A direct write past the backend's largest file (caps.max_file_size):
 *    refused with -EFBIG from there and cut across it, as a write through
 *    the cache is (it went to the backend, and the size passed the limit).
 */
#include "testutil.h"
#define sb_caps sb_caps_store
#include "store_backend.h"
#undef sb_caps

static void capped_caps(void *ctx, struct wbc_backend_caps *c)
{
	sb_caps_store(ctx, c);
	c->max_file_size = 8192;
}

static void partial_failure(void)
{
	wbc_cache *c = t_quiet_cache(1 << 20);
	wbc_dev *dev;
	wbc_file *f;
	/* pieces of 4 KiB; the third (8192..12288) fails */
	CHECK_EQ(wbc_dev_add(c, "model:max_io=4K,err=8192+4096", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT | WBC_O_DIRECT, &f), 0);
	char *buf = aligned_alloc(4096, 16384), *rb = aligned_alloc(4096, 16384);
	CHECK(buf && rb);
	memset(buf, 'X', 16384);
	CHECK_EQ(wbc_pwrite(f, buf, 16384, 0), 8192);
	CHECK_EQ(wbc_file_size(f), 8192);
	CHECK_EQ(wbc_truncate(f, 16384), 0);
	CHECK_EQ(wbc_pread(f, rb, 16384, 0), 16384);
	for (int i = 0; i < 16384; i++)
		if (rb[i] != (i < 8192 ? 'X' : 0)) {
			fprintf(stderr, "byte %d reads 0x%02x after the extension\n", i,
				(unsigned char)rb[i]);
			exit(1);
		}
	/* a non-extending write that fails inside the file leaves the size */
	CHECK(wbc_pwrite(f, buf, 16384, 0) == 8192);
	CHECK_EQ(wbc_file_size(f), 16384);
	CHECK_EQ(wbc_file_close(f), 0);
	/* through the cache: the same bytes */
	CHECK_EQ(wbc_file_open(dev, "f", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, rb, 16384, 0), 16384);
	for (int i = 8192; i < 16384; i++)
		CHECK(rb[i] == (i < 12288 ? 0 : 'X'));   /* written by the second call */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(buf);
	free(rb);
}

static void max_file(void)
{
	struct wbc_backend_ops ops = sb_ops;
	ops.caps = capped_caps;
	wbc_cache *c = t_quiet_cache(1 << 20);
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_dev_add_backend(c, &ops, NULL, NULL, &dev), 0);
	char *buf = aligned_alloc(4096, 8192);
	CHECK(buf);
	memset(buf, 'Y', 8192);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT | WBC_O_DIRECT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, 4096, 8192), -EFBIG);
	CHECK_EQ(wbc_pwrite(f, buf, 8192, 4096), 4096);          /* cut at the limit */
	struct iovec iov[3] = { { buf, 4096 }, { buf, 0 }, { buf + 4096, 4096 } };
	CHECK_EQ(wbc_pwritev(f, iov, 3, 4096), 4096);
	CHECK_EQ(wbc_file_size(f), 8192);
	CHECK_EQ(sb_backend_size(), 8192);
	CHECK(sb_is(4096, 8192, 'Y'));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(buf);
}

static void read_far(void)
{
	wbc_cache *c = t_quiet_cache(1 << 20);
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	char *buf = aligned_alloc(4096, 8192);
	CHECK(buf);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT | WBC_O_DIRECT, &f), 0);
	CHECK_EQ(wbc_pread(f, buf, 4096, 1ull << 62), 0);
	CHECK_EQ(wbc_pread(f, buf, 4096, 1ull << 63), 0);
	CHECK_EQ(wbc_pread(f, buf, 8192, (1ull << 62) - 4096), 0);
	memset(buf, 'Z', 4096);
	CHECK_EQ(wbc_pwrite(f, buf, 4096, 0), 4096);
	CHECK_EQ(wbc_pwrite(f, buf, 4096, 1ull << 62), -EINVAL);   /* writes: as before */
	memset(buf, 0, 8192);
	CHECK_EQ(wbc_pread(f, buf, 8192, 0), 4096);
	CHECK(buf[0] == 'Z' && buf[4095] == 'Z');
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(buf);
}

int main(void)
{
	partial_failure();
	read_far();
	max_file();
	printf("direct_edges: ok\n");
	return 0;
}
