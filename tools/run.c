/*
 * wbcache run WORKLOAD: drive a workload through the engine and report.
 *
 * Threads: W workers (the workload), one sampler (every 100 ms: the
 * timeline, and the live status line on a terminal), the main thread
 * (setup, join, report).  Workers record their own bytes and pauses; the
 * sampler only reads the engine's counters.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run.h"
#include "wbcache_backend.h"

#define DEFAULT_DIR "/var/tmp/wbcache"
static const char default_dir[] = DEFAULT_DIR;   /* o->dir when none was given */
#define SAMPLE_NS (100ull * 1000 * 1000)
#define LAT0 4096u             /* --lat-log records in a writer's first chunk */
#define LAT_CHUNKS 40
#define MiB (1024.0 * 1024.0)

enum workload { WL_DD, WL_RANDWRITE, WL_FSMARK, WL_JBOD, WL_RANDRW };
#define WL_NR 5
static const char *wl_names[] = { "dd", "randwrite", "fsmark", "jbod", "randrw" };
/* randwrite, jbod and randrw write into laid-out files at random offsets */
#define WL_RANDOM(wl) ((wl) == WL_RANDWRITE || (wl) == WL_JBOD || (wl) == WL_RANDRW)

struct opts {
	enum workload wl;
	bool demo;
	const char *dir;
	bool dir_given;             /* --dir on the command line */
	const char *devs[RUN_MAX_DEVS];
	unsigned ndev;
	unsigned threads;          /* dd, randwrite, fsmark: total; jbod: per device */
	uint64_t size;             /* dd: total bytes */
	double time_s;             /* stop after (0: by size/files) */
	uint64_t bs;
	uint64_t file_size;
	uint64_t files;            /* fsmark: per thread */
	bool fsync_end;
	bool keep, quiet;
	bool no_layout;            /* randwrite, jbod, randrw: write into an empty file */
	uint64_t fsync_every;      /* dd, randwrite, randrw: fdatasync after each this many bytes */
	double deadline_s;         /* give up after this long, final fsync included (0: never) */
	unsigned rwmix;            /* randrw: percent of operations that write */
	const char *trace, *plot, *json;
	/* the demonstration's DIR/run-trace.csv and DIR/run-plot.svg: DIR
	 * (by default /var/tmp/wbcache, a name anyone can take first) may be
	 * another user's, whose symbolic link there made root's run write
	 * over the file it points to: not followed */
	bool trace_nofollow, plot_nofollow;
	const char *lat_log;       /* --lat-log: every write's latency */
	struct wbc_config cfg;
};

struct worker {
	pthread_t th;
	unsigned id;
	wbc_dev *dev;
	unsigned dev_idx;
	/* a device of one file (file:, nbd, stack:): its workers write the
	 * file "" at base + their offsets, each its own region */
	bool one_file;
	uint64_t base;
	uint64_t bytes;
	uint64_t ops;
	uint64_t reads, read_bytes;  /* randrw */
	double secs;
	int err;
	/* what failed (err): the operation and the file, for the message */
	const char *err_op;
	bool err_on_file;          /* err_op was on a file: err_file, or the one file */
	char err_file[96];
	uint64_t *pauses;          /* ns */
	uint64_t *fsyncs;          /* ns: latencies of --fsync-every's fdatasyncs */
	size_t nfsyncs, fcap;
	size_t npauses, cap;
	/* --lat-log: chunk k holds LAT0 << k records and never moves, and
	 * nlats is published after each record, so that a run given up at
	 * its --deadline reads them while the writer may still add more */
	struct lat { uint64_t t_ns, lat_ns, bytes; } *lats[LAT_CHUNKS];
	atomic_size_t nlats;
	/* randrw: the layout's handle of its file, held until the writer
	 * has opened its own, so that the laid-out pages stay cached (the
	 * last close of a file drops its clean pages: every read went to
	 * the device until the cache warmed, seconds at 1 ms a read) */
	wbc_file *warm;
};

static struct run {
	struct opts o;
	wbc_cache *cache;
	wbc_dev *dev[RUN_MAX_DEVS];
	struct worker *w;
	unsigned nw;
	atomic_bool stop;
	double t0;
	struct wbc_stats st0;       /* the cache's counters at t0 */
	struct sample *s;
	size_t ns, scap;
	atomic_uint workers_done;
	atomic_ullong reads_done;   /* of ops_done, the reads (randrw) */
	uint64_t last_written[RUN_MAX_DEVS];
	uint64_t written0[RUN_MAX_DEVS];    /* written back before the writers (the layout) */
	/* operations done (writes, reads, files), for the timeline's rate */
	atomic_uint_fast64_t ops_done, bytes_done;
	uint64_t last_ops;
	atomic_bool abandon;        /* --deadline passed: the sampler stops */
	bool out_err;               /* an output file could not be written */
	int json_fd;                /* --json -: the caller's stdout (the report goes to stderr) */
	/* SIGINT or SIGTERM: the run stops as at its --time, reports and
	 * removes its files, then exits 130 (a second one ends it at once) */
	atomic_bool interrupted;
	/* dirty + writeback bytes at the last look (the sampler's, or before
	 * the close): what an interrupt says is still to be written back */
	atomic_uint_fast64_t dirty_now;
	bool status_tty;            /* the live status line is drawn on stderr */
	bool under[RUN_MAX_DEVS];   /* a stack: device stands on it: no writer's */
	int out_errno;              /* the first error writing the report */
	/* the writers' start: each fills its buffer, says it is ready and
	 * waits for go, so that the clock (t0) starts after every fill */
	unsigned ready;
	bool go;
	uint64_t last_hold_hist[RUN_MAX_DEVS][32];
	/* the length of the shallowest directory of DIR this run made (0:
	 * none): a refused run removes them */
	size_t dir_made;
} R;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t xrand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

static void note_pause(struct worker *w, struct wbc_thread_stats *prev)
{
	struct wbc_thread_stats st;
	wbc_thread_stats(&st);
	if (st.pauses == prev->pauses)
		return;
	/* a record per pause: a call that paused k times (a large --bs:
	 * a 256 MiB write paused hundreds of times and was counted as one
	 * pause of its last 10 ms) gives k records, whose count, sum
	 * (paused_ns) and maximum are the call's: its last pause, its
	 * longest where that is a new maximum, the rest at their mean */
	uint64_t k = st.pauses - prev->pauses, sum = st.paused_ns - prev->paused_ns;
	uint64_t last = st.last_pause_ns < sum ? st.last_pause_ns : sum;
	uint64_t mx = k > 1 && st.max_pause_ns > prev->max_pause_ns && st.max_pause_ns > last &&
		      st.max_pause_ns <= sum - last ? st.max_pause_ns : 0;
	uint64_t nrest = k - 1 - (mx ? 1 : 0), rest = sum - last - mx;
	if (w->npauses + k > w->cap) {
		size_t ncap = w->cap ? w->cap : 1024;
		while (ncap < w->npauses + k)
			ncap *= 2;
		uint64_t *p = realloc(w->pauses, ncap * sizeof(*p));
		if (!p)
			return;
		w->pauses = p;
		w->cap = ncap;
	}
	for (uint64_t i = 0; i < nrest; i++)
		w->pauses[w->npauses++] = rest / nrest;
	if (mx)
		w->pauses[w->npauses++] = mx;
	w->pauses[w->npauses++] = last;
	*prev = st;
}

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

/* @v in decimal at @p; returns the end (async-signal-safe, no stdio) */
static char *put_u64(char *p, uint64_t v)
{
	char tmp[24];
	int n = 0;
	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

/* The first SIGINT or SIGTERM: the run stops and writes back what is
 * dirty, which may take minutes on a slow device; one line says so at once
 * (write(2): stdio is not for a handler).  SA_RESETHAND: the same signal
 * again kills the process, leaving its data files and no report. */
static void on_interrupt(int sig)
{
	int saved = errno;
	if (!atomic_exchange(&R.interrupted, true)) {
		char msg[256], *p = msg;
		uint64_t mib = (atomic_load(&R.dirty_now) + (1u << 20) - 1) >> 20;
		const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
		p = put_str(p, R.status_tty ? "\nwbcache: " : "wbcache: ");
		p = put_str(p, name);
		p = put_str(p, ": stopping; writing back ");
		p = put_u64(p, mib);
		p = put_str(p, " MiB before exiting (another ");
		p = put_str(p, name);
		p = put_str(p, " ends it at once, leaving its data files and no report)\n");
		ssize_t r = write(STDERR_FILENO, msg, (size_t)(p - msg));
		(void)r;
	}
	atomic_store(&R.stop, true);
	errno = saved;
}

/* fflush(stdout), the first error kept for the message at the end (a
 * later flush with nothing to write says nothing of why) */
static void flush_report(void)
{
	if (fflush(stdout) && !R.out_errno)
		R.out_errno = errno ? errno : EIO;
}

/* What is dirty or in writeback now: for an interrupt's message. */
static void note_dirty(void)
{
	struct wbc_stats st;
	wbc_stats(R.cache, &st);
	atomic_store(&R.dirty_now, st.dirty_bytes + st.writeback_bytes);
}

/* dd: writer @id's share of --size (the last one takes what does not
 * divide) */
static uint64_t dd_share(unsigned id)
{
	return R.o.size / R.nw + (id == R.nw - 1 ? R.o.size % R.nw : 0);
}

static bool time_up(void)
{
	return atomic_load(&R.stop) || (R.o.time_s > 0 && now_s() - R.t0 >= R.o.time_s);
}

static void fname(char *buf, size_t len, const char *kind, unsigned a, uint64_t b)
{
	snprintf(buf, len, "%s.%d.%u.%llu", kind, (int)getpid(), a, (unsigned long long)b);
}

/* Does @dev hold a single file, named "" (WBC_BACKEND_ONE_FILE: file:PATH, an
 * NBD export, a stacked device)? */
static bool dev_one_file(wbc_dev *dev)
{
	const struct wbc_backend_ops *ops;
	void *ctx = wbc_dev_backend(dev, &ops);
	struct wbc_backend_caps caps;
	memset(&caps, 0, sizeof(caps));
	ops->caps(ctx, &caps);
	return caps.flags & WBC_BACKEND_ONE_FILE;
}

/* The file a worker writes: its own, or the device's one file. */
static void worker_file(const struct worker *w, char *buf, size_t len, const char *kind)
{
	if (w->one_file)
		buf[0] = '\0';
	else
		fname(buf, len, kind, w->id, 0);
}

/* Write every random writer's file in full and sync (fio's layout), so
 * that the timed writes overwrite allocated blocks, not holes. */
static int layout(void)
{
	const struct opts *o = &R.o;
	static const char zero[1 << 20];
	double t0 = now_s();
	int err = 0;
	unsigned nfiles = 0;   /* the writers' on devices of files */
	for (unsigned i = 0; i < R.nw && !err; i++) {
		char name[96];
		wbc_file *f;
		if (R.w[i].one_file)
			continue;   /* a block device has no holes to fill */
		nfiles++;
		fname(name, sizeof(name), "rand", R.w[i].id, 0);
		if ((err = wbc_file_open(R.w[i].dev, name, WBC_O_CREAT | WBC_O_TRUNC, &f)))
			break;
		for (uint64_t off = 0; off < o->file_size && !err; off += sizeof(zero)) {
			if (atomic_load(&R.interrupted)) {
				err = -EINTR;
				break;
			}
			size_t n = (size_t)(o->file_size - off < sizeof(zero) ? o->file_size - off : sizeof(zero));
			ssize_t r = wbc_pwrite(f, zero, n, R.w[i].base + off);
			if (r != (ssize_t)n)
				err = r < 0 ? (int)r : -EIO;
			/* for an interrupt's message: no sampler runs yet (it
			 * said "writing back 0 MiB" with the cache full) */
			note_dirty();
		}
		if (o->wl == WL_RANDRW && !err) {
			R.w[i].warm = f;   /* closed by its writer (or the cache's close) */
			continue;
		}
		int cerr = wbc_file_close(f);
		err = err ? err : cerr;
	}
	if (!err)
		err = wbc_cache_sync(R.cache);
	/* the files laid out, not the writers (a stacked device's were
	 * counted: "laid out 2 file(s)" where there was none) */
	if (!err && !o->quiet && nfiles)
		fprintf(stderr, "laid out %u file(s) of %.0f MiB in %.1f s\n", nfiles,
			(double)o->file_size / MiB, now_s() - t0);
	return err;
}

/* record @i of a writer's --lat-log: its chunk, and its place there */
static unsigned lat_chunk(size_t i, size_t *at)
{
	size_t q = i / LAT0 + 1;                 /* chunk k holds q in [2^k, 2^(k+1)) */
	unsigned k = 63u - (unsigned)__builtin_clzll(q);
	*at = i - LAT0 * (((size_t)1 << k) - 1);
	return k;
}

/* A write that began at @t0 (s) is done: recorded for --lat-log. */
static void note_lat(struct worker *w, double t0, size_t bytes)
{
	double t = now_s();
	size_t n = atomic_load_explicit(&w->nlats, memory_order_relaxed), at;
	unsigned k = lat_chunk(n, &at);
	if (k >= LAT_CHUNKS)
		return;
	if (!w->lats[k] && !(w->lats[k] = malloc(((size_t)LAT0 << k) * sizeof(*w->lats[k]))))
		return;
	w->lats[k][at] = (struct lat){ .t_ns = (uint64_t)((t - R.t0) * 1e9),
				       .lat_ns = (uint64_t)((t - t0) * 1e9), .bytes = bytes };
	atomic_store_explicit(&w->nlats, n + 1, memory_order_release);
}

/* fdatasync @f and record how long it took (--fsync-every). */
static int timed_fsync(struct worker *w, wbc_file *f)
{
	double t0 = now_s();
	int err = wbc_fdatasync(f);
	if (w->nfsyncs == w->fcap) {
		size_t cap = w->fcap ? w->fcap * 2 : 256;
		uint64_t *v = realloc(w->fsyncs, cap * sizeof(*v));
		if (!v)
			return err;
		w->fsyncs = v;
		w->fcap = cap;
	}
	w->fsyncs[w->nfsyncs++] = (uint64_t)((now_s() - t0) * 1e9);
	return err;
}

/* A writer is ready (its buffer filled, or it failed): count it, and
 * wait until the main thread starts the clock. */
static void gate_wait(void)
{
	pthread_mutex_lock(&gate_lock);
	R.ready++;
	pthread_cond_broadcast(&gate_cond);
	while (!R.go)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

/* The writer's error @err in operation @op on file @name. */
static void worker_fail(struct worker *w, int err, const char *op, const char *name)
{
	w->err = err;
	w->err_op = op;
	w->err_on_file = true;
	snprintf(w->err_file, sizeof(w->err_file), "%s", name);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const struct opts *o = &R.o;
	struct wbc_thread_stats prev;
	wbc_thread_stats(&prev);
	char *buf = aligned_alloc(4096, (o->bs + 4095) / 4096 * 4096);
	char *rbuf = o->wl == WL_RANDRW ? malloc(o->bs) : NULL;
	if (!buf || (o->wl == WL_RANDRW && !rbuf)) {
		free(buf);
		free(rbuf);
		if (w->warm) {
			wbc_file_close(w->warm);
			w->warm = NULL;
		}
		w->err = -ENOMEM;
		w->err_op = "allocating its buffer";
		gate_wait();   /* the main thread waits for every one */
		atomic_fetch_add(&R.workers_done, 1);   /* the sampler too */
		return NULL;
	}
	uint64_t seed = 0x9e3779b97f4a7c15ull * (w->id + 1);
	/* eight bytes per number: a 512 MiB buffer took seconds a byte at a
	 * time (and it is filled before the clock starts anyway) */
	for (uint64_t i = 0; i < o->bs; i += 8) {
		uint64_t x = xrand(&seed);
		memcpy(buf + i, &x, o->bs - i < 8 ? (size_t)(o->bs - i) : 8);
	}
	gate_wait();
	char name[96];
	wbc_file *f = NULL;
	double t0 = now_s();
	switch (o->wl) {
	case WL_DD:
	case WL_RANDWRITE:
	case WL_JBOD:
	case WL_RANDRW: {
		bool seq = o->wl == WL_DD;
		worker_file(w, name, sizeof(name), seq ? "dd" : "rand");
		/* randwrite and jbod write into their laid-out files; the one
		 * file of a device is shared, never truncated */
		int oflags = w->one_file ? 0 : seq || o->no_layout ? WBC_O_CREAT | WBC_O_TRUNC : 0;
		int e = wbc_file_open(w->dev, name, oflags, &f);
		if (w->warm) {
			wbc_file_close(w->warm);
			w->warm = NULL;
		}
		if (e) {
			worker_fail(w, e, oflags & WBC_O_CREAT ? "creating" : "opening", name);
			break;
		}
		uint64_t share = dd_share(w->id), blocks = o->file_size / o->bs;
		while ((o->time_s > 0 || w->bytes < share) && !time_up()) {
			/* a region of the one file: --time wraps around in it */
			uint64_t pos = w->one_file && share ? w->bytes % share : w->bytes;
			uint64_t off = w->base + (seq ? pos : (xrand(&seed) % blocks) * o->bs);
			if (o->wl == WL_RANDRW && xrand(&seed) % 100 >= o->rwmix) {
				ssize_t r = wbc_pread(f, rbuf, o->bs, off);
				if (r < 0) {
					worker_fail(w, (int)r, "reading", name);
					break;
				}
				w->reads++;
				w->read_bytes += (uint64_t)r;
				/* ops first: a reader of both (give_up) reads reads
				 * first, and never sees more reads than ops */
				atomic_fetch_add(&R.ops_done, 1);
				atomic_fetch_add(&R.reads_done, 1);
				continue;
			}
			/* dd: a share's last write ends at the share (the next
			 * writer's region of a one-file device begins there) */
			size_t n = seq && share && (w->one_file || o->time_s <= 0) &&
					   share - pos < o->bs ? (size_t)(share - pos) : o->bs;
			double tw = o->lat_log ? now_s() : 0;
			ssize_t r = wbc_pwrite(f, buf, n, off);
			if (r < 0) {
				worker_fail(w, (int)r, "writing", name);
				break;
			}
			if (o->lat_log)
				note_lat(w, tw, (size_t)r);
			w->bytes += (uint64_t)r;
			w->ops++;
			atomic_fetch_add_explicit(&R.ops_done, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&R.bytes_done, (uint64_t)r, memory_order_relaxed);
			note_pause(w, &prev);
			if (o->fsync_every && w->bytes / o->fsync_every != (w->bytes - (uint64_t)r) / o->fsync_every &&
			    (e = timed_fsync(w, f))) {
				worker_fail(w, e, "fdatasync of", name);
				break;
			}
		}
		break;
	}
	case WL_FSMARK:
		for (uint64_t k = 0; k < o->files && !time_up(); k++) {
			wbc_file *g;
			fname(name, sizeof(name), "fsm", w->id, k);
			int e = wbc_file_open(w->dev, name, WBC_O_CREAT | WBC_O_TRUNC, &g);
			if (e) {
				worker_fail(w, e, "creating", name);
				break;
			}
			/* --time is the most it runs: a file of many writes is
			 * cut there, and not counted (--file-size 1G --time 1
			 * ran 1.65 s) */
			uint64_t off = 0;
			for (; off < o->file_size && !w->err && !(off && time_up()); off += o->bs) {
				size_t n = (size_t)(o->file_size - off < o->bs ? o->file_size - off : o->bs);
				ssize_t r = wbc_pwrite(g, buf, n, off);
				if (r < 0) {
					worker_fail(w, (int)r, "writing", name);
				} else {
					w->bytes += (uint64_t)r;
					atomic_fetch_add_explicit(&R.bytes_done, (uint64_t)r,
								  memory_order_relaxed);
				}
			}
			wbc_file_close(g);
			/* a write failed: the file is not one of fs_mark's, nor
			 * are the empty ones the loop went on making (200000
			 * "files" were counted after the store died at 820) */
			if (w->err || off < o->file_size)
				break;
			w->ops++;
			atomic_fetch_add_explicit(&R.ops_done, 1, memory_order_relaxed);
			note_pause(w, &prev);
		}
		break;
	}
	if (f && !w->err && o->fsync_end) {
		int e = wbc_fsync(f);
		if (e)
			worker_fail(w, e, "fsync of", name);
	}
	w->secs = now_s() - t0;
	wbc_file_close(f);
	free(buf);
	free(rbuf);
	atomic_fetch_add(&R.workers_done, 1);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* sampling                                                             */

/* The sample at @t (now_s()), of the interval since @last: the rates are
 * over that interval, and the sample's time is @t itself (a later clock
 * read made a rate times the time more than the bytes). */
static void take_sample(double t, double last, struct wbc_stats *prev)
{
	double dt = t - last;
	if (R.ns == R.scap) {
		size_t ncap = R.scap ? R.scap * 2 : 256;
		struct sample *p = realloc(R.s, ncap * sizeof(*p));
		if (!p)
			return;
		R.s = p;
		R.scap = ncap;
	}
	struct sample *s = &R.s[R.ns++];
	memset(s, 0, sizeof(*s));
	struct wbc_stats st;
	wbc_stats(R.cache, &st);
	s->t = t - R.t0;
	s->dirty = (double)st.dirty_bytes / MiB;
	s->writeback = (double)st.writeback_bytes / MiB;
	s->bg_thresh = (double)st.bg_thresh_bytes / MiB;
	s->freerun = (double)st.freerun_bytes / MiB;
	s->setpoint = (double)st.setpoint_bytes / MiB;
	s->limit = (double)st.limit_bytes / MiB;
	atomic_store(&R.dirty_now, st.dirty_bytes + st.writeback_bytes);
	uint64_t np = st.pauses - prev->pauses;
	s->pause_ms = np ? (double)(st.paused_ns - prev->paused_ns) / (double)np / 1e6 : 0;
	*prev = st;
	uint64_t ops = atomic_load_explicit(&R.ops_done, memory_order_relaxed);
	s->ops_rate = dt > 0 ? (double)(ops - R.last_ops) / dt : 0;
	R.last_ops = ops;
	s->ndev = R.o.ndev;
	for (unsigned d = 0; d < R.o.ndev; d++) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(R.dev[d], &ds);
		struct wbc_dev_debug dd;
		wbc_dev_debug(R.dev[d], &dd);
		s->dev[d].dirty = (double)ds.dirty_bytes / MiB;
		s->dev[d].writeback = (double)ds.writeback_bytes / MiB;
		s->dev[d].write_bw = (double)ds.write_bw / 1e6;
		s->dev[d].ratelimit = (double)ds.dirty_ratelimit / 1e6;
		s->dev[d].tput = dt > 0 ? (double)(ds.written_back_bytes - R.last_written[d]) / dt / 1e6 : 0;
		R.last_written[d] = ds.written_back_bytes;
		/* the longest list-lock hold in the interval, to its histogram
		 * entry's upper bound: the highest entry that grew; no more
		 * than the run's longest so far (exact in the interval that
		 * held it: a 145 ms hold was drawn as 268 ms), and that in
		 * the last entry, which has no bound */
		for (int i = 31; i >= 0; i--) {
			if (dd.list_lock_hold_hist[i] != R.last_hold_hist[d][i]) {
				double mx = (double)dd.list_lock_max_hold_ns;
				double ub = i < 31 ? fmin(ldexp(1, i), mx) : mx;
				s->lock_max_us = fmax(s->lock_max_us, ub / 1e3);
				break;
			}
		}
		memcpy(R.last_hold_hist[d], dd.list_lock_hold_hist, sizeof(R.last_hold_hist[d]));
		struct wbc_backend_stats bs;
		if (!wbc_dev_backend_stats(R.dev[d], &bs) && bs.conns) {
			s->dev[d].transport = true;
			s->dev[d].window = (double)bs.window_bytes / MiB;
			s->dev[d].inflight = (double)bs.inflight_bytes / MiB;
			s->dev[d].rtt_ms = (double)bs.rtt_ns / 1e6;
			s->dev[d].base_rtt_ms = (double)bs.min_rtt_ns / 1e6;
		}
	}
}

static void status_line(void)
{
	const struct sample *s = &R.s[R.ns - 1];
	/* one row of the terminal: a longer line wraps, and the \r that
	 * redraws it goes back to its last row only, so that each redraw
	 * added rows (93 columns for one device, 80 on the terminal); the
	 * rest of the row cleared (ESC [K) instead of padded.  The pause
	 * comes before the devices, and a device that does not fit whole
	 * is left out (a cut one showed "dev0 12" for 1234 MB/s) */
	struct winsize ws;
	size_t cols = !ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) && ws.ws_col ? ws.ws_col : 80;
	char line[512], dev[128];
	int n = snprintf(line, sizeof(line),
			 "%5.1fs dirty+wb %6.1f/%.0f MiB (setpoint %.0f) | pause %3.0f ms",
			 s->t, s->dirty + s->writeback, s->limit, s->setpoint, s->pause_ms);
	size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
	for (unsigned d = 0; d < s->ndev; d++) {
		int k = snprintf(dev, sizeof(dev), " | dev%u %4.0f MB/s", d, s->dev[d].tput);
		if (s->dev[d].transport)
			k += snprintf(dev + k, sizeof(dev) - (size_t)k, " win %.1f MiB rtt %.2f ms",
				      s->dev[d].window, s->dev[d].rtt_ms);
		if (len + (size_t)k > cols - 1 || len + (size_t)k >= sizeof(line))
			break;
		memcpy(line + len, dev, (size_t)k + 1);
		len += (size_t)k;
	}
	if (len > cols - 1)
		len = cols - 1;
	fprintf(stderr, "\r%.*s\033[K", (int)len, line);
	fflush(stderr);
}

static void *sampler_main(void *arg)
{
	(void)arg;
	/* the first interval from the run's start, as the counters it is
	 * compared with (a run over before the sampler began had its bytes
	 * over the microsecond since then: 234,057 MB/s for 64 KiB) */
	struct wbc_stats prev = R.st0;
	bool tty = !R.o.quiet && isatty(STDERR_FILENO);
	double last = R.t0;
	while (atomic_load(&R.workers_done) < R.nw && !atomic_load(&R.abandon)) {
		struct timespec ts = { 0, (long)SAMPLE_NS };
		nanosleep(&ts, NULL);
		double t = now_s();
		take_sample(t, last, &prev);
		last = t;
		if (tty && R.ns % 2 == 0)
			status_line();
	}
	/* the end of the run: a last sample, so that a run shorter than
	 * one interval has a timeline too */
	double t = now_s();
	if (!R.ns || t - last >= SAMPLE_NS / 1e9 / 10)
		take_sample(t, last, &prev);
	if (tty)
		fputs("\n", stderr);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* report                                                               */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t i = (size_t)ceil(p / 100 * (double)n);
	return (double)v[i ? i - 1 : 0] / 1e6;
}


/* One line of a lock-hold histogram: each entry's upper bound, count. */
static void print_hist(unsigned d, const char *what, const uint64_t *hist)
{
	printf("device %u list-lock holds %s:", d, what);
	bool any = false;
	for (int b = 0; b < 32; b++)
		any |= hist[b] != 0;
	if (!any)
		printf(" none");   /* a short run's writeback took no list lock */
	for (int b = 0; b < 32; b++) {
		if (!hist[b])
			continue;
		/* the last entry has no upper bound: every hold from 2^30 ns
		 * on, said as its lower one */
		bool last = b == 31;
		double ub = (double)(last ? 1ull << 30 : b ? 1ull << b : 1);
		const char *rel = last ? ">=" : "<";
		if (ub < 1e3)
			printf(" %s%.0fns:%llu", rel, ub, (unsigned long long)hist[b]);
		else if (ub < 1e6)
			printf(" %s%.0fus:%llu", rel, ub / 1e3, (unsigned long long)hist[b]);
		else
			printf(" %s%.0fms:%llu", rel, ub / 1e6, (unsigned long long)hist[b]);
	}
	printf("\n");
}
/* CPU time (s) the process's threads named @prefix* have used so far:
 * schedstat's time on CPU (ns), else stat's utime + stime (ticks). */
/* With @user_only, the user-space part (stat's utime) alone.  A name is
 * comm with its newline ("wbc-rados\n": that name alone); @prefix "!":
 * the threads that are not wbcache's (neither "wbc-*" nor named as the
 * process: the writers): a library's. */
static double threads_cpu_mode(const char *prefix, bool user_only)
{
	DIR *d = opendir("/proc/self/task");
	double total = 0;
	struct dirent *e;
	char self[64] = "";
	bool others = !strcmp(prefix, "!");
	FILE *sf = others ? fopen("/proc/self/comm", "r") : NULL;
	if (sf) {
		if (!fgets(self, sizeof(self), sf))
			self[0] = '\0';
		fclose(sf);
	}
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[64] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		if (others ? !strncmp(comm, "wbc-", 4) || !strcmp(comm, self)
			   : strncmp(comm, prefix, strlen(prefix)) != 0)
			continue;
		unsigned long long ns = 0, ut = 0, st = 0;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		if (!user_only && (f = fopen(path, "r"))) {
			if (fscanf(f, "%llu", &ns) == 1)
				total += (double)ns / 1e9;
			fclose(f);
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		if ((f = fopen(path, "r"))) {
			/* after "(comm)": state is field 3, utime 14, stime 15 */
			char buf[1024];
			char *p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
			if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
					&ut, &st) == 2)
				total += (double)(ut + (user_only ? 0 : st)) /
					 (double)sysconf(_SC_CLK_TCK);
			fclose(f);
		}
	}
	if (d)
		closedir(d);
	return total;
}

/* writeback's CPU time and pages written back before the timed run
 * (the layout), left out of its cost per page */
static double wb_cpu0, wb_user0, lib_cpu0;
static struct rusage ru0;   /* the process's CPU time when the writers started */
static uint64_t wb_bytes0;
static uint64_t read_in0;   /* read from the devices before the writers */
static uint64_t pauses0;    /* the cache's throttle pauses before them */

static double wb_threads_cpu(bool user_only)
{
	/* the rados backend's completion thread, not its lock keeper or map
	 * watcher (wbc-rados-*) */
	return threads_cpu_mode("wbc-flush", user_only) + threads_cpu_mode("wbc-reap", user_only) +
	       threads_cpu_mode("wbc-model", user_only) + threads_cpu_mode("wbc-nbd", user_only) +
	       threads_cpu_mode("wbc-rados\n", user_only);
}

/* a rados device's operations are also librados' work, on its own
 * threads (messenger, callbacks, timers): not counted above */
static bool any_rados(void)
{
	for (unsigned d = 0; d < R.o.ndev; d++)
		if (!strncmp(R.o.devs[d], "rados:", 6))
			return true;
	return false;
}

/* the report's figures, for --json */
struct json_fig {
	bool unfinished;           /* --deadline passed */
	bool interrupted;          /* SIGINT, SIGTERM: the figures are of what ran */
	double secs;
	uint64_t bytes, ops, reads;
	size_t pauses;
	double pause_p50_ms, pause_p99_ms, pause_max_ms;
	double dirty_mean_mib, dirty_max_mib, setpoint_mib, limit_mib, fairness;
};

/* A JSON string: a byte that is not part of well-formed UTF-8 (a device
 * spec is any bytes the shell passed) becomes U+FFFD, as JSON must be
 * UTF-8 (Python's json.load refused the file). */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
		int n;
		if (*u == '"' || *u == '\\')
			fprintf(f, "\\%c", *u);
		else if (*u < 0x20)
			fprintf(f, "\\u%04x", *u);
		else if (*u < 0x80)
			fputc(*u, f);
		else if ((n = utf8_len(u))) {
			fwrite(u, 1, (size_t)n, f);
			u += n - 1;
		} else
			fputs("\\ufffd", f);
	}
	fputc('"', f);
}

/* An output file (@opt: --json, --trace, ...) could not be written: said
 * once, and the run's status is 1. */
static void out_failed(const char *opt, const char *path, int err)
{
	fprintf(stderr, "wbcache: %s %s: cannot write it: %s\n", opt, path, strerror(err));
	R.out_err = true;
}

/* One JSON object: the run's totals, rates, pauses, dirty pages, the
 * process's CPU time from the writers' start and each device's writeback and list-lock figures. */
static void write_json(const char *path, const struct json_fig *j)
{
	bool out = !strcmp(path, "-");
	int fd = out ? dup(R.json_fd) : -1;
	FILE *f = out ? (fd >= 0 ? fdopen(fd, "w") : NULL) : fopen(path, "w");
	if (out && !f && fd >= 0)
		close(fd);
	if (!f) {
		out_failed("--json", path, errno);
		return;
	}
	errno = 0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double secs = j->secs > 0 ? j->secs : 1;
	fprintf(f, "{\"workload\": \"%s\", \"finished\": %s, \"threads\": %u, \"secs\": %.6f, \"bytes\": %llu, "
		"\"mb_per_s\": %.2f, \"ops\": %llu, \"ops_per_s\": %.1f, \"reads\": %llu, "
		"\"reads_per_s\": %.1f,\n ",
		wl_names[R.o.wl], j->unfinished || j->interrupted ? "false" : "true", R.nw, j->secs,
		(unsigned long long)j->bytes,
		(double)j->bytes / secs / 1e6, (unsigned long long)j->ops, (double)j->ops / secs,
		(unsigned long long)j->reads, (double)j->reads / secs);
	/* the reads that missed the cache: what the devices gave them */
	struct wbc_stats cs;
	wbc_stats(R.cache, &cs);
	fprintf(f, "\"read_in_bytes\": %llu,\n ", (unsigned long long)(cs.read_in_bytes - read_in0));
	/* the throttle's own count of its pauses (of every thread of the
	 * cache: with stacked devices their workers' too), beside the
	 * writers' (pauses, below) */
	fprintf(f, "\"throttle_pauses\": %llu,\n ", (unsigned long long)(cs.pauses - pauses0));
	if (j->unfinished)   /* a run given up: these were not summed up */
		fprintf(f, "\"pauses\": null, \"pause_p50_ms\": null, \"pause_p99_ms\": null, "
			"\"pause_max_ms\": null, \"dirty_mean_mib\": null, \"dirty_max_mib\": null, "
			"\"setpoint_mib\": null, \"limit_mib\": null, \"fairness\": null");
	else
		fprintf(f, "\"pauses\": %zu, \"pause_p50_ms\": %.2f, \"pause_p99_ms\": %.2f, "
			"\"pause_max_ms\": %.2f, \"dirty_mean_mib\": %.2f, \"dirty_max_mib\": %.2f, "
			"\"setpoint_mib\": %.2f, \"limit_mib\": %.2f, \"fairness\": %.3f",
			j->pauses, j->pause_p50_ms, j->pause_p99_ms, j->pause_max_ms,
			j->dirty_mean_mib, j->dirty_max_mib, j->setpoint_mib, j->limit_mib,
			j->fairness);
	fprintf(f, ",\n \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f",
		(double)(ru.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
			(double)(ru.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6,
		(double)(ru.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
			(double)(ru.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6);
	uint64_t holds = 0, max_ns = 0, waits = 0, written = 0;
	fprintf(f, ",\n \"devices\": [");
	for (unsigned d = 0; d < R.o.ndev; d++) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(R.dev[d], &ds);
		struct wbc_dev_debug dd;
		wbc_dev_debug(R.dev[d], &dd);
		holds += dd.list_lock_holds;
		if (dd.list_lock_max_hold_ns > max_ns)
			max_ns = dd.list_lock_max_hold_ns;
		waits += dd.list_lock_waits;
		uint64_t wr = ds.written_back_bytes - R.written0[d];
		/* a device under a stack: device writes back what that one
		 * wrote back (again): counted once, the stacked device's */
		if (!R.under[d])
			written += wr;
		fprintf(f, "%s\n  {\"spec\": ", d ? "," : "");
		json_str(f, R.o.devs[d]);
		fprintf(f, ", \"written_bytes\": %llu, \"list_lock_holds\": %llu, "
			"\"list_lock_max_us\": %.1f, \"list_lock_p99_us\": %.1f, "
			"\"list_lock_waits\": %llu}", (unsigned long long)wr,
			(unsigned long long)dd.list_lock_holds, (double)dd.list_lock_max_hold_ns / 1e3,
			(double)wbc_lock_hold_percentile(&dd, 99) / 1e3,
			(unsigned long long)dd.list_lock_waits);
	}
	fprintf(f, "],\n \"written_bytes\": %llu, \"list_lock_holds\": %llu, "
		"\"list_lock_max_us\": %.1f, \"list_lock_waits\": %llu}\n",
		(unsigned long long)written, (unsigned long long)holds, (double)max_ns / 1e3,
		(unsigned long long)waits);
	if (ferror(f) | fclose(f))
		out_failed("--json", path, errno ? errno : EIO);
}

/* @ms milliseconds, to three figures at least: in us below 1 ms */
static void fmt_ms(char *buf, size_t len, double ms)
{
	if (ms < 1)
		snprintf(buf, len, "%.*f us", ms < 0.01 ? 2 : 1, ms * 1e3);
	else
		snprintf(buf, len, "%.3f ms", ms);
}

/* --lat-log: every write's latency, in fio's (3.x) log format (msec,
 * nsec, direction 1: write, bytes), and its p50/p99/max in the report.
 * Also while writers still run (a run given up at its --deadline): each
 * writer's records up to the count it published. */
static void lat_log_write(void)
{
	const struct opts *o = &R.o;
	size_t nl = 0, *n = calloc(R.nw ? R.nw : 1, sizeof(*n));
	if (!n) {
		out_failed("--lat-log", o->lat_log, ENOMEM);
		return;
	}
	for (unsigned i = 0; i < R.nw; i++)
		nl += n[i] = atomic_load_explicit(&R.w[i].nlats, memory_order_acquire);
	uint64_t *ll = malloc((nl ? nl : 1) * sizeof(*ll));
	FILE *lf = fopen(o->lat_log, "w");
	int lerr = lf ? 0 : errno;
	errno = 0;
	size_t kl = 0;
	for (unsigned i = 0; i < R.nw; i++)
		for (size_t j = 0, at; j < n[i]; j++) {
			unsigned k = lat_chunk(j, &at);
			const struct lat *l = &R.w[i].lats[k][at];
			if (ll)
				ll[kl++] = l->lat_ns;
			if (lf)
				fprintf(lf, "%llu, %llu, 1, %llu\n",
					(unsigned long long)(l->t_ns / 1000000),
					(unsigned long long)l->lat_ns, (unsigned long long)l->bytes);
		}
	if (!lf || (ferror(lf) | fclose(lf)))
		out_failed("--lat-log", o->lat_log, lerr ? lerr : errno ? errno : EIO);
	if (ll && nl) {
		qsort(ll, nl, sizeof(*ll), cmp_u64);
		/* below a millisecond in microseconds: a cached write's 0.4 us
		 * was "p50 0.000 ms" */
		char p50[32], p99[32];
		fmt_ms(p50, sizeof(p50), pct(ll, nl, 50));
		fmt_ms(p99, sizeof(p99), pct(ll, nl, 99));
		printf("write latency: %zu writes, p50 %s, p99 %s, max %.1f ms (log: %s)\n", nl, p50,
		       p99, pct(ll, nl, 100), o->lat_log);
	}
	free(ll);
	free(n);
}

static void report(double secs)
{
	const struct opts *o = &R.o;
	uint64_t total = 0, ops = 0;
	size_t np = 0;
	double sum = 0, sumsq = 0;
	for (unsigned i = 0; i < R.nw; i++) {
		total += R.w[i].bytes;
		ops += R.w[i].ops;
		np += R.w[i].npauses;
		double x = R.w[i].secs > 0 ? (double)R.w[i].bytes / R.w[i].secs : 0;
		sum += x;
		sumsq += x * x;
	}
	double rate = (double)total / secs / 1e6;
	/* under 10 MB/s with its decimals (a 64 KiB/s device said "0") */
	printf("\n%s: %u thread(s) on %u device(s): %.1f MiB in %.2f s = %.*f MB/s",
	       wl_names[o->wl], R.nw, o->ndev, (double)total / MiB, secs,
	       rate >= 10 ? 0 : rate >= 1 ? 1 : 3, rate);
	if (o->wl == WL_FSMARK)
		printf(", %.0f files/s", (double)ops / secs);
	if (o->wl == WL_RANDRW) {
		uint64_t reads = 0, rbytes = 0;
		for (unsigned i = 0; i < R.nw; i++) {
			reads += R.w[i].reads;
			rbytes += R.w[i].read_bytes;
		}
		printf("; %.0f write IOPS, %.0f read IOPS (%.0f MB/s read), %u%% writes",
		       (double)ops / secs, (double)reads / secs, (double)rbytes / secs / 1e6, o->rwmix);
	}
	printf("\n\nthread  device       MB/s   pauses  p50 ms  p99 ms  max ms\n");
	uint64_t *all = malloc((np ? np : 1) * sizeof(*all));
	size_t k = 0;
	for (unsigned i = 0; i < R.nw; i++) {
		struct worker *w = &R.w[i];
		if (w->npauses)
			qsort(w->pauses, w->npauses, sizeof(*w->pauses), cmp_u64);
		if (w->npauses)
			memcpy(all + k, w->pauses, w->npauses * sizeof(*all));
		k += w->npauses;
		printf("%6u  %6u  %9.1f  %7zu  %6.1f  %6.1f  %6.1f\n", i, w->dev_idx,
		       w->secs > 0 ? (double)w->bytes / w->secs / 1e6 : 0, w->npauses,
		       pct(w->pauses, w->npauses, 50), pct(w->pauses, w->npauses, 99),
		       pct(w->pauses, w->npauses, 100));
	}
	if (np)
		qsort(all, np, sizeof(*all), cmp_u64);
	printf("\ndevice  written MiB   MB/s  busy%%  list-lock holds  p99 us  max us  "
	       "max on CPU us  spec\n");
	for (unsigned d = 0; d < o->ndev; d++) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(R.dev[d], &ds);
		struct wbc_dev_debug dd;
		wbc_dev_debug(R.dev[d], &dd);
		size_t busy = 0;
		for (size_t i = 0; i < R.ns; i++)
			busy += R.s[i].dev[d].writeback > 0;
		uint64_t p99 = wbc_lock_hold_percentile(&dd, 99);
		uint64_t wr = ds.written_back_bytes - R.written0[d];
		double drate = (double)wr / secs / 1e6;
		printf("%6u  %11.1f  %5.*f  %5.1f  %15llu  %6.1f  %6.1f  %13.1f  %s\n", d,
		       (double)wr / MiB, drate >= 10 ? 0 : drate >= 1 ? 1 : 3, drate,
		       R.ns ? 100.0 * (double)busy / (double)R.ns : 0,
		       (unsigned long long)dd.list_lock_holds, (double)p99 / 1e3,
		       (double)dd.list_lock_max_hold_ns / 1e3,
		       (double)dd.list_lock_max_cpu_ns / 1e3, o->devs[d]);
	}
	/* the transport of devices that report one (nbd): its window, the
	 * bytes in flight and the round trips, over the run */
	for (unsigned d = 0; d < o->ndev; d++) {
		struct wbc_backend_stats bs;
		if (wbc_dev_backend_stats(R.dev[d], &bs))
			continue;
		if (bs.seek_ns)   /* a device with a head (the model's seek=) */
			printf("device %u seeks: %llu, %.2f s of device time\n", d,
			       (unsigned long long)bs.seeks, (double)bs.seek_ns / 1e9);
		if (!bs.conns)
			continue;   /* no transport (the model) */
		double wsum = 0, wmax = 0, isum = 0, imax = 0, rsum = 0, bsum = 0;
		size_t busy = 0;
		for (size_t i = 0; i < R.ns; i++) {
			const typeof(R.s[i].dev[d]) *x = &R.s[i].dev[d];
			if (!x->transport || x->writeback <= 0)
				continue;   /* the device's busy samples */
			wsum += x->window;
			wmax = fmax(wmax, x->window);
			isum += x->inflight;
			imax = fmax(imax, x->inflight);
			rsum += x->rtt_ms;
			bsum += x->base_rtt_ms;
			busy++;
		}
		double kk = (double)busy;
		printf("device %u transport", d);
		if (busy)
			printf(" (busy samples): window MiB mean %.2f max %.2f; in flight MiB mean %.2f "
			       "max %.2f; RTT ms mean %.3f (base %.3f);", wsum / kk, wmax, isum / kk,
			       imax, rsum / kk, bsum / kk);
		else
			printf(":");
		printf(" now: window %.2f MiB, RTT %.3f ms (base %.3f), connections %u/%u, "
		       "reconnects %llu\n", (double)bs.window_bytes / MiB, (double)bs.rtt_ns / 1e6,
		       (double)bs.min_rtt_ns / 1e6, bs.connected, bs.conns,
		       (unsigned long long)bs.reconnects);
	}
	/* the dirty-list lock's hold-time histograms: upper bound, count */
	for (unsigned d = 0; d < o->ndev; d++) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(R.dev[d], &ds);
		struct wbc_dev_debug dd;
		wbc_dev_debug(R.dev[d], &dd);
		print_hist(d, "by time", dd.list_lock_hold_hist);
		print_hist(d, "on CPU", dd.list_lock_cpu_hist);
	}
	/* who waited: the list lock's takes that found it held; writers'
	 * lock-free inbox pushes that lost a race and tried again */
	for (unsigned d = 0; d < o->ndev; d++) {
		struct wbc_dev_stats ds;
		wbc_dev_stats(R.dev[d], &ds);
		struct wbc_dev_debug dd;
		wbc_dev_debug(R.dev[d], &dd);
		printf("device %u list-lock waits: %llu; writers' inbox pushes retried: %llu\n", d,
		       (unsigned long long)dd.list_lock_waits,
		       (unsigned long long)dd.inbox_push_retries);
	}
	double dmin = 1e18, dmax = 0, dsum = 0, setp = 0, lim = 0;
	for (size_t i = 0; i < R.ns; i++) {
		double v = R.s[i].dirty + R.s[i].writeback;
		dmin = fmin(dmin, v);
		dmax = fmax(dmax, v);
		dsum += v;
		setp = R.s[i].setpoint;
		lim = R.s[i].limit;
	}
	if (R.ns > 1)
		printf("\ndirty+writeback MiB: min %.1f mean %.1f max %.1f (setpoint %.1f, limit %.1f)\n",
		       dmin, dsum / (double)R.ns, dmax, setp, lim);
	else if (R.ns)   /* its one sample is after the final fsync: no figures */
		printf("\ndirty+writeback MiB: not sampled (the run was shorter than one %d ms "
		       "sample; setpoint %.1f, limit %.1f)\n", (int)(SAMPLE_NS / 1000000), setp, lim);
	printf("pauses: %zu, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n", np,
	       pct(all, np, 50), pct(all, np, 90), pct(all, np, 99), pct(all, np, 100));
	if (o->fsync_every) {
		size_t nf = 0;
		for (unsigned i = 0; i < R.nw; i++)
			nf += R.w[i].nfsyncs;
		uint64_t *fl = malloc((nf ? nf : 1) * sizeof(*fl));
		size_t kf = 0;
		for (unsigned i = 0; fl && i < R.nw; i++) {
			memcpy(fl + kf, R.w[i].fsyncs, R.w[i].nfsyncs * sizeof(*fl));
			kf += R.w[i].nfsyncs;
		}
		if (fl && nf)
			qsort(fl, nf, sizeof(*fl), cmp_u64);
		if (fl)
			printf("fsyncs: %zu, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", nf,
			       pct(fl, nf, 50), pct(fl, nf, 99), pct(fl, nf, 100));
		free(fl);
	}
	if (o->lat_log)
		lat_log_write();
	/* what writeback cost: the flushers' and the completion threads' CPU
	 * time per page written back */
	struct wbc_stats ws;
	wbc_stats(R.cache, &ws);
	double cpu = wb_threads_cpu(false) - wb_cpu0, user = wb_threads_cpu(true) - wb_user0;
	uint64_t pages = ws.page_size ? (ws.written_back_bytes - wb_bytes0) / ws.page_size : 0;
	if (pages) {
		/* the kernel's I/O path only where a device does I/O through it */
		bool kernel_io = false;
		for (unsigned d = 0; d < o->ndev; d++)
			kernel_io |= !strncmp(o->devs[d], "file:", 5) || !strncmp(o->devs[d], "dir:", 4);
		/* user time comes in clock ticks (10 ms): less than one is 0 */
		double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
		bool under = user < tick / 2;
		printf("writeback CPU (flushers + completion threads): %.2f s: %.2f us per page "
		       "written back (%llu pages of %llu bytes); in user space (the engine%s): "
		       "%s%.2f us per page", cpu,
		       cpu * 1e6 / (double)pages, (unsigned long long)pages,
		       (unsigned long long)ws.page_size,
		       kernel_io ? ", the rest is the kernel's I/O path" : "",
		       under ? "under a clock tick: under " : "",
		       (under ? tick : user) * 1e6 / (double)pages);
		if (any_rados())
			printf("; not included: librados' own threads, %.2f s",
			       threads_cpu_mode("!", false) - lib_cpu0);
		printf("\n");
	}
	printf("fairness (Jain's index over thread throughputs): %.3f\n",
	       sumsq > 0 ? sum * sum / ((double)R.nw * sumsq) : 1.0);
	if (o->json) {
		struct json_fig j = {
			.secs = secs, .bytes = total, .ops = ops, .pauses = np,
			.pause_p50_ms = pct(all, np, 50), .pause_p99_ms = pct(all, np, 99),
			.pause_max_ms = pct(all, np, 100),
			.dirty_mean_mib = R.ns ? dsum / (double)R.ns : 0, .dirty_max_mib = dmax,
			.setpoint_mib = setp, .limit_mib = lim,
			.fairness = sumsq > 0 ? sum * sum / ((double)R.nw * sumsq) : 1.0,
			.interrupted = atomic_load(&R.interrupted),
		};
		for (unsigned i = 0; i < R.nw; i++)
			j.reads += R.w[i].reads;
		write_json(o->json, &j);
	}
	free(all);
}

/*
 * Is @name a file this run wrote: one fname() makes for this process, its
 * kind (dd, rand, fsm), the pid and two numbers ("dd.1234.0.0")?
 */
static bool run_file_name(const char *name)
{
	static const char *const kinds[] = { "dd", "rand", "fsm" };
	char pid[32];
	size_t np = (size_t)snprintf(pid, sizeof(pid), ".%d.", (int)getpid());
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		size_t n = strlen(kinds[k]);
		if (strncmp(name, kinds[k], n) || strncmp(name + n, pid, np))
			continue;
		const char *p = name + n + np;
		size_t a = strspn(p, "0123456789");
		if (!a || p[a] != '.')
			return false;
		p += a + 1;
		size_t b = strspn(p, "0123456789");
		return b && !p[b];
	}
	return false;
}

/*
 * Remove this run's files from @dir: the entries directly in it whose
 * names are this run's (run_file_name()), nothing else, so that a
 * directory of other data (a dir: device) keeps it.  No shell and no walk
 * below @dir: the directory is read through its descriptor and each entry
 * unlinked relative to it, and unlinkat() removes a symbolic link itself,
 * never what it points to (a directory, which a run never makes, fails
 * with EISDIR and is left alone).
 * Returns 0 or the first -errno.
 */
/* The files the workload wrote on rados: devices, whose objects outlive
 * the run: removed through a small cache of their own once the run's
 * cache has written everything back (wbc_file_remove; fsmark's files are
 * numbered from 0, the first missing one ends them). */
static void remove_remote_files(const struct opts *o)
{
	for (unsigned d = 0; d < o->ndev; d++) {
		if (strncmp(o->devs[d], "rados:", 6))
			continue;
		struct wbc_config cfg;
		wbc_config_init(&cfg);
		cfg.mem_bytes = 1 << 20;
		wbc_cache *c;
		wbc_dev *dev;
		int e = wbc_cache_open(&cfg, &c);
		if (!e && (e = wbc_dev_add(c, o->devs[d], &dev)))
			wbc_cache_close(c);
		for (unsigned i = 0; !e && i < R.nw; i++) {
			if (R.w[i].dev_idx != d)
				continue;
			static const char *const kinds[] = { "dd", "rand", "fsm" };
			for (unsigned k = 0; k < 3 && !e; k++)
				for (uint64_t n = 0;; n++) {
					char name[96];
					fname(name, sizeof(name), kinds[k], R.w[i].id, n);
					int r = wbc_file_remove(dev, name);
					if (r == -ENOENT)
						break;
					if (r) {
						e = r;
						break;
					}
				}
		}
		if (!e)
			e = wbc_cache_close(c);
		if (e)
			fprintf(stderr, "wbcache: cannot remove this run's files from %s: %s\n",
				o->devs[d], wbc_strerror(e));
	}
}

/* One step of mkdir_p_made: @buf made, or there.  Once one was made,
 * every deeper one is new too, unless the path steps out of it ("new/..",
 * "new/.") or another process made it meanwhile: then *made is 0 for
 * good (*broken), as unmake_dir would remove what is not the run's
 * ("--dir NEW/../OLD" removed an empty OLD). */
static int mkdir_step(const char *buf, size_t *made, bool *broken)
{
	if (!mkdir(buf, 0755)) {
		if (!*made && !*broken)
			*made = strlen(buf);
		return 0;
	}
	if (errno != EEXIST)
		return -errno;
	if (*made) {
		*made = 0;
		*broken = true;
	}
	return 0;
}

/* mkdir_p, and in *made the length of the shallowest directory of @dir
 * it made (0: none was made, or not only new directories lie below it),
 * for a refused run to remove them again */
int mkdir_p_made(const char *dir, size_t *made)
{
	char buf[4096];
	bool broken = false;
	int e;
	*made = 0;
	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	if (!*buf)
		return -ENOENT;   /* mkdir("")'s */
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		/* (a doubled or trailing slash names the same one again) */
		if (p[-1] != '/' && (e = mkdir_step(buf, made, &broken)))
			return e;
		*p = '/';
	}
	if (buf[strlen(buf) - 1] != '/' && (e = mkdir_step(buf, made, &broken)))
		return e;
	struct stat st;
	if (stat(buf, &st))
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Removes the directories of @dir that mkdir_p_made() made (those of
 * @made characters or more), deepest first, while they are empty.  Those
 * below the deepest it made are not there (a mkdir_p_made that failed
 * part of the way): passed over. */
void unmake_dir(const char *dir, size_t made)
{
	char buf[4096];
	if (!made || snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return;
	size_t len = strlen(buf);
	for (;;) {
		while (len > 1 && buf[len - 1] == '/')
			buf[--len] = '\0';
		if (len < made || (rmdir(buf) && errno != ENOENT))
			return;
		char *slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			return;
		*slash = '\0';
		len = (size_t)(slash - buf);
	}
}

static int remove_run_files(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = -errno;
		close(dfd);
		return e;
	}
	int err = 0;
	struct dirent *de;
	/* an entry unlinked while the directory is read: POSIX lets readdir
	 * return the others once each, which is all this needs */
	while ((de = readdir(d)))
		if (run_file_name(de->d_name) && unlinkat(dfd, de->d_name, 0) && errno != ENOENT &&
		    errno != EISDIR && !err)
			err = -errno;
	closedir(d);
	return err;
}

/* ------------------------------------------------------------------ */
/* options                                                              */

static void run_usage(FILE *out)
{
	fprintf(out,
"usage: wbcache run [WORKLOAD] [--dev SPEC]... [options]\n"
"\n"
"workloads:\n"
"  dd          --threads streams of sequential --bs writes, a file each: --size\n"
"              in all, or for --time; then fsync (the default workload)\n"
"  randwrite   random --bs writes over a --file-size file per thread, for --time\n"
"              (default 10 s); then fsync\n"
"  randrw      randwrite with reads: --rwmix percent of the operations write,\n"
"              the rest read (NFS's 70/30 job: --bs 8K --threads 4)\n"
"  jbod        randwrite with --threads writers on each device\n"
"  fsmark      per thread --files small files: create, write --file-size,\n"
"              close; no fsync; until the files are done or --time is up\n"
"  (none)      the demonstration: dd on dir:DIR (or the --dev devices), with\n"
"              --trace DIR/run-trace.csv and --plot DIR/run-plot.svg\n"
"\n"
"threads and devices:\n"
"  The writers write to every --dev but those a stack:N/NAME device stands on\n"
"  (device N); these, in --dev order, are the targets.  Thread i writes to\n"
"  target i mod (number of targets): --dev A --dev B --threads 3 puts threads\n"
"  0 and 2 on A and thread 1 on B; a target beyond --threads gets no writer.\n"
"  jbod: --threads writers on every target, device by device (thread i on\n"
"  target i / --threads).  The threads on a device of one file (file:, NBD,\n"
"  stack:) each write a region of it of their own, one after another (dd:\n"
"  --size / --threads, around and around with --time; the others:\n"
"  --file-size); a file grows to hold them, an NBD export must already.\n"
"  fsmark needs devices of many files.  The report gives each thread's device.\n"
"\n"
"options (SIZE: bytes, or with K, M, G, T: powers of 1024; an option for\n"
"other workloads than the one run is refused):\n"
"  --dev SPEC         a device, up to 16 (see devices below); default dir:DIR,\n"
"                     jbod: four model devices at 25/50/100/200 MiB/s\n"
"  --dir DIR          data directory: the default device dir:DIR (made if\n"
"                     missing) and the demonstration's trace and plot\n"
"                     (default $WBCACHE_DIR, else " DEFAULT_DIR "); refused\n"
"                     with --dev, by jbod, and with a comma in its name\n"
"  --threads N        writers, 1..1024 (default 1; jbod: per device, default 2)\n"
"  --size SIZE        dd, the demonstration: bytes in all, split evenly over the\n"
"                     threads, the last taking the rest (default 1G; with\n"
"                     --time, only the regions of a device of one file);\n"
"                     refused by the other workloads\n"
"  --time TIME        run this long (seconds, or with s, ms or us): dd instead\n"
"                     of --size;\n"
"                     randwrite, randrw, jbod (default 10); fsmark: at most that\n"
"  --bs SIZE          bytes per write and read, up to 1G (default dd 1M, others\n"
"                     4K); random offsets are multiples of it; fsmark writes each\n"
"                     file in pieces of it\n"
"  --file-size SIZE   randwrite, randrw, jbod: each thread's file, at least --bs\n"
"                     (default 1G); fsmark: each file (default 4K)\n"
"  --files N          fsmark: files per thread (default 10000)\n"
"  --rwmix N          randrw: percent of operations that write, 0..100\n"
"                     (default 30)\n"
"  --fsync-every SIZE dd, randwrite, randrw, jbod: fdatasync after each SIZE a\n"
"                     thread writes; the report gives the fsyncs' latencies\n"
"  --no-fsync         no final fsync (dd, randwrite, randrw, jbod; fsmark has\n"
"                     none): the rest is written back at close, after the report\n"
"  --no-layout        randwrite, randrw, jbod: write into empty files (default:\n"
"                     each file is written in full and synced first, untimed, as\n"
"                     fio lays out; a device of one file is not laid out;\n"
"                     randrw only with --rwmix 100: its reads read that data)\n"
"  --deadline SECONDS give up when the writers, final fsync included, run longer\n"
"                     (counted from their start, after the layout): report what\n"
"                     was done, write --trace, --plot, --lat-log and --json\n"
"                     (\"finished\": false) and exit 3, without writeback or\n"
"                     removing files\n"
"  --mem SIZE         the cache's memory (default 256M; at least 16 pages)\n"
"  --page-size SIZE   the cache's page size, a power of two 512..1M (default 4K)\n"
"  --dirty-ratio N (20), --dirty-background-ratio N (10): percent of the cache;\n"
"  --dirty-bytes SIZE, --dirty-background-bytes SIZE (0: the ratio's);\n"
"  --dirty-expire-centisecs N (3000); --dirty-writeback-centisecs N (500; 0:\n"
"                     no periodic writeback): the kernel's tunables, same meaning\n"
"  --trace FILE.csv   the 100 ms timeline: thresholds, dirty, pauses, each\n"
"                     device's dirty, bandwidth and throughput, operations per\n"
"                     second, the longest list-lock hold\n"
"  --plot FILE.svg    the timeline as a chart\n"
"  --json FILE        the report's figures as one JSON object (for scripts; -:\n"
"                     on stdout, the report on stderr)\n"
"  --lat-log FILE     dd, randwrite, randrw, jbod: every write's latency (fio's\n"
"                     log format: msec, nsec, 1, bytes); the report gives\n"
"                     p50/p99/max\n"
"  --quiet            no live status line (on a terminal), no layout message\n"
"  --keep             leave the files the workload wrote in DIR and on dir: and\n"
"                     rados: devices (default: removed at the end)\n"
"  --help             this text\n"
"\n"
"devices (every option: wbc_dev_add(3)):\n"
"  mem; model[:bw=SIZE,lat=TIME,iops=N,qd=N,...] (model:bw=200M,lat=1ms,qd=32);\n"
"  file:PATH (a file or block device) or dir:PATH (an existing directory),\n"
"  then ,qd=N,max_io=SIZE,direct=0; an NBD export (nbd://HOST[:PORT]/EXPORT,\n"
"  nbd+unix:///EXPORT?socket=PATH; then ,conns=N,window=fixed:N); a Ceph pool\n"
"  (rados:POOL[/PREFIX], then ,conf=PATH,id=NAME); stack:N/NAME (a stacked\n"
"  device over file NAME of the N-th --dev, from 0: writers write to it, not\n"
"  to the device under it; stack_throttle=global|local|direct).  Any spec\n"
"  takes the device tunables too: min_ratio=N, max_ratio=N, max_bytes=SIZE,\n"
"  strict_limit=0|1, on_error=retry|drop, retry_timeout=SECONDS (retry:\n"
"  writers fail once every write has failed that long; default 30); for\n"
"  experiments (wbcache lab), old policies: dirty_list=buckets|list,\n"
"  file_lock=page|file, max_inflight=N, chunk=bw|SIZE, throttle=current|2011;\n"
"  the model's seek=TIME, send=1 and discard=1\n"
"\n"
"exit status: 0; 1 the run failed (a write, the writeback, the layout, DIR,\n"
"the report or an output file at the end); 2 a bad workload, option, spec or\n"
"cache configuration, or an output file that cannot be written at the start\n"
"(one line says why); 3 --deadline passed; 130 SIGINT or SIGTERM: the run\n"
"stopped, reported, wrote back and removed its files (the same signal again:\n"
"ends it at once, its files left)\n");
}

/* @want: the values the option takes, told with the refusal (NULL: none) */
static int bad(const char *what, const char *val, const char *want)
{
	fprintf(stderr, "wbcache: bad value '%s' for %s%s%s%s\n", val, what, want ? " (" : "",
		want ? want : "", want ? ")" : "");
	return 2;
}

#define W_SIZE "a size: bytes, or with K, M, G or T"
#define W_SIZE1 "a size above 0: bytes, or with K, M, G or T"
#define W_TIME "above 0 and under 1000000 seconds: seconds, or with s, ms or us"

static int parse_u(const char *what, const char *s, uint64_t max, uint64_t *out,
		   const char *want)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	/* digits only: no sign, no space (strtoull takes both) */
	if (errno || end == s || *end || v > max || *s < '0' || *s > '9')
		return bad(what, s, want);
	*out = v;
	return 0;
}

static int parse_sz(const char *what, const char *s, uint64_t *out, const char *want)
{
	return wbc_parse_size(s, out) ? bad(what, s, want) : 0;
}

/* The long option whose code is @val. */
static const char *option_name(const struct option *lo, int val)
{
	for (const struct option *l = lo; l->name; l++)
		if (l->val == val)
			return l->name;
	return "?";
}

/*
 * A getopt error in one line, and the usage's exit status.  @c is ':' for
 * a missing value (optopt: the option's code), else '?': a value given to
 * an option that takes none (optopt: its code), an unknown short option
 * (optopt: the letter), or an unknown or ambiguous long one
 * (argv[optind - 1]).  Our long options' codes are above any letter.
 */
#define FIRST_LONG_CODE 256
static int bad_option(int c, char **argv, const struct option *lo)
{
	const char *see = "(see wbcache run --help)";
	if (c == ':') {
		fprintf(stderr, "wbcache run: option '--%s' needs a value %s\n",
			option_name(lo, optopt), see);
	} else if (optopt >= FIRST_LONG_CODE) {
		fprintf(stderr, "wbcache run: option '--%s' takes no value %s\n",
			option_name(lo, optopt), see);
	} else if (optopt) {
		fprintf(stderr, "wbcache run: unknown option '-%c' %s\n", optopt, see);
	} else {
		/* ambiguous: the start of several options' names */
		const char *arg = argv[optind - 1], *name = arg + strspn(arg, "-");
		size_t len = strcspn(name, "="), matches = 0;
		for (const struct option *l = lo; l->name; l++)
			matches += len && !strncmp(l->name, name, len);
		fprintf(stderr, "wbcache run: %s option '%s' %s\n",
			matches > 1 ? "ambiguous" : "unknown", arg, see);
	}
	return 2;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { O_DEV = FIRST_LONG_CODE, O_DIR, O_THREADS, O_SIZE, O_TIME, O_BS, O_FSZ, O_FILES, O_NOFSYNC,
	       O_MEM, O_PS, O_DR, O_DBR, O_DB, O_DBB, O_EXP, O_WB, O_TRACE, O_PLOT, O_JSON, O_QUIET,
	       O_KEEP, O_NOLAYOUT, O_RWMIX, O_FSYNC_EVERY, O_DEADLINE, O_LATLOG, O_HELP };
	static const struct option lo[] = {
		{ "dev", 1, 0, O_DEV }, { "dir", 1, 0, O_DIR }, { "threads", 1, 0, O_THREADS },
		{ "size", 1, 0, O_SIZE }, { "time", 1, 0, O_TIME }, { "bs", 1, 0, O_BS },
		{ "file-size", 1, 0, O_FSZ }, { "files", 1, 0, O_FILES }, { "rwmix", 1, 0, O_RWMIX },
		{ "fsync-every", 1, 0, O_FSYNC_EVERY }, { "deadline", 1, 0, O_DEADLINE },
		{ "lat-log", 1, 0, O_LATLOG },
		{ "no-fsync", 0, 0, O_NOFSYNC }, { "no-layout", 0, 0, O_NOLAYOUT }, { "mem", 1, 0, O_MEM }, { "page-size", 1, 0, O_PS },
		{ "dirty-ratio", 1, 0, O_DR }, { "dirty-background-ratio", 1, 0, O_DBR },
		{ "dirty-bytes", 1, 0, O_DB }, { "dirty-background-bytes", 1, 0, O_DBB },
		{ "dirty-expire-centisecs", 1, 0, O_EXP },
		{ "dirty-writeback-centisecs", 1, 0, O_WB }, { "trace", 1, 0, O_TRACE },
		{ "plot", 1, 0, O_PLOT }, { "json", 1, 0, O_JSON }, { "quiet", 0, 0, O_QUIET }, { "keep", 0, 0, O_KEEP },
		{ "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
	};
	memset(o, 0, sizeof(*o));
	wbc_config_init(&o->cfg);
	o->cfg.mem_bytes = 256ull << 20;
	o->dir = getenv("WBCACHE_DIR");
	if (!o->dir || !*o->dir)
		o->dir = default_dir;
	o->fsync_end = true;
	o->demo = true;
	int first = 1;
	if (argc > 1 && argv[1][0] != '-') {
		unsigned i;
		for (i = 0; i < WL_NR && strcmp(argv[1], wl_names[i]); i++)
			;
		if (i == WL_NR) {
			fprintf(stderr, "wbcache: unknown workload '%s' (dd, randwrite, fsmark, jbod, randrw)\n",
				argv[1]);
			return 2;
		}
		o->wl = i;
		o->demo = false;
		first = 2;
	}
	uint64_t v, threads = 0, files = 0, bs = 0, fsz = 0, rwmix = 30;
	double t = 0;
	int c, rc = 0;
	optind = first;
	opterr = 0;   /* one line of our own (bad_option), not getopt's and the usage */
	/* ":": a missing value is told apart from an unknown option */
	uint64_t given = 0;   /* bit (code - O_DEV): the options given */
	while (!rc && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		if (c >= O_DEV && c < O_HELP)
			given |= 1ull << (c - O_DEV);
		switch (c) {
		case O_DEV:
			if (o->ndev == RUN_MAX_DEVS) {
				fprintf(stderr, "wbcache: at most %d devices\n", RUN_MAX_DEVS);
				return 2;
			}
			o->devs[o->ndev++] = optarg;
			break;
		case O_DIR: o->dir = optarg; o->dir_given = true; if (!*optarg) rc = bad("--dir", optarg, "a directory"); break;
		case O_THREADS: rc = parse_u("--threads", optarg, 1024, &threads, "1..1024"); if (!rc && !threads) rc = bad("--threads", optarg, "1..1024"); break;
		case O_SIZE: rc = parse_sz("--size", optarg, &o->size, W_SIZE1); if (!rc && !o->size) rc = bad("--size", optarg, W_SIZE1); break;
		case O_TIME:
			if (wbc_parse_time(optarg, &t) || !(t > 0 && t < 1e6))
				rc = bad("--time", optarg, W_TIME);
			break;
		case O_BS: rc = parse_sz("--bs", optarg, &bs, "a size from 1 byte to 1G"); if (!rc && (!bs || bs > (1u << 30))) rc = bad("--bs", optarg, "a size from 1 byte to 1G"); break;
		case O_FSZ: rc = parse_sz("--file-size", optarg, &fsz, W_SIZE1); if (!rc && !fsz) rc = bad("--file-size", optarg, W_SIZE1); break;
		case O_FILES: rc = parse_u("--files", optarg, 1ull << 32, &files, "1..4294967296"); if (!rc && !files) rc = bad("--files", optarg, "1..4294967296"); break;
		case O_NOFSYNC: o->fsync_end = false; break;
		case O_RWMIX: rc = parse_u("--rwmix", optarg, 100, &rwmix, "0..100"); break;
		case O_DEADLINE:
			if (wbc_parse_time(optarg, &o->deadline_s) ||
			    !(o->deadline_s > 0 && o->deadline_s < 1e6))
				rc = bad("--deadline", optarg, W_TIME);
			break;
		case O_FSYNC_EVERY: rc = parse_sz("--fsync-every", optarg, &o->fsync_every, W_SIZE1); if (!rc && !o->fsync_every) rc = bad("--fsync-every", optarg, W_SIZE1); break;
		case O_MEM: rc = parse_sz("--mem", optarg, &o->cfg.mem_bytes, W_SIZE); break;
		case O_PS: rc = parse_sz("--page-size", optarg, &v, "a power of two from 512 to 1M"); if (!rc && v > (1u << 20)) rc = bad("--page-size", optarg, "a power of two from 512 to 1M"); o->cfg.page_size = (uint32_t)v; break;
		case O_DR: rc = parse_u("--dirty-ratio", optarg, 100, &v, "0..100"); o->cfg.dirty_ratio = (uint32_t)v; break;
		case O_DBR: rc = parse_u("--dirty-background-ratio", optarg, 100, &v, "0..100"); o->cfg.dirty_background_ratio = (uint32_t)v; break;
		case O_DB: rc = parse_sz("--dirty-bytes", optarg, &o->cfg.dirty_bytes, W_SIZE); break;
		case O_DBB: rc = parse_sz("--dirty-background-bytes", optarg, &o->cfg.dirty_background_bytes, W_SIZE); break;
		case O_EXP: rc = parse_u("--dirty-expire-centisecs", optarg, UINT32_MAX, &v, "0..4294967295"); o->cfg.dirty_expire_centisecs = (uint32_t)v; break;
		case O_WB: rc = parse_u("--dirty-writeback-centisecs", optarg, UINT32_MAX, &v, "0..4294967295"); o->cfg.dirty_writeback_centisecs = (uint32_t)v; break;
		case O_TRACE: o->trace = optarg; break;
		case O_LATLOG: o->lat_log = optarg; break;
		case O_PLOT: o->plot = optarg; break;
		case O_JSON: o->json = optarg; break;
		case O_QUIET: o->quiet = true; break;
		case O_NOLAYOUT: o->no_layout = true; break;
		case O_KEEP: o->keep = true; break;
		case 'h':
		case O_HELP: run_usage(stdout); return 1;
		default: return bad_option(c, argv, lo);
		}
	}
	if (rc)
		return rc;
	if (optind < argc) {
		/* `run --dev mem dd`: the workload is the first argument only
		 * (it said "unexpected argument 'dd'") */
		unsigned i;
		for (i = 0; o->demo && i < WL_NR && strcmp(argv[optind], wl_names[i]); i++)
			;
		if (o->demo && i < WL_NR)
			fprintf(stderr, "wbcache: the workload '%s' comes first: wbcache run %s "
				"[options]\n", argv[optind], argv[optind]);
		else
			fprintf(stderr, "wbcache: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	/* an option the workload would ignore is refused, not dropped */
	static const struct { int code; const char *name; unsigned wls; } only[] = {
		{ O_SIZE, "--size", 1u << WL_DD },
		{ O_FILES, "--files", 1u << WL_FSMARK },
		{ O_RWMIX, "--rwmix", 1u << WL_RANDRW },
		{ O_FSZ, "--file-size", ~(1u << WL_DD) },
		{ O_FSYNC_EVERY, "--fsync-every", ~(1u << WL_FSMARK) },
		{ O_LATLOG, "--lat-log", ~(1u << WL_FSMARK) },
		{ O_NOFSYNC, "--no-fsync", ~(1u << WL_FSMARK) },
		{ O_NOLAYOUT, "--no-layout", 1u << WL_RANDWRITE | 1u << WL_RANDRW | 1u << WL_JBOD },
	};
	for (size_t i = 0; i < sizeof(only) / sizeof(only[0]); i++)
		if ((given >> (only[i].code - O_DEV) & 1) && !(only[i].wls >> o->wl & 1)) {
			char list[64] = "";
			for (unsigned w = 0; w < WL_NR; w++)
				if (only[i].wls >> w & 1)
					snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
						 list[0] ? ", " : "", wl_names[w]);
			fprintf(stderr, "wbcache: %s does not apply to %s%s (only to %s)\n", only[i].name,
				wl_names[o->wl], o->demo ? ", the demonstration" : "", list);
			return 2;
		}
	o->time_s = t;
	o->rwmix = (unsigned)rwmix;
	o->threads = threads ? (unsigned)threads : (o->wl == WL_JBOD ? 2 : 1);
	o->bs = bs ? bs : (o->wl == WL_DD ? 1u << 20 : 4096);
	o->file_size = fsz ? fsz : (o->wl == WL_FSMARK ? 4096 : 1ull << 30);
	o->files = files ? files : 10000;
	if (!o->size)
		o->size = 1ull << 30;
	if (!t && WL_RANDOM(o->wl))
		o->time_s = 10;
	/* randrw's reads read the laid-out data: in empty files they read
	 * past the end, 0 bytes each, and were counted as reads */
	if (o->wl == WL_RANDRW && o->no_layout && o->rwmix < 100) {
		fprintf(stderr, "wbcache: randrw reads the laid-out files, and --no-layout leaves "
			"them empty (its reads would read nothing): lay them out, or --rwmix 100\n");
		return 2;
	}
	if (WL_RANDOM(o->wl) && o->file_size < o->bs) {
		fprintf(stderr, "wbcache: --file-size must be at least --bs\n");
		return 2;
	}
	/* fsmark writes files: a device of one file is refused before it
	 * is opened (a file: device's open makes its file) */
	for (unsigned d = 0; o->wl == WL_FSMARK && d < o->ndev; d++)
		if (!strncmp(o->devs[d], "file:", 5) || !strncmp(o->devs[d], "nbd", 3)) {
			fprintf(stderr, "wbcache: fsmark needs a device of files, and %.*s holds one\n",
				(int)strcspn(o->devs[d], ","), o->devs[d]);
			return 2;
		}
	/* two devices over one store of one file (a file:, a stacked
	 * device's lower file, an NBD export) would write over each other:
	 * the same spec, or two file: paths of one file (file:/a/f and
	 * file:/a//f, a link) */
	for (unsigned d = 0; d < o->ndev; d++)
		for (unsigned k = 0; k < d; k++) {
			const char *a = o->devs[d], *b = o->devs[k];
			size_t la = strcspn(a, ","), lb = strcspn(b, ",");
			bool one_file = !strncmp(a, "file:", 5) || !strncmp(a, "stack:", 6) ||
					!strncmp(a, "nbd", 3);
			bool same = one_file && la == lb && !strncmp(a, b, la);
			if (!same && !strncmp(a, "stack:", 6) && !strncmp(b, "stack:", 6)) {
				/* stack:00/img is stack:0/img: the device number
				 * compared, not its digits */
				char *ea, *eb;
				unsigned long na = strtoul(a + 6, &ea, 10), nb = strtoul(b + 6, &eb, 10);
				size_t ra = la - (size_t)(ea - a), rb = lb - (size_t)(eb - b);
				same = ea != a + 6 && eb != b + 6 && na == nb && ra == rb &&
				       !strncmp(ea, eb, ra);
			}
			if (!same && !strncmp(a, "file:", 5) && !strncmp(b, "file:", 5)) {
				char *pa = strndup(a + 5, la - 5), *pb = strndup(b + 5, lb - 5);
				struct stat sa, sb;
				same = pa && pb && !stat(pa, &sa) && !stat(pb, &sb) &&
				       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
				free(pa);
				free(pb);
			}
			if (same) {
				fprintf(stderr, "wbcache: --dev %.*s is given twice: the two devices "
					"would write over each other\n", (int)la, a);
				return 2;
			}
		}
	return 0;
}

/*
 * Workers on a device of one file write regions of it, one each (dd: its
 * share of --size; randwrite, jbod: --file-size), one after another; the
 * device must hold them all.  fsmark needs files.  0, or -EINVAL with a
 * message.
 */
static int place_one_file_workers(void)
{
	const struct opts *o = &R.o;
	for (unsigned d = 0; d < o->ndev; d++) {
		if (!dev_one_file(R.dev[d]))
			continue;
		if (o->wl == WL_FSMARK) {
			fprintf(stderr, "wbcache: fsmark needs a device of files, and %s holds one\n",
				o->devs[d]);
			return -EINVAL;
		}
		uint64_t region = o->wl == WL_DD ? o->size / R.nw : o->file_size, end = 0;
		bool over = false;   /* past the largest file (2^63 - 1 bytes) */
		unsigned k = 0;
		for (unsigned i = 0; i < R.nw; i++)
			if (R.w[i].dev_idx == d) {
				R.w[i].one_file = true;
				/* the last dd writer's share is the largest */
				uint64_t n = o->wl == WL_DD ? dd_share(i) : region;
				/* --file-size 8388609T --threads 2 wrapped: the file
				 * was made 2 TiB and every write failed (EFBIG) */
				over |= __builtin_mul_overflow((uint64_t)k, region, &R.w[i].base) ||
					__builtin_add_overflow(R.w[i].base, n, &end) || end > INT64_MAX;
				k++;
			}
		if (over) {
			fprintf(stderr, "wbcache: %s: the workers' regions (--size, --file-size, "
				"--threads) end past the largest file, 2^63 bytes\n", o->devs[d]);
			return -EINVAL;
		}
		/* no writer of its own: a device under a stacked one, whose
		 * file that device holds (open direct: an open here was
		 * refused, EBUSY, said as a size of -16 bytes) */
		if (!k)
			continue;
		/* a file grows to hold them; a device (an NBD export) cannot */
		wbc_file *f;
		int err = wbc_file_open(R.dev[d], "", 0, &f);
		if (err) {
			fprintf(stderr, "wbcache: %s: cannot open its file: %s\n", o->devs[d],
				wbc_strerror(err));
			return -EINVAL;
		}
		int64_t size = wbc_file_size(f);
		if (size >= 0 && (uint64_t)size < end)
			err = wbc_truncate(f, end);
		wbc_file_close(f);
		if (err || size < 0) {
			fprintf(stderr, "wbcache: %s holds %lld bytes, the workers' regions need %llu "
				"(--size, --file-size, --threads): %s\n", o->devs[d], (long long)size,
				(unsigned long long)end, wbc_strerror(err ? err : (int)size));
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * --deadline passed with writers (or their final fsync) still running:
 * stop the writers and the sampler, write what the run did so far (the
 * trace, the plot and the --json figures, "finished": false; from the
 * counters the writers keep atomically, not their own), say so, and end
 * the process without waiting for them or closing the cache.
 */
static _Noreturn void give_up(pthread_t sampler)
{
	const struct opts *o = &R.o;
	double secs = now_s() - R.t0;
	atomic_store(&R.stop, true);
	atomic_store(&R.abandon, true);
	pthread_join(sampler, NULL);
	uint64_t reads = atomic_load(&R.reads_done);
	uint64_t bytes = atomic_load(&R.bytes_done), ops = atomic_load(&R.ops_done);
	printf("\n%s: did not finish in %g s (--deadline): %.1f MiB written, %llu operations; "
	       "giving up\n", wl_names[o->wl], o->deadline_s, (double)bytes / MiB,
	       (unsigned long long)ops);
	if (o->json) {
		/* ops are writes, as in a finished run's: the reads apart */
		struct json_fig j = { .unfinished = true, .secs = secs, .bytes = bytes,
				      .ops = ops - reads, .reads = reads };
		write_json(o->json, &j);
	}
	if (o->lat_log)
		lat_log_write();
	int e;
	if (o->trace && (e = trace_csv(o->trace, o->trace_nofollow, R.s, R.ns)))
		out_failed("--trace", o->trace, -e);
	if (o->plot && (e = plot_svg(o->plot, o->plot_nofollow, "wbcache run (did not finish)", R.s,
				     R.ns, o->devs)))
		out_failed("--plot", o->plot, -e);
	/* a report or an output file that could not be written is the
	 * run's failure, as for a finished run (it exited 3, silent, with
	 * its report on a full disk) */
	flush_report();
	if (R.out_errno || ferror(stdout))
		fprintf(stderr, "wbcache: writing the report: %s\n",
			strerror(R.out_errno ? R.out_errno : EIO));
	_exit(R.out_errno || ferror(stdout) || R.out_err ? 1 : 3);
}

/* The files the workload wrote into directories: DIR (the default device)
 * and every dir:PATH[,opts] --dev (the path ends at a comma), and the
 * remote devices' (unless --keep). */
static void remove_files(const struct opts *o)
{
	for (unsigned d = 0; d < o->ndev && !o->keep; d++) {
		if (strncmp(o->devs[d], "dir:", 4))
			continue;
		char *path = strndup(o->devs[d] + 4, strcspn(o->devs[d] + 4, ","));
		int e = path ? remove_run_files(path) : -ENOMEM;
		if (e)
			fprintf(stderr, "wbcache: cannot remove this run's files from %s: %s\n",
				path ? path : o->devs[d] + 4, strerror(-e));
		free(path);
	}
	if (!o->keep)
		remove_remote_files(o);
}

static int run_cmd(int argc, char **argv);

int cmd_run(int argc, char **argv)
{
	int rc = run_cmd(argc, argv);
	/* refused (exit 2: the run did not start, nothing was written): the
	 * DIR made for it goes too (a bad --dev or --mem left an empty
	 * /var/tmp/wbcache, or --dir's directories, behind) */
	if (rc == 2)
		unmake_dir(R.o.dir, R.dir_made);
	return rc;
}

static int run_cmd(int argc, char **argv)
{
	memset(&R, 0, sizeof(R));
	struct opts *o = &R.o;
	/* a report to a pipe whose reader has gone (| head) is an error of
	 * the report (EPIPE, exit 1 at the end), not the end of the process:
	 * the run still writes back, removes its files and writes its outputs */
	signal(SIGPIPE, SIG_IGN);
	/* a dir: file holds a descriptor until its writeback: fs_mark's
	 * thousands of closed dirty files need more than the usual soft
	 * limit of 1024 (it failed at the 1,017th file) */
	struct rlimit nofile;
	if (!getrlimit(RLIMIT_NOFILE, &nofile) && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	int rc = parse_opts(argc, argv, o);
	if (rc)
		return rc == 1 ? 0 : rc;
	static char dirspec[4200], tracebuf[4200], plotbuf[4200];
	/* discard=1: the model keeps sizes only (jbod only writes): eight
	 * default 1 GiB files held 8 GiB of the machine's memory */
	static const char *jbod_default[] = { "model:bw=25M,discard=1", "model:bw=50M,discard=1",
					      "model:bw=100M,discard=1", "model:bw=200M,discard=1" };
	bool uses_dir = false;
	if (!o->ndev) {
		if (o->wl == WL_JBOD) {
			for (unsigned i = 0; i < 4; i++)
				o->devs[o->ndev++] = jbod_default[i];
		} else {
			/* DIR becomes a device spec, where a comma starts the
			 * options (--dir /tmp/x,direct=0 wrote into /tmp/x):
			 * refused before anything is made */
			if (strchr(o->dir, ',')) {
				fprintf(stderr, "wbcache: %s %s: a comma cannot be in the data "
					"directory's name (it would start device options)\n",
					o->dir_given ? "--dir" : "$WBCACHE_DIR", o->dir);
				return 2;
			}
			snprintf(dirspec, sizeof(dirspec), "dir:%s", o->dir);
			o->devs[o->ndev++] = dirspec;
			uses_dir = true;
		}
	}
	if (o->dir_given && !uses_dir && !o->demo) {
		/* it would name nothing this run writes */
		fprintf(stderr, "wbcache: --dir is the default device's directory, and %s: a "
			"directory device is --dev dir:PATH\n",
			o->ndev && o->devs[0] != jbod_default[0] ? "--dev names the devices" :
			"jbod runs on its own model devices");
		return 2;
	}
	if (o->demo) {
		if (!o->trace) {
			snprintf(tracebuf, sizeof(tracebuf), "%s/run-trace.csv", o->dir);
			o->trace = tracebuf;
			o->trace_nofollow = true;
		}
		if (!o->plot) {
			snprintf(plotbuf, sizeof(plotbuf), "%s/run-plot.svg", o->dir);
			o->plot = plotbuf;
			o->plot_nofollow = true;
		}
	}
	if (uses_dir || o->demo) {
		int e = mkdir_p_made(o->dir, &R.dir_made);
		if (e == -ENOTDIR) {
			fprintf(stderr, "wbcache: --dir %s: not a directory\n", o->dir);
			return 2;
		}
		if (e) {
			fprintf(stderr, "wbcache: cannot create %s: %s\n", o->dir, strerror(-e));
			/* the parents it made before a deeper one failed (a
			 * file system out of inodes): the caller removes them
			 * only for a refused run (2) */
			unmake_dir(o->dir, R.dir_made);
			return 1;
		}
		/* the default DIR is a name in a directory every user may
		 * write to: one another user made first (a directory of
		 * theirs, or a link to one) would have this run's files
		 * written where they choose */
		struct stat dst;
		const char *bad = NULL;
		if (o->dir != default_dir)
			;
		else if (lstat(o->dir, &dst))
			bad = strerror(errno);
		else if (S_ISLNK(dst.st_mode))
			bad = "a symbolic link";
		else if (!S_ISDIR(dst.st_mode) || dst.st_uid != geteuid())
			bad = "another user's";
		if (bad) {
			fprintf(stderr, "wbcache: %s: %s, not a directory of this user's: another "
				"user may have made it; give --dir\n", o->dir, bad);
			return 2;
		}
	}
	/* the files the run writes at its end can be written: known before
	 * the run, not after it */
	const char *outs[][2] = { { "--trace", o->trace }, { "--plot", o->plot },
				  { "--json", o->json }, { "--lat-log", o->lat_log } };
	const bool nofollow[4] = { o->trace_nofollow, o->plot_nofollow, false, false };
	/* each output's file (st_dev, st_ino), and whether this check made it:
	 * those made are removed once all are checked, so that a second name
	 * of one file (./a.json beside a.json, a link) finds the first */
	struct stat ost[4];
	bool made[4] = { false }, have[4] = { false };
	rc = 0;
	for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]) && !rc; i++) {
		if (!outs[i][1])
			continue;
		if (!strcmp(outs[i][1], "-")) {
			/* --json -: the JSON on stdout, the report on stderr */
			if (strcmp(outs[i][0], "--json")) {
				fprintf(stderr, "wbcache: %s -: only --json writes to stdout\n",
					outs[i][0]);
				return 2;
			}
			fflush(stdout);
			if ((R.json_fd = dup(STDOUT_FILENO)) < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
				fprintf(stderr, "wbcache: --json -: %s\n", strerror(errno));
				rc = 2;
			}
			continue;
		}
		/* one that is not there is made and removed again: a run
		 * refused later leaves no empty file; O_NONBLOCK: a FIFO
		 * without a reader says ENXIO instead of stopping here */
		const int how = O_WRONLY | O_CLOEXEC | O_NONBLOCK | (nofollow[i] ? O_NOFOLLOW : 0);
		int fd = open(outs[i][1], how);
		if (fd < 0 && errno == ENOENT) {
			fd = open(outs[i][1], how | O_CREAT | O_EXCL, 0644);
			made[i] = fd >= 0;
		}
		if (fd < 0 && nofollow[i] && errno == ELOOP) {
			fprintf(stderr, "wbcache: %s %s: a symbolic link, not followed (the "
				"demonstration's files in DIR; give %s FILE to write elsewhere)\n",
				outs[i][0], outs[i][1], outs[i][0]);
			rc = 2;
			break;
		}
		if (fd < 0) {
			fprintf(stderr, "wbcache: %s %s: cannot write it: %s\n", outs[i][0], outs[i][1],
				strerror(errno));
			rc = 2;
			break;
		}
		have[i] = !fstat(fd, &ost[i]);
		close(fd);
		for (size_t k = 0; k < i && !rc; k++)
			if (have[k] && have[i] && ost[k].st_dev == ost[i].st_dev &&
			    ost[k].st_ino == ost[i].st_ino) {
				fprintf(stderr, "wbcache: %s %s and %s %s name the same file\n",
					outs[k][0], outs[k][1], outs[i][0], outs[i][1]);
				rc = 2;
			}
	}
	/* nor the file of a file: device (--json over the image the run
	 * writes to replaced it with the report at the end) */
	for (unsigned d = 0; d < o->ndev && !rc; d++) {
		if (strncmp(o->devs[d], "file:", 5))
			continue;
		char *p = strndup(o->devs[d] + 5, strcspn(o->devs[d] + 5, ","));
		struct stat ds;
		for (size_t i = 0; p && i < sizeof(outs) / sizeof(outs[0]) && !rc; i++)
			if (have[i] && !stat(p, &ds) && ds.st_dev == ost[i].st_dev &&
			    ds.st_ino == ost[i].st_ino) {
				fprintf(stderr, "wbcache: %s %s names the file of --dev %s\n",
					outs[i][0], outs[i][1], o->devs[d]);
				rc = 2;
			}
		free(p);
	}
	for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++)
		if (made[i])
			unlink(outs[i][1]);
	if (rc)
		return rc;
	/* the open backs the whole arena with memory, zeroed: seconds for
	 * a cache of several GiB, which a terminal should not sit through
	 * in silence */
	if (!o->quiet && o->cfg.mem_bytes >= (4ull << 30) && isatty(STDERR_FILENO))
		fprintf(stderr, "wbcache: allocating the %.1f GiB cache...\n",
			(double)o->cfg.mem_bytes / (1024.0 * MiB));
	int err = wbc_cache_open(&o->cfg, &R.cache);
	if (err == -ENOMEM) {
		fprintf(stderr, "wbcache: cannot allocate a cache of %.0f MiB: %s (--mem may "
			"not exceed the machine's memory, nor its control group's limit)\n", (double)o->cfg.mem_bytes / MiB,
			wbc_strerror(err));
		return 2;
	}
	if (err) {
		const char *why = wbc_config_check(&o->cfg);
		fprintf(stderr, "wbcache: bad cache configuration: %s\n",
			why ? why : wbc_strerror(err));
		return 2;
	}
	for (unsigned d = 0; d < o->ndev; d++) {
		char msg[256];
		err = wbc_dev_add_msg(R.cache, o->devs[d], &R.dev[d], msg, sizeof(msg));
		if (err) {
			fprintf(stderr, "wbcache: %s\n", msg[0] ? msg : wbc_strerror(err));
			wbc_cache_close(R.cache);
			return 2;
		}
	}
	/* writers write to the devices no stacked device of the run stands
	 * on (stack:N/NAME: device N is under it) */
	bool *under = R.under;
	unsigned targets[RUN_MAX_DEVS], nt = 0;
	for (unsigned d = 0; d < o->ndev; d++)
		if (!strncmp(o->devs[d], "stack:", 6)) {
			unsigned long n = strtoul(o->devs[d] + 6, NULL, 10);
			if (n < o->ndev)
				under[n] = true;
		}
	for (unsigned d = 0; d < o->ndev; d++)
		if (!under[d])
			targets[nt++] = d;
	bool one_file[RUN_MAX_DEVS];
	for (unsigned d = 0; d < o->ndev; d++) {
		one_file[d] = dev_one_file(R.dev[d]);
		if (one_file[d] && !under[d] && o->wl == WL_FSMARK) {
			fprintf(stderr, "wbcache: fsmark needs devices of many files; device %u "
				"(%s) holds one\n", d, o->devs[d]);
			wbc_cache_close(R.cache);
			return 2;
		}
	}
	R.nw = o->wl == WL_JBOD ? o->threads * nt : o->threads;
	if (o->wl == WL_DD && o->size < R.nw) {
		fprintf(stderr, "wbcache: --size %llu gives a writer less than a byte (--threads %u)\n",
			(unsigned long long)o->size, R.nw);
		wbc_cache_close(R.cache);
		return 2;
	}
	R.w = calloc(R.nw, sizeof(*R.w));
	if (!R.w) {
		fprintf(stderr, "wbcache: %s\n", strerror(ENOMEM));
		wbc_cache_close(R.cache);
		return 1;
	}
	unsigned on_dev[RUN_MAX_DEVS] = { 0 };
	for (unsigned i = 0; i < R.nw; i++) {
		struct worker *w = &R.w[i];
		w->id = i;
		w->dev_idx = targets[o->wl == WL_JBOD ? i / o->threads : i % nt];
		w->dev = R.dev[w->dev_idx];
		w->one_file = one_file[w->dev_idx];
		/* the k-th writer of a one-file device: its region */
		uint64_t k = on_dev[w->dev_idx]++;
		if (w->one_file)
			w->base = k * (o->wl == WL_DD ? o->size / R.nw : o->file_size);
	}
	if ((err = place_one_file_workers())) {
		wbc_cache_close(R.cache);
		return 2;
	}
	/* from here on the run has files to remove: an interrupt stops it
	 * as its --time would, and it cleans up.  Before the header, which
	 * may wait on a full pipe: a SIGINT there, once it was seen, killed
	 * the run, its files left behind.  SA_RESTART: that write goes on
	 * (the run sees R.interrupted, not a report it failed to write:
	 * "Interrupted system call", exit 1), as any system call the
	 * signal meets in another thread */
	R.status_tty = !o->quiet && isatty(STDERR_FILENO);
	struct sigaction sa = { .sa_handler = on_interrupt, .sa_flags = SA_RESETHAND | SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* the header once the run is sure to start (exit 2 says it did not) */
	struct wbc_stats st;
	wbc_stats(R.cache, &st);
	/* a cache under 1 MiB (16 pages may be 64 KiB) in KiB: "0 MiB" said
	 * nothing */
	bool kib = st.mem_bytes < MiB;
	double unit = kib ? 1024.0 : (double)MiB;
	printf("wbcache run %s: %u thread(s), %u device(s), cache %.0f %s "
	       "(bg_thresh %.1f, setpoint %.1f, limit %.1f %s)\n",
	       wl_names[o->wl], R.nw, o->ndev, (double)st.mem_bytes / unit, kib ? "KiB" : "MiB",
	       (double)st.bg_thresh_bytes / unit, (double)st.setpoint_bytes / unit,
	       (double)st.limit_bytes / unit, kib ? "KiB" : "MiB");
	flush_report();
	if (WL_RANDOM(o->wl) && !o->no_layout && (err = layout())) {
		fprintf(stderr, "wbcache: laying out the files: %s\n",
			err == -EINTR ? "interrupted" : wbc_strerror(err));
		note_dirty();
		wbc_cache_close(R.cache);
		remove_files(o);
		return err == -EINTR ? 130 : 1;
	}
	note_dirty();
	pthread_t sampler;
	unsigned started = 0;
	int terr = 0;
	while (started < R.nw &&
	       !(terr = pthread_create(&R.w[started].th, NULL, worker_main, &R.w[started])))
		started++;
	/* the clock starts when every writer has filled its buffer (a
	 * 512 MiB one took as long as the writes): the headline's seconds,
	 * --time and --deadline are the writers' */
	pthread_mutex_lock(&gate_lock);
	while (!terr && R.ready < R.nw)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	if (!terr) {
		wbc_stats(R.cache, &st);
		R.st0 = st;
		wb_bytes0 = st.written_back_bytes;
		read_in0 = st.read_in_bytes;
		pauses0 = st.pauses;
		for (unsigned d = 0; d < o->ndev; d++) {
			struct wbc_dev_stats ds;
			wbc_dev_stats(R.dev[d], &ds);
			R.written0[d] = R.last_written[d] = ds.written_back_bytes;
		}
		wb_cpu0 = wb_threads_cpu(false);
		lib_cpu0 = any_rados() ? threads_cpu_mode("!", false) : 0;
		getrusage(RUSAGE_SELF, &ru0);
		wb_user0 = wb_threads_cpu(true);
		R.t0 = now_s();
	} else {
		atomic_store(&R.stop, true);
	}
	pthread_mutex_lock(&gate_lock);
	R.go = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	if (!terr && (terr = pthread_create(&sampler, NULL, sampler_main, NULL)))
		started = R.nw + 1;   /* every writer, and not the sampler */
	if (terr) {
		/* a run of fewer writers than asked is not the run asked for */
		unsigned nstarted = started < R.nw ? started : R.nw;
		atomic_store(&R.stop, true);
		for (unsigned i = 0; i < nstarted; i++)
			pthread_join(R.w[i].th, NULL);
		if (started > R.nw)
			fprintf(stderr, "wbcache: cannot start the sampler thread: %s\n", strerror(terr));
		else
			fprintf(stderr, "wbcache: cannot start writer thread %u of %u: %s\n",
				started + 1, R.nw, strerror(terr));
		wbc_cache_close(R.cache);
		remove_files(o);   /* the writers that started made theirs */
		return 1;
	}
	if (o->deadline_s > 0) {
		while (atomic_load(&R.workers_done) < R.nw) {
			if (now_s() - R.t0 >= o->deadline_s)
				give_up(sampler);   /* does not return */
			struct timespec ts = { 0, 10 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	for (unsigned i = 0; i < R.nw; i++)
		pthread_join(R.w[i].th, NULL);
	double secs = now_s() - R.t0;
	pthread_join(sampler, NULL);
	int werr = 0;
	const struct worker *wf = NULL;
	for (unsigned i = 0; i < R.nw; i++)
		if (R.w[i].err && !werr) {
			werr = R.w[i].err;
			wf = &R.w[i];
		}
	report(secs);
	flush_report();   /* before the close, which may take long (--no-fsync) */
	if (werr) {
		/* the operation, the file and the device: "No such file or
		 * directory" alone named none of them */
		char what[160];
		if (!wf->err_on_file)
			what[0] = '\0';
		else if (wf->one_file)
			snprintf(what, sizeof(what), " the device's file");
		else
			snprintf(what, sizeof(what), " file %s", wf->err_file);
		wbc_stats(R.cache, &st);
		fprintf(stderr, "wbcache: a writer failed: %s (thread %u %s%s on %s; "
			"%.1f MiB dirty, %.1f MiB of it at risk after failed writes)\n",
			wbc_strerror(werr), wf->id, wf->err_op ? wf->err_op : "writing", what,
			R.o.devs[wf->dev_idx],
			(double)(st.dirty_bytes + st.writeback_bytes) / MiB,
			(double)st.at_risk_bytes / MiB);
	}
	/* the close retries what failed until the device has failed for its
	 * retry_timeout (30 s by default): without a word it looked hung */
	wbc_stats(R.cache, &st);
	if (st.at_risk_bytes)
		fprintf(stderr, "wbcache: closing the cache: retrying the %.1f MiB at risk until "
			"written or the device has failed for its retry_timeout\n",
			(double)st.at_risk_bytes / MiB);
	note_dirty();
	int cerr = wbc_cache_close_stats(R.cache, &st);
	/* what was lost, in bytes below a MiB: "0.0 MiB lost" was said of
	 * 12 KiB lost, and of a close whose retries wrote everything */
	if (cerr && !st.lost_bytes)
		fprintf(stderr, "wbcache: writeback at close failed: %s (written again on a "
			"retry: no data lost)\n", wbc_strerror(cerr));
	else if (cerr && st.lost_bytes < (1u << 20))
		fprintf(stderr, "wbcache: writeback at close failed: %s (%llu bytes of written "
			"data lost)\n", wbc_strerror(cerr), (unsigned long long)st.lost_bytes);
	else if (cerr)
		fprintf(stderr, "wbcache: writeback at close failed: %s (%.1f MiB of written data "
			"lost)\n", wbc_strerror(cerr), (double)st.lost_bytes / MiB);
	if (o->trace) {
		int e = trace_csv(o->trace, o->trace_nofollow, R.s, R.ns);
		if (e)
			out_failed("--trace", o->trace, -e);
		else
			printf("trace: %s\n", o->trace);
	}
	if (o->plot) {
		char title[256];
		snprintf(title, sizeof(title), "wbcache run %s: %u thread(s), cache %.0f %s",
			 wl_names[o->wl], R.nw, (double)st.mem_bytes / unit, kib ? "KiB" : "MiB");
		int e = plot_svg(o->plot, o->plot_nofollow, title, R.s, R.ns, o->devs);
		if (e)
			out_failed("--plot", o->plot, -e);
		else
			printf("plot: %s\n", o->plot);
	}
	remove_files(o);
	for (unsigned i = 0; i < R.nw; i++) {
		free(R.w[i].pauses);
		free(R.w[i].fsyncs);
		for (unsigned k = 0; k < LAT_CHUNKS; k++)
			free(R.w[i].lats[k]);
	}
	free(R.w);
	free(R.s);
	/* the report reached its reader (a full disk, a closed pipe: not 0) */
	flush_report();
	if (R.out_errno || ferror(stdout)) {
		fprintf(stderr, "wbcache: writing the report: %s\n",
			strerror(R.out_errno ? R.out_errno : EIO));
		return 1;
	}
	if (atomic_load(&R.interrupted)) {
		fprintf(stderr, "wbcache: interrupted: the report is of what ran until then\n");
		return 130;
	}
	return werr || cerr || R.out_err ? 1 : 0;
}
