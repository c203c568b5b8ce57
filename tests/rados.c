/*
 * The rados backend against a real Ceph cluster (tests/ceph.h: the test
 * cluster of scripts/ceph-test-cluster; skipped where none can start):
 *   1. specs: options and tunables; bad ones refused with a message; a
 *      missing pool; a cluster that is not there fails within timeout=.
 *   2. data: 24 MiB at odd offsets through an 8 MiB cache over 1 MiB
 *      objects (I/Os across object boundaries, misses read back), read
 *      back through a fresh cache; the objects are where the layout says
 *      (librados), the size in object 0's xattr after fsync, not before;
 *      a file that is not there: ENOENT without WBC_O_CREAT.
 *   3. truncate: down inside an object removes the objects past it and
 *      cuts that one; up reads zeros; the size is durable; a sparse file of
 *      1 PiB shrinks and is removed visiting the objects written only; an
 *      open with another object size than the file's is refused, the data
 *      intact.
 *   4. what a dead cache left past the size (objects and an extent, made
 *      with librados) is removed at open: an extension reads zeros; also
 *      data past the size inside the object that holds it, the extent at
 *      that object's end.  A size that does not parse, or past 2^62:
 *      EUCLEAN, nothing trimmed.
 *   5. one writer per file: a second cache (another cluster client) gets
 *      EBUSY while the first holds the file; after its close it may open
 *      it.  A lock broken with wbc_rados_break_lock() (what `wbcache
 *      rados-unlock` does): the other cache opens the file, and the first
 *      one's writes to it fail at once, before its lock keeper (once an
 *      hour here) could notice: the break blocklisted its client (fenced;
 *      at risk, not lost, not on the cluster).  A name too long for an
 *      object name: ENAMETOOLONG from the break too.  (5b, after 11: the
 *      close of a fenced file with a size to write says its data past
 *      the stored size is lost, the next sync's EIO, keeper or not.)
 *   6. the OSD killed mid-stream (SIGKILL) and started again: fsync fails
 *      (timeout=) while it is down, the pages stay dirty (at risk, none
 *      lost), a writer to a mem device of the same cache finishes
 *      meanwhile; once the OSD is back fsync succeeds, a second handle
 *      sees the error once, and a fresh cache reads every byte back.
 *   7. the OSD killed again, operations waiting (timeout= far off): each
 *      device asks the monitor for the newest OSD map (the only way a
 *      client learns of the OSD's return) again and again, while its lock
 *      keeper waits on a lock renewal the dead OSD took: one device with
 *      an fsync waiting on its writes, one with nothing but a truncate's
 *      size write (a synchronous operation) waiting; both finish once the
 *      OSD is back.  The close of a file whose lock renewal waits on the
 *      dead OSD returns at once (it waited for the renewal).
 *   8. the cluster out of reach (its monitor and OSD stopped), writes
 *      failing after timeout=: the cache still closes (the map watcher's
 *      request to the monitor, which librados never times out, held the
 *      close for as long as the monitor was away).  Also in 1: a
 *      fractional timeout= (librados takes whole seconds) bounds the
 *      connection too.
 *  10. a create racing another cache's create, write and close (between
 *      its look for the file and its lock) keeps the other's data; an
 *      open racing another cache's remove: ENOENT, no empty file left
 *      (with O_CREAT: a new file, its layout recorded).
 *  11. a close whose unlock is lost (a timeout): released by a later
 *      sync or the cache's close, and no sync's error.
 *  12. an open that fails where such an unlock is owed: still owed, and
 *      made by the next sync.
 */
#include "testutil.h"
#include "ceph.h"
#include "wbcache_backend.h"
#include "backend/backends.h"

#include <fcntl.h>
#include <pthread.h>
#include <rados/librados.h>
#include <signal.h>

#define MiB (1u << 20)
#define T_MIN(a, b) ((a) < (b) ? (a) : (b))

static char conf[300], base[400];

static double t_secs(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
static rados_t cl;
static rados_ioctx_t ioc;

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

static wbc_dev *add(wbc_cache *c, const char *opts)
{
	char spec[700], msg[256];
	snprintf(spec, sizeof(spec), "%s%s%s", base, *opts ? "," : "", opts);
	wbc_dev *dev;
	int err = wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "%s: %s\n", spec, msg);
		exit(1);
	}
	return dev;
}

static int add_err(wbc_cache *c, const char *spec)
{
	char msg[256] = "";
	wbc_dev *dev;
	int err = wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg));
	printf("    '%s': %s\n", spec, err ? msg : "accepted");
	CHECK(!err || msg[0]);
	return err;
}

static void write_all(wbc_file *f, const char *buf, size_t len, uint64_t off)
{
	for (size_t at = 0; at < len; at += 100000)
		CHECK_EQ(wbc_pwrite(f, buf + at, T_MIN((size_t)100000, len - at), off + at),
			 (ssize_t)T_MIN((size_t)100000, len - at));
}

/* Through a fresh cache: file @name holds @want at @off, and is @size long. */
static void check_file(const char *name, const char *opts, const char *want, size_t len,
		       uint64_t off, uint64_t size)
{
	wbc_cache *c = open_cache(4 * MiB);   /* smaller than the data: misses */
	wbc_dev *dev = add(c, opts);
	wbc_file *f;
	char *back = malloc(len);
	CHECK(back);
	CHECK_EQ(wbc_file_open(dev, name, 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), size);
	CHECK_EQ(wbc_pread(f, back, len, off), (ssize_t)len);
	CHECK(!memcmp(back, want, len));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(back);
}

static void objname(char *out, size_t n, const char *name, uint64_t idx)
{
	snprintf(out, n, "t%d/%s.%016llx", (int)getpid(), name, (unsigned long long)idx);
}

/* The object's size, or -ENOENT. */
static int64_t obj_size(const char *name, uint64_t idx)
{
	char o[300];
	objname(o, sizeof(o), name, idx);
	uint64_t sz;
	time_t mt;
	int r = rados_stat(ioc, o, &sz, &mt);
	return r < 0 ? r : (int64_t)sz;
}

static int64_t size_xattr(const char *name)
{
	char o[300], buf[32];
	objname(o, sizeof(o), name, 0);
	int r = rados_getxattr(ioc, o, "wbcache.size", buf, sizeof(buf) - 1);
	if (r < 0)
		return r;
	buf[r] = '\0';
	return strtoll(buf, NULL, 10);
}

/* ------------------------------------------------------------------ */

static void test_specs(void)
{
	printf("1. specs\n");
	wbc_cache *c = open_cache(16 * MiB);
	char spec[700];
	snprintf(spec, sizeof(spec), "%s,object_size=3M", base);
	CHECK_EQ(add_err(c, spec), -EINVAL);
	snprintf(spec, sizeof(spec), "%s,frob=1", base);
	CHECK_EQ(add_err(c, spec), -EINVAL);
	snprintf(spec, sizeof(spec), "%s,window=fixed:0", base);
	CHECK_EQ(add_err(c, spec), -EINVAL);
	snprintf(spec, sizeof(spec), "%s,min_ratio=500", base);
	CHECK_EQ(add_err(c, spec), -EINVAL);
	CHECK_EQ(add_err(c, "rados:"), -EINVAL);
	snprintf(spec, sizeof(spec), "rados:nosuchpool,conf=%s", conf);
	CHECK(add_err(c, spec) < 0);
	snprintf(spec, sizeof(spec), "rados:wbc,conf=/nonexistent.conf");
	CHECK(add_err(c, spec) < 0);
	/* a cluster nobody answers for: refused within timeout= */
	char dead[400];
	snprintf(dead, sizeof(dead), "%s.dead", conf);
	FILE *fp = fopen(dead, "w");
	CHECK(fp);
	fprintf(fp, "[global]\nmon_host = v1:127.0.0.1:9\nauth_client_required = none\n");
	fclose(fp);
	snprintf(spec, sizeof(spec), "rados:wbc,conf=%s,timeout=1", dead);
	CHECK(add_err(c, spec) < 0);
	/* a fraction of a second too: librados takes whole seconds, and
	 * "0.5" refused left client_mount_timeout at 300 s (and the
	 * operations' timeouts at never); the bound tells 1 s from 300 s
	 * with room for a loaded machine, not a timing */
	snprintf(spec, sizeof(spec), "rados:wbc,conf=%s,timeout=0.5", dead);
	double t0 = t_secs();
	CHECK(add_err(c, spec) < 0);
	printf("    timeout=0.5: refused after %.1f s\n", t_secs() - t0);
	CHECK(t_secs() - t0 < 120);
	unlink(dead);
	snprintf(spec, sizeof(spec), "%s,object_size=1M,window=fixed:8,min_ratio=5,on_error=drop,"
		 "timeout=5,lock_check=1", base);
	CHECK_EQ(add_err(c, spec), 0);
	wbc_dev *d = add(c, "");
	struct wbc_backend_stats st;
	CHECK_EQ(wbc_dev_backend_stats(d, &st), 0);
	CHECK(st.window_bytes > 0);
	CHECK_EQ(st.connected, 1);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void test_data(void)
{
	printf("2. data\n");
	size_t len = 24 * MiB;
	uint64_t off = MiB / 2 + 512;   /* not page- nor object-aligned */
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 7);
	wbc_cache *c = open_cache(8 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "data", 0, &f), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "data", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_size(f), 0);
	CHECK_EQ(size_xattr("data"), 0);
	write_all(f, data, len, off);
	/* the cache holds 8 MiB: most of it went out already, and comes back */
	char *back = malloc(len);
	CHECK(back);
	CHECK_EQ(wbc_pread(f, back, len, off), (ssize_t)len);
	CHECK(!memcmp(back, data, len));
	free(back);
	CHECK(size_xattr("data") < (int64_t)(off + len));   /* not durable yet */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(size_xattr("data"), off + len);              /* fsync wrote it */
	struct wbc_backend_stats st;
	CHECK_EQ(wbc_dev_backend_stats(dev, &st), 0);
	printf("    window %llu KiB, rtt %llu us (base %llu us)\n",
	       (unsigned long long)st.window_bytes >> 10, (unsigned long long)st.rtt_ns / 1000,
	       (unsigned long long)st.min_rtt_ns / 1000);
	CHECK(st.rtt_ns > 0 && st.min_rtt_ns > 0);
	CHECK_EQ(st.inflight_bytes, 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	/* the layout: 1 MiB objects, the last one holding the end */
	uint64_t end = off + len, last = (end - 1) / MiB;
	for (uint64_t i = 0; i <= last; i++)
		CHECK_EQ(obj_size("data", i), i < last ? MiB : end - last * MiB);
	CHECK_EQ(obj_size("data", last + 1), -ENOENT);
	check_file("data", "object_size=1M", data, len, off, end);
	/* the head, never written, reads as zeros */
	char *zeros = calloc(1, off);
	CHECK(zeros);
	check_file("data", "object_size=1M", zeros, off, 0, end);
	free(zeros);
	free(data);
}

static void test_truncate(void)
{
	printf("3. truncate\n");
	size_t len = 6 * MiB;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 9);
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "trunc", WBC_O_CREAT, &f), 0);
	write_all(f, data, len, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(obj_size("trunc", 5), MiB);
	uint64_t cut = 2 * MiB + 1000;
	CHECK_EQ(wbc_truncate(f, cut), 0);
	CHECK_EQ(obj_size("trunc", 2), 1000);                  /* cut */
	CHECK_EQ(obj_size("trunc", 3), -ENOENT);               /* removed */
	CHECK_EQ(obj_size("trunc", 5), -ENOENT);
	CHECK_EQ(size_xattr("trunc"), cut);
	CHECK_EQ(wbc_truncate(f, 5 * MiB), 0);                 /* up: zeros */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	/* a sparse file of 1 PiB: a shrink and a remove visit the objects
	 * writes reached, not the 2^30 the size spans (they took years) */
	CHECK_EQ(wbc_file_open(dev, "sparse", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, 4096, 0), 4096);
	CHECK_EQ(wbc_truncate(f, 1ull << 50), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_truncate(f, MiB), 0);
	CHECK_EQ(wbc_truncate(f, 1ull << 50), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "sparse"), 0);
	CHECK_EQ(obj_size("sparse", 0), -ENOENT);
	CHECK_EQ(wbc_cache_close(c), 0);
	char *want = calloc(1, 5 * MiB);
	CHECK(want);
	memcpy(want, data, cut);
	check_file("trunc", "object_size=1M", want, 5 * MiB, 0, 5 * MiB);
	/* the layout is the file's: an open with another object size is
	 * refused, before it touches anything (it read other objects' bytes,
	 * and its trim removed data) */
	c = open_cache(16 * MiB);
	dev = add(c, "object_size=64K");
	CHECK_EQ(wbc_file_open(dev, "trunc", 0, &f), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_file("trunc", "object_size=1M", want, 5 * MiB, 0, 5 * MiB);
	free(want);
	free(data);
}

static void test_remove(void)
{
	printf("3b. remove: every object goes, the name opens anew\n");
	size_t len = 3 * MiB + 5000;
	char *data = malloc(len);
	CHECK(data);
	t_fill(data, len, 11);
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "gone", WBC_O_CREAT, &f), 0);
	write_all(f, data, len, 0);
	CHECK_EQ(wbc_fsync(f), 0);
	/* dirty pages past what was written back: dropped, never written */
	write_all(f, data, MiB, 5 * MiB);
	CHECK_EQ(obj_size("gone", 3), 5000);
	CHECK_EQ(wbc_file_remove(dev, "gone"), -EBUSY);          /* open */
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "gone"), 0);
	for (uint64_t i = 0; i <= 6; i++)
		CHECK_EQ(obj_size("gone", i), -ENOENT);
	CHECK_EQ(wbc_file_remove(dev, "gone"), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "gone", 0, &f), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "gone", WBC_O_CREAT, &f), 0);   /* a new one */
	CHECK_EQ(wbc_file_size(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "gone"), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.dirty_bytes, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(obj_size("gone", 0), -ENOENT);
	free(data);
}

static void test_dead_cache_leftovers(void)
{
	printf("4. what a dead cache left past the size\n");
	/* a file of 1.5 MiB whose cache wrote up to 6 MiB and died before
	 * fsync: objects 2..5 exist, the extent says 8 MiB */
	char o[300], buf[64];
	char *junk = malloc(MiB);
	CHECK(junk);
	memset(junk, 0x5a, MiB);
	for (uint64_t i = 0; i < 6; i++) {
		objname(o, sizeof(o), "dead", i);
		CHECK_EQ(rados_write_full(ioc, o, junk, MiB), 0);
	}
	objname(o, sizeof(o), "dead", 0);
	int n = snprintf(buf, sizeof(buf), "%u", 3 * MiB / 2);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.size", buf, (size_t)n), 0);
	n = snprintf(buf, sizeof(buf), "%u", 8 * MiB);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.extent", buf, (size_t)n), 0);
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "dead", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 3 * MiB / 2);
	CHECK_EQ(obj_size("dead", 1), MiB / 2);               /* cut at the size */
	CHECK_EQ(obj_size("dead", 2), -ENOENT);
	CHECK_EQ(obj_size("dead", 5), -ENOENT);
	CHECK_EQ(wbc_truncate(f, 6 * MiB), 0);
	char *back = malloc(6 * MiB);
	CHECK(back);
	CHECK_EQ(wbc_pread(f, back, 6 * MiB, 0), 6 * MiB);
	for (size_t i = 0; i < 6 * MiB; i++)
		CHECK_EQ(back[i], i < 3 * MiB / 2 ? 0x5a : 0);
	CHECK_EQ(wbc_file_close(f), 0);

	/* the extent at the end of the object holding the size (what an
	 * open after a crash used to record) and data past the size in that
	 * object, from a cache that died again: cut at open too */
	for (uint64_t i = 0; i < 2; i++) {
		objname(o, sizeof(o), "dead2", i);
		CHECK_EQ(rados_write_full(ioc, o, junk, MiB), 0);
	}
	objname(o, sizeof(o), "dead2", 0);
	n = snprintf(buf, sizeof(buf), "%u", 3 * MiB / 2);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.size", buf, (size_t)n), 0);
	n = snprintf(buf, sizeof(buf), "%u", 2 * MiB);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.extent", buf, (size_t)n), 0);
	CHECK_EQ(wbc_file_open(dev, "dead2", 0, &f), 0);
	CHECK_EQ(obj_size("dead2", 1), MiB / 2);
	CHECK_EQ(wbc_truncate(f, 2 * MiB), 0);
	CHECK_EQ(wbc_pread(f, back, 2 * MiB, 0), 2 * MiB);
	for (size_t i = 0; i < 2 * MiB; i++)
		CHECK_EQ(back[i], i < 3 * MiB / 2 ? 0x5a : 0);
	CHECK_EQ(wbc_file_close(f), 0);

	/* a size that does not parse: refused, nothing trimmed (it was read
	 * as 0, and every object past it removed) */
	for (uint64_t i = 0; i < 3; i++) {
		objname(o, sizeof(o), "garbled", i);
		CHECK_EQ(rados_write_full(ioc, o, junk, MiB), 0);
	}
	objname(o, sizeof(o), "garbled", 0);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.size", "12abc", 5), 0);
	n = snprintf(buf, sizeof(buf), "%u", 3 * MiB);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.extent", buf, (size_t)n), 0);
	CHECK_EQ(wbc_file_open(dev, "garbled", 0, &f), -EUCLEAN);
	CHECK_EQ(obj_size("garbled", 0), MiB);
	CHECK_EQ(obj_size("garbled", 2), MiB);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.size", "", 0), 0);
	CHECK_EQ(wbc_file_open(dev, "garbled", 0, &f), -EUCLEAN);
	CHECK_EQ(obj_size("garbled", 2), MiB);
	/* a number, but no file's size (past 2^62: its objects' offsets
	 * wrapped around), was a file of 16 EiB */
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.size", "18446744073709551615", 20), 0);
	CHECK_EQ(wbc_file_open(dev, "garbled", 0, &f), -EUCLEAN);
	CHECK_EQ(obj_size("garbled", 2), MiB);
	CHECK_EQ(wbc_cache_close(c), 0);
	free(back);
	free(junk);
}

static void test_lock(void)
{
	printf("5. one writer per file\n");
	wbc_cache *a = open_cache(16 * MiB), *b = open_cache(16 * MiB);
	/* b never re-asserts its lock: only the fence of the break stops it */
	wbc_dev *da = add(a, "lock_check=0.1"), *db = add(b, "lock_check=3600,retry_timeout=1");
	wbc_file *fa, *fb;
	CHECK_EQ(wbc_file_open(da, "locked", WBC_O_CREAT, &fa), 0);
	CHECK_EQ(wbc_file_open(db, "locked", WBC_O_CREAT, &fb), -EBUSY);
	CHECK_EQ(wbc_file_open(db, "locked", 0, &fb), -EBUSY);
	printf("    a second cache: EBUSY\n");
	char buf[8192];
	memset(buf, 1, sizeof(buf));
	CHECK_EQ(wbc_pwrite(fa, buf, sizeof(buf), 0), sizeof(buf));
	CHECK_EQ(wbc_fsync(fa), 0);
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_dev_sync(da), 0);   /* the file goes once clean: its lock with it */
	CHECK(T_WAIT_UNTIL(wbc_file_open(db, "locked", 0, &fb) == 0));
	printf("    after the first closed it: the second opens it\n");

	/* the second holds it now; the first cannot have it */
	CHECK_EQ(wbc_file_open(da, "locked", 0, &fa), -EBUSY);
	char msg[256];
	CHECK_EQ(wbc_rados_break_lock(base, "nosuchfile", msg, sizeof(msg)), -ENOENT);
	/* a name no file can have (its object names cut short): said so */
	char longname[1100];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_EQ(wbc_rados_break_lock(base, longname, msg, sizeof(msg)), -ENAMETOOLONG);
	int broken = wbc_rados_break_lock(base, "locked", msg, sizeof(msg));
	printf("    break: %d (%s)\n", broken, msg);
	CHECK_EQ(broken, 1);
	CHECK_EQ(wbc_rados_break_lock(base, "locked", msg, sizeof(msg)), 0);   /* none left */
	CHECK_EQ(wbc_file_open(da, "locked", 0, &fa), 0);         /* the first takes it */
	/* the second one does not know (it checks once an hour): the break
	 * fenced its client, and the OSDs refuse its writes */
	memset(buf, 2, sizeof(buf));
	CHECK_EQ(wbc_pwrite(fb, buf, sizeof(buf), 0), sizeof(buf));
	int r = wbc_fsync(fb);
	printf("    the cache whose lock was broken: fsync %d (%s)\n", r, wbc_strerror(r));
	CHECK_EQ(r, -EIO);
	struct wbc_stats st;
	wbc_stats(b, &st);
	CHECK(st.at_risk_bytes > 0);
	CHECK_EQ(st.lost_bytes, 0);
	char back[8192];
	CHECK_EQ(wbc_pread(fa, back, sizeof(back), 0), sizeof(back));
	memset(buf, 1, sizeof(buf));
	CHECK(!memcmp(back, buf, sizeof(back)));                   /* not written */
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_cache_close(a), 0);
	char o[300];
	objname(o, sizeof(o), "locked", 0);
	CHECK_EQ(rados_read(ioc, o, back, sizeof(back), 0), (int)sizeof(back));
	CHECK(!memcmp(back, buf, sizeof(back)));                   /* on the cluster too */
	CHECK_EQ(wbc_file_close(fb), 0);
	/* what it could not write is counted lost at close, not hidden */
	wbc_cache_close_stats(b, &st);
	printf("    closed: %llu bytes lost (counted)\n", (unsigned long long)st.lost_bytes);
	CHECK_EQ(st.lost_bytes, sizeof(buf));
}

/* ------------------------------------------------------------------ */

struct fsync_job {
	wbc_file *f;
	int res;
};

static void *fsync_main(void *arg)
{
	struct fsync_job *j = arg;
	j->res = wbc_fsync(j->f);
	return NULL;
}

/* A failure while the OSD is down must not leave the shared cluster
 * without it for the tests after this one. */
static bool osd_down;
static void restart_osd(void)
{
	if (!osd_down)
		return;
	osd_down = false;
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/ceph-test-cluster start-osd %s 0", t_ceph_dir);
	if (system(cmd))
		fprintf(stderr, "could not start the OSD again\n");
}

static void test_osd_killed(void)
{
	printf("6. the OSD killed mid-stream, started again\n");
	size_t len1 = 4 * MiB, len2 = 32 * MiB;
	char *data = malloc(len1 + len2);
	CHECK(data);
	t_fill(data, len1 + len2, 11);
	wbc_cache *c = open_cache(96 * MiB);
	wbc_dev *dev = add(c, "object_size=1M,timeout=1,retry_timeout=600"), *mem;
	CHECK_EQ(wbc_dev_add(c, "mem", &mem), 0);
	wbc_file *h1, *h2;
	CHECK_EQ(wbc_file_open(dev, "faults", WBC_O_CREAT, &h1), 0);
	CHECK_EQ(wbc_file_open(dev, "faults", 0, &h2), 0);
	write_all(h1, data, len1, 0);
	CHECK_EQ(wbc_fsync(h1), 0);

	write_all(h1, data + len1, len2, len1);
	osd_down = true;
	atexit(restart_osd);
	t_ceph_ctl("kill-osd", "0");
	struct fsync_job job = { .f = h1 };
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, fsync_main, &job), 0);
	pthread_join(th, NULL);
	printf("    fsync with the OSD down: %d (%s)\n", job.res, wbc_strerror(job.res));
	CHECK_EQ(job.res, -EIO);
	struct wbc_backend_stats bs;
	CHECK_EQ(wbc_dev_backend_stats(dev, &bs), 0);
	CHECK_EQ(bs.connected, 0);
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("    OSD down: %llu KiB at risk, %llu lost\n",
	       (unsigned long long)st.at_risk_bytes >> 10, (unsigned long long)st.lost_bytes);
	CHECK(st.at_risk_bytes > 0);
	CHECK_EQ(st.lost_bytes, 0);
	/* another device of the cache goes on meanwhile */
	t_stream(mem, NULL, "other", 48 * MiB, 5, 1);
	printf("    48 MiB written to a mem device while the OSD was down\n");

	restart_osd();
	int errs = 0, r;
	while ((r = wbc_fsync(h1)) && errs < 100)
		errs++;
	printf("    OSD back: fsync errors reported meanwhile: %d\n", errs);
	CHECK_EQ(r, 0);
	CHECK(wbc_fsync(h2) < 0);                 /* h2 sees the error once ... */
	CHECK_EQ(wbc_fsync(h2), 0);               /* ... and only once */
	wbc_stats(c, &st);
	CHECK_EQ(st.at_risk_bytes, 0);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(wbc_file_close(h1), 0);
	CHECK_EQ(wbc_file_close(h2), 0);
	wbc_cache_close_stats(c, &st);
	CHECK_EQ(st.lost_bytes, 0);
	check_file("faults", "object_size=1M", data, len1 + len2, 0, len1 + len2);
	free(data);
}

struct truncate_job {
	wbc_file *f;
	uint64_t size;
	int res;
};

static void *truncate_main(void *arg)
{
	struct truncate_job *j = arg;
	j->res = wbc_truncate(j->f, j->size);
	return NULL;
}

struct close_job {
	wbc_file *f;
	int res;
	atomic_bool done;
};

/* The file closed (clean: the backend's close with it). */
static void *close_main(void *arg)
{
	struct close_job *j = arg;
	j->res = wbc_file_close(j->f);
	atomic_store(&j->done, true);
	return NULL;
}

/* Wait for @dev's map watcher to ask twice more than @from.  The watcher
 * asks each second while an operation waits; the bound of 20 s only ends
 * the wait on a watcher that does not ask at all (the keeper's lock
 * renewal on the dead OSD waits for timeout=, 120 s). */
static void two_more_map_requests(wbc_dev *dev, uint64_t from, const char *what)
{
	for (int i = 0; i < 200 && rados_map_requests(dev) < from + 2; i++)
		usleep(100 * 1000);
	uint64_t n = rados_map_requests(dev) - from;
	printf("    %s: %llu requests for the newest OSD map\n", what, (unsigned long long)n);
	CHECK(n >= 2);
}

static void test_map_watch(void)
{
	printf("7. the OSD down, operations waiting: the newest OSD map asked for\n");
	char *data = malloc(2 * MiB);
	CHECK(data);
	t_fill(data, 2 * MiB, 12);
	wbc_cache *c = open_cache(64 * MiB);
	/* the keepers renew every 0.1 s: a renewal waits on the dead OSD */
	wbc_dev *da = add(c, "object_size=1M,timeout=120,lock_check=0.1");
	wbc_dev *db = add(c, "object_size=1M,timeout=120,lock_check=0.1");
	/* a clean file alone on its device: its keeper's renewal waits */
	wbc_dev *dc = add(c, "object_size=1M,timeout=120,lock_check=0.1");
	wbc_file *fa, *fb, *fc;
	CHECK_EQ(wbc_file_open(da, "mapwatch-a", WBC_O_CREAT, &fa), 0);
	CHECK_EQ(wbc_file_open(db, "mapwatch-b", WBC_O_CREAT, &fb), 0);
	CHECK_EQ(wbc_file_open(dc, "mapwatch-c", WBC_O_CREAT, &fc), 0);
	write_all(fa, data, MiB, 0);
	write_all(fb, data, MiB, 0);
	CHECK_EQ(wbc_fsync(fa), 0);
	CHECK_EQ(wbc_fsync(fb), 0);
	write_all(fa, data + MiB, MiB, MiB);
	uint64_t ra = rados_map_requests(da), rb = rados_map_requests(db),
		 rc = rados_map_requests(dc);

	osd_down = true;
	atexit(restart_osd);
	t_ceph_ctl("kill-osd", "0");
	struct fsync_job fj = { .f = fa };
	struct truncate_job tj = { .f = fb, .size = 3 * MiB };
	pthread_t tf, tt;
	CHECK_EQ(pthread_create(&tf, NULL, fsync_main, &fj), 0);
	CHECK_EQ(pthread_create(&tt, NULL, truncate_main, &tj), 0);
	two_more_map_requests(da, ra, "an fsync waiting on its writes");
	two_more_map_requests(db, rb, "a truncate waiting on its size write");
	struct wbc_backend_stats bs;
	/* the fsync's writes, waiting (its thread may not have sent them
	 * when the keeper's renewals made the map requests above) */
	CHECK(T_WAIT_UNTIL((wbc_dev_backend_stats(da, &bs), bs.inflight_bytes > 0)));
	CHECK_EQ(wbc_dev_backend_stats(db, &bs), 0);
	CHECK_EQ(bs.inflight_bytes, 0);  /* no I/O: only the size write waits */
	/* the close of a file whose lock renewal waits on the dead OSD (the
	 * only operation of dc) does not wait for it: its unlock goes out
	 * asynchronously (the close, on the completion thread of a file's
	 * last write, held every completion of the device behind it) */
	two_more_map_requests(dc, rc, "a lock renewal waiting");
	struct close_job cj = { .f = fc };
	pthread_t tc;
	CHECK_EQ(pthread_create(&tc, NULL, close_main, &cj), 0);
	bool closed = T_WAIT_UNTIL(atomic_load(&cj.done));
	printf("    the close of a file whose renewal waits: %s\n",
	       closed ? "returned" : "waited on the renewal");
	CHECK(closed);

	restart_osd();
	pthread_join(tc, NULL);
	CHECK_EQ(cj.res, 0);
	pthread_join(tf, NULL);
	pthread_join(tt, NULL);
	printf("    OSD back: fsync %d, truncate %d\n", fj.res, tj.res);
	CHECK_EQ(fj.res, 0);
	CHECK_EQ(tj.res, 0);
	CHECK_EQ(size_xattr("mapwatch-b"), 3 * MiB);
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_file_close(fb), 0);
	struct wbc_stats st;
	wbc_cache_close_stats(c, &st);
	CHECK_EQ(st.lost_bytes, 0);
	check_file("mapwatch-a", "object_size=1M", data, 2 * MiB, 0, 2 * MiB);
	check_file("mapwatch-c", "object_size=1M", data, 0, 0, 0);   /* unlocked */
	free(data);
}

/* The daemons of the test cluster stopped (SIGSTOP: the cluster out of
 * reach, its sockets open) and let go on. */
static pid_t frozen[2], guard;
static pid_t daemon_pid(const char *name)
{
	char path[400];
	snprintf(path, sizeof(path), "%s/run/%s.pid", t_ceph_dir, name);
	FILE *fp = fopen(path, "r");
	CHECK(fp);
	int pid = 0;
	CHECK_EQ(fscanf(fp, "%d", &pid), 1);
	fclose(fp);
	return (pid_t)pid;
}

static void thaw(void)
{
	for (int i = 0; i < 2; i++)
		if (frozen[i] > 0)
			kill(frozen[i], SIGCONT);
	frozen[0] = frozen[1] = 0;
	if (guard > 0) {
		kill(guard, SIGKILL);
		waitpid(guard, NULL, 0);
		guard = 0;
	}
}

static void test_unreachable(void)
{
	printf("8. the cluster out of reach (monitor stopped, OSD killed): the cache closes\n");
	char data[65536];
	memset(data, 0x33, sizeof(data));
	wbc_cache *c = open_cache(16 * MiB);
	wbc_dev *dev = add(c, "object_size=1M,timeout=3,on_error=drop");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "unreach", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, sizeof(data), 0), (ssize_t)sizeof(data));
	CHECK_EQ(wbc_fsync(f), 0);
	/* the OSD killed, not stopped: a stopped one, let go on, once left
	 * a placement group that served no more (its read lease), which
	 * hung the tests after this one */
	frozen[0] = daemon_pid("mon.a");
	/* whatever happens here, the monitor goes on within 60 s (a hang
	 * below must not leave the shared cluster stopped) */
	if (!(guard = fork())) {
		sleep(60);
		kill(frozen[0], SIGCONT);
		_exit(0);
	}
	CHECK(guard > 0);
	atexit(thaw);
	osd_down = true;
	atexit(restart_osd);
	CHECK_EQ(kill(frozen[0], SIGSTOP), 0);
	t_ceph_ctl("kill-osd", "0");
	uint64_t asked = rados_map_requests(dev);
	CHECK_EQ(wbc_pwrite(f, data, sizeof(data), sizeof(data)), (ssize_t)sizeof(data));
	/* its writes wait (timeout=): the map watcher asks the stopped
	 * monitor for a map meanwhile, a request librados never times out */
	CHECK_EQ(wbc_fsync(f), -EIO);
	printf("    fsync failed; %llu requests for a map sent meanwhile\n",
	       (unsigned long long)(rados_map_requests(dev) - asked));
	CHECK(rados_map_requests(dev) > asked);
	CHECK_EQ(wbc_file_close(f), 0);
	double t0 = t_secs();
	int r = wbc_cache_close(c);
	double took = t_secs() - t0;
	/* the close returned while the monitor was still stopped (its size
	 * write and unlock time out, 3 s): it hung until the guard let the
	 * monitor go (the guard's end, not a bound on the close's time) */
	pid_t g = waitpid(guard, NULL, WNOHANG);
	bool mon_stopped = g == 0;
	if (g == guard)
		guard = 0;   /* reaped */
	printf("    cache closed in %.1f s (%d), the monitor %s\n", took, r,
	       mon_stopped ? "still stopped" : "let go by the guard first");
	thaw();
	restart_osd();
	CHECK(mon_stopped);
}

/* Write @len bytes at @off and wait until the flusher wrote them back
 * (the size stays as it was in the cluster: no fsync). */
static void write_back_unsized(wbc_file *f, const char *buf, size_t len, uint64_t off)
{
	write_all(f, buf, len, off);
	struct wbc_file_info in;
	double t0 = t_secs();
	for (;;) {
		CHECK_EQ(wbc_file_info(f, &in), 0);
		if (!in.unwritten_bytes || t_secs() - t0 > 60)
			break;
		usleep(10000);
	}
	CHECK_EQ(in.unwritten_bytes, 0);
}

/* A 16 MiB cache whose dirty pages are written back at once, without an
 * fsync (expired after 10 ms, the flusher every 50 ms). */
static wbc_cache *open_eager(void)
{
	struct wbc_config cfg = t_config(16 * MiB, 4096);
	cfg.dirty_expire_centisecs = 1;
	cfg.dirty_writeback_centisecs = 5;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}

static void test_close_size_fails(void)
{
	printf("9. a close whose size write fails keeps its lock; the size is written later\n");
	wbc_cache *c = open_eager();
	wbc_dev *dev = add(c, "object_size=1M");
	char *data = malloc(2 * MiB);
	CHECK(data);
	for (size_t i = 0; i < 2 * MiB; i++)
		data[i] = (char)(i * 7 + i / 4096);
	const char *names[3] = {"closefail-a", "closefail-b", "closefail-c"};
	wbc_file *f[3];
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(wbc_file_open(dev, names[i], WBC_O_CREAT, &f[i]), 0);
		write_all(f[i], data, MiB, 0);
		CHECK_EQ(wbc_fsync(f[i]), 0);
		/* the second MiB: in the cluster, its size not */
		write_back_unsized(f[i], data + MiB, MiB, MiB);
		CHECK_EQ(size_xattr(names[i]), MiB);
	}
	rados_fail_sizes(dev, true);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(wbc_file_close(f[i]), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* tried again: fails again */
	CHECK_EQ(size_xattr(names[0]), MiB);
	/* the lock is kept: another cache would have taken the second MiB
	 * for a dead cache's leftovers and trimmed it (it did) */
	wbc_cache *c2 = open_cache(4 * MiB);
	wbc_dev *dev2 = add(c2, "object_size=1M");
	wbc_file *g;
	CHECK_EQ(wbc_file_open(dev2, names[0], 0, &g), -EBUSY);
	CHECK_EQ(obj_size(names[0], 1), MiB);
	/* the third's lock broken by hand: another cache opens it (and
	 * trims), and its size is never overwritten by the old close's */
	char o[300], tag[64], clients[256], cookies[256], addrs[256];
	size_t tl = sizeof(tag), cl_ = sizeof(clients), kl = sizeof(cookies), al = sizeof(addrs);
	int excl;
	objname(o, sizeof(o), names[2], 0);
	CHECK_EQ(rados_list_lockers(ioc, o, "wbcache", &excl, tag, &tl, clients, &cl_, cookies, &kl,
				    addrs, &al), 1);
	CHECK_EQ(rados_break_lock(ioc, o, "wbcache", clients, cookies), 0);
	CHECK_EQ(wbc_file_open(dev2, names[2], 0, &g), 0);
	CHECK_EQ(wbc_file_size(g), MiB);
	CHECK_EQ(wbc_pwrite(g, "new", 3, 0), 3);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_cache_close(c2), 0);
	rados_fail_sizes(dev, false);
	/* an open of one by this cache writes its size first */
	CHECK_EQ(wbc_file_open(dev, names[0], 0, &f[0]), 0);
	CHECK_EQ(wbc_file_size(f[0]), 2 * MiB);
	CHECK_EQ(size_xattr(names[0]), 2 * MiB);
	CHECK_EQ(wbc_file_close(f[0]), 0);
	/* a sync writes the second's, and says the third's is lost */
	CHECK_EQ(size_xattr(names[1]), MiB);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	CHECK_EQ(size_xattr(names[1]), 2 * MiB);
	CHECK_EQ(size_xattr(names[2]), MiB);
	CHECK_EQ(wbc_dev_sync(dev), 0);   /* told once */
	/* a failed close's lock broken by hand, then the name opened again
	 * in this cache: the open takes the lock anew and trims the second
	 * MiB; the loss is the next sync's error, once (it was told nowhere) */
	const char *d = "closefail-d";
	CHECK_EQ(wbc_file_open(dev, d, WBC_O_CREAT, &f[0]), 0);
	write_all(f[0], data, MiB, 0);
	CHECK_EQ(wbc_fsync(f[0]), 0);
	write_back_unsized(f[0], data + MiB, MiB, MiB);
	rados_fail_sizes(dev, true);
	CHECK_EQ(wbc_file_close(f[0]), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	rados_fail_sizes(dev, false);
	objname(o, sizeof(o), d, 0);
	tl = sizeof(tag), cl_ = sizeof(clients), kl = sizeof(cookies), al = sizeof(addrs);
	CHECK_EQ(rados_list_lockers(ioc, o, "wbcache", &excl, tag, &tl, clients, &cl_, cookies, &kl,
				    addrs, &al), 1);
	CHECK_EQ(rados_break_lock(ioc, o, "wbcache", clients, cookies), 0);
	CHECK_EQ(wbc_file_open(dev, d, 0, &f[0]), 0);
	CHECK_EQ(wbc_file_size(f[0]), MiB);
	CHECK_EQ(wbc_file_close(f[0]), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	CHECK_EQ(wbc_dev_sync(dev), 0);
	CHECK_EQ(size_xattr(d), MiB);
	CHECK_EQ(wbc_cache_close(c), 0);
	for (int i = 0; i < 2; i++)
		check_file(names[i], "object_size=1M", data, 2 * MiB, 0, 2 * MiB);
	memcpy(data, "new", 3);
	check_file(names[2], "object_size=1M", data, MiB, 0, MiB);
	free(data);
}

/* File @name made with UNSIZED_LEN bytes of @byte, fsynced, and as many
 * again written back past the stored size (write_back_unsized): its close
 * has a size to write. */
#define UNSIZED_LEN 65536
static wbc_file *open_unsized(wbc_dev *dev, const char *name, int byte)
{
	static char data[UNSIZED_LEN];
	memset(data, byte, sizeof(data));
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	write_all(f, data, sizeof(data), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	write_back_unsized(f, data, sizeof(data), sizeof(data));
	return f;
}

/* 9b: a file removed (its lock broken by hand, without the fence of
 * `wbcache rados-unlock`) while a cache still had it open: that cache's
 * close does not make its object 0 anew with its size (a setxattr alone
 * did: the file came back, zeros of that size). */
static void test_close_removed(void)
{
	printf("9b. a file removed under a cache: its close does not make it anew\n");
	wbc_cache *c = open_eager();
	wbc_dev *dev = add(c, "object_size=1M,lock_check=3600");
	wbc_file *f = open_unsized(dev, "ghost", 0x6b);   /* a size for the close */
	char o[300], tag[64], clients[256], cookies[256], addrs[256];
	size_t tl = sizeof(tag), cl_ = sizeof(clients), kl = sizeof(cookies), al = sizeof(addrs);
	int excl;
	objname(o, sizeof(o), "ghost", 0);
	CHECK_EQ(rados_list_lockers(ioc, o, "wbcache", &excl, tag, &tl, clients, &cl_, cookies, &kl,
				    addrs, &al), 1);
	CHECK_EQ(rados_break_lock(ioc, o, "wbcache", clients, cookies), 0);
	CHECK_EQ(rados_remove(ioc, o), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), 0);   /* the close is over */
	int64_t left = obj_size("ghost", 0);
	printf("    object 0 after the close: %s\n", left == -ENOENT ? "none" : "made anew");
	CHECK_EQ(left, -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "ghost", 0, &f), -ENOENT);
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* 8b (after 9: write_back_unsized): a close whose size write never
 * succeeds (rados_fail_sizes: the size writes of the close, of the sync
 * and of the destruction all fail); the cache still closes, says so,
 * and the lock stays: the data past the stored size is not taken for a
 * dead cache's. */
static void test_close_size_never(void)
{
	printf("8b. a close whose size is never written: the cache closes, the lock stays\n");
	wbc_cache *c = open_eager();
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f = open_unsized(dev, "never-sized", 0x5a);
	CHECK_EQ(size_xattr("never-sized"), (int64_t)UNSIZED_LEN);
	rados_fail_sizes(dev, true);
	CHECK_EQ(wbc_file_close(f), 0);
	int r = wbc_cache_close(c);
	printf("    cache closed (%d)\n", r);
	CHECK_EQ(r, -EIO);
	wbc_cache *c2 = open_cache(4 * MiB);
	wbc_dev *dev2 = add(c2, "object_size=1M");
	wbc_file *g;
	CHECK_EQ(wbc_file_open(dev2, "never-sized", 0, &g), -EBUSY);
	CHECK_EQ(obj_size("never-sized", 0), (int64_t)(2 * UNSIZED_LEN));
	CHECK_EQ(wbc_cache_close(c2), 0);
}

/* 10: two caches creating one name: the first looked (no such file),
 * the second created it, wrote it and closed it, then the first took the
 * lock and created it over the other's: its sizes written 0, the other's
 * 100 KiB lost.  rados_open_pause runs the second cache in between. */
static char race_data[100 * 1000];
static void create_meanwhile(void *arg)
{
	(void)arg;
	wbc_cache *c = open_cache(4 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "race", WBC_O_CREAT, &f), 0);
	write_all(f, race_data, sizeof(race_data), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void test_create_race(void)
{
	printf("10. a create racing another cache's create, write and close\n");
	t_fill(race_data, sizeof(race_data), 0x3c);
	wbc_cache *c = open_cache(4 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	rados_open_pause(dev, create_meanwhile, NULL);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "race", WBC_O_CREAT, &f), 0);
	uint64_t sz = wbc_file_size(f);
	printf("    the late create found size %llu (%zu written by the other)\n",
	       (unsigned long long)sz, sizeof(race_data));
	CHECK_EQ(sz, sizeof(race_data));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	check_file("race", "object_size=1M", race_data, sizeof(race_data), 0, sizeof(race_data));
}

/* 10b: an open racing another cache's remove (between its look, which
 * found the file, and its lock): the lock made object 0 anew, bare, and
 * the open (without O_CREAT too) found an empty file there, its layout
 * unrecorded; the name stayed, a file of 0 bytes.  Without O_CREAT: ENOENT
 * and nothing left; with it: a new file, its layout recorded. */
static void remove_meanwhile(void *arg)
{
	(void)arg;
	wbc_cache *c = open_cache(4 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	CHECK_EQ(wbc_file_remove(dev, "race-rm"), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void test_remove_race(void)
{
	printf("10b. an open racing another cache's remove\n");
	wbc_cache *c = open_cache(4 * MiB);
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f;
	for (int create = 0; create < 2; create++) {
		CHECK_EQ(wbc_file_open(dev, "race-rm", WBC_O_CREAT, &f), 0);
		write_all(f, race_data, sizeof(race_data), 0);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_dev_sync(dev), 0);   /* its close (the unlock) is over */
		rados_open_pause(dev, remove_meanwhile, NULL);
		int r = wbc_file_open(dev, "race-rm", create ? WBC_O_CREAT : 0, &f);
		printf("    open%s after the other removed it: %d\n", create ? " (O_CREAT)" : "", r);
		if (!create) {
			CHECK_EQ(r, -ENOENT);
			CHECK_EQ(obj_size("race-rm", 0), -ENOENT);   /* no name left */
			continue;
		}
		CHECK_EQ(r, 0);
		CHECK_EQ(wbc_file_size(f), 0);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(size_xattr("race-rm"), 0);
		char o[300], buf[32];
		objname(o, sizeof(o), "race-rm", 0);
		int n = rados_getxattr(ioc, o, "wbcache.object_size", buf, sizeof(buf) - 1);
		CHECK(n > 0);
		buf[n > 0 ? n : 0] = '\0';
		CHECK_EQ(strtoull(buf, NULL, 10), MiB);   /* the layout recorded */
	}
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* 11: a close whose unlock is lost on the way (a timeout, here the test
 * hook rados_fail_unlocks): the lock was let go for good (no other cache
 * opened the file until someone broke it by hand) and the next sync
 * failed with EIO though nothing was at risk.  It is released at the
 * next sync, or the close of the cache. */
static void test_unlock_fails(void)
{
	printf("11. a close whose unlock fails: released later, no error\n");
	wbc_cache *c = open_eager();
	wbc_dev *dev = add(c, "object_size=1M");
	wbc_file *f = open_unsized(dev, "unlock-late", 0x4d);   /* size, then unlock */
	rados_fail_unlocks(dev, true);
	CHECK_EQ(wbc_file_close(f), 0);
	int r = wbc_dev_sync(dev);   /* the unlock tried again: fails again */
	printf("    sync with the unlock failing: %d\n", r);
	CHECK_EQ(r, 0);
	CHECK_EQ(size_xattr("unlock-late"), (int64_t)(2 * UNSIZED_LEN));
	wbc_cache *c2 = open_cache(4 * MiB);
	wbc_dev *dev2 = add(c2, "object_size=1M");
	wbc_file *g;
	CHECK_EQ(wbc_file_open(dev2, "unlock-late", 0, &g), -EBUSY);   /* still ours */
	rados_fail_unlocks(dev, false);
	CHECK_EQ(wbc_dev_sync(dev), 0);
	r = wbc_file_open(dev2, "unlock-late", 0, &g);
	printf("    another cache's open after the next sync: %d\n", r);
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_size(g), 2 * UNSIZED_LEN);
	CHECK_EQ(wbc_file_close(g), 0);
	/* a close with no size to write; released by the cache's close, and
	 * an open of the name in this cache meanwhile takes the lock over */
	static char d[4096];
	memset(d, 0x2e, sizeof(d));
	const char *names[2] = {"unlock-late2", "unlock-late3"};
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(wbc_file_open(dev, names[i], WBC_O_CREAT, &f), 0);
		write_all(f, d, sizeof(d), 0);
		CHECK_EQ(wbc_fsync(f), 0);
		rados_fail_unlocks(dev, true);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_dev_sync(dev), 0);
		rados_fail_unlocks(dev, false);
	}
	CHECK_EQ(wbc_file_open(dev2, names[0], 0, &g), -EBUSY);
	CHECK_EQ(wbc_file_open(dev, names[1], 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), sizeof(d));
	CHECK_EQ(wbc_file_close(f), 0);
	/* an open that fails after it took the lock (another object size
	 * than the file's), its unlock failing: the lock stayed ours for
	 * good, told nowhere; it is owed as a close's, released by the
	 * close of the cache */
	wbc_dev *dsz = add(c, "object_size=64K");
	rados_fail_unlocks(dsz, true);
	CHECK_EQ(wbc_file_open(dsz, "unlock-late", 0, &f), -EINVAL);
	CHECK_EQ(wbc_dev_sync(dsz), 0);   /* tried again, fails again: nothing at risk */
	CHECK_EQ(wbc_file_open(dev2, "unlock-late", 0, &g), -EBUSY);
	rados_fail_unlocks(dsz, false);
	CHECK_EQ(wbc_cache_close(c), 0);
	r = wbc_file_open(dev2, "unlock-late", 0, &g);
	printf("    a failed open's lock, after the cache closed: %d\n", r);
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_size(g), 2 * UNSIZED_LEN);
	CHECK_EQ(wbc_file_close(g), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(wbc_file_open(dev2, names[i], 0, &g), 0);
		CHECK_EQ(wbc_file_size(g), sizeof(d));
		CHECK_EQ(wbc_file_close(g), 0);
	}
	CHECK_EQ(wbc_cache_close(c2), 0);
}

/* Our stderr caught in a file from err_catch() to err_caught() (its text,
 * also passed on to the real stderr: the log keeps it). */
static int err_saved = -1;
static char err_path[64];
static void err_catch(void)
{
	snprintf(err_path, sizeof(err_path), "/var/tmp/wbc-rados-err-%d", (int)getpid());
	fflush(stderr);
	int fd = open(err_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	err_saved = dup(2);
	CHECK(fd >= 0 && err_saved >= 0 && dup2(fd, 2) == 2);
	close(fd);
}

static char *err_caught(void)
{
	static char text[16384];
	fflush(stderr);
	CHECK(dup2(err_saved, 2) == 2);
	close(err_saved);
	FILE *fp = fopen(err_path, "r");
	CHECK(fp);
	size_t n = fread(text, 1, sizeof(text) - 1, fp);
	fclose(fp);
	unlink(err_path);
	text[n] = '\0';
	fputs(text, stderr);
	return text;
}

/* 5b (after 11: open_unsized): a file whose lock `wbcache rados-unlock`
 * broke (its client fenced) while this cache had it open, with a size
 * to write (data written back past the size in the cluster): its close
 * cannot write it, and that data is lost (the next owner's open trims
 * it).  Where the keeper had noticed the break, the loss went untold
 * (the next sync said 0); where it had not, the close said "its lock is
 * kept until it is" (or, with no size to write, that its lock would be
 * released later), though the lock was gone. */
static void test_fenced_close(void)
{
	printf("5b. the close of a file whose lock was broken, a size to write\n");
	wbc_cache *c = open_eager();
	wbc_dev *dk = add(c, "object_size=1M,lock_check=0.1"),
		*dn = add(c, "object_size=1M,lock_check=3600");
	wbc_file *fk = open_unsized(dk, "fenced-k", 0x21), *fn = open_unsized(dn, "fenced-n", 0x22);
	char msg[256];
	CHECK_EQ(wbc_rados_break_lock(base, "fenced-k", msg, sizeof(msg)), 1);
	CHECK_EQ(wbc_rados_break_lock(base, "fenced-n", msg, sizeof(msg)), 1);
	usleep(2000000);   /* dk's keeper (every 0.1 s) notices the break */
	err_catch();
	CHECK_EQ(wbc_file_close(fk), 0);
	int rk = wbc_dev_sync(dk);
	CHECK_EQ(wbc_file_close(fn), 0);
	int rn = wbc_dev_sync(dn);
	const char *said = err_caught();
	printf("    sync after the close: %d (the keeper noticed), %d (it did not)\n", rk, rn);
	CHECK_EQ(rk, -EIO);
	CHECK_EQ(rn, -EIO);
	CHECK(!strstr(said, "kept until") && !strstr(said, "could not be released"));
	CHECK(strstr(said, "fenced-k: its lock was broken"));
	CHECK(strstr(said, "fenced-n: its lock was broken"));
	CHECK_EQ(wbc_dev_sync(dk), 0);   /* told once */
	CHECK_EQ(wbc_dev_sync(dn), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK_EQ(size_xattr("fenced-k"), (int64_t)UNSIZED_LEN);
	CHECK_EQ(size_xattr("fenced-n"), (int64_t)UNSIZED_LEN);
}

/* 12: an open of a name whose unlock is owed (as in 11) that fails, its
 * own unlock failing too: the unlock stays owed, and the next sync makes
 * it (the close's record was forgotten with the failed open: the lock
 * stayed for good, another cache's open EBUSY). */
static void test_unlock_open_fails(void)
{
	printf("12. an open that fails where an unlock is owed: the unlock stays owed\n");
	wbc_cache *c = open_eager();
	wbc_dev *dev = add(c, "object_size=1M");
	static char d[4096];
	memset(d, 0x3c, sizeof(d));
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "unlock-open", WBC_O_CREAT, &f), 0);
	write_all(f, d, sizeof(d), 0);
	CHECK_EQ(wbc_fsync(f), 0);
	rados_fail_unlocks(dev, true);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_dev_sync(dev), 0);   /* the unlock owed, failing again */
	/* an extent past the size, as a dead cache leaves: the open trims
	 * it and writes the sizes, which fail */
	char o[300], buf[32];
	objname(o, sizeof(o), "unlock-open", 0);
	int n = snprintf(buf, sizeof(buf), "%u", 2 * MiB);
	CHECK_EQ(rados_setxattr(ioc, o, "wbcache.extent", buf, (size_t)n), 0);
	rados_fail_sizes(dev, true);
	int r = wbc_file_open(dev, "unlock-open", 0, &f);
	printf("    the open with its size write failing: %d\n", r);
	CHECK(r < 0);
	rados_fail_sizes(dev, false);
	rados_fail_unlocks(dev, false);
	CHECK_EQ(wbc_dev_sync(dev), 0);   /* the owed unlock made */
	wbc_cache *c2 = open_cache(4 * MiB);
	wbc_dev *dev2 = add(c2, "object_size=1M");
	wbc_file *g;
	r = wbc_file_open(dev2, "unlock-open", 0, &g);
	printf("    another cache's open after the next sync: %d\n", r);
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_size(g), sizeof(d));
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_cache_close(c2), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

/* The test cluster, stopped and let go on (part 8), serves every
 * placement group again before the tests after this one use it (a pool
 * listing visits each); 120 s at most. */
static void cluster_serves(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "timeout 120 rados -c %s -p wbc ls >/dev/null 2>&1", conf);
	CHECK_EQ(system(cmd), 0);
}

int main(void)
{
	char why[512];
	const char *dir = t_ceph_start(why, sizeof(why));
	if (!dir) {
		printf("%s\n", why);
		return T_SKIP;
	}
	snprintf(conf, sizeof(conf), "%s/ceph.conf", dir);
	snprintf(base, sizeof(base), "rados:wbc/t%d,conf=%s", (int)getpid(), conf);
	CHECK_EQ(rados_create(&cl, NULL), 0);
	CHECK_EQ(rados_conf_read_file(cl, conf), 0);
	CHECK_EQ(rados_connect(cl), 0);
	CHECK_EQ(rados_ioctx_create(cl, "wbc", &ioc), 0);
	test_specs();
	test_data();
	test_truncate();
	test_remove();
	test_dead_cache_leftovers();
	test_lock();
	test_osd_killed();
	test_map_watch();
	test_close_size_fails();
	test_close_removed();
	test_close_size_never();
	test_create_race();
	test_remove_race();
	test_unlock_fails();
	test_fenced_close();
	test_unlock_open_fails();
	test_unreachable();
	cluster_serves();
	rados_ioctx_destroy(ioc);
	rados_shutdown(cl);
	printf("rados: ok\n");
	return 0;
}
