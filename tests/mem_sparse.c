/*
 * The mem backend's files are sparse: memory for the bytes written, not
 * for the file's size.
 *   1. One 4 KiB page written at 2 GiB and written back: the process
 *      grows by far less than 2 GiB (it grew by 2 GiB: the gap was zeroed
 *      on the heap; `run randwrite --dev mem --file-size 128G` ended in
 *      the OOM killer).
 *   2. What the backend holds, read with O_DIRECT (past the cache): the
 *      page, zeros before it; a file that grew from the heap to its own
 *      mapping keeps its first bytes; a cut then an extension reads zeros
 *      past the cut, also inside the page the cut ends in.
 */
#include "testutil.h"

#include <stdlib.h>

#define GiB (1ull << 30)

/* The backend's bytes [off, off + len) of @name (a direct open). */
static void backend_read(wbc_dev *dev, const char *name, char *buf, size_t len, uint64_t off)
{
	wbc_file *d;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_DIRECT, &d), 0);
	CHECK_EQ(wbc_pread(d, buf, len, off), (ssize_t)len);
	CHECK_EQ(wbc_file_close(d), 0);
}

static bool all_zero(const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

int main(void)
{
	struct wbc_config cfg = t_config(4 << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	static char page[4096], back[1 << 20];
	t_fill(page, sizeof(page), 9);

	/* 1 */
	long before = t_status_kb("VmRSS");
	CHECK_EQ(wbc_file_open(dev, "far", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, page, sizeof(page), 2 * GiB), (ssize_t)sizeof(page));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	long grew = t_status_kb("VmRSS") - before;
	printf("a page at 2 GiB: the process grew by %ld KiB (under 65536 wanted)\n", grew);
	CHECK(grew < 65536);

	/* 2 */
	backend_read(dev, "far", back, sizeof(page), 2 * GiB);
	CHECK(!memcmp(back, page, sizeof(page)));
	backend_read(dev, "far", back, sizeof(back), 2 * GiB - sizeof(back));
	CHECK(all_zero(back, sizeof(back)));

	/* from the heap (512 KiB) to a mapping (past 1 MiB) */
	static char big[512 << 10];
	t_fill(big, sizeof(big), 4);
	CHECK_EQ(wbc_file_open(dev, "grow", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, big, sizeof(big), 0), (ssize_t)sizeof(big));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_pwrite(f, page, sizeof(page), 3 << 20), (ssize_t)sizeof(page));
	CHECK_EQ(wbc_pwrite(f, big, sizeof(big), 1 << 20), (ssize_t)sizeof(big));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	backend_read(dev, "grow", back, sizeof(big), 0);
	CHECK(!memcmp(back, big, sizeof(big)));
	backend_read(dev, "grow", back, sizeof(back), 2 << 20);
	CHECK(all_zero(back, sizeof(back)));
	/* cut inside a page (1.25 MiB + 10: within the data written at
	 * 1 MiB), then extend: zeros from the cut on */
	uint64_t cut = (1 << 20) + (256 << 10) + 10;
	CHECK_EQ(wbc_file_open(dev, "grow", 0, &f), 0);
	CHECK_EQ(wbc_truncate(f, cut), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_truncate(f, 4 << 20), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	backend_read(dev, "grow", back, sizeof(back), 1 << 20);
	CHECK(!memcmp(back, big, cut - (1 << 20)));
	CHECK(all_zero(back + (cut - (1 << 20)), sizeof(back) - (cut - (1 << 20))));
	backend_read(dev, "grow", back, sizeof(back), 2 << 20);
	CHECK(all_zero(back, sizeof(back)));
	backend_read(dev, "grow", back, sizeof(back), 3 << 20);
	CHECK(all_zero(back, sizeof(back)));

	CHECK_EQ(wbc_cache_close(c), 0);
	printf("mem_sparse: ok\n");
	return 0;
}
