/*
 * The mount's nodes: the table that finds them by (st_dev, st_ino), their
 * descriptors (kept, or reopened from file handles through a per-thread
 * ring), the engine's files of their data, their attributes, and their
 * lives from lookup to forget (see mount.h).
 */
#include "mount.h"

#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The node whose engine file the calling thread is opening (the opener
 * callback runs inside wbc_file_open, in the same thread). */
static __thread struct node *opening;
/* A writable descriptor of that node's file which the create that made
 * it holds (-1: none), for the engine where a reopen would be refused */
static __thread int opening_wfd = -1;

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

void node_insert_locked(struct node *n)
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

/*
 * Descriptors.  With file handles (root, and a backing file system that
 * has them) a node keeps its handle, not a descriptor: nfd() opens an
 * O_PATH descriptor from it.  A directory's (or other non-file's) is
 * cached in a small per-thread ring keyed by the node's unique gen, so a
 * request that uses up to three nodes keeps them valid; a regular file's
 * is kept in the node while a request or an open holds it (pfd_holds)
 * and closed when the last lets go, so no descriptor keeps a removed
 * file's space (a thread's ring lives as long as the thread, which may
 * sleep for long).  The engine's descriptors
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

int nfd(struct node *n)
{
	if (n->fd >= 0)
		return n->fd;
	int kept = atomic_load(&n->kept_fd);
	if (kept >= 0)
		return kept;
	if (n->is_reg) {
		pthread_mutex_lock(&n->fdlock);
		if (n->pfd < 0)
			n->pfd = open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
		int fd = n->pfd, e = errno;
		if (fd >= 0)
			n->pfd_holds++;
		pthread_mutex_unlock(&n->fdlock);
		errno = e;
		return fd;
	}
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
void nfd_put(struct node *n, int fd)
{
	if (fd >= 0 && n->fd < 0 && n->is_reg)
		node_drop_fd(n);
}

/* An open of the file keeps its descriptor (handle mode) until its
 * release: the requests on an open file (setattr, getattr, getxattr,
 * release) then open nothing.  A file nothing holds keeps none, so no
 * descriptor keeps a removed file's space. */
void node_hold_fd(struct node *n)
{
	if (n->fd >= 0 || !n->is_reg)
		return;
	pthread_mutex_lock(&n->fdlock);
	n->pfd_holds++;
	pthread_mutex_unlock(&n->fdlock);
}

void node_drop_fd(struct node *n)
{
	if (n->fd >= 0 || !n->is_reg)
		return;
	pthread_mutex_lock(&n->fdlock);
	assert(n->pfd_holds > 0);
	if (!--n->pfd_holds && n->pfd >= 0) {
		close(n->pfd);
		n->pfd = -1;
	}
	pthread_mutex_unlock(&n->fdlock);
}

/* The engine's name for a node's data: in handle mode the handle itself in
 * hex (unique for the inode's lifetime: handles carry its generation), so
 * any node for the inode finds the same cached data and the engine can
 * reopen it from any thread; otherwise the node's gen. */
static void handle_name(const struct file_handle *fh, char *buf, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	int k = snprintf(buf, len, "h%x-", (unsigned)fh->handle_type);
	for (unsigned i = 0; i < fh->handle_bytes && (size_t)k + 3 < len; i++) {
		buf[k++] = hex[fh->f_handle[i] >> 4];
		buf[k++] = hex[fh->f_handle[i] & 15];
	}
	buf[k] = '\0';
}

static void gen_name(const struct node *n, char *buf, size_t len)
{
	if (!n->fh) {
		snprintf(buf, len, "%" PRIu64, n->gen);
		return;
	}
	handle_name(n->fh, buf, len);
}

int backing_file_name(const char *path, char *buf, size_t len, char *msg, size_t msglen)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	struct stat st;
	struct statfs sf;
	int mnt, err = 0;
	struct file_handle *fh = NULL;
	if (fd < 0 || fstat(fd, &st) || fstatfs(fd, &sf)) {
		err = -errno;
		snprintf(msg, msglen, "%s: %s", path, strerror(errno));
	} else if (sf.f_type == FUSE_SUPER_MAGIC) {
		/* through a mount: FUSE's handle, not the backing file's */
		err = -EINVAL;
		snprintf(msg, msglen, "%s is on a FUSE mount: give the file in the mount's "
			 "BACKING_DIR", path);
	} else if (!S_ISREG(st.st_mode)) {
		err = -EINVAL;
		snprintf(msg, msglen, "%s is not a regular file", path);
	} else if (!(fh = handle_of(fd, &mnt))) {
		err = -EOPNOTSUPP;
		snprintf(msg, msglen, "%s has no file handle (name_to_handle_at): its file "
			 "system cannot back a rados mount", path);
	} else {
		handle_name(fh, buf, len);
	}
	free(fh);
	if (fd >= 0)
		close(fd);
	return err;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

struct file_handle *handle_of(int fd, int *mount_id)
{
	struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
	if (!fh)
		return NULL;
	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", fh, mount_id, AT_EMPTY_PATH) || fh->handle_bytes > 120) {
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
		int hi = hexval(name[pos + 2 * i]), lo = hexval(name[pos + 2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(fh);
			return NULL;
		}
		fh->f_handle[i] = (unsigned char)(hi << 4 | lo);
	}
	return fh;
}

static int open_backing_fd(const char *name, int flags);

/* The opener of the engine's device: reopen the node's O_PATH descriptor
 * with @flags.  A file the daemon may only read is opened read-only (its
 * writes are refused by the kernel's permission check first). */
int open_backing(void *ctx, const char *name, int flags)
{
	(void)ctx;
	int fd = open_backing_fd(name, flags);
	/* what the engine got: a read-only descriptor takes no write */
	if (opening && fd >= 0)
		opening->backing_ro = (flags & O_ACCMODE) != O_RDONLY &&
				      (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY;
	return fd;
}

static int open_backing_fd(const char *name, int flags)
{
	int fd;
	if (opening && opening_wfd >= 0) {
		/* a file this daemon made but may not write (mode 0444, the
		 * daemon not root): the create's own descriptor, as a
		 * reopen's permission check would refuse it */
		char want[256];
		gen_name(opening, want, sizeof(want));
		if (!strcmp(want, name) && (fd = fcntl(opening_wfd, F_DUPFD_CLOEXEC, 0)) >= 0) {
			if ((flags & O_DIRECT) && fcntl(fd, F_SETFL, O_DIRECT)) {
				close(fd);
				return -EINVAL;   /* the engine goes on without */
			}
			return fd;
		}
	}
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

/* A new engine handle on the node's data, with wbc_file_open's @flags
 * added (WBC_O_NOERRSEEN), where the caller holds a writable descriptor
 * @wfd of the node's file or -1 (engine_open_wfd). */
static int engine_open_flags(struct node *n, int wfd, int flags, wbc_file **out)
{
	char name[256];
	gen_name(n, name, sizeof(name));
	opening = n;
	opening_wfd = wfd;
	int err = wbc_file_open(M.dev, name, WBC_O_CREAT | flags, out);
	opening = NULL;
	opening_wfd = -1;
	return err;
}

/* A new engine handle on the node's data. */
int engine_open(struct node *n, wbc_file **out)
{
	return engine_open_wfd(n, -1, out);
}

/* The same, where the caller holds a writable descriptor @wfd of the
 * node's file (a create of a file the daemon may not write otherwise). */
int engine_open_wfd(struct node *n, int wfd, wbc_file **out)
{
	return engine_open_flags(n, wfd, 0, out);
}

/* The attributes of a node: the backing inode's, with the size, times and
 * blocks of data still in the cache.  Blocks: the backing file's plus what
 * is not yet written back (a sparse file stays sparse). */
int stat_node(struct node *n, struct stat *st)
{
	int fd = nfd(n);
	int err = fd < 0 ? -errno : stat_node_fd(n, fd, st);
	nfd_put(n, fd);
	return err;
}

/* The same, from a descriptor of the node's inode the caller holds. */
int stat_node_fd(struct node *n, int fd, struct stat *st)
{
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		return -errno;
	node_attr(n, st);
	return 0;
}

/* The size and times of @from into @st (its other fields kept). */
static void take_size_times(struct stat *st, const struct stat *from)
{
	st->st_size = from->st_size;
	st->st_blocks = from->st_blocks;
	st->st_mtim = from->st_mtim;
	st->st_ctim = from->st_ctim;
}

/* @st's size and times taken again from the backing file (a stat taken
 * before another thread's settle: its mtime not yet put back). */
static void restat_locked(struct node *n, struct stat *st)
{
	assert_held(&n->lock);
	int fd = nfd(n);
	struct stat now;
	if (fd >= 0 && !fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
		take_size_times(st, &now);
	nfd_put(n, fd);
}

/*
 * A closed node whose data is all written back settles: its mtime put
 * back on the backing file, whose size and times (@st, taken again under
 * the node's lock) are the file's from now on; false (nothing changed)
 * when the backing file cannot be reached.  Before, the node reported the
 * size and mtime of its last close for as long as it lived: a change made
 * in BACKING_DIR beside the mount never showed, and an append through
 * the mount went to the old size, over the new data.
 *
 * Changed beside the mount already: another size, or an mtime more than a
 * second before a write's here (writeback gives a later one; a later one
 * set beside the mount with the same size is not told from it, and an
 * mtime set explicitly through the mount, which writeback may have moved
 * either way, is not compared).  Then the backing file's attributes are
 * the file's, its ctime too, and nothing is put back.  An mtime that
 * cannot be put back (a daemon that does not own the file) stays the
 * node's to report.
 */
static bool settle_locked(struct node *n, struct stat *st)
{
	assert_held(&n->lock);
	int fd = nfd(n);
	if (fd < 0)
		return false;
	struct stat now;
	bool ok = !fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	struct timespec early = { n->mtime.tv_sec - 1, n->mtime.tv_nsec };
	bool beside = ok && ((uint64_t)now.st_size != n->size ||
			     (n->mtime_set && !n->mtime_explicit && ts_before(now.st_mtim, early)));
	bool keep_mtime = false;
	if (ok && !beside && n->mtime_set) {
		struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, n->mtime };
		if (utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
			keep_mtime = true;
		else
			ok = !fstatat(fd, "", &now, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	}
	nfd_put(n, fd);
	if (!ok)
		return false;
	take_size_times(st, &now);
	n->size_known = false;
	if (!keep_mtime)
		n->mtime_set = false;
	if (beside) {
		n->ctime = (struct timespec){ 0, 0 };
	} else {
		n->bctime = now.st_ctim;
		n->bmtime = now.st_mtim;
		n->bctime_set = true;
	}
	return true;
}

/* Complete @st, the backing inode's attributes just read, with what the
 * cache holds of the node's data. */
void node_attr(struct node *n, struct stat *st)
{
	atomic_store_explicit(&n->mode, st->st_mode, memory_order_relaxed);
	if (!S_ISREG(st->st_mode))
		return;
	uint64_t unwritten = 0;
	pthread_mutex_lock(&n->lock);
	struct wbc_file_info fi;
	if (n->wf && !wbc_file_info(n->wf, &fi)) {
		st->st_size = (off_t)fi.size;
		unwritten = fi.unwritten_bytes;
	} else if (n->size_known) {
		/* what was unwritten at the last close: how much is left now
		 * (it counted twice once written back: in the backing file's
		 * blocks too), and whether the backing file holds the data as
		 * it is (written, and its size trimmed from the pages'), then
		 * settled (a remote backend's data is not the backing file's) */
		wbc_file *h;
		bool synced = false;
		if ((n->unwritten || !M.remote) && !engine_open(n, &h)) {
			if (!wbc_file_info(h, &fi)) {
				n->unwritten = fi.unwritten_bytes;
				synced = !fi.unwritten_bytes && fi.backend_size == fi.size;
			}
			wbc_file_close(h);
		}
		unwritten = n->unwritten;
		if (!synced || M.remote || !settle_locked(n, st))
			st->st_size = (off_t)n->size;
	} else if (n->bctime_set &&
		   (ts_before(st->st_ctim, n->bctime) ||
		    (!ts_before(n->bctime, st->st_ctim) && (st->st_mtim.tv_sec != n->bmtime.tv_sec ||
							    st->st_mtim.tv_nsec != n->bmtime.tv_nsec)))) {
		/* taken before another thread's settle (its ctime older, or
		 * the same tick's with the writeback's mtime) */
		restat_locked(n, st);
	}
	bool same_ctime = !n->bctime_set || (st->st_ctim.tv_sec == n->bctime.tv_sec &&
					     st->st_ctim.tv_nsec == n->bctime.tv_nsec);
	/* an mtime kept after a settle (it could not be put back) holds
	 * until the backing file changes beside the mount */
	if (n->mtime_set && same_ctime)
		st->st_mtim = n->mtime;
	/* writeback moves the backing ctime too: while data went through
	 * the engine, the file's is the last change made through the mount
	 * (tar and rsync compare it), until the backing file's changes from
	 * the one it had when it settled */
	if (n->wrote && (n->ctime.tv_sec || n->ctime.tv_nsec) && same_ctime)
		st->st_ctim = n->ctime;
	pthread_mutex_unlock(&n->lock);
	st->st_blocks += (blkcnt_t)((unwritten + 511) / 512);
}

/* Data of the node changed through the engine now (write, truncate,
 * fallocate): its mtime and ctime are now. */
void node_written_locked(struct node *n)
{
	assert_held(&n->lock);
	n->wrote = true;
	clock_gettime(CLOCK_REALTIME, &n->mtime);
	n->ctime = n->mtime;
	n->mtime_set = true;
	n->mtime_explicit = false;
	n->bctime_set = false;
}

/* A change of the node's inode through the mount (its ctime): caller
 * holds n->lock. */
static void changed_locked(struct node *n)
{
	assert_held(&n->lock);
	clock_gettime(CLOCK_REALTIME, &n->ctime);
	if (n->bctime_set) {
		/* a change through the mount, not beside it: the backing
		 * times it left are the settled ones (a kept mtime holds) */
		struct stat st = { 0 };
		restat_locked(n, &st);
		if (st.st_ctim.tv_sec || st.st_ctim.tv_nsec) {
			n->bctime = st.st_ctim;
			n->bmtime = st.st_mtim;
		}
	}
}

void node_changed(struct node *n)
{
	if (!n->is_reg)
		return;
	pthread_mutex_lock(&n->lock);
	changed_locked(n);
	pthread_mutex_unlock(&n->lock);
}

/* Put the file's own mtime back on the backing file once its data is
 * written: caller holds n->lock.  1 when it put back one set explicitly
 * (touch -d, tar, rsync), which an fsync then makes durable; 0 when it
 * put back none or a write's own; -errno when it could not (a store
 * remounted read-only under the mount: EROFS), which the caller reports
 * or keeps the node for.  A file no longer there (removed beside the
 * mount) has no time to keep, and one the daemon may not set (EPERM)
 * never will: 0. */
int restore_mtime_locked(struct node *n)
{
	assert_held(&n->lock);
	if (!n->mtime_set)
		return 0;
	struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, n->mtime };
	int fd = nfd(n);
	struct stat st;
	int put = 0;
	if (fd >= 0 && !fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) &&
	    st.st_mtim.tv_sec == n->mtime.tv_sec && st.st_mtim.tv_nsec == n->mtime.tv_nsec) {
		/* there already (no writeback since): nothing to put back,
		 * nor to flush again (each fsync after a touch -d cost two
		 * flushes), and the ctime stays */
	} else if (fd < 0 || utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		int e = errno;
		if (fd >= 0 || (e != ESTALE && e != ENOENT)) {
			logmsg("setting the mtime of a written-back file failed: %s", strerror(e));
			/* a daemon not root that does not own the file may
			 * never set its time (the node keeps reporting it,
			 * settle_locked): no failure to retry or report */
			if (e != EPERM && e != EACCES)
				put = -e;
		}
	} else {
		put = n->mtime_explicit;
		if (n->bctime_set && !fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
			/* the mount's own change of a settled file, not one
			 * beside it: the file's ctime stays the node's */
			n->bctime = st.st_ctim;
			n->bmtime = st.st_mtim;
		}
	}
	nfd_put(n, fd);
	return put;
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


/* A node out of the table and every list. */
void node_free(struct node *n)
{
	if (n->fd >= 0)
		close(n->fd);
	if (n->pfd >= 0)
		close(n->pfd);
	if (atomic_load(&n->kept_fd) >= 0)
		close(atomic_load(&n->kept_fd));
	free(n->fh);
	pthread_mutex_destroy(&n->lock);
	pthread_mutex_destroy(&n->fdlock);
	free(n);
}

/* Look @name up in @parent: a node with one more lookup, and its attrs. */
int do_lookup(struct node *parent, const char *name, struct fuse_entry_param *e)
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
	return enter_node(fd, &st, e);
}

static void ghost_remove_locked(struct node *n);
static void ghost_stale_job(void *n);

/* The node of the inode open at @fd (the caller's, given up here), whose
 * attributes @st were just read: found, or made, with one more lookup,
 * and the entry to answer with. */
int enter_node(int fd, struct stat *st, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	int mnt = M.mount_id;
	struct file_handle *fh = M.handles ? handle_of(fd, &mnt) : NULL;
	if (M.handles && (!fh || mnt != M.mount_id)) {
		/* another file system mounted inside BACKING_DIR: handles
		 * are decoded on the backing directory's own (one of another
		 * would name some inode there, even outside BACKING_DIR), so
		 * the mount does not go into it */
		free(fh);
		close(fd);
		return -EXDEV;
	}
	pthread_mutex_lock(&M.lock);
	struct node *n = find_locked(st->st_dev, st->st_ino);
	struct node *gone = NULL;
	if (n && n != &M.root && node_stale(n, fh)) {
		/* the inode number was reused by a new inode (the old one is
		 * gone): the old node lives on until the kernel forgets it,
		 * out of the table; a ghost is settled now */
		remove_locked(n);
		n->hashed = false;
		n->hnext = M.stale;
		M.stale = n;
		if (n->ghost) {
			ghost_remove_locked(n);
			n->forgetting++;
			gone = n;
		}
		n = NULL;
	}
	if (n) {
		node_revive_locked(n);
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
			if (gone)
				ghost_stale(gone);
			return -ENOMEM;
		}
		n->dev = st->st_dev;
		n->ino = st->st_ino;
		n->fd = fd;
		n->pfd = -1;
		atomic_init(&n->kept_fd, -1);
		if ((n->fh = fh)) {
			close(fd);         /* reopened from the handle when used */
			n->fd = -1;
		}
		n->nlookup = 1;
		n->is_reg = S_ISREG(st->st_mode);
		atomic_init(&n->mode, st->st_mode);
		atomic_init(&n->caps, -1);
		n->gen = atomic_fetch_add(&M.next_gen, 1);
		mutex_init_checked(&n->lock);
		mutex_init_checked(&n->fdlock);
		node_insert_locked(n);
		pthread_mutex_unlock(&M.lock);
	}
	if (gone && !(uring_on_ring() && uring_later(ghost_stale_job, gone)))
		ghost_stale(gone);
	node_attr(n, st);
	e->attr = *st;
	e->ino = id_of(n);
	e->attr_timeout = M.attr_timeout;
	e->entry_timeout = M.entry_timeout;
	return 0;
}

/* Drop the cached data of a node whose inode has no link left (it can
 * never be read again once closed): caller holds n->lock, opens == 0. */
void drop_if_unlinked_locked(struct node *n)
{
	assert_held(&n->lock);
	struct stat st;
	/* a remote backend's data outlives this process: dropped (its
	 * objects removed) whoever wrote it; a pinned inode is let go */
	if (!n->is_reg || (!n->wrote && !M.remote && !n->unlink_pin))
		return;
	int fd = nfd(n);
	/* gone: a handle that no longer opens (ESTALE), or no link left; any
	 * other failure (EMFILE, ENOMEM) keeps the data */
	bool gone = fd < 0 ? errno == ESTALE || errno == ENOENT :
		    !fstatat(fd, "", &st, AT_EMPTY_PATH) && !st.st_nlink;
	nfd_put(n, fd);
	if (!gone)
		return;
	/* a remote backend's objects are removed with the data (nothing
	 * else would ever delete them); elsewhere the backing file is the
	 * data, gone with its last link */
	char name[256];
	gen_name(n, name, sizeof(name));
	wbc_file *h;
	int err = M.remote ? wbc_file_remove(M.dev, name) : n->wrote ? -EOPNOTSUPP : 0;
	if (err && err != -ENOENT && engine_open(n, &h) == 0) {
		int terr = wbc_truncate(h, 0);   /* drops dirty pages: never written */
		if (terr)
			logmsg("cannot drop the cached data of an unlinked file (%s): %s", name,
			       wbc_strerror(terr));
		wbc_file_close(h);
	}
	if (err && err != -ENOENT && err != -EOPNOTSUPP)
		logmsg("cannot remove the data of an unlinked file (%s): %s", name,
		       wbc_strerror(err));
	n->wrote = false;
	n->size_known = false;
	n->mtime_set = false;
	if (n->unlink_pin) {
		n->unlink_pin = false;
		atomic_fetch_sub(&M.unlink_pins, 1);
		node_drop_fd(n);
	}
}

/*
 * A file whose last link went through the mount, closed: its data is
 * dropped only once the kernel forgets the node (forget_one), not at the
 * unlink or the last release.  Until then the kernel may still send an
 * OPEN of the inode (an open(2) that found the name before a rename over
 * it or its unlink, or a reopen through /proc/PID/fd of a descriptor,
 * O_PATH's too) and that open reads the file's data, as on a local file
 * system: dropped at once, it read an empty file (the drop cut the
 * backing inode too), or zeros to the size the kernel knew.  In handle
 * mode a hold of the node's descriptor keeps the unlinked inode (and the
 * engine's writeback and drop of its data) meanwhile; released by the
 * drop.  So is a file whose data never went through the mount (made in
 * BACKING_DIR, or by an earlier mount): its backing inode is its data,
 * and without the pin such an open, or a stat of the inode, failed with
 * ESTALE.  Caller holds n->lock, opens == 0.
 */
void pin_unlinked_locked(struct node *n)
{
	assert_held(&n->lock);
	if (n->unlink_pin || !n->is_reg || n->fd >= 0)
		return;
	struct stat st;
	int fd = nfd(n);
	bool unlinked = fd >= 0 && !fstatat(fd, "", &st, AT_EMPTY_PATH) && !st.st_nlink;
	/* At most unlink_pin_cap pins: forgets may come far behind the
	 * unlinks (over io_uring they come through /dev/fuse, the unlinks
	 * on the rings: 278 unlinks against 13 forgets read), and each pin
	 * holds a descriptor.  Past the cap the daemon ran out of them
	 * (EMFILE): the engine could neither write nor drop the pages of
	 * unlinked files, and a sync failed with ESTALE.  Past it now, the
	 * data is dropped at once, as before pins (an open of the inode the
	 * kernel still holds reads it empty then) */
	if (unlinked && atomic_fetch_add(&M.unlink_pins, 1) < M.unlink_pin_cap) {
		n->unlink_pin = true;   /* the hold nfd took */
		return;
	}
	if (unlinked)
		atomic_fetch_sub(&M.unlink_pins, 1);
	nfd_put(n, fd);
	if (unlinked)
		drop_if_unlinked_locked(n);
}

/* At the end (main.c): the data of a closed file whose last link went
 * through the mount dropped (its pin let go). */
void unpin_unlinked(struct node *n)
{
	if (n == &M.root)
		return;
	pthread_mutex_lock(&n->lock);
	if (n->unlinked && !n->opens)
		drop_if_unlinked_locked(n);
	pthread_mutex_unlock(&n->lock);
}

int backing_set_size(struct node *n, uint64_t size)
{
	char path[64];
	int fd = nfd(n), wfd = -1, err = 0;
	if (fd >= 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		wfd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (wfd < 0 || ftruncate(wfd, (off_t)size))
		err = -errno;
	if (wfd >= 0)
		close(wfd);
	nfd_put(n, fd);
	return err;
}

static void forget_done(struct node *n, bool linger);

/* The node of the inode (dev, ino) a request through the mount just found
 * by a name, held (one more n->forgetting) so that no forget or ghost
 * reaping frees it while the caller uses it: the kernel holds a lookup on
 * the node its own entry names, but a name changed in BACKING_DIR beside
 * the mount (an entry the kernel still has, or a negative one: a rename's
 * target) may lead to another inode, whose node is a ghost or being
 * forgotten.  node_put lets it go. */
static struct node *node_get(dev_t dev, ino_t ino)
{
	pthread_mutex_lock(&M.lock);
	struct node *n = find_locked(dev, ino);
	if (n)
		n->forgetting++;
	pthread_mutex_unlock(&M.lock);
	return n;
}

/* A ghost stays one; a node a forget or a reaper gave up meanwhile is
 * freed, or kept as a ghost, as that pass asked (forget_done). */
static void node_put(struct node *n)
{
	forget_done(n, false);
}

/* An open file is about to lose a name through the mount: in handle mode
 * it holds no descriptor of its own (the engine's may be closed when
 * idle, and an unlinked inode with none is freed: its handle then says
 * ESTALE), so one is opened now and kept until its last release, which
 * hands it to the pin that keeps the inode until the data is dropped
 * (pin_unlinked_locked).  A closed file gets one for the caller to keep
 * until after_unlink has pinned the inode: without it, the engine, whose
 * descriptor was closed, could neither write nor drop its dirty pages
 * (ESTALE at every retry, and a umount that failed), and an open or a
 * stat of the inode the kernel still holds failed (ESTALE). */
/* An open file's descriptor, taken now (caller holds n->lock): it keeps
 * the backing inode once its last link goes, as an open file's on a local
 * file system (a handle no longer opens it then). */
static void pin_open_locked(struct node *n)
{
	assert_held(&n->lock);
	if (!n->opens)
		return;
	pthread_mutex_lock(&n->fdlock);
	if (n->pfd < 0 && n->pfd_holds > 0)
		n->pfd = open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
	pthread_mutex_unlock(&n->fdlock);
}

int before_unlink(dev_t dev, ino_t ino)
{
	if (!M.handles)
		return -1;
	struct node *n = node_get(dev, ino);
	if (!n)
		return -1;
	int keep = -1;
	if (n->is_reg) {
		pthread_mutex_lock(&n->lock);
		pin_open_locked(n);
		/* also while open: the last release may come before the
		 * unlink, and let go of the open's descriptor first.  Data
		 * that never went through the mount too: the backing inode
		 * is the file's data, freed at the unlink, and an open or a
		 * stat of the inode the kernel still holds failed (ESTALE) */
		keep = open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
		pthread_mutex_unlock(&n->lock);
	} else {
		/* a fifo, socket, device or symlink: the kernel may hold it
		 * (an open fifo) after its last link goes (n->kept_fd) */
		keep = open_by_handle_at(M.mount_fd, n->fh, O_PATH | O_CLOEXEC);
	}
	node_put(n);
	return keep;
}

void after_unlink(dev_t dev, ino_t ino, int keep)
{
	struct node *n = node_get(dev, ino);
	if (n) {
		pthread_mutex_lock(&n->lock);
		n->unlinked = true;
		if (n->is_reg)   /* a link less: its ctime, as the backing file's */
			changed_locked(n);
		/* an open that came after before_unlink looked (the kernel
		 * orders no OPEN against an UNLINK of the file): its
		 * descriptor, while keep (or the engine's) still holds the
		 * inode */
		if (n->is_reg && M.handles)
			pin_open_locked(n);
		if (!n->opens)
			pin_unlinked_locked(n);
		struct stat st;
		int none = -1;
		if (!n->is_reg && keep >= 0 && !fstat(keep, &st) && !st.st_nlink &&
		    atomic_compare_exchange_strong(&n->kept_fd, &none, keep))
			keep = -1;   /* the node's now, until it is freed */
		pthread_mutex_unlock(&n->lock);
		node_put(n);
	}
	if (keep >= 0)
		close(keep);
}

void after_rename(dev_t dev, ino_t ino)
{
	struct node *n = node_get(dev, ino);
	if (n) {
		node_changed(n);
		node_put(n);
	}
}

/*
 * Ghosts.  A file the kernel forgets while its data is still in the cache
 * (in handle mode, where the engine's name for the data is the inode's
 * handle) stays in the table as a ghost: no lookup, no descriptor, its
 * size and times kept, so a lookup meanwhile revives it with them.  The
 * forget costs nothing; the file's data is written back by the flusher in
 * its time.  A ghost is settled (written back if the flusher has not yet,
 * its mtime put back on the backing file) and freed by a later forget once
 * it is a minute old (M.ghost_age_ns), or at once beyond GHOST_MAX of them, a few at each
 * forget; those left at unmount are settled then.  Without handles a node keeps a
 * descriptor, and a forgotten file is written back at once; one whose
 * writeback failed with its data still in the cache stays a ghost (its
 * data is the node's), as does a ghost whose settling failed so, and is
 * tried again a minute later.
 */
#define GHOST_MAX 65536
#define GHOST_REAP 8

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ghost_add_locked(struct node *n)
{
	assert_held(&M.lock);
	n->ghost = true;
	n->gtime = mono_ns();
	n->gnext = NULL;
	n->gprev = M.gtail;
	if (M.gtail)
		M.gtail->gnext = n;
	else
		M.ghead = n;
	M.gtail = n;
	M.nghosts++;
}

static void ghost_remove_locked(struct node *n)
{
	assert_held(&M.lock);
	if (n->gprev)
		n->gprev->gnext = n->gnext;
	else
		M.ghead = n->gnext;
	if (n->gnext)
		n->gnext->gprev = n->gprev;
	else
		M.gtail = n->gprev;
	n->gprev = n->gnext = NULL;
	n->ghost = false;
	M.nghosts--;
}

/* A node found by a lookup: a ghost no longer. */
void node_revive_locked(struct node *n)
{
	assert_held(&M.lock);
	if (n->ghost)
		ghost_remove_locked(n);
}

/* Write back what a forgotten node still has in the cache and put its
 * mtime back on the backing file (a gone file's data is dropped).  False
 * when the writeback failed: the data is still in the cache, under the
 * node's name for it, and the node must stay (a ghost) for a lookup to
 * find it again (without handles that name is the node's own). */
static bool node_settle(struct node *n)
{
	bool ok = true;
	pthread_mutex_lock(&n->lock);
	drop_if_unlinked_locked(n);
	if (n->wrote) {
		wbc_file *h;
		/* WBC_O_NOERRSEEN: an error this fsync is told (its own
		 * writeback's, or an earlier one nobody was told: on_error=drop
		 * dropped the data of a file written and closed) stays the
		 * next opener's; a plain handle took it, and the user's
		 * open and fsync said 0 for the lost data */
		if (engine_open_flags(n, -1, WBC_O_NOERRSEEN, &h) == 0) {
			int err = wbc_fsync(h);
			struct wbc_file_info fi;
			if (err) {
				logmsg("writeback of a forgotten file failed: %s", wbc_strerror(err));
				/* data still in the cache (on_error=retry: at
				 * risk) keeps the node, under whose name it is;
				 * data dropped leaves nothing to keep (the error
				 * is never seen here: the node would stay for
				 * ever, a ghost retried each minute) */
				ok = !wbc_file_info(h, &fi) && !fi.unwritten_bytes;
			}
			if (ok) {
				n->unwritten = 0;
				/* a time not put back (a read-only store) keeps
				 * the node, as unwritten data does: tried again
				 * a minute later, and at unmount, which reports
				 * it; freed now, the file kept the writeback's
				 * time for good and nobody was told */
				if (restore_mtime_locked(n) < 0)
					ok = false;
			}
			wbc_file_close(h);
		}
	}
	pthread_mutex_unlock(&n->lock);
	return ok;
}

/* One forgetting pass over @n ends (@linger: it may become a ghost);
 * the node is freed when nothing holds it.  Passes overlap (a reaper
 * settling a ghost that a lookup revived and the kernel forgot again;
 * two forgets around a lookup): the last one decides, with what every
 * one of them asked, so data a pass left in the cache (writes after
 * another's settling, a failed writeback) keeps the node a ghost. */
static void forget_done(struct node *n, bool linger)
{
	pthread_mutex_lock(&M.lock);
	n->linger |= linger;
	/* a ghost held by node_get: still one */
	bool unused = !--n->forgetting && !n->nlookup && !n->ghost;
	if (!n->forgetting) {
		linger = n->linger;
		n->linger = false;
	}
	if (unused && linger && n->hashed) {
		ghost_add_locked(n);
		unused = false;
	} else if (unused && n->hashed) {
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

/* Settle and free the ghosts that are due. */
static void ghosts_reap(void)
{
	for (int i = 0; i < GHOST_REAP; i++) {
		pthread_mutex_lock(&M.lock);
		struct node *n = M.ghead;
		if (!n || (M.nghosts <= GHOST_MAX && mono_ns() - n->gtime < M.ghost_age_ns)) {
			pthread_mutex_unlock(&M.lock);
			return;
		}
		ghost_remove_locked(n);
		n->forgetting++;
		pthread_mutex_unlock(&M.lock);
		/* a failed writeback: a ghost again, tried again later */
		forget_done(n, !node_settle(n));
	}
}

/* A ghost out of the table (its inode number taken by another inode):
 * settled and freed now.  Caller: it made n->forgetting one more. */
void ghost_stale(struct node *n)
{
	node_settle(n);
	forget_done(n, false);
}

static void ghost_stale_job(void *n)
{
	ghost_stale(n);
}

/* A forget's settling and reaping, for a helper (below). */
static void forget_job(void *arg)
{
	struct node *n = arg;
	forget_done(n, !node_settle(n));
	ghosts_reap();
}

/*
 * The kernel dropped its last lookup of a node.  The node stays in the
 * table while its data is dropped (unlinked) or written back, or as a
 * ghost (above), so a lookup meanwhile revives it instead of making a
 * second node that would read the backing file's stale size; it is freed
 * by the last forget that finds it unused.
 */
void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = node_of(ino);
	pthread_mutex_lock(&M.lock);
	if (n == &M.root || (n->nlookup -= nlookup) > 0) {
		pthread_mutex_unlock(&M.lock);
		return;
	}
	n->forgetting++;
	pthread_mutex_unlock(&M.lock);
	bool linger = false;
	if (M.handles && n->is_reg) {
		pthread_mutex_lock(&n->lock);
		drop_if_unlinked_locked(n);
		linger = n->wrote;
		pthread_mutex_unlock(&n->lock);
	}
	/* A ring thread (a lookup given back by READDIRPLUS or a failed
	 * CREATE: FORGET itself comes through /dev/fuse) must not wait for
	 * writeback (uring.c): settling data goes to a helper, and ghosts
	 * are reaped by the next FORGET, which a worker serves. */
	bool ring = uring_on_ring();
	if (!linger && ring) {
		pthread_mutex_lock(&n->lock);
		bool slow = n->wrote || M.remote;
		pthread_mutex_unlock(&n->lock);
		if (slow && uring_later(forget_job, n))
			return;
	}
	if (!linger)
		linger = !node_settle(n);
	forget_done(n, linger);
	if (!ring)
		ghosts_reap();
}
