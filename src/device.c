/*
 * Devices: a backend, its flusher thread, its inodes and dirty lists.
 */
#include "internal.h"

#define INITIAL_HASH 1024

void handles_close_dev(struct wbc_dev *dev);   /* file.c */

int wbc_dev_add_msg(wbc_cache *c, const char *spec, wbc_dev **out, char *msg, size_t msglen)
{
	char dummy[8];
	if (!msg || !msglen) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	msg[0] = '\0';
	if (!c || !spec || !out) {
		snprintf(msg, msglen, "missing argument");
		return -EINVAL;
	}
	struct backend *be;
	int err = backend_create(spec, &be, msg, msglen);
	if (err)
		return err;
	if (be->max_io < c->page_size)
		be->max_io = c->page_size;
	struct wbc_dev *dev = calloc(1, sizeof(*dev));
	if (!dev || !(dev->spec = strdup(spec)) ||
	    !(dev->hash = calloc(INITIAL_HASH, sizeof(*dev->hash)))) {
		if (dev) {
			free(dev->spec);
			free(dev);
		}
		be->ops->destroy(be);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	dev->cache = c;
	dev->be = be;
	dev->hash_size = INITIAL_HASH;
	wbc_mutex_init(&dev->inode_lock);
	wbc_mutex_init(&dev->list_lock);
	wbc_mutex_init(&dev->work_lock);
	wbc_mutex_init(&dev->err_lock);
	wbc_cond_init(&dev->work_cond);
	wbc_cond_init(&dev->done_cond);
	list_init(&dev->b_dirty);
	list_init(&dev->b_io);
	list_init(&dev->b_more_io);
	list_init(&dev->work_list);
	atomic_store(&dev->write_bw, WBC_INIT_BW);
	dev->avg_write_bw = WBC_INIT_BW;
	dev->bw_stamp_ns = wbc_now_ns();
	if ((err = dev_io_init(dev)) || (err = flusher_start(dev))) {
		dev_io_destroy(dev);
		be->ops->destroy(be);
		free(dev->hash);
		free(dev->spec);
		free(dev);
		snprintf(msg, msglen, "cannot start the flusher: %s", strerror(-err));
		return err;
	}
	pthread_mutex_lock(&c->dev_lock);
	dev->id = c->nr_devs++;
	dev->next = c->devs;
	c->devs = dev;
	pthread_mutex_unlock(&c->dev_lock);
	*out = dev;
	return 0;
}

int wbc_dev_add(wbc_cache *c, const char *spec, wbc_dev **out)
{
	return wbc_dev_add_msg(c, spec, out, NULL, 0);
}

int wbc_dev_sync(wbc_dev *dev)
{
	if (!dev)
		return -EINVAL;
	return flusher_queue_sync(dev);
}

/* Detach every inode still on the dirty lists (cache close, after sync). */
static void release_listed_inodes(struct wbc_dev *dev)
{
	for (;;) {
		pthread_mutex_lock(&dev->list_lock);
		queue_io_locked(dev, UINT64_MAX);
		struct inode *ino = dirty_take_next_locked(dev);
		pthread_mutex_unlock(&dev->list_lock);
		if (!ino)
			return;
		pthread_mutex_lock(&ino->lock);
		uint64_t left = ino->nr_dirty;
		pthread_mutex_unlock(&ino->lock);
		if (left) {
			/* Sync failed to clean them (or a caller wrote during
			 * close): the data is lost and counted. */
			atomic_fetch_add(&dev->cache->st_lost, left << dev->cache->page_shift);
			inode_drop_all_pages(ino);
		}
		dirty_requeue(ino, false, false);
	}
}

void dev_destroy(struct wbc_dev *dev)
{
	handles_close_dev(dev);
	flusher_stop(dev);
	release_listed_inodes(dev);
	assert(dev->nr_inodes == 0);
	dev->be->ops->destroy(dev->be);
	dev_io_destroy(dev);
	free(dev->hash);
	free(dev->spec);
	pthread_mutex_destroy(&dev->inode_lock);
	pthread_mutex_destroy(&dev->list_lock);
	pthread_mutex_destroy(&dev->work_lock);
	pthread_mutex_destroy(&dev->err_lock);
	pthread_mutex_destroy(&dev->io_lock);
	pthread_cond_destroy(&dev->work_cond);
	pthread_cond_destroy(&dev->done_cond);
	pthread_cond_destroy(&dev->io_cond);
	free(dev);
}

/* ------------------------------------------------------------------ */
/* synchronous read through the asynchronous interface                  */

struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void sync_end_io(struct wbc_bio *bio)
{
	(void)atomic_load_explicit(&bio->handoff, memory_order_acquire);
	struct sync_wait *w = bio->priv;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

ssize_t backend_read_sync(struct backend *be, void *obj, void *buf, size_t len, uint64_t off)
{
	struct sync_wait w = { .done = false };
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct wbc_bio bio = {
		.op = BIO_READ, .obj = obj, .off = off, .len = len,
		.iov = &iov, .iovcnt = 1, .end_io = sync_end_io, .priv = &w,
	};
	atomic_store_explicit(&bio.handoff, 1, memory_order_release);
	int err = be->ops->submit(be, &bio);
	if (!err) {
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
	}
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	return err ? err : bio.res;
}
