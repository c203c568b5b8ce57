/*
 * The nbd backend against nbdkit servers the test starts (skipped when
 * nbdkit is not installed):
 *   1. specs: the URI, then its options and the device tunables; bad ones
 *      refused; 4 connections by default where the server allows
 *      multi-conn, 1 where it does not (and conns=2 refused there); a
 *      server that is not there: a message; URI parameters libnbd would
 *      ignore (an unknown one, TLS files in a URI without TLS) refused.
 *   1a. TLS with a pre-shared key (nbds+unix://...&tls-psk-file=): written
 *      and read back (libnbd refused the URI's key file).
 *   2. data: written through one cache, read back through a fresh one on
 *      the same server (misses go to the server); a read at the export's
 *      end is short; resize: EFBIG above the export, EINVAL below it
 *      (O_TRUNC does nothing), fine at its size;
 *      fsync sends NBD_CMD_FLUSH (nbdkit's log filter records it).
 *   3. the window: on a fast server (memory plugin) it grows above its
 *      start; on a slow one (delay and rate filters) it stays below the
 *      bytes window=fixed:128 keeps in flight there.  Ranges, no timings.
 *   4. faults: the server killed mid-stream (file plugin: its data
 *      outlives it): fsync fails while it is down, reads that miss fail,
 *      the pages stay dirty (at risk, none lost), and a writer to a second
 *      (mem) device finishes meanwhile; the server restarted on the same
 *      socket: the backend reconnects, fsync succeeds, a handle open all
 *      along sees the error once, and a fresh cache reads every byte back.
 *   5. on_error=drop: the server gone, the pages are dropped and counted
 *      lost; fsync says so; once it is back, fsync succeeds.
 *   6. a stalled server (SIGSTOP) with timeout=3: fsync fails instead of
 *      waiting for ever, another device's writer finishes, and once the
 *      server runs again the data is written.
 *   7. edges: an export whose size is not a whole number of pages takes
 *      a write to its last bytes (the last page is not sent past the
 *      end), and refuses one past them (EFBIG, short across the end); fua=1 on a server that offers no FUA: written-back data the
 *      server lost with its restart is an fsync error, not success; a
 *      socket that never answers the handshake: the device's add fails
 *      after timeout=, not never; fua=1 and a server that comes back
 *      without FUA: not used (every write failed EINVAL), the data lands
 *      once FUA is back; connections that find different exports (the
 *      size grows with each): the add fails.
 *   7a. a server whose maximum block size (2 KiB) is below the cache's
 *      page (16 KiB): the I/Os are sent as commands within it (a stream,
 *      and pages apart in memory), written and read back; one that
 *      comes back after a restart with a lower maximum (2 KiB, was 1 MiB)
 *      gets commands cut to it (every write failed EINVAL, for good).
 *   8. a reconnect resolves the server's name off the completion thread:
 *      two TCP connections through a proxy the test runs, one cut, and
 *      the name's resolution for its reconnect held (the test's own
 *      getaddrinfo); meanwhile a write and fsync go through the other
 *      connection (before, the completion thread waited in getaddrinfo
 *      and the fsync with it); the resolution let go, it reconnects.
 *      A cache closed while a reconnect's resolution is held returns
 *      (it waited for the resolver, joining the connector thread).
 */
#include "testutil.h"
#include "nbdkit.h"
#include "wbcache_backend.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>

#define MiB (1u << 20)
#define T_MIN(a, b) ((a) < (b) ? (a) : (b))
#define T_MAX(a, b) ((a) > (b) ? (a) : (b))

static char *dir;

/* Does file @path hold @what? */
static bool file_has(const char *path, const char *what)
{
	char buf[8192];
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return strstr(buf, what) != NULL;
}

static wbc_cache *open_cache(uint64_t mem)
{
	struct wbc_config cfg = t_config(mem, 4096);
	cfg.dirty_ratio = 50;
	cfg.dirty_background_ratio = 10;
	cfg.dirty_writeback_centisecs = 0;   /* only what the test asks */
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}

static wbc_dev *add(wbc_cache *c, const char *uri, const char *opts)
{
	char spec[512], msg[256];
	snprintf(spec, sizeof(spec), "%s%s%s", uri, *opts ? "," : "", opts);
	wbc_dev *dev;
	int err = wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "%s: %s\n", spec, msg);
		exit(1);
	}
	return dev;
}

static int add_err(wbc_cache *c, const char *uri, const char *opts)
{
	char spec[512], msg[256] = "";
	snprintf(spec, sizeof(spec), "%s%s%s", uri, *opts ? "," : "", opts);
	wbc_dev *dev;
	int err = wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg));
	printf("    '%s': %s\n", opts, err ? msg : "accepted");
	CHECK(!err || msg[0]);
	return err;
}

static struct wbc_backend_stats bstats(wbc_dev *dev)
{
	struct wbc_backend_stats st;
	CHECK_EQ(wbc_dev_backend_stats(dev, &st), 0);
	return st;
}

static void write_all(wbc_file *f, const char *buf, size_t len, uint64_t off)
{
	for (size_t at = 0; at < len; at += 64 << 10)
		CHECK_EQ(wbc_pwrite(f, buf + at, T_MIN((size_t)64 << 10, len - at), off + at),
			 (ssize_t)T_MIN((size_t)64 << 10, len - at));
}

/* Through a fresh cache: the server holds @want at @off. */
static void check_server(const char *uri, const char *want, size_t len, uint64_t off)
{
	wbc_cache *c = open_cache(8 * MiB);   /* smaller than the data: misses */
	wbc_dev *dev = add(c, uri, "");
	wbc_file *f;
	char *back = malloc(len);
	CHECK(back);
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, back, len, off), (ssize_t)len);
	CHECK(!memcmp(back, want, len));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(back);
}

/* Restart server @s (socket @name) with @args, and wait until the device
 * says it is not the export it had ("the export changed", on our stderr,
 * caught in a file meanwhile): true, or false once T_WAIT_UNTIL gives up. */
static bool restart_changed(struct t_nbdkit *s, const char *name, const char **args)
{
	char log[512];
	snprintf(log, sizeof(log), "%s/%s.err", dir, name);
	fflush(stderr);
	int saved = dup(2), lf = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(saved >= 0 && lf >= 0 && dup2(lf, 2) == 2);
	close(lf);
	t_nbdkit_stop(s);
	t_nbdkit_start(s, dir, name, args);
	bool changed = T_WAIT_UNTIL(file_has(log, "the export changed"));
	fflush(stderr);
	CHECK(dup2(saved, 2) == 2);
	close(saved);
	return changed;
}

/* ------------------------------------------------------------------ */

static void test_specs(void)
{
	printf("1. specs\n");
	struct t_nbdkit s, one, empty;
	t_nbdkit_start(&s, dir, "spec", (const char *[]){ "memory", "16M", NULL });
	t_nbdkit_start(&empty, dir, "empty", (const char *[]){ "memory", "0", NULL });
	t_nbdkit_start(&one, dir, "one", (const char *[]){ "--filter=multi-conn", "memory", "16M",
							   "multi-conn-mode=disable", NULL });
	wbc_cache *c = open_cache(16 * MiB);
	CHECK_EQ(add_err(c, s.uri, "conns=0"), -EINVAL);
	CHECK_EQ(add_err(c, s.uri, "window=bogus"), -EINVAL);
	CHECK_EQ(add_err(c, s.uri, "window=fixed:0"), -EINVAL);
	CHECK_EQ(add_err(c, s.uri, "frob=1"), -EINVAL);
	CHECK_EQ(add_err(c, s.uri, "min_ratio=500"), -EINVAL);     /* a tunable, checked */
	CHECK_EQ(add_err(c, s.uri, "conns=2,min_ratio=5,window=fixed:8,on_error=drop"), 0);
	CHECK(add_err(c, "nbd+unix:///?socket=/nonexistent/sock", "") < 0);
	CHECK_EQ(add_err(c, one.uri, "conns=2"), -EINVAL);         /* no multi-conn there */
	/* an empty export holds no byte: refused (a byte written was taken,
	 * and every fsync failed until the close lost it) */
	CHECK_EQ(add_err(c, empty.uri, ""), -EINVAL);
	/* URI parameters libnbd would ignore: refused, not connected
	 * without them (a misspelt socket=, TLS files in a URI without TLS) */
	char uri[400];
	snprintf(uri, sizeof(uri), "%s&frob=1", s.uri);
	CHECK_EQ(add_err(c, uri, ""), -EINVAL);
	snprintf(uri, sizeof(uri), "%s&tls-psk-file=%s/spec.sock", s.uri, dir);
	CHECK_EQ(add_err(c, uri, ""), -EINVAL);
	snprintf(uri, sizeof(uri), "%s&tls-certificates=%s", s.uri, dir);
	CHECK_EQ(add_err(c, uri, ""), -EINVAL);
	wbc_dev *d4 = add(c, s.uri, ""), *d1 = add(c, one.uri, "");
	struct wbc_backend_stats st4 = bstats(d4), st1 = bstats(d1);
	printf("    multi-conn server: %u/%u connections; without: %u/%u\n", st4.connected,
	       st4.conns, st1.connected, st1.conns);
	CHECK_EQ(st4.conns, 4);
	CHECK_EQ(st4.connected, 4);
	CHECK_EQ(st1.conns, 1);
	CHECK_EQ(st1.connected, 1);
	CHECK(st4.window_bytes > 0);
	/* a device of another backend reports no transport */
	wbc_dev *m;
	CHECK_EQ(wbc_dev_add(c, "mem", &m), 0);
	struct wbc_backend_stats none;
	CHECK_EQ(wbc_dev_backend_stats(m, &none), -EOPNOTSUPP);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_nbdkit_stop(&s);
	t_nbdkit_stop(&one);
	t_nbdkit_stop(&empty);
}

/* nbds:// with a key of its own (tls-psk-file=): libnbd refuses a URI's
 * local files unless told (every nbds+unix:// URI with a key failed
 * EPERM) */
static void test_tls(void)
{
	printf("1a. TLS with a pre-shared key\n");
	char psk[300], arg[320], uri[700];
	snprintf(psk, sizeof(psk), "%s/keys.psk", dir);
	FILE *fp = fopen(psk, "w");
	CHECK(fp);
	fprintf(fp, "alice:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
	CHECK_EQ(fclose(fp), 0);
	snprintf(arg, sizeof(arg), "--tls-psk=%s", psk);
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "tls", (const char *[]){ "--tls=require", arg, "memory", "16M",
							 NULL });
	snprintf(uri, sizeof(uri), "nbds+unix://alice@/?socket=%s&tls-psk-file=%s", s.sock, psk);
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, uri, "conns=2");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	char buf[65536];
	t_fill(buf, sizeof(buf), 29);
	write_all(f, buf, sizeof(buf), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(uri, buf, sizeof(buf), 0);
	/* without TLS the server refuses: the data went over TLS */
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", s.sock);
	c = open_cache(16 * MiB);
	CHECK(add_err(c, uri, "") < 0);
	wbc_cache_close(c);
	printf("    nbds+unix:// with tls-psk-file=: written, read back\n");
	t_nbdkit_stop(&s);
	unlink(psk);
}

static void test_data(void)
{
	printf("2. data\n");
	char log[300];
	snprintf(log, sizeof(log), "logfile=%s/data.log", dir);
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "data", (const char *[]){ "--filter=log", "memory", "64M", log,
							  NULL });
	size_t len = 24 * MiB;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 7);
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, s.uri, "min_ratio=5");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 64 * MiB);                  /* the export's size */
	write_all(f, data, len, MiB + 512);                   /* not page-aligned */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_truncate(f, 64 * MiB + 4096), -EFBIG);
	CHECK_EQ(wbc_file_size(f), 64 * MiB);                  /* a refused extension */
	CHECK_EQ(wbc_fsync(f), 0);                             /* ... leaves nothing to fix */
	/* an export cannot be cut: cut and extended again, its old bytes
	 * read back as the file's (the resize did nothing and said 0) */
	CHECK_EQ(wbc_truncate(f, MiB), -EINVAL);
	CHECK_EQ(wbc_file_size(f), 64 * MiB);
	CHECK_EQ(wbc_truncate(f, 64 * MiB), 0);
	wbc_file *t;
	CHECK_EQ(wbc_file_open(dev, "", WBC_O_TRUNC, &t), 0);   /* O_TRUNC: nothing to cut */
	CHECK_EQ(wbc_file_size(t), 64 * MiB);
	CHECK_EQ(wbc_file_close(t), 0);
	char tail[8192];
	CHECK_EQ(wbc_pread(f, tail, sizeof(tail), 64 * MiB - 100), 100);   /* the end */
	struct wbc_backend_stats st = bstats(dev);
	printf("    window %llu KiB, rtt %llu us (base %llu us), %u connections\n",
	       (unsigned long long)st.window_bytes >> 10, (unsigned long long)st.rtt_ns / 1000,
	       (unsigned long long)st.min_rtt_ns / 1000, st.connected);
	CHECK(st.rtt_ns > 0 && st.min_rtt_ns > 0 && st.min_rtt_ns <= st.rtt_ns * 8);
	CHECK_EQ(st.inflight_bytes, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, data, len, MiB + 512);
	/* the fsync was an NBD flush */
	snprintf(log, sizeof(log), "%s/data.log", dir);
	FILE *fp = fopen(log, "r");
	CHECK(fp);
	char line[512];
	bool flushed = false;
	while (fgets(line, sizeof(line), fp))
		flushed |= strstr(line, " Flush ") != NULL;
	fclose(fp);
	CHECK(flushed);
	free(data);
	t_nbdkit_stop(&s);
}

/* ------------------------------------------------------------------ */

struct watch {
	wbc_dev *dev;
	atomic_int running;
	uint64_t max_window, max_inflight;
};

static void *watch_main(void *arg)
{
	struct watch *w = arg;
	while (atomic_load(&w->running)) {
		struct wbc_backend_stats st = bstats(w->dev);
		w->max_window = T_MAX(w->max_window, st.window_bytes);
		w->max_inflight = T_MAX(w->max_inflight, st.inflight_bytes);
		struct timespec ts = { 0, 500 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Write @len through a device of @uri with @opts and fsync, watching its
 * window; returns the watch (its start window in *start). */
static struct watch stream_watched(const char *uri, const char *opts, size_t len,
				   uint64_t *start)
{
	wbc_cache *c = open_cache(64 * MiB);
	struct watch w = { .dev = add(c, uri, opts) };
	*start = bstats(w.dev).window_bytes;
	atomic_store(&w.running, 1);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, watch_main, &w), 0);
	char *buf = malloc(len);
	CHECK(buf);
	t_fill(buf, len, 3);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(w.dev, "", 0, &f), 0);
	write_all(f, buf, len, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_store(&w.running, 0);
	pthread_join(th, NULL);
	struct wbc_backend_stats st = bstats(w.dev);
	printf("    %-28s start %6llu KiB, max window %6llu KiB, max in flight %6llu KiB, "
	       "rtt %llu us (base %llu us)\n", opts, (unsigned long long)*start >> 10,
	       (unsigned long long)w.max_window >> 10, (unsigned long long)w.max_inflight >> 10,
	       (unsigned long long)st.rtt_ns / 1000, (unsigned long long)st.min_rtt_ns / 1000);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(buf);
	return w;
}

static void test_window(void)
{
	printf("3. window\n");
	struct t_nbdkit fast, slow;
	uint64_t start;
	t_nbdkit_start(&fast, dir, "fast", (const char *[]){ "memory", "256M", NULL });
	struct watch wf = stream_watched(fast.uri, "window=adaptive", 96 * MiB, &start);
	CHECK(wf.max_window > start);          /* grew on a fast server */
	t_nbdkit_stop(&fast);

	/* 5 ms per write and 10 MB/s in all (bursts of 0.2 s at most) */
	t_nbdkit_start(&slow, dir, "slow", (const char *[]){ "--filter=delay", "--filter=rate",
		       "memory", "64M", "wdelay=5ms", "rate=80M", "burstiness=0.2", NULL });
	uint64_t fixed_bytes = 128 * (64u << 10);
	struct watch wa = stream_watched(slow.uri, "max_io=64K", 12 * MiB, &start);
	struct watch wx = stream_watched(slow.uri, "max_io=64K,window=fixed:128", 12 * MiB, &start);
	CHECK(wa.max_window < fixed_bytes);
	CHECK(wa.max_inflight < fixed_bytes);
	CHECK(wa.max_window < wx.max_inflight);   /* fixed:128 filled far more */
	t_nbdkit_stop(&slow);
}

/* ------------------------------------------------------------------ */

struct fsync_job {
	wbc_file *f;
	int res;
};

static void *fsync_main(void *arg)
{
	struct fsync_job *j = arg;
	__atomic_store_n(&j->res, wbc_fsync(j->f), __ATOMIC_RELEASE);
	return NULL;
}

static void test_faults(void)
{
	printf("4. server killed mid-stream, restarted\n");
	char path[300], file[320];
	snprintf(path, sizeof(path), "%s/export", dir);
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	CHECK(fd >= 0 && !ftruncate(fd, 64 * MiB));
	close(fd);
	snprintf(file, sizeof(file), "file=%s", path);
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "faults", (const char *[]){ "--filter=rate", "file", file,
							    "rate=80M", "burstiness=0.2", NULL });
	size_t len1 = 4 * MiB, len2 = 16 * MiB;
	char *data = malloc(len1 + len2);
	CHECK(data);
	t_fill(data, len1 + len2, 11);
	wbc_cache *c = open_cache(64 * MiB);
	wbc_dev *dev = add(c, s.uri, "retry_timeout=600"), *mem;
	CHECK_EQ(wbc_dev_add(c, "mem", &mem), 0);
	wbc_file *h1, *h2;
	CHECK_EQ(wbc_file_open(dev, "", 0, &h1), 0);
	CHECK_EQ(wbc_file_open(dev, "", 0, &h2), 0);
	write_all(h1, data, len1, 0);
	CHECK_EQ(wbc_fsync(h1), 0);

	/* a stream in flight when the server dies */
	write_all(h1, data + len1, len2, len1);
	struct fsync_job job = { .f = h1 };
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, fsync_main, &job), 0);
	struct wbc_dev_stats ds;
	CHECK(T_WAIT_UNTIL((wbc_dev_stats(dev, &ds), ds.written_back_bytes >= len1 + 2 * MiB)));
	t_nbdkit_kill(&s);
	pthread_join(th, NULL);
	printf("    fsync across the kill: %d (%s)\n", job.res, wbc_strerror(job.res));
	CHECK_EQ(job.res, -EIO);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == 0));
	CHECK_EQ(wbc_fsync(h1), -EIO);            /* still nowhere to write */
	char miss[4096];
	CHECK_EQ(wbc_pread(h1, miss, sizeof(miss), 48 * MiB), -EIO);   /* nor to read */
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("    server down: %llu KiB at risk, %llu lost\n",
	       (unsigned long long)st.at_risk_bytes >> 10, (unsigned long long)st.lost_bytes);
	CHECK(st.at_risk_bytes > 0);
	CHECK_EQ(st.lost_bytes, 0);

	/* another device of the cache goes on meanwhile */
	t_stream(mem, NULL, "other", 48 * MiB, 5, 1);
	wbc_dev_stats(dev, &ds);
	CHECK_EQ(bstats(dev).connected, 0);       /* ... while this one was down */
	CHECK(ds.at_risk_bytes > 0);
	printf("    48 MiB written to a mem device while the server was down\n");

	/* the server is back on the same socket */
	t_nbdkit_spawn(&s);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected > 0));
	int errs = 0, r;
	while ((r = wbc_fsync(h1)) && errs < 5)
		errs++;
	printf("    reconnected (%llu reconnects); fsync errors reported after: %d\n",
	       (unsigned long long)bstats(dev).reconnects, errs);
	CHECK_EQ(r, 0);
	CHECK(bstats(dev).reconnects >= 1);
	CHECK(wbc_fsync(h2) < 0);                 /* h2 sees the error once ... */
	CHECK_EQ(wbc_fsync(h2), 0);               /* ... and only once */
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(wbc_file_close(h1), 0);
	CHECK_EQ(wbc_file_close(h2), 0);
	wbc_cache_close_stats(c, &st);
	CHECK_EQ(st.lost_bytes, 0);
	check_server(s.uri, data, len1 + len2, 0);
	free(data);
	t_nbdkit_stop(&s);
}

static void test_drop(void)
{
	printf("5. on_error=drop\n");
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "drop", (const char *[]){ "memory", "64M", NULL });
	size_t len = 2 * MiB;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 13);
	wbc_cache *c = open_cache(64 * MiB);
	wbc_dev *dev = add(c, s.uri, "on_error=drop");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	write_all(f, data, len, 0);              /* below the background threshold */
	t_nbdkit_kill(&s);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == 0));
	CHECK_EQ(wbc_fsync(f), -EIO);
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("    %llu KiB lost, %llu at risk\n", (unsigned long long)st.lost_bytes >> 10,
	       (unsigned long long)st.at_risk_bytes);
	CHECK_EQ(st.lost_bytes, len);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes, 0);
	t_nbdkit_spawn(&s);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected > 0));
	CHECK_EQ(wbc_fsync(f), 0);               /* nothing left to fail */
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_cache_close(c);
	free(data);
	t_nbdkit_stop(&s);
}

static void test_stall(void)
{
	printf("6. server stalled (SIGSTOP), timeout=3\n");
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "stall", (const char *[]){ "memory", "64M", NULL });
	size_t len = 4 * MiB;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 17);
	wbc_cache *c = open_cache(64 * MiB);
	wbc_dev *dev = add(c, s.uri, "timeout=3,retry_timeout=600"), *mem;
	CHECK_EQ(wbc_dev_add(c, "mem", &mem), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	write_all(f, data, len, 0);
	t_nbdkit_pause(&s);
	/* no reply: after timeout= the commands fail, not hang */
	CHECK_EQ(wbc_fsync(f), -EIO);
	t_stream(mem, NULL, "other", 32 * MiB, 5, 1);
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("    stalled: %u connections up, %llu KiB at risk; 32 MiB written to a mem device\n",
	       bstats(dev).connected, (unsigned long long)st.at_risk_bytes >> 10);
	CHECK(st.at_risk_bytes > 0);
	t_nbdkit_resume(&s);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == bstats(dev).conns));
	int errs = 0, r;
	while ((r = wbc_fsync(f)) && errs < 5)
		errs++;
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_cache_close_stats(c, &st);
	CHECK_EQ(st.lost_bytes, 0);
	check_server(s.uri, data, len, 0);

	/* written back, not flushed, the server stopped: the flush that
	 * failed with its connection tells of those writes once; the next
	 * one, after the reconnect, succeeds (it failed too: told twice) */
	struct wbc_config cfg = t_config(16 * MiB, 4096);
	cfg.dirty_expire_centisecs = 10;
	cfg.dirty_writeback_centisecs = 10;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "timeout=3");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	write_all(f, data, 64 << 10, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	write_all(f, data + (64 << 10), 64 << 10, 0);
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), !st.dirty_bytes && !st.writeback_bytes)));
	t_nbdkit_pause(&s);
	CHECK_EQ(wbc_fsync(f), -EIO);
	t_nbdkit_resume(&s);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == bstats(dev).conns));
	CHECK_EQ(wbc_fsync(f), 0);
	printf("    written back, unflushed, server stopped: one fsync failed, the next succeeded\n");
	CHECK_EQ(wbc_file_close(f), 0);
	(void)wbc_dev_sync(dev);   /* the device's own report of the failed flush */
	CHECK_EQ(wbc_cache_close(c), 0);
	free(data);
	t_nbdkit_stop(&s);
}

/* Is nbdkit's @filter installed? */
static bool have_filter(const char *filter)
{
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "nbdkit --filter=%s null --version >/dev/null 2>&1", filter);
	return system(cmd) == 0;
}

/* Write @ten (10 bytes) at @off of the export's file @f, fsync with no
 * write error, close, and find them on the server; the server stopped. */
static void write_tail(struct t_nbdkit *s, wbc_cache *c, wbc_file *f, const char *ten,
		       uint64_t off)
{
	struct wbc_stats st;
	CHECK_EQ(wbc_pwrite(f, ten, 10, off), 10);
	CHECK_EQ(wbc_fsync(f), 0);
	wbc_stats(c, &st);
	CHECK_EQ(st.write_errors, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s->uri, ten, 10, off);
	t_nbdkit_stop(s);
}

static void test_block_limits(void)
{
	printf("7a. a server's maximum block size below the cache's page\n");
	if (!have_filter("blocksize-policy")) {
		printf("    skipped: no nbdkit blocksize-policy filter\n");
		return;
	}
	/* 2 KiB at most per request, refused above (NBD_EINVAL): a page of
	 * 16 KiB is the least I/O the engine makes, sent as commands within
	 * the limit (before, every write and read failed EINVAL, for good) */
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "bmax", (const char *[]){ "--filter=blocksize-policy", "memory",
		"16M", "blocksize-minimum=512", "blocksize-preferred=2048",
		"blocksize-maximum=2048", "blocksize-error-policy=error", NULL });
	struct wbc_config cfg = t_config(16 * MiB, 16384);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *dev = add(c, s.uri, "retry_timeout=5");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	size_t len = 2 * MiB;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 23);
	write_all(f, data, MiB, 0);                  /* a stream: runs of many pages */
	/* pages written last to first: neighbours in the file, apart in
	 * memory (an I/O of many runs goes as a copy) */
	for (size_t at = len; at > MiB; at -= 16384)
		CHECK_EQ(wbc_pwrite(f, data + at - 16384, 16384, at - 16384), 16384);
	int r = wbc_fsync(f);
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("    16 KiB pages, 2 KiB requests: fsync %d (%s), %llu write errors\n", r,
	       wbc_strerror(r), (unsigned long long)st.write_errors);
	CHECK_EQ(r, 0);
	CHECK_EQ(st.write_errors, 0);
	char back[3 * 16384];                        /* misses: read from the server */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, back, sizeof(back), MiB - 16384), (ssize_t)sizeof(back));
	CHECK(!memcmp(back, data + MiB - 16384, sizeof(back)));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, data, len, 0);
	free(data);
	t_nbdkit_stop(&s);

	/* an export of 1,000,000 bytes in blocks of 4 KiB at least: its
	 * last 576 bytes cannot be written alone (a write of the last page
	 * went past the end and failed at writeback, for good); the file
	 * ends at the last whole block */
	t_nbdkit_start(&s, dir, "bmin", (const char *[]){ "--filter=blocksize-policy", "memory",
		"1000000", "blocksize-minimum=4096", "blocksize-error-policy=error", NULL });
	cfg = t_config(16 * MiB, 4096);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "retry_timeout=2");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	printf("    1,000,000 bytes in blocks of 4 KiB: a file of %lld\n",
	       (long long)wbc_file_size(f));
	CHECK_EQ(wbc_file_size(f), 999424);
	CHECK_EQ(wbc_pwrite(f, "0123456789", 10, 999990), -EFBIG);
	write_tail(&s, c, f, "0123456789", 999414);

	/* the same export in blocks of 512 bytes, under pages of 4 KiB: the
	 * file ends at 999,936, inside its last page, which is read (and
	 * written back) to there, never to the export's end (its last 64
	 * bytes, not a whole block: the server refuses the request) */
	t_nbdkit_start(&s, dir, "bmin512", (const char *[]){ "--filter=blocksize-policy",
		"memory", "1000000", "blocksize-minimum=512", "blocksize-error-policy=error", NULL });
	cfg = t_config(16 * MiB, 4096);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "retry_timeout=2");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 999936);
	char tail[600];
	ssize_t got = wbc_pread(f, tail, sizeof(tail), 999900);
	printf("    1,000,000 bytes in blocks of 512: a file of %lld, its last 36 bytes read: "
	       "%zd\n", (long long)wbc_file_size(f), got);
	CHECK_EQ(got, 36);
	write_tail(&s, c, f, "abcdefghij", 999926);

	/* the server comes back with a maximum block size (2 KiB) below the
	 * commands sent so far (1 MiB): they are cut to it (every write was
	 * refused EINVAL, for good) */
	char path[300], file[320];
	snprintf(path, sizeof(path), "%s/bmaxdrop", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && !ftruncate(fd, 16 * MiB));
	close(fd);
	snprintf(file, sizeof(file), "file=%s", path);
	const char *big[] = { "--filter=blocksize-policy", "file", file, "blocksize-minimum=512",
		"blocksize-preferred=4096", "blocksize-maximum=1048576",
		"blocksize-error-policy=error", NULL };
	const char *small[] = { "--filter=blocksize-policy", "file", file, "blocksize-minimum=512",
		"blocksize-preferred=2048", "blocksize-maximum=2048",
		"blocksize-error-policy=error", NULL };
	t_nbdkit_start(&s, dir, "bmaxdrop", big);
	cfg = t_config(16 * MiB, 4096);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "retry_timeout=600");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	data = malloc(MiB);
	CHECK(data);
	t_fill(data, MiB, 31);
	write_all(f, data, MiB, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	t_nbdkit_stop(&s);
	t_nbdkit_start(&s, dir, "bmaxdrop", small);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == bstats(dev).conns));
	t_fill(data, MiB, 37);
	write_all(f, data, MiB, 0);
	int errs = 0;
	while ((r = wbc_fsync(f)) && errs < 3)
		errs++;
	wbc_stats(c, &st);
	printf("    the server back with 2 KiB blocks at most: fsync %d (%s), %llu write errors\n",
	       r, wbc_strerror(r), (unsigned long long)st.write_errors);
	CHECK_EQ(r, 0);
	CHECK_EQ(st.write_errors, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, data, MiB, 0);
	t_nbdkit_stop(&s);

	/* the server comes back with a minimum block size (8 KiB) above the
	 * alignment the device was added with (512): the pages' 4 KiB
	 * writes would all be refused (EINVAL), so it is not used, as an
	 * export that changed; back with 512, the write goes through */
	const char *bigmin[] = { "--filter=blocksize-policy", "file", file,
		"blocksize-minimum=8192", "blocksize-preferred=8192", "blocksize-error-policy=error",
		NULL };
	t_nbdkit_start(&s, dir, "bmaxdrop", big);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "retry_timeout=2");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	bool refused = restart_changed(&s, "bmaxdrop", bigmin);
	printf("    the server back with 8 KiB blocks at least: %s, %u of %u connections up\n",
	       refused ? "not used" : "used", bstats(dev).connected, bstats(dev).conns);
	CHECK(refused);
	CHECK_EQ(bstats(dev).connected, 0);
	t_fill(data, 4096, 41);
	CHECK_EQ(wbc_pwrite(f, data, 4096, 4096), 4096);
	r = wbc_fsync(f);          /* after retry_timeout; the page kept */
	CHECK(r < 0 && r != -EINVAL);
	t_nbdkit_stop(&s);
	t_nbdkit_start(&s, dir, "bmaxdrop", big);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == bstats(dev).conns));
	r = wbc_fsync(f);
	printf("    back with 512: fsync %d (%s)\n", r, wbc_strerror(r));
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* the failed fsync's error, once */
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, data, 4096, 4096);
	t_nbdkit_stop(&s);

	/* a device added on a server that said no block size writes whole
	 * pages (4 KiB): the server back with a minimum of 512 is used (it
	 * was refused as an export that changed) */
	const char *plain[] = { "file", file, NULL };
	const char *min512[] = { "--filter=blocksize-policy", "file", file,
		"blocksize-minimum=512", "blocksize-error-policy=error", NULL };
	t_nbdkit_start(&s, dir, "bmaxdrop", plain);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	dev = add(c, s.uri, "retry_timeout=600");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	t_nbdkit_stop(&s);
	t_nbdkit_start(&s, dir, "bmaxdrop", min512);
	t_fill(data, 4096, 43);
	CHECK_EQ(wbc_pwrite(f, data, 4096, 8192), 4096);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == bstats(dev).conns));
	r = wbc_fsync(f);
	printf("    added with no block size, back with a minimum of 512: fsync %d (%s)\n", r,
	       wbc_strerror(r));
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, data, 4096, 8192);
	free(data);
	t_nbdkit_stop(&s);
}

static void test_edges(void)
{
	printf("7. edges\n");
	/* the last bytes of an export of 1,000,000 bytes */
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "odd", (const char *[]){ "memory", "1000000", NULL });
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, s.uri, "");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 1000000);
	CHECK_EQ(wbc_pwrite(f, "0123456789", 10, 999990), 10);
	/* past the export's end: refused when made (it was cached and its
	 * writeback failed for good), across it short */
	CHECK_EQ(wbc_pwrite(f, "0123456789", 10, 1000000), -EFBIG);
	CHECK_EQ(wbc_pwrite(f, "abcdefghij", 10, 999995), 5);
	CHECK_EQ(wbc_pwrite(f, "0123456789", 10, 999990), 10);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, "0123456789", 10, 999990);
	t_nbdkit_stop(&s);
	printf("    the last 10 bytes of a 1,000,000-byte export: written\n");

	/* fua=1, the server without FUA (the fua filter's default): writes
	 * need its flush, and a restart loses what it did not flush */
	t_nbdkit_start(&s, dir, "nofua", (const char *[]){ "--filter=fua", "memory", "64M",
							   NULL });
	c = open_cache(16 * MiB);
	dev = add(c, s.uri, "fua=1,retry_timeout=600");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	char *data = malloc(8 * MiB);
	CHECK(data);
	t_fill(data, 8 * MiB, 19);
	write_all(f, data, 8 * MiB, 0);          /* over the background threshold */
	/* background writeback wrote down to its threshold and stopped: no
	 * write in flight to fail at the kill, the written ones unflushed */
	struct wbc_stats cs;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &cs), cs.writeback_bytes == 0 &&
			    cs.dirty_bytes <= cs.bg_thresh_bytes)));
	t_nbdkit_kill(&s);
	t_nbdkit_spawn(&s);                       /* empty again: the memory plugin */
	CHECK(T_WAIT_UNTIL(bstats(dev).connected > 0));
	int r = wbc_fsync(f);
	printf("    fua=1 without the server's FUA, its restart: fsync %d (%s)\n", r,
	       wbc_strerror(r));
	CHECK_EQ(r, -EIO);
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_cache_close(c);
	free(data);
	t_nbdkit_stop(&s);

	/* fua=1 on a server with FUA that comes back without it: not the
	 * export the writes rely on (every FUA write failed with EINVAL, for
	 * ever); it is not used, and once FUA is back the data lands */
	const char *with_fua[] = { "--filter=fua", "memory", "16M", "fuamode=native", NULL };
	const char *without_fua[] = { "--filter=fua", "memory", "16M", NULL };
	t_nbdkit_start(&s, dir, "fuaflip", with_fua);
	c = open_cache(16 * MiB);
	dev = add(c, s.uri, "fua=1,retry_timeout=600");
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	CHECK_EQ(wbc_pwrite(f, "AAAA", 4, 0), 4);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK(restart_changed(&s, "fuaflip", without_fua));
	CHECK_EQ(bstats(dev).connected, 0);
	char page[4096];                /* a whole page: no read of the rest */
	memset(page, 'B', sizeof(page));
	CHECK_EQ(wbc_pwrite(f, page, sizeof(page), 8192), (ssize_t)sizeof(page));
	r = wbc_fsync(f);
	printf("    fua=1, the server back without FUA: not used, fsync %d (%s)\n", r,
	       wbc_strerror(r));
	CHECK(r < 0 && r != -EINVAL);
	t_nbdkit_stop(&s);
	t_nbdkit_start(&s, dir, "fuaflip", with_fua);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected > 0));
	CHECK_EQ(wbc_fsync(f), 0);
	check_server(s.uri, page, sizeof(page), 8192);
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_cache_close(c);
	t_nbdkit_stop(&s);

	/* a socket that takes the connection and never says a word */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	CHECK((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/mute.sock", dir) <
	      sizeof(sa.sun_path));
	char uri[sizeof(sa.sun_path) + 32];
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", sa.sun_path);
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(ls >= 0 && !bind(ls, (struct sockaddr *)&sa, sizeof(sa)) && !listen(ls, 8));
	c = open_cache(16 * MiB);
	CHECK_EQ(add_err(c, uri, "timeout=1"), -ETIMEDOUT);
	wbc_cache_close(c);
	close(ls);

	/* a server whose export differs by connection (its size grows with
	 * each): the device is refused at its add, not written through
	 * connections that disagree on where the end is */
	char get_size[600];
	snprintf(get_size, sizeof(get_size), "get_size=n=$(cat %s/drift.n 2>/dev/null || echo 0); "
		 "echo $((n+1)) >%s/drift.n; echo $(((n+1)*1048576))", dir, dir);
	t_nbdkit_start(&s, dir, "drift", (const char *[]){ "eval", get_size,
		"pread=dd if=/dev/zero count=$3 iflag=count_bytes status=none",
		"pwrite=cat >/dev/null", "can_multi_conn=exit 0", NULL });
	c = open_cache(16 * MiB);
	r = add_err(c, s.uri, "conns=2");
	printf("    connections that find different exports: add %d (%s)\n", r, wbc_strerror(r));
	CHECK_EQ(r, -EIO);
	wbc_cache_close(c);
	t_nbdkit_stop(&s);
}

/* ---- 8: the test's getaddrinfo, held while dns_hold (after open) */
static pthread_mutex_t dns_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dns_cond = PTHREAD_COND_INITIALIZER;
static bool dns_hold;
static atomic_int dns_held;   /* resolutions waiting for the hold's end */

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	static int (*real)(const char *, const char *, const struct addrinfo *,
			   struct addrinfo **);
	if (!real)
		real = (int (*)(const char *, const char *, const struct addrinfo *,
				struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
	pthread_mutex_lock(&dns_lock);
	if (dns_hold) {
		atomic_fetch_add(&dns_held, 1);
		while (dns_hold)
			pthread_cond_wait(&dns_cond, &dns_lock);
	}
	pthread_mutex_unlock(&dns_lock);
	return real(node, service, hints, res);
}

/* A TCP proxy to a Unix socket: each accepted connection pumped to a
 * connection of its own to the server; proxy_cut() ends one. */
struct proxy {
	int lfd;
	const char *sock;
	pthread_t acceptor;
	pthread_mutex_t lock;
	int fds[16][2];               /* client, server; -1 once ended */
	atomic_uint n;
};
struct pump {
	struct proxy *p;
	unsigned i;
};

static void *pump_main(void *arg)
{
	struct pump *pu = arg;
	struct proxy *p = pu->p;
	int a = p->fds[pu->i][0], b = p->fds[pu->i][1];
	char buf[65536];
	for (;;) {
		struct pollfd pf[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
		if (poll(pf, 2, -1) < 0)
			continue;
		bool end = false;
		for (int k = 0; k < 2 && !end; k++) {
			if (!pf[k].revents)
				continue;
			ssize_t r = read(pf[k].fd, buf, sizeof(buf));
			if (r <= 0)
				end = true;
			for (ssize_t off = 0; !end && off < r;) {
				ssize_t w = send(pf[1 - k].fd, buf + off, (size_t)(r - off), MSG_NOSIGNAL);
				if (w <= 0)
					end = true;
				else
					off += w;
			}
		}
		if (end)
			break;
	}
	pthread_mutex_lock(&p->lock);
	close(a);
	close(b);
	p->fds[pu->i][0] = p->fds[pu->i][1] = -1;
	pthread_mutex_unlock(&p->lock);
	free(pu);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct proxy *p = arg;
	for (;;) {
		int c = accept(p->lfd, NULL, NULL);
		if (c < 0)
			return NULL;   /* the listener shut down */
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->sock);
		unsigned i = atomic_load(&p->n);
		CHECK(s >= 0 && i < 16);
		CHECK_EQ(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
		p->fds[i][0] = c;
		p->fds[i][1] = s;
		/* counted before its pump runs: the handshake goes through it,
		 * and the add may return before this thread runs again */
		atomic_store(&p->n, i + 1);
		struct pump *pu = malloc(sizeof(*pu));
		CHECK(pu);
		*pu = (struct pump){ p, i };
		pthread_t t;
		CHECK_EQ(pthread_create(&t, NULL, pump_main, pu), 0);
		pthread_detach(t);
	}
}

/* Start @p on a port of localhost the kernel picks; its port. */
static unsigned proxy_start(struct proxy *p, const char *sock)
{
	memset(p, 0, sizeof(*p));
	p->sock = sock;
	pthread_mutex_init(&p->lock, NULL);
	p->lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	CHECK(p->lfd >= 0);
	CHECK_EQ(bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_EQ(listen(p->lfd, 16), 0);
	CHECK_EQ(getsockname(p->lfd, (struct sockaddr *)&sa, &len), 0);
	CHECK_EQ(pthread_create(&p->acceptor, NULL, accept_main, p), 0);
	return ntohs(sa.sin_port);
}

/* End the proxy's connection @i (both of its sockets shut). */
static void proxy_cut(struct proxy *p, unsigned i)
{
	pthread_mutex_lock(&p->lock);
	CHECK(p->fds[i][0] >= 0);
	shutdown(p->fds[i][0], SHUT_RDWR);
	shutdown(p->fds[i][1], SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
}

static void proxy_stop(struct proxy *p)
{
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(p->acceptor, NULL);
	close(p->lfd);
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < atomic_load(&p->n); i++)
		for (int k = 0; k < 2; k++)
			if (p->fds[i][k] >= 0)
				shutdown(p->fds[i][k], SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
	/* the pumps end themselves */
	CHECK(T_WAIT_UNTIL(({
		pthread_mutex_lock(&p->lock);
		bool all = true;
		for (unsigned i = 0; i < atomic_load(&p->n); i++)
			all = all && p->fds[i][0] < 0;
		pthread_mutex_unlock(&p->lock);
		all;
	})));
}

struct closer {
	wbc_cache *c;
	int res;
	atomic_int done;
};

static void *close_main(void *arg)
{
	struct closer *cl = arg;
	cl->res = wbc_cache_close(cl->c);
	atomic_store(&cl->done, 1);
	return NULL;
}

static void test_resolve(void)
{
	printf("8. a reconnect's name resolution off the completion thread\n");
	struct t_nbdkit s;
	t_nbdkit_start(&s, dir, "proxied", (const char *[]){ "memory", "64M", NULL });
	struct proxy p;
	char uri[64];
	snprintf(uri, sizeof(uri), "nbd://localhost:%u", proxy_start(&p, s.sock));
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, uri, "conns=2,retry_timeout=600");
	CHECK_EQ(bstats(dev).connected, 2);
	CHECK_EQ(atomic_load(&p.n), 2);

	pthread_mutex_lock(&dns_lock);
	dns_hold = true;
	pthread_mutex_unlock(&dns_lock);
	proxy_cut(&p, 1);
	CHECK(T_WAIT_UNTIL(atomic_load(&dns_held) >= 1));   /* its reconnect resolves */
	CHECK_EQ(bstats(dev).connected, 1);
	char buf[65536];
	t_fill(buf, sizeof(buf), 81);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	struct fsync_job job = { .f = f };
	write_all(f, buf, sizeof(buf), 0);
	job.res = 1;
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, fsync_main, &job), 0);
	/* the fsync goes through connection 0 while connection 1's name is
	 * held (before, it waited for the resolution) */
	bool done = T_WAIT_UNTIL(__atomic_load_n(&job.res, __ATOMIC_ACQUIRE) != 1);
	pthread_mutex_lock(&dns_lock);
	dns_hold = false;
	pthread_cond_broadcast(&dns_cond);
	pthread_mutex_unlock(&dns_lock);
	pthread_join(th, NULL);
	printf("    fsync while a reconnect's resolution was held: %s, %d\n",
	       done ? "returned" : "waited for it", job.res);
	CHECK(done);
	CHECK_EQ(job.res, 0);
	CHECK(T_WAIT_UNTIL(bstats(dev).connected == 2));
	printf("    resolution let go: reconnected (%llu reconnects)\n",
	       (unsigned long long)bstats(dev).reconnects);
	CHECK(bstats(dev).reconnects >= 1);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_server(s.uri, buf, sizeof(buf), 0);

	/* the cache closed while a reconnect's resolution is held: the close
	 * does not wait for it (it joined the connector thread, there for as
	 * long as the resolver took: tens of seconds for a name no server
	 * answers for) */
	c = open_cache(16 * MiB);
	unsigned first = atomic_load(&p.n);
	add(c, uri, "conns=2");
	CHECK(T_WAIT_UNTIL(atomic_load(&p.n) == first + 2));
	atomic_store(&dns_held, 0);
	pthread_mutex_lock(&dns_lock);
	dns_hold = true;
	pthread_mutex_unlock(&dns_lock);
	proxy_cut(&p, first + 1);
	CHECK(T_WAIT_UNTIL(atomic_load(&dns_held) >= 1));
	struct closer cl = { .c = c };
	CHECK_EQ(pthread_create(&th, NULL, close_main, &cl), 0);
	done = T_WAIT_UNTIL(atomic_load(&cl.done));
	printf("    the cache closed while a reconnect's resolution was held: %s\n",
	       done ? "returned" : "waited for it");
	pthread_mutex_lock(&dns_lock);
	dns_hold = false;
	pthread_cond_broadcast(&dns_cond);
	pthread_mutex_unlock(&dns_lock);
	pthread_join(th, NULL);
	CHECK(done);
	CHECK_EQ(cl.res, 0);
	proxy_stop(&p);
	t_nbdkit_stop(&s);
}

int main(void)
{
	if (!t_nbdkit_available()) {
		printf("nbdkit is not installed\n");
		return T_SKIP;
	}
	dir = t_mkdtemp();
	test_specs();
	test_tls();
	test_data();
	test_window();
	test_faults();
	test_drop();
	test_stall();
	test_edges();
	test_block_limits();
	test_resolve();
	t_rmdir(dir);
	printf("nbd: ok\n");
	return 0;
}
