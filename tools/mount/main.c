/*
 * `wbcache mount`: the mount's state, its start (in the background: see
 * detach_begin) and its end, which writes everything back; and `wbcache
 * umount`.
 */
#include "mount.h"
#include "wbcache_backend.h"   /* wbc_dev_backend: the device's caps */

#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <syslog.h>
#include <unistd.h>

struct mnt M;

static void send_report(int status, const char *why);

void logmsg(const char *fmt, ...)
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

/* A FUSE connection whose daemon has ended: ENOTCONN, or ECONNABORTED
 * for a request sent while the daemon's last thread was still exiting
 * (the leader already a zombie, the device not yet released: the kernel
 * then aborts the connection under the request). */
static bool conn_gone(int e)
{
	return e == ENOTCONN || e == ECONNABORTED;
}

/* Directory nodes and (without file handles) every node hold a
 * descriptor, and the engine one per open cached file: raise the limit to fs.nr_open where allowed (root), else to the hard
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
static int backing_lock = -1;   /* flock: see cmd_mount */

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
	int ws = 0;
	pid_t w;
	while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR)
		;
	*status = w == pid && WIFEXITED(ws) && WEXITSTATUS(ws) ? WEXITSTATUS(ws) : 2;
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

/* The mount is up: let the parent go and leave its terminal.  False
 * when the parent is gone (interrupted, killed: its caller was told it
 * failed): the mount is then not to stay (SIGPIPE is ignored here, as
 * libfuse's handlers set it: the write fails with EPIPE). */
static bool detach_done(void)
{
	if (detach_fd < 0)
		return true;
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
	ssize_t w;
	while ((w = write(detach_fd, "", 1)) < 0 && errno == EINTR)
		;
	close(detach_fd);
	detach_fd = -1;
	return w == 1;
}

/* Root with root's powers (mount.fuse3's drop_privileges keeps uid 0 and
 * drops every capability): the capability to give files away, which the
 * daemon's root behaviour (chown of new entries, the caller's ids for a
 * check) rests on.  /proc/self/status's CapEff, bit CAP_CHOWN (0); no
 * /proc: the uid alone. */
static bool has_chown_cap(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return true;
	char line[256];
	bool has = true;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "CapEff:", 7)) {
			has = strtoull(line + 7, NULL, 16) & 1ull;
			break;
		}
	fclose(f);
	return has;
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
			free(opts);
			return 0;
		} else if (!strcmp(argv[i], "-f")) {
			foreground = true;
		} else if ((!strcmp(argv[i], "-o") && i + 1 < argc) ||
			   (!strncmp(argv[i], "-o", 2) && argv[i][2])) {
			/* several -o add up, as mount(8)'s */
			const char *o = argv[i][2] ? argv[i] + 2 : argv[++i];
			char *joined = NULL;
			if (asprintf(&joined, "%s%s%s", opts ? opts : "", opts ? "," : "", o) < 0) {
				fprintf(stderr, "wbcache mount: out of memory\n");
				free(opts);
				return 2;
			}
			free(opts);
			opts = joined;
		} else if (!strcmp(argv[i], "-o")) {
			fprintf(stderr, "wbcache mount: -o needs options (see wbcache mount --help)\n");
			free(opts);
			return 2;
		} else if (argv[i][0] == '-' || npos == 2) {
			fprintf(stderr, "wbcache mount: unexpected argument '%s' (see wbcache mount "
				"--help)\n", argv[i]);
			free(opts);
			return 2;
		} else {
			pos[npos++] = argv[i];
		}
	}
	if (npos != 2) {
		fprintf(stderr, "wbcache mount: %s (usage: wbcache mount BACKING_DIR MOUNTPOINT "
			"[-o OPTS] [-f]; see --help)\n", npos ? "no MOUNTPOINT" : "no BACKING_DIR and "
			"MOUNTPOINT");
		free(opts);
		return 2;
	}
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 256u << 20;
	char devopts[512] = "", fuseopts[256] = "";
	char *optcopy = opts;   /* parse_opts cuts it up */
	enum dio_mode dio = DIO_AUTO;
	struct mopts mo = { .entry = TIMEOUT_DEFAULT, .attr = TIMEOUT_DEFAULT, .negative = TIMEOUT_DEFAULT,
			     .threads = 16, .idle_threads = 16, .uring = URING_AUTO };
	if (opts && (parse_opts(optcopy, &cfg, devopts, sizeof(devopts), fuseopts,
					   sizeof(fuseopts), &dio, &mo))) {
		free(optcopy);
		if (!strncmp(pos[1], "/dev/fd/", 8))   /* as at out: below */
			fprintf(stderr, "wbcache mount: the mount mount.fuse3 made for %s is not "
				"served: `umount` its mount point (as root) to clear it\n", pos[1]);
		return 2;
	}
	free(optcopy);

	char *remote = M.remote;   /* parse_opts' */
	memset(&M, 0, sizeof(M));
	M.remote = remote;
	M.foreground = foreground;
	M.dio = dio;
	M.entry_timeout = mo.entry;
	M.attr_timeout = mo.attr;
	M.negative_timeout = mo.negative;
	M.noflush = mo.noflush;
	M.readdirplus = !mo.no_readdirplus;
	/* the kernel applied the caller's umask to every mode it sends, or
	 * (DONT_MASK) sends it with the mode: see creation_mode (ops.c) */
	umask(0);
	M.root_fd = M.mount_fd = M.report_fd = -1;
	int status = 2, rc;
	char endwhy[256] = "";
	char *mountpoint = NULL;
	struct fuse_session *se = NULL;
	struct stat st;
	M.backing = realpath(pos[0], NULL);
	if (!M.backing || stat(M.backing, &st)) {
		fprintf(stderr, "wbcache mount: %s: %s\n", pos[0], strerror(errno));
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "wbcache mount: %s: not a directory\n", pos[0]);
		goto out;
	}
	/* /dev/fd/N: a FUSE descriptor already mounted by mount.fuse3
	 * (-o drop_privileges), which libfuse serves as it is */
	const char *fdn = !strncmp(pos[1], "/dev/fd/", 8) ? pos[1] + 8 : NULL;
	if (fdn && *fdn && strspn(fdn, "0123456789") == strlen(fdn)) {
		if (!(mountpoint = strdup(pos[1])))
			goto out;
		goto mounted_fd;
	}
	mountpoint = realpath(pos[1], NULL);
	if (!mountpoint || stat(mountpoint, &st)) {
		int e = errno;
		bool dead = conn_gone(e);
		fprintf(stderr, "wbcache mount: mount point %s: %s%s%s%s\n", pos[1], strerror(e),
			dead ? " (a mount whose daemon has ended: `fusermount3 -u " : "",
			dead ? pos[1] : "", dead ? "` clears it)" : "");
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "wbcache mount: mount point %s: not a directory\n", pos[1]);
		goto out;
	}
	/* a second mount stacked on a wbcache mount would hide it: refused */
	ssize_t gx = getxattr(mountpoint, STATS_XATTR, NULL, 0);
	int gxe = gx < 0 ? errno : 0;
	if (gx >= 0 || conn_gone(gxe)) {
		if (gx < 0)
			fprintf(stderr, "wbcache mount: mount point %s: a mount whose daemon has ended "
				"is there (`fusermount3 -u %s` clears it)\n", mountpoint, mountpoint);
		else
			fprintf(stderr, "wbcache mount: %s is a wbcache mount already (`wbcache "
				"umount %s` first)\n", mountpoint, mountpoint);
		goto out;
	}
mounted_fd:
	M.root_fd = open(M.backing, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (M.root_fd < 0 || fstat(M.root_fd, &st)) {
		fprintf(stderr, "wbcache mount: %s: %s\n", M.backing, strerror(errno));
		goto out;
	}
	/* One daemon per BACKING_DIR at a time: one that is still writing
	 * back after its unmount (fusermount3 -u and umount return at once)
	 * would otherwise write its old data over what a new mount of the
	 * same directory wrote meanwhile, and the new mount would read what
	 * it had not yet written.  The lock is the daemon's until it ends
	 * (inherited across the fork); a mount waits for it here, in the
	 * caller's terminal, where Ctrl-C gives up with nothing mounted. */
	backing_lock = open(M.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (backing_lock >= 0 && flock(backing_lock, LOCK_EX | LOCK_NB) && errno == EWOULDBLOCK) {
		fprintf(stderr, "wbcache mount: %s: another wbcache daemon serves it or is still "
			"writing it back; waiting for it to end (a mount of it elsewhere: unmount "
			"that first)\n", M.backing);
		while (flock(backing_lock, LOCK_EX) && errno == EINTR)
			;
	}
	if (!foreground) {
		int parent_status;
		if (detach_begin(&parent_status)) {
			close(backing_lock);
			backing_lock = -1;
			close(M.root_fd);
			free(M.backing);
			free(mountpoint);
			return parent_status;
		}
	}
	/* a remote backend's data is not in BACKING_DIR's files */
	M.root.fd = M.root_fd;
	M.root.pfd = -1;
	atomic_init(&M.root.kept_fd, -1);
	atomic_init(&M.root.mode, st.st_mode);
	mutex_init_checked(&M.root.fdlock);
	M.root.nlookup = 1;
	M.root.dev = st.st_dev;
	M.root.ino = st.st_ino;
	mutex_init_checked(&M.root.lock);
	mutex_init_checked(&M.lock);
	M.hsize = 1024;
	M.hash = calloc(M.hsize, sizeof(*M.hash));
	atomic_init(&M.next_gen, 1);
	M.as_root = geteuid() == 0 && has_chown_cap();
	M.euid = geteuid();
	M.egid = getegid();
	if (!M.hash)
		goto out;
	pthread_mutex_lock(&M.lock);
	node_insert_locked(&M.root);
	pthread_mutex_unlock(&M.lock);

	rc = wbc_cache_open(&cfg, &M.cache);
	if (rc) {
		const char *why = rc == -EINVAL ? wbc_config_check(&cfg) : NULL;
		if (why)
			fprintf(stderr, "wbcache mount: bad cache configuration: %s\n", why);
		else
			fprintf(stderr, "wbcache mount: cannot open a cache of %llu MiB: %s%s\n",
				(unsigned long long)(cfg.mem_bytes >> 20), wbc_strerror(rc),
				rc == -ENOMEM ? " (mem= may not exceed the machine's memory, nor its "
				"control group's limit)" : "");
		goto out;
	}
	char msg[256];
	/* before the device: the engine sizes the descriptors it keeps
	 * from the limit it finds */
	raise_fd_limit();
	struct rlimit nofile;
	M.unlink_pin_cap = !getrlimit(RLIMIT_NOFILE, &nofile) && nofile.rlim_cur != RLIM_INFINITY ?
			   (long)MINU(nofile.rlim_cur / 4, (rlim_t)LONG_MAX) : LONG_MAX;
	/* a test's knob: a forgotten file settled at its forget (node.c),
	 * not a minute later */
	const char *age = getenv("WBCACHE_MOUNT_GHOST_AGE_MS");
	M.ghost_age_ns = age && *age ? strtoull(age, NULL, 10) * 1000000ull : GHOST_AGE_NS;
	int fsfd = open(M.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	M.mount_fd = fsfd;
	/* file handles: the daemon needs no descriptor per file */
	struct file_handle *rfh = handle_of(M.root_fd, &M.mount_id);
	if (rfh) {
		int t = open_by_handle_at(M.mount_fd, rfh, O_PATH | O_CLOEXEC);
		M.handles = t >= 0;
		if (t >= 0)
			close(t);
		free(rfh);
	}
	if (M.remote && fsfd >= 0) {
		/* file data in RADOS: each file's objects are named by its
		 * backing inode's file handle, which survives renames and
		 * remounts (and is never another file's: it carries the
		 * inode's generation) */
		char *spec = NULL;
		if (strncmp(M.remote, "rados:", 6)) {
			snprintf(msg, sizeof(msg), "rados_conf=, rados_id=, object_size= and "
				 "rados_timeout= need backend=rados:POOL");
			rc = -EINVAL;
		} else if (!M.handles) {
			snprintf(msg, sizeof(msg), "backend=rados needs a backing file system with "
				 "file handles (name_to_handle_at): %s has none", M.backing);
			rc = -EINVAL;
		} else if (asprintf(&spec, "%s%s%s", M.remote, *devopts ? "," : "", devopts) < 0) {
			spec = NULL;
			rc = -ENOMEM;
		} else {
			rc = wbc_dev_add_msg(M.cache, spec, &M.dev, msg, sizeof(msg));
		}
		free(spec);
	} else {
		rc = fsfd < 0 ? -errno : wbc_dev_add_opener(M.cache, fsfd, devopts, open_backing,
							    NULL, M.handles ? WBC_OPENER_REOPEN : 0,
							    &M.dev, msg, sizeof(msg));
	}
	if (rc) {
		/* the library lists every tunable; -o takes these (the
		 * experiments' switches are wbcache run's) */
		static const char bad[] = "bad device tunable '";
		char *end = !strncmp(msg, bad, sizeof(bad) - 1) ? strstr(msg, "' (") : NULL;
		if (fsfd >= 0 && end)
			snprintf(end, sizeof(msg) - (size_t)(end - msg), "' (min_ratio=0..100, "
				 "max_ratio=1..100, max_bytes=SIZE, strict_limit=0|1, "
				 "on_error=retry|drop, retry_timeout=SECONDS)");
		/* the rados backend's names are not -o's (rados_timeout= is
		 * its timeout=) and it lists options -o does not pass: the
		 * option as given, and what -o takes (it said "bad rados
		 * option 'timeout=...' (conf=PATH, ...)") */
		static const char rbad[] = "bad rados option '";
		const char *ro = msg + sizeof(rbad) - 1;
		end = M.remote && !strncmp(msg, rbad, sizeof(rbad) - 1) ? strstr(msg, "' (") : NULL;
		if (end) {
			bool renamed = !strncmp(ro, "conf=", 5) || !strncmp(ro, "id=", 3) ||
				       !strncmp(ro, "timeout=", 8);
			char was[64];   /* (a longer one cut: the list matters more) */
			snprintf(was, sizeof(was), "%.*s", (int)(end - ro), ro);
			snprintf(msg, sizeof(msg), "bad option '%s%s' with backend=rados (rados_conf=PATH, "
				 "rados_id=NAME, object_size=64K..64M (a power of two), "
				 "rados_timeout=SECONDS, max_io=4K..64M, and the device's tunables)",
				 renamed ? "rados_" : "", was);
		}
		fprintf(stderr, "wbcache mount: %s\n", fsfd < 0 ? strerror(-rc) : msg);
		goto out;
	}
	/* the largest file BACKING_DIR's file system takes (the device's
	 * backend found it: 16 TiB on ext4 with 4 KiB blocks): a write or
	 * an fallocate past it is refused with EFBIG at once, as the file
	 * system would (the engine refuses writes past it too) */
	const struct wbc_backend_ops *bops;
	void *bctx = wbc_dev_backend(M.dev, &bops);
	struct wbc_backend_caps bcaps = { 0 };
	bops->caps(bctx, &bcaps);
	M.max_file = bcaps.max_file_size ? bcaps.max_file_size : UINT64_MAX;

	char fsname[PATH_MAX + 512], shown[PATH_MAX];
	snprintf(shown, sizeof(shown), "%s", M.backing);
	for (char *p = shown; *p; p++)    /* a comma would split the options */
		if (*p == ',' || *p == '\\')
			*p = '_';
	snprintf(fsname, sizeof(fsname), "default_permissions,fsname=wbcache:%s,subtype=wbcache%s",
		 shown, fuseopts);
	char *fargv[] = { argv[0], "-o", fsname, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	M.se = se = fuse_session_new(&args, &mount_ops, sizeof(mount_ops), NULL);
	fuse_opt_free_args(&args);
	if (!se) {   /* exit status 2: nothing is mounted */
		fprintf(stderr, "wbcache mount: cannot start a FUSE session\n");
		goto out;
	}
	/* fusermount3 (a mount by another user than root) says why a mount
	 * fails on its stderr: the caller's, unless it stays as the
	 * auto_unmount watcher, which must hold none of the caller's */
	bool watcher = strstr(fuseopts, ",auto_unmount") != NULL;
	if (watcher)
		detach_stdio();
	if (fuse_set_signal_handlers(se) || fuse_session_mount(se, mountpoint)) {
		fprintf(stderr, "wbcache mount: cannot mount on %s\n", pos[1]);
		goto out;
	}
	if (!watcher)
		detach_stdio();
	status = 1;
	conn_hook(se);
	if (!foreground)
		openlog("wbcache", LOG_PID, LOG_DAEMON);
	if (replier_start())
		logmsg("no replier thread: throttled writes hold their worker");
	/* auto where the module offers nothing: /dev/fuse alone, no rings
	 * made (said where -o uring=auto was asked for) */
	if (mo.uring == URING_AUTO && !uring_enabled()) {
		if (mo.uring_given)
			logmsg("-o uring=auto: requests go through /dev/fuse: the kernel does not "
			       "offer FUSE over io_uring (/sys/module/fuse/parameters/enable_uring "
			       "is not Y)");
	} else if (mo.uring != URING_OFF) {
		/* INIT is answered here, before the mount is reported up, so
		 * uring=1 fails the mount with its reason */
		char why[256];
		rc = uring_begin(se, mo.threads, mo.uring == URING_ON, why, sizeof(why));
		if (rc && mo.uring == URING_ON) {
			fprintf(stderr, "wbcache mount: -o uring=1: %s\n", why);
			replier_stop();
			fuse_session_unmount(se);
			status = 2;
			goto out;
		}
		if (rc)
			logmsg("-o uring=auto: requests go through /dev/fuse: %s", why);
	}
	if (!detach_done()) {
		/* the caller gave up (Ctrl-C, a timeout) and was told the
		 * mount failed: it is not left behind, unserved or served */
		logmsg("wbcache mount was interrupted before the mount was up: unmounting %s",
		       mountpoint);
		uring_quiesce();
		replier_stop();
		uring_end();
		fuse_session_unmount(se);
		status = 2;
		goto out;
	}
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, mo.threads);
	fuse_loop_cfg_set_idle_threads(lc, MINU(mo.idle_threads, mo.threads));
	fuse_loop_cfg_set_clone_fd(lc, mo.clone_fd);
	int lrc = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	uring_quiesce();
	replier_stop();
	/* the rings close before the unmount, which waits for their entries */
	uring_end();
	fuse_session_unmount(se);
	if (lrc && lrc != SIGINT && lrc != SIGTERM && lrc != SIGHUP)
		logmsg("session ended with an error: %s", strerror(lrc < 0 ? -lrc : lrc));
	status = 0;
	if (uring_failed()) {
		status = 1;
		snprintf(endwhy, sizeof(endwhy), "a ring of FUSE over io_uring failed (see the log)");
	}
out:
	if (status == 2 && mountpoint && !strncmp(mountpoint, "/dev/fd/", 8))
		/* mount.fuse3 (-o drop_privileges) made the mount before it
		 * ran us: it stays, and without its daemon reports "Transport
		 * endpoint is not connected" */
		fprintf(stderr, "wbcache mount: the mount mount.fuse3 made for %s is not served: "
			"`umount` its mount point (as root) to clear it\n", mountpoint);
	if (se) {
		fuse_remove_signal_handlers(se);
		fuse_session_destroy(se);
	}
	dirs_close_all();
	if (M.cache) {
		/* libfuse's handlers are gone: a second Ctrl-C, SIGTERM or
		 * a closed terminal would end the process in the middle of
		 * the writeback below and lose what it had not written,
		 * silently, the mount being gone.  They wait for it (kill -9
		 * still ends it) */
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		/* the data of files unlinked and closed that the kernel did
		 * not forget (pin_unlinked_locked): no open of them comes
		 * now; dropped rather than written back (a remote backend's
		 * objects removed) */
		for (size_t i = 0; M.hash && i < M.hsize; i++)
			for (struct node *n = M.hash[i]; n; n = n->hnext)
				unpin_unlinked(n);
		for (struct node *n = M.stale; n; n = n->hnext)
			unpin_unlinked(n);
		/* everything is written back here.  An error met on the way
		 * (a full file system, since freed) that left nothing at risk
		 * and lost nothing is logged; data not written, or a failed
		 * flush of the store, makes it 1. */
		int err = wbc_cache_sync(M.cache);
		struct wbc_stats s;
		if (err)
			logmsg("a writeback error was met: %s", wbc_strerror(err));
		/* data in RADOS: the sparse backing file keeps each file's
		 * size for the next mount, set at the last release; files
		 * still open (no release comes now) get theirs here */
		for (size_t i = 0; M.remote && M.hash && i < M.hsize; i++)
			for (struct node *n = M.hash[i]; n; n = n->hnext) {
				struct wbc_file_info info;
				if (n == &M.root || !n->is_reg)
					continue;
				pthread_mutex_lock(&n->lock);
				if (n->opens && n->wf && n->wrote && !wbc_file_info(n->wf, &info) &&
				    backing_set_size(n, info.size))
					logmsg("cannot set the size of a backing file: %s", strerror(errno));
				pthread_mutex_unlock(&n->lock);
			}
		/* a store that keeps failing is retried for its retry_timeout;
		 * what is still unwritten then is counted lost */
		err = wbc_cache_close_stats(M.cache, &s);
		/* a loss a sync (wbcache umount) reported already is not one
		 * of the end's: that umount failed with it */
		uint64_t told = mount_lost_reported();
		uint64_t flush_told = mount_flush_errors_reported();
		if (s.lost_bytes > told) {
			snprintf(endwhy, sizeof(endwhy), "writeback at unmount failed: %" PRIu64 " bytes lost",
				 s.lost_bytes - told);
			if (err)
				snprintf(endwhy + strlen(endwhy), sizeof(endwhy) - strlen(endwhy), " (%s)",
					 wbc_strerror(err));
			logmsg("%s", endwhy);
			status = 1;
		} else if (err) {
			snprintf(endwhy, sizeof(endwhy), "writeback at unmount failed: %s", wbc_strerror(err));
			logmsg("%s", endwhy);
			status = 1;
		} else if (s.flush_errors > flush_told) {
			/* the store's flush (syncfs) failed: what was written
			 * may not be on it, and no later write made that good */
			snprintf(endwhy, sizeof(endwhy), "flush of the backing store at unmount failed");
			logmsg("%s", endwhy);
			status = 1;
		}
	}
	/* nodes the kernel never forgot: their data is written, their
	 * mtimes go back on the backing files */
	bool explicit = false;
	int time_err = 0;
	for (size_t i = 0; M.hash && i < M.hsize; i++)
		for (struct node *n = M.hash[i], *next; n; n = next) {
			next = n->hnext;
			if (n != &M.root) {
				pthread_mutex_lock(&n->lock);
				int r = n->wrote ? restore_mtime_locked(n) : 0;
				if (r > 0)
					explicit = true;
				else if (r < 0 && !time_err)
					time_err = -r;
				pthread_mutex_unlock(&n->lock);
				node_free(n);
			}
		}
	/* a file's time not put back (a store remounted read-only under
	 * the mount): the file keeps its writeback's time, not the one the
	 * mount showed (rsync and make then see another), so the unmount
	 * did not end well: said as a failed writeback is (wbcache umount
	 * tells it, -f exits 1) */
	if (time_err) {
		logmsg("times of written-back files could not be put back at unmount: %s",
		       strerror(time_err));
		if (!status) {
			snprintf(endwhy, sizeof(endwhy),
				 "times of written-back files could not be put back: %s",
				 strerror(time_err));
			status = 1;
		}
	}
	/* times set explicitly (tar, rsync, touch -d), put back after the
	 * last flush: durable when the unmount returns, as the data is */
	int sfd = -1;
	if (explicit && M.root_fd >= 0) {
		/* syncfs takes no O_PATH descriptor: one opened through it */
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", M.root_fd);
		sfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (explicit && (sfd < 0 || syncfs(sfd))) {
		logmsg("flush of the backing store's times at unmount failed: %s", strerror(errno));
		if (!status) {
			snprintf(endwhy, sizeof(endwhy), "flush of the backing store at unmount failed");
			status = 1;
		}
	}
	if (sfd >= 0)
		close(sfd);
	for (struct node *n = M.stale, *next; n; n = next) {
		next = n->hnext;
		node_free(n);
	}
	free(M.hash);
	send_report(status, endwhy);
	if (M.root_fd >= 0)
		close(M.root_fd);
	if (M.mount_fd >= 0)
		close(M.mount_fd);
	free(M.backing);
	free(mountpoint);
	if (backing_lock >= 0)   /* everything written: the next mount may go */
		close(backing_lock);
	backing_lock = -1;
	return status;
}

/* An abstract Unix socket address for "wbcache-@name". */
static socklen_t report_addr(struct sockaddr_un *sa, const char *name)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int len = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "wbcache-%s", name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

/* A random name part: PREFIX-PID-RANDOM. */
static void report_name(char *buf, size_t len, const char *prefix)
{
	uint64_t rnd = 0;
	if (getentropy(&rnd, sizeof(rnd)))
		rnd = (uint64_t)time(NULL) * 2654435761u;
	snprintf(buf, len, "%s-%d-%016" PRIx64, prefix, (int)getpid(), rnd);
}

int report_connect(const char *name, char *own, size_t ownlen)
{
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct sockaddr_un sa;
	report_name(own, ownlen, "daemon");
	socklen_t l = report_addr(&sa, own);
	if (bind(s, (struct sockaddr *)&sa, l)) {
		int e = errno;
		close(s);
		return -e;
	}
	l = report_addr(&sa, name);
	if (connect(s, (struct sockaddr *)&sa, l)) {
		int e = errno;   /* not there: another network namespace */
		close(s);
		return -e;
	}
	return s;
}

/* The daemon's exit status to `wbcache umount`, where it asked for it
 * (REPORT_XATTR): "STATUS MESSAGE" in one datagram. */
static void send_report(int status, const char *why)
{
	pthread_mutex_lock(&M.lock);
	int fd = M.report_fd;
	M.report_fd = -1;
	pthread_mutex_unlock(&M.lock);
	if (fd < 0)
		return;
	char msg[512];
	int mlen = snprintf(msg, sizeof(msg), "%d %s", status, why);
	if (send(fd, msg, MINU((size_t)mlen, sizeof(msg) - 1), MSG_DONTWAIT) < 0)
		logmsg("cannot send the exit status to wbcache umount: %s", strerror(errno));
	close(fd);
}

/*
 * `wbcache umount MOUNTPOINT`: returns once every byte is on the backing
 * store and the daemon has ended.  A plain FUSE unmount (fusermount3 -u,
 * umount) returns at once while the daemon still writes back; this writes
 * back first (a write error is reported and nothing is unmounted: the data
 * stays in the cache), then unmounts and waits for the daemon to end.
 */
/* A field of /proc/self/mounts as it is: the kernel writes space, tab,
 * newline and backslash as \ooo. */
static void unescape_mounts_field(char *f)
{
	char *w = f;
	for (const char *r = f; *r; r++) {
		unsigned o;
		if (r[0] == '\\' && sscanf(r + 1, "%3o", &o) == 1) {
			*w++ = (char)o;
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Calls @fn(@rp, source, mount point, @arg) for each wbcache mount in
 * /proc/self/mounts (the source without its "wbcache:", both unescaped),
 * @rp the real path of @path, until it returns true.  False when @path
 * cannot be resolved or the table read, or no call returned true. */
static bool scan_mounts(const char *path, bool (*fn)(const char *rp, const char *src,
						    const char *dir, void *arg), void *arg)
{
	char rp[PATH_MAX];
	if (!realpath(path, rp))
		return false;
	FILE *f = fopen("/proc/self/mounts", "re");
	if (!f)
		return false;
	char line[2 * PATH_MAX + 200], src[PATH_MAX + 16], dir[PATH_MAX], type[64];
	bool done = false;
	while (!done && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%4111s %4095s %63s", src, dir, type) != 3 ||
		    strcmp(type, "fuse.wbcache") || strncmp(src, "wbcache:", 8))
			continue;
		unescape_mounts_field(src);
		unescape_mounts_field(dir);
		done = fn(rp, src + 8, dir, arg);
	}
	fclose(f);
	return done;
}

struct mount_out {
	char *out;
	size_t len, best;
};

static bool backing_is(const char *rp, const char *src, const char *dir, void *arg)
{
	struct mount_out *m = arg;
	if (strcmp(src, rp))
		return false;
	snprintf(m->out, m->len, "%s", dir);
	return true;
}

/* The mount point of a wbcache mount whose BACKING_DIR is @path, in @out
 * (a user's likely mistake: the backing directory for the mount point). */
bool mount_of_backing(const char *path, char *out, size_t outlen)
{
	struct mount_out m = { out, outlen, 0 };
	return scan_mounts(path, backing_is, &m);
}

static bool inside(const char *rp, const char *src, const char *dir, void *arg)
{
	(void)src;
	struct mount_out *m = arg;
	size_t dl = strlen(dir);
	/* below it: "/" is every path's, else the name and a slash; the
	 * innermost mount is the one the path reaches */
	bool under = !strcmp(dir, "/") ? rp[1] != '\0' : !strncmp(rp, dir, dl) && rp[dl] == '/';
	if (under && dl > m->best) {
		m->best = dl;
		snprintf(m->out, m->len, "%s", dir);
	}
	return false;   /* all of them: the innermost */
}

/* The mount point of the wbcache mount that @path lies inside, below its
 * root (a directory or file in it), in @out: the statistics and the
 * writeback are the root's alone, and "not a wbcache mount" misled. */
bool mount_containing(const char *path, char *out, size_t outlen)
{
	struct mount_out m = { out, outlen, 0 };
	scan_mounts(path, inside, &m);
	return m.best > 0;
}

/* Whether /proc/self/mounts lists a wbcache mount at @path (which need
 * not be reachable: its daemon may be gone). */
static bool wbcache_mount_listed(const char *path)
{
	/* the kernel lists the mount point's canonical path: that of its
	 * parent (still reachable), and its own name */
	char parent[PATH_MAX], rp[PATH_MAX], abs[2 * PATH_MAX];
	if (snprintf(parent, sizeof(parent), "%s", path) >= (int)sizeof(parent))
		return false;
	size_t len = strlen(parent);
	while (len > 1 && parent[len - 1] == '/')
		parent[--len] = '\0';
	char *slash = strrchr(parent, '/');
	const char *base = slash ? slash + 1 : parent;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return false;   /* the root, or a name that is no mount point's own */
	const char *pdir = ".";
	if (slash == parent)
		pdir = "/";
	else if (slash) {
		*slash = '\0';   /* base, after it, stays whole */
		pdir = parent;
	}
	if (!realpath(pdir, rp))
		return false;
	snprintf(abs, sizeof(abs), "%s/%s", strcmp(rp, "/") ? rp : "", base);
	FILE *f = fopen("/proc/self/mounts", "re");
	if (!f)
		return false;
	char line[2 * PATH_MAX], dir[PATH_MAX], type[64];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*s %4095s %63s", dir, type) != 2 || strcmp(type, "fuse.wbcache"))
			continue;
		unescape_mounts_field(dir);
		found = !strcmp(dir, abs);
	}
	fclose(f);
	return found;
}

/* `fusermount3 -u @mnt`: true when it ran and succeeded; else false and
 * *err the reason it could not run (0 when it ran and failed). */
/* A socket for the daemon's report (REPORT_XATTR), registered with the
 * daemon of @mnt and connected to its socket (datagrams from it alone);
 * -1 where it cannot be (an older daemon, another network namespace). */
static int report_socket(const char *mnt, struct sockaddr_un *from, socklen_t *fromlen)
{
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	char name[REPORT_NAME_MAX + 1], attr[sizeof(REPORT_XATTR) + REPORT_NAME_MAX];
	char peer[REPORT_NAME_MAX + 32];
	report_name(name, sizeof(name), "umount");
	struct sockaddr_un sa;
	socklen_t l = report_addr(&sa, name);
	snprintf(attr, sizeof(attr), "%s%s", REPORT_XATTR, name);
	ssize_t n = -1;
	if (!bind(s, (struct sockaddr *)&sa, l))
		n = getxattr(mnt, attr, peer, sizeof(peer) - 1);
	if (n > 0) {
		peer[n] = '\0';
		*fromlen = report_addr(from, peer);
		if (!strncmp(peer, "daemon-", 7) && !connect(s, (struct sockaddr *)from, *fromlen)) {
			/* datagrams sent before the connect (anyone may send to
			 * a name /proc/net/unix lists) stay queued: thrown away;
			 * from here on only the daemon's get in, and it sends
			 * none before its end */
			char junk[1];
			while (recv(s, junk, sizeof(junk), MSG_DONTWAIT) >= 0)
				;
			return s;
		}
	}
	close(s);
	return -1;
}

/* The daemon's report, once it has ended: 0 when its writeback at the
 * end succeeded, else 1 with its reason on stderr. */
static int read_report(int s, const char *mnt, const struct sockaddr_un *daemon, socklen_t dlen)
{
	char msg[512];
	ssize_t m;
	for (;;) {   /* the daemon's datagram: from its address, none other's */
		struct sockaddr_un from;
		socklen_t flen = sizeof(from);
		m = recvfrom(s, msg, sizeof(msg) - 1, MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
		if (m < 0 || (flen == dlen && !memcmp(&from, daemon, dlen)))
			break;
	}
	if (m <= 0) {
		fprintf(stderr, "wbcache umount: %s: unmounted, but the daemon ended without its "
			"report (killed?): what it had not written back is lost\n", mnt);
		return 1;
	}
	msg[m] = '\0';
	if (!atoi(msg))
		return 0;
	const char *why = strchr(msg, ' ');
	fprintf(stderr, "wbcache umount: %s: unmounted, but the writeback at the daemon's end "
		"failed: %s\n", mnt, why && why[1] ? why + 1 : "(no reason given)");
	return 1;
}

static bool fusermount_u(const char *mnt, int *err)
{
	pid_t child, w = -1;
	char *fargv[] = { "fusermount3", "-u", (char *)mnt, NULL };
	int ws = 0;
	*err = posix_spawnp(&child, "fusermount3", NULL, NULL, fargv, environ);
	if (*err)
		return false;
	while ((w = waitpid(child, &ws, 0)) < 0 && errno == EINTR)
		;
	if (w != child) {
		*err = errno;
		return false;
	}
	return WIFEXITED(ws) && !WEXITSTATUS(ws);
}

int cmd_umount(int argc, char **argv)
{
	static const char use[] = "usage: wbcache umount MOUNTPOINT\n"
		"writes everything back, unmounts and waits for the daemon to end\n";
	/* as wbcache stat: an option is named as one (`umount -l MNT` said
	 * "one MOUNTPOINT only"), --help anywhere */
	const char *mnt = NULL, *opt = NULL;
	bool help = false, extra = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			help = true;
		else if (argv[i][0] == '-')
			opt = opt ? opt : argv[i];
		else if (mnt)
			extra = true;
		else
			mnt = argv[i];
	}
	if (help) {
		fputs(use, stdout);
		return 0;
	}
	if (opt || extra || !mnt || !*mnt) {
		if (opt)
			fprintf(stderr, "wbcache umount: unknown option '%s'\n", opt);
		else if (extra)
			fprintf(stderr, "wbcache umount: one MOUNTPOINT only\n");
		else
			fprintf(stderr, "wbcache umount: no MOUNTPOINT\n");
		fputs(use, stderr);
		return 2;
	}
	char buf[4096];
	ssize_t n = getxattr(mnt, STATS_XATTR, buf, sizeof(buf) - 1);
	if (n < 0 && conn_gone(errno) && wbcache_mount_listed(mnt)) {
		/* the daemon is gone (killed, crashed): nothing can be written
		 * back any more; the dead mount is cleared */
		int rc;
		bool cleared = fusermount_u(mnt, &rc);
		fprintf(stderr, "wbcache umount: %s: the mount's daemon had ended (killed or crashed): "
			"%s; what it had not written back is lost (fsync'd data is on the store)\n",
			mnt, cleared ? "unmounted" : "`fusermount3 -u` failed too");
		return 1;
	}
	if (n < 0) {
		char at[PATH_MAX];
		bool notours = errno == ENODATA || errno == ENOTSUP;
		if (notours && mount_of_backing(mnt, at, sizeof(at)))
			fprintf(stderr, "wbcache umount: %s: not a wbcache mount: the BACKING_DIR of "
				"the one at %s (wbcache umount %s)\n", mnt, at, at);
		else if (notours && mount_containing(mnt, at, sizeof(at)))
			fprintf(stderr, "wbcache umount: %s: not a wbcache mount's root: inside the "
				"one at %s (wbcache umount %s)\n", mnt, at, at);
		else
			fprintf(stderr, "wbcache umount: %s: %s\n", mnt,
				notours ? "not a wbcache mount" : strerror(errno));
		return 1;
	}
	buf[n] = '\0';
	const char *p = strstr(buf, "DaemonPid:");
	long pid = p ? strtol(p + strlen("DaemonPid:"), NULL, 10) : 0;
	int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
	/* the daemon's exit status comes to a socket of ours: the writeback
	 * after the unmount can still fail (writes after our sync) */
	struct sockaddr_un dsa;
	socklen_t dlen = 0;
	int rs = report_socket(mnt, &dsa, &dlen);
	int status = 1;
	char ok[8];
	if (getxattr(mnt, SYNC_XATTR, ok, sizeof(ok)) < 0) {
		int e = errno;
		/* data at risk stays in the cache; none: the error was of
		 * data dropped (on_error=drop) or of a failed flush of the
		 * store, told now, once (it said "the data stays" then too) */
		ssize_t m = getxattr(mnt, STATS_XATTR, buf, sizeof(buf) - 1);
		const char *r = m > 0 ? (buf[m] = '\0', strstr(buf, "AtRisk:")) : NULL;
		if (r && strtoull(r + strlen("AtRisk:"), NULL, 10) == 0)
			fprintf(stderr, "wbcache umount: %s: writeback failed: %s; data was lost (a "
				"write dropped, or a flush of the backing store that failed since "
				"the last sync); the file system stays mounted: `wbcache umount %s` "
				"again unmounts it\n", mnt, strerror(e), mnt);
		else
			fprintf(stderr, "wbcache umount: %s: writeback failed: %s; the data stays in "
				"the cache and the file system stays mounted (`fusermount3 -u %s` "
				"unmounts anyway: what is not written is then lost)\n", mnt,
				strerror(e), mnt);
		goto out;
	}
	int rc;
	/* the mount point as the kernel has it: fusermount3 refuses a path
	 * through a symbolic link (the mount took one) */
	char real[PATH_MAX];
	const char *target = realpath(mnt, real) ? real : mnt;
	if (!fusermount_u(target, &rc)) {
		fprintf(stderr, "wbcache umount: %s: fusermount3 -u failed%s%s\n", mnt,
			rc ? ": " : "", rc ? strerror(rc) : "");
		goto out;
	}
	/* until the daemon has ended: its report is sent just before */
	if (pidfd >= 0) {
		struct pollfd pf = { .fd = pidfd, .events = POLLIN };
		while (poll(&pf, 1, -1) < 0 && errno == EINTR)
			;
	} else if (rs >= 0) {   /* Linux < 5.3: the report, or the pid gone */
		struct pollfd pf = { .fd = rs, .events = POLLIN };
		while (poll(&pf, 1, 1000) <= 0 && !(kill((pid_t)pid, 0) && errno == ESRCH))
			;
	}
	status = rs >= 0 ? read_report(rs, mnt, &dsa, dlen) : 0;
out:
	if (pidfd >= 0)
		close(pidfd);
	if (rs >= 0)
		close(rs);
	return status;
}
