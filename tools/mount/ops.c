/*
 * The FUSE low-level operations: metadata passes through to the backing
 * inode of a node (see node.c), file data goes through the engine.
 */
#include "mount.h"

#include <dirent.h>
#include <sched.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = 1u << 20;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* data is cached once, here: no FUSE writeback cache (see the man
	 * page, KERNEL CACHE) */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* no atomic O_TRUNC: the kernel sends an open's O_TRUNC with the
	 * OPEN, which it does not serialize with the file's writes (it holds
	 * the inode's lock only with the writeback cache), so a truncate
	 * went between the parts of a throttled write that was still being
	 * answered (reply.c): the write returned whole, its first part was
	 * cut and the rest written past the hole.  Without it the kernel
	 * truncates through SETATTR under the inode's lock, after the write */
	conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
	/* libfuse asks for READDIRPLUS (and the kernel's adaptive use of it)
	 * since op_readdirplus exists */
	if (!M.readdirplus)
		conn->want &= ~(unsigned)(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
	/* ACLs: the kernel enforces them (from the backing files' own
	 * system.posix_acl_* attributes), and the backing file system
	 * applies default ACLs and the caller's umask to new entries, as it
	 * would for the caller (creation_mode) */
	if (conn->capable & FUSE_CAP_POSIX_ACL) {
		conn->want |= FUSE_CAP_POSIX_ACL;
		M.posix_acl = true;
		if (conn->capable & FUSE_CAP_DONT_MASK) {
			conn->want |= FUSE_CAP_DONT_MASK;
			M.dont_mask = true;
		}
	}
}

/*
 * The mode to make a new entry with.  Under DONT_MASK the kernel sends it
 * unmasked with the caller's umask, which the backing file system applies
 * as it would for the caller: not where the directory has a default ACL.
 * It applies the process's umask, so each thread that makes entries gets
 * an umask of its own (CLONE_FS unshared, once); where that cannot be
 * done, the umask is applied here (and a default ACL then meets a masked
 * mode, as without DONT_MASK).
 */
static mode_t creation_mode(fuse_req_t req, mode_t mode)
{
	static __thread int own;          /* 1: an umask of its own; -1: none */
	static __thread mode_t current;   /* that umask, once set here */
	if (!M.dont_mask)
		return mode;
	mode_t um = fuse_req_ctx(req)->umask & 0777;
	if (!own) {
		own = unshare(CLONE_FS) == 0 ? 1 : -1;
		/* (a thread started by a worker copies that worker's umask:
		 * set it here whatever it is) */
		current = (mode_t)-1;
	}
	if (own < 0)
		return mode & ~um;
	if (um != current) {
		umask(um);
		current = um;
	}
	return mode;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int err = do_lookup(node_of(parent), name, &e);
	if (err == -ENOENT) {
		/* a negative entry the kernel may cache: every change of the
		 * namespace comes through this mount */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = M.negative_timeout;
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
		fuse_reply_attr(req, &st, M.attr_timeout);
}


/* chmod of the inode open at @fd (O_PATH): fchmodat2 with AT_EMPTY_PATH
 * (Linux 6.6) walks no path; before it, through /proc/self/fd. */
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
static int chmod_fd(int fd, mode_t mode)
{
	static atomic_bool no_fchmodat2;
	if (!atomic_load_explicit(&no_fchmodat2, memory_order_relaxed)) {
		if (!syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH))
			return 0;
		if (errno != ENOSYS && errno != EINVAL)
			return -1;
		atomic_store_explicit(&no_fchmodat2, true, memory_order_relaxed);
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return chmod(path, mode);
}

/* Groups of the caller of @req: a malloc'd list, its length in *@n; NULL
 * when they cannot be had. */
static gid_t *groups_of(fuse_req_t req, int *n)
{
	int cap = 64;
	for (int tries = 0; tries < 4; tries++) {
		gid_t *list = malloc((size_t)cap * sizeof(*list));
		if (!list)
			return NULL;
		int got = fuse_req_getgroups(req, cap, list);
		if (got >= 0 && got <= cap) {
			*n = got;
			return list;
		}
		free(list);
		if (got < 0)
			return NULL;
		cap = got > cap ? got : cap * 16;
	}
	return NULL;
}

/* Is the caller of @req in group @gid (its own or a supplementary one)?
 * Unknown (no /proc): no, so that a set-group-ID bit goes rather than
 * stays for a caller who may not keep it. */
static bool caller_in_group(fuse_req_t req, gid_t gid)
{
	if (fuse_req_ctx(req)->gid == gid)
		return true;
	int n;
	gid_t *list = groups_of(req, &n);
	bool in = false;
	for (int i = 0; list && i < n; i++)
		in |= list[i] == gid;
	free(list);
	return in;
}

/*
 * The kernel's rule for set-user-ID and set-group-ID files (it leaves the
 * work to the file system, FUSE_CAP_HANDLE_KILLPRIV): a write or truncate
 * by a caller without CAP_FSETID clears S_ISUID, and S_ISGID where group
 * execute is set, or where the caller is not in the file's group (its
 * setattr_should_drop_sgid: without group execute the bit stays only for
 * the group's members).
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
		mode_t kill = S_ISUID;
		if ((st.st_mode & S_ISGID) &&
		    ((st.st_mode & S_IXGRP) || !caller_in_group(req, st.st_gid)))
			kill |= S_ISGID;
		if (st.st_mode & kill) {
			if (chmod_fd(fd, st.st_mode & 07777 & ~kill))
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

/* What a chown clears (the kernel's chown_common and
 * setattr_should_drop_sgid), whoever the caller: S_ISUID; S_ISGID with
 * group execute, or for a caller other than root outside the file's
 * group; and the file capability.  @fd: the node's descriptor. */
static void kill_chown(fuse_req_t req, struct node *n, int fd)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (getxattr(path, CAPS_XATTR, NULL, 0) >= 0 && removexattr(path, CAPS_XATTR))
		logmsg("removing a file capability failed: %s", strerror(errno));
	atomic_store_explicit(&n->caps, 0, memory_order_relaxed);
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) ||
	    !(st.st_mode & (S_ISUID | S_ISGID)))
		return;
	mode_t kill = S_ISUID;
	if ((st.st_mode & S_ISGID) &&
	    ((st.st_mode & S_IXGRP) ||
	     (fuse_req_ctx(req)->uid != 0 && !caller_in_group(req, st.st_gid))))
		kill |= S_ISGID;
	if ((st.st_mode & kill) && chmod_fd(fd, st.st_mode & 07777 & ~kill))
		logmsg("clearing set-id bits failed: %s", strerror(errno));
}

/* Why the daemon could not open a backing file for writing (the engine
 * fell back to a read-only descriptor, n->backing_ro): a read-only file
 * system says so, as it would itself; otherwise the daemon may not write
 * the file (not root). */
static int backing_ro_err(void)
{
	struct statvfs sv;
	return !fstatvfs(M.root_fd, &sv) && (sv.f_flag & ST_RDONLY) ? -EROFS : -EACCES;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	int err = 0;
	struct stat st;
	int fd = nfd(n);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	/* an inode's type never changes: the node's last seen mode has it */
	st.st_mode = atomic_load_explicit(&n->mode, memory_order_relaxed);
	bool lnk = S_ISLNK(st.st_mode);
	/* Nothing to set: the kernel's chown(2) to the same owner and group
	 * (-1, -1), which on a local file system still clears the set-id
	 * bits and the file capability of anything but a directory
	 * (chown_common's ATTR_KILL_*).  Under HANDLE_KILLPRIV the kernel
	 * leaves that to the file system and sends a SETATTR of nothing. */
	if (!to_set && !S_ISDIR(st.st_mode) && !lnk)
		kill_chown(req, n, fd);
	if (!err && (to_set & FUSE_SET_ATTR_MODE)) {
		if (lnk)
			err = -EOPNOTSUPP;
		else if (chmod_fd(fd, attr->st_mode & 07777))
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
			/* a truncate by name whose engine handle could only
			 * read the file (a read-only backing store, remounted
			 * so under the mount): its ftruncate would fail
			 * EINVAL, which is no answer a truncate(2) gives for
			 * that; say what the open for writing would */
			if (tmp && n->backing_ro)
				err = backing_ro_err();
			if (!err)
				err = wbc_truncate(h, (uint64_t)attr->st_size);
			if (!err && M.remote)
				err = backing_set_size(n, (uint64_t)attr->st_size);
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
		if (utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
			err = -errno;
	}
	if (err) {
		nfd_put(n, fd);
		fuse_reply_err(req, -err);
		return;
	}
	if (!fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		if ((to_set & FUSE_SET_ATTR_MTIME) && !lnk) {
			/* the file's mtime from now on, also after writeback */
			pthread_mutex_lock(&n->lock);
			/* data still to be written back (open, or not yet
			 * settled) would move the backing mtime */
			if (n->wrote && (n->opens || n->size_known)) {
				/* the time given, not the one read back: a
				 * writeback landing in between set that to
				 * now; read back is only the given one cut to
				 * the store's granularity (at most 2 s down) */
				n->mtime = st.st_mtim;
				if (!(to_set & FUSE_SET_ATTR_MTIME_NOW)) {
					struct timespec lo = { attr->st_mtim.tv_sec - 2,
							       attr->st_mtim.tv_nsec };
					if (ts_before(attr->st_mtim, st.st_mtim) ||
					    ts_before(st.st_mtim, lo))
						n->mtime = attr->st_mtim;
				}
				n->mtime_set = true;
				n->mtime_explicit = true;
			}
			pthread_mutex_unlock(&n->lock);
		}
		node_changed(n);
		node_attr(n, &st);
	} else {
		err = -errno;
	}
	nfd_put(n, fd);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, M.attr_timeout);
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
 * file system already made it (and a new directory kept the bit).
 * new_owner: the owner and group to give (-1: the one the backing file
 * system gave, the daemon's or the directory's); false when both are
 * already right, as for a caller with the daemon's ids. */
static bool new_owner(fuse_req_t req, struct node *parent, uid_t *uid, gid_t *gid)
{
	if (!M.as_root)
		return false;
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	*uid = ctx->uid == M.euid ? (uid_t)-1 : ctx->uid;
	*gid = ctx->gid == M.egid ? (gid_t)-1 : ctx->gid;
	struct stat pst;
	int fd;
	if (*gid != (gid_t)-1 && (fd = nfd(parent)) >= 0 &&
	    !fstatat(fd, "", &pst, AT_EMPTY_PATH) && (pst.st_mode & S_ISGID))
		*gid = (gid_t)-1;
	return *uid != (uid_t)-1 || *gid != (gid_t)-1;
}

/* The chown of a new entry clears its set-user-ID and set-group-ID bits
 * (a file, a FIFO, a device: any but a directory), root's chown too: the
 * caller made it with them (mknod), and they go back, as op_create does. */
static void own_new(fuse_req_t req, struct node *parent, const char *name)
{
	uid_t uid;
	gid_t gid;
	if (!new_owner(req, parent, &uid, &gid))
		return;
	int pf = nfd(parent);
	int fd = pf < 0 ? -1 : openat(pf, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		logmsg("chown of a new entry failed: %s", strerror(errno));
	} else if ((st.st_mode & (S_ISUID | S_ISGID)) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
		mode_t m = st.st_mode & 07777;
		/* set-group-ID with group execute, of a group the caller is
		 * not in (the directory's): the kernel's mode_strip_sgid */
		if (gid == (gid_t)-1 && (m & S_IXGRP) && st.st_gid != fuse_req_ctx(req)->gid &&
		    !caller_in_group(req, st.st_gid))
			m &= ~(mode_t)S_ISGID;
		if (chmod_fd(fd, m))
			logmsg("mode of a new entry: %s", strerror(errno));
	}
	if (fd >= 0)
		close(fd);
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
	reply_new(req, p, name, fd < 0 ? -1 : mknodat(fd, name, creation_mode(req, mode), rdev));
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *p = node_of(parent);
	int fd = nfd(p);
	reply_new(req, p, name, fd < 0 ? -1 : mkdirat(fd, name, creation_mode(req, mode)));
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
	if (err == ENOENT && nf >= 0 && pf >= 0) {
		/* before Linux 6.10 AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH (a
		 * daemon not run as root): through /proc, which does not */
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", nf);
		err = linkat(AT_FDCWD, path, pf, newname, AT_SYMLINK_FOLLOW) ? errno : 0;
	}
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
	int keep = !S_ISDIR(st.st_mode) ? before_unlink(st.st_dev, st.st_ino) : -1;
	if (unlinkat(fd, name, 0)) {
		int e = errno;
		if (keep >= 0)
			close(keep);
		fuse_reply_err(req, e);
		return;
	}
	if (!S_ISDIR(st.st_mode))
		after_unlink(st.st_dev, st.st_ino, keep);
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
		   !fstatat(npf, newname, &victim, AT_SYMLINK_NOFOLLOW) && !S_ISDIR(victim.st_mode);
	int keep = had ? before_unlink(victim.st_dev, victim.st_ino) : -1;
	if (renameat2(pf, name, npf, newname, flags)) {
		int e = errno;
		if (keep >= 0)
			close(keep);
		fuse_reply_err(req, e);
		return;
	}
	if (had)
		after_unlink(victim.st_dev, victim.st_ino, keep);
	/* the inodes renamed: their ctime (a node with written data shows
	 * its own) */
	struct stat rs;
	if (!fstatat(npf, newname, &rs, AT_SYMLINK_NOFOLLOW) && S_ISREG(rs.st_mode))
		after_rename(rs.st_dev, rs.st_ino);
	if ((flags & RENAME_EXCHANGE) && !fstatat(pf, name, &rs, AT_SYMLINK_NOFOLLOW) &&
	    S_ISREG(rs.st_mode))
		after_rename(rs.st_dev, rs.st_ino);
	fuse_reply_err(req, 0);
}

/* ---- files ---- */

/*
 * Which opens bypass the kernel's page cache (direct_io).  Data is then
 * cached once, in the engine; but a kernel without
 * FUSE_DIRECT_IO_ALLOW_MMAP (before 6.6; libfuse 3.14 cannot ask for it:
 * conn.c does) refuses a shared mapping (mmap MAP_SHARED: databases,
 * fio's mmap engine) of such a file.  By default (direct_io=auto) a
 * write-only open, which cannot be mapped, is direct — streaming writers,
 * cp, tar — and so is a read-write one where the kernel maps direct_io
 * files (fs_mark, fio, databases: a small write is then one request, with
 * no GETXATTR of security.capability before it); otherwise, and for
 * read-only opens, the open goes through the kernel's page cache, written
 * through to the engine at each write (no FUSE writeback cache: the
 * engine's throttle stays the only one).  They stay coherent: a direct
 * write to a file that also has cached opens invalidates the kernel's
 * pages it covers (the kernel does too, with ALLOW_MMAP, around every
 * direct I/O), and an open never keeps the kernel's pages of a previous
 * one.
 */
static bool open_direct(const struct fuse_file_info *fi)
{
	int acc = fi->flags & O_ACCMODE;
	return M.dio == DIO_ALWAYS ||
	       (M.dio == DIO_AUTO && (acc == O_WRONLY || (acc == O_RDWR && M.direct_mmap)));
}

/* An open of @n (OPEN, or CREATE of a file it made): its engine handle.
 * O_TRUNC is never the open's to do: the kernel sends it as a SETATTR
 * (no atomic O_TRUNC, op_init), and a create truncates nothing (an
 * existing file is opened by the kernel's retry, op_create). */
static int open_common(fuse_req_t req, struct node *n, struct fuse_file_info *fi, int wfd)
{
	wbc_file *h;
	pthread_mutex_lock(&n->lock);
	int err = engine_open_wfd(n, wfd, &h);
	if (!err && !n->opens) {
		err = engine_open_wfd(n, wfd, &n->wf);
		if (err)
			wbc_file_close(h);
	}
	/* the engine could only read the file (the daemon may not write
	 * it: not root, or a read-only backing file system): a writable
	 * open is refused here, its writes would be accepted and never
	 * written back */
	if (!err && n->backing_ro &&
	    ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))) {
		wbc_file_close(h);
		if (!n->opens) {
			wbc_file_close(n->wf);
			n->wf = NULL;
		}
		err = backing_ro_err();
	}
	bool direct = open_direct(fi);
	if (!err) {
		node_hold_fd(n);
		n->opens++;
		if (!direct)
			atomic_fetch_add(&n->kcache_opens, 1);
	}
	pthread_mutex_unlock(&n->lock);
	if (err)
		return err;
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = direct;
	fi->keep_cache = 0;
	/* close sends no FLUSH where it has nothing to report: a read-only
	 * open (or any, under -o noflush=1: writeback errors then reach
	 * fsync only, as on a local file system) */
	fi->noflush = M.noflush || (fi->flags & O_ACCMODE) == O_RDONLY;
	return 0;
}

static void release_handle(struct node *n, struct fuse_file_info *fi);

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	if (!n->is_reg) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	int err = open_common(req, n, fi, -1);
	if (err)
		fuse_reply_err(req, -err);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		release_handle(n, fi);   /* the open was interrupted */
}

/*
 * create: the file is made with O_EXCL, so the daemon knows it made it
 * (and owns it to the caller); for an existing one (made beside the
 * mount, the kernel having seen no entry) the kernel is told to look
 * again (ESTALE), unless the caller asked O_EXCL.  The descriptor the
 * create returned gives the attributes and the node: five system calls
 * for a new file.
 */
static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct node *p = node_of(parent);
	int pf = nfd(p);
	/* only a new file is opened here (O_EXCL: an existing one is the
	 * kernel's retry's, below), so never with O_TRUNC: an existing file
	 * cut here lost its data to a create that failed after (a file of
	 * another file system: EXDEV) */
	int how = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
	/* a new file the daemon may not write (not root, no owner write
	 * bit: cp or tar of a 0444 file, git's objects): made writable,
	 * and the engine writes through this descriptor, as a reopen for
	 * writing would be refused */
	mode_t um = M.dont_mask ? fuse_req_ctx(req)->umask : 0;   /* what the file will get */
	bool keep_w = (fi->flags & O_ACCMODE) != O_RDONLY && !(mode & ~um & S_IWUSR) &&
		      geteuid() != 0;
	mode = creation_mode(req, mode);
	int fd = pf < 0 ? -1 : openat(pf, name, how | (keep_w ? O_RDWR : 0) | O_CREAT | O_EXCL, mode);
	bool made = fd >= 0;
	keep_w = keep_w && made;
	if (fd < 0 && pf >= 0 && errno == EEXIST && !(fi->flags & O_EXCL)) {
		/* The kernel thought no file was there (a negative entry of
		 * a name since made beside the mount).  ESTALE: its open
		 * looks the name up again (LOOKUP_REVAL) and opens the file
		 * as any open does, checking the caller's permission itself,
		 * with O_TRUNC a SETATTR under the file's lock, ordered
		 * against the file's writes.  Opened here, the truncate fell
		 * in the middle of another process's write (a 48 MiB write
		 * read back with its first 9 MB zeros). */
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	uid_t uid;
	gid_t gid;
	struct stat made_st;
	if (made && new_owner(req, p, &uid, &gid) && !fstat(fd, &made_st)) {
		if (fchown(fd, uid, gid))
			logmsg("chown of a new entry failed: %s", strerror(errno));
		/* a chown clears the set-id bits, root's too: the caller
		 * made the file with them (as on a local file system) */
		else if (made_st.st_mode & (S_ISUID | S_ISGID)) {
			mode_t m = made_st.st_mode & 07777;
			/* set-group-ID with group execute, of a group the
			 * caller is not in (the directory's): the kernel's
			 * mode_strip_sgid drops it */
			if (gid == (gid_t)-1 && (m & S_IXGRP) &&
			    made_st.st_gid != fuse_req_ctx(req)->gid &&
			    !caller_in_group(req, made_st.st_gid))
				m &= ~(mode_t)S_ISGID;
			if (fchmod(fd, m))
				logmsg("mode of a new file: %s", strerror(errno));
		}
	}
	struct fuse_entry_param e = { 0 };
	struct stat st;
	int wfd = -1;
	int err = fstat(fd, &st) ? -errno : 0;
	if (err)
		close(fd);
	else if (!S_ISREG(st.st_mode)) {
		close(fd);
		err = -EISDIR;
	} else {
		wfd = keep_w ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
		err = enter_node(fd, &st, &e);   /* takes fd */
	}
	if (!err)
		err = open_common(req, node_of(e.ino), fi, wfd);
	if (wfd >= 0)
		close(wfd);
	if (!err) {
		if (fuse_reply_create(req, &e, fi) == -ENOENT) {
			/* interrupted: the kernel has neither the open nor the
			 * entry (the file stays, as after any create) */
			release_handle(node_of(e.ino), fi);
			forget_one(e.ino, 1);
		}
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

/* @inval: a direct write to a file that also has opens through the
 * kernel's page cache (decided once, by op_write) */
static void write_now(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi, bool inval)
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
	/* not once the session ends: the kernel may write a dirty mapped
	 * page of the range back first, and no thread reads that request
	 * any more (a worker is not cancelled in a request: libfuse's loop
	 * waited for this one, at SIGTERM, for ever) */
	if (inval && r && !fuse_session_exited(M.se))
		fuse_lowlevel_notify_inval_inode(M.se, ino, off, (off_t)r);
	write_after(req, h, (size_t)r, buf + r, pause ? size - (size_t)r : 0,
		    (uint64_t)off + (uint64_t)r, pause);
}

/* A write that waits (O_DSYNC) or invalidates the kernel's pages, which
 * may send writes to the queue of this thread's CPU: off a ring thread
 * (uring.c), to a helper.  The data stays in the ring entry's buffer
 * until the answer. */
struct write_job {
	fuse_req_t req;
	fuse_ino_t ino;
	const char *buf;
	size_t size;
	off_t off;
	struct fuse_file_info fi;
	bool inval;
};

static void write_job_run(void *arg)
{
	struct write_job *j = arg;
	write_now(j->req, j->ino, j->buf, j->size, j->off, &j->fi, j->inval);
	free(j);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	/* the backing file system's largest file, as its write would check
	 * (generic_write_check_limits): past it EFBIG, up to it a short write */
	if ((uint64_t)off >= M.max_file) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	if (size > M.max_file - (uint64_t)off)
		size = (size_t)(M.max_file - (uint64_t)off);
	bool inval = !fi->writepage && open_direct(fi) &&
		     atomic_load_explicit(&node_of(ino)->kcache_opens, memory_order_relaxed);
	if ((inval || (fi->flags & O_DSYNC)) && uring_on_ring()) {
		struct write_job *j = malloc(sizeof(*j));
		if (j) {
			*j = (struct write_job){ req, ino, buf, size, off, *fi, inval };
			if (uring_later(write_job_run, j))
				return;
			free(j);
		}
	}
	write_now(req, ino, buf, size, off, fi, inval);
}

/*
 * fallocate: space is reserved in the backing file (KEEP_SIZE there: the
 * size is the engine's), and the engine's size grows where the mode asks;
 * a punched or zeroed range is written as zeros through the engine, so
 * the cache, the size and the backing file agree however the data is
 * cached.  Other modes: EOPNOTSUPP, as a file system without them.
 */
/* fallocate(@mode) on @n's backing file (opened for writing through
 * /proc: the node's descriptor is O_PATH or read-only): 0 or -errno. */
static int backing_fallocate(struct node *n, int mode, off_t off, off_t len)
{
	char path[64];
	int fd = nfd(n), wfd = -1, err = 0;
	if (fd >= 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		wfd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (wfd < 0 || fallocate(wfd, mode, off, len))
		err = -errno;
	if (wfd >= 0)
		close(wfd);
	nfd_put(n, fd);
	return err;
}

/* Zeros through the engine over [@pos, @stop) of @h: 0 or -errno. */
static int write_zeros(wbc_file *h, uint64_t pos, uint64_t stop)
{
	static const char zeros[1 << 16];
	while (pos < stop) {
		ssize_t r = wbc_pwrite(h, zeros, (size_t)MINU(stop - pos, sizeof(zeros)), pos);
		if (r <= 0)
			return r < 0 ? (int)r : -EIO;
		pos += (uint64_t)r;
	}
	return 0;
}

/*
 * A punch of [@off, @stop) (within the size): the range's dirty pages
 * written back first, so that each cached page of it holds what the
 * backing file holds (zeros over its holes); then zeros through the
 * engine only where the backing file has data (SEEK_DATA), written back,
 * and the range punched there, which frees its space.  Zeros written
 * over the whole range allocated it in the backing file before the
 * punch: a punch of a sparse file (a VM image's discard, fallocate -d)
 * needed the range's size free there, failed with ENOSPC where it was
 * not, and left the zeros dirty, never written.  Where the backing file
 * cannot be read for its holes (a remote backend's data is not there; a
 * daemon that may not open it), the whole range gets zeros.
 */
/* Write [@off, @stop) of @n back and wait: 0 or its error.  Through an
 * engine handle of its own: the open file's would count an earlier
 * write's error as told, and its fsync then said 0 for the lost write
 * (the fallocate fails with it; the open file's fsync still tells it). */
static int write_back_range(struct node *n, uint64_t off, uint64_t stop)
{
	wbc_file *own;
	pthread_mutex_lock(&n->lock);
	int err = engine_open(n, &own);
	pthread_mutex_unlock(&n->lock);
	if (err)
		return err;
	err = wbc_fsync_range(own, off, stop - off, 1);
	wbc_file_close(own);
	return err;
}

static int punch(struct node *n, wbc_file *h, uint64_t off, uint64_t stop)
{
	char path[64];
	int fd = M.remote ? -1 : nfd(n), rfd = -1, err;
	if (fd >= 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		rfd = open(path, O_RDONLY | O_CLOEXEC);
		nfd_put(n, fd);
	}
	if (rfd < 0) {
		err = write_zeros(h, off, stop);
	} else {
		err = write_back_range(n, off, stop);
		for (uint64_t pos = off; !err && pos < stop;) {
			off_t d = lseek(rfd, (off_t)pos, SEEK_DATA), e;
			if (d < 0 && errno == ENXIO)
				break;           /* no data from @pos on */
			if (d < 0)
				d = (off_t)pos, e = (off_t)stop;   /* no SEEK_DATA: all data */
			else if ((uint64_t)d >= stop)
				break;
			else if ((e = lseek(rfd, d, SEEK_HOLE)) <= d || (uint64_t)e > stop)
				e = (off_t)stop;   /* (an error, or the file changed meanwhile:
						    * no progress would loop for ever) */
			err = write_zeros(h, (uint64_t)d, (uint64_t)e);
			pos = (uint64_t)e;
		}
		close(rfd);
	}
	/* the zeros written back, then the backing file's range punched;
	 * the kernel holds the file's writers off meanwhile */
	if (!err)
		err = write_back_range(n, off, stop);
	if (!err) {
		err = backing_fallocate(n, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
					(off_t)(stop - off));
		/* a file system without holes, or a file the daemon (not
		 * root) may not open for writing: the zeros stand */
		if (err == -EOPNOTSUPP || err == -EACCES || err == -EPERM)
			err = 0;
	}
	return err;
}

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
	if ((uint64_t)(off + len) > M.max_file) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	struct wbc_file_info info;
	int err = wbc_file_info(h, &info);
	uint64_t end = (uint64_t)off + (uint64_t)len;
	/* a punch or zero range wholly past the end (KEEP_SIZE) changes
	 * nothing the engine or the backing file sees, yet moves the file's
	 * mtime, as on ext4 */
	bool untouched = false;
	if (!err && !(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))) {
		err = backing_fallocate(n, FALLOC_FL_KEEP_SIZE, off, len);
		/* a file the daemon (not root) may not open for writing: one
		 * of mode 0444, made so or chmod'ed while the caller's open
		 * for writing lives (cp, install -m 0444, rsync --preallocate).
		 * The caller may: the space is not reserved, the size grows
		 * as asked (it failed with EACCES, where a local file system
		 * succeeds) */
		if (err == -EACCES)
			err = 0;
	} else if (!err && (mode & FALLOC_FL_PUNCH_HOLE)) {
		uint64_t stop = MINU(end, info.size);
		if (stop > (uint64_t)off)
			err = punch(n, h, (uint64_t)off, stop);
		else
			untouched = true;
	} else if (!err) {
		/* zeros over the range, within the size with KEEP_SIZE */
		uint64_t stop = (mode & FALLOC_FL_KEEP_SIZE) ? MINU(end, info.size) : end;
		if (stop > (uint64_t)off)
			err = write_zeros(h, (uint64_t)off, stop);
		else
			untouched = true;
	}
	if (!err && !(mode & FALLOC_FL_KEEP_SIZE) && end > info.size)
		err = wbc_truncate(h, end);
	if (!err && untouched) {
		/* ... so the backing file's mtime moves here: left as it was
		 * (no writeback follows to move it), the settle at the close
		 * took the node's later one for a change made beside the
		 * mount and reported the old one again, for good (an mtime
		 * set before with touch -d came back) */
		int fd = nfd(n);
		const struct timespec now[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_NOW } };
		if (fd >= 0 && utimensat(fd, "", now, AT_EMPTY_PATH))
			logmsg("mtime of a file after fallocate: %s", strerror(errno));
		nfd_put(n, fd);
	}
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
	/* an error for every close of the open file's descriptors (dup,
	 * fork), and for its fsync: not marked seen (as NFS's flush) */
	int err = wbc_file_peek_error((wbc_file *)(uintptr_t)fi->fh);
	fuse_reply_err(req, -err);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	wbc_file *h = (wbc_file *)(uintptr_t)fi->fh;
	int err = datasync ? wbc_fdatasync(h) : wbc_fsync(h);
	if (!err && !datasync) {
		struct node *n = node_of(ino);
		pthread_mutex_lock(&n->lock);
		bool explicit = restore_mtime_locked(n) > 0;
		pthread_mutex_unlock(&n->lock);
		/* the writeback moved the backing mtime and the flush made
		 * that durable; a time set explicitly, put back after it, is
		 * made durable too (a crash lost it: rsync and make then see
		 * another time).  Only then: a write's own time is a moment
		 * before the writeback's, and one more flush per fsync of
		 * every written file would cost a database its commits. */
		if (explicit)
			err = wbc_fsync(h);
	}
	fuse_reply_err(req, -err);
}

/* The end of an open of @n: RELEASE, or an open whose answer found no
 * caller (interrupted: fuse_reply_open/create gave -ENOENT, and no
 * RELEASE will come). */
static void release_handle(struct node *n, struct fuse_file_info *fi)
{
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
			/* the data is remote: the backing file, sparse, keeps the
			 * size for the next mount */
			if (M.remote && backing_set_size(n, info.size))
				logmsg("cannot set the size of a backing file: %s", strerror(errno));
		}
		wbc_file_close(n->wf);
		n->wf = NULL;
		/* its data dropped at forget (a file unlinked beside the
		 * mount is found then too) */
		if (n->unlinked)
			pin_unlinked_locked(n);
	}
	/* after the pin: the open's descriptor (before_unlink's) kept the
	 * unlinked inode, whose handle opens no more once it is freed */
	node_drop_fd(n);
	pthread_mutex_unlock(&n->lock);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	release_handle(node_of(ino), fi);
	fuse_reply_err(req, 0);
}

/* ---- directories ---- */

struct dirh {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
	struct dirh *prev, *next;   /* on Dirs.open, under Dirs.lock */
};

/* The open directory handles: those the kernel never released (the
 * daemon ended by a signal while a program held a directory open) are
 * closed at exit.  Dirs.lock is a leaf (mount.h). */
static struct {
	pthread_mutex_t lock;
	struct dirh *open;
} Dirs = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void dirh_link(struct dirh *d)
{
	pthread_mutex_lock(&Dirs.lock);
	d->next = Dirs.open;
	if (d->next)
		d->next->prev = d;
	Dirs.open = d;
	pthread_mutex_unlock(&Dirs.lock);
}

static void dirh_free(struct dirh *d)
{
	pthread_mutex_lock(&Dirs.lock);
	if (d->prev)
		d->prev->next = d->next;
	else
		Dirs.open = d->next;
	if (d->next)
		d->next->prev = d->prev;
	pthread_mutex_unlock(&Dirs.lock);
	closedir(d->dp);
	free(d);
}

void dirs_close_all(void)
{
	while (Dirs.open)
		dirh_free(Dirs.open);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dirh *d = calloc(1, sizeof(*d));
	int nf = nfd(node_of(ino));
	int fd = nf < 0 ? -1 : openat(nf, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && nf >= 0 && errno == EACCES) {
		/* "." is a lookup in the directory, which needs its search
		 * (x) permission: a daemon not run as root was refused a
		 * directory its owner may read but not search (mode 0644),
		 * which a local file system lists.  Through /proc only its
		 * read permission is checked, as for open(2) of it */
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", nf);
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (!d || fd < 0 || !(d->dp = fdopendir(fd))) {
		int e = d ? errno : ENOMEM;
		if (fd >= 0)
			close(fd);
		free(d);
		fuse_reply_err(req, e);
		return;
	}
	dirh_link(d);
	fi->fh = (uint64_t)(uintptr_t)d;
	if (fuse_reply_open(req, fi) == -ENOENT)
		dirh_free(d);   /* interrupted: no RELEASEDIR will come */
}

/*
 * READDIR and READDIRPLUS.  With plus, each entry but "." and ".." is
 * looked up as LOOKUP would (a node with one more lookup, the attributes
 * with the cache's size and times), so that `ls -l`, find, du, rsync and
 * tar read a directory's attributes in one request per buffer instead of
 * a LOOKUP per entry.  An entry that does not fit is looked up again by
 * the next call: its lookup is given back (forget_one).  One that vanished
 * between readdir and the lookup goes without attributes (node id 0: the
 * kernel then looks it up itself, if asked).
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
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
		const char *name = d->entry->d_name;
		size_t n;
		if (plus) {
			struct fuse_entry_param e;
			bool dots = name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
			if (dots || do_lookup(node_of(ino), name, &e)) {
				memset(&e, 0, sizeof(e));
				e.attr = st;
			}
			n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						   d->entry->d_off);
			if (n > size - used) {
				if (e.ino)
					forget_one(e.ino, 1);
				break;
			}
		} else {
			n = fuse_add_direntry(req, buf + used, size - used, name, &st,
					      d->entry->d_off);
			if (n > size - used)
				break;
		}
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

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	dirh_free((struct dirh *)(uintptr_t)fi->fh);
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
	if (fstatvfs(M.root_fd, &sv)) {
		fuse_reply_err(req, errno);
		return;
	}
	/* the data still in the cache will take room there: free space
	 * without it (as ext4 counts its delayed allocations), so that df
	 * does not promise what the writeback will not find */
	struct wbc_dev_stats ds;
	if (!M.remote && sv.f_frsize && !wbc_dev_stats(M.dev, &ds)) {
		uint64_t pending = (ds.dirty_bytes + ds.writeback_bytes + sv.f_frsize - 1) / sv.f_frsize;
		sv.f_bfree = sv.f_bfree > pending ? sv.f_bfree - pending : 0;
		sv.f_bavail = sv.f_bavail > pending ? sv.f_bavail - pending : 0;
	}
	fuse_reply_statfs(req, &sv);
}

/* ---- extended attributes (not on symlinks: the path would follow) ---- */

/* A path naming the node's inode for the *xattr() calls: returns its
 * descriptor (give it back with nfd_put()) or -errno. */
static int xattr_path(struct node *n, char *path, size_t len)
{
	/* an inode's type never changes: the node's last seen mode has it */
	if (S_ISLNK(atomic_load_explicit(&n->mode, memory_order_relaxed)))
		return -EPERM;
	int fd = nfd(n);
	if (fd < 0)
		return -errno;
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
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
	if (n == &M.root && !strncmp(name, REPORT_XATTR, strlen(REPORT_XATTR))) {
		const char *rn = name + strlen(REPORT_XATTR);
		size_t len = strlen(rn);
		if (!len || len > REPORT_NAME_MAX || strspn(rn, "0123456789abcdefghijklmnopqrstuvwxyz-") != len) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		uid_t uid = fuse_req_ctx(req)->uid;
		if (uid != 0 && uid != getuid()) {
			fuse_reply_err(req, EPERM);
			return;
		}
		char own[REPORT_NAME_MAX + 32];
		int fd = report_connect(rn, own, sizeof(own));
		if (fd < 0) {
			fuse_reply_err(req, -fd);
			return;
		}
		pthread_mutex_lock(&M.lock);
		int old = M.report_fd;
		M.report_fd = fd;
		pthread_mutex_unlock(&M.lock);
		if (old >= 0)
			close(old);
		reply_xattr_value(req, size, own, (ssize_t)strlen(own));
		return;
	}
	if (n == &M.root && !strcmp(name, SYNC_XATTR)) {
		uid_t uid = fuse_req_ctx(req)->uid;
		int err = mount_sync(uid == 0 || uid == getuid());
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

/*
 * The names of @path's extended attributes that a caller other than root
 * may see, as listxattr(2) answers it (into @val of @size bytes; @size 0:
 * the length): the backing file system lists trusted.* names only to a
 * caller with CAP_SYS_ADMIN, and the daemon, root, would get them all
 * (their values stay refused by the kernel, their names were listed).
 */
static ssize_t list_visible(const char *path, char *val, size_t size)
{
	static const char hidden[] = "trusted.";
	char *all = NULL;
	ssize_t len;
	for (int tries = 0; ; tries++) {
		len = listxattr(path, NULL, 0);
		if (len <= 0)
			return len;
		char *b = realloc(all, (size_t)len);
		if (!b) {
			free(all);
			errno = ENOMEM;
			return -1;
		}
		all = b;
		len = listxattr(path, all, (size_t)len);
		if (len >= 0 || errno != ERANGE || tries == 3)
			break;   /* (ERANGE: a name was added meanwhile) */
	}
	size_t out = 0;
	for (ssize_t i = 0; len > 0 && i < len; i += (ssize_t)strlen(all + i) + 1) {
		size_t l = strlen(all + i) + 1;
		if (!strncmp(all + i, hidden, sizeof(hidden) - 1))
			continue;
		if (size && out + l <= size)
			memcpy(val + out, all + i, l);
		out += l;
	}
	free(all);
	if (len < 0)
		return -1;
	if (size && out > size) {
		errno = ERANGE;
		return -1;
	}
	return (ssize_t)out;
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
		/* no names: a size asked for, or an empty list (a size's
		 * reply to a list asked for was EIO: rsync -aX, tar --xattrs) */
		if (size)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_xattr(req, 0);
	} else if (fd < 0) {
		fuse_reply_err(req, -fd);
	} else if (fuse_req_ctx(req)->uid != 0) {
		ssize_t r = list_visible(path, val, size);
		int e = errno;
		nfd_put(n, fd);
		errno = e;
		reply_xattr_value(req, size, val, r);
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
	if (n == &M.root && (!strcmp(name, STATS_XATTR) || !strcmp(name, SYNC_XATTR) ||
			     !strncmp(name, REPORT_XATTR, strlen(REPORT_XATTR)))) {
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

const struct fuse_lowlevel_ops mount_ops = {
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
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
};
