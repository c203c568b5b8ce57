/*
 * Dirty-file tracking at scale, two benchmarks in one program:
 *
 * 1. Cost curve.  N files dirtied evenly over 60 s; the time to queue
 *    the expired half (dirtied more than 30 s ago) for writeback, at
 *    N = 10k, 100k, 1M: wbcache's time buckets (queue_io_locked, all
 *    calls) side by side with one sorted list walked under a mutex (the
 *    kernel's b_dirty before time buckets).  Caches cooled before each
 *    measurement; best of 9 each.
 *
 * 2. fs_mark-style creation.  FILES (default 1,000,000) files of 4 KiB
 *    made by 2 threads (create, write, close) on a model device that
 *    keeps no data, like null_blk, and is fast enough (4 GB/s, 1024 deep:
 *    the Linux NVMe driver's default queue depth) that the writers, not
 *    the device, set the pace: with a slower device the throttle rightly
 *    holds writers to the device's speed, and the comparison would measure
 *    the device.  (128 deep is not enough on 2 CPUs: its queue holds
 *    128 us of work, less than the time the model's and the flusher's
 *    threads wait for a CPU beside two creators, so it drains, and the
 *    throttle pauses the writers; the report shows those pauses.  QD=
 *    sets the depth.)  RUNS (default 5) pairs, each
 *    writeback held off (no background threshold in reach, periodic
 *    writeback off) then running at the default ratios.  Prints files/s
 *    of each and the median ratio, the writeback threads' CPU per file,
 *    throttle pauses and idle CPU, the dirty-list lock's hold times (p99,
 *    max, histogram), and the memory per tracked dirty file (growth of the
 *    resident set while the files were made, writeback held off, divided
 *    by the files; the page arena is resident before).
 *
 *    Then the same with one creator (unless THREADS= sets the count): a
 *    core is left to the writeback threads, so the ratio shows what
 *    running beside them costs a create, apart from sharing the CPUs.
 *
 *    `manyfiles curve`, `manyfiles create`, `manyfiles held`, `manyfiles
 *    running`: one part only.  THREADS= creators (2), FILES=, RUNS=, QD=.
 */
#include "../tests/testutil.h"
#include "internal.h"
#include "backend/backends.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

/* fast enough that the writers, not the device, set the pace (above) */
/* (QD= sets the queue depth) */
static char model_spec[64] = "model:bw=4G,qd=1024,discard=1";
#define MODEL model_spec

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ */
/* 1. cost curve                                                        */

/* Evict the CPU caches: write twice the last-level cache (this VM
 * reports 300 MiB of L3; at least 64 MiB, at most 1 GiB), so that both
 * designs, at every N, start from memory as the flusher finds them after
 * the writers ran (a smaller sweep left a small N's lists in the L3 and a
 * large N's, which the filing itself pushed out, in memory). */
static void cool_caches(void)
{
	static char *junk;
	static size_t n;
	if (!junk) {
		long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
		n = WBC_MIN(WBC_MAX(l3 > 0 ? 2 * (size_t)l3 : 0, (size_t)64 << 20), (size_t)1 << 30);
		CHECK((junk = malloc(n)));
	}
	for (size_t i = 0; i < n; i += 64)
		junk[i]++;
}

struct lnode {
	struct list_head link;
	uint64_t when;
};

static double list_queue_us(struct lnode *nodes, size_t n, uint64_t t)
{
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct list_head dirty, io;
	list_init(&dirty);
	list_init(&io);
	for (size_t i = 0; i < n; i++)
		list_add_tail(&nodes[i].link, &dirty);
	cool_caches();
	double t0 = now_s();
	pthread_mutex_lock(&lock);
	while (!list_empty(&dirty)) {
		struct lnode *x = container_of(dirty.next, struct lnode, link);
		if (x->when > t)
			break;
		list_move_tail(&x->link, &io);
	}
	pthread_mutex_unlock(&lock);
	return (now_s() - t0) * 1e6;
}

static double bucket_queue_us(struct wbc_dev *dev, struct inode *inos, size_t n, uint64_t base,
			      uint64_t span, uint64_t t, double *max_hold_us, unsigned *calls)
{
	dev_list_lock(dev);
	for (size_t i = 0; i < n; i++) {
		inos[i].dev = dev;
		inos[i].wb_next = NULL;
		inos[i].state = I_DIRTY;
		dirty_add_locked(dev, &inos[i], base + span * i / n);
	}
	dev_list_unlock(dev);
	double total = 0;
	cool_caches();
	*max_hold_us = 0;
	*calls = 0;
	bool more = true;
	while (more) {
		double t0 = now_s();
		pthread_mutex_lock(&dev->list_lock);
		more = queue_io_locked(dev, t, UINT64_MAX);
		pthread_mutex_unlock(&dev->list_lock);
		double us = (now_s() - t0) * 1e6;
		total += us;
		*max_hold_us = WBC_MAX(*max_hold_us, us);
		(*calls)++;
	}
	/* take everything off the lists again */
	struct dirty_batch b;
	struct inode *ino;
	dirty_batch_init(&b);
	while (dirty_take(dev, &b, UINT64_MAX, UINT64_MAX, NULL))
		while ((ino = dirty_next(dev, &b)))
			ino->state = 0;
	return total;
}

static void cost_curve(void)
{
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	const uint64_t sec = 1000000000ull, base = 1000 * sec, span = 60 * sec;
	printf("queueing the expired half of N dirty files (dirtied over 60 s, expire 30 s), cold caches, best of 9\n");
	printf("%10s %18s %8s %14s %18s %8s\n", "files", "buckets: total us", "calls",
	       "max hold us", "sorted list: us", "list/bkt");
	double first_b = 0, first_l = 0;
	for (size_t n = 10000; n <= 1000000; n *= 10) {
		struct inode *inos = aligned_alloc(64, n * sizeof(*inos));   /* laid out by line */
		struct lnode *nodes = calloc(n, sizeof(*nodes));
		CHECK(inos && nodes);
		memset(inos, 0, n * sizeof(*inos));
		for (size_t i = 0; i < n; i++)
			nodes[i].when = base + span * i / n;
		double bb = 1e18, lb = 1e18, hold = 0;
		unsigned calls = 0;
		for (int r = 0; r < 9; r++) {
			double h;
			double b = bucket_queue_us(dev, inos, n, base, span, base + span / 2, &h, &calls);
			if (b < bb) {
				bb = b;
				hold = h;
			}
			lb = WBC_MIN(lb, list_queue_us(nodes, n, base + span / 2));
		}
		printf("%10zu %18.1f %8u %14.1f %18.1f %7.0fx\n", n, bb, calls, hold, lb, lb / bb);
		if (n == 10000) {
			first_b = bb;
			first_l = lb;
		} else if (n == 1000000) {
			printf("growth 10k -> 1M: buckets %.2fx, sorted list %.0fx\n", bb / first_b,
			       lb / first_l);
		}
		free(inos);
		free(nodes);
	}
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* ------------------------------------------------------------------ */
/* 2. fs_mark-style creation                                            */

static wbc_dev *cdev;
static uint64_t per_thread;
static int nthreads = 2;             /* THREADS */
static double creator_cpu[8];

static void *creator(void *arg)
{
	int id = (int)(intptr_t)arg;
	char buf[4096], name[64];
	pthread_setname_np(pthread_self(), "creator");
	t_fill(buf, sizeof(buf), (uint64_t)id + 1);
	for (uint64_t i = 0; i < per_thread; i++) {
		wbc_file *f;
		snprintf(name, sizeof(name), "t%d-%08llu", id, (unsigned long long)i);
		CHECK_EQ(wbc_file_open(cdev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
		CHECK_EQ(wbc_file_close(f), 0);
	}
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	creator_cpu[id] = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	return NULL;
}

/* CPU seconds of this process's threads named @comm (wbc-flush, ...). */
static double threads_cpu_s(const char *comm)
{
	double total = 0;
	char path[300], buf[512];
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		char *open = strchr(buf, '('), *close = strrchr(buf, ')');
		if (!open || !close || (size_t)(close - open - 1) != strlen(comm) ||
		    strncmp(open + 1, comm, strlen(comm)))
			continue;
		unsigned long ut, st;
		/* fields after the name: state ppid pgrp session tty tpgid flags
		 * minflt cminflt majflt cmajflt utime stime */
		if (sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			   &ut, &st) == 2)
			total += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	}
	if (d)
		closedir(d);
	return total;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

struct create_result {
	double rate, cpu_rate, p99_us, p9999_us, max_us, bytes_per_file, written_back_mb;
	double max_cpu_us, p99_cpu_us;
	double wb_cpu_us_per_file, flush_us, paused_s, idle_pct;
	uint64_t over, holds, waits, retries;
	long nivcsw;
};

static struct create_result create_run(uint64_t files, bool writeback)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = files * 4096 + files * 4096 / 4 + (256u << 20);
	if (!writeback) {
		cfg.dirty_bytes = cfg.mem_bytes;
		cfg.dirty_background_bytes = cfg.mem_bytes - (64u << 20);
		cfg.dirty_writeback_centisecs = 0;
	}
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, MODEL, &cdev), 0);
	per_thread = files / (uint64_t)nthreads;
	long rss0 = rss_kb();
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	pthread_t th[8];
	double t0 = now_s();
	for (int i = 0; i < nthreads; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, creator, (void *)(intptr_t)i), 0);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	double secs = now_s() - t0;
	getrusage(RUSAGE_SELF, &ru1);
	double flush_cpu = threads_cpu_s("wbc-flush"), model_cpu = threads_cpu_s("wbc-model");
	double wb_cpu = flush_cpu + model_cpu;
	struct wbc_stats cs;
	CHECK_EQ(wbc_stats(c, &cs), 0);
	long rss1 = rss_kb();
	struct wbc_dev_stats ds;
	CHECK_EQ(wbc_dev_stats(cdev, &ds), 0);
	struct wbc_dev_debug dd;
	CHECK_EQ(wbc_dev_debug(cdev, &dd), 0);
	uint64_t made = per_thread * (uint64_t)nthreads;
	double creators_cpu = 0;
	for (int i = 0; i < nthreads; i++)
		creators_cpu += creator_cpu[i];
	struct create_result r = { .rate = (double)made / secs };
	r.cpu_rate = (double)made / creators_cpu;
	r.p99_us = (double)wbc_lock_hold_percentile(&dd, 99) / 1e3;
	r.p9999_us = (double)wbc_lock_hold_percentile(&dd, 99.99) / 1e3;
	uint64_t over = 0;
	for (int b = 18; b < 32; b++)       /* entries from 2^17 ns = 131 us up */
		over += dd.list_lock_hold_hist[b];
	r.over = over;
	r.holds = dd.list_lock_holds;
	r.max_us = (double)dd.list_lock_max_hold_ns / 1e3;
	r.max_cpu_us = (double)dd.list_lock_max_cpu_ns / 1e3;
	r.waits = dd.list_lock_waits;
	r.retries = dd.inbox_push_retries;
	r.p99_cpu_us = (double)wbc_lock_cpu_percentile(&dd, 99) / 1e3;
	r.bytes_per_file = (double)(rss1 - rss0) * 1024 / (double)made;
	r.written_back_mb = (double)ds.written_back_bytes / 1e6;
	r.nivcsw = ru1.ru_nivcsw - ru0.ru_nivcsw;
	double files_written = (double)ds.written_back_bytes / 4096;
	r.wb_cpu_us_per_file = files_written > 0 ? wb_cpu * 1e6 / files_written : 0;
	r.flush_us = files_written > 0 ? flush_cpu * 1e6 / files_written : 0;
	r.paused_s = (double)cs.paused_ns / 1e9;
	double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
			      ru0.ru_stime.tv_sec) +
		     (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
			      ru0.ru_stime.tv_usec) / 1e6;
	r.idle_pct = 100.0 * (1.0 - cpu / (secs * (double)WBC_MIN(sysconf(_SC_NPROCESSORS_ONLN), 4)));
	printf("  writeback %-8s %9.0f files/s, %7.0f files per creator CPU-second  (%.1f s; "
	       "%.0f MB written back meanwhile; dirty files %llu)\n",
	       writeback ? "running" : "held off", r.rate, r.cpu_rate, secs, r.written_back_mb,
	       (unsigned long long)ds.files_dirty);
	printf("    list lock: %llu holds, p99 <= %.1f us, p99.99 <= %.1f us, max %.1f us, "
	       "%llu over 131 us; %ld involuntary context switches\n",
	       (unsigned long long)r.holds, r.p99_us, r.p9999_us, r.max_us,
	       (unsigned long long)r.over, r.nivcsw);
	printf("    holds by time:");
	for (int b = 0; b < 32; b++)
		if (dd.list_lock_hold_hist[b])
			printf(" <%lluns:%llu", 1ull << b, (unsigned long long)dd.list_lock_hold_hist[b]);
	printf("\n    the same holds on CPU (the holder's CPU time): p99 <= %.1f us, max %.1f us:",
	       r.p99_cpu_us, r.max_cpu_us);
	for (int b = 0; b < 32; b++)
		if (dd.list_lock_cpu_hist[b])
			printf(" <%lluns:%llu", 1ull << b, (unsigned long long)dd.list_lock_cpu_hist[b]);
	printf("\n");
	printf("    waits: %llu takes of the list lock found it held; writers take no lock "
	       "(%llu lock-free inbox pushes lost a race and tried again)\n",
	       (unsigned long long)r.waits, (unsigned long long)r.retries);
	printf("    writeback threads: %.2f us CPU per file written back (flusher %.2f, device "
	       "model and completions %.2f); writers paused %.2f s (throttle); CPUs idle %.0f%%\n",
	       r.wb_cpu_us_per_file, r.flush_us, r.wb_cpu_us_per_file - r.flush_us, r.paused_s,
	       r.idle_pct);
	CHECK_EQ(wbc_cache_close(c), 0);
	return r;
}

static double median(double *v, int n)
{
	double t[9];
	memcpy(t, v, (size_t)n * sizeof(*t));
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
			double x = t[j];
			t[j] = t[j - 1];
			t[j - 1] = x;
		}
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* RUNS alternating pairs (held off, running) with @nthreads creators, so
 * that both see the same machine weather; prints the medians. */
static void create_pairs(uint64_t files, int runs)
{
	printf("\nfs_mark-style: %llu files of 4 KiB, %d thread%s, %s\n", (unsigned long long)files,
	       nthreads, nthreads > 1 ? "s" : "", MODEL);
	double ratio[9], cpu_ratio[9], off_rate[9], on_rate[9], max_off = 0, max_on = 0;
	double max_on_cpu = 0;
	uint64_t waits = 0, retries = 0;
	double bytes_per_file = 0;
	for (int i = 0; i < runs; i++) {
		struct create_result off = create_run(files, false);
		struct create_result on = create_run(files, true);
		ratio[i] = on.rate / off.rate;
		cpu_ratio[i] = on.cpu_rate / off.cpu_rate;
		off_rate[i] = off.rate;
		on_rate[i] = on.rate;
		max_off = WBC_MAX(max_off, off.max_us);
		max_on = WBC_MAX(max_on, on.max_us);
		max_on_cpu = WBC_MAX(max_on_cpu, on.max_cpu_us);
		waits += on.waits + off.waits;
		retries += on.retries + off.retries;
		if (!i)
			bytes_per_file = off.bytes_per_file;
		printf("  pair %d: running / held off %.2fx\n", i + 1, ratio[i]);
	}
	printf("%d thread%s: create rate (median of %d pairs): held off %.0f files/s, running %.0f "
	       "files/s\n", nthreads, nthreads > 1 ? "s" : "", runs, median(off_rate, runs),
	       median(on_rate, runs));
	printf("%d thread%s: create rate, writeback running / held off: %.2fx (wall clock, median "
	       "pair), %.2fx (per creator CPU-second: the cost of a create)\n", nthreads,
	       nthreads > 1 ? "s" : "", median(ratio, runs), median(cpu_ratio, runs));
	printf("max dirty-list lock hold: %.1f us (held off), %.1f us (running); on CPU %.1f us "
	       "(running); takes that waited for it: %llu; writers' inbox pushes retried: %llu\n",
	       max_off, max_on, max_on_cpu, (unsigned long long)waits, (unsigned long long)retries);
	/* resident-set growth is only the files' memory in a fresh process
	 * (later runs reuse the heap the first one grew) */
	static bool first = true;
	if (first)
		printf("memory per tracked dirty file: %.0f bytes (engine inode with its name, page "
		       "index, handle slot, and the mem backend's object)\n", bytes_per_file);
	first = false;
}

int main(int argc, char **argv)
{
	const char *th = getenv("THREADS");
	if (th && (atoi(th) < 1 || atoi(th) > 8)) {
		fprintf(stderr, "manyfiles: THREADS must be 1 to 8\n");
		return 2;
	}
	nthreads = th ? atoi(th) : 2;
	const char *qd = getenv("QD");
	if (qd) {
		if (atoi(qd) < 1 || atoi(qd) > 65536) {
			fprintf(stderr, "manyfiles: QD must be 1 to 65536\n");
			return 2;
		}
		snprintf(model_spec, sizeof(model_spec), "model:bw=4G,qd=%d,discard=1", atoi(qd));
	}
	const char *e = getenv("FILES");
	uint64_t files = e ? strtoull(e, NULL, 0) : 1000000;
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || !strcmp(only, "curve"))
		cost_curve();
	if (!strcmp(only, "curve"))
		return 0;
	if (!strcmp(only, "running") || !strcmp(only, "held")) {   /* one phase, for profiling */
		printf("\nfs_mark-style: %llu files of 4 KiB, %d thread%s, %s\n",
		       (unsigned long long)files, nthreads, nthreads > 1 ? "s" : "", MODEL);
		create_run(files, !strcmp(only, "running"));
		return 0;
	}
	const char *r = getenv("RUNS");
	int runs = r ? atoi(r) : 5;
	runs = runs < 1 ? 1 : runs > 9 ? 9 : runs;
	create_pairs(files, runs);
	/* without THREADS, one creator too: a core is then left to the
	 * writeback threads, and the ratio shows what running beside them
	 * costs a create */
	if (!th) {
		nthreads = 1;
		create_pairs(files, runs);
	}
	printf("struct inode: %zu bytes\n", sizeof(struct inode));
	return 0;
}
