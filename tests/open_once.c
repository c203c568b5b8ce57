/*
 * The backend sees each name opened once at a time, and closed before it
 * is opened again (wbcache_backend.h's promise to open()): threads that
 * open, write and close the same few names at once never make the
 * backend open a name it holds open.  Before, two openers of a name both
 * opened it (the loser closed its own), and a last close unhashed the
 * name before the backend's close, so a new open came first.  The
 * backend's open and close yield, to widen those windows.  (The files
 * are never written: a dirty file stays referenced by its device's lists
 * for a while, and its name stays open.)
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>
#include <sched.h>

#define NAMES 4
#define THREADS 4
#define ROUNDS 3000

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static int open_now[NAMES];
static long opens, overlaps;
static int ids[NAMES];

static void b_caps(void *ctx, struct wbc_backend_caps *c)
{
	(void)ctx;
	c->max_io = 64 * 1024;
	c->queue_depth = 8;
}

static int b_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)ctx; (void)flags;
	int i = name[0] - 'a';
	CHECK(i >= 0 && i < NAMES);
	pthread_mutex_lock(&lk);
	if (open_now[i]++)
		overlaps++;
	opens++;
	pthread_mutex_unlock(&lk);
	sched_yield();
	*file = &ids[i];
	*size = 0;
	return 0;
}

static void b_close(void *ctx, void *file)
{
	(void)ctx;
	sched_yield();
	pthread_mutex_lock(&lk);
	open_now[(int *)file - ids]--;
	pthread_mutex_unlock(&lk);
}

static int b_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	(void)ctx; (void)queued;
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		if (io->op == WBC_IO_READ)
			for (int k = 0; k < io->iovcnt; k++)
				memset(io->iov[k].iov_base, 0, io->iov[k].iov_len);
		wbc_io_complete(io, (ssize_t)io->len);
	}
	return 0;
}

static int b_resize(void *ctx, void *file, uint64_t size)
{
	(void)ctx; (void)file; (void)size;
	return 0;
}

static void b_destroy(void *ctx) { (void)ctx; }

static const struct wbc_backend_ops ops = {
	.size = sizeof(ops), .name = "once", .caps = b_caps, .open = b_open,
	.close = b_close, .submit = b_submit, .resize = b_resize, .destroy = b_destroy,
};

static wbc_dev *dev;

static void *worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg + 1;
	for (int r = 0; r < ROUNDS; r++) {
		char name[2] = { (char)('a' + t_rand(&seed) % NAMES), 0 };
		wbc_file *h;
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &h), 0);
		CHECK_EQ(wbc_file_close(h), 0);
	}
	return NULL;
}

int main(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16 << 20;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	static int ctx;
	char msg[256];
	CHECK_EQ(wbc_dev_add_backend_msg(c, &ops, &ctx, "", &dev, msg, sizeof(msg)), 0);
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("%ld opens, %ld of a name already open\n", opens, overlaps);
	CHECK(opens > 0);
	CHECK_EQ(overlaps, 0);
	for (int i = 0; i < NAMES; i++)
		CHECK_EQ(open_now[i], 0);
	return 0;
}
