/*
 * nbdkit-wbcache-filter: wbcache's bounded, throttled write-back cache in
 * front of any nbdkit plugin.
 *
 *   nbdkit --filter=wbcache PLUGIN [wbcache-mem=256M] [...]
 *
 * One cache and one device per nbdkit process, opened at the first
 * client's .open (after nbdkit's fork: the engine's flusher and the
 * filter's workers are threads; and in a connection: a plugin may ask for
 * its export name or TLS state when a context opens, and the file plugin's
 * dir= mode crashed on a context opened outside one, in .after_fork).
 * The device's backend is written on the public backend interface
 * (wbcache_backend.h) and holds one file, "", the plugin's default
 * export: its submit() queues the engine's I/Os to worker threads
 * (wbcache-threads), which do them with next->pread/pwrite on a plugin
 * context of the filter's own (nbdkit_next_context_open, shared: the
 * workers serve no connection) and complete them in batches; its flush()
 * is the plugin's flush on that context.
 *
 * Clients: reads are wbc_pread (the cache, the plugin on a miss), writes
 * wbc_pwrite (throttled by the engine when the plugin cannot keep up),
 * FLUSH is wbc_fdatasync of the connection's handle (every dirty page of the
 * export written to the plugin, then the plugin flushed; a write error
 * since the connection's previous FLUSH is reported once), a FUA write
 * is wbc_pwrite and wbc_fsync_range of its range.  Zeroes are written
 * through the cache (can_zero = emulate), trim is not offered (the
 * cache cannot drop a range), extents are the plugin's after the range's
 * dirty data was written back.  Every connection shares the one cache,
 * and FLUSH writes back all of it, so multi-conn is offered.
 *
 * See doc/nbdkit-filter.md and nbdkit-wbcache-filter(1).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <wbcache.h>
#include <wbcache_backend.h>

#define MAX_THREADS 64
#define BATCH 8                      /* I/Os a worker takes at once, at most */
#define DEFAULT_MEM (256ull << 20)
#define DEFAULT_MAX_IO (4u << 20)
#define MAX_MAX_IO (32u << 20)       /* NBD's largest request */

/* ------------------------------------------------------------------ */
/* Parameters */

static struct wbc_config cfg;
static bool cfg_ready;
static char on_error[8] = "retry";
static double retry_timeout = -1;    /* < 0: the engine's default */
static unsigned nthreads = 16;           /* nbdkit's own default per connection */
static uint32_t max_io = DEFAULT_MAX_IO;
static char *stats_path;
static double stats_interval = 1.0;
static bool stats_interval_set;

static void cfg_defaults(void)
{
	if (cfg_ready)
		return;
	wbc_config_init(&cfg);
	cfg.mem_bytes = DEFAULT_MEM;
	cfg_ready = true;
}

/* Loads of the filter in this nbdkit: its state is the process's, one */
static int loads;

static void wbcache_load(void)
{
	loads++;
	cfg_defaults();
}

static char *default_name;   /* the plugin's default export (wbcache_default_export) */

static void wbcache_unload(void)
{
	free(stats_path);
	stats_path = NULL;
	free(default_name);
	default_name = NULL;
}

/* A size with an optional K/M/G/T suffix, within [lo, hi]. */
static int parse_size(const char *key, const char *value, uint64_t lo, uint64_t hi,
		      uint64_t *out)
{
	uint64_t v;
	if (wbc_parse_size(value, &v)) {
		nbdkit_error("%s: '%s' is not a size (a number with an optional K, M, G or T suffix)",
			     key, value);
		return -1;
	}
	if (v < lo || v > hi) {
		nbdkit_error("%s: %s is out of range (%" PRIu64 " .. %" PRIu64 " bytes)", key, value,
			     lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_u32(const char *key, const char *value, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint32_t v;
	if (nbdkit_parse_uint32_t(key, value, &v) == -1)
		return -1;
	if (v < lo || v > hi) {
		nbdkit_error("%s: %s is out of range (%" PRIu32 " .. %" PRIu32 ")", key, value, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_seconds(const char *key, const char *value, double lo, double *out)
{
	double v;
	if (wbc_parse_time(value, &v)) {
		nbdkit_error("%s: '%s' is not a duration (seconds: \"30\", \"0.5\", \"250ms\")",
			     key, value);
		return -1;
	}
	/* a duration, but too short or too long: said so (it said "0" was
	 * not a duration) */
	if (v < lo || v > 86400.0 * 365) {
		nbdkit_error("%s: '%s' is out of range (%g s .. a year)", key, value, lo);
		return -1;
	}
	*out = v;
	return 0;
}

static int wbcache_config(nbdkit_next_config *next, nbdkit_backend *nxdata, const char *key,
			  const char *value)
{
	cfg_defaults();
	uint64_t v64;
	uint32_t v32;
	if (strcmp(key, "wbcache-mem") == 0) {
		if (parse_size(key, value, 1, UINT64_MAX, &v64))
			return -1;
		cfg.mem_bytes = v64;
	} else if (strcmp(key, "wbcache-page-size") == 0) {
		if (parse_size(key, value, 512, 1u << 20, &v64))
			return -1;
		if (v64 & (v64 - 1)) {
			nbdkit_error("%s: %s is not a power of two", key, value);
			return -1;
		}
		cfg.page_size = (uint32_t)v64;
	} else if (strcmp(key, "wbcache-dirty-ratio") == 0) {
		if (parse_u32(key, value, 0, 100, &v32))
			return -1;
		cfg.dirty_ratio = v32;
	} else if (strcmp(key, "wbcache-dirty-bytes") == 0) {
		if (parse_size(key, value, 0, UINT64_MAX, &v64))
			return -1;
		cfg.dirty_bytes = v64;
	} else if (strcmp(key, "wbcache-dirty-background-ratio") == 0) {
		if (parse_u32(key, value, 0, 100, &v32))
			return -1;
		cfg.dirty_background_ratio = v32;
	} else if (strcmp(key, "wbcache-dirty-background-bytes") == 0) {
		if (parse_size(key, value, 0, UINT64_MAX, &v64))
			return -1;
		cfg.dirty_background_bytes = v64;
	} else if (strcmp(key, "wbcache-dirty-expire-centisecs") == 0) {
		if (parse_u32(key, value, 0, UINT32_MAX, &v32))
			return -1;
		cfg.dirty_expire_centisecs = v32;
	} else if (strcmp(key, "wbcache-dirty-writeback-centisecs") == 0) {
		if (parse_u32(key, value, 0, UINT32_MAX, &v32))
			return -1;
		cfg.dirty_writeback_centisecs = v32;
	} else if (strcmp(key, "wbcache-on-error") == 0) {
		if (strcmp(value, "retry") && strcmp(value, "drop")) {
			nbdkit_error("%s: '%s': expected retry or drop", key, value);
			return -1;
		}
		snprintf(on_error, sizeof(on_error), "%s", value);
	} else if (strcmp(key, "wbcache-retry-timeout") == 0) {
		if (parse_seconds(key, value, 0, &retry_timeout))
			return -1;
	} else if (strcmp(key, "wbcache-threads") == 0) {
		if (parse_u32(key, value, 1, MAX_THREADS, &v32))
			return -1;
		nthreads = v32;
	} else if (strcmp(key, "wbcache-max-io") == 0) {
		if (parse_size(key, value, 512, MAX_MAX_IO, &v64))
			return -1;
		max_io = (uint32_t)v64;
	} else if (strcmp(key, "wbcache-stats") == 0) {
		if (!value[0]) {
			nbdkit_error("%s: the path is empty", key);
			return -1;
		}
		/* absolute: nbdkit without -f changes to / when it forks */
		char *p = nbdkit_absolute_path(value);
		if (!p)
			return -1;
		free(stats_path);
		stats_path = p;
	} else if (strcmp(key, "wbcache-stats-interval") == 0) {
		if (parse_seconds(key, value, 0.001, &stats_interval))
			return -1;
		stats_interval_set = true;
	} else if (strncmp(key, "wbcache-", 8) == 0) {
		nbdkit_error("unknown parameter %s (nbdkit --filter=wbcache PLUGIN --help lists them)",
			     key);
		return -1;
	} else {
		return next(nxdata, key, value);
	}
	return 0;
}

/* The engine's checks of the whole configuration (wbc_cache_open), made
 * here so that a bad combination fails before nbdkit forks. */
static int wbcache_config_complete(nbdkit_next_config_complete *next, nbdkit_backend *nxdata)
{
	if (loads > 1) {
		nbdkit_error("wbcache: the filter is given more than once (--filter=wbcache): one "
			     "cache per nbdkit");
		return -1;
	}
	cfg_defaults();
	uint64_t ps = cfg.page_size;
	const char *why = wbc_config_check(&cfg);
	if (why) {
		nbdkit_error("wbcache: bad cache configuration (wbcache-mem, wbcache-page-size, "
			     "wbcache-dirty-*): %s", why);
		return -1;
	}
	if (max_io % ps) {
		nbdkit_error("wbcache-max-io: %" PRIu32 " is not a multiple of the page size (%" PRIu64 ")",
			     max_io, ps);
		return -1;
	}
	if (stats_path) {
		/* written by a rename from PATH.tmp: that must be possible */
		char tmp[4096];
		if (snprintf(tmp, sizeof(tmp), "%s.tmp", stats_path) >= (int)sizeof(tmp)) {
			nbdkit_error("wbcache-stats: the path is too long");
			return -1;
		}
		struct stat st;
		if (stat(stats_path, &st) == 0 && S_ISDIR(st.st_mode)) {
			nbdkit_error("wbcache-stats: %s is a directory", stats_path);
			return -1;
		}
		FILE *f = fopen(tmp, "w");
		if (!f) {
			/* no strerror (%m) on the way to exit: with a sanitizer's
			 * runtime preloaded, nbdkit then hangs in exit() */
			nbdkit_error("wbcache-stats: cannot write %s (%s)", tmp,
				     errno == ENOENT ? "no such directory" :
				     errno == EACCES || errno == EPERM || errno == EROFS ?
				     "not writable" : "cannot create it");
			return -1;
		}
		fclose(f);
		unlink(tmp);
	} else if (stats_interval_set) {
		nbdkit_error("wbcache-stats-interval needs wbcache-stats=PATH");
		return -1;
	}
	return next(nxdata);
}

#define wbcache_config_help \
	"wbcache-mem=SIZE                 Cache size (default 256M).\n" \
	"wbcache-page-size=SIZE           Cache page, a power of two 512..1M (default 4K).\n" \
	"wbcache-dirty-ratio=PCT          Dirty limit, percent of the cache (default 20).\n" \
	"wbcache-dirty-bytes=SIZE         Dirty limit in bytes (overrides the ratio).\n" \
	"wbcache-dirty-background-ratio=PCT  Background writeback threshold (default 10).\n" \
	"wbcache-dirty-background-bytes=SIZE Background threshold in bytes.\n" \
	"wbcache-dirty-expire-centisecs=N Age at which dirty data is written (default 3000).\n" \
	"wbcache-dirty-writeback-centisecs=N Periodic writeback wakeup (default 500).\n" \
	"wbcache-on-error=retry|drop      Failed writes: stay dirty and retry, or drop (lost).\n" \
	"wbcache-retry-timeout=SECS       Writers get the error after failing this long (30).\n" \
	"wbcache-threads=N                Worker threads writing to the plugin (default 16).\n" \
	"wbcache-max-io=SIZE              Largest request to the plugin (default 4M).\n" \
	"wbcache-stats=FILE               Rewrite FILE with the cache's counters.\n" \
	"wbcache-stats-interval=SECS      ... this often (default 1) and at exit."

/* ------------------------------------------------------------------ */
/* The backend: the engine's I/Os to the plugin */

static int thread_model = NBDKIT_THREAD_MODEL_PARALLEL;

struct worker {
	pthread_t thread;
	char *bounce;                /* max_io bytes: a scattered I/O's data (once needed) */
};

/* The process's one cache, device, plugin context and workers. */
static struct {
	nbdkit_next *ctx;            /* the filter's own plugin context */
	bool prepared;
	int64_t size;
	int can_write, can_flush, can_extents;
	/* the plugin serializes requests (its thread model): every call on
	 * ctx takes plugin_lock, and one worker does the I/O */
	bool serial;
	pthread_mutex_t plugin_lock;

	pthread_mutex_t lock;        /* the queue and stop */
	pthread_cond_t cond;
	struct wbc_io **q;           /* a ring of cap entries */
	size_t head, n, cap;
	bool stop;
	unsigned nworkers;
	struct worker workers[MAX_THREADS];

	wbc_cache *cache;
	wbc_dev *dev;
	wbc_file *keeper;            /* held from the start to cleanup */
	/* start_lock: started (the first client's .open, start()) */
	pthread_mutex_t start_lock;
	bool started;

	pthread_t stats_thread;
	bool stats_running, stats_stop;
	pthread_mutex_t stats_lock;
	pthread_cond_t stats_cond;
} g = {
	.plugin_lock = PTHREAD_MUTEX_INITIALIZER,
	.start_lock = PTHREAD_MUTEX_INITIALIZER,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.stats_lock = PTHREAD_MUTEX_INITIALIZER,
	.stats_cond = PTHREAD_COND_INITIALIZER,
};

static void plugin_enter(void)
{
	if (g.serial)
		pthread_mutex_lock(&g.plugin_lock);
}

static void plugin_leave(void)
{
	if (g.serial)
		pthread_mutex_unlock(&g.plugin_lock);
}

static void be_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->max_io = max_io;
	caps->queue_depth = g.nworkers * 4 > 32 ? g.nworkers * 4 : 32;
	caps->flags = WBC_BACKEND_ONE_FILE;
}

static int be_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx;
	(void)flags;
	if (name[0])
		return -ENOENT;
	*file = &g;
	*size = (uint64_t)g.size;
	return 0;
}

static void be_close(void *ctx, void *file)
{
	(void)ctx;
	(void)file;
}

static int be_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx;
	pthread_mutex_lock(&g.lock);
	if (g.n + n > g.cap) {
		/* the engine keeps at most queue_depth writes in flight, but
		 * reads come from any number of client threads */
		size_t cap = g.cap * 2 > g.n + n ? g.cap * 2 : g.n + n;
		struct wbc_io **q = malloc(cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&g.lock);
			*queued = 0;
			return -ENOMEM;
		}
		for (size_t i = 0; i < g.n; i++)
			q[i] = g.q[(g.head + i) % g.cap];
		free(g.q);
		g.q = q;
		g.head = 0;
		g.cap = cap;
	}
	for (unsigned i = 0; i < n; i++)
		g.q[(g.head + g.n++) % g.cap] = ios[i];
	if (n > 1)
		pthread_cond_broadcast(&g.cond);
	else
		pthread_cond_signal(&g.cond);
	pthread_mutex_unlock(&g.lock);
	*queued = n;
	return 0;
}

/* The I/O's buffer when its pages are contiguous in memory, else NULL. */
static char *contiguous(const struct wbc_io *io)
{
	char *p = io->iov[0].iov_base;
	for (int i = 1; i < io->iovcnt; i++)
		if ((char *)io->iov[i - 1].iov_base + io->iov[i - 1].iov_len != io->iov[i].iov_base)
			return NULL;
	return p;
}

static ssize_t do_io(struct worker *w, struct wbc_io *io)
{
	uint64_t size = (uint64_t)g.size;
	/* the engine works in pages: the part of the last page past the
	 * plugin's end is not the plugin's (nbdkit refuses a request over
	 * the end) */
	if (io->off >= size)
		return io->op == WBC_IO_WRITE ? (ssize_t)io->len : 0;
	uint32_t n = (uint32_t)(io->len < size - io->off ? io->len : size - io->off);
	char *buf = contiguous(io);
	int err = 0, r;
	if (!buf && !w->bounce && !(w->bounce = malloc(max_io)))
		return -ENOMEM;
	if (io->op == WBC_IO_WRITE) {
		if (!buf) {
			buf = w->bounce;
			size_t at = 0;
			for (int i = 0; i < io->iovcnt && at < n; i++) {
				size_t k = io->iov[i].iov_len < n - at ? io->iov[i].iov_len : n - at;
				memcpy(buf + at, io->iov[i].iov_base, k);
				at += k;
			}
		}
		plugin_enter();
		r = g.ctx->pwrite(g.ctx, buf, n, io->off, 0, &err);
		plugin_leave();
		if (r == -1)
			return -(err > 0 ? err : EIO);
		return (ssize_t)io->len;
	}
	plugin_enter();
	r = g.ctx->pread(g.ctx, buf ? buf : w->bounce, n, io->off, 0, &err);
	plugin_leave();
	if (r == -1)
		return -(err > 0 ? err : EIO);
	if (!buf) {
		size_t at = 0;
		for (int i = 0; i < io->iovcnt && at < n; i++) {
			size_t k = io->iov[i].iov_len < n - at ? io->iov[i].iov_len : n - at;
			memcpy(io->iov[i].iov_base, w->bounce + at, k);
			at += k;
		}
	}
	return n;   /* short past the end: the engine reads the rest as zeros */
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	pthread_mutex_lock(&g.lock);
	for (;;) {
		while (!g.n && !g.stop)
			pthread_cond_wait(&g.cond, &g.lock);
		if (!g.n)
			break;
		/* a share of the queue, so that every worker gets some */
		size_t k = (g.n + g.nworkers - 1) / g.nworkers;
		if (k > BATCH)
			k = BATCH;
		struct wbc_io *batch[BATCH];
		for (size_t i = 0; i < k; i++) {
			batch[i] = g.q[g.head];
			g.head = (g.head + 1) % g.cap;
			g.n--;
		}
		if (g.n)
			pthread_cond_signal(&g.cond);
		pthread_mutex_unlock(&g.lock);
		for (size_t i = 0; i < k; i++)
			batch[i]->res = do_io(w, batch[i]);
		wbc_io_complete_batch(batch, (unsigned)k);   /* none of our locks held */
		pthread_mutex_lock(&g.lock);
	}
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

/* The plugin's failed flushes: a FUA write during which one failed is not
 * synced again (wbcache_pwrite). */
static atomic_ulong flush_failures;

static int be_flush(void *ctx, void *file, unsigned flags)
{
	(void)ctx;
	(void)file;
	(void)flags;
	if (g.can_flush != 1)
		return 0;   /* a plugin without flush: its completed writes are all there is */
	int err = 0;
	plugin_enter();
	int r = g.ctx->flush(g.ctx, 0, &err);
	plugin_leave();
	if (r == -1)
		atomic_fetch_add(&flush_failures, 1);
	return r == -1 ? -(err > 0 ? err : EIO) : 0;
}

static int be_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx;
	(void)file;
	return size == (uint64_t)g.size ? 0 : size > (uint64_t)g.size ? -EFBIG : -EINVAL;
}

static void workers_stop(void)
{
	pthread_mutex_lock(&g.lock);
	g.stop = true;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	for (unsigned i = 0; i < g.nworkers; i++) {
		pthread_join(g.workers[i].thread, NULL);
		free(g.workers[i].bounce);
		g.workers[i].bounce = NULL;
	}
	g.nworkers = 0;
	free(g.q);
	g.q = NULL;
	g.n = g.cap = g.head = 0;
}

static void be_destroy(void *ctx)
{
	(void)ctx;
	workers_stop();
}

static const struct wbc_backend_ops backend_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "nbdkit",
	.caps = be_caps,
	.open = be_open,
	.close = be_close,
	.submit = be_submit,
	.flush = be_flush,
	.resize = be_resize,
	.destroy = be_destroy,
};

static int workers_start(unsigned count)
{
	g.stop = false;
	g.cap = 4 * 32;
	if (!(g.q = malloc(g.cap * sizeof(*g.q)))) {
		nbdkit_error("malloc: %m");
		return -1;
	}
	for (g.nworkers = 0; g.nworkers < count; g.nworkers++) {
		struct worker *w = &g.workers[g.nworkers];
		w->bounce = NULL;
		int err = pthread_create(&w->thread, NULL, worker_main, w);
		if (err) {
			errno = err;
			nbdkit_error("pthread_create: %m");
			workers_stop();
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Statistics file */

static void stats_write(const struct wbc_stats *st, const struct wbc_dev_stats *ds, bool final)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", stats_path) >= (int)sizeof(tmp))
		return;
	static bool warned;
	FILE *f = fopen(tmp, "w");
	if (!f) {
		if (!warned)
			nbdkit_error("wbcache-stats: cannot write %s: %m (not said again)", tmp);
		warned = true;
		return;
	}
	fprintf(f,
		"mem_bytes=%" PRIu64 "\n"
		"cached_bytes=%" PRIu64 "\n"
		"dirty_bytes=%" PRIu64 "\n"
		"writeback_bytes=%" PRIu64 "\n"
		"bg_thresh_bytes=%" PRIu64 "\n"
		"thresh_bytes=%" PRIu64 "\n"
		"setpoint_bytes=%" PRIu64 "\n"
		"limit_bytes=%" PRIu64 "\n"
		"written_bytes=%" PRIu64 "\n"
		"written_back_bytes=%" PRIu64 "\n"
		"read_in_bytes=%" PRIu64 "\n"
		"write_ios=%" PRIu64 "\n"
		"write_errors=%" PRIu64 "\n"
		"lost_bytes=%" PRIu64 "\n"
		"at_risk_bytes=%" PRIu64 "\n"
		"pauses=%" PRIu64 "\n"
		"paused_ns=%" PRIu64 "\n"
		"max_pause_ns=%" PRIu64 "\n"
		"page_waits=%" PRIu64 "\n"
		"reclaimed_pages=%" PRIu64 "\n"
		"write_bw=%" PRIu64 "\n"
		"failing_ns=%" PRIu64 "\n"
		"dead_error=%d\n"
		"final=%d\n",
		st->mem_bytes, st->cached_bytes, st->dirty_bytes, st->writeback_bytes,
		st->bg_thresh_bytes, st->thresh_bytes, st->setpoint_bytes, st->limit_bytes,
		st->written_bytes, st->written_back_bytes, st->read_in_bytes, st->write_ios,
		st->write_errors, st->lost_bytes, st->at_risk_bytes, st->pauses, st->paused_ns,
		st->max_pause_ns, st->page_waits, st->reclaimed_pages, st->write_bw,
		ds ? ds->failing_ns : 0, ds ? -ds->dead_error : 0, final);
	if (fclose(f) || rename(tmp, stats_path)) {
		if (!warned)
			nbdkit_error("wbcache-stats: cannot write %s: %m (not said again)", stats_path);
		warned = true;
		unlink(tmp);
	}
}

static void *stats_main(void *arg)
{
	(void)arg;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	uint64_t step = (uint64_t)(stats_interval * 1e9);
	pthread_mutex_lock(&g.stats_lock);
	while (!g.stats_stop) {
		pthread_mutex_unlock(&g.stats_lock);
		struct wbc_stats st;
		struct wbc_dev_stats ds;
		if (wbc_stats(g.cache, &st) == 0 && wbc_dev_stats(g.dev, &ds) == 0)
			stats_write(&st, &ds, false);
		pthread_mutex_lock(&g.stats_lock);
		uint64_t ns = (uint64_t)next.tv_nsec + step;
		next.tv_sec += (time_t)(ns / 1000000000u);
		next.tv_nsec = (long)(ns % 1000000000u);
		while (!g.stats_stop &&
		       pthread_cond_timedwait(&g.stats_cond, &g.stats_lock, &next) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&g.stats_lock);
	return NULL;
}

static int stats_start(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&g.stats_cond);
	pthread_cond_init(&g.stats_cond, &ca);
	pthread_condattr_destroy(&ca);
	g.stats_stop = false;
	int err = pthread_create(&g.stats_thread, NULL, stats_main, NULL);
	if (err) {
		errno = err;
		nbdkit_error("pthread_create: %m");
		return -1;
	}
	g.stats_running = true;
	return 0;
}

static void stats_stop(void)
{
	if (!g.stats_running)
		return;
	pthread_mutex_lock(&g.stats_lock);
	g.stats_stop = true;
	pthread_cond_broadcast(&g.stats_cond);
	pthread_mutex_unlock(&g.stats_lock);
	pthread_join(g.stats_thread, NULL);
	g.stats_running = false;
}

/* ------------------------------------------------------------------ */
/* Start and stop */

static int wbcache_get_ready(int model)
{
	thread_model = model;
	/* before nbdkit forks, while an error still ends it with a non-zero
	 * status: a cache larger than the machine is refused (the cache is
	 * made after the fork: threads do not survive one; its memory is
	 * committed then, once) */
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psz > 0 && cfg.mem_bytes / (uint64_t)psz > (uint64_t)pages) {
		nbdkit_error("wbcache: cannot open a cache of %" PRIu64 " MiB (wbcache-mem): it "
			     "may not exceed the machine's memory (%" PRIu64 " MiB)", cfg.mem_bytes >> 20,
			     (uint64_t)pages * (uint64_t)psz >> 20);
		return -1;
	}
	return 0;
}

static void context_close(void)
{
	if (!g.ctx)
		return;
	if (g.prepared)
		g.ctx->finalize(g.ctx);
	nbdkit_next_context_close(g.ctx);
	g.ctx = NULL;
	g.prepared = false;
}

/* The cache, its device, the workers and the filter's own plugin
 * context, at the first client's .open (start_lock held); 0 or -1 with
 * the reason given to nbdkit_error (the client's open fails, the next
 * client's tries again). */
static int start(nbdkit_context *nxdata, int readonly, const char *exportname)
{
	/* the plugin's default export, shared by every connection: a
	 * context of the filter's own, opened as the first client's */
	g.ctx = nbdkit_next_context_open(nbdkit_context_get_backend(nxdata), readonly, exportname, 1);
	if (!g.ctx) {
		nbdkit_error("wbcache: cannot open a context of the plugin");
		return -1;
	}
	if (g.ctx->prepare(g.ctx) == -1) {
		nbdkit_next_context_close(g.ctx);
		g.ctx = NULL;
		return -1;
	}
	g.prepared = true;
	/* nbdkit wants these asked before the data calls they allow */
	if ((g.size = g.ctx->get_size(g.ctx)) < 0 ||
	    (g.can_write = g.ctx->can_write(g.ctx)) < 0 ||
	    (g.can_flush = g.ctx->can_flush(g.ctx)) < 0 ||
	    (g.can_extents = g.ctx->can_extents(g.ctx)) < 0 ||
	    g.ctx->can_fua(g.ctx) < 0 || g.ctx->can_zero(g.ctx) < 0 ||
	    g.ctx->can_trim(g.ctx) < 0) {
		context_close();
		return -1;
	}
	if ((uint64_t)g.size > (1ull << 62)) {
		nbdkit_error("wbcache: the export (%" PRId64 " bytes) is larger than the cache serves "
			     "(2^62 bytes)", g.size);
		context_close();
		return -1;
	}
	uint32_t bmin = 0, bpref = 0, bmax = 0;
	if (g.ctx->block_size(g.ctx, &bmin, &bpref, &bmax) == -1) {
		context_close();
		return -1;
	}
	if (bmin > cfg.page_size) {
		nbdkit_error("wbcache: the plugin's minimum block size (%" PRIu32
			     ") is above wbcache-page-size (%" PRIu32 ")", bmin, cfg.page_size);
		context_close();
		return -1;
	}
	if (bmax && bmax < cfg.page_size) {
		nbdkit_error("wbcache: the plugin's maximum block size (%" PRIu32
			     ") is below wbcache-page-size (%" PRIu32 ")", bmax, cfg.page_size);
		context_close();
		return -1;
	}
	if (bmax && bmax < max_io) {
		uint32_t m = bmax / cfg.page_size * cfg.page_size;
		max_io = m ? m : cfg.page_size;
	}
	/* a plugin that serializes requests gets one at a time from us too */
	g.serial = thread_model < NBDKIT_THREAD_MODEL_PARALLEL;

	int err = wbc_cache_open(&cfg, &g.cache);
	if (err) {
		nbdkit_error("wbcache: cannot open the cache (wbcache-mem=%" PRIu64 "): %s",
			     cfg.mem_bytes, wbc_strerror(err));
		context_close();
		return -1;
	}
	if (workers_start(g.serial ? 1 : nthreads) == -1)
		goto fail;
	char opts[128], msg[256] = "";
	if (retry_timeout >= 0)
		snprintf(opts, sizeof(opts), "on_error=%s,retry_timeout=%.6f", on_error, retry_timeout);
	else
		snprintf(opts, sizeof(opts), "on_error=%s", on_error);
	if ((err = wbc_dev_add_backend_msg(g.cache, &backend_ops, &g, opts, &g.dev, msg,
					   sizeof(msg)))) {
		nbdkit_error("wbcache: cannot add the device: %s", msg[0] ? msg : wbc_strerror(err));
		workers_stop();
		goto fail;
	}
	if ((err = wbc_file_open(g.dev, "", 0, &g.keeper))) {
		nbdkit_error("wbcache: cannot open the export in the cache: %s", wbc_strerror(err));
		goto fail;
	}
	if (stats_path && stats_start() == -1)
		goto fail;
	nbdkit_debug("wbcache: %" PRIu64 " bytes of cache, %u worker(s), max_io %" PRIu32
		     ", export %" PRId64 " bytes%s", cfg.mem_bytes, g.nworkers, max_io, g.size,
		     g.serial ? ", plugin calls serialized" : "");
	g.started = true;
	return 0;
fail:
	wbc_file_close(g.keeper);
	g.keeper = NULL;
	wbc_cache_close(g.cache);   /* destroys the backend (the workers) if added */
	g.cache = NULL;
	g.dev = NULL;
	if (g.nworkers)
		workers_stop();
	context_close();
	return -1;
}

/* All connections are closed: write everything back and close. */
static void wbcache_cleanup(nbdkit_backend *backend)
{
	(void)backend;
	if (!g.cache)
		return;
	stats_stop();
	wbc_file_close(g.keeper);
	g.keeper = NULL;
	/* a flush of the plugin that fails from here on may have lost what
	 * was written back at exit: one that succeeds after it says nothing
	 * of that (the pages are clean, nothing is written again) */
	unsigned long flushes_failed = atomic_load(&flush_failures);
	/* write back and flush: reports the errors of the past (every
	 * connection's FLUSH saw them), so that close's says what is new */
	(void)wbc_dev_sync(g.dev);
	struct wbc_stats st;
	memset(&st, 0, sizeof(st));
	int err = wbc_cache_close_stats(g.cache, &st);
	g.cache = NULL;
	g.dev = NULL;
	if (stats_path)
		stats_write(&st, NULL, true);
	if (st.lost_bytes)
		nbdkit_error("wbcache: %" PRIu64 " bytes of written data could not be written to "
			     "the plugin and are lost (%" PRIu64 " failed writes)",
			     st.lost_bytes, st.write_errors);
	else if (atomic_load(&flush_failures) != flushes_failed)
		nbdkit_error("wbcache: flushing the plugin at exit failed: what was written back at "
			     "exit may not be durable in the plugin");
	else if (err) {
		/* every byte was written, some after failed tries: whether
		 * the plugin's last flush succeeded, one more says */
		int ferr = be_flush(NULL, NULL, 0);
		if (ferr)
			nbdkit_error("wbcache: flushing the plugin at exit: %s", wbc_strerror(ferr));
		else
			nbdkit_debug("wbcache: writes that failed were retried and written back");
	}
	context_close();
}

/* ------------------------------------------------------------------ */
/* Connections */

struct handle {
	wbc_file *f;
	uint64_t lost_seen;          /* lost_lock: the loss this one was told of */
};

/* Data dropped after a failed write (wbcache-on-error=drop): a FLUSH on
 * any connection covers the writes completed on all (multi-conn), so each
 * connection's next FLUSH fails while the cache has lost more than that
 * connection was told of; one opened later starts from what some FLUSH
 * has told already.  (A handle's own error sequence is not enough: it
 * tells an error once, to one of the connection's requests in flight.) */
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t lost_told;

static uint64_t lost_bytes(void)
{
	struct wbc_stats st;
	return wbc_stats(g.cache, &st) == 0 ? st.lost_bytes : 0;
}

/* What @h had been told of when a request began. */
static uint64_t lost_seen(struct handle *h)
{
	pthread_mutex_lock(&lost_lock);
	uint64_t seen = h->lost_seen;
	pthread_mutex_unlock(&lost_lock);
	return seen;
}

/* -EIO when data was lost since @h was told, as it was when its request
 * began (@seen: a connection's requests run at once, and two FLUSHes in
 * flight cover the same writes: each fails); @h is told now. */
static int check_lost(struct handle *h, uint64_t seen)
{
	uint64_t lost = lost_bytes();
	pthread_mutex_lock(&lost_lock);
	if (lost > h->lost_seen)
		h->lost_seen = lost;
	if (lost > lost_told)
		lost_told = lost;
	pthread_mutex_unlock(&lost_lock);
	return lost > seen ? -EIO : 0;
}

/* The plugin's name for its default export, as nbdkit asked it (it
 * gives .open that name for a client's ""). */
static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *wbcache_default_export(nbdkit_next_default_export *next,
					  nbdkit_backend *nxdata, int readonly, int is_tls)
{
	(void)is_tls;
	const char *name = next(nxdata, readonly);
	if (name) {
		pthread_mutex_lock(&default_lock);
		if (!default_name)
			default_name = strdup(name);   /* NULL: only "" is known */
		pthread_mutex_unlock(&default_lock);
	}
	return name;
}

/* Only the default export is served: only it is listed (the plugin's
 * list named exports every open of which the filter refused). */
static int wbcache_list_exports(nbdkit_next_list_exports *next, nbdkit_backend *nxdata,
				int readonly, int is_tls, struct nbdkit_exports *exports)
{
	(void)next;
	(void)nxdata;
	(void)readonly;
	(void)is_tls;
	return nbdkit_use_default_export(exports);
}

static bool is_default_export(const char *name)
{
	if (!name[0])
		return true;
	pthread_mutex_lock(&default_lock);
	bool same = default_name && strcmp(name, default_name) == 0;
	pthread_mutex_unlock(&default_lock);
	return same;
}

static void *wbcache_open(nbdkit_next_open *next, nbdkit_context *nxdata, int readonly,
			  const char *exportname, int is_tls)
{
	(void)is_tls;
	if (!is_default_export(exportname)) {
		nbdkit_error("wbcache: only the plugin's default export is served, not \"%s\"",
			     exportname);
		return NULL;
	}
	if (next(nxdata, readonly, exportname) == -1)
		return NULL;
	pthread_mutex_lock(&g.start_lock);
	int started = g.started ? 0 : start(nxdata, readonly, exportname);
	pthread_mutex_unlock(&g.start_lock);
	if (started == -1)
		return NULL;
	struct handle *h = calloc(1, sizeof(*h));
	if (!h) {
		nbdkit_error("calloc: %m");
		return NULL;
	}
	int err = wbc_file_open(g.dev, "", 0, &h->f);
	if (err) {
		nbdkit_error("wbcache: opening the export in the cache: %s", wbc_strerror(err));
		free(h);
		return NULL;
	}
	pthread_mutex_lock(&lost_lock);
	h->lost_seen = lost_told;
	pthread_mutex_unlock(&lost_lock);
	return h;
}

static void wbcache_close(void *handle)
{
	struct handle *h = handle;
	wbc_file_close(h->f);
	free(h);
}

static int64_t wbcache_get_size(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return g.size;
}

static int wbcache_can_write(nbdkit_next *next, void *handle)
{
	(void)handle;
	int r = next->can_write(next);
	return r == 1 && g.can_write != 1 ? 0 : r;
}

static int wbcache_can_flush(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return 1;   /* even over a plugin without flush: it writes back the cache */
}

static int wbcache_can_fua(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return NBDKIT_FUA_NATIVE;
}

static int wbcache_can_trim(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return 0;
}

static int wbcache_can_zero(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return NBDKIT_ZERO_EMULATE;   /* zeros written through the cache */
}

static int wbcache_can_fast_zero(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return 0;
}

static int wbcache_can_extents(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return g.can_extents;
}

static int wbcache_can_multi_conn(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return 1;
}

static int wbcache_can_cache(nbdkit_next *next, void *handle)
{
	(void)next;
	(void)handle;
	return NBDKIT_CACHE_EMULATE;   /* a read: brings the range into the cache */
}

static int wbcache_pread(nbdkit_next *next, void *handle, void *buf, uint32_t count,
			 uint64_t offset, uint32_t flags, int *err)
{
	(void)next;
	(void)flags;
	struct handle *h = handle;
	char *p = buf;
	while (count) {
		ssize_t r = wbc_pread(h->f, p, count, offset);
		if (r <= 0) {
			*err = r < 0 ? (int)-r : EIO;
			nbdkit_error("wbcache: read at %" PRIu64 ": %s", offset,
				     wbc_strerror(r < 0 ? (int)r : -EIO));
			return -1;
		}
		p += r;
		offset += (uint64_t)r;
		count -= (uint32_t)r;
	}
	return 0;
}

/* At risk: data that failed to reach the plugin and waits to be retried. */
static int check_at_risk(void)
{
	struct wbc_dev_stats ds;
	if (wbc_dev_stats(g.dev, &ds) == 0 && ds.at_risk_bytes)
		return -EIO;
	return 0;
}

static int wbcache_pwrite(nbdkit_next *next, void *handle, const void *buf, uint32_t count,
			  uint64_t offset, uint32_t flags, int *err)
{
	(void)next;
	struct handle *h = handle;
	/* A FUA write's sync goes through a handle of its own, opened
	 * before the write: a file's error sequence tells each handle of an
	 * error once, and a connection's requests run at once; through the
	 * connection's handle, one FUA write's failed writeback could be told
	 * to another in flight, and the first acknowledged */
	wbc_file *fua = NULL;
	/* before the write: a failed flush from here on may have lost it */
	unsigned long flushes_failed = atomic_load(&flush_failures);
	if (flags & NBDKIT_FLAG_FUA) {
		int r = wbc_file_open(g.dev, "", 0, &fua);
		if (r) {
			*err = -r;
			nbdkit_error("wbcache: FUA write at %" PRIu64 ": %s", offset, wbc_strerror(r));
			return -1;
		}
	}
	const char *p = buf;
	uint64_t off = offset;
	uint32_t left = count;
	int r = 0;
	while (left && !r) {
		ssize_t n = wbc_pwrite(h->f, p, left, off);
		if (n <= 0) {
			r = n < 0 ? (int)n : -EIO;
			nbdkit_error("wbcache: write at %" PRIu64 ": %s", off, wbc_strerror(r));
			break;
		}
		p += n;
		off += (uint64_t)n;
		left -= (uint32_t)n;
	}
	if (fua) {
		/* The error sequence is the file's: any writeback of the
		 * export that failed meanwhile fails this sync, not only one of
		 * this range.  Under the retry policy a page whose write
		 * failed stays dirty, so a sync of the range again writes it
		 * again: one that then succeeds (no error since the last told)
		 * found the whole range written; a few tries, while other
		 * ranges' failures keep coming.  Not after a failed flush of
		 * the plugin (its pages were written and are clean: a second
		 * sync would write nothing, and its flush's success says
		 * nothing of what the failed one lost), nor under drop (a
		 * failed page is clean and lost): the first error stands. */
		if (!r) {
			int tries = strcmp(on_error, "retry") == 0 ? 3 : 1;
			do
				r = wbc_fsync_range(fua, offset, count, 1);
			while (r && --tries && atomic_load(&flush_failures) == flushes_failed);
			if (r)
				nbdkit_error("wbcache: FUA write at %" PRIu64 ": %s", offset,
					     wbc_strerror(r));
		}
		wbc_file_close(fua);
	}
	if (r) {
		*err = -r;
		return -1;
	}
	return 0;
}

static int wbcache_flush(nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
	(void)next;
	(void)flags;
	struct handle *h = handle;
	uint64_t seen = lost_seen(h);
	int r = wbc_fdatasync(h->f);
	if (!r)
		r = check_at_risk();
	int lost = check_lost(h, seen);   /* told even when the sync failed */
	if (!r)
		r = lost;
	if (r) {
		*err = -r;
		nbdkit_error("wbcache: flush: %s", wbc_strerror(r));
		return -1;
	}
	return 0;
}

static int wbcache_extents(nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
			   uint32_t flags, struct nbdkit_extents *extents, int *err)
{
	(void)next;
	(void)handle;
	/* the plugin's map is right once the range's dirty data is in it
	 * (through the filter's own handle: a connection's next FLUSH still
	 * sees any write error).  Where that fails (the plugin fails
	 * writes: of this range, or of another, told by the file's error
	 * sequence), the range is answered as data, the answer that is
	 * always safe: a copy out of the export goes on, reading it.  Data
	 * at risk anywhere counts too: the one handle's error sequence tells
	 * an error once, and a call racing another's (its pages already in
	 * flight when it looked) was not told that they failed */
	int r = wbc_fsync_range(g.keeper, offset, count, 1);
	if (!r)
		r = check_at_risk();
	/* and data dropped (wbcache-on-error=drop): its pages are clean and
	 * still read from the cache, the plugin's map has a hole there; which
	 * ranges were dropped is not known, so every range is data then */
	if (!r && lost_bytes())
		r = -EIO;
	if (r) {
		if (nbdkit_add_extent(extents, offset, count, 0) == -1) {
			*err = errno;
			return -1;
		}
		return 0;
	}
	/* only the range synced: the plugin may describe more (its last
	 * extent longer than asked, which nbdkit passes on to the client),
	 * and past the range the cache may hold data the plugin lacks */
	struct nbdkit_extents *mine = nbdkit_extents_new(offset, offset + count);
	if (!mine) {
		*err = errno;
		return -1;
	}
	plugin_enter();
	r = g.ctx->extents(g.ctx, count, offset, flags, mine, err);
	plugin_leave();
	for (size_t i = 0; r == 0 && i < nbdkit_extents_count(mine); i++) {
		struct nbdkit_extent e = nbdkit_get_extent(mine, i);
		if (nbdkit_add_extent(extents, e.offset, e.length, e.type) == -1) {
			*err = errno;
			r = -1;
		}
	}
	nbdkit_extents_free(mine);
	return r;
}

static struct nbdkit_filter filter = {
	.name = "wbcache",
	.longname = "nbdkit wbcache filter",
	.description = "A bounded, throttled write-back cache (wbcache) in front of the plugin",
	.load = wbcache_load,
	.unload = wbcache_unload,
	.config = wbcache_config,
	.config_complete = wbcache_config_complete,
	.config_help = wbcache_config_help,
	.get_ready = wbcache_get_ready,
	.cleanup = wbcache_cleanup,
	.list_exports = wbcache_list_exports,
	.default_export = wbcache_default_export,
	.open = wbcache_open,
	.close = wbcache_close,
	.get_size = wbcache_get_size,
	.can_write = wbcache_can_write,
	.can_flush = wbcache_can_flush,
	.can_fua = wbcache_can_fua,
	.can_trim = wbcache_can_trim,
	.can_zero = wbcache_can_zero,
	.can_fast_zero = wbcache_can_fast_zero,
	.can_extents = wbcache_can_extents,
	.can_multi_conn = wbcache_can_multi_conn,
	.can_cache = wbcache_can_cache,
	.pread = wbcache_pread,
	.pwrite = wbcache_pwrite,
	.flush = wbcache_flush,
	.extents = wbcache_extents,
};

NBDKIT_REGISTER_FILTER(filter)
