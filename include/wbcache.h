/*
 * wbcache - a user-space page-cache writeback engine.
 *
 * Conventions used by every function in this header:
 *   - Functions return 0 (or a non-negative count) on success and a negative
 *     errno value on failure.  errno itself is never used to report errors.
 *   - Handles are opaque.  An object created by wbc_X_open()/wbc_X_add() is
 *     owned by the caller until the matching close; the cache owns devices
 *     and destroys them in wbc_cache_close().
 *   - Close functions accept NULL and then return 0.
 *
 * Threading: every function may be called from any thread concurrently,
 * except that a handle must not be used after (or while) it is closed.
 */
#ifndef WBCACHE_H
#define WBCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WBCACHE_VERSION_MAJOR 0
#define WBCACHE_VERSION_MINOR 3
#define WBCACHE_VERSION_PATCH 0
#define WBCACHE_VERSION "0.3.0"

/* The version of the library linked, as "MAJOR.MINOR.PATCH" (the header's
 * is WBCACHE_VERSION).  The shared library's soname carries MAJOR. */
const char *wbc_version(void);

typedef struct wbc_cache wbc_cache;
typedef struct wbc_dev wbc_dev;
typedef struct wbc_file wbc_file;

/*
 * Cache configuration.  The dirty_* tunables carry the names and meaning of
 * the Linux sysctls in /proc/sys/vm: a *_bytes value, when non-zero, takes
 * precedence over the matching *_ratio, which is a percentage of the cache's
 * pages.  Fill with wbc_config_init() before changing fields.
 */
struct wbc_config {
	uint64_t mem_bytes;                /* page arena size; rounded down to pages */
	uint32_t page_size;                /* power of two, 512 .. 1 MiB; default 4096 */
	uint32_t dirty_ratio;              /* 0..100 (percent; 0 only with dirty_bytes); default 20 */
	uint64_t dirty_bytes;              /* 0 = use dirty_ratio; else at least 2 pages */
	uint32_t dirty_background_ratio;   /* 0..100 (percent); default 10 */
	uint64_t dirty_background_bytes;   /* 0 = use dirty_background_ratio */
	uint32_t dirty_expire_centisecs;   /* age at which dirty data is written; default 3000 */
	uint32_t dirty_writeback_centisecs;/* periodic flusher wakeup; 0 = off; default 500 */
	uint64_t reserved[8];              /* zero (wbc_config_init): tunables to come */
};

/* Fill @cfg with defaults (64 MiB, 4 KiB pages, kernel sysctl defaults). */
void wbc_config_init(struct wbc_config *cfg);

/*
 * NULL when wbc_cache_open() would accept @cfg's values, else why it would
 * refuse them with -EINVAL: one line of text, static, in the sysctls'
 * names.  (Whether the memory can be had is known only at the open.)
 */
const char *wbc_config_check(const struct wbc_config *cfg);

/*
 * Open a cache.  The page arena (cfg->mem_bytes) is allocated here, once;
 * the cache never allocates page memory afterwards.
 * Returns 0 and sets *out, or -EINVAL for a bad configuration (page size not
 * a power of two or out of range, fewer than 16 pages, ratio above 100,
 * dirty limit of zero or below two pages: wbc_config_check() says which),
 * -ENOMEM when the arena cannot be allocated or would not fit in the
 * machine's memory together with its page descriptors (checked before anything is mapped: a refused open commits
 * no memory).
 */
int wbc_cache_open(const struct wbc_config *cfg, wbc_cache **out);

/*
 * Write back every dirty page of every device, close all devices and free
 * the cache.  Files still open are closed.  A device with on_error=retry
 * whose writes fail is synced again, with a backoff, until its pages are
 * written or it has failed for its retry_timeout; pages still dirty then
 * are dropped and counted in lost_bytes.  Returns 0, or the first write
 * error met while writing back (the cache is freed in either case).
 */
int wbc_cache_close(wbc_cache *cache);

/* wbc_cache_close() that also fills @st (may be NULL) with the cache's
 * counters after its last writeback, the devices closed (nr_devices and
 * write_bw 0): lost_bytes includes the data close could not write. */
struct wbc_stats;
int wbc_cache_close_stats(wbc_cache *cache, struct wbc_stats *st);

/*
 * Add a device (a backend plus its flusher thread).  @spec is one of
 *   "mem"                      RAM, for tests
 *   "file:PATH[,opts]"         one regular file or block device: the device
 *                              holds a single file, opened with name ""
 *   "dir:PATH[,opts]"          a directory, one backing file per cached file
 *   "nbd://HOST[:PORT]/EXPORT[,opts]", "nbd+unix:///EXPORT?socket=PATH[,opts]"
 *                              an NBD export (libnbd's URIs; the URI ends at
 *                              the first comma): a single file "", of the
 *                              export's size; opts conns=N, window=adaptive
 *                              or window=fixed:N, max_io=SIZE,
 *                              timeout=SECONDS, fua=1 (see wbc_dev_add(3))
 *   "rados:POOL[/PREFIX][,opts]"
 *                              a Ceph pool (librados): each file striped
 *                              over objects "[PREFIX/]NAME.<index, 16 hex
 *                              digits>", its size in object 0's xattrs,
 *                              an exclusive RADOS lock on it while open
 *                              (a second cache anywhere gets -EBUSY);
 *                              opts conf=PATH, id=NAME, object_size=SIZE
 *                              (4M), timeout=SECONDS (30), window=adaptive
 *                              or window=fixed:N, max_io=SIZE
 *   "model[:opts]"             RAM behind a device model: bw=SIZE (per
 *                              second), lat=TIME, iops=N, qd=N, max_io=SIZE,
 *                              sched=T@P%;..., err=OFF+LEN, errp=P,
 *                              errn=N (the first N writes fail),
 *                              stall=T+D, seed=N,
 *                              discard=1 (sizes only, reads zeros),
 *                              send=1 (a write's data is copied when it
 *                              is submitted, in the submitter's thread,
 *                              as a network client's send; it completes
 *                              when due),
 *                              seek=TIME (for experiments, the wbcache
 *                              lab: a disk head; an I/O that does not
 *                              begin where the one before it ended pays
 *                              TIME of device time first, serially;
 *                              counted in wbc_dev_backend_stats()'s
 *                              seeks and seek_ns)
 *   "stack:ID/NAME[,opts]"     a stacked device over file NAME of device
 *                              ID of this cache (devices are numbered from
 *                              0 in the order they were added): see
 *                              wbc_dev_add_stacked() for it and its opts
 * file/dir opts (comma separated): qd=N (queue depth; default the block
 * device's nr_requests, within 32..256),
 * max_io=SIZE (largest single I/O, default from the block device),
 * direct=0 (buffered instead of O_DIRECT).
 * Any spec also takes the kernel's per-device tunables, among its options
 * or after its path ("model:min_ratio=5", "mem,min_ratio=5",
 * "dir:PATH,qd=8,min_ratio=5"): min_ratio=N, max_ratio=N (percent of the
 * dirty threshold), max_bytes=SIZE, strict_limit=1, dirty_list= and
 * file_lock= (old policies for experiments, below); and on_error=retry
 * (default: pages that fail to write stay dirty and are retried with
 * backoff, counted in at_risk_bytes) or on_error=drop (they are cleaned
 * and counted in lost_bytes).  Either way every handle open at the time
 * sees the error at its next fsync.
 * retry_timeout=SECONDS (on_error=retry; default 30; "0.5", "250ms"
 * work too) bounds the retrying: once every write of the device has
 * failed for that long (none succeeded since the first failure) while it
 * holds pages at risk, callers that would wait for it get its error
 * instead of waiting for ever: a writer the throttle would pause
 * (wbc_pwrite), a page allocation that only its pages hold up, and
 * wbc_cache_close (which retries until then).  The pages stay dirty,
 * counted in at_risk_bytes, and are still retried in the background;
 * the first write that succeeds ends it, and writers wait again.
 * For experiments (the wbcache lab: an old policy of Linux against the
 * current one), not for production use:
 *   chunk=bw (default) or chunk=SIZE: the most of one file a flusher
 *       pass writes before moving on to the next dirty file (the file
 *       goes behind the others): half a second of the device's measured
 *       bandwidth, at least 4 MiB; or SIZE: chunk=4M is Linux before 2011
 *       (MAX_WRITEBACK_PAGES), which streamed several large files 4 MiB
 *       at a time, round robin;
 *   throttle=current (default) or throttle=2011: the device's writers
 *       are paused as by the IO-less throttle first posted in 2011: pauses
 *       in whole milliseconds up to a flat 200 ms, no pass for a device
 *       holding almost nothing, and writers let go after one pause in the
 *       max-pause area (dirty under limit + limit/16) and, when their
 *       device is below its share, the pass-good area (under limit +
 *       limit/8); the areas that cost a 12-disk JBOD ~30% in Linux;
 *   max_inflight=N: at most N of the device's I/Os in flight, however
 *       many its backend takes (the backend's queue depth, and an NBD
 *       device's adaptive window, below it): a fixed limit, as Linux's
 *       NFS client had in 2017 for writes to the server;
 *   dirty_list=buckets|list  (default buckets) how the device tracks its
 *       dirty files.  buckets: writers push a newly dirtied file on a
 *       lock-free per-CPU inbox, and the flusher files them in time
 *       buckets and queues expired ones a bucket at a time, each hold of
 *       the device's list lock O(1) in the number of files.  list: the
 *       kernel's b_dirty before 2015: one list in dirtying order, to which
 *       a writer that dirties a clean file appends it under the list lock,
 *       and which queue_io walks from the oldest file while files are
 *       expired, moving each to b_io, in one hold of that lock
 *       (move_expired_inodes); the flusher takes and puts back one file
 *       per hold (redirty_tail, requeue_io).  Under list the lock's longest
 *       hold grows with the number of expired files, and writers wait for
 *       it.
 *   file_lock=page|file  (default page) what serializes a file's writers
 *       against its writeback.  page: a writer claims only the page it
 *       writes, and writeback only the pages it submits.  file: one lock
 *       per file (the NFS client's inode lock before 2017), held by a
 *       writer across each page's claim, copy and dirtying, and by
 *       writeback from the collection of each run of the file's dirty
 *       pages until the backend's submit of it returns: writers to a
 *       file wait while its writeback is submitted, and writeback for
 *       them.
 * Returns 0 and sets *out (owned by the cache), -EINVAL for a bad spec or
 * for a cache page smaller than the logical block size O_DIRECT needs on
 * a file:/dir: backend (its writes could never succeed; pages at least
 * that large, or direct=0), or the -errno of opening the backend.
 */
int wbc_dev_add(wbc_cache *cache, const char *spec, wbc_dev **out);

/* wbc_dev_add() that also writes a one-line reason for a failure into
 * @msg (at most @msglen bytes, NUL-terminated; may be NULL). */
int wbc_dev_add_msg(wbc_cache *cache, const char *spec, wbc_dev **out,
		    char *msg, size_t msglen);

/*
 * A device over files the caller opens (a file system layered on a
 * directory tree, like `wbcache mount`): whenever wbcache needs the backing
 * file of cached file @name (any name wbc_file_open accepts), it calls
 * @open(@ctx, name, flags) with open(2) flags (O_RDWR | O_CLOEXEC, and
 * O_DIRECT unless direct=0; again without O_DIRECT if that fails with
 * EINVAL), in the thread that called wbc_file_open (and, with
 * WBC_OPENER_REOPEN, in any thread later).  @open returns a new
 * file descriptor, which wbcache owns and closes, or -errno; it must not
 * call wbcache (it may run with wbcache's locks held).  @fs_fd is any
 * descriptor on the backing file system (dup'd): a device sync calls
 * syncfs() on it.  @opts: "" or the comma-separated options of "dir:"
 * (qd=, max_io=, direct=) and the device tunables.  Returns as
 * wbc_dev_add_msg().
 */
typedef int (*wbc_open_fn)(void *ctx, const char *name, int flags);
/* @open_flags: WBC_OPENER_REOPEN when @open works for a name from any
 * thread for as long as wbcache holds the file: wbcache then keeps only a
 * bounded number of descriptors open (a quarter of RLIMIT_NOFILE), closing
 * idle ones and reopening them when I/O needs them. */
#define WBC_OPENER_REOPEN 1u
int wbc_dev_add_opener(wbc_cache *cache, int fs_fd, const char *opts, wbc_open_fn open,
		       void *ctx, unsigned open_flags, wbc_dev **out, char *msg,
		       size_t msglen);

/*
 * A stacked device (the user-space loop device): its storage is file
 * @name of device @lower (created if missing), in this cache or another.
 * It holds a single file, named "", whose bytes are the lower file's.  Its
 * writeback writes into the lower file with wbc_pwritev from worker
 * threads of its own; its fsync is the lower file's (the lower device's
 * pages written back and its backend flushed), and the lower device's
 * write errors are its fsync's errors; its truncate is the lower file's.
 * @opts: "" or comma-separated stack_throttle=global|local|direct,
 * workers=N (1..64, default 4) and the device tunables of wbc_dev_add().
 * stack_throttle says how the workers' writes into the lower device are
 * throttled:
 *   local   (default) against the lower device's own dirty pages and
 *           share alone (wbc_thread_set_local_throttle);
 *   global  as any writer's, against the whole cache's dirty pages, which
 *           the stacked device's own pages fill: its writeback is slowed
 *           by a throttle its own pages cause (the Linux loop device's
 *           trouble before it used direct I/O), kept to compare;
 *   direct  the lower file is opened WBC_O_DIRECT: the workers' I/O goes
 *           to the lower device's backend, bypassing its cache (loop's
 *           direct I/O); the lower file must not be open through the lower
 *           device's cache then (-EBUSY), and cannot be while this device
 *           lives; its I/O alignment becomes this device's.
 * The lower file stays open while the device lives; close the stacked
 * device's cache before the lower device's when they differ.  The cache
 * must leave room for the lower device's pages (a dirty_ratio well
 * below 100).  Returns as wbc_dev_add_msg(); -EBUSY for a lower file
 * open the other way (WBC_O_DIRECT).
 */
int wbc_dev_add_stacked(wbc_cache *cache, wbc_dev *lower, const char *name, const char *opts,
			wbc_dev **out, char *msg, size_t msglen);

/*
 * Break the RADOS lock a cache holds on file @name of the "rados:" device
 * @spec (the lock of a cache that died, or that must give the file up:
 * `wbcache rados-unlock SPEC NAME`).  The holder is fenced first: its
 * client is added to the OSD blocklist, so a cache still running fails
 * every later write of that device (EIO: they stay dirty, at risk) and
 * must be restarted.  Returns the number of locks broken (0: it was not
 * locked), or -errno (-ENOENT: no such file) with a one-line account in
 * @msg (may be NULL).
 */
int wbc_rados_break_lock(const char *spec, const char *name, char *msg, size_t msglen);

/* An unseen writeback error of the file for this handle (and mark it
 * seen), without writing anything: what close(2) may report.  0 or -errno. */
int wbc_file_check_error(wbc_file *f);
/* An error met since this handle opened, without marking it seen: what a
 * FLUSH at close(2) of one of several descriptors reports, leaving it to
 * fsync too (an error from before the open that fsync would tell is not
 * one).  0 or -errno. */
int wbc_file_peek_error(wbc_file *f);

/* Write back all dirty data of the device, wait for it, flush the backend.
 * Returns 0, or a writeback error the device met since the previous
 * wbc_dev_sync() (like syncfs: even one an fsync reported already). */
int wbc_dev_sync(wbc_dev *dev);

/* wbc_dev_sync() on every device of the cache. */
int wbc_cache_sync(wbc_cache *cache);

/* Flags for wbc_file_open(). */
#define WBC_O_CREAT  0x1   /* create the backing file if missing */
#define WBC_O_TRUNC  0x2   /* truncate to zero length at open */
/* Direct I/O (O_DIRECT): the handle's reads and writes go to the backend
 * from the caller's buffers and wait for it, bypassing the cache; their
 * offsets, lengths and buffer addresses must be multiples of the
 * backend's alignment (struct wbc_backend_caps; 1 for mem and model,
 * the file system's O_DIRECT block for file: and dir:), else -EINVAL.
 * A file is open either through the cache or direct, never both at once:
 * wbc_file_open() returns -EBUSY for a handle of the other kind while one
 * is open.  A direct open first writes back the pages that closed handles
 * left in the cache and drops every page of the file (it fails with their
 * write error when they cannot be written), so that no cached copy goes
 * stale: what a direct write stores is what any later open reads. */
#define WBC_O_DIRECT 0x4
/* A handle that tells writeback errors without marking them seen: its
 * fsync (and wbc_file_check_error) reports each error once to it, as any
 * handle's, but an error no other handle was told stays the next opener's
 * to inherit (errseq, wbc_fsync_range).  For a caller's own internal
 * writeback (a FUSE daemon settling a file the kernel forgot) that must
 * learn that it failed without taking the error from the file's user. */
#define WBC_O_NOERRSEEN 0x8

/*
 * Open file @name on @dev.  Names are flat: no '/', not "." or "..", at most
 * 255 bytes ("" for a "file:" device).  Several handles may name one file;
 * they share its pages.  Returns 0 and sets *out (owned by the caller until
 * wbc_file_close()), -ENOENT without WBC_O_CREAT when missing, -EINVAL for a
 * bad name, -EBUSY when the file is open the other way (WBC_O_DIRECT), or
 * the backend's -errno.
 */
int wbc_file_open(wbc_dev *dev, const char *name, int flags, wbc_file **out);

/* Close a handle.  Dirty data stays in the cache and is written back later;
 * close does not report write errors (fsync does).  Returns 0 (-EBADF for a
 * handle already closed). */
int wbc_file_close(wbc_file *f);

/*
 * Read up to @len bytes at @off.  Returns the count read (0 at or past end of
 * file, and at or past 2^62), -EINVAL for a length over SSIZE_MAX or a NULL
 * buffer, -EBADF for a closed handle, or the backend's -errno on a failed
 * read-in.
 */
ssize_t wbc_pread(wbc_file *f, void *buf, size_t len, uint64_t off);

/*
 * Copy @len bytes at @off into the cache; the data is written back later.
 * Never does I/O beyond reading in a partially overwritten page; may wait
 * for writeback when the dirty limit is reached or no page is free.
 * Returns @len, -EINVAL when off + len overflows or exceeds 2^62, -EBADF for
 * a closed handle, or the backend's -errno from a failed read-in.  When
 * the device is dead (its writes failing beyond its retry_timeout, see
 * wbc_dev_add) and the call would wait for it: the bytes copied so far if
 * any (less than @len), else the device's write error (e.g. -EIO).
 */
ssize_t wbc_pwrite(wbc_file *f, const void *buf, size_t len, uint64_t off);

/* Vectored wbc_pread() and wbc_pwrite(): the bytes of @iovcnt buffers
 * at @off, in order (a direct handle's as one direct I/O).  Return as
 * they do: the bytes done, which stop short where the file or the write
 * did, or -errno when none were. */
ssize_t wbc_preadv(wbc_file *f, const struct iovec *iov, int iovcnt, uint64_t off);
ssize_t wbc_pwritev(wbc_file *f, const struct iovec *iov, int iovcnt, uint64_t off);

/*
 * wbc_pwrite() that never sleeps in the throttle, for a server that
 * answers many writers from a few threads (a FUSE daemon): where
 * wbc_pwrite() would pause the calling thread, it stops there and returns
 * the bytes copied so far (possibly 0), with *@pause_ns (may be NULL) set
 * to the pause owed; 0 when none was (then it copied all @len, or failed).
 * The caller waits that long without holding its thread (a timer) and
 * then writes the rest the same way; the writer is answered when all of
 * it is in.  The throttle's record is the calling thread's, as for
 * wbc_pwrite().  It may still wait for a free page.  Otherwise returns as
 * wbc_pwrite().
 */
ssize_t wbc_pwrite_nowait(wbc_file *f, const void *buf, size_t len, uint64_t off,
			  uint64_t *pause_ns);

/* Set the file size; the backend is resized first, before this returns.
 * Returns 0, -EINVAL for a size over 2^62, or the backend's -errno (the
 * file is then as it was: size, data, dirty pages). */
int wbc_truncate(wbc_file *f, uint64_t size);

/* Remove file @name of @dev: its cached pages are dropped, never written,
 * and the backend deletes what it stores for it (the backend's remove
 * operation: a RADOS pool's objects, the mem backend's buffer).  The file
 * must not be open: -EBUSY if a handle is.  A later wbc_file_open() of the
 * name finds no file (or, with WBC_O_CREAT, a new empty one).  Returns 0,
 * -ENOENT (no such file), -EBUSY, -EINVAL (a bad name), -EOPNOTSUPP (the
 * backend cannot remove files: dir: and nbd: files are removed by their
 * owners, the directory or the export), or the backend's -errno (the
 * file is then as it was: its size, its data and its dirty pages stay, as
 * after a refused wbc_truncate()). */
int wbc_file_remove(wbc_dev *dev, const char *name);

/* Current file size, including data still in the cache; -EBADF if closed. */
int64_t wbc_file_size(wbc_file *f);

/* What the cache holds of a file (wbc_file_info()). */
struct wbc_file_info {
	uint64_t size;               /* as wbc_file_size() */
	uint64_t unwritten_bytes;    /* dirty or under writeback: not yet on the backend */
	/* the size the backend's copy has (writeback writes whole pages: it
	 * may be past size until the engine trims it, at fsync or once the
	 * file is no longer used); == size and no unwritten bytes: the
	 * backend holds the file as it is */
	uint64_t backend_size;
	uint64_t reserved[5];        /* zero; room for more without a new call */
};
/* Fill @info.  Returns 0 or -EBADF for a closed handle. */
int wbc_file_info(wbc_file *f, struct wbc_file_info *info);

/*
 * Write back the dirty pages overlapping [off, off+len) (len 0 = to end of
 * file), wait for them, and flush the backend (datasync: data and size only).
 * Returns 0, or a write error that happened since this handle last reported
 * one (errseq: every handle sees each error once).  A failed flush is such
 * an error too: every handle open then sees it once.  A handle opened with
 * WBC_O_NOERRSEEN reports errors but marks none seen.
 */
int wbc_fsync_range(wbc_file *f, uint64_t off, uint64_t len, int datasync);
int wbc_fsync(wbc_file *f);
int wbc_fdatasync(wbc_file *f);

/* A snapshot of the cache's counters (wbc_stats()). Sizes are in bytes. */
struct wbc_stats {
	uint64_t page_size;
	uint64_t mem_bytes;          /* arena size */
	uint64_t cached_bytes;       /* pages holding file data */
	uint64_t dirty_bytes;        /* dirty, not yet under writeback */
	uint64_t writeback_bytes;    /* under writeback */
	uint64_t bg_thresh_bytes;    /* background writeback starts above this */
	uint64_t thresh_bytes;       /* dirty_ratio / dirty_bytes */
	uint64_t freerun_bytes;      /* writers are not throttled below this */
	uint64_t setpoint_bytes;     /* the throttle steers dirty + writeback here */
	uint64_t limit_bytes;        /* hard limit: writers stop here */
	uint64_t written_bytes;      /* accepted by wbc_pwrite() */
	uint64_t written_back_bytes; /* completed writeback */
	uint64_t read_in_bytes;      /* read from backends on cache misses */
	uint64_t reclaimed_pages;    /* clean pages evicted */
	uint64_t write_ios;          /* writeback I/Os completed */
	uint64_t write_errors;       /* writeback I/Os that failed */
	uint64_t lost_bytes;         /* dirty data dropped after a write error */
	uint64_t at_risk_bytes;      /* dirty again after a failed write (retry policy) */
	uint64_t pauses;             /* throttle pauses of writers */
	uint64_t paused_ns;          /* their total length */
	uint64_t max_pause_ns;
	uint64_t page_waits;         /* times a writer waited for a free page */
	uint64_t write_bw;           /* summed device write bandwidth estimate, bytes/s */
	uint32_t nr_devices;
	uint32_t reserved_u;
	/* backend flushes (fsync, sync: the backing file system's fsync or
	 * syncfs) that failed: what they covered may not be on the store */
	uint64_t flush_errors;
	uint64_t reserved[15];       /* zero: room for counters to come */
};

/* Fill @st.  Returns 0 or -EINVAL for NULL arguments. */
int wbc_stats(wbc_cache *cache, struct wbc_stats *st);

/* One device's counters (wbc_dev_stats()). */
struct wbc_dev_stats {
	uint64_t dirty_bytes, writeback_bytes;
	uint64_t wb_thresh_bytes;    /* its share of the dirty threshold */
	uint64_t write_bw;           /* bytes/s, 3 s window */
	uint64_t avg_write_bw;       /* bytes/s, smoothed again */
	uint64_t dirty_ratelimit;    /* bytes/s a writer may dirty at the setpoint */
	uint64_t written_back_bytes;
	uint64_t dirtied_bytes;
	/* files in writeback's lists (the kernel's b_dirty, b_io, b_more_io)
	 * and the time buckets b_dirty is kept in */
	uint64_t files_dirty, files_io, files_more_io, dirty_buckets;
	/* failing writes (on_error=retry): its pages dirty again after a
	 * failed write; how long its writes have failed with none succeeding,
	 * while it holds such pages (0: not failing, or none held); and the
	 * error callers get instead of waiting
	 * once that is past its retry_timeout (0: they wait) */
	uint64_t at_risk_bytes;
	uint64_t failing_ns;
	int dead_error;
	uint32_t reserved_u;
	/* the throttle's pauses of writers to this device, and their total
	 * length (the cache's pauses and paused_ns, by device) */
	uint64_t pauses, paused_ns;
	uint64_t reserved[14];       /* zero: room for counters to come */
};
int wbc_dev_stats(wbc_dev *dev, struct wbc_dev_stats *st);

/*
 * A device's debugging counters: how its internals behave (lock hold
 * times, lock-free retries), for benchmarks and for finding out why.
 * Not part of the stable interface: fields may change between versions.
 */
struct wbc_dev_debug {
	/* hold times of the device's dirty-file list lock: entry i counts
	 * holds of [2^(i-1), 2^i) ns (entry 0: under 1 ns; entry 31: every
	 * hold from 2^30 ns on) */
	uint64_t list_lock_hold_hist[32];
	uint64_t list_lock_holds, list_lock_max_hold_ns;
	/* the same holds in CPU time of the holding thread, entries as above
	 * (at most the wall time; it counts no time in which the operating
	 * system ran something else: a hold that is long in wall time and
	 * short here was descheduled, not busy) */
	uint64_t list_lock_cpu_hist[32];
	uint64_t list_lock_max_cpu_ns;
	/* takes of the list lock that found it held (under dirty_list=buckets
	 * only the device's flusher takes it while the device runs) */
	uint64_t list_lock_waits;
	/* writers take no lock to dirty a file: they push it on a per-CPU
	 * inbox with a compare-and-swap; the tries that lost a race */
	uint64_t inbox_push_retries;
	/* The device's policies (the dirty_list= and file_lock= tunables of
	 * wbc_dev_add(): 0 today's, 1 the old one) and what they cost:
	 *   list_lock_writer_takes  takes of the list lock by writers (and
	 *       completions) that dirtied a clean file: always 0 under
	 *       dirty_list=buckets; one per file made dirty under
	 *       dirty_list=list.  Those holds are in list_lock_hold_hist
	 *       (wall time) but not in list_lock_cpu_hist, which counts the
	 *       flusher's holds alone;
	 *   queue_io_passes  queue_io calls (each one hold of the list lock);
	 *   queue_io_moved, queue_io_max_moved  files they moved to b_io, in
	 *       all and the most in one pass;
	 *   queue_io_walked, queue_io_max_walked  inodes of b_dirty they
	 *       looked at under the lock, in all and the most in one pass
	 *       (one hold): under dirty_list=list every file moved plus the
	 *       one that ended the walk; under buckets 0 (whole buckets move);
	 *   file_lock_waits, file_lock_wait_ns  under file_lock=file, takes of
	 *       a file's lock (by writers or writeback) that found it held,
	 *       and the time they waited; 0 under file_lock=page. */
	uint32_t dirty_list;         /* 0 buckets, 1 list */
	uint32_t file_lock;          /* 0 page, 1 file */
	uint64_t list_lock_writer_takes;
	uint64_t queue_io_passes, queue_io_moved, queue_io_max_moved;
	uint64_t queue_io_walked, queue_io_max_walked;
	uint64_t file_lock_waits, file_lock_wait_ns;
};
int wbc_dev_debug(wbc_dev *dev, struct wbc_dev_debug *st);
/* The hold time (ns) under which @pct percent (0..100) of the list-lock
 * holds in @st fall: the upper bound of the histogram entry that reaches
 * it, or the longest hold if that is shorter (the last entry's: the
 * longest hold).  0 when there were none. */
uint64_t wbc_lock_hold_percentile(const struct wbc_dev_debug *st, double pct);
/* The same for the holds' CPU time (list_lock_cpu_hist). */
uint64_t wbc_lock_cpu_percentile(const struct wbc_dev_debug *st, double pct);

/* The calling thread's throttling record (thread-local, all caches). */
struct wbc_thread_stats {
	uint64_t pages_dirtied;
	uint64_t pauses, paused_ns, last_pause_ns, max_pause_ns;
	uint64_t reserved[8];
};
void wbc_thread_stats(struct wbc_thread_stats *st);

/*
 * Local throttling of the calling thread (the kernel's PF_LOCAL_THROTTLE),
 * for a thread that writes into a device in order to clean another
 * device's pages (a stacked device's worker, a server writing what its
 * clients' caches flush): its writes are throttled against the dirty
 * pages of the device it writes to and that device's share of the dirty
 * threshold alone, never against the whole cache's dirty pages, which
 * the pages it is cleaning fill (a group's limit still applies).  @on
 * non-zero turns it on, 0 off; thread-local, all caches.  Returns the
 * previous setting.
 */
int wbc_thread_set_local_throttle(int on);

/*
 * Reserve pages for the calling thread (the kernel's PF_MEMALLOC), for a
 * thread that cleans a device's pages by writing them into another device
 * of the same cache (a stacked device's worker does): the cache keeps a
 * few free pages (a 64th of it, 2 to 256; for a stack N deep at least
 * N(N-1), at most half the cache) that only such threads take, so
 * that when every other page is dirty their writes, which will free the
 * dirty ones, find pages.  Other threads wait for writeback rather
 * than take the last of them.  @on 0 turns it off; 1 is for a thread
 * writing into a device over storage, N for one writing into a device
 * stacked N - 1 deep on devices of the same cache: it leaves those under
 * it all but 1/N of the reserve, as their writes clean the pages its own
 * fill.  Set it before opening the file the thread writes through: the
 * open grows the reserve (-ENOBUFS when N(N-1) is over half the cache).
 * Thread-local, all caches.  Returns the previous setting.
 */
int wbc_thread_set_memalloc(int on);

/*
 * Groups (the kernel's memory-cgroup writeback domains): a group has its
 * own dirty limit; files opened in it charge their dirty pages to it, and a
 * writer to such a file is throttled by whichever of the cache's and the
 * group's control lines is lower.  @limit_bytes, else @limit_ratio percent
 * of the cache.  Returns 0, or -EINVAL (no limit, ratio over 100, limit
 * under two pages).  Groups live until the cache is closed.
 */
typedef struct wbc_group wbc_group;
int wbc_group_create(wbc_cache *cache, uint64_t limit_bytes, unsigned limit_ratio,
		     wbc_group **out);
struct wbc_group_stats {
	uint64_t dirty_bytes, writeback_bytes, thresh_bytes, bg_thresh_bytes,
		 setpoint_bytes, limit_bytes;
	uint64_t reserved[8];
};
int wbc_group_stats(wbc_group *g, struct wbc_group_stats *st);
/* wbc_file_open() charging the file's dirty pages to @group (NULL: none).
 * A file's group is the one it was first opened with. */
int wbc_file_open_group(wbc_dev *dev, const char *name, int flags, wbc_group *group,
			wbc_file **out);

/* Human-readable message for a value returned by this API. */
const char *wbc_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
