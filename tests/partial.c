/*
 * Partial and unaligned writes: a write that covers part of a page keeps
 * the rest of that page as it was on the backend (read in) or zero past
 * end of file; holes read as zeros; sizes follow the largest write.  Run on
 * the mem and the file backend, with 512-byte and 4 KiB pages, and with a
 * cache so small that the pages are evicted between the writes.
 */
#include "testutil.h"
#include "backend_util.h"

#include <fcntl.h>

#define FSZ (256u << 10)

static void check_all(wbc_file *f, const char *model, uint64_t size)
{
	static char buf[FSZ + 8192];
	CHECK_EQ(wbc_file_size(f), size);
	CHECK_EQ(wbc_pread(f, buf, sizeof(buf), 0), size);
	for (uint64_t i = 0; i < size; i++)
		if (buf[i] != model[i]) {
			fprintf(stderr, "byte %llu: got %d want %d (size %llu)\n", (unsigned long long)i,
				buf[i], model[i], (unsigned long long)size);
			exit(1);
		}
}

static void run(const char *spec, uint32_t ps, uint64_t mem)
{
	struct wbc_config cfg = t_config(mem, ps);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "p", WBC_O_CREAT | WBC_O_TRUNC, &f), 0);
	static char model[FSZ + 8192], chunk[3 * 4096];
	memset(model, 0, sizeof(model));
	uint64_t size = 0;

	/* 1: a few bytes in the middle of an empty file: hole before */
	CHECK_EQ(wbc_pwrite(f, "hello", 5, 10000), 5);
	memcpy(model + 10000, "hello", 5);
	size = 10005;
	check_all(f, model, size);

	/* 2: written back and evicted, then overwritten in part: the rest of
	 * the page must come back from the backend */
	CHECK_EQ(wbc_fsync(f), 0);
	t_fill(chunk, 8192, 1);
	for (uint64_t off = 20000; off < FSZ; off += 8192)   /* evicts page of step 1 */
		CHECK_EQ(wbc_pwrite(f, chunk, 8192, off), 8192);
	for (uint64_t off = 20000; off < FSZ; off += 8192)
		memcpy(model + off, chunk, 8192);
	size = 20000 + ((FSZ - 20000 + 8191) / 8192) * 8192;
	CHECK_EQ(wbc_pwrite(f, "XY", 2, 10001), 2);
	memcpy(model + 10001, "XY", 2);
	check_all(f, model, size);

	/* 3: unaligned writes straddling page boundaries, every length 1..3 pages */
	uint64_t s = 99;
	for (int i = 0; i < 300; i++) {
		size_t len = 1 + (size_t)(t_rand(&s) % (3 * ps));
		uint64_t off = t_rand(&s) % (FSZ - 3 * ps);
		t_fill(chunk, len, t_rand(&s));
		CHECK_EQ(wbc_pwrite(f, chunk, len, off), len);
		memcpy(model + off, chunk, len);
		if (i % 37 == 0)
			CHECK_EQ(wbc_fsync(f), 0);
	}
	check_all(f, model, size);

	/* 4: a write that ends exactly on, and one byte past, the end */
	CHECK_EQ(wbc_pwrite(f, "E", 1, size), 1);
	model[size] = 'E';
	size++;
	check_all(f, model, size);

	/* 5: truncate to an unaligned size, then extend with a far write: the
	 * bytes between are zeros, not the old data */
	uint64_t cut = 12345;
	CHECK_EQ(wbc_truncate(f, cut), 0);
	memset(model + cut, 0, sizeof(model) - cut);
	CHECK_EQ(wbc_pwrite(f, "Z", 1, cut + 3 * ps + 7), 1);
	model[cut + 3 * ps + 7] = 'Z';
	size = cut + 3 * ps + 8;
	check_all(f, model, size);

	/* 6: everything on the backend, byte for byte */
	CHECK_EQ(wbc_fsync(f), 0);
	if (!strcmp(spec, "mem")) {
		static char b[FSZ + 8192];
		uint64_t bsize;
		CHECK_EQ(t_backend_read(dev, "p", b, sizeof(b), &bsize), 0);
		CHECK_EQ(bsize, size);
		CHECK(!memcmp(b, model, size));
	} else {
		char path[600];
		snprintf(path, sizeof(path), "%s/p", spec + 4);
		int fd = open(path, O_RDONLY);
		CHECK(fd >= 0);
		static char b[FSZ + 8192];
		CHECK_EQ(pread(fd, b, sizeof(b), 0), size);
		CHECK(!memcmp(b, model, size));
		close(fd);
	}
	struct wbc_stats st;
	wbc_stats(c, &st);
	if (mem <= 16 * ps)
		CHECK(st.read_in_bytes > 0 && st.reclaimed_pages > 0);   /* step 2 evicted and read back */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	uint32_t sizes[] = { 512, 4096 };
	for (int i = 0; i < 2; i++) {
		run("mem", sizes[i], 16 * sizes[i]);        /* tiny: eviction everywhere */
		run("mem", sizes[i], 1024 * sizes[i]);
		run(spec, sizes[i], 16 * sizes[i]);
		run(spec, sizes[i], 1024 * sizes[i]);
	}
	t_rmdir(dir);
	printf("partial: ok\n");
	return 0;
}
