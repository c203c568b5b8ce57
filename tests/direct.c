/*
 * Direct handles (WBC_O_DIRECT) and the vectored calls:
 *   1. a direct open writes back what closed handles left dirty in the
 *      cache and drops every page of the file: the backend holds the
 *      bytes, the cache none of the file;
 *   2. a file is open through the cache or direct, never both: each kind
 *      of open gets -EBUSY while a handle of the other is open;
 *   3. direct writes go to the backend at once (no dirty pages), extend
 *      the file, and read back direct and, after the direct handles are
 *      closed, through the cache (no stale copy anywhere); reads stop at
 *      the end of the file;
 *   4. wbc_preadv / wbc_pwritev, through the cache and direct;
 *   5. alignment: a dir: device's direct I/O must be aligned (-EINVAL
 *      otherwise), and aligned I/O works, also split at a max_io that
 *      was not a multiple of the alignment, on a dir: device and on a
 *      backend of one's own; a max_io over 1 GiB is taken as 1 GiB;
 *   6. a direct open fails with the write error of the pages it must
 *      write first, which stay dirty; once the fault ends it succeeds;
 *      with on_error=drop (the pages dropped, lost) it fails all the same;
 *   7. overlapping direct writes from several threads never put two
 *      overlapping I/Os of a file in flight (a backend written here checks
 *      every submission), and the file ends up with one of them per range.
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"
#include "backend_util.h"
#include "store_backend.h"

#include <fcntl.h>
#include <pthread.h>

#define SZ (1u << 20)
static char data[SZ], back[SZ];

/* ------------------------------------------------------------------ */
/* a backend that completes after a while from its thread and checks
 * that no two I/Os of a file in flight overlap */

#define OV_PEND 256
struct ov {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wbc_io *pend[OV_PEND];
	unsigned npend;
	bool stop;
	char *data;
	size_t size;
	unsigned long ios, max_inflight;
	pthread_t th;
};

static void ov_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->queue_depth = 64;
	caps->max_io = 64 << 10;
	caps->flags = WBC_BACKEND_ONE_FILE;
}

static int ov_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct ov *o = ctx;
	(void)name;
	(void)flags;
	*file = o;
	pthread_mutex_lock(&o->lock);
	*size = o->size;
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void ov_close(void *ctx, void *file)
{
	(void)ctx;
	(void)file;
}

static int ov_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct ov *o = ctx;
	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		for (unsigned j = 0; j < o->npend; j++) {
			struct wbc_io *p = o->pend[j];
			CHECK(io->off + io->len <= p->off || p->off + p->len <= io->off);
		}
		CHECK(o->npend < OV_PEND);
		o->pend[o->npend++] = io;
		o->ios++;
		if (o->npend > o->max_inflight)
			o->max_inflight = o->npend;
	}
	pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->lock);
	*queued = n;
	return 0;
}

static ssize_t ov_do(struct ov *o, struct wbc_io *io)
{
	size_t done = 0;
	if (io->op == WBC_IO_WRITE && io->off + io->len > o->size) {
		CHECK((o->data = realloc(o->data, io->off + io->len)));
		memset(o->data + o->size, 0, io->off + io->len - o->size);
		o->size = io->off + io->len;
	}
	for (int i = 0; i < io->iovcnt; i++) {
		uint64_t at = io->off + done;
		size_t n = io->iov[i].iov_len;
		if (io->op == WBC_IO_WRITE) {
			memcpy(o->data + at, io->iov[i].iov_base, n);
		} else {
			n = at >= o->size ? 0 : WBC_MIN(n, o->size - at);
			memcpy(io->iov[i].iov_base, o->data + at, n);
			if (n < io->iov[i].iov_len)
				return (ssize_t)(done + n);
		}
		done += n;
	}
	return (ssize_t)done;
}

static void *ov_main(void *arg)
{
	struct ov *o = arg;
	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (!o->npend && !o->stop)
			pthread_cond_wait(&o->cond, &o->lock);
		if (!o->npend)
			break;
		pthread_mutex_unlock(&o->lock);
		usleep(300);   /* let others be submitted meanwhile */
		pthread_mutex_lock(&o->lock);
		unsigned n = o->npend;
		struct wbc_io *ios[OV_PEND];
		for (unsigned i = 0; i < n; i++) {
			ios[i] = o->pend[i];
			ios[i]->res = ov_do(o, ios[i]);
		}
		o->npend = 0;
		pthread_mutex_unlock(&o->lock);
		wbc_io_complete_batch(ios, n);
		pthread_mutex_lock(&o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

static int ov_resize(void *ctx, void *file, uint64_t size)
{
	struct ov *o = ctx;
	(void)file;
	pthread_mutex_lock(&o->lock);
	CHECK((o->data = realloc(o->data, size ? size : 1)));
	if (size > o->size)
		memset(o->data + o->size, 0, size - o->size);
	o->size = size;
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static void ov_destroy(void *ctx)
{
	struct ov *o = ctx;
	pthread_mutex_lock(&o->lock);
	o->stop = true;
	pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->lock);
	pthread_join(o->th, NULL);
	printf("overlap backend: %lu I/Os, at most %lu in flight\n", o->ios, o->max_inflight);
	CHECK(o->max_inflight > 1);   /* the writers did run at once */
	free(o->data);
	free(o);
}

static const struct wbc_backend_ops ov_ops = {
	.size = sizeof(struct wbc_backend_ops), .name = "overlap",
	.caps = ov_caps, .open = ov_open, .close = ov_close, .submit = ov_submit,
	.resize = ov_resize, .destroy = ov_destroy,
};

struct ovw {
	wbc_dev *dev;
	unsigned id;
};

/* 8 threads, each writing 64 KiB blocks filled with its id at offsets
 * that overlap the others' (a 16 KiB step over a 512 KiB file) */
static void *ov_writer(void *arg)
{
	struct ovw *w = arg;
	wbc_file *f;
	static _Thread_local char buf[64 << 10];
	memset(buf, 'a' + (int)w->id, sizeof(buf));
	CHECK_EQ(wbc_file_open(w->dev, "", WBC_O_DIRECT, &f), 0);
	uint64_t s = w->id + 1;
	for (int i = 0; i < 200; i++) {
		uint64_t off = (t_rand(&s) % 29) * (16 << 10);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
	}
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

/* ------------------------------------------------------------------ */

/* A cache with a device of @spec whose file "e" has dirty pages that
 * fail to write: a direct open of it fails with EIO; the stats then. */
static wbc_cache *direct_open_fails(const char *spec, wbc_dev **dev, struct wbc_stats *st)
{
	wbc_cache *c = t_quiet_cache(16u << 20);
	wbc_file *f, *d;
	CHECK_EQ(wbc_dev_add(c, spec, dev), 0);
	CHECK_EQ(wbc_file_open(*dev, "e", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_file_close(f), 0);
	model_set_faults(*dev, 0, UINT64_MAX / 2, 0);
	CHECK_EQ(wbc_file_open(*dev, "e", WBC_O_DIRECT, &d), -EIO);
	wbc_stats(c, st);
	return c;
}

int main(void)
{
	t_fill(data, SZ, 5);
	struct wbc_stats st;
	wbc_file *f, *g, *d;
	wbc_dev *dev;
	uint64_t size;

	/* 1. the direct open writes back and drops */
	wbc_cache *c = t_quiet_cache(16u << 20);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, data, SZ, 0), SZ);
	CHECK_EQ(wbc_file_close(f), 0);
	wbc_stats(c, &st);
	CHECK(st.dirty_bytes > 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_DIRECT, &d), 0);
	wbc_stats(c, &st);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes, 0);
	CHECK_EQ(st.cached_bytes, 0);
	CHECK_EQ(t_backend_read(dev, "a", back, SZ, &size), 0);
	CHECK_EQ(size, SZ);
	CHECK(!memcmp(back, data, SZ));

	/* 2. one kind at a time */
	CHECK_EQ(wbc_file_open(dev, "a", 0, &f), -EBUSY);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_DIRECT, &g), 0);   /* direct: several */
	CHECK_EQ(wbc_file_close(g), 0);

	/* 3. direct writes: to the backend at once, extending the file */
	t_fill(data, SZ, 6);
	CHECK_EQ(wbc_pwrite(d, data, SZ / 2, SZ / 2), SZ / 2);
	CHECK_EQ(wbc_pwrite(d, data + SZ / 2, SZ / 2, SZ), SZ / 2);
	CHECK_EQ(wbc_file_size(d), SZ + SZ / 2);
	wbc_stats(c, &st);
	CHECK_EQ(st.dirty_bytes + st.writeback_bytes + st.cached_bytes, 0);
	CHECK_EQ(wbc_pread(d, back, SZ, SZ / 2), SZ);
	CHECK(!memcmp(back, data, SZ));
	CHECK_EQ(wbc_pread(d, back, SZ, SZ), SZ / 2);      /* short at the end */
	CHECK_EQ(wbc_pread(d, back, SZ, 2 * SZ), 0);
	CHECK_EQ(wbc_fsync(d), 0);
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_file_open(dev, "a", 0, &f), 0);       /* cached again */
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_DIRECT, &d), -EBUSY);
	CHECK_EQ(wbc_pread(f, back, SZ, SZ / 2), SZ);
	CHECK(!memcmp(back, data, SZ));

	/* 4. vectored, through the cache */
	struct iovec v[3] = {
		{ data, 1000 }, { data + 1000, 0 }, { data + 1000, 5000 },
	};
	CHECK_EQ(wbc_pwritev(f, v, 3, 12345), 6000);
	char *b1 = back, *b2 = back + 3000;
	struct iovec r[2] = { { b1, 3000 }, { b2, 3000 } };
	CHECK_EQ(wbc_preadv(f, r, 2, 12345), 6000);
	CHECK(!memcmp(back, data, 6000));
	CHECK_EQ(wbc_preadv(f, r, -1, 0), -EINVAL);
	CHECK_EQ(wbc_file_close(f), 0);
	/* ... and direct (mem: no alignment), one I/O split at max_io */
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_DIRECT, &d), 0);
	CHECK_EQ(t_backend_read(dev, "a", back, SZ, &size), 0);
	CHECK(!memcmp(back + 12345, data, 6000));           /* written back at the open */
	struct iovec big[2] = { { data, SZ / 2 + 7 }, { data + SZ / 2 + 7, SZ / 2 - 7 } };
	CHECK_EQ(wbc_pwritev(d, big, 2, 0), SZ);
	memset(back, 0, SZ);
	struct iovec rb[2] = { { back, 4096 }, { back + 4096, SZ - 4096 } };
	CHECK_EQ(wbc_preadv(d, rb, 2, 0), SZ);
	CHECK(!memcmp(back, data, SZ));
	CHECK_EQ(wbc_truncate(d, 1000), 0);                 /* truncate works direct */
	CHECK_EQ(wbc_pread(d, back, SZ, 0), 1000);
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* 5. alignment on an O_DIRECT file backend */
	char *dir = t_mkdtemp(), spec[600];
	c = t_quiet_cache(16u << 20);
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "x", WBC_O_CREAT | WBC_O_DIRECT, &d), 0);
	size_t align = dev->be->dio_align;
	printf("dir: alignment %zu\n", align);
	char *abuf = aligned_alloc(4096, SZ);
	CHECK(abuf);
	memcpy(abuf, data, SZ);
	if (align > 1) {
		CHECK_EQ(wbc_pwrite(d, abuf + 1, 4096, 0), -EINVAL);
		CHECK_EQ(wbc_pwrite(d, abuf, 4095, 0), -EINVAL);
		CHECK_EQ(wbc_pwrite(d, abuf, 4096, 1), -EINVAL);
	}
	CHECK_EQ(wbc_pwrite(d, abuf, SZ, 0), SZ);
	memset(abuf, 0, SZ);
	CHECK_EQ(wbc_pread(d, abuf, SZ, 0), SZ);
	CHECK(!memcmp(abuf, data, SZ));
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_file_open(dev, "x", 0, &f), 0);
	CHECK_EQ(wbc_pread(f, back, SZ, 0), SZ);
	CHECK(!memcmp(back, data, SZ));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	/* a max_io that is no multiple of the alignment: rounded down to one,
	 * so that a large aligned I/O split at it stays aligned */
	c = t_quiet_cache(16u << 20);
	snprintf(spec, sizeof(spec), "dir:%s,max_io=6000", dir);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK(dev->be->max_io % (align ? align : 1) == 0);
	CHECK_EQ(wbc_file_open(dev, "y", WBC_O_CREAT | WBC_O_DIRECT, &d), 0);
	memcpy(abuf, data, SZ);
	CHECK_EQ(wbc_pwrite(d, abuf, SZ, 0), SZ);
	memset(abuf, 0, SZ);
	CHECK_EQ(wbc_pread(d, abuf, SZ, 0), SZ);
	CHECK(!memcmp(abuf, data, SZ));
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	/* the same for a backend of one's own (align 4096, max_io 6144: its
	 * direct I/O was split at 6144, unaligned: -EINVAL), and a max_io of
	 * 4 GiB is taken as 1 GiB (an I/O's result is an int: 2 GiB done
	 * came back as an error, 4 GiB as 0) */
	c = t_quiet_cache(16u << 20);
	sb_align = 4096;
	sb_max_io = 6144;
	CHECK_EQ(wbc_dev_add_backend(c, &sb_ops, NULL, "", &dev), 0);
	CHECK_EQ(dev->be->max_io, 4096);
	CHECK_EQ(wbc_file_open(dev, "s", WBC_O_CREAT | WBC_O_DIRECT, &d), 0);
	memcpy(abuf, data, 16384);
	CHECK_EQ(wbc_pwrite(d, abuf, 16384, 0), 16384);   /* the store checks each I/O */
	memset(abuf, 0, 16384);
	CHECK_EQ(wbc_pread(d, abuf, 16384, 0), 16384);
	CHECK(!memcmp(abuf, data, 16384));
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	c = t_quiet_cache(16u << 20);
	sb_max_io = (size_t)4 << 30;
	CHECK_EQ(wbc_dev_add_backend(c, &sb_ops, NULL, "", &dev), 0);
	CHECK_EQ(dev->be->max_io, (size_t)1 << 30);
	CHECK_EQ(wbc_cache_close(c), 0);
	sb_align = 0;
	free(abuf);
	t_rmdir(dir);

	/* 6. the pages a direct open must write first fail */
	c = direct_open_fails("model:bw=500M", &dev, &st);
	CHECK(st.dirty_bytes > 0 && st.lost_bytes == 0);    /* kept, at risk */
	model_set_faults(dev, 0, 0, 0);
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_DIRECT, &d), 0);
	CHECK_EQ(wbc_pread(d, back, SZ, 0), SZ);
	CHECK(!memcmp(back, data, SZ));
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);   /* the failed writes, once */
	CHECK_EQ(wbc_cache_close(c), 0);
	/* the same with on_error=drop: the pages are lost, not kept; the open
	 * fails with their error all the same (it succeeded, and its reads
	 * gave the backend's old bytes) */
	c = direct_open_fails("model:bw=500M,on_error=drop", &dev, &st);
	CHECK(st.dirty_bytes == 0 && st.lost_bytes > 0);    /* dropped, counted */
	model_set_faults(dev, 0, 0, 0);
	CHECK_EQ(wbc_file_open(dev, "e", WBC_O_DIRECT, &d), 0);   /* told: opens */
	CHECK_EQ(wbc_fsync(d), 0);
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_cache_close(c), -EIO);
	printf("    on_error=drop: the direct open fails with the lost pages' error\n");

	/* 7. overlapping direct writes */
	c = t_quiet_cache(16u << 20);
	struct ov *o = calloc(1, sizeof(*o));
	CHECK(o);
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->cond, NULL);
	CHECK_EQ(pthread_create(&o->th, NULL, ov_main, o), 0);
	CHECK_EQ(wbc_dev_add_backend(c, &ov_ops, o, NULL, &dev), 0);
	pthread_t th[8];
	struct ovw w[8];
	for (unsigned i = 0; i < 8; i++) {
		w[i] = (struct ovw){ dev, i };
		CHECK_EQ(pthread_create(&th[i], NULL, ov_writer, &w[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(wbc_file_open(dev, "", WBC_O_DIRECT, &d), 0);
	size_t fsz = (size_t)wbc_file_size(d);
	CHECK_EQ(fsz, 29 * (16 << 10) - (16 << 10) + (64 << 10));
	CHECK_EQ(wbc_pread(d, back, fsz, 0), (ssize_t)fsz);
	/* every 16 KiB piece is one writer's, whole */
	for (size_t p = 0; p < fsz; p += 16 << 10) {
		if (!back[p])
			continue;   /* a hole nobody wrote */
		for (size_t k = 1; k < (16 << 10); k++)
			CHECK(back[p + k] == back[p]);
	}
	CHECK_EQ(wbc_file_close(d), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("direct: all passed\n");
	return 0;
}
