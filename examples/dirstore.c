/*
 * dirstore: an example wbcache backend (see dirstore.h).
 *
 * How it meets the contract of <wbcache_backend.h>:
 *   - submit() only queues the I/Os (one lock hold for the whole batch)
 *     and wakes a worker; it never blocks on I/O;
 *   - a worker takes up to BATCH queued I/Os, sleeps one round trip, does
 *     each with preadv()/pwritev() and completes them together with
 *     wbc_io_complete_batch(), holding none of its locks;
 *   - a short pwritev() is completed as short: the engine sends the rest;
 *   - flush() is fsync()/fdatasync() of the file (syncfs() for all).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dirstore.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define QD 32
#define BATCH 16
#define MAX_THREADS 64

struct ds_file {
	int fd;
};

struct dirstore {
	int dirfd;
	unsigned rtt_us, nthreads;
	pthread_mutex_t lock;       /* the queue, stop, the counters */
	pthread_cond_t cond;
	struct wbc_io **q;          /* a ring of cap entries */
	size_t head, n, cap;
	bool stop;
	struct dirstore_stats st;
	pthread_t threads[MAX_THREADS];
};

static void ds_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->queue_depth = QD;
	caps->max_io = 1u << 20;
}

static int ds_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct dirstore *d = ctx;
	int fd = openat(d->dirfd, name,
			O_RDWR | O_CLOEXEC | O_NOFOLLOW | (flags & WBC_OPEN_CREATE ? O_CREAT : 0), 0644);
	if (fd < 0)
		return -errno;
	struct stat st;
	struct ds_file *f = malloc(sizeof(*f));
	int err = !f ? -ENOMEM : fstat(fd, &st) ? -errno : !S_ISREG(st.st_mode) ? -EINVAL : 0;
	if (err) {
		free(f);
		close(fd);
		return err;
	}
	f->fd = fd;
	*file = f;
	*size = (uint64_t)st.st_size;
	return 0;
}

static void ds_close(void *ctx, void *file)
{
	(void)ctx;
	struct ds_file *f = file;
	close(f->fd);
	free(f);
}

static int ds_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct dirstore *d = ctx;
	pthread_mutex_lock(&d->lock);
	if (d->n + n > d->cap) {
		/* grow the ring (the engine keeps at most QD writes in flight,
		 * but reads come from any number of threads) */
		size_t cap = d->cap * 2 > d->n + n ? d->cap * 2 : d->n + n;
		struct wbc_io **q = malloc(cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&d->lock);
			*queued = 0;
			return -ENOMEM;
		}
		for (size_t i = 0; i < d->n; i++)
			q[i] = d->q[(d->head + i) % d->cap];
		free(d->q);
		d->q = q;
		d->head = 0;
		d->cap = cap;
	}
	for (unsigned i = 0; i < n; i++)
		d->q[(d->head + d->n++) % d->cap] = ios[i];
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
	*queued = n;
	return 0;
}

static ssize_t ds_do(struct wbc_io *io)
{
	struct ds_file *f = io->file;
	ssize_t r;
	do
		r = io->op == WBC_IO_WRITE ?
		    pwritev(f->fd, io->iov, io->iovcnt, (off_t)io->off) :
		    preadv(f->fd, io->iov, io->iovcnt, (off_t)io->off);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static void *ds_worker(void *arg)
{
	struct dirstore *d = arg;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		while (!d->n && !d->stop)
			pthread_cond_wait(&d->cond, &d->lock);
		if (!d->n)
			break;
		struct wbc_io *batch[BATCH];
		unsigned k = 0;
		while (k < BATCH && d->n) {
			batch[k++] = d->q[d->head];
			d->head = (d->head + 1) % d->cap;
			d->n--;
		}
		if (d->n)
			pthread_cond_signal(&d->cond);   /* more for another worker */
		d->st.batches++;
		d->st.ios += k;
		pthread_mutex_unlock(&d->lock);
		if (d->rtt_us) {
			struct timespec ts = { .tv_sec = d->rtt_us / 1000000,
					       .tv_nsec = (long)(d->rtt_us % 1000000) * 1000 };
			nanosleep(&ts, NULL);
		}
		for (unsigned i = 0; i < k; i++)
			batch[i]->res = ds_do(batch[i]);
		wbc_io_complete_batch(batch, k);   /* no lock of ours held */
		pthread_mutex_lock(&d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

static int ds_flush(void *ctx, void *file, unsigned flags)
{
	struct dirstore *d = ctx;
	pthread_mutex_lock(&d->lock);
	d->st.flushes++;
	pthread_mutex_unlock(&d->lock);
	int r;
	if (!file)
		r = syncfs(d->dirfd);
	else if (flags & WBC_FLUSH_DATASYNC)
		r = fdatasync(((struct ds_file *)file)->fd);
	else
		r = fsync(((struct ds_file *)file)->fd);
	return r ? -errno : 0;
}

static int ds_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx;
	return ftruncate(((struct ds_file *)file)->fd, (off_t)size) ? -errno : 0;
}

static void ds_destroy(void *ctx)
{
	struct dirstore *d = ctx;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	for (unsigned i = 0; i < d->nthreads; i++)
		pthread_join(d->threads[i], NULL);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->cond);
	close(d->dirfd);
	free(d->q);
	free(d);
}

static const struct wbc_backend_ops dirstore_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "dirstore",
	.caps = ds_caps,
	.open = ds_open,
	.close = ds_close,
	.submit = ds_submit,
	.flush = ds_flush,
	.resize = ds_resize,
	.destroy = ds_destroy,
};

int dirstore_new(const char *dir, unsigned rtt_us, unsigned threads,
		 const struct wbc_backend_ops **ops, void **ctx)
{
	if (!threads || threads > MAX_THREADS)
		return -EINVAL;
	struct dirstore *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cap = 4 * QD;
	if (!(d->q = malloc(d->cap * sizeof(*d->q)))) {
		free(d);
		return -ENOMEM;
	}
	if ((d->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		int err = -errno;
		free(d->q);
		free(d);
		return err;
	}
	d->rtt_us = rtt_us;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	for (; d->nthreads < threads; d->nthreads++) {
		int err = pthread_create(&d->threads[d->nthreads], NULL, ds_worker, d);
		if (err) {
			ds_destroy(d);
			return -err;
		}
	}
	*ops = &dirstore_ops;
	*ctx = d;
	return 0;
}

void dirstore_stats(void *ctx, struct dirstore_stats *st)
{
	struct dirstore *d = ctx;
	pthread_mutex_lock(&d->lock);
	*st = d->st;
	pthread_mutex_unlock(&d->lock);
}
