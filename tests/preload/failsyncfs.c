/* Preloaded under the mount's daemon by tests/mount_faults.sh: syncfs(2)
 * fails with EIO once for each time the file named by
 * WBCACHE_TEST_FAIL_SYNCFS is made (this removes it), as a backing file
 * system whose writeback failed answers; every other call is the real
 * one.  A failed flush of the store is otherwise out of a test's reach
 * (no device mapper in a container). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int syncfs(int fd)
{
	const char *trigger = getenv("WBCACHE_TEST_FAIL_SYNCFS");
	if (trigger && !unlink(trigger)) {
		errno = EIO;
		return -1;
	}
	int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(fd);
}
