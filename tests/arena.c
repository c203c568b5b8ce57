/*
 * The page arena's address space and memory (cache.c):
 *   1. 2,000 open/write/close cycles of small caches whose arena or page
 *      descriptor array is not a whole number of system pages (24 and 25
 *      pages of 512 bytes: the fuzzer's cache) leave the process's
 *      address space (VmSize) and its count of mappings where they were
 *      after the first cycles.  Each open maps 2 MiB of slack for the
 *      alignment and must give all of it back.
 *   2. An open refused for a size beyond the machine's memory returns
 *      -ENOMEM and commits no memory on the way: the peak resident size
 *      (VmHWM) does not grow.  (It used to map and populate the page
 *      descriptors of the whole size first: 1 GiB for 128 GiB.)
 */
#include "testutil.h"

#define CYCLES 2000
#define WARMUP 20
/* Growth allowed over CYCLES (the C library's heap and thread caches may
 * settle a little later than WARMUP, and ThreadSanitizer's runtime splits
 * its own mappings: 20 more over a run); the leak was 2 MiB or more and
 * about one mapping a cycle (4 GiB and 1,483 mappings over the run). */
#define SLACK_KIB (32u << 10)
#define SLACK_MAPS 128
/* A refused open may touch this much (the test's own bookkeeping). */
#define REFUSED_KIB (16u << 10)

/* AddressSanitizer keeps freed memory in a quarantine (256 MiB by
 * default) and maps more for new allocations meanwhile: the address space
 * would grow with the test's own mallocs.  Without the quarantine it
 * counts the engine's mappings alone. */
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=0";
}
#endif

/* A "Name:   N kB" line of /proc/self/status, in KiB. */
static long status_kib(const char *name)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(name);
	CHECK(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	CHECK(v >= 0);
	return v;
}

static long count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	long n = 0;
	int ch;
	CHECK(f);
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

static void cycle(unsigned i)
{
	struct wbc_config cfg = t_config((i % 2 ? 25 : 24) * 512, 512);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	char buf[3000];
	t_fill(buf, sizeof(buf), i);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 100), sizeof(buf));
	CHECK_EQ(wbc_cache_close(c), 0);
}

int main(void)
{
	long vm0 = 0, maps0 = 0;
	for (unsigned i = 0; i < CYCLES; i++) {
		if (i == WARMUP) {
			vm0 = status_kib("VmSize");
			maps0 = count_maps();
		}
		cycle(i);
	}
	long vm1 = status_kib("VmSize"), maps1 = count_maps();
	printf("%u open/close cycles: VmSize %ld -> %ld KiB, mappings %ld -> %ld\n",
	       CYCLES - WARMUP, vm0, vm1, maps0, maps1);
	CHECK(vm1 - vm0 < SLACK_KIB);
	CHECK(maps1 - maps0 < SLACK_MAPS);

	/* 2. four times the machine's memory (at least 128 GiB) */
	long phys = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (phys <= 0 || psz <= 0) {
		printf("SKIP: the machine's memory is unknown\n");
		return T_SKIP;
	}
	uint64_t ram = (uint64_t)phys * (uint64_t)psz;
	uint64_t big = ram > (UINT64_MAX >> 3) ? UINT64_MAX : (4 * ram > (128ull << 30) ? 4 * ram : 128ull << 30);
	struct wbc_config cfg = t_config(big, 4096);
	wbc_cache *c = NULL;
	long hwm0 = status_kib("VmHWM");
	CHECK_EQ(wbc_cache_open(&cfg, &c), -ENOMEM);
	long hwm1 = status_kib("VmHWM");
	printf("refused --mem %llu GiB: peak RSS %ld -> %ld KiB\n",
	       (unsigned long long)(big >> 30), hwm0, hwm1);
	CHECK(hwm1 - hwm0 < REFUSED_KIB);
	/* a size just under the limits of size_t, and the largest one */
	cfg.mem_bytes = UINT64_MAX;
	CHECK_EQ(wbc_cache_open(&cfg, &c), -ENOMEM);
	cfg.page_size = 512;
	CHECK_EQ(wbc_cache_open(&cfg, &c), -ENOMEM);
	CHECK(status_kib("VmHWM") - hwm0 < REFUSED_KIB);
	printf("arena: ok\n");
	return 0;
}
