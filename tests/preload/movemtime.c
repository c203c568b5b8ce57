/* Preloaded under the mount's daemon by tests/mount_faults.sh: once for
 * each time the file named by WBCACHE_TEST_MOVE_MTIME is made (this
 * removes it), a utimensat(2) that sets an explicit mtime is followed at
 * once by one that sets it to now, as a writeback of the file's data
 * landing between the daemon's setting of the time and its reading of it
 * back does.  That window is otherwise out of a test's reach.  Every
 * other call is the real one. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int utimensat(int dirfd, const char *path, const struct timespec tv[2], int flags)
{
	int (*real)(int, const char *, const struct timespec *, int) =
		(int (*)(int, const char *, const struct timespec *, int))dlsym(RTLD_NEXT, "utimensat");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	int r = real(dirfd, path, tv, flags);
	const char *trigger = getenv("WBCACHE_TEST_MOVE_MTIME");
	if (!r && tv && tv[1].tv_nsec != UTIME_OMIT && tv[1].tv_nsec != UTIME_NOW &&
	    trigger && !unlink(trigger)) {
		struct timespec now[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_NOW } };
		real(dirfd, path, now, flags);
	}
	return r;
}
