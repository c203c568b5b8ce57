/*
 * Cached 4 KiB overwrites, side by side in one run: wbc_pwrite() into
 * its cache (mem device, writeback off, no throttling) against the
 * kernel's pwrite() into its page cache: a file under WBCACHE_BENCH_DIR
 * (default /var/tmp, the disk file system) and, as a second peer, one on
 * tmpfs (/dev/shm, the kernel's cheapest write path).  Each thread owns one file of WS bytes (default
 * 64 MiB, env WS_MB), written once to make it resident, then overwritten
 * at random 4 KiB-aligned offsets for SECONDS (default 2) per round.
 * 1 thread, 2 threads (a file each), and 2 threads sharing one file of
 * twice the size (writers to different pages of one file run in parallel
 * in wbcache); the median of 3 rounds; prints ns/op, ops/s and the
 * ratio.  THREADS=N runs N threads only; ONLY=wbcache|kernel one side.
 */
#include "../tests/testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#define BS 4096

static uint64_t ws_bytes;
static double seconds;
static const char *dir, *shmdir;
static wbc_dev *dev;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

enum peer { WBCACHE, KERNEL, TMPFS };

struct worker {
	pthread_t th;
	int id;
	enum peer kernel;
	int fd;
	wbc_file *f;
	uint64_t span;         /* bytes of the file it writes in */
	pthread_barrier_t *bar;
	uint64_t ops;
	double secs;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	static __thread char buf[BS];
	t_fill(buf, BS, (uint64_t)w->id + 1);
	uint64_t pages = w->span / BS, s = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
	pthread_barrier_wait(w->bar);
	double t0 = now_s(), t;
	uint64_t ops = 0;
	do {
		for (int i = 0; i < 1024; i++) {
			uint64_t off = (t_rand(&s) % pages) * BS;
			ssize_t r = w->kernel ? pwrite(w->fd, buf, BS, (off_t)off)
					      : wbc_pwrite(w->f, buf, BS, off);
			CHECK_EQ(r, BS);
		}
		ops += 1024;
	} while ((t = now_s()) - t0 < seconds);
	w->ops = ops;
	w->secs = t - t0;
	return NULL;
}

/* ops per second of @threads threads, each on its own file */
static double round_ops(enum peer kernel, int threads, bool shared)
{
	struct worker w[2];
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	static char fill[1 << 20];
	uint64_t span = shared ? ws_bytes * (uint64_t)threads : ws_bytes;
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){ .id = i, .kernel = kernel, .bar = &bar, .span = span };
		if (shared && i) {        /* the same open file as thread 0 */
			w[i].fd = w[0].fd;
			w[i].f = w[0].f;
			continue;
		}
		char name[64];
		snprintf(name, sizeof(name), "ow%d", i);
		if (kernel) {
			char *path;
			CHECK(asprintf(&path, "%s/%s", kernel == TMPFS ? shmdir : dir, name) > 0);
			w[i].fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
			CHECK(w[i].fd >= 0);
			free(path);
			for (uint64_t off = 0; off < span; off += sizeof(fill))
				CHECK_EQ(pwrite(w[i].fd, fill, sizeof(fill), (off_t)off), sizeof(fill));
		} else {
			CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT | WBC_O_TRUNC, &w[i].f), 0);
			for (uint64_t off = 0; off < span; off += sizeof(fill))
				CHECK_EQ(wbc_pwrite(w[i].f, fill, sizeof(fill), off), sizeof(fill));
		}
	}
	for (int i = 0; i < threads; i++)
		CHECK_EQ(pthread_create(&w[i].th, NULL, work, &w[i]), 0);
	double total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].th, NULL);
		total += (double)w[i].ops / w[i].secs;
	}
	for (int i = 0; i < threads; i++) {
		if (shared && i)
			continue;
		if (kernel)
			close(w[i].fd);
		else {   /* drop the dirty pages: no writeback in later rounds */
			CHECK_EQ(wbc_truncate(w[i].f, 0), 0);
			CHECK_EQ(wbc_file_close(w[i].f), 0);
		}
	}
	pthread_barrier_destroy(&bar);
	return total;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

int main(void)
{
	const char *e = getenv("WS_MB");
	ws_bytes = (uint64_t)(e ? atoi(e) : 64) << 20;
	e = getenv("SECONDS_PER_ROUND");
	seconds = e ? atof(e) : 2.0;
	e = getenv("WBCACHE_BENCH_DIR");
	dir = e && *e ? e : "/var/tmp";
	char *kdir;
	CHECK(asprintf(&kdir, "%s/wbc-overwrite-XXXXXX", dir) > 0 && mkdtemp(kdir));
	dir = kdir;
	char *sdir = NULL;
	if (!access("/dev/shm", W_OK)) {
		CHECK(asprintf(&sdir, "/dev/shm/wbc-overwrite-XXXXXX") > 0 && mkdtemp(sdir));
		shmdir = sdir;
	}

	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 4 * ws_bytes + (64u << 20);   /* dirty stays under half */
	cfg.dirty_ratio = 100;
	cfg.dirty_background_ratio = 100;
	cfg.dirty_writeback_centisecs = 0;   /* no periodic writeback */
	wbc_cache *cache;
	CHECK_EQ(wbc_cache_open(&cfg, &cache), 0);
	CHECK_EQ(wbc_dev_add(cache, "mem", &dev), 0);

	printf("cached 4 KiB random overwrites, %llu MiB per thread, %.1f s rounds, median of 3\n",
	       (unsigned long long)(ws_bytes >> 20), seconds);
	printf("kernel peers: %s (disk file system), %s (tmpfs)\n", dir, shmdir ? shmdir : "-");
	printf("%-8s %-26s %12s %13s %15s\n", "threads", "writer", "op/s", "ns/op/thread",
	       "wbcache / peer");
	e = getenv("THREADS");
	int tmin = e ? atoi(e) : 1, tmax = e ? atoi(e) : 2;
	e = getenv("ONLY");
	static const char *label[] = { "wbc_pwrite (mem device)", "pwrite, kernel, disk fs",
				       "pwrite, kernel, tmpfs" };
	for (int run = 0; run < 3; run++) {
		int threads = run ? 2 : 1;
		bool shared = run == 2;
		if (threads < tmin || threads > tmax)
			continue;
		double v[3][3] = { { 0 } };
		for (int r = 0; r < 3; r++)
			for (int k = WBCACHE; k <= TMPFS; k++)
				if ((k != TMPFS || shmdir) && (!e || !strcmp(e, k ? "kernel" : "wbcache")))
					v[k][r] = round_ops(k, threads, shared);
		for (int k = WBCACHE; k <= TMPFS; k++) {
			qsort(v[k], 3, sizeof(double), cmp_d);
			if (!v[k][1])
				continue;
			printf("%-8s %-26s %12.0f %13.0f", shared ? "2, 1 file" : threads > 1 ? "2" : "1",
			       label[k], v[k][1],
			       1e9 * threads / v[k][1]);
			if (k != WBCACHE && v[WBCACHE][1])
				printf(" %14.2fx", v[WBCACHE][1] / v[k][1]);
			printf("\n");
		}
	}
	CHECK_EQ(wbc_cache_close(cache), 0);
	t_rmdir(kdir);
	if (sdir)
		t_rmdir(sdir);
	return 0;
}
