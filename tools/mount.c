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
 * Data.  Regular files are opened direct_io (the kernel's page cache is
 * bypassed, data is cached once, in the engine).  The engine's device is an
 * opener device: its file for a node is named by a number unique to that
 * node (never reused in the process), and the engine opens the backing file
 * by reopening the node's O_PATH descriptor, so writeback reaches the very
 * inode that was written, never a file that later took its name.  A file
 * whose last link goes (unlink, or rename over it) has its cached data
 * dropped once no handle is open; a node the kernel forgets after data went
 * through it is written back first, so a new node for the same inode never
 * sees stale data.
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
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <assert.h>
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <syslog.h>
#include <unistd.h>

#include "wbcache.h"

#include "run.h"

#define STATS_XATTR "user.wbcache.stats"
/* Reading it on the root writes everything back (`wbcache umount`): a
 * getxattr needs only read permission, works on a read-only mount and
 * holds no lock of the root's inode while it waits. */
#define SYNC_XATTR "user.wbcache.sync"
/* Locks here are error-checking mutexes, so a *_locked function can assert
 * that its caller holds the lock (a relock by the owner fails at once).
 * Lock order: none nests.  M.lock (the node table), a node's lock (its
 * engine handles, size and times) and D.lock (the deferred writes) are
 * each taken with no other of them held; the engine's calls made under a
 * node's lock take only the engine's own locks, and the replier calls the
 * engine and libfuse with D.lock released. */
#ifdef NDEBUG
#define assert_held(m) ((void)(m))
#else
#define assert_held(m) assert(pthread_mutex_lock(m) == EDEADLK)
#endif
static void mutex_init_checked(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}
#define MAXU(a, b) ((a) > (b) ? (a) : (b))
#define MINU(a, b) ((a) < (b) ? (a) : (b))

struct node;
static void node_changed(struct node *n);

struct node {
	struct node *hnext;          /* mnt.lock */
	uint64_t nlookup;            /* mnt.lock */
	unsigned forgetting;         /* mnt.lock: forgets writing it back now */
	dev_t dev;
	ino_t ino;
	int fd;                      /* O_PATH, O_NOFOLLOW; -1 when fh is used */
	struct file_handle *fh;      /* handle mode: reopened per use (nfd) */
	uint64_t gen;                /* unique per node (fallback engine name) */
	bool is_reg;
	bool hashed;                 /* mnt.lock: in the table (not replaced as stale) */
	atomic_uint mode;            /* the last st_mode seen: kill_priv's quick test */
	atomic_int caps;             /* security.capability: -1 not looked, 0 none, 1 set */
	pthread_mutex_t lock;        /* the fields below */
	unsigned opens;
	atomic_uint kcache_opens;    /* of them, through the kernel's page cache */
	wbc_file *wf;                /* the node's engine handle while opens > 0 */
	bool wrote;                  /* data went through the engine */
	bool size_known;
	uint64_t size;               /* the engine's size of the data */
	uint64_t unwritten;          /* bytes not yet written back, at the last release */
	/* Times.  Writeback moves the backing file's mtime to when it ran;
	 * the file's own is the last write through the mount or the one set
	 * explicitly, reported while the node lives and put back on the
	 * backing file once its data is written (fsync, forget, unmount). */
	bool mtime_set;
	struct timespec mtime;
	struct timespec ctime;       /* last write through the mount */
};

enum dio_mode { DIO_AUTO, DIO_ALWAYS, DIO_NEVER };

struct mnt {
	char *backing;
	int root_fd;
	int mount_fd;                /* O_RDONLY on the backing root: open_by_handle_at */
	struct node root;
	pthread_mutex_t lock;        /* the table */
	struct node **hash;
	struct node *stale;          /* out of the table, not yet forgotten (hnext) */
	size_t hsize, n;
	wbc_cache *cache;
	wbc_dev *dev;
	atomic_ullong next_gen;
	bool as_root;                /* the daemon may chown */
	bool handles;                /* nodes keep file handles, not descriptors */
	bool foreground;
	struct fuse_session *se;
	enum dio_mode dio;           /* -o direct_io= */
};

static struct mnt M;
/* The node whose engine file the calling thread is opening (the opener
 * callback runs inside wbc_file_open, in the same thread). */
static __thread struct node *opening;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (M.foreground) {
		fprintf(stderr, "wbcache mount: ");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	} else {
		vsyslog(LOG_ERR, fmt, ap);
	}
	va_end(ap);
}

/* ------------------------------------------------------------------ */
/* nodes                                                                */

static size_t hkey(dev_t dev, ino_t ino, size_t size)
{
	uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4full);
	return (size_t)(h ^ (h >> 29)) & (size - 1);
}

static struct node *find_locked(dev_t dev, ino_t ino)
{
	assert_held(&M.lock);
	struct node *n = M.hash[hkey(dev, ino, M.hsize)];
	while (n && (n->dev != dev || n->ino != ino))
		n = n->hnext;
	return n;
}

static void insert_locked(struct node *n)
{
	assert_held(&M.lock);
	if (M.n >= M.hsize) {
		size_t ns = M.hsize * 2;
		struct node **h = calloc(ns, sizeof(*h));
		if (h) {
			for (size_t i = 0; i < M.hsize; i++)
				for (struct node *x = M.hash[i], *next; x; x = next) {
					next = x->hnext;
					size_t k = hkey(x->dev, x->ino, ns);
					x->hnext = h[k];
					h[k] = x;
				}
			free(M.hash);
			M.hash = h;
			M.hsize = ns;
		}
	}
	size_t k = hkey(n->dev, n->ino, M.hsize);
	n->hnext = M.hash[k];
	M.hash[k] = n;
	n->hashed = true;
	M.n++;
}

static void remove_locked(struct node *n)
{
	assert_held(&M.lock);
	struct node **pp = &M.hash[hkey(n->dev, n->ino, M.hsize)];
	while (*pp != n)
		pp = &(*pp)->hnext;
	*pp = n->hnext;
	M.n--;
}

static struct node *node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &M.root : (struct node *)(uintptr_t)ino;
}

static fuse_ino_t id_of(struct node *n)
{
	return n == &M.root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

/*
 * Descriptors.  With file handles (root, and a backing file system that
 * has them) a node keeps its handle, not a descriptor: nfd() opens an
 * O_PATH descriptor from it.  A directory's (or other non-file's) is
 * cached in a small per-thread ring keyed by the node's unique gen, so a
 * request that uses up to three nodes keeps them valid; a regular file's
 * is closed by nfd_put() when the request is done with it, so no
 * descriptor keeps a removed file's space (a thread's ring lives as long
 * as the thread, which may sleep for long).  The engine's descriptors
 * are bounded too (WBC_OPENER_REOPEN).  Then the mount needs no
 * descriptor per file.
 * Without handles every node keeps its descriptor (RLIMIT_NOFILE bounds
 * the files the kernel may hold at once).
 */
#define NFD_RING 8
/* least recently used first out: a request's own nodes (at most four)
 * are the most recent, so a miss never closes one it holds */
static __thread struct { uint64_t gen; int fd; uint64_t used; } nfd_ring[NFD_RING];
static __thread uint64_t nfd_clock;

static pthread_key_t nfd_key;   /* closes a thread's ring when it exits */
static pthread_once_t nfd_once = PTHREAD_ONCE_INIT;

static void nfd_ring_close(void *unused)
{
	(void)unused;
	for (unsigned i = 0; i < NFD_RING; i++)
		if (nfd_ring[i].fd > 0) {
			close(nfd_ring[i].fd);
			nfd_ring[i].fd = 0;
		}
}

static void nfd_key_create(void)
{
	pthread_key_create(&nfd_key, nfd_ring_close);
}

static int nfd(struct node *n)
{
	if (n->fd >= 0)
		return n->fd;
	if (n->is_reg)
		return open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
	pthread_once(&nfd_once, nfd_key_create);
	if (!pthread_getspecific(nfd_key))
		pthread_setspecific(nfd_key, &nfd_ring);
	unsigned k = 0;
	for (unsigned i = 0; i < NFD_RING; i++) {
		if (nfd_ring[i].gen == n->gen && nfd_ring[i].fd > 0) {
			nfd_ring[i].used = ++nfd_clock;
			return nfd_ring[i].fd;
		}
		if (nfd_ring[i].used < nfd_ring[k].used)
			k = i;
	}
	int fd = open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -1;
	nfd_ring[k].used = ++nfd_clock;
	if (nfd_ring[k].fd > 0)
		close(nfd_ring[k].fd);
	nfd_ring[k].gen = n->gen;
	nfd_ring[k].fd = fd;
	return fd;
}

/* Done with a descriptor nfd() gave. */
static void nfd_put(struct node *n, int fd)
{
	if (fd >= 0 && n->fd < 0 && n->is_reg)
		close(fd);
}

/* The engine's name for a node's data: in handle mode the handle itself in
 * hex (unique for the inode's lifetime: handles carry its generation), so
 * any node for the inode finds the same cached data and the engine can
 * reopen it from any thread; otherwise the node's gen. */
static void gen_name(const struct node *n, char *buf, size_t len)
{
	if (!n->fh) {
		snprintf(buf, len, "%" PRIu64, n->gen);
		return;
	}
	int k = snprintf(buf, len, "h%x-", (unsigned)n->fh->handle_type);
	for (unsigned i = 0; i < n->fh->handle_bytes && (size_t)k + 3 < len; i++)
		k += snprintf(buf + k, len - (size_t)k, "%02x", n->fh->f_handle[i]);
}

static struct file_handle *handle_of(int fd)
{
	struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
	int mount_id;
	if (!fh)
		return NULL;
	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", fh, &mount_id, AT_EMPTY_PATH) || fh->handle_bytes > 120) {
		free(fh);
		return NULL;
	}
	return fh;
}

static struct file_handle *handle_parse(const char *name)
{
	unsigned type;
	int pos;
	if (sscanf(name, "h%x-%n", &type, &pos) != 1)
		return NULL;
	size_t hex = strlen(name + pos);
	if (hex % 2 || hex / 2 > MAX_HANDLE_SZ)
		return NULL;
	struct file_handle *fh = malloc(sizeof(*fh) + hex / 2);
	if (!fh)
		return NULL;
	fh->handle_type = (int)type;
	fh->handle_bytes = (unsigned)(hex / 2);
	for (size_t i = 0; i < hex / 2; i++) {
		unsigned b;
		if (sscanf(name + pos + 2 * i, "%2x", &b) != 1) {
			free(fh);
			return NULL;
		}
		fh->f_handle[i] = (unsigned char)b;
	}
	return fh;
}

/* The opener of the engine's device: reopen the node's O_PATH descriptor
 * with @flags.  A file the daemon may only read is opened read-only (its
 * writes are refused by the kernel's permission check first). */
static int open_backing(void *ctx, const char *name, int flags)
{
	(void)ctx;
	int fd;
	if (M.handles) {
		/* any thread, any time: the name is the handle */
		struct file_handle *fh = handle_parse(name);
		if (!fh)
			return -ENOENT;
		fd = open_by_handle_at(M.mount_fd, fh, flags);
		if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS))
			fd = open_by_handle_at(M.mount_fd, fh, (flags & ~O_ACCMODE) | O_RDONLY);
		int e = errno;
		free(fh);
		return fd < 0 ? -e : fd;
	}
	struct node *n = opening;
	char want[32], path[64];
	if (!n)
		return -ENOENT;
	gen_name(n, want, sizeof(want));
	if (strcmp(want, name))
		return -ENOENT;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", n->fd);
	fd = open(path, flags);
	if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS))
		fd = open(path, (flags & ~O_ACCMODE) | O_RDONLY);
	return fd < 0 ? -errno : fd;
}

/* A new engine handle on the node's data. */
static int engine_open(struct node *n, wbc_file **out)
{
	char name[256];
	gen_name(n, name, sizeof(name));
	opening = n;
	int err = wbc_file_open(M.dev, name, WBC_O_CREAT, out);
	opening = NULL;
	return err;
}

/* The attributes of a node: the backing inode's, with the size, times and
 * blocks of data still in the cache.  Blocks: the backing file's plus what
 * is not yet written back (a sparse file stays sparse). */
static int stat_node(struct node *n, struct stat *st)
{
	int fd = nfd(n);
	if (fd < 0 || fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		int err = -errno;
		nfd_put(n, fd);
		return err;
	}
	nfd_put(n, fd);
	atomic_store_explicit(&n->mode, st->st_mode, memory_order_relaxed);
	if (!S_ISREG(st->st_mode))
		return 0;
	uint64_t unwritten = 0;
	pthread_mutex_lock(&n->lock);
	struct wbc_file_info fi;
	if (n->wf && !wbc_file_info(n->wf, &fi)) {
		st->st_size = (off_t)fi.size;
		unwritten = fi.unwritten_bytes;
	} else if (n->size_known) {
		st->st_size = (off_t)n->size;
		unwritten = n->unwritten;
	}
	if (n->mtime_set)
		st->st_mtim = n->mtime;
	/* writeback moves the backing ctime too: while data went through
	 * the engine, the file's is the last change made through the mount
	 * (tar and rsync compare it) */
	if (n->wrote && (n->ctime.tv_sec || n->ctime.tv_nsec))
		st->st_ctim = n->ctime;
	pthread_mutex_unlock(&n->lock);
	st->st_blocks += (blkcnt_t)((unwritten + 511) / 512);
	return 0;
}

/* Data of the node changed through the engine now (write, truncate,
 * fallocate): its mtime and ctime are now. */
static void node_written_locked(struct node *n)
{
	assert_held(&n->lock);
	n->wrote = true;
	clock_gettime(CLOCK_REALTIME, &n->mtime);
	n->ctime = n->mtime;
	n->mtime_set = true;
}

/* A change of the node's inode through the mount (its ctime). */
static void node_changed(struct node *n)
{
	if (!n->is_reg)
		return;
	pthread_mutex_lock(&n->lock);
	clock_gettime(CLOCK_REALTIME, &n->ctime);
	pthread_mutex_unlock(&n->lock);
}

/* Put the file's own mtime back on the backing file once its data is
 * written: caller holds n->lock. */
static void restore_mtime_locked(struct node *n)
{
	assert_held(&n->lock);
	if (!n->mtime_set)
		return;
	struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, n->mtime };
	int fd = nfd(n);
	if (fd < 0 || utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		logmsg("setting the mtime of a written-back file failed: %s", strerror(errno));
	nfd_put(n, fd);
}

/* Is @n, found by the inode number of the inode a lookup just found
 * (handle @fh in handle mode), another inode, gone, whose number was
 * reused?  Handles carry the inode's generation; without them, a node
 * whose inode has no link left is not the one a name led to. */
static bool node_stale(struct node *n, const struct file_handle *fh)
{
	if (n->fh)
		return fh && (fh->handle_type != n->fh->handle_type ||
			      fh->handle_bytes != n->fh->handle_bytes ||
			      memcmp(fh->f_handle, n->fh->f_handle, fh->handle_bytes));
	struct stat st;
	return n->fd >= 0 && !fstat(n->fd, &st) && !st.st_nlink;
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup);

/* A node out of the table and every list. */
static void node_free(struct node *n)
{
	if (n->fd >= 0)
		close(n->fd);
	free(n->fh);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* Look @name up in @parent: a node with one more lookup, and its attrs. */
static int do_lookup(struct node *parent, const char *name, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	if (parent == &M.root && !strcmp(name, "..")) {
		name = ".";   /* the root's parent is the root: nothing above it */
	}
	int pfd = nfd(parent);
	int fd = pfd < 0 ? -1 : openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		int err = -errno;
		close(fd);
		return err;
	}
	struct file_handle *fh = M.handles ? handle_of(fd) : NULL;
	pthread_mutex_lock(&M.lock);
	struct node *n = find_locked(st.st_dev, st.st_ino);
	if (n && n != &M.root && node_stale(n, fh)) {
		/* the inode number was reused by a new inode (the old one is
		 * gone): the old node lives on until the kernel forgets it,
		 * out of the table */
		remove_locked(n);
		n->hashed = false;
		n->hnext = M.stale;
		M.stale = n;
		n = NULL;
	}
	if (n) {
		n->nlookup++;
		pthread_mutex_unlock(&M.lock);
		close(fd);
		free(fh);
	} else {
		n = calloc(1, sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&M.lock);
			close(fd);
			free(fh);
			return -ENOMEM;
		}
		n->dev = st.st_dev;
		n->ino = st.st_ino;
		n->fd = fd;
		if ((n->fh = fh)) {
			close(fd);         /* reopened from the handle when used */
			n->fd = -1;
		}
		n->nlookup = 1;
		n->is_reg = S_ISREG(st.st_mode);
		atomic_init(&n->mode, st.st_mode);
		atomic_init(&n->caps, -1);
		n->gen = atomic_fetch_add(&M.next_gen, 1);
		mutex_init_checked(&n->lock);
		insert_locked(n);
		pthread_mutex_unlock(&M.lock);
	}
	int err = stat_node(n, &e->attr);
	if (err) {
		forget_one(id_of(n), 1);   /* the kernel is told nothing */
		return err;
	}
	e->ino = id_of(n);
	e->attr_timeout = 1.0;
	e->entry_timeout = 1.0;
	return 0;
}

/* Drop the cached data of a node whose inode has no link left (it can
 * never be read again once closed): caller holds n->lock, opens == 0. */
static void drop_if_unlinked_locked(struct node *n)
{
	assert_held(&n->lock);
	struct stat st;
	if (!n->is_reg || !n->wrote)
		return;
	int fd = nfd(n);
	/* gone: a handle that no longer opens (ESTALE), or no link left; any
	 * other failure (EMFILE, ENOMEM) keeps the data */
	bool gone = fd < 0 ? errno == ESTALE || errno == ENOENT :
		    !fstatat(fd, "", &st, AT_EMPTY_PATH) && !st.st_nlink;
	nfd_put(n, fd);
	if (!gone)
		return;
	wbc_file *h;
	if (engine_open(n, &h) == 0) {
		wbc_truncate(h, 0);          /* drops dirty pages: never written */
		wbc_file_close(h);
	}
	n->wrote = false;
	n->size_known = false;
	n->mtime_set = false;
}

/* After an unlink or a rename that may have removed the last link of the
 * inode (dev, ino). */
static void after_unlink(dev_t dev, ino_t ino)
{
	pthread_mutex_lock(&M.lock);
	struct node *n = find_locked(dev, ino);
	pthread_mutex_unlock(&M.lock);
	/* n stays valid: the kernel holds a lookup on a name it just removed
	 * until this request is answered */
	if (!n)
		return;
	pthread_mutex_lock(&n->lock);
	if (!n->opens)
		drop_if_unlinked_locked(n);
	pthread_mutex_unlock(&n->lock);
}

/*
 * The kernel dropped its last lookup of a node.  The node stays in the
 * table while its data is dropped (unlinked) or written back, so a lookup
 * meanwhile revives it instead of making a second node that would read the
 * backing file's stale size; it is freed by the last forget that finds it
 * unused.
 */
static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = node_of(ino);
	pthread_mutex_lock(&M.lock);
	if (n == &M.root || (n->nlookup -= nlookup) > 0) {
		pthread_mutex_unlock(&M.lock);
		return;
	}
	n->forgetting++;
	pthread_mutex_unlock(&M.lock);
	pthread_mutex_lock(&n->lock);
	drop_if_unlinked_locked(n);
	if (n->wrote) {
		wbc_file *h;
		if (engine_open(n, &h) == 0) {
			int err = wbc_fsync(h);
			if (err)
				logmsg("writeback of a forgotten file failed: %s", wbc_strerror(err));
			else {
				n->unwritten = 0;
				restore_mtime_locked(n);
			}
			wbc_file_close(h);
		}
	}
	pthread_mutex_unlock(&n->lock);
	pthread_mutex_lock(&M.lock);
	bool unused = !--n->forgetting && !n->nlookup;
	if (unused && n->hashed) {
		remove_locked(n);
	} else if (unused) {
		struct node **pp = &M.stale;   /* rare: a reused inode number */
		while (*pp != n)
			pp = &(*pp)->hnext;
		*pp = n->hnext;
	}
	pthread_mutex_unlock(&M.lock);
	if (unused)
		node_free(n);
}

/* ------------------------------------------------------------------ */
/* operations                                                           */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = 1u << 20;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;   /* data is cached once, here */
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int err = do_lookup(node_of(parent), name, &e);
	if (err == -ENOENT) {
		/* a negative entry the kernel may cache: every change of the
		 * namespace comes through this mount */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = 1.0;
		fuse_reply_entry(req, &e);
	} else if (err) {
		fuse_reply_err(req, -err);
	} else {
		fuse_reply_entry(req, &e);
	}
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++)
		forget_one(f[i].ino, f[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	int err = stat_node(node_of(ino), &st);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, 1.0);
}


/*
 * The kernel's rule for set-user-ID and set-group-ID files (it leaves the
 * work to the file system, FUSE_CAP_HANDLE_KILLPRIV): a write or truncate
 * by a caller without CAP_FSETID clears S_ISUID, and S_ISGID where group
 * execute is set (without it, S_ISGID marks mandatory locking and stays).
 * A file capability (the security.capability attribute) goes too, as
 * the kernel's file_remove_privs removes it.  The caller's uid 0 stands
 * for the capability.  The node's last seen mode, and whether it has a
 * file capability (looked up once), make the common case two loads.
 */
#define CAPS_XATTR "security.capability"
static void kill_priv(fuse_req_t req, struct node *n)
{
	int caps = atomic_load_explicit(&n->caps, memory_order_relaxed);
	if (!(atomic_load_explicit(&n->mode, memory_order_relaxed) & (S_ISUID | S_ISGID)) &&
	    !caps)
		return;
	if (fuse_req_ctx(req)->uid == 0)
		return;
	struct stat st;
	char path[64];
	int fd = nfd(n);
	if (fd >= 0 && caps) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (getxattr(path, CAPS_XATTR, NULL, 0) >= 0 && removexattr(path, CAPS_XATTR))
			logmsg("removing a file capability failed: %s", strerror(errno));
		atomic_store_explicit(&n->caps, 0, memory_order_relaxed);
	}
	if (fd >= 0 && (atomic_load_explicit(&n->mode, memory_order_relaxed) & (S_ISUID | S_ISGID)) &&
	    !fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		mode_t kill = S_ISUID | ((st.st_mode & S_IXGRP) ? S_ISGID : 0);
		if (st.st_mode & kill) {
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			if (chmod(path, st.st_mode & 07777 & ~kill))
				logmsg("clearing set-id bits failed: %s", strerror(errno));
			else {
				atomic_store_explicit(&n->mode, st.st_mode & ~kill,
						      memory_order_relaxed);
				/* the kernel's cached attributes still show them */
				fuse_lowlevel_notify_inval_inode(M.se, id_of(n), -1, 0);
			}
		}
	}
	nfd_put(n, fd);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	char path[64];
	int err = 0;
	struct stat st;
	int fd = nfd(n);
	if (fd < 0 || fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		fuse_reply_err(req, errno);
		nfd_put(n, fd);
		return;
	}
	bool lnk = S_ISLNK(st.st_mode);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (!err && (to_set & FUSE_SET_ATTR_MODE)) {
		if (lnk)
			err = -EOPNOTSUPP;
		else if (chmod(path, attr->st_mode & 07777))
			err = -errno;
	}
	if (!err && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
		uid_t u = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t g = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
		if (fchownat(fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
			err = -errno;
	}
	if (!err && (to_set & FUSE_SET_ATTR_SIZE)) {
		if (!S_ISREG(st.st_mode)) {
			err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		} else {
			wbc_file *h = fi ? (wbc_file *)(uintptr_t)fi->fh : NULL;
			bool tmp = false;
			pthread_mutex_lock(&n->lock);
			if (!h && !(err = engine_open(n, &h)))
				tmp = true;
			if (!err)
				err = wbc_truncate(h, (uint64_t)attr->st_size);
			if (!err)
				kill_priv(req, n);
			if (!err) {
				n->size_known = true;
				n->size = (uint64_t)attr->st_size;
				node_written_locked(n);
			}
			if (tmp)
				wbc_file_close(h);
			pthread_mutex_unlock(&n->lock);
		}
	}
	if (!err && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			tv[0].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_ATIME)
			tv[0] = attr->st_atim;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			tv[1].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_MTIME)
			tv[1] = attr->st_mtim;
		if (utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
			err = -errno;
		} else if ((to_set & FUSE_SET_ATTR_MTIME) && !lnk) {
			/* the file's mtime from now on, also after writeback */
			struct stat now;
			pthread_mutex_lock(&n->lock);
			if (n->wrote && !fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
				n->mtime = now.st_mtim;
				n->mtime_set = true;
			}
			pthread_mutex_unlock(&n->lock);
		}
	}
	nfd_put(n, fd);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	node_changed(n);
	if ((err = stat_node(n, &st)))
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, 1.0);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];
	int fd = nfd(node_of(ino));
	ssize_t r = fd < 0 ? -1 : readlinkat(fd, "", buf, sizeof(buf) - 1);
	if (r < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	buf[r] = '\0';
	fuse_reply_readlink(req, buf);
}

/* Answer with the entry @name of @parent (one more lookup). */
static void reply_entry_of(fuse_req_t req, struct node *parent, const char *name)
{
	struct fuse_entry_param e;
	int err = do_lookup(parent, name, &e);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, &e);
}

/* Give a new entry the requesting user's ownership (the daemon runs as
 * root; otherwise the backing file system made it the daemon's).  In a
 * set-group-ID directory the group is the directory's, as the backing
 * file system already made it (and a new directory kept the bit). */
static void own_new(fuse_req_t req, struct node *parent, const char *name)
{
	if (!M.as_root)
		return;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat pst;
	int fd = nfd(parent);
	gid_t gid = ctx->gid;
	if (fd >= 0 && !fstatat(fd, "", &pst, AT_EMPTY_PATH) && (pst.st_mode & S_ISGID))
		gid = (gid_t)-1;
	if (fd < 0 || fchownat(fd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW))
		logmsg("chown of a new entry failed: %s", strerror(errno));
}

static void reply_new(fuse_req_t req, struct node *parent, const char *name, int rc)
{
	if (rc) {
		fuse_reply_err(req, errno);
		return;
	}
	own_new(req, parent, name);
	reply_entry_of(req, parent, name);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct node *p = node_of(parent);
	int fd = nfd(p);
	reply_new(req, p, name, fd < 0 ? -1 : mknodat(fd, name, mode, rdev));
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *p = node_of(parent);
	int fd = nfd(p);
	reply_new(req, p, name, fd < 0 ? -1 : mkdirat(fd, name, mode));
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent);
	int fd = nfd(p);
	reply_new(req, p, name, fd < 0 ? -1 : symlinkat(link, fd, name));
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct node *n = node_of(ino), *p = node_of(newparent);
	int nf = nfd(n), pf = nf < 0 ? -1 : nfd(p);
	int err = nf < 0 || pf < 0 || linkat(nf, "", pf, newname, AT_EMPTY_PATH) ? errno : 0;
	nfd_put(n, nf);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	node_changed(n);
	reply_entry_of(req, p, newname);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent);
	struct stat st;
	int fd = nfd(p);
	if (fd < 0 || fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW)) {
		fuse_reply_err(req, errno);
		return;
	}
	if (unlinkat(fd, name, 0)) {
		fuse_reply_err(req, errno);
		return;
	}
	if (S_ISREG(st.st_mode))
		after_unlink(st.st_dev, st.st_ino);
	fuse_reply_err(req, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int fd = nfd(node_of(parent));
	fuse_reply_err(req, fd < 0 || unlinkat(fd, name, AT_REMOVEDIR) ? errno : 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct node *p = node_of(parent), *np = node_of(newparent);
	struct stat victim;
	int pf = nfd(p), npf = nfd(np);
	if (pf < 0 || npf < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	bool had = !(flags & RENAME_EXCHANGE) &&
		   !fstatat(npf, newname, &victim, AT_SYMLINK_NOFOLLOW) && S_ISREG(victim.st_mode);
	if (renameat2(pf, name, npf, newname, flags)) {
		fuse_reply_err(req, errno);
		return;
	}
	if (had)
		after_unlink(victim.st_dev, victim.st_ino);
	fuse_reply_err(req, 0);
}

/* ---- files ---- */

/*
 * Deferred writes.  Where the throttle pauses a writer, the worker that
 * copied its data does not sleep: wbc_pwrite_nowait stops at the pause,
 * the rest of the write (copied) and its reply are queued, due after the
 * pause, and the replier thread writes the rest then, pausing again as the
 * throttle says, and answers once all of it is in.  The writer waits in
 * the kernel meanwhile, as a throttled writer of a local file system waits
 * in balance_dirty_pages, and the workers stay free for every other
 * request (lookups, stat, readdir, fsync, other devices' writers), however
 * many writers are throttled.  A writer interrupted meanwhile (any signal,
 * a SIGKILL too) is answered at once with what is in (a short write).
 * The queue is sorted by due time; its lock (D.lock) is taken with no
 * other lock held, and libfuse may call the interrupt callback with its
 * request's own lock held.
 */
struct deferred {
	fuse_req_t req;
	size_t count;                /* bytes in so far */
	uint64_t due;                /* CLOCK_MONOTONIC ns */
	bool interrupted;
	wbc_file *h;                 /* the rest: where it goes */
	uint64_t off;
	size_t rest_len;
	char *rest;                  /* into buf */
	struct deferred *next;
	char buf[];
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;         /* CLOCK_MONOTONIC */
	struct deferred *head;       /* by due time */
	bool stop;
	bool started;
	pthread_t thread;
	uint64_t queued, interrupted;
} D;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void deferred_queue_locked(struct deferred *d)
{
	assert_held(&D.lock);
	struct deferred **pp = &D.head;
	while (*pp && (*pp)->due <= d->due)
		pp = &(*pp)->next;
	d->next = *pp;
	*pp = d;
	if (D.head == d)
		pthread_cond_signal(&D.cond);
}

/* Write what is left of @d once its pause is over; true when it is
 * queued again (paused again). */
static bool deferred_continue(struct deferred *d, bool stopping)
{
	if (!d->rest_len || d->interrupted || stopping)
		return false;
	uint64_t pause = 0;
	ssize_t r = wbc_pwrite_nowait(d->h, d->rest, d->rest_len, d->off, &pause);
	if (r < 0) {
		if (!d->count) {
			fuse_reply_err(d->req, (int)-r);
			d->req = NULL;
		}
		return false;
	}
	d->count += (size_t)r;
	d->rest += r;
	d->rest_len -= (size_t)r;
	d->off += (uint64_t)r;
	if (!d->rest_len || !pause)
		return false;     /* all in (or short: a dead device) */
	d->due = mono_ns() + pause;
	return true;
}

static void *replier_main(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "wbc-reply");
	pthread_mutex_lock(&D.lock);
	for (;;) {
		struct deferred *d = D.head;
		if (d && (D.stop || d->due <= mono_ns())) {
			D.head = d->next;
			bool stopping = D.stop;
			pthread_mutex_unlock(&D.lock);
			bool again = deferred_continue(d, stopping);
			pthread_mutex_lock(&D.lock);
			/* an interrupt while it was off the queue found nothing */
			if (again && d->req && fuse_req_interrupted(d->req)) {
				d->interrupted = true;
				d->due = 0;
			}
			if (again) {
				deferred_queue_locked(d);
				continue;
			}
			pthread_mutex_unlock(&D.lock);
			if (d->req && d->count)
				fuse_reply_write(d->req, d->count);
			else if (d->req)
				fuse_reply_err(d->req, EINTR);
			free(d);
			pthread_mutex_lock(&D.lock);
			continue;
		}
		if (D.stop)
			break;
		if (!d) {
			pthread_cond_wait(&D.cond, &D.lock);
		} else {
			struct timespec ts = { .tv_sec = (time_t)(d->due / 1000000000ull),
					       .tv_nsec = (long)(d->due % 1000000000ull) };
			pthread_cond_timedwait(&D.cond, &D.lock, &ts);
		}
	}
	pthread_mutex_unlock(&D.lock);
	return NULL;
}

/* libfuse: the writer of @req was interrupted; answer it now.  @req is
 * alive during the call; if it is no longer queued it was answered. */
static void deferred_interrupt(fuse_req_t req, void *unused)
{
	(void)unused;
	pthread_mutex_lock(&D.lock);
	for (struct deferred **pp = &D.head; *pp; pp = &(*pp)->next) {
		if ((*pp)->req == req) {
			struct deferred *d = *pp;
			*pp = d->next;
			d->due = 0;           /* to the front */
			d->interrupted = true;
			d->next = D.head;
			D.head = d;
			D.interrupted++;
			pthread_cond_signal(&D.cond);
			break;
		}
	}
	pthread_mutex_unlock(&D.lock);
}

static int replier_start(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&D.cond, &ca);
	pthread_condattr_destroy(&ca);
	mutex_init_checked(&D.lock);
	int err = pthread_create(&D.thread, NULL, replier_main, NULL);
	D.started = !err;
	return -err;
}

/* Answer everything queued now, and end the thread. */
static void replier_stop(void)
{
	if (!D.started)
		return;
	pthread_mutex_lock(&D.lock);
	D.stop = true;
	pthread_cond_signal(&D.cond);
	pthread_mutex_unlock(&D.lock);
	pthread_join(D.thread, NULL);
	D.started = false;
}

/*
 * Finish a write of which @count bytes are in and @rest_len bytes at
 * @rest (to go at @off) are not, after the throttle's pause @pause_ns:
 * answered now if nothing is owed, else queued for the replier.
 */
static void write_after(fuse_req_t req, wbc_file *h, size_t count,
			const char *rest, size_t rest_len, uint64_t off, uint64_t pause_ns)
{
	struct deferred *d = pause_ns && D.started ? malloc(sizeof(*d) + rest_len) : NULL;
	if (!d) {
		if (pause_ns) {   /* no queue: the worker waits and writes the rest */
			struct timespec ts = { .tv_sec = (time_t)(pause_ns / 1000000000ull),
					       .tv_nsec = (long)(pause_ns % 1000000000ull) };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
			ssize_t r = rest_len ? wbc_pwrite(h, rest, rest_len, off) : 0;
			if (r < 0 && !count) {
				fuse_reply_err(req, (int)-r);
				return;
			}
			count += r > 0 ? (size_t)r : 0;
		}
		fuse_reply_write(req, count);
		return;
	}
	d->req = req;
	d->count = count;
	d->due = mono_ns() + pause_ns;
	d->interrupted = false;
	d->h = h;
	d->off = off;
	d->rest = d->buf;
	d->rest_len = rest_len;
	memcpy(d->buf, rest, rest_len);
	fuse_req_interrupt_func(req, deferred_interrupt, NULL);
	pthread_mutex_lock(&D.lock);
	if (fuse_req_interrupted(req)) {
		d->due = 0;
		d->interrupted = true;
	}
	deferred_queue_locked(d);
	D.queued++;
	pthread_mutex_unlock(&D.lock);
}


/*
 * Which opens bypass the kernel's page cache (direct_io).  Data is then
 * cached once, in the engine; but the kernel refuses a shared mapping
 * (mmap MAP_SHARED: databases, fio's mmap engine) of such a file, and
 * libfuse 3.14 cannot ask for FUSE_DIRECT_IO_ALLOW_MMAP.  By default
 * (direct_io=auto) a write-only open, which cannot be mapped, is direct —
 * streaming writers, cp, tar, fs_mark — and an open that can read goes
 * through the kernel's page cache, written through to the engine at each
 * write (no FUSE writeback cache: the engine's throttle stays the only
 * one), so mappings work.  The two stay coherent: a direct write to a
 * file that also has cached opens invalidates the kernel's pages it
 * covers, and an open never keeps the kernel's pages of a previous one.
 */
static bool open_direct(const struct fuse_file_info *fi)
{
	return M.dio == DIO_ALWAYS || (M.dio == DIO_AUTO && (fi->flags & O_ACCMODE) == O_WRONLY);
}

static int open_common(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	wbc_file *h;
	pthread_mutex_lock(&n->lock);
	int err = engine_open(n, &h);
	if (!err && !n->opens) {
		err = engine_open(n, &n->wf);
		if (err)
			wbc_file_close(h);
	}
	if (!err && (fi->flags & O_TRUNC)) {
		/* atomic O_TRUNC: the kernel sends no setattr before */
		err = wbc_truncate(h, 0);
		if (err) {
			wbc_file_close(h);
			if (!n->opens) {
				wbc_file_close(n->wf);
				n->wf = NULL;
			}
		} else {
			node_written_locked(n);
		}
	}
	bool direct = open_direct(fi);
	if (!err) {
		n->opens++;
		if (!direct)
			atomic_fetch_add(&n->kcache_opens, 1);
	}
	pthread_mutex_unlock(&n->lock);
	if (err)
		return err;
	if (fi->flags & O_TRUNC)
		kill_priv(req, n);
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = direct;
	fi->keep_cache = 0;
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	if (!n->is_reg) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int err = open_common(req, n, fi);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct node *p = node_of(parent);
	int pf = nfd(p);
	int fd = pf < 0 ? -1 : openat(pf, name, (fi->flags & (O_EXCL | O_TRUNC)) | O_CREAT |
				      O_RDONLY | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	close(fd);
	own_new(req, p, name);
	struct fuse_entry_param e;
	int err = do_lookup(p, name, &e);
	if (!err && !node_of(e.ino)->is_reg)
		err = -EISDIR;
	if (!err && !(err = open_common(req, node_of(e.ino), fi))) {
		fuse_reply_create(req, &e, fi);
		return;
	}
	if (e.ino)
		forget_one(e.ino, 1);   /* the kernel is told of no entry */
	fuse_reply_err(req, -err);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	char *buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ssize_t r = wbc_pread((wbc_file *)(uintptr_t)fi->fh, buf, size, (uint64_t)off);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
	free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	wbc_file *h = (wbc_file *)(uintptr_t)fi->fh;
	kill_priv(req, n);
	uint64_t pause = 0;
	/* O_DSYNC / O_SYNC opens and RWF_DSYNC / RWF_SYNC writes: the kernel
	 * passes them in the write's flags; the data is on the backend (and
	 * the backend flushed) before the write is acknowledged.  They wait
	 * for their own writeback anyway: their worker waits in the throttle
	 * too. */
	bool dsync = fi->flags & O_DSYNC;
	/* A direct write to a file that also has opens through the kernel's
	 * page cache invalidates the kernel's pages it covers once all of it
	 * is in: it is written here, not by the replier, which must never
	 * wait for the kernel (invalidating a dirty page sends a write that
	 * may itself be paused, for the replier to finish). */
	bool direct = !fi->writepage && open_direct(fi);
	bool inval = direct && atomic_load_explicit(&n->kcache_opens, memory_order_relaxed);
	ssize_t r = dsync || inval ? wbc_pwrite(h, buf, size, (uint64_t)off) :
				     wbc_pwrite_nowait(h, buf, size, (uint64_t)off, &pause);
	if (r > 0 && dsync) {
		int err = wbc_fsync_range(h, (uint64_t)off, (uint64_t)r,
					  (fi->flags & O_SYNC) != O_SYNC);
		if (err)
			r = err;
	}
	if (r < 0) {
		fuse_reply_err(req, (int)-r);
		return;
	}
	pthread_mutex_lock(&n->lock);
	node_written_locked(n);
	pthread_mutex_unlock(&n->lock);
	if (inval && r)
		fuse_lowlevel_notify_inval_inode(M.se, ino, off, (off_t)r);
	write_after(req, h, (size_t)r, buf + r, pause ? size - (size_t)r : 0,
		    (uint64_t)off + (uint64_t)r, pause);
}

/*
 * fallocate: space is reserved in the backing file (KEEP_SIZE there: the
 * size is the engine's), and the engine's size grows where the mode asks;
 * a punched or zeroed range is written as zeros through the engine, so
 * the cache, the size and the backing file agree however the data is
 * cached.  Other modes: EOPNOTSUPP, as a file system without them.
 */
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	wbc_file *h = (wbc_file *)(uintptr_t)fi->fh;
	const int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
	if ((mode & ~known) || off < 0 || len <= 0 || off > INT64_MAX - len) {
		fuse_reply_err(req, (mode & ~known) ? EOPNOTSUPP : EINVAL);
		return;
	}
	struct wbc_file_info info;
	int err = wbc_file_info(h, &info);
	uint64_t end = (uint64_t)off + (uint64_t)len;
	if (!err && !(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))) {
		char path[64];
		int fd = nfd(n), wfd = -1;
		if (fd >= 0) {
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			wfd = open(path, O_WRONLY | O_CLOEXEC);
		}
		if (wfd < 0 || fallocate(wfd, FALLOC_FL_KEEP_SIZE, off, len))
			err = -errno;
		if (wfd >= 0)
			close(wfd);
		nfd_put(n, fd);
	} else if (!err) {
		/* zeros over the range, within the size for a punch or KEEP_SIZE */
		static const char zeros[1 << 16];
		uint64_t stop = (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) ?
				MINU(end, info.size) : end;
		for (uint64_t pos = (uint64_t)off; !err && pos < stop;) {
			size_t chunk = (size_t)MINU(stop - pos, sizeof(zeros));
			ssize_t r = wbc_pwrite(h, zeros, chunk, pos);
			err = r < 0 ? (int)r : 0;
			pos += chunk;
		}
	}
	if (!err && !(mode & FALLOC_FL_KEEP_SIZE) && end > info.size)
		err = wbc_truncate(h, end);
	if (!err) {
		pthread_mutex_lock(&n->lock);
		node_written_locked(n);
		pthread_mutex_unlock(&n->lock);
		kill_priv(req, n);
	}
	fuse_reply_err(req, -err);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	int err = wbc_file_check_error((wbc_file *)(uintptr_t)fi->fh);
	fuse_reply_err(req, -err);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	wbc_file *h = (wbc_file *)(uintptr_t)fi->fh;
	int err = datasync ? wbc_fdatasync(h) : wbc_fsync(h);
	if (!err && !datasync) {
		struct node *n = node_of(ino);
		pthread_mutex_lock(&n->lock);
		restore_mtime_locked(n);
		pthread_mutex_unlock(&n->lock);
	}
	fuse_reply_err(req, -err);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	wbc_file_close((wbc_file *)(uintptr_t)fi->fh);
	pthread_mutex_lock(&n->lock);
	if (!open_direct(fi))
		atomic_fetch_sub(&n->kcache_opens, 1);
	if (!--n->opens) {
		struct wbc_file_info info;
		if (n->wrote && !wbc_file_info(n->wf, &info)) {
			n->size_known = true;
			n->size = info.size;
			n->unwritten = info.unwritten_bytes;
		}
		wbc_file_close(n->wf);
		n->wf = NULL;
		drop_if_unlinked_locked(n);
	}
	pthread_mutex_unlock(&n->lock);
	fuse_reply_err(req, 0);
}

/* ---- directories ---- */

struct dirh {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
};

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dirh *d = calloc(1, sizeof(*d));
	int nf = nfd(node_of(ino));
	int fd = nf < 0 ? -1 : openat(nf, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!d || fd < 0 || !(d->dp = fdopendir(fd))) {
		int e = d ? errno : ENOMEM;
		if (fd >= 0)
			close(fd);
		free(d);
		fuse_reply_err(req, e);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)ino;
	struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
	char *buf = calloc(1, size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (off != d->offset) {
		seekdir(d->dp, off);
		d->entry = NULL;
		d->offset = off;
	}
	size_t used = 0;
	int err = 0;
	for (;;) {
		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				err = errno;
				break;
			}
		}
		struct stat st = { .st_ino = d->entry->d_ino,
				   .st_mode = (mode_t)d->entry->d_type << 12 };
		size_t n = fuse_add_direntry(req, buf + used, size - used, d->entry->d_name, &st,
					     d->entry->d_off);
		if (n > size - used)
			break;
		used += n;
		d->offset = d->entry->d_off;
		d->entry = NULL;
	}
	if (err && !used)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
	closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
	int fd = dirfd(d->dp);
	fuse_reply_err(req, (datasync ? fdatasync(fd) : fsync(fd)) ? errno : 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	if (fstatvfs(M.root_fd, &sv))
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
}

/* ---- extended attributes (not on symlinks: the path would follow) ---- */

/* A path naming the node's inode for the *xattr() calls: returns its
 * descriptor (give it back with nfd_put()) or -errno. */
static int xattr_path(struct node *n, char *path, size_t len)
{
	struct stat st;
	int fd = nfd(n);
	if (fd < 0 || fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		int err = -errno;
		nfd_put(n, fd);
		return err;
	}
	if (S_ISLNK(st.st_mode)) {
		nfd_put(n, fd);
		return -EPERM;
	}
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
}

static size_t stats_text(char *buf, size_t len);

/* Write back and flush everything (`wbcache umount`): 0 once every byte
 * is on the backing store; the error while data stays at risk, or when
 * data was dropped (on_error=drop) since the previous such sync.  An error
 * that a later write made good is not one: each open file's fsync has
 * reported it already. */
static int mount_sync(void)
{
	static _Atomic uint64_t lost_seen;
	int err = wbc_cache_sync(M.cache);
	struct wbc_stats s;
	wbc_stats(M.cache, &s);
	uint64_t seen = atomic_exchange(&lost_seen, s.lost_bytes);
	if (!s.at_risk_bytes && s.lost_bytes == seen)
		return 0;
	return err ? err : -EIO;
}

static void reply_xattr_value(fuse_req_t req, size_t size, const char *val, ssize_t n)
{
	if (n < 0)
		fuse_reply_err(req, errno);
	else if (!size)
		fuse_reply_xattr(req, (size_t)n);
	else if ((size_t)n > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)n);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct node *n = node_of(ino);
	char path[64];
	if (n == &M.root && !strcmp(name, STATS_XATTR)) {
		char text[4096];
		size_t len = stats_text(text, sizeof(text));
		reply_xattr_value(req, size, text, (ssize_t)len);
		return;
	}
	if (n == &M.root && !strcmp(name, SYNC_XATTR)) {
		int err = mount_sync();
		if (err)
			fuse_reply_err(req, -err);
		else
			reply_xattr_value(req, size, "0", 1);
		return;
	}
	/* the kernel asks for the file capability before every write through
	 * its page cache (to know whether the write must remove it): known
	 * absent, answered without a look */
	bool caps = n->is_reg && !strcmp(name, CAPS_XATTR);
	if (caps && atomic_load_explicit(&n->caps, memory_order_relaxed) == 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	char *val = size ? malloc(size) : NULL;
	if (size && !val) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int fd = xattr_path(n, path, sizeof(path));
	if (fd < 0) {
		fuse_reply_err(req, fd == -EPERM ? ENODATA : -fd);
	} else {
		ssize_t r = getxattr(path, name, val, size);
		int e = errno;
		nfd_put(n, fd);
		if (caps && (r >= 0 || e == ENODATA))
			atomic_store_explicit(&n->caps, r >= 0, memory_order_relaxed);
		errno = e;
		reply_xattr_value(req, size, val, r);
	}
	free(val);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct node *n = node_of(ino);
	char path[64];
	char *val = size ? malloc(size) : NULL;
	if (size && !val) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int fd = xattr_path(n, path, sizeof(path));
	if (fd == -EPERM) {
		fuse_reply_xattr(req, 0);
	} else if (fd < 0) {
		fuse_reply_err(req, -fd);
	} else {
		ssize_t r = listxattr(path, val, size);
		int e = errno;
		nfd_put(n, fd);
		errno = e;
		reply_xattr_value(req, size, val, r);
	}
	free(val);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	char path[64];
	struct node *n = node_of(ino);
	if (n == &M.root && (!strcmp(name, STATS_XATTR) || !strcmp(name, SYNC_XATTR))) {
		fuse_reply_err(req, EPERM);
		return;
	}
	int fd = xattr_path(n, path, sizeof(path));
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	int err = setxattr(path, name, value, size, flags) ? errno : 0;
	nfd_put(n, fd);
	if (!err && !strcmp(name, CAPS_XATTR))
		atomic_store_explicit(&n->caps, 1, memory_order_relaxed);
	if (!err)
		node_changed(n);
	fuse_reply_err(req, err);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	char path[64];
	struct node *n = node_of(ino);
	int fd = xattr_path(n, path, sizeof(path));
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	int err = removexattr(path, name) ? errno : 0;
	nfd_put(n, fd);
	if (!err && !strcmp(name, CAPS_XATTR))
		atomic_store_explicit(&n->caps, 0, memory_order_relaxed);
	if (!err)
		node_changed(n);
	fuse_reply_err(req, err);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.link = op_link,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.fallocate = op_fallocate,
	.fsync = op_fsync,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};

/* ------------------------------------------------------------------ */
/* stats                                                                */

/* The fields of the kernel's /sys/kernel/debug/bdi/<dev>/stats, and more. */
static size_t stats_text(char *buf, size_t len)
{
	struct wbc_stats s;
	struct wbc_dev_stats d;
	wbc_stats(M.cache, &s);
	wbc_dev_stats(M.dev, &d);
	struct wbc_dev_debug dd;
	wbc_dev_debug(M.dev, &dd);
	pthread_mutex_lock(&D.lock);
	uint64_t deferred_queued = D.queued, deferred_interrupted = D.interrupted;
	pthread_mutex_unlock(&D.lock);
	int n = snprintf(buf, len,
		"BdiWriteback:       %10" PRIu64 " kB\n"
		"BdiReclaimable:     %10" PRIu64 " kB\n"
		"BdiDirtyThresh:     %10" PRIu64 " kB\n"
		"DirtyThresh:        %10" PRIu64 " kB\n"
		"BackgroundThresh:   %10" PRIu64 " kB\n"
		"BdiDirtied:         %10" PRIu64 " kB\n"
		"BdiWritten:         %10" PRIu64 " kB\n"
		"BdiWriteBandwidth:  %10" PRIu64 " kBps\n"
		"BdiAvgWriteBandwidth: %8" PRIu64 " kBps\n"
		"DirtyRatelimit:     %10" PRIu64 " kBps\n"
		"b_dirty:            %10" PRIu64 "\n"
		"b_io:               %10" PRIu64 "\n"
		"b_more_io:          %10" PRIu64 "\n"
		"dirty_buckets:      %10" PRIu64 "\n"
		"Cached:             %10" PRIu64 " kB\n"
		"CacheSize:          %10" PRIu64 " kB\n"
		"WrittenByApps:      %10" PRIu64 " kB\n"
		"WriteErrors:        %10" PRIu64 "\n"
		"AtRisk:             %10" PRIu64 " kB\n"
		"Lost:               %10" PRIu64 " kB\n"
		"Pauses:             %10" PRIu64 "\n"
		"PausedMs:           %10" PRIu64 "\n"
		"ListLockMaxHoldUs:  %10" PRIu64 "\n"
		"ListLockMaxCpuUs:   %10" PRIu64 "\n"
		"ListLockWaits:      %10" PRIu64 "\n"
		"InboxPushRetries:   %10" PRIu64 "\n"
		"DeferredReplies:    %10" PRIu64 "\n"
		"InterruptedPauses:  %10" PRIu64 "\n"
		"DaemonPid:          %10ld\n",
		d.writeback_bytes >> 10, d.dirty_bytes >> 10, d.wb_thresh_bytes >> 10,
		s.thresh_bytes >> 10, s.bg_thresh_bytes >> 10, d.dirtied_bytes >> 10,
		d.written_back_bytes >> 10, d.write_bw >> 10, d.avg_write_bw >> 10,
		d.dirty_ratelimit >> 10, d.files_dirty, d.files_io, d.files_more_io,
		d.dirty_buckets, s.cached_bytes >> 10, s.mem_bytes >> 10, s.written_bytes >> 10,
		s.write_errors, s.at_risk_bytes >> 10, s.lost_bytes >> 10, s.pauses,
		s.paused_ns / 1000000, dd.list_lock_max_hold_ns / 1000,
		dd.list_lock_max_cpu_ns / 1000, dd.list_lock_waits, dd.inbox_push_retries, deferred_queued, deferred_interrupted,
		(long)getpid());
	return n < 0 ? 0 : MINU((size_t)n, len - 1);
}

/* `wbcache stat --json`: the same lines as one JSON object; a value with
 * a unit gets it in its name (BdiWriteback_kB). */
static void print_json(char *text)
{
	printf("{");
	bool first = true;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[64], unit[16] = "";
		long long v;
		if (sscanf(line, " %63[^:]: %lld %15s", key, &v, unit) < 2)
			continue;
		printf("%s\n  \"%s%s%s\": %lld", first ? "" : ",", key, unit[0] ? "_" : "", unit, v);
		first = false;
	}
	printf("\n}\n");
}

int cmd_stat(int argc, char **argv)
{
	bool json = argc == 3 && !strcmp(argv[1], "--json");
	if (json) {
		argv++;
		argc--;
	}
	if (argc != 2 || argv[1][0] == '-') {
		bool help = argc == 2 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr,
			"usage: wbcache stat [--json] MOUNTPOINT\n"
			"prints the live statistics of a wbcache mount (--json: as one JSON object)\n");
		return help ? 0 : 2;
	}
	char buf[4096];
	ssize_t n = getxattr(argv[1], STATS_XATTR, buf, sizeof(buf) - 1);
	if (n < 0) {
		fprintf(stderr, "wbcache stat: %s: %s\n", argv[1],
			errno == ENODATA || errno == ENOTSUP ? "not a wbcache mount" : strerror(errno));
		return 1;
	}
	buf[n] = '\0';
	if (json)
		print_json(buf);
	else
		fputs(buf, stdout);
	return 0;
}

/*
 * `wbcache umount MOUNTPOINT`: returns once every byte is on the backing
 * store and the daemon has ended.  A plain FUSE unmount (fusermount3 -u,
 * umount) returns at once while the daemon still writes back; this writes
 * back first (a write error is reported and nothing is unmounted: the data
 * stays in the cache), then unmounts and waits for the daemon to end.
 */
int cmd_umount(int argc, char **argv)
{
	if (argc != 2 || argv[1][0] == '-') {
		bool help = argc == 2 && !strcmp(argv[1], "--help");
		fprintf(help ? stdout : stderr,
			"usage: wbcache umount MOUNTPOINT\n"
			"writes everything back, unmounts and waits for the daemon to end\n");
		return help ? 0 : 2;
	}
	const char *mnt = argv[1];
	char buf[4096];
	ssize_t n = getxattr(mnt, STATS_XATTR, buf, sizeof(buf) - 1);
	if (n < 0) {
		fprintf(stderr, "wbcache umount: %s: %s\n", mnt,
			errno == ENODATA || errno == ENOTSUP ? "not a wbcache mount" : strerror(errno));
		return 1;
	}
	buf[n] = '\0';
	const char *p = strstr(buf, "DaemonPid:");
	long pid = p ? strtol(p + strlen("DaemonPid:"), NULL, 10) : 0;
	int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
	char ok[8];
	if (getxattr(mnt, SYNC_XATTR, ok, sizeof(ok)) < 0) {
		fprintf(stderr, "wbcache umount: %s: writeback failed: %s; the data stays in the "
			"cache and the file system stays mounted (`fusermount3 -u %s` unmounts "
			"anyway: what is not written is then lost)\n", mnt, strerror(errno), mnt);
		if (pidfd >= 0)
			close(pidfd);
		return 1;
	}
	pid_t child;
	char *fargv[] = { "fusermount3", "-u", (char *)mnt, NULL };
	int rc = posix_spawnp(&child, "fusermount3", NULL, NULL, fargv, environ);
	int ws = 0;
	if (!rc)
		while (waitpid(child, &ws, 0) < 0 && errno == EINTR)
			;
	if (rc || !WIFEXITED(ws) || WEXITSTATUS(ws)) {
		fprintf(stderr, "wbcache umount: %s: fusermount3 -u failed%s%s\n", mnt,
			rc ? ": " : "", rc ? strerror(rc) : "");
		if (pidfd >= 0)
			close(pidfd);
		return 1;
	}
	if (pidfd >= 0) {
		struct pollfd pf = { .fd = pidfd, .events = POLLIN };
		while (poll(&pf, 1, -1) < 0 && errno == EINTR)
			;
		close(pidfd);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* main                                                                 */

static void mount_usage(FILE *out)
{
	fprintf(out,
"usage: wbcache mount BACKING_DIR MOUNTPOINT [-o OPT[,OPT...]] [-f]\n"
"\n"
"Mounts a FUSE file system at MOUNTPOINT whose files are those of BACKING_DIR,\n"
"with their data cached and written back by wbcache, and returns once it is\n"
"mounted (a bad option or directory: a reason, exit 2, nothing mounted).\n"
"`wbcache umount MOUNTPOINT` writes everything back, unmounts and returns when\n"
"the daemon has ended; `fusermount3 -u`, `umount` or SIGTERM return at once\n"
"and the daemon writes back before it ends.  Also: `mount -t fuse.wbcache`\n"
"and fstab lines (type fuse.wbcache).  See wbcache-mount(8).\n"
"\n"
"  -f             stay in the foreground, log to stderr, exit when unmounted:\n"
"                 0, or 1 if data could not be written (default: detach and\n"
"                 log to syslog)\n"
"  -o OPTS        comma-separated, with the kernel's names:\n"
"     mem=SIZE                        cache size (default 256M)\n"
"     page_size=SIZE                  cache page size (default 4K)\n"
"     dirty_ratio=N, dirty_bytes=SIZE\n"
"     dirty_background_ratio=N, dirty_background_bytes=SIZE\n"
"     dirty_expire_centisecs=N, dirty_writeback_centisecs=N\n"
"     min_ratio=N, max_ratio=N, max_bytes=SIZE, strict_limit=0|1,\n"
"     on_error=retry|drop             the device's tunables\n"
"     retry_timeout=SECONDS           retry failing writes that long (default\n"
"                                     30), then writers and fsync get the error\n"
"     qd=N, max_io=SIZE, direct=0|1   the backing I/O (io_uring, O_DIRECT)\n"
"     allow_other, allow_root, auto_unmount, ro, nodev, nosuid, noexec,\n"
"     noatime, ...                    FUSE and mount options\n"
"\n"
"`wbcache stat [--json] MOUNTPOINT` prints the mount's live statistics.\n");
}

static int parse_u64(const char *key, const char *val, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(val, &end, 10);
	if (errno || end == val || *end || v > max || val[0] == '-') {
		fprintf(stderr, "wbcache mount: bad value for %s: '%s'\n", key, val);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_size_opt(const char *key, const char *val, uint64_t *out)
{
	if (wbc_parse_size(val, out)) {
		fprintf(stderr, "wbcache mount: bad size for %s: '%s'\n", key, val);
		return -1;
	}
	return 0;
}

/* -o options: engine config, device options, FUSE options. */
static int parse_opts(char *opts, struct wbc_config *cfg, char *devopts, size_t devlen,
		      char *fuseopts, size_t fuselen, enum dio_mode *dio)
{
	for (char *save = NULL, *kv = strtok_r(opts, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *val = strchr(kv, '=');
		if (val)
			*val++ = '\0';
		uint64_t v;
		const char *devkeys[] = { "min_ratio", "max_ratio", "max_bytes", "strict_limit",
					  "on_error", "retry_timeout", "qd", "max_io", "direct" };
		bool devkey = false;
		for (size_t i = 0; i < sizeof(devkeys) / sizeof(devkeys[0]); i++)
			devkey |= !strcmp(kv, devkeys[i]);
		/* what mount(8) and mount.fuse3 pass for an fstab line, and
		 * the FUSE mount's own: to the kernel's mount */
		static const char *const mntkeys[] = {
			"allow_other", "allow_root", "auto_unmount", "ro", "rw", "dev", "nodev",
			"suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime",
			"norelatime", "strictatime", "diratime", "nodiratime", "sync", "async",
			"dirsync", "lazytime", "nolazytime",
		};
		bool mntkey = false;
		for (size_t i = 0; !val && i < sizeof(mntkeys) / sizeof(mntkeys[0]); i++)
			mntkey |= !strcmp(kv, mntkeys[i]);
		if (mntkey) {
			size_t used = strlen(fuseopts);
			if ((size_t)snprintf(fuseopts + used, fuselen - used, ",%s", kv) >= fuselen - used) {
				fprintf(stderr, "wbcache mount: too many mount options\n");
				return -1;
			}
			continue;
		}
		/* mount(8)'s own, not for the file system */
		if (!strcmp(kv, "defaults") || !strcmp(kv, "_netdev") || !strcmp(kv, "nofail") ||
		    !strcmp(kv, "auto") || !strcmp(kv, "noauto") || !strcmp(kv, "user") ||
		    !strcmp(kv, "nouser") || !strcmp(kv, "users") || !strncmp(kv, "x-", 2) ||
		    !strcmp(kv, "comment"))
			continue;
		if (!val || !*val) {
			fprintf(stderr, "wbcache mount: unknown or incomplete option '%s' "
				"(see wbcache mount --help)\n", kv);
			return -1;
		}
		if (devkey) {
			size_t used = strlen(devopts);
			if ((size_t)snprintf(devopts + used, devlen - used, "%s%s=%s", used ? "," : "",
					     kv, val) >= devlen - used) {
				fprintf(stderr, "wbcache mount: too many device options\n");
				return -1;
			}
			continue;
		}
		int rc = -1;
		if (!strcmp(kv, "direct_io")) {
			if (!strcmp(val, "auto") || !strcmp(val, "1") || !strcmp(val, "0")) {
				*dio = !strcmp(val, "auto") ? DIO_AUTO : val[0] == '1' ? DIO_ALWAYS : DIO_NEVER;
				continue;
			}
			fprintf(stderr, "wbcache mount: bad value for direct_io: '%s' (auto, 1 or 0)\n", val);
			return -1;
		}
		if (!strcmp(kv, "mem"))
			rc = parse_size_opt(kv, val, &cfg->mem_bytes);
		else if (!strcmp(kv, "page_size") && !(rc = parse_size_opt(kv, val, &v)))
			cfg->page_size = v > UINT32_MAX ? 0 : (uint32_t)v;
		else if (!strcmp(kv, "dirty_ratio") && !(rc = parse_u64(kv, val, 100, &v)))
			cfg->dirty_ratio = (uint32_t)v;
		else if (!strcmp(kv, "dirty_bytes"))
			rc = parse_size_opt(kv, val, &cfg->dirty_bytes);
		else if (!strcmp(kv, "dirty_background_ratio") && !(rc = parse_u64(kv, val, 100, &v)))
			cfg->dirty_background_ratio = (uint32_t)v;
		else if (!strcmp(kv, "dirty_background_bytes"))
			rc = parse_size_opt(kv, val, &cfg->dirty_background_bytes);
		else if (!strcmp(kv, "dirty_expire_centisecs") && !(rc = parse_u64(kv, val, UINT32_MAX, &v)))
			cfg->dirty_expire_centisecs = (uint32_t)v;
		else if (!strcmp(kv, "dirty_writeback_centisecs") &&
			 !(rc = parse_u64(kv, val, UINT32_MAX, &v)))
			cfg->dirty_writeback_centisecs = (uint32_t)v;
		else if (rc && strcmp(kv, "page_size") && strcmp(kv, "dirty_ratio") &&
			 strcmp(kv, "dirty_background_ratio") && strcmp(kv, "dirty_expire_centisecs") &&
			 strcmp(kv, "dirty_writeback_centisecs")) {
			fprintf(stderr, "wbcache mount: unknown option '%s' (see wbcache mount --help)\n", kv);
			return -1;
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* Every node holds a descriptor, and the engine one per cached file:
 * raise the limit to fs.nr_open where allowed (root), else to the hard
 * limit. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	FILE *f = fopen("/proc/sys/fs/nr_open", "r");
	unsigned long long nr = 0;
	if (f) {
		if (fscanf(f, "%llu", &nr) != 1)
			nr = 0;
		fclose(f);
	}
	if (nr > rl.rlim_max) {
		struct rlimit want = { nr, nr };
		if (!setrlimit(RLIMIT_NOFILE, &want))
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/*
 * Background mode.  The engine's threads (flushers, completions) must run in
 * the process that serves the mount, and a fork keeps only the calling
 * thread: so the process forks before the cache opens, the child opens
 * everything and mounts, and only then detaches.  The parent waits on a
 * pipe: one byte means the mount is up (exit 0); end of file means the
 * child failed, its reason already printed on the shared stderr, and the
 * parent exits with the child's status.  Returns true in the parent, with
 * its exit status in *status.
 */
static int detach_fd = -1;

static bool detach_begin(int *status)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC)) {
		fprintf(stderr, "wbcache mount: pipe: %s\n", strerror(errno));
		*status = 2;
		return true;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "wbcache mount: fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		*status = 2;
		return true;
	}
	if (pid == 0) {
		close(p[0]);
		detach_fd = p[1];
		setsid();
		return false;
	}
	close(p[1]);
	char c;
	ssize_t r;
	while ((r = read(p[0], &c, 1)) < 0 && errno == EINTR)
		;
	close(p[0]);
	if (r == 1) {
		*status = 0;
		return true;
	}
	int ws;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	*status = WIFEXITED(ws) && WEXITSTATUS(ws) ? WEXITSTATUS(ws) : 2;
	return true;
}

/*
 * Before mounting: standard input, output and error go to /dev/null, and
 * stderr (the FILE) to a close-on-exec copy of the caller's, so reasons
 * still reach the caller until the mount is up.  A helper the mount
 * starts (fusermount3's auto_unmount watcher lives as long as the mount)
 * then holds no descriptor of the caller's: `out=$(wbcache mount ...)`
 * returns.
 */
static int detach_err = -1;

static void detach_stdio(void)
{
	if (detach_fd < 0)
		return;
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	detach_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	FILE *err = detach_err >= 0 ? fdopen(detach_err, "w") : NULL;
	if (nul < 0 || !err) {
		if (err)
			fclose(err);
		else if (detach_err >= 0)
			close(detach_err);
		detach_err = -1;
		if (nul >= 0)
			close(nul);
		return;
	}
	setvbuf(err, NULL, _IONBF, 0);
	fflush(stderr);
	stderr = err;
	dup2(nul, STDIN_FILENO);
	dup2(nul, STDOUT_FILENO);
	dup2(nul, STDERR_FILENO);
	close(nul);
}

/* The mount is up: let the parent go and leave its terminal. */
static void detach_done(void)
{
	if (detach_fd < 0)
		return;
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(nul, STDERR_FILENO);
		if (detach_err >= 0)
			dup2(nul, detach_err);   /* stderr (the FILE) too */
		if (nul > STDERR_FILENO)
			close(nul);
	}
	if (chdir("/")) { /* the mount needs no working directory */ }
	while (write(detach_fd, "", 1) < 0 && errno == EINTR)
		;
	close(detach_fd);
	detach_fd = -1;
}

int cmd_mount(int argc, char **argv)
{
	const char *pos[2] = { NULL, NULL };
	int npos = 0;
	bool foreground = false;
	char *opts = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			mount_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "-f")) {
			foreground = true;
		} else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			opts = argv[++i];
		} else if (!strncmp(argv[i], "-o", 2) && argv[i][2]) {
			opts = argv[i] + 2;
		} else if (argv[i][0] == '-' || npos == 2) {
			fprintf(stderr, "wbcache mount: unexpected argument '%s'\n", argv[i]);
			mount_usage(stderr);
			return 2;
		} else {
			pos[npos++] = argv[i];
		}
	}
	if (npos != 2) {
		mount_usage(stderr);
		return 2;
	}
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 256u << 20;
	char devopts[512] = "", fuseopts[256] = "";
	char *optcopy = opts ? strdup(opts) : NULL;
	enum dio_mode dio = DIO_AUTO;
	if (opts && (!optcopy || parse_opts(optcopy, &cfg, devopts, sizeof(devopts), fuseopts,
					   sizeof(fuseopts), &dio))) {
		free(optcopy);
		return 2;
	}
	free(optcopy);

	memset(&M, 0, sizeof(M));
	M.foreground = foreground;
	M.dio = dio;
	/* the kernel applied the caller's umask to every mode it sends */
	umask(0);
	M.root_fd = M.mount_fd = -1;
	int status = 2, rc;
	char *mountpoint = NULL;
	struct fuse_session *se = NULL;
	struct stat st;
	M.backing = realpath(pos[0], NULL);
	if (!M.backing || stat(M.backing, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "wbcache mount: %s: %s\n", pos[0],
			!M.backing || errno ? strerror(errno ? errno : ENOTDIR) : "not a directory");
		goto out;
	}
	mountpoint = realpath(pos[1], NULL);
	if (!mountpoint || stat(mountpoint, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "wbcache mount: mount point %s: %s\n", pos[1],
			!mountpoint || errno ? strerror(errno ? errno : ENOTDIR) : "not a directory");
		goto out;
	}
	M.root_fd = open(M.backing, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (M.root_fd < 0 || fstat(M.root_fd, &st)) {
		fprintf(stderr, "wbcache mount: %s: %s\n", M.backing, strerror(errno));
		goto out;
	}
	if (!foreground) {
		int parent_status;
		if (detach_begin(&parent_status)) {
			close(M.root_fd);
			free(M.backing);
			free(mountpoint);
			return parent_status;
		}
	}
	M.root.fd = M.root_fd;
	M.root.nlookup = 1;
	M.root.dev = st.st_dev;
	M.root.ino = st.st_ino;
	mutex_init_checked(&M.root.lock);
	mutex_init_checked(&M.lock);
	M.hsize = 1024;
	M.hash = calloc(M.hsize, sizeof(*M.hash));
	atomic_init(&M.next_gen, 1);
	M.as_root = geteuid() == 0;
	if (!M.hash)
		goto out;
	pthread_mutex_lock(&M.lock);
	insert_locked(&M.root);
	pthread_mutex_unlock(&M.lock);

	rc = wbc_cache_open(&cfg, &M.cache);
	if (rc) {
		fprintf(stderr, "wbcache mount: bad cache configuration: %s\n", wbc_strerror(rc));
		goto out;
	}
	char msg[256];
	int fsfd = open(M.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	M.mount_fd = fsfd;
	/* file handles: the daemon needs no descriptor per file */
	struct file_handle *rfh = handle_of(M.root_fd);
	if (rfh) {
		int t = open_by_handle_at(M.mount_fd, rfh, O_PATH | O_CLOEXEC);
		M.handles = t >= 0;
		if (t >= 0)
			close(t);
		free(rfh);
	}
	rc = fsfd < 0 ? -errno : wbc_dev_add_opener(M.cache, fsfd, devopts, open_backing, NULL,
						    M.handles ? WBC_OPENER_REOPEN : 0,
						    &M.dev, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "wbcache mount: %s\n", fsfd < 0 ? strerror(-rc) : msg);
		goto out;
	}
	raise_fd_limit();

	char fsname[PATH_MAX + 512], shown[PATH_MAX];
	snprintf(shown, sizeof(shown), "%s", M.backing);
	for (char *p = shown; *p; p++)    /* a comma would split the options */
		if (*p == ',' || *p == '\\')
			*p = '_';
	snprintf(fsname, sizeof(fsname), "default_permissions,fsname=wbcache:%s,subtype=wbcache%s",
		 shown, fuseopts);
	char *fargv[] = { argv[0], "-o", fsname, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	M.se = se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	fuse_opt_free_args(&args);
	status = 1;
	if (!se) {
		fprintf(stderr, "wbcache mount: cannot start a FUSE session\n");
		goto out;
	}
	detach_stdio();
	if (fuse_set_signal_handlers(se) || fuse_session_mount(se, mountpoint)) {
		fprintf(stderr, "wbcache mount: cannot mount on %s\n", pos[1]);
		goto out;
	}
	if (!foreground)
		openlog("wbcache", LOG_PID, LOG_DAEMON);
	if (replier_start())
		logmsg("no replier thread: throttled writes hold their worker");
	detach_done();
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, 16);
	fuse_loop_cfg_set_idle_threads(lc, 4);
	int lrc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	replier_stop();
	fuse_session_unmount(se);
	if (lrc && lrc != SIGINT && lrc != SIGTERM && lrc != SIGHUP)
		logmsg("session ended with an error: %s", strerror(lrc < 0 ? -lrc : lrc));
	status = 0;
out:
	if (se) {
		fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);
	}
	if (M.cache) {
		/* everything is written back here.  An error met on the way
		 * (a full file system, since freed) that left nothing at risk
		 * and lost nothing is logged; data not written makes it 1. */
		int err = wbc_cache_sync(M.cache);
		struct wbc_stats s;
		if (err)
			logmsg("a writeback error was met: %s", wbc_strerror(err));
		/* a store that keeps failing is retried for its retry_timeout;
		 * what is still unwritten then is counted lost */
		err = wbc_cache_close_stats(M.cache, &s);
		if (s.lost_bytes) {
			logmsg("writeback at unmount failed: %" PRIu64 " bytes lost", s.lost_bytes);
			status = 1;
		} else if (err) {
			logmsg("writeback at unmount failed: %s", wbc_strerror(err));
			status = 1;
		}
	}
	/* nodes the kernel never forgot: their data is written, their
	 * mtimes go back on the backing files */
	for (size_t i = 0; M.hash && i < M.hsize; i++)
		for (struct node *n = M.hash[i], *next; n; n = next) {
			next = n->hnext;
			if (n != &M.root) {
				pthread_mutex_lock(&n->lock);
				if (n->wrote)
					restore_mtime_locked(n);
				pthread_mutex_unlock(&n->lock);
				node_free(n);
			}
		}
	for (struct node *n = M.stale, *next; n; n = next) {
		next = n->hnext;
		node_free(n);
	}
	free(M.hash);
	if (M.root_fd >= 0)
		close(M.root_fd);
	if (M.mount_fd >= 0)
		close(M.mount_fd);
	free(M.backing);
	free(mountpoint);
	return status;
}
