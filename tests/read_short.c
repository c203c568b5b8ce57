/*
 * A read that the file backend's ring completes short before the file's
 * end is not the file's end (src/backend/file.c, read_goes_on).  A FUSE
 * file system served by this test holds one 64 KiB file whose bytes past
 * 4 KiB fail with EIO (a bad sector): a buffered read of 8 KiB there is
 * 4 KiB read and then the error, and io_uring completes it with 4096, as
 * preadv returns it.  The engine takes a short read for the file's end
 * and caches zeros past it: wbc_pread returned 8192 with 4 KiB of zeros,
 * and those zeros stayed in the cache.  Now the rest is read on: the read
 * fails with EIO, on the ring as with the worker threads (uring=0), and
 * a read that ends at the file's true end (the first 4 KiB, and a file
 * of 5,000 bytes read 8 KiB at a time) is still short there.  A file
 * whose every read fails with EAGAIN, or EINTR (the server's answer, for
 * good), fails the read with it, on the ring as with the workers (the
 * ring sent it again for ever after EAGAIN, the workers after EINTR:
 * wbc_pread never returned).  Needs /dev/fuse and the right to mount
 * (skips otherwise).
 */
#define FUSE_USE_VERSION 31
#include "testutil.h"

#include <fuse.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define FSZ (64 << 10)
#define GOOD 4096
#define SMALL 5000

static int t_getattr(const char *p, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (!strcmp(p, "/")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else if (!strcmp(p, "/bad") || !strcmp(p, "/small") || !strcmp(p, "/again") ||
		   !strcmp(p, "/intr")) {
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
		st->st_size = !strcmp(p, "/small") ? SMALL : FSZ;
	} else {
		return -ENOENT;
	}
	return 0;
}

static int t_open(const char *p, struct fuse_file_info *fi)
{
	(void)fi;
	return strcmp(p, "/bad") && strcmp(p, "/small") && strcmp(p, "/again") &&
	       strcmp(p, "/intr") ? -ENOENT : 0;
}

static int t_read(const char *p, char *buf, size_t sz, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	if (!strcmp(p, "/again") || !strcmp(p, "/intr"))
		return !strcmp(p, "/again") ? -EAGAIN : -EINTR;   /* for good */
	off_t size = !strcmp(p, "/bad") ? FSZ : SMALL;
	if (off >= size)
		return 0;
	if (off + (off_t)sz > size)
		sz = (size_t)(size - off);
	/* "bad": every request that reaches past GOOD fails whole */
	if (!strcmp(p, "/bad") && off + (off_t)sz > GOOD)
		return -EIO;
	memset(buf, 'A', sz);
	return (int)sz;
}

static int t_write(const char *p, const char *buf, size_t sz, off_t off, struct fuse_file_info *fi)
{
	(void)p, (void)buf, (void)sz, (void)off, (void)fi;
	return -EROFS;
}

static const struct fuse_operations fs_ops = {
	.getattr = t_getattr,
	.open = t_open,
	.read = t_read,
	.write = t_write,
};

/* The file system is served by a child process (forked before this one
 * has threads): it dies with the test, whatever way the test ends, and
 * the mount is detached then (atexit). */
static pid_t server;
static char *dir;

static void stop_server(void)
{
	if (server > 0) {
		kill(server, SIGKILL);   /* the connection is aborted with it */
		waitpid(server, NULL, 0);
		server = 0;
		if (umount2(dir, MNT_DETACH)) {
			char cmd[700];
			snprintf(cmd, sizeof(cmd), "fusermount3 -u -z '%s' 2>/dev/null", dir);
			if (system(cmd)) {
				/* nothing more to do */
			}
		}
	}
}

/* The alarm of a read that never returns: the server and its mount go
 * with the test. */
static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: a read did not return in 120 s\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	if (server > 0)
		kill(server, SIGKILL);
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	_exit(1);
}

/* Mount the file system on dir, served by a child: false when it cannot
 * be mounted here. */
static bool start_server(void)
{
	int p[2];
	if (access("/dev/fuse", R_OK | W_OK) || pipe(p))
		return false;
	fflush(NULL);
	server = fork();
	CHECK(server >= 0);
	if (!server) {
		close(p[0]);
		char *argv[] = { "read_short", NULL };
		struct fuse_args args = FUSE_ARGS_INIT(1, argv);
		struct fuse *fuse = fuse_new(&args, &fs_ops, sizeof(fs_ops), NULL);
		fuse_opt_free_args(&args);
		char ok = fuse && !fuse_mount(fuse, dir);
		if (write(p[1], &ok, 1) != 1 || !ok)
			_exit(1);
		close(p[1]);
		fuse_loop(fuse);
		_exit(0);
	}
	close(p[1]);
	char ok = 0;
	if (read(p[0], &ok, 1) != 1)
		ok = 0;
	close(p[0]);
	if (!ok) {
		waitpid(server, NULL, 0);
		server = 0;
	}
	return ok;
}

/* Read 8 KiB at 0 of @path through a device of @opts: the result, and
 * the bytes past GOOD that came back as zeros. */
static ssize_t read8k(const char *path, const char *opts, int *zeros)
{
	struct wbc_config cfg = t_config(4u << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	char spec[600], msg[256] = "";
	static char buf[8192];
	snprintf(spec, sizeof(spec), "file:%s,%s", path, opts);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	if (wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg))) {
		fprintf(stderr, "%s: %s\n", spec, msg);
		exit(1);
	}
	CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
	memset(buf, 0x55, sizeof(buf));
	ssize_t n = wbc_pread(f, buf, sizeof(buf), 0);
	*zeros = 0;
	for (size_t i = GOOD; i < sizeof(buf); i++)
		*zeros += !buf[i];
	for (ssize_t i = 0; i < n && i < (ssize_t)sizeof(buf); i++)
		CHECK_EQ(buf[i], 'A');   /* what it read is the file's */
	/* and a read of the good part alone ends where asked */
	CHECK_EQ(wbc_pread(f, buf, GOOD, 0), GOOD);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return n;
}

int main(void)
{
	dir = t_mkdtemp();
	if (!start_server()) {
		printf("SKIP: cannot mount a FUSE file system here\n");
		t_rmdir(dir);
		return T_SKIP;
	}
	atexit(stop_server);
	char bad[600], small[600];
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	snprintf(small, sizeof(small), "%s/small", dir);

	/* the file system's own answer: a short read, then the error */
	int fd = open(bad, O_RDONLY);
	CHECK(fd >= 0);
	static char b[8192];
	CHECK_EQ(pread(fd, b, sizeof(b), 0), GOOD);
	CHECK_EQ(pread(fd, b, sizeof(b), GOOD), -1);
	CHECK_EQ(errno, EIO);
	close(fd);

	const char *modes[] = { "direct=0", "direct=0,uring=0" };
	for (int i = 0; i < 2; i++) {
		int zeros;
		ssize_t n = read8k(bad, modes[i], &zeros);
		printf("%s: read of 8 KiB over the bad sector: %zd (%d zero bytes past it)\n",
		       modes[i], n, zeros);
		CHECK_EQ(n, -EIO);
		/* the file's true end: short there, as it was */
		n = read8k(small, modes[i], &zeros);
		CHECK_EQ(n, SMALL);
	}

	/* a file system that answers EAGAIN, or EINTR, for good: the read
	 * fails (it was sent again for ever: EAGAIN on the ring, EINTR by
	 * the workers, and wbc_pread never returned; the alarm ends the test
	 * then) */
	signal(SIGALRM, on_alarm);
	alarm(120);
	for (int i = 0; i < 4; i++) {
		int want = i < 2 ? -EAGAIN : -EINTR;
		struct wbc_config cfg = t_config(4u << 20, 4096);
		wbc_cache *c;
		wbc_dev *dev;
		wbc_file *f;
		char spec[700];
		static char buf[4096];
		snprintf(spec, sizeof(spec), "file:%s/%s,%s", dir, i < 2 ? "again" : "intr",
			 modes[i % 2]);
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
		CHECK_EQ(wbc_file_open(dev, "", 0, &f), 0);
		ssize_t n = wbc_pread(f, buf, sizeof(buf), 0);
		printf("%s: read of a file whose reads fail with %s: %zd\n", modes[i % 2],
		       i < 2 ? "EAGAIN" : "EINTR", n);
		CHECK_EQ(n, want);
		CHECK_EQ(wbc_file_close(f), 0);
		CHECK_EQ(wbc_cache_close(c), 0);
	}
	alarm(0);

	stop_server();
	t_rmdir(dir);
	return 0;
}
