/*
 * The file_lock= device tunable (core/file.c, writeback/write.c): the old
 * per-file lock (file_lock=file, for experiments) against today's page
 * claims (file_lock=page, the default), each doing what it says.  A
 * backend written here on the public interface holds a write's submit()
 * until the test opens its gate; a sync's writeback of page 0 of a file
 * is held there while another thread writes page 5 of the same file:
 *   - under file, the writer waits for the submission: it is seen waiting
 *     on the file's lock (file_lock_waits counts it before it blocks), it
 *     has not returned while the submit is held, and it returns once the
 *     gate opens, with one wait counted and its time;
 *   - under page (named or by default), the write returns while the
 *     submit is still held, and no wait is counted;
 *   - either way both pages reach the backend, and bad values are refused.
 * The handshakes are flags under the gate's mutex, never sleeps: the
 * only bounded waits (60 s) are deadlines for progress that must come.
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>

#define PAGE 4096
#define PAGES 8

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool armed, open;       /* armed: the next write submit waits for open */
	unsigned held;          /* submits waiting at the gate now */
	char data[PAGES * PAGE];
	uint64_t size;
};

static void g_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->queue_depth = 8;
	caps->max_io = PAGE * PAGES;
	caps->flags = WBC_BACKEND_ONE_FILE;
}

static int g_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct gate *g = ctx;
	(void)name;
	(void)flags;
	*file = g;
	pthread_mutex_lock(&g->lock);
	*size = g->size;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static void g_close(void *ctx, void *file)
{
	(void)ctx;
	(void)file;
}

/* Done in submit (completed before it returns); a write waits at the
 * gate first while it is armed. */
static int g_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct gate *g = ctx;
	pthread_mutex_lock(&g->lock);
	for (unsigned i = 0; i < n; i++) {
		struct wbc_io *io = ios[i];
		if (io->op == WBC_IO_WRITE && g->armed) {
			g->held++;
			pthread_cond_broadcast(&g->cond);
			while (!g->open)
				pthread_cond_wait(&g->cond, &g->lock);
			g->held--;
		}
		CHECK(io->off + io->len <= sizeof(g->data));
		size_t done = 0;
		for (int v = 0; v < io->iovcnt; v++) {
			if (io->op == WBC_IO_WRITE)
				memcpy(g->data + io->off + done, io->iov[v].iov_base, io->iov[v].iov_len);
			else
				memcpy(io->iov[v].iov_base, g->data + io->off + done, io->iov[v].iov_len);
			done += io->iov[v].iov_len;
		}
		if (io->op == WBC_IO_WRITE && io->off + io->len > g->size)
			g->size = io->off + io->len;
		io->res = (ssize_t)io->len;
	}
	pthread_mutex_unlock(&g->lock);
	*queued = n;
	wbc_io_complete_batch(ios, n);
	return 0;
}

static int g_resize(void *ctx, void *file, uint64_t size)
{
	struct gate *g = ctx;
	(void)file;
	if (size > sizeof(g->data))
		return -EFBIG;
	pthread_mutex_lock(&g->lock);
	if (size < g->size)
		memset(g->data + size, 0, g->size - size);
	g->size = size;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static void g_destroy(void *ctx)
{
	(void)ctx;   /* the test's: freed by main */
}

static const struct wbc_backend_ops gate_ops = {
	.size = sizeof(struct wbc_backend_ops), .name = "gate",
	.caps = g_caps, .open = g_open, .close = g_close, .submit = g_submit,
	.resize = g_resize, .destroy = g_destroy,
};

/* Wait (60 s at most: a deadline for progress, not a timing) until
 * @pred(@g) under the gate's lock; its value. */
static bool gate_wait(struct gate *g, bool (*pred)(struct gate *))
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 60;
	pthread_mutex_lock(&g->lock);
	int e = 0;
	while (!pred(g) && e != ETIMEDOUT)
		e = pthread_cond_timedwait(&g->cond, &g->lock, &dl);
	bool ok = pred(g);
	pthread_mutex_unlock(&g->lock);
	return ok;
}

static bool submit_held(struct gate *g) { return g->held == 1; }

struct job {
	struct gate *g;
	wbc_dev *dev;
	wbc_file *f;
	char buf[PAGE];
	bool done;              /* under g->lock */
	ssize_t ret;
};

static void *syncer(void *arg)
{
	struct job *j = arg;
	j->ret = wbc_dev_sync(j->dev);
	return NULL;
}

static void *writer(void *arg)
{
	struct job *j = arg;
	ssize_t r = wbc_pwrite(j->f, j->buf, PAGE, 5 * PAGE);
	pthread_mutex_lock(&j->g->lock);
	j->ret = r;
	j->done = true;
	pthread_cond_broadcast(&j->g->cond);
	pthread_mutex_unlock(&j->g->lock);
	return NULL;
}

static struct job *g_job;
static bool writer_done(struct gate *g) { (void)g; return g_job->done; }

static struct wbc_dev_debug debug_of(wbc_dev *dev)
{
	struct wbc_dev_debug d;
	CHECK_EQ(wbc_dev_debug(dev, &d), 0);
	return d;
}

static void one(const char *opts, bool file)
{
	struct wbc_config cfg = t_config(16u << 20, PAGE);
	cfg.dirty_writeback_centisecs = 0;   /* the flusher writes on the sync alone */
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	struct gate *g = calloc(1, sizeof(*g));
	CHECK(g);
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add_backend(c, &gate_ops, g, opts, &dev), 0);
	CHECK_EQ(debug_of(dev).file_lock, file ? 1 : 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "", WBC_O_CREAT, &f), 0);
	char p0[PAGE];
	t_fill(p0, PAGE, 1);
	CHECK_EQ(wbc_pwrite(f, p0, PAGE, 0), PAGE);

	/* the sync's writeback of page 0 is held in submit */
	pthread_mutex_lock(&g->lock);
	g->armed = true;
	pthread_mutex_unlock(&g->lock);
	struct job sj = { .g = g, .dev = dev };
	pthread_t st, wt;
	CHECK_EQ(pthread_create(&st, NULL, syncer, &sj), 0);
	CHECK(gate_wait(g, submit_held));

	/* another page of the same file, meanwhile */
	struct job wj = { .g = g, .dev = dev, .f = f };
	t_fill(wj.buf, PAGE, 2);
	g_job = &wj;
	CHECK_EQ(pthread_create(&wt, NULL, writer, &wj), 0);
	if (file) {
		/* it waits on the file's lock: counted before it blocks */
		CHECK(T_WAIT_UNTIL(debug_of(dev).file_lock_waits == 1));
		pthread_mutex_lock(&g->lock);
		CHECK(!wj.done);            /* not returned while the submit is held */
		CHECK_EQ(g->held, 1);
		g->open = true;
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
		CHECK(gate_wait(g, writer_done));
	} else {
		/* it returns while the submit is still held */
		CHECK(gate_wait(g, writer_done));
		pthread_mutex_lock(&g->lock);
		CHECK_EQ(g->held, 1);
		CHECK(!g->open);
		g->open = true;
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
	}
	pthread_join(wt, NULL);
	pthread_join(st, NULL);
	CHECK_EQ(wj.ret, PAGE);
	CHECK_EQ(sj.ret, 0);
	struct wbc_dev_debug d = debug_of(dev);
	if (file) {
		CHECK_EQ(d.file_lock_waits, 1);
		CHECK(d.file_lock_wait_ns > 0);
	} else {
		CHECK_EQ(d.file_lock_waits, 0);
		CHECK_EQ(d.file_lock_wait_ns, 0);
	}
	printf("file_lock=%s: writer %s the held submission; file-lock waits %llu (%.3f ms)\n",
	       file ? "file" : "page", file ? "waited for" : "did not wait for",
	       (unsigned long long)d.file_lock_waits, (double)d.file_lock_wait_ns / 1e6);

	/* both pages reach the backend */
	CHECK_EQ(wbc_fsync(f), 0);
	pthread_mutex_lock(&g->lock);
	CHECK_EQ(g->size, 6 * PAGE);
	CHECK(!memcmp(g->data, p0, PAGE));
	CHECK(!memcmp(g->data + 5 * PAGE, wj.buf, PAGE));
	pthread_mutex_unlock(&g->lock);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->cond);
	free(g);
}

int main(void)
{
	wbc_cache *c = t_quiet_cache(16u << 20);
	wbc_dev *bad;
	char msg[256];
	CHECK_EQ(wbc_dev_add_msg(c, "mem,file_lock=inode", &bad, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "file_lock"));
	CHECK_EQ(wbc_cache_close(c), 0);

	one("file_lock=file", true);
	one("file_lock=page", false);
	one(NULL, false);
	printf("ok\n");
	return 0;
}
