/*
 * Stacked devices (stack:ID/NAME, wbc_dev_add_stacked): a device whose
 * storage is a file of another device, with its workers' writes into the
 * lower device throttled globally, locally, or sent direct.
 *   1. The local throttle's rule in isolation: a local-throttle thread
 *      writing to a device whose own pages are below its freerun is not
 *      paused, with the whole cache over its limit (a writer that is not
 *      local is); above the device's own limit it is.
 *   2. No deadlock, each mode: a 4 MiB cache holding both devices (upper
 *      over lower), 64 MiB streamed through the upper, then fsync: it
 *      finishes (a watchdog ends the test otherwise) and the lower
 *      device's backend holds every byte.
 *   3. fsync of the upper reaches the lower backend: after it returns the
 *      bytes are in the lower device's storage, each mode; and through the
 *      lower device's cache (cached modes: both caches agree).
 *   4. Errors of the lower device (a fault of its model) surface at the
 *      upper's fsync, once to each upper handle (errseq), each mode;
 *      nothing is lost: once the fault ends fsync succeeds and the lower
 *      backend holds the data.
 *   5. direct's coherence rule: a direct stacked device over a lower file
 *      open through the lower cache is refused (-EBUSY), and a lower open
 *      through the cache while it lives is refused; pages the lower cache
 *      held dirty are written back first (the upper reads them); what the
 *      upper writes is what the lower cache reads once the upper is gone
 *      (lower and upper in different caches).
 *   6. The spec: stack:ID/NAME with options and tunables; bad ones are
 *      refused with a reason.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "backend_util.h"

#include <pthread.h>
#include <math.h>
#include <signal.h>

#define MiB (1u << 20)

static const char *modes[] = { "global", "local", "direct" };

/* ------------------------------------------------------------------ */
/* watchdog: a phase that does not finish in time ends the test */

static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cond = PTHREAD_COND_INITIALIZER;
static const char *wd_phase;
static uint64_t wd_deadline;

static void *watchdog(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd_lock);
	for (;;) {
		if (wd_phase && wbc_now_ns() > wd_deadline) {
			fprintf(stderr, "watchdog: '%s' did not finish: deadlock?\n", wd_phase);
			_exit(1);
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		pthread_mutex_unlock(&wd_lock);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&wd_lock);
	}
	return NULL;
}

static void wd_arm(const char *phase, unsigned secs)
{
	pthread_mutex_lock(&wd_lock);
	wd_phase = phase;
	wd_deadline = wbc_now_ns() + secs * 1000000000ull;
	pthread_cond_signal(&wd_cond);
	pthread_mutex_unlock(&wd_lock);
}

static void wd_disarm(void)
{
	wd_arm(NULL, 0);
}

/* ------------------------------------------------------------------ */

/* The bytes of block @i (64 KiB) of a stream: a function of i alone. */
static void block(char *buf, uint64_t i, uint64_t seed)
{
	t_fill(buf, 64 << 10, seed * 1000003 + i + 1);
}

static wbc_cache *cache_of(uint64_t mem)
{
	struct wbc_config cfg = t_config(mem, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	return c;
}

/* Add "stack:0/NAME,stack_throttle=MODE" over device 0 of @c. */
static wbc_dev *add_stack(wbc_cache *c, const char *name, int mode, const char *more)
{
	char spec[256], msg[256];
	wbc_dev *up;
	snprintf(spec, sizeof(spec), "stack:0/%s,stack_throttle=%s%s", name, modes[mode], more);
	int err = wbc_dev_add_msg(c, spec, &up, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "%s: %s\n", spec, msg);
		exit(1);
	}
	return up;
}

/* The lower backend's bytes of @name are blocks 0..n-1 of stream @seed. */
static void check_lower(wbc_dev *lower, const char *name, uint64_t n, uint64_t seed)
{
	size_t len = (size_t)n << 16;
	char *back = malloc(len), want[64 << 10];
	uint64_t size;
	CHECK(back);
	CHECK_EQ(t_backend_read(lower, name, back, len, &size), 0);
	CHECK_EQ(size, len);
	for (uint64_t i = 0; i < n; i++) {
		block(want, i, seed);
		CHECK(!memcmp(back + (i << 16), want, 64 << 10));
	}
	free(back);
}

/* ------------------------------------------------------------------ */
/* 1. the local throttle's rule */

static void local_rule(void)
{
	struct wbc_config cfg = t_config(1000 * 4096, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *a, *b;
	CHECK_EQ(wbc_dev_add(c, "mem", &a), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &b), 0);
	/* the device's domain: its share (half: no completions, two
	 * devices) of thresh 200, bg 100 */
	struct dom d;
	ctr_set_unclean(&b->ctr, 60);
	dom_local(b, &d);
	CHECK(fabs(d.thresh - 100) < 1e-9 && fabs(d.bg_thresh - 50) < 1e-9);
	CHECK(fabs(d.freerun - 75) < 1e-9 && fabs(d.setpoint - 87.5) < 1e-9);
	CHECK(fabs(d.dirty - 60) < 1e-9);
	/* the cache over its limit (the upper device's pages), the device
	 * below its own freerun and above the nearly-clean pass */
	ctr_set_unclean(&c->ctr, 260);
	struct wbc_thread_stats t0, t1;
	wbc_thread_stats(&t0);
	CHECK_EQ(wbc_thread_set_local_throttle(1), 0);
	throttle_defer_begin();
	CHECK_EQ(balance_dirty_pages(b, NULL), 0);
	CHECK_EQ(throttle_defer_end(), 0);            /* not paused */
	wbc_thread_stats(&t1);
	CHECK_EQ(t1.pauses, t0.pauses);
	/* the same thread, not local: paused (deferred, so it returns) */
	CHECK_EQ(wbc_thread_set_local_throttle(0), 1);
	throttle_defer_begin();
	CHECK_EQ(balance_dirty_pages(b, NULL), 0);
	CHECK(throttle_defer_end() > 0);
	/* local again, with the device over its own limit: paused */
	wbc_thread_set_local_throttle(1);
	ctr_set_unclean(&b->ctr, 120);
	ctr_set_unclean(&c->ctr, 120);
	throttle_defer_begin();
	CHECK_EQ(balance_dirty_pages(b, NULL), 0);
	CHECK(throttle_defer_end() > 0);
	wbc_thread_set_local_throttle(0);
	ctr_set_unclean(&b->ctr, 0);
	ctr_set_unclean(&c->ctr, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("1. local throttle: free-runs below its device's freerun with the cache over "
	       "its limit; paused over the device's limit\n");
}

/* ------------------------------------------------------------------ */
/* 2. no deadlock in a cache too small for both */

static void stream(int mode)
{
	wbc_cache *c = cache_of(4 * MiB);
	wbc_dev *lower, *up;
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M,lat=100us", &lower), 0);
	up = add_stack(c, "img", mode, "");
	char phase[64];
	snprintf(phase, sizeof(phase), "stream 64 MiB, %s", modes[mode]);
	wd_arm(phase, 400);
	uint64_t t0 = wbc_now_ns();
	wbc_file *f;
	CHECK_EQ(wbc_file_open(up, "", WBC_O_CREAT, &f), 0);
	static char buf[64 << 10];
	for (uint64_t i = 0; i < 1024; i++) {
		block(buf, i, 1);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), i << 16), sizeof(buf));
	}
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	wd_disarm();
	struct wbc_stats st;
	wbc_stats(c, &st);
	printf("2. %s: 64 MiB through the upper device in a 4 MiB cache in %.1f s "
	       "(%llu pauses, %llu page waits)\n", modes[mode], (double)(wbc_now_ns() - t0) / 1e9,
	       (unsigned long long)st.pauses, (unsigned long long)st.page_waits);
	check_lower(lower, "img", 1024, 1);
	wd_arm("cache close", 120);
	CHECK_EQ(wbc_cache_close(c), 0);
	wd_disarm();
}

/* ------------------------------------------------------------------ */
/* 3. fsync reaches the lower backend; 4. the lower's errors surface */

static void fsync_and_errors(int mode)
{
	wbc_cache *c = cache_of(16 * MiB);
	wbc_dev *lower, *up;
	/* the workers' writes into a lower device that fails every write wait
	 * for it (it is their device's throttle) until its retry_timeout */
	CHECK_EQ(wbc_dev_add(c, "model:bw=1G,retry_timeout=2", &lower), 0);
	up = add_stack(c, "f", mode, ",workers=2");
	wd_arm("fsync and errors", 120);
	wbc_file *f, *g;
	char buf[64 << 10];
	CHECK_EQ(wbc_file_open(up, "", WBC_O_CREAT, &f), 0);
	for (uint64_t i = 0; i < 32; i++) {
		block(buf, i, 3);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), i << 16), sizeof(buf));
	}
	CHECK_EQ(wbc_fsync(f), 0);
	check_lower(lower, "f", 32, 3);               /* on the lower's storage */
	if (mode != WBC_STACK_DIRECT) {
		/* through the lower device's cache: the same bytes */
		wbc_file *lf;
		CHECK_EQ(wbc_file_open(lower, "f", 0, &lf), 0);
		CHECK_EQ(wbc_pread(lf, buf, sizeof(buf), 5 << 16), sizeof(buf));
		char want[64 << 10];
		block(want, 5, 3);
		CHECK(!memcmp(buf, want, sizeof(buf)));
		CHECK_EQ(wbc_file_close(lf), 0);
	}

	/* 4. a fault of the lower device */
	CHECK_EQ(wbc_file_open(up, "", 0, &g), 0);
	/* the fault first: none of these writes may reach the lower backend
	 * before it, however long this thread is away (background writeback
	 * could write them all, and the fsync found nothing to fail) */
	model_set_faults(lower, 0, UINT64_MAX / 2, 0);
	for (uint64_t i = 0; i < 32; i++) {
		block(buf, i, 4);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), i << 16), sizeof(buf));
	}
	uint64_t t0 = wbc_now_ns();
	CHECK_EQ(wbc_fsync(f), -EIO);
	double fault_s = (double)(wbc_now_ns() - t0) / 1e9;
	model_set_faults(lower, 0, 0, 0);
	/* retried and written; until the lower device's own retry succeeds,
	 * writers into it may still fail (it failed every write for its
	 * retry_timeout), each failure an error the next fsync reports */
	int r, tries = 0;
	uint64_t until = wbc_now_ns() + 60ull * 1000 * 1000 * 1000;   /* its backoff: up to 5 s */
	while ((r = wbc_fsync(f)) == -EIO && wbc_now_ns() < until) {
		tries++;
		usleep(50 * 1000);
	}
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_fsync(g), -EIO);                 /* the other handle, once */
	CHECK_EQ(wbc_fsync(g), 0);
	check_lower(lower, "f", 32, 4);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_dev_sync(up), -EIO);             /* the upper device's, once */
	CHECK_EQ(wbc_dev_sync(up), 0);
	/* the lower device reports its own (direct: the errors were the
	 * workers', returned to them, not the lower cache's) */
	CHECK_EQ(wbc_dev_sync(lower), mode == WBC_STACK_DIRECT ? 0 : -EIO);
	struct wbc_stats st;
	CHECK_EQ(wbc_cache_close_stats(c, &st), 0);
	CHECK_EQ(st.lost_bytes, 0);
	wd_disarm();
	printf("3, 4. %s: fsync reaches the lower backend; a lower fault fails the upper's "
	       "fsync (after %.1f s) once per handle, the data written once it ends (%d more "
	       "fsyncs)\n", modes[mode], fault_s, tries);
}

/* ------------------------------------------------------------------ */
/* 5. direct's coherence rule */

static void direct_rule(void)
{
	wbc_cache *lc = cache_of(16 * MiB), *uc = cache_of(16 * MiB);
	wbc_dev *lower, *up;
	char msg[256], buf[64 << 10], want[64 << 10];
	wbc_file *lf, *f;
	CHECK_EQ(wbc_dev_add(lc, "mem", &lower), 0);
	/* the lower file open through its cache: refused, both ways */
	CHECK_EQ(wbc_file_open(lower, "img", WBC_O_CREAT, &lf), 0);
	block(buf, 0, 7);
	CHECK_EQ(wbc_pwrite(lf, buf, sizeof(buf), 0), sizeof(buf));
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "stack_throttle=direct", &up, msg,
				     sizeof(msg)), -EBUSY);
	printf("5. refused: %s\n", msg);
	CHECK(strstr(msg, "img"));
	/* closed, its page still dirty in the lower cache: written back and
	 * dropped by the direct open, read by the upper */
	CHECK_EQ(wbc_file_close(lf), 0);
	struct wbc_stats st;
	wbc_stats(lc, &st);
	CHECK(st.dirty_bytes > 0);
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "stack_throttle=direct", &up, msg,
				     sizeof(msg)), 0);
	wbc_stats(lc, &st);
	CHECK_EQ(st.dirty_bytes + st.cached_bytes, 0);
	CHECK_EQ(wbc_file_open(lower, "img", 0, &lf), -EBUSY);
	CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, want, sizeof(want), 0), sizeof(want));
	CHECK(!memcmp(buf, want, sizeof(buf)));
	/* the upper writes; once it is gone the lower cache reads its bytes */
	block(buf, 1, 7);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(uc), 0);
	CHECK_EQ(wbc_file_open(lower, "img", 0, &lf), 0);
	CHECK_EQ(wbc_pread(lf, want, sizeof(want), 0), sizeof(want));
	CHECK(!memcmp(buf, want, sizeof(buf)));
	/* and the other way: a cached stacked device over a file open direct */
	wbc_file *ld;
	CHECK_EQ(wbc_file_close(lf), 0);
	CHECK_EQ(wbc_file_open(lower, "img", WBC_O_DIRECT, &ld), 0);
	uc = cache_of(16 * MiB);
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "", &up, msg, sizeof(msg)), -EBUSY);
	CHECK_EQ(wbc_file_close(ld), 0);
	/* the lower in another cache, local mode: stream, then close the
	 * upper's cache first */
	CHECK_EQ(wbc_dev_add_stacked(uc, lower, "img", "stack_throttle=local,min_ratio=1", &up,
				     msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_file_open(up, "", WBC_O_TRUNC, &f), 0);
	for (uint64_t i = 0; i < 64; i++) {
		block(buf, i, 8);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), i << 16), sizeof(buf));
	}
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(uc), 0);             /* syncs the upper into the lower */
	CHECK_EQ(wbc_dev_sync(lower), 0);
	check_lower(lower, "img", 64, 8);
	CHECK_EQ(wbc_cache_close(lc), 0);
	printf("5. direct: one cache or the other holds the file, never both; no stale "
	       "copy seen through either\n");
}

/* ------------------------------------------------------------------ */
/* 6. specs */

static void specs(void)
{
	wbc_cache *c = cache_of(16 * MiB);
	wbc_dev *d0, *up;
	char msg[256];
	CHECK_EQ(wbc_dev_add(c, "mem", &d0), 0);
	const char *bad[] = {
		"stack:", "stack:x/img", "stack:0", "stack:-1/img", "stack:7/img",
		"stack:0/img,stack_throttle=fast", "stack:0/img,workers=0",
		"stack:0/img,workers=65", "stack:0/img,color=blue", "stack:0/a/b",
		"stack:0/img,min_ratio=200",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg[0] = '\0';
		CHECK(wbc_dev_add_msg(c, bad[i], &up, msg, sizeof(msg)) < 0);
		CHECK(msg[0]);
		printf("6. %-36s %s\n", bad[i], msg);
	}
	/* options and tunables in any order; a stack over a stack */
	CHECK_EQ(wbc_dev_add_msg(c, "stack:0/img,min_ratio=5,stack_throttle=global,workers=3",
				 &up, msg, sizeof(msg)), 0);
	CHECK_EQ(up->min_ratio, 5);
	wbc_dev *top, *f2;
	CHECK_EQ(wbc_dev_add_msg(c, "stack:1/,max_ratio=50", &top, msg, sizeof(msg)), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(top, "", WBC_O_CREAT, &f), 0);
	char buf[5000] = "two levels down";
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 100), sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	char back[5100];
	uint64_t size;
	CHECK_EQ(t_backend_read(d0, "img", back, sizeof(back), &size), 0);
	CHECK_EQ(size, 5100);
	CHECK(!memcmp(back + 100, buf, sizeof(buf)));
	CHECK_EQ(wbc_file_open(up, "x", 0, &f), -EINVAL);   /* one file: "" */
	/* a device of files by name under it: a name it must have, said so
	 * (its open's "Invalid argument" was all) */
	msg[0] = '\0';
	CHECK_EQ(wbc_dev_add_msg(c, "stack:0/", &f2, msg, sizeof(msg)), -EINVAL);
	printf("6. %-36s %s\n", "stack:0/", msg);
	CHECK(strstr(msg, "holds files by name"));
	msg[0] = '\0';
	CHECK_EQ(wbc_dev_add_stacked(c, d0, "", NULL, &f2, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "holds files by name"));
	CHECK_EQ(wbc_cache_close(c), 0);

	/* a dirty limit of the whole cache leaves a stacked device over a
	 * device of the same cache no page to write back into: refused (its
	 * writer waited for good, both flushers idle); over another cache's
	 * device it is fine, and writes more than its cache */
	struct wbc_config cfg = t_config(MiB, 4096);
	cfg.dirty_ratio = 100;
	cfg.dirty_background_ratio = 50;
	wbc_cache *full, *other = cache_of(16 * MiB);
	CHECK_EQ(wbc_cache_open(&cfg, &full), 0);
	CHECK_EQ(wbc_dev_add(full, "mem", &d0), 0);
	msg[0] = '\0';
	CHECK_EQ(wbc_dev_add_msg(full, "stack:0/img", &up, msg, sizeof(msg)), -EINVAL);
	printf("6. dirty_ratio=100, stack:0/img         %s\n", msg);
	CHECK(strstr(msg, "dirty limit"));
	CHECK_EQ(wbc_dev_add_stacked(full, d0, "img", NULL, &up, msg, sizeof(msg)), -EINVAL);
	/* stack_throttle=direct writes around the cache under it: fine */
	CHECK_EQ(wbc_dev_add_msg(full, "stack:0/dimg,stack_throttle=direct", &up, msg, sizeof(msg)),
		 0);
	CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
	char *big = malloc(4 * MiB);
	CHECK(big);
	memset(big, 0x33, 4 * MiB);
	CHECK_EQ(wbc_pwrite(f, big, 4 * MiB, 0), 4 * MiB);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_dev *lo;
	CHECK_EQ(wbc_dev_add(other, "mem", &lo), 0);
	CHECK_EQ(wbc_dev_add_stacked(full, lo, "img", NULL, &up, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
	CHECK_EQ(wbc_pwrite(f, big, 4 * MiB, 0), 4 * MiB);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	free(big);
	CHECK_EQ(wbc_cache_close(full), 0);
	CHECK_EQ(wbc_cache_close(other), 0);
}

int main(void)
{
	pthread_t wd;
	CHECK_EQ(pthread_create(&wd, NULL, watchdog, NULL), 0);
	pthread_detach(wd);
	local_rule();
	specs();
	for (int m = 0; m < 3; m++)
		fsync_and_errors(m);
	direct_rule();
	for (int m = 0; m < 3; m++)
		stream(m);
	printf("stacked: all passed\n");
	return 0;
}
