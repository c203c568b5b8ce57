/* Preloaded under the mount's daemon by tests/mount_faults.sh, for what
 * its backing files' times go through:
 *
 * WBCACHE_TEST_MOVE_MTIME=FILE: once for each time FILE is made (this
 * removes it), a utimensat(2) that sets an explicit mtime is followed at
 * once by one that sets it to now, as a writeback of the file's data
 * landing between the daemon's setting of the time and its reading of it
 * back does.  That window is otherwise out of a test's reach.
 *
 * WBCACHE_TEST_SYNCLOG=FILE: each utimensat that sets an explicit mtime,
 * each fsync and fdatasync (with the inode number of the file) and each
 * syncfs is appended to FILE as a line ("utimensat INO", "fsync INO",
 * "syncfs"), for a test to see that a time put back is flushed after
 * (no crash of the store can be made in a container).
 *
 * Every call is the real one. */
#include <stdbool.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void *real_fn(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f)
		errno = ENOSYS;
	return f;
}

static void log_line(const char *what, int dirfd, const char *path, int flags)
{
	const char *log = getenv("WBCACHE_TEST_SYNCLOG");
	if (!log)
		return;
	char line[64];
	struct stat st;
	if (!path)
		snprintf(line, sizeof(line), "%s\n", what);
	else if (!fstatat(dirfd, path, &st, flags & (AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)))
		snprintf(line, sizeof(line), "%s %llu\n", what, (unsigned long long)st.st_ino);
	else
		return;
	int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		/* one write of a short line: whole among other threads' */
		if (write(fd, line, strlen(line)) < 0)
			perror("synclog");
		close(fd);
	}
}

int utimensat(int dirfd, const char *path, const struct timespec tv[2], int flags)
{
	int (*real)(int, const char *, const struct timespec *, int) =
		(int (*)(int, const char *, const struct timespec *, int))real_fn("utimensat");
	if (!real)
		return -1;
	int r = real(dirfd, path, tv, flags);
	bool set = !r && tv && tv[1].tv_nsec != UTIME_OMIT && tv[1].tv_nsec != UTIME_NOW;
	if (set)
		log_line("utimensat", dirfd, path, flags);
	const char *trigger = getenv("WBCACHE_TEST_MOVE_MTIME");
	if (set && trigger && !unlink(trigger)) {
		struct timespec now[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_NOW } };
		real(dirfd, path, now, flags);
	}
	return r;
}

static int sync_call(const char *name, int fd)
{
	int (*real)(int) = (int (*)(int))real_fn(name);
	if (!real)
		return -1;
	int r = real(fd);
	int e = errno;
	if (!r)
		log_line(name, fd, strcmp(name, "syncfs") ? "" : NULL, AT_EMPTY_PATH);
	errno = e;
	return r;
}

int fsync(int fd) { return sync_call("fsync", fd); }
int fdatasync(int fd) { return sync_call("fdatasync", fd); }
int syncfs(int fd) { return sync_call("syncfs", fd); }
