/*
 * Test helper: a backend on the public interface that keeps one file in
 * memory (every name opens it), up to SB_CAP bytes, and fails on demand:
 * resizes, removes, the next flush, reads that reach an offset, writes
 * past an offset (a full store: sb_set_full_at).  A write
 * past the end fills the hole with zeros; a read past it is short.  The
 * test sets sb_max_io and sb_align before adding the device, and the
 * knobs with sb_set (under the store's lock).
 */
#ifndef WBC_TEST_STORE_BACKEND_H
#define WBC_TEST_STORE_BACKEND_H
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>

#define SB_CAP (8u << 20)

static pthread_mutex_t sb_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char sb_store[SB_CAP];
static uint64_t sb_size;
static size_t sb_max_io = 256 * 1024;
static size_t sb_align;          /* caps.align; every I/O is checked against it */
static bool sb_fail_resize, sb_fail_remove, sb_fail_flush;
static uint64_t sb_fail_read_from = UINT64_MAX;
static uint64_t sb_full_at = UINT64_MAX;   /* a write stops there: short, then -ENOSPC */
static int sb_dummy;

static void sb_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = sb_max_io;
	c->align = sb_align;
	c->queue_depth = 8;
}

static int sb_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)name; (void)flags;
	*file = &sb_dummy;
	pthread_mutex_lock(&sb_lock);
	*size = sb_size;
	pthread_mutex_unlock(&sb_lock);
	return 0;
}

static void sb_close(void *ctx, void *file) { (void)ctx; (void)file; }

static int sb_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		CHECK(io->off + io->len <= SB_CAP);
		if (sb_align)   /* the interface's promise */
			CHECK(io->off % sb_align == 0 && io->len % sb_align == 0);
		pthread_mutex_lock(&sb_lock);
		ssize_t done = 0;
		if (io->op == WBC_IO_READ && io->off + io->len > sb_fail_read_from) {
			done = -EIO;
		} else if (io->op == WBC_IO_WRITE && io->off >= sb_full_at) {
			done = -ENOSPC;
		} else {
			if (io->op == WBC_IO_WRITE && io->off > sb_size)   /* a hole: zeros */
				memset(sb_store + sb_size, 0, io->off - sb_size);
			uint64_t at = io->off;
			for (int k = 0; k < io->iovcnt; k++) {
				size_t len = io->iov[k].iov_len;
				if (io->op == WBC_IO_WRITE) {
					/* a full store takes what fits */
					if (at + len > sb_full_at)
						len = (size_t)(sb_full_at - at);
					memcpy(sb_store + at, io->iov[k].iov_base, len);
					done += (ssize_t)len;
					if (len < io->iov[k].iov_len) {
						at += len;
						break;
					}
				} else {
					size_t v = at >= sb_size ? 0 :
						   sb_size - at < len ? (size_t)(sb_size - at) : len;
					memcpy(io->iov[k].iov_base, sb_store + at, v);
					done += (ssize_t)v;
					if (v < len)
						break;
				}
				at += len;
			}
			if (io->op == WBC_IO_WRITE && at > sb_size)
				sb_size = at;
		}
		pthread_mutex_unlock(&sb_lock);
		wbc_io_complete(io, done);
	}
	return 0;
}

static int sb_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file;
	if (size > SB_CAP)
		return -EFBIG;
	pthread_mutex_lock(&sb_lock);
	int err = 0;
	if (sb_fail_resize) {
		err = -EIO;
	} else {
		if (size > sb_size)
			memset(sb_store + sb_size, 0, size - sb_size);
		sb_size = size;
	}
	pthread_mutex_unlock(&sb_lock);
	return err;
}

static int sb_remove(void *ctx, void *file)
{
	(void)ctx; (void)file;
	pthread_mutex_lock(&sb_lock);
	int err = sb_fail_remove ? -EIO : 0;
	if (!err)
		sb_size = 0;
	pthread_mutex_unlock(&sb_lock);
	return err;
}

static int sb_flush(void *ctx, void *file, unsigned flags)
{
	(void)ctx; (void)file; (void)flags;
	pthread_mutex_lock(&sb_lock);
	int err = sb_fail_flush ? -EIO : 0;
	sb_fail_flush = false;     /* once */
	pthread_mutex_unlock(&sb_lock);
	return err;
}

static void sb_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops sb_ops = {
	.size = sizeof(sb_ops), .name = "store", .caps = sb_caps, .open = sb_open,
	.close = sb_close, .submit = sb_submit, .resize = sb_resize, .remove = sb_remove,
	.flush = sb_flush, .destroy = sb_destroy,
};

/* Set a knob (sb_fail_*) under the store's lock. */
static inline void sb_set(bool *knob, bool on)
{
	pthread_mutex_lock(&sb_lock);
	*knob = on;
	pthread_mutex_unlock(&sb_lock);
}

/* Writes stop at @off (UINT64_MAX: never): one across it is short, one
 * from there fails with -ENOSPC, as on a full disk. */
static inline void sb_set_full_at(uint64_t off)
{
	pthread_mutex_lock(&sb_lock);
	sb_full_at = off;
	pthread_mutex_unlock(&sb_lock);
}

static inline void sb_set_fail_read_from(uint64_t off)
{
	pthread_mutex_lock(&sb_lock);
	sb_fail_read_from = off;
	pthread_mutex_unlock(&sb_lock);
}

/* The store holds @c at [from, to). */
static inline bool sb_is(uint64_t from, uint64_t to, int c)
{
	pthread_mutex_lock(&sb_lock);
	bool ok = to <= sb_size;
	for (uint64_t i = from; ok && i < to; i++)
		ok = sb_store[i] == (unsigned char)c;
	pthread_mutex_unlock(&sb_lock);
	return ok;
}

static inline uint64_t sb_backend_size(void)
{
	pthread_mutex_lock(&sb_lock);
	uint64_t s = sb_size;
	pthread_mutex_unlock(&sb_lock);
	return s;
}
#endif
