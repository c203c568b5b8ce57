/* Small helpers shared by the test programs: exit 0 pass, 1 fail, 77 skip. */
#ifndef WBC_TESTUTIL_H
#define WBC_TESTUTIL_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wbcache.h"

#define T_SKIP 77

/* A sanitizer build (gcc's macros; clang's __has_feature): tests that
 * prove by volume run less there, where races and memory are the point. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define T_SANITIZED 1
#endif
#endif
#ifndef T_SANITIZED
#define T_SANITIZED 0
#endif

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		exit(1); \
	} } while (0)

#define CHECK_EQ(a, b) do { \
	long long _a = (long long)(a), _b = (long long)(b); \
	if (_a != _b) { \
		fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
			__FILE__, __LINE__, #a, _a, #b, _b); \
		exit(1); \
	} } while (0)

/* xorshift64*: deterministic pseudo-random numbers for tests */
static inline uint64_t t_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

static inline void t_fill(char *buf, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(t_rand(&s) >> 56);
}

/* A fresh scratch directory under $TMPDIR-free /var/tmp (disk, so O_DIRECT
 * works); removed by t_rmdir(). */
/* The soft descriptor limit set to @n; false, with a SKIP line, where
 * the hard limit is lower (the caller returns 77). */
static inline bool t_nofile(rlim_t n)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return false;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n) {
		printf("SKIP: hard descriptor limit %llu\n", (unsigned long long)rl.rlim_max);
		return false;
	}
	rl.rlim_cur = n;
	return !setrlimit(RLIMIT_NOFILE, &rl);
}

/* Each file of corpus directory @dir (names beginning with '.' skipped)
 * given to @run; how many.  A missing directory: 0, or a failed check
 * when @must_exist. */
static inline unsigned t_replay_corpus(const char *dir, bool must_exist,
				       void (*run)(const uint8_t *, size_t))
{
	static uint8_t buf[1 << 16];
	unsigned n = 0;
	DIR *d = opendir(dir);
	CHECK(d || !must_exist);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *fp = fopen(path, "rb");
		CHECK(fp);
		size_t len = fread(buf, 1, sizeof(buf), fp);
		fclose(fp);
		run(buf, len);
		n++;
	}
	closedir(d);
	return n;
}

static inline char *t_mkdtemp(void)
{
	const char *base = getenv("WBCACHE_TEST_DIR");
	char *p;
	if (asprintf(&p, "%s/wbc-test-XXXXXX", base && *base ? base : "/var/tmp") < 0)
		exit(1);
	if (!mkdtemp(p)) {
		perror("mkdtemp");
		exit(1);
	}
	return p;
}

static inline int t_rm_entry(const char *path, const struct stat *sb, int type,
			     struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (type == FTW_DP ? rmdir(path) : unlink(path))
		perror(path);
	return 0;   /* best effort: go on */
}

/* Remove @dir and everything under it (no shell: depth first, links
 * removed, never followed), and free the string. */
static inline void t_rmdir(char *dir)
{
	nftw(dir, t_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

/* Write @bytes of a pattern to file @name (in @group, may be NULL) in
 * 64 KiB calls, fsync if asked, close; every call must succeed. */
static inline void t_stream(wbc_dev *dev, wbc_group *group, const char *name,
			    uint64_t bytes, uint64_t seed, int do_fsync)
{
	static _Thread_local char buf[64 << 10];
	wbc_file *f;
	t_fill(buf, sizeof(buf), seed);
	CHECK_EQ(wbc_file_open_group(dev, name, WBC_O_CREAT, group, &f), 0);
	for (uint64_t off = 0; off < bytes; off += sizeof(buf))
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	if (do_fsync)
		CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
}

/* Poll @cond every millisecond for up to 60 s; evaluates to its last value.
 * (A bound on a wait for progress, never a timing assertion.) */
#define T_WAIT_UNTIL(cond) ({ \
	int _ok = 0; \
	for (int _i = 0; _i < 60000 && !(_ok = !!(cond)); _i++) { \
		struct timespec _ts = { 0, 1000 * 1000 }; \
		nanosleep(&_ts, NULL); \
	} \
	_ok; })

static inline struct wbc_config t_config(uint64_t mem, uint32_t page_size)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = mem;
	cfg.page_size = page_size;
	return cfg;
}

/* A "Name: N kB" line of /proc/self/status (VmSize, VmRSS), in KiB. */
static inline long t_status_kb(const char *field)
{
	FILE *fp = fopen("/proc/self/status", "r");
	CHECK(fp);
	char line[256];
	long kb = -1;
	size_t n = strlen(field);
	while (fgets(line, sizeof(line), fp))
		if (!strncmp(line, field, n) && line[n] == ':' &&
		    sscanf(line + n + 1, " %ld kB", &kb) == 1)
			break;
	fclose(fp);
	CHECK(kb >= 0);
	return kb;
}

/* A cache of @mem bytes (4 KiB pages) without periodic writeback: only
 * what the test asks is written back. */
static inline wbc_cache *t_quiet_cache(uint64_t mem)
{
	struct wbc_config cfg = t_config(mem, 4096);
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}
/*
 * A sampler thread (pthread_create(..., t_limit_watch, &w)): every
 * millisecond while w->running is non-zero, dirty + writeback of w->c
 * against its limit plus w->slack (each sample above it is printed and
 * counted in violations) and against freerun.
 */
struct t_limit_watch {
	wbc_cache *c;
	uint64_t slack;
	atomic_int *running;
	atomic_long violations, samples, over_freerun;
};

static inline void *t_limit_watch(void *arg)
{
	struct t_limit_watch *w = arg;
	while (atomic_load(w->running) > 0) {
		struct wbc_stats st;
		wbc_stats(w->c, &st);
		uint64_t d = st.dirty_bytes + st.writeback_bytes;
		if (d > st.limit_bytes + w->slack) {
			fprintf(stderr, "dirty+wb %llu > limit %llu + slack %llu\n",
				(unsigned long long)d, (unsigned long long)st.limit_bytes,
				(unsigned long long)w->slack);
			atomic_fetch_add(&w->violations, 1);
		}
		if (d > st.freerun_bytes)
			atomic_fetch_add(&w->over_freerun, 1);
		atomic_fetch_add(&w->samples, 1);
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

#endif
