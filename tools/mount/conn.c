/*
 * The connection's wire.  libfuse 3.14 (the version this builds against)
 * negotiates only the flags it knows; the kernel offers more.  The mount
 * reads and writes /dev/fuse through libfuse's custom I/O hook
 * (fuse_session_custom_io), which sees the kernel's INIT request and
 * libfuse's INIT reply, and adds to the reply the flags below where the
 * kernel offered them:
 *
 *   FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6): a direct_io open may be mapped
 *   shared; the kernel keeps the mapping's pages coherent with direct
 *   reads and writes (it writes back and invalidates the range before
 *   each direct I/O and invalidates after a direct write).  Read-write
 *   opens can then bypass the kernel's page cache too (see open_direct).
 *
 *   FUSE_HANDLE_KILLPRIV_V2 (kernel 5.11): the file system clears the
 *   set-user-ID and set-group-ID bits and the file capability on a write,
 *   a truncate and an O_TRUNC open by a caller without CAP_FSETID (it
 *   does: kill_priv), so the kernel need not ask for security.capability
 *   (a GETXATTR round trip) before every write through its page cache.
 *
 *   FUSE_OVER_IO_URING (kernel 6.14, with the fuse module's enable_uring):
 *   requests come through io_uring rings (uring.c), asked for only under
 *   -o uring=auto|1 once the rings are made (conn_uring_want).
 *
 * Nothing else passes through these functions but the bytes libfuse would
 * have read and written itself, and the answers to requests that came
 * through a ring, which go back through it (uring_reply).
 * WBCACHE_MOUNT_INIT=0 in the daemon's environment adds none of the first
 * two flags (to measure what they bring).
 */
#include "mount.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define OP_INIT 26
#define F_HANDLE_KILLPRIV_V2 (1ull << 28)
#define F_INIT_EXT (1ull << 30)
#define F_MAX_PAGES (1ull << 22)
#define F_DIRECT_IO_ALLOW_MMAP (1ull << 36)
#define F_OVER_IO_URING (1ull << 41)

/* struct fuse_in_header: len 0, opcode 4, unique 8 (40 bytes); struct
 * fuse_init_in: major 0, minor 4, max_readahead 8, flags 12, flags2 16.
 * struct fuse_out_header: len 0, error 4, unique 8 (16 bytes); struct
 * fuse_init_out: flags 12, max_write 20, max_pages 28 (16 bits), flags2 32. */
static atomic_bool init_done;
static uint64_t init_unique, offered;
/* io_uring: wanted (the rings are made), granted in the INIT answer, and
 * the payload a ring entry needs (the kernel's max(FUSE_MIN_READ_BUFFER,
 * max_write, max_pages pages)).  Set and read by the thread that answers
 * INIT (uring_begin). */
static bool uring_want, uring_granted;
static size_t uring_payload;

bool conn_uring_offered(void)
{
	return offered & F_OVER_IO_URING;
}

void conn_uring_want(bool want)
{
	uring_want = want;
}

bool conn_uring_granted(void)
{
	return uring_granted;
}

size_t conn_uring_payload(void)
{
	return uring_payload;
}

static uint32_t get32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

#ifdef __SANITIZE_THREAD__
char conn_wire;
#endif

static ssize_t conn_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	ssize_t r = read(fd, buf, len);
	conn_received();
	if (r >= 40 + 16 && !atomic_load_explicit(&init_done, memory_order_acquire) &&
	    get32((char *)buf + 4) == OP_INIT) {
		const char *in = (const char *)buf + 40;
		uint64_t f = get32(in + 12);
		if ((f & F_INIT_EXT) && r >= 40 + 20)
			f |= (uint64_t)get32(in + 16) << 32;
		memcpy(&init_unique, (char *)buf + 8, sizeof(init_unique));
		offered = f;
	}
	return r;
}

static ssize_t conn_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	conn_sending();
	ssize_t r = uring_reply(iov, count);
	if (r >= 0)
		return r;
	if (!atomic_load_explicit(&init_done, memory_order_acquire) && count >= 2 &&
	    iov[0].iov_len >= 16 && iov[1].iov_len >= 16) {
		uint64_t unique;
		memcpy(&unique, (char *)iov[0].iov_base + 8, sizeof(unique));
		if (unique == init_unique && !get32((char *)iov[0].iov_base + 4)) {
			char *out = iov[1].iov_base;
			uint32_t flags = get32(out + 12);
			bool ext = iov[1].iov_len >= 36 && (offered & F_INIT_EXT);
			const char *env = getenv("WBCACHE_MOUNT_INIT");
			bool add = !env || strcmp(env, "0");
			if (add && (offered & F_HANDLE_KILLPRIV_V2)) {
				flags |= (uint32_t)F_HANDLE_KILLPRIV_V2;
				M.killpriv_v2 = true;
			}
			uint32_t flags2 = ext ? get32(out + 32) : 0;
			if (add && ext && (offered & F_DIRECT_IO_ALLOW_MMAP)) {
				flags2 |= (uint32_t)(F_DIRECT_IO_ALLOW_MMAP >> 32);
				M.direct_mmap = true;
			}
			if (uring_want && ext && (offered & F_OVER_IO_URING)) {
				flags2 |= (uint32_t)(F_OVER_IO_URING >> 32);
				uring_granted = true;
				/* the kernel clamps max_pages to its limit: this
				 * is at least what it asks */
				size_t pages = 32;   /* FUSE_DEFAULT_MAX_PAGES_PER_REQ */
				uint16_t mp;
				memcpy(&mp, out + 28, sizeof(mp));
				if ((flags & F_MAX_PAGES) && mp > pages)
					pages = mp;
				size_t pl = pages * (size_t)sysconf(_SC_PAGESIZE);
				uring_payload = get32(out + 20) > pl ? get32(out + 20) : pl;
			}
			if (flags2) {
				flags |= (uint32_t)F_INIT_EXT;
				memcpy(out + 32, &flags2, sizeof(flags2));
			}
			memcpy(out + 12, &flags, sizeof(flags));
			atomic_store_explicit(&init_done, true, memory_order_release);
		}
	}
	return writev(fd, iov, count);
}

/* After fuse_session_mount: the session reads and writes through the
 * functions above.  Without them the mount works as libfuse negotiates. */
void conn_hook(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .writev = conn_writev, .read = conn_read };
	if (fuse_session_custom_io(se, &io, fuse_session_fd(se)))
		logmsg("no custom I/O: read-write opens go through the kernel's page cache");
}
