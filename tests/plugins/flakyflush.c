/* An nbdkit plugin for tests/nbdkit_filter.sh: serves a file (file=PATH)
 * whose every second flush fails with EIO, so the filter above it meets
 * flush faults nbdkit's own error filter cannot inject.  It runs inside
 * nbdkit (a sanitized nbdkit's shell scripts crash before their exec). */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static char *path;
static int fd = -1;
static atomic_uint flushes;

static int ff_config(const char *key, const char *value)
{
	if (strcmp(key, "file") != 0) {
		nbdkit_error("unknown parameter '%s'", key);
		return -1;
	}
	free(path);
	path = nbdkit_realpath(value);
	return path ? 0 : -1;
}

static int ff_config_complete(void)
{
	if (!path) {
		nbdkit_error("file= is required");
		return -1;
	}
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		nbdkit_error("%s: %m", path);
		return -1;
	}
	return 0;
}

static void ff_unload(void)
{
	if (fd >= 0)
		close(fd);
	free(path);
}

static void *ff_open(int readonly)
{
	(void)readonly;
	return NBDKIT_HANDLE_NOT_NEEDED;
}

static int64_t ff_get_size(void *h)
{
	struct stat st;

	(void)h;
	if (fstat(fd, &st) < 0) {
		nbdkit_error("fstat: %m");
		return -1;
	}
	return st.st_size;
}

static int ff_can_write(void *h) { (void)h; return 1; }
static int ff_can_flush(void *h) { (void)h; return 1; }
static int ff_can_fua(void *h) { (void)h; return NBDKIT_FUA_NATIVE; }

static int ff_pread(void *h, void *buf, uint32_t count, uint64_t off, uint32_t flags)
{
	(void)h; (void)flags;
	while (count) {
		ssize_t n = pread(fd, buf, count, off);
		if (n <= 0) {
			nbdkit_error("pread: %s", n ? strerror(errno) : "end of file");
			errno = n ? errno : EIO;
			return -1;
		}
		buf = (char *)buf + n, count -= n, off += n;
	}
	return 0;
}

static int ff_pwrite(void *h, const void *buf, uint32_t count, uint64_t off, uint32_t flags)
{
	(void)h;
	while (count) {
		ssize_t n = pwrite(fd, buf, count, off);
		if (n < 0) {
			nbdkit_error("pwrite: %m");
			return -1;
		}
		buf = (const char *)buf + n, count -= n, off += n;
	}
	if ((flags & NBDKIT_FLAG_FUA) && fdatasync(fd) < 0) {
		nbdkit_error("fdatasync: %m");
		return -1;
	}
	return 0;
}

/* the second, fourth, ... flush fails, its data left unsynced */
static int ff_flush(void *h, uint32_t flags)
{
	(void)h; (void)flags;
	if (atomic_fetch_add(&flushes, 1) % 2 == 1) {
		nbdkit_error("EIO injected");
		errno = EIO;
		return -1;
	}
	if (fdatasync(fd) < 0) {
		nbdkit_error("fdatasync: %m");
		return -1;
	}
	return 0;
}

static struct nbdkit_plugin plugin = {
	.name = "flakyflush",
	.version = "1",
	.config = ff_config,
	.config_complete = ff_config_complete,
	.config_help = "file=PATH  the file served (every second flush fails)",
	.unload = ff_unload,
	.open = ff_open,
	.get_size = ff_get_size,
	.can_write = ff_can_write,
	.can_flush = ff_can_flush,
	.can_fua = ff_can_fua,
	.pread = ff_pread,
	.pwrite = ff_pwrite,
	.flush = ff_flush,
};

NBDKIT_REGISTER_PLUGIN(plugin)
