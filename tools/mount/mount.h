/*
 * `wbcache mount BACKING_DIR MOUNTPOINT [-o opts] [-f]`: a FUSE file system
 * (libfuse3 low-level API, multi-threaded) whose file data goes through the
 * wbcache engine and whose metadata passes through to BACKING_DIR.
 *
 * Nodes.  Every file the kernel knows (a FUSE node id) is a struct node
 * holding an O_PATH descriptor of the backing inode, found by (st_dev,
 * st_ino) in a hash table, so hard links share a node.  Every operation is
 * relative to such a descriptor (the *at() calls with O_NOFOLLOW and
 * AT_SYMLINK_NOFOLLOW, or the descriptor itself): no path is ever resolved
 * from a string, so nothing can step outside BACKING_DIR through "..",
 * symlinks or a concurrent rename.  The kernel checks permissions
 * (default_permissions).
 *
 * Data.  Under -o direct_io=auto (the default) write-only opens, and
 * read-write opens where the kernel maps direct_io files (conn.c), are
 * direct_io (the kernel's page cache is bypassed, data is cached once, in
 * the engine); other opens go through the kernel's page cache, write
 * through (so mmap works), and their writes reach the engine as well.  The engine's device is an
 * opener device: its file for a node is named by a number unique to that
 * node (never reused in the process), and the engine opens the backing file
 * by reopening the node's O_PATH descriptor, so writeback reaches the very
 * inode that was written, never a file that later took its name.  A file
 * whose last link goes (unlink, or rename over it) has its cached data
 * dropped once the kernel forgets it (an open of the inode may come
 * until then); a node the kernel forgets after data went
 * through it stays as a ghost (node.c) or, without file handles, is written
 * back first, so a new node for the same inode never sees stale data.
 *
 * Sizes.  A node remembers the size of its data in the engine (while open,
 * the engine's; after, the last one), and getattr reports it: data still in
 * the cache counts.
 *
 * Stats.  `wbcache stat MOUNTPOINT` reads the extended attribute
 * "user.wbcache.stats" of the mount's root, which the mount answers with
 * live engine statistics (it is not listed and cannot be set).
 *
 * Unmount (fusermount3 -u, SIGINT, SIGTERM) ends the session loop; the
 * cache is then closed, which writes everything back, and any error is
 * reported and makes the exit status 1.
 *
 * Files.  node.c the node table, the nodes' descriptors and their engine
 * files; ops.c the FUSE operations; reply.c the deferred writes and their
 * replier thread; stats.c the statistics (the daemon's and `wbcache
 * stat`) and the writeback of everything on request; options.c the -o
 * options; conn.c the flags negotiated past libfuse; main.c `wbcache
 * mount` (background mode) and `wbcache umount`.
 * This header holds what they share.
 */
#ifndef WBC_TOOLS_MOUNT_H
#define WBC_TOOLS_MOUNT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "wbcache.h"

#include "../run.h"

#define STATS_XATTR "user.wbcache.stats"
/* Reading it on the root writes everything back (`wbcache umount`): a
 * getxattr needs only read permission, works on a read-only mount and
 * holds no lock of the root's inode while it waits. */
#define SYNC_XATTR "user.wbcache.sync"
/* Reading REPORT_XATTR "NAME" on the root (NAME: up to 64 of [0-9a-z-])
 * asks the daemon to send its exit status, as "STATUS MESSAGE", to the
 * abstract Unix datagram socket "\0wbcache-NAME" when it ends (`wbcache
 * umount` waits for it: the writeback at the end, after the unmount, can
 * still fail for writes that came after its sync).  The daemon connects a
 * socket of its own, bound to a name it answers with, to that one at
 * once (it fails where it cannot: another network namespace), and umount
 * connects its socket to the daemon's: each takes datagrams from the
 * other only (no other process can forge or flood the report).  Only the
 * daemon's user or root may ask. */
#define REPORT_XATTR "user.wbcache.report."
#define REPORT_NAME_MAX 64
/* main.c: a socket of the daemon's connected to umount's @name (its own
 * name in @own), or -errno */
int report_connect(const char *name, char *own, size_t ownlen);
/*
 * The mount's locks are error-checking mutexes, so a *_locked function can
 * assert that its caller holds the lock (a relock by the owner fails at
 * once).
 *
 * Lock order: none nests but one.  M.lock (the node table), a node's lock
 * (its engine handles, size and times) and D.lock (the deferred writes)
 * are each taken with no other of them held; the engine's calls made
 * under a node's lock take only the engine's own locks.  A node's fdlock
 * is the innermost: taken alone (nfd), or under that node's own lock
 * (open, release and before_unlink take or drop its descriptor hold),
 * nothing taken under it.  libfuse's locks: libfuse
 * may call the interrupt callback (deferred_interrupt, which takes D.lock)
 * with its request's own lock held; under D.lock the mount calls libfuse
 * only to ask whether a request was interrupted (fuse_req_interrupted,
 * which takes the session's lock, one libfuse never holds while it calls
 * the mount) and, rarely, reads /proc for the writer's pending signals
 * (reply.c, killed_since_locked), and the replier calls the engine and answers requests with
 * D.lock released.  uring.c's locks (a queue's q->lock, the helpers'
 * H.lock, the start's S.lock) are leaves too: taken with none of these
 * held, none taken under them (uring.c's header); so is ops.c's Dirs.lock
 * (the open directory handles).
 */
#ifdef NDEBUG
#define assert_held(m) ((void)(m))
#else
#define assert_held(m) assert(pthread_mutex_lock(m) == EDEADLK)
#endif
/* a before b */
static inline bool ts_before(struct timespec a, struct timespec b)
{
	return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static inline void mutex_init_checked(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}
#define MINU(a, b) ((a) < (b) ? (a) : (b))

struct node {
	struct node *hnext;          /* M.lock */
	uint64_t nlookup;            /* M.lock */
	unsigned forgetting;         /* M.lock: forgets writing it back now */
	bool linger;                 /* M.lock: one of them keeps it a ghost (forget_done) */
	bool ghost;                  /* M.lock: forgotten, data in the cache (node.c) */
	struct node *gprev, *gnext;  /* M.lock: the ghosts, oldest first */
	uint64_t gtime;              /* M.lock: when it became one (CLOCK_MONOTONIC ns) */
	dev_t dev;
	ino_t ino;
	int fd;                      /* O_PATH, O_NOFOLLOW; -1 when fh is used */
	struct file_handle *fh;      /* handle mode: reopened per use (nfd) */
	/* Handle mode, regular files: the descriptor nfd() opened, kept while
	 * a request uses it or an open of the file lives (pfd_holds). */
	pthread_mutex_t fdlock;      /* pfd, pfd_holds; innermost (Lock order) */
	int pfd;
	unsigned pfd_holds;
	/* Handle mode, other than regular files and directories (a fifo, a
	 * socket, a device, a symlink): a descriptor taken when its last
	 * link went through the mount, kept until the node is freed, so that
	 * the inode the kernel still holds (an open fifo's) is not freed
	 * under it: its handle no longer opens then (fstat failed, ESTALE);
	 * -1 none */
	atomic_int kept_fd;
	uint64_t gen;                /* unique per node (fallback engine name) */
	bool is_reg;
	bool hashed;                 /* M.lock: in the table (not replaced as stale) */
	atomic_uint mode;            /* the last st_mode seen: kill_priv's quick test */
	atomic_int caps;             /* security.capability: -1 not looked, 0 none, 1 set */
	pthread_mutex_t lock;        /* the fields below */
	unsigned opens;
	atomic_uint kcache_opens;    /* of them, through the kernel's page cache */
	wbc_file *wf;                /* the node's engine handle while opens > 0 */
	bool wrote;                  /* data went through the engine */
	bool unlinked;               /* a link of it went through the mount */
	/* its last link gone through the mount: a descriptor hold
	 * (pfd_holds) that keeps the inode (and the data the cache holds
	 * of it) until the kernel forgets the node (pin_unlinked_locked) */
	bool unlink_pin;
	bool size_known;
	uint64_t size;               /* the engine's size of the data */
	uint64_t unwritten;          /* bytes not yet written back, at the last release */
	/* Times.  Writeback moves the backing file's mtime to when it ran;
	 * the file's own is the last write through the mount or the one set
	 * explicitly, reported while the node lives and put back on the
	 * backing file once its data is written (fsync, forget, unmount). */
	bool mtime_set;
	/* the engine's descriptor of the file is read-only (the daemon may
	 * not write it): a writable open is refused (n->lock, and the
	 * opener inside engine_open under it) */
	bool backing_ro;
	struct timespec mtime;
	struct timespec ctime;       /* last write through the mount */
	/* Settled (node_attr): closed, its data written back and its mtime
	 * put back, the backing file's size and mtime are the file's again
	 * (size_known and mtime_set cleared), and its ctime the node's while
	 * the backing file's is the one it had then (bctime): a change made
	 * in BACKING_DIR beside the mount then shows. */
	bool bctime_set;
	struct timespec bctime, bmtime;
	bool mtime_explicit;         /* mtime set through the mount (setattr) */
};

enum dio_mode { DIO_AUTO, DIO_ALWAYS, DIO_NEVER };

struct mnt {
	char *backing;
	int root_fd;
	int mount_fd;                /* O_RDONLY on the backing root: open_by_handle_at */
	int mount_id;                /* the backing root's mount (handle mode) */
	struct node root;
	pthread_mutex_t lock;        /* the table */
	struct node **hash;
	struct node *stale;          /* out of the table, not yet forgotten (hnext) */
	struct node *ghead, *gtail;  /* the ghosts, oldest first */
	size_t nghosts;
	/* the age at which a ghost is settled (node.c): GHOST_AGE_NS, or
	 * WBCACHE_MOUNT_GHOST_AGE_MS (tests: a minute is long to wait) */
	uint64_t ghost_age_ns;
	size_t hsize, n;
	wbc_cache *cache;
	wbc_dev *dev;
	atomic_ullong next_gen;
	bool as_root;                /* the daemon may chown */
	uid_t euid;
	gid_t egid;
	bool handles;                /* nodes keep file handles, not descriptors */
	/* closed files unlinked through the mount whose inode a descriptor
	 * keeps until the kernel forgets them (pin_unlinked_locked), and the
	 * most of them: a quarter of the descriptors the daemon may have */
	atomic_long unlink_pins;
	long unlink_pin_cap;
	bool foreground;
	struct fuse_session *se;
	enum dio_mode dio;           /* -o direct_io= */
	/* -o backend=rados:...: file data in a RADOS pool, BACKING_DIR holds
	 * the metadata (and each file's size, as a sparse file); the spec
	 * with its options (rados_conf=, rados_id=, object_size=,
	 * rados_timeout=), NULL: the backing files hold the data */
	char *remote;
	double entry_timeout, attr_timeout, negative_timeout;   /* -o, seconds */
	bool noflush;                /* -o */
	bool readdirplus;            /* -o readdirplus= (default 1) */
	/* POSIX ACLs enforced by the kernel (FUSE_POSIX_ACL), and new
	 * entries' modes sent unmasked with the caller's umask
	 * (FUSE_DONT_MASK): set at INIT */
	bool posix_acl, dont_mask;
	/* the largest file BACKING_DIR's file system takes (UINT64_MAX:
	 * unknown): writes past it fail with EFBIG */
	uint64_t max_file;
	bool direct_mmap;            /* the kernel maps direct_io files (conn.c) */
	/* where to send the exit status (REPORT_XATTR; M.lock): -1 none */
	int report_fd;
	bool killpriv_v2;            /* FUSE_HANDLE_KILLPRIV_V2 granted (conn.c) */
};

extern struct mnt M;            /* main.c */

/* The deferred writes (reply.c): the queue of writes the throttle paused,
 * answered by the replier thread, and its counts (stats.c). */
struct deferred;
struct replier {
	pthread_mutex_t lock;
	pthread_cond_t cond;         /* CLOCK_MONOTONIC */
	struct deferred *head;       /* by due time */
	bool stop;
	bool started;
	pthread_t thread;
	uint64_t queued, interrupted;
};
extern struct replier D;

/* main.c: to stderr in the foreground, else to syslog. */
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* node.c */
static inline struct node *node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &M.root : (struct node *)(uintptr_t)ino;
}

static inline fuse_ino_t id_of(struct node *n)
{
	return n == &M.root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

void node_insert_locked(struct node *n);
int nfd(struct node *n);
void nfd_put(struct node *n, int fd);
void node_hold_fd(struct node *n);
void node_drop_fd(struct node *n);
struct file_handle *handle_of(int fd, int *mount_id);
int backing_file_name(const char *path, char *buf, size_t len, char *msg, size_t msglen);
bool mount_of_backing(const char *path, char *out, size_t outlen);
bool mount_containing(const char *path, char *out, size_t outlen);
int open_backing(void *ctx, const char *name, int flags);
int engine_open(struct node *n, wbc_file **out);
int engine_open_wfd(struct node *n, int wfd, wbc_file **out);
int stat_node(struct node *n, struct stat *st);
int stat_node_fd(struct node *n, int fd, struct stat *st);
void node_attr(struct node *n, struct stat *st);
void node_written_locked(struct node *n);
void node_changed(struct node *n);
int restore_mtime_locked(struct node *n);
void node_free(struct node *n);
int do_lookup(struct node *parent, const char *name, struct fuse_entry_param *e);
int enter_node(int fd, struct stat *st, struct fuse_entry_param *e);
void drop_if_unlinked_locked(struct node *n);
void pin_unlinked_locked(struct node *n);
void unpin_unlinked(struct node *n);
/* Around an unlink, or a rename over, of the regular file (dev, ino):
 * before_unlink returns a descriptor that keeps the inode until
 * after_unlink has pinned it until the kernel forgets the node (its
 * cached data dropped then; -1: none needed), which after_unlink closes
 * (the caller closes it when the unlink failed). */
int before_unlink(dev_t dev, ino_t ino);
void after_unlink(dev_t dev, ino_t ino, int keep);
/* A rename through the mount moved the inode (dev, ino): its ctime. */
void after_rename(dev_t dev, ino_t ino);
void forget_one(fuse_ino_t ino, uint64_t nlookup);
void node_revive_locked(struct node *n);
void ghost_stale(struct node *n);
#define GHOST_AGE_NS (60ull * 1000000000ull)

/* ops.c */
extern const struct fuse_lowlevel_ops mount_ops;

/* reply.c */
int replier_start(void);
void replier_stop(void);
void write_after(fuse_req_t req, wbc_file *h, size_t count,
		 const char *rest, size_t rest_len, uint64_t off, uint64_t pause_ns);

/* stats.c */
size_t stats_text(char *buf, size_t len);
/* The lost bytes and failed flushes mount_sync has reported (wbcache
 * umount was told). */
uint64_t mount_lost_reported(void);
uint64_t mount_flush_errors_reported(void);
int mount_sync(bool owner);   /* owner: the daemon's user or root asks */

/* conn.c */
void conn_hook(struct fuse_session *se);
/*
 * The kernel orders each request after the answers sent before it was
 * read: a node or a handle made for one request, answered, is used by
 * the next, in another thread, and freed by a later one.  ThreadSanitizer
 * sees that order through the descriptor when it saw /dev/fuse opened
 * (it orders a read after the writes to it), but not for a descriptor
 * the daemon was given (mount.fuse3's drop_privileges passes /dev/fd/N)
 * nor through io_uring: its builds are told at the two ends (conn.c's
 * reads and writes, uring.c's arrivals); the others do nothing.
 */
#ifdef __SANITIZE_THREAD__
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char conn_wire;
#define conn_received() __tsan_acquire(&conn_wire)
#define conn_sending() __tsan_release(&conn_wire)
#else
#define conn_received() ((void)0)
#define conn_sending() ((void)0)
#endif
bool conn_uring_offered(void);
void conn_uring_want(bool want);
bool conn_uring_granted(void);
size_t conn_uring_payload(void);

/* Whether the fuse module offers FUSE over io_uring to new mounts (its
 * enable_uring parameter is Y); false where the kernel has none. */
bool uring_enabled(void);
/* ops.c: close the directory handles the kernel never released (at exit,
 * after the session loop). */
void dirs_close_all(void);
/* uring.c: FUSE over io_uring.  uring_begin reads and answers INIT (call
 * it after conn_hook, before the session loop): 0 when requests come
 * through the rings, else -errno with the reason in @why (INIT answered
 * without io_uring, unless @required).  After the loop: uring_quiesce
 * (no more requests handled), replier_stop, uring_end. */
enum uring_mode { URING_OFF, URING_AUTO, URING_ON };
int uring_begin(struct fuse_session *se, unsigned helpers, bool required, char *why, size_t len);
void uring_quiesce(void);
void uring_end(void);
ssize_t uring_reply(const struct iovec *iov, int count);
bool uring_on_ring(void);
bool uring_later(void (*fn)(void *), void *arg);
void uring_stats(unsigned *queues, uint64_t *entries, uint64_t *requests, uint64_t *helped);
/* a ring failed for good and ended the mount (ring_wait_failed) */
bool uring_failed(void);

/* options.c */
#define TIMEOUT_DEFAULT 1.0
/* The mount's own -o options. */
struct mopts {
	double entry, attr, negative;   /* seconds the kernel keeps what it learnt */
	bool noflush;                   /* no FLUSH at close (errors: at fsync) */
	unsigned threads, idle_threads;
	bool clone_fd;
	bool no_readdirplus;            /* -o readdirplus=0 */
	enum uring_mode uring;          /* -o uring= */
	bool uring_given;               /* ... given, not the default */
};
void mount_usage(FILE *out);
/* Set the backing file of @n to @size (a remote backend's files: the
 * metadata's size follows the data's).  0 or -errno. */
int backing_set_size(struct node *n, uint64_t size);
int parse_opts(char *opts, struct wbc_config *cfg, char *devopts, size_t devlen,
	       char *fuseopts, size_t fuselen, enum dio_mode *dio, struct mopts *mo);
#endif
