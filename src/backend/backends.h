/*
 * The built-in backends.  Each is written on the public backend interface
 * (wbcache_backend.h) and the base layer, and on nothing of the engine:
 * a constructor returns an operations table and a context, which
 * registry.c turns into a device spec and the engine into a device.
 *
 * Locks: each backend's locks are its own and leaves of the engine's
 * order; no backend holds one while it calls wbc_io_complete*().
 */
#ifndef WBC_BACKENDS_H
#define WBC_BACKENDS_H

#include "wbcache_backend.h"
#include "../base/base.h"

/* mem: RAM.  @discard: keep each file's size but not its data (reads
 * return zeros): a device that costs no memory, for benchmarks. */
int mem_backend_new(bool discard, const struct wbc_backend_ops **ops, void **ctx);
/* The mem backend's copy of @io (no completion): bytes done or -errno. */
ssize_t mem_backend_rw(void *ctx, const struct wbc_io *io);

/* model: the mem backend behind a device model (bandwidth, latency,
 * queue depth, faults, stalls); @opts as in wbc_dev_add(). */
int model_backend_new(const char *opts, const struct wbc_backend_ops **ops, void **ctx,
		      char *err, size_t errlen);

/* file:, dir: and the opener device: io_uring over O_DIRECT files.
 * @fn NULL: files by name in @path (dir) or @path itself (!dir). */
struct file_opener {
	wbc_open_fn fn;
	void *ctx;
	int fs_fd;
	unsigned flags;     /* WBC_OPENER_* */
};
int file_backend_new(const char *path, bool dir, bool direct, bool uring, unsigned qd, size_t max_io,
		     const struct file_opener *opener, const struct wbc_backend_ops **ops,
		     void **ctx, char *err, size_t errlen);

/* nbd: one export of an NBD server (libnbd), @spec a URI of libnbd's
 * ("nbd://HOST[:PORT]/EXPORT", "nbd+unix:///EXPORT?socket=PATH", ...)
 * then ",opts" (see nbd.c). */
bool nbd_is_uri(const char *spec);
int nbd_backend_new(const char *spec, const struct wbc_backend_ops **ops, void **ctx,
		    char *err, size_t errlen);
/* window.c: the congestion window of the remote backends (nbd, rados), a
 * window of bytes in flight moved by TCP Vegas's rule on the I/Os' round
 * trips (see window.c and nbd.c).  Owned by one thread. */
#define WINDOW_RTT_CLASSES 12           /* 4 KiB .. 8 MiB and above */
struct vegas_window {
	unsigned fixed;             /* window=fixed:N: N I/Os; 0: adaptive */
	size_t max_io;              /* for window_bytes() of a fixed window */
	uint64_t inflight_bytes;    /* taken and not yet put back */
	unsigned inflight_ios;
	uint64_t cwnd;
	bool slow_start;
	bool ss_hold;               /* slow start: the window grew last round */
	uint64_t base_cur[2][WINDOW_RTT_CLASSES], base_prev[2][WINDOW_RTT_CLASSES];
	uint64_t base_epoch_ns;
	double srtt, sbase;         /* smoothed RTT, and base of the same I/Os */
	uint64_t round_start_ns;    /* the round: */
	double r_max_ratio;         /* max over samples of base / rtt */
	uint64_t r_bytes, r_ios, r_max_inflight;
	bool limited;               /* an I/O waited for room: set by the user */
};
void window_init(struct vegas_window *w, unsigned fixed, size_t max_io, uint64_t now);
/* A fresh start (the server came back): the window and RTTs forgotten. */
void window_reset(struct vegas_window *w, uint64_t now);
/* Room for @len more bytes (one I/O always fits an empty window)? */
bool window_fits(const struct vegas_window *w, size_t len);
/* An I/O of @len enters the window, leaves it. */
void window_take(struct vegas_window *w, size_t len);
void window_put(struct vegas_window *w, size_t len);
/* A completed I/O's round trip (sent at @sent_ns, done at @now). */
void window_sample(struct vegas_window *w, bool write, size_t len, uint64_t sent_ns,
		   uint64_t now);
/* The bytes it lets be in flight now. */
uint64_t window_bytes(const struct vegas_window *w);

/* The I/Os a remote backend holds until its window has room: reads first
 * (someone waits for them), then writes, each in submission order, linked
 * through backend_data[0].  Under the backend's own lock. */
struct remote_queue {
	struct wbc_io *rq_head, *rq_tail, *wq_head, *wq_tail;
	uint64_t bytes;             /* queued, for wbc_backend_stats */
};
void rqueue_add(struct remote_queue *q, struct wbc_io *io);
/* The next queued I/O (NULL: none), without taking it. */
struct wbc_io *rqueue_peek(const struct remote_queue *q);
/* Move up to @max queued I/Os that fit into window @w (window_take) to
 * @take; sets w->limited when one did not fit.  Returns how many. */
unsigned rqueue_take(struct remote_queue *q, struct vegas_window *w, struct wbc_io **take,
		     unsigned max);
/* Take every queued I/O (none will be sent): the chain, reads first. */
struct wbc_io *rqueue_take_all(struct remote_queue *q);

/* rados: files striped over objects of a Ceph pool (librados), @spec
 * "POOL[/PREFIX][,opts]" (after "rados:"; see rados.c). */
int rados_backend_new(const char *spec, const struct wbc_backend_ops **ops, void **ctx,
		      char *err, size_t errlen);
/* stack: one file @name of device @lower (any cache), WBC_O_CREAT; @opts:
 * "stack_throttle=global|local|direct,workers=N" (comma separated, either
 * or none); @lower_max: the largest file a write to @lower may reach,
 * through its cache or direct (its backend's, in whole pages of that
 * cache but for a one-file device).  See stack.c. */
enum { WBC_STACK_GLOBAL, WBC_STACK_LOCAL, WBC_STACK_DIRECT };
int stack_backend_new(wbc_dev *lower, const void *lower_cache, uint64_t lower_max,
		      const char *name, const char *opts, const struct wbc_backend_ops **ops,
		      void **ctx, char *err, size_t errlen);

/* registry.c: the built-in backend a device spec names ("mem",
 * "model[:opts]", "file:PATH[,opts]", "dir:PATH[,opts]", an NBD URI
 * ("nbd://...[,opts]"), "rados:POOL[/PREFIX][,opts]", "opener[,opts]" with
 * @opener).  Sets *ops and *ctx, or returns -errno with a message. */
int backend_create(const char *spec, const struct file_opener *opener,
		   const struct wbc_backend_ops **ops, void **ctx, char *err, size_t errlen);
/* The parse step of backend_create alone: 0, or -errno with the message
 * backend_create would give for a spec that does not parse.  Nothing is
 * made, opened or connected (the parsers' fuzz target, fuzz/fuzz_spec.c).
 * @opener: "opener[,opts]" is a spec. */
int backend_spec_check(const char *spec, bool opener, char *err, size_t errlen);
/* The same for each backend's own spec (as its constructor takes it) */
int model_spec_check(const char *opts, char *err, size_t errlen);
int nbd_spec_check(const char *spec, char *err, size_t errlen);
int rados_spec_check(const char *spec, char *err, size_t errlen);
int stack_spec_check(const char *opts, char *err, size_t errlen);

/* Controls for tests and benchmarks; each does nothing on a device of
 * another backend. */
void model_release_stall(wbc_dev *dev);   /* end a stall= now */
uint64_t model_waits(wbc_dev *dev);       /* timed waits the model made */
void model_set_faults(wbc_dev *dev, uint64_t err_off, uint64_t err_len, double errp);
/* The next @n submissions fail with @err as io_uring_submit() would. */
void file_fail_submits(wbc_dev *dev, unsigned n, int err);
/* rados: every write fails with EIO while @on. */
void rados_fail_writes(wbc_dev *dev, bool on);
/* rados: every write of a file's size (fsync's, close's) fails with EIO
 * while @on. */
void rados_fail_sizes(wbc_dev *dev, bool on);
/* rados: every unlock (a close's, a retry's) fails as a timeout while @on. */
void rados_fail_unlocks(wbc_dev *dev, bool on);
/* rados: the next open calls @fn(@arg) between its look for the file and
 * its lock (a test's race). */
void rados_open_pause(wbc_dev *dev, void (*fn)(void *), void *arg);
/* rados: how many times the map watcher asked for a newer OSD map. */
uint64_t rados_map_requests(wbc_dev *dev);

#endif
