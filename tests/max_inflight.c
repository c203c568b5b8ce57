/*
 * max_inflight=N (a device tunable, for experiments: the writeback lab's
 * fixed in-flight limit, NFS's of 2017): at most N of the device's I/Os
 * are in flight, whatever queue depth its backend offers.
 *
 * A backend written here on the public interface (queue depth 64) holds
 * every write it is given and completes the ones it holds all at once
 * when it holds @release of them or when every write the test expects
 * has come; it records the most it held.  64 files of one page each are
 * dirtied and synced: 64 single-page writes.  Without a limit the
 * backend comes to hold 8 at once (the pool of 64 bios lets the flusher
 * submit them: the sync could not end otherwise); with max_inflight=4
 * it never holds more than 4, so it completes them 4 at a time.
 */
#include "testutil.h"
#include "internal.h"

#include <pthread.h>

#define NFILES 64

struct holder {
	pthread_mutex_t lock;
	struct wbc_io *held[NFILES];
	unsigned n, release, max, total;
};

static void h_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->max_io = 1 << 20;
	caps->queue_depth = 64;
}

static int h_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx, (void)name, (void)flags;
	*file = (void *)1;
	*size = 0;
	return 0;
}

static void h_close(void *ctx, void *file) { (void)ctx, (void)file; }

static int h_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct holder *h = ctx;
	struct wbc_io *done[NFILES];
	unsigned nd = 0;
	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < n; i++) {
		ios[i]->res = (ssize_t)ios[i]->len;
		if (ios[i]->op != WBC_IO_WRITE || h->n == NFILES) {
			done[nd++] = ios[i];
			continue;
		}
		h->held[h->n++] = ios[i];
		h->total++;
		if (h->n > h->max)
			h->max = h->n;
	}
	if (h->n >= h->release || h->total == NFILES) {
		for (unsigned i = 0; i < h->n && nd < NFILES; i++)
			done[nd++] = h->held[i];
		h->n = 0;
	}
	pthread_mutex_unlock(&h->lock);
	*queued = n;
	if (nd)
		wbc_io_complete_batch(done, nd);
	return 0;
}

static int h_resize(void *ctx, void *file, uint64_t size) { (void)ctx, (void)file, (void)size; return 0; }
static void h_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops h_ops = {
	.size = sizeof(struct wbc_backend_ops), .name = "holder",
	.caps = h_caps, .open = h_open, .close = h_close, .submit = h_submit,
	.resize = h_resize, .destroy = h_destroy,
};

/* dirty 64 one-page files, sync; the most the backend held at once */
static unsigned run(const char *opts, unsigned release, unsigned *bios)
{
	struct holder h = { .release = release };
	pthread_mutex_init(&h.lock, NULL);
	struct wbc_config cfg = t_config(64 << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;   /* no writeback before the sync */
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add_backend(c, &h_ops, &h, opts, &dev), 0);
	*bios = dev->nr_bios;
	char buf[4096];
	t_fill(buf, sizeof(buf), 1);
	for (int i = 0; i < NFILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		wbc_file *f;
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (long long)sizeof(buf));
		CHECK_EQ(wbc_file_close(f), 0);
	}
	CHECK_EQ(wbc_dev_sync(dev), 0);
	pthread_mutex_lock(&h.lock);
	CHECK_EQ(h.total, (unsigned)NFILES);
	CHECK_EQ(h.n, 0u);
	unsigned max = h.max;
	pthread_mutex_unlock(&h.lock);
	CHECK_EQ(wbc_cache_close(c), 0);
	pthread_mutex_destroy(&h.lock);
	return max;
}

int main(void)
{
	unsigned bios;
	/* no limit: the backend's queue depth is the pool */
	unsigned max = run("", 8, &bios);
	CHECK_EQ(bios, 64u);
	CHECK(max >= 8);
	/* max_inflight=4: a pool of 4; never more than 4 held */
	max = run("max_inflight=4", 4, &bios);
	CHECK_EQ(bios, 4u);
	CHECK_EQ(max, 4u);
	/* above the queue depth it changes nothing */
	run("max_inflight=1000", 8, &bios);
	CHECK_EQ(bios, 64u);

	/* bad values */
	struct wbc_config cfg = t_config(16 << 20, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add(c, "mem,max_inflight=0", &d), -EINVAL);
	CHECK_EQ(wbc_dev_add(c, "mem,max_inflight=x", &d), -EINVAL);
	CHECK_EQ(wbc_dev_add(c, "model:max_inflight=2", &d), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("max_inflight: ok\n");
	return 0;
}
