/*
 * Test helper: a backend on the public interface that holds the writes it
 * is given while hb_hold is set (the test completes them), completes the
 * others at once (reads: zeros), and resizes through hb_resize (NULL: at
 * once).  Its files are all one empty dummy.  The test sets hb_max_io and
 * hb_qd before adding the device.
 */
#ifndef WBC_TEST_HELD_BACKEND_H
#define WBC_TEST_HELD_BACKEND_H
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>

#define HB_MAX_HELD 256

static pthread_mutex_t hb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hb_cond = PTHREAD_COND_INITIALIZER;   /* a write held, a resize */
static struct wbc_io *hb_held[HB_MAX_HELD];
static int hb_nheld;
static bool hb_hold;
static size_t hb_max_io = 64 * 1024;
static unsigned hb_qd = 8;
static int (*hb_resize)(uint64_t size);
static int hb_dummy;

static void hb_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = hb_max_io;
	c->queue_depth = hb_qd;
}

static int hb_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)name; (void)flags;
	*file = &hb_dummy;
	*size = 0;
	return 0;
}

static void hb_close(void *ctx, void *file) { (void)ctx; (void)file; }

static int hb_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		pthread_mutex_lock(&hb_lock);
		bool h = io->op == WBC_IO_WRITE && hb_hold;
		if (h) {
			CHECK(hb_nheld < HB_MAX_HELD);
			hb_held[hb_nheld++] = io;
			pthread_cond_broadcast(&hb_cond);
		}
		pthread_mutex_unlock(&hb_lock);
		if (h)
			continue;
		if (io->op == WBC_IO_READ)
			for (int k = 0; k < io->iovcnt; k++)
				memset(io->iov[k].iov_base, 0, io->iov[k].iov_len);
		wbc_io_complete(io, (ssize_t)io->len);
	}
	return 0;
}

static int hb_resize_op(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file;
	return hb_resize ? hb_resize(size) : 0;
}

static void hb_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops hb_ops = {
	.size = sizeof(hb_ops), .name = "held", .caps = hb_caps, .open = hb_open,
	.close = hb_close, .submit = hb_submit, .resize = hb_resize_op, .destroy = hb_destroy,
};

/* How many writes the backend holds now. */
static inline int hb_count(void)
{
	pthread_mutex_lock(&hb_lock);
	int n = hb_nheld;
	pthread_mutex_unlock(&hb_lock);
	return n;
}
#endif
