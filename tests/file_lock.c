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
 *   - either way both pages reach the backend, and bad values are refused;
 *   - stress under file (for SAN=thread as much as for its checks): on a
 *     model device with latency, in a cache a quarter of the file's size,
 *     three writers rewrite their own pages of one file (whole pages and
 *     halves, which are read first) while a fourth thread fsyncs: writers
 *     that find their page under writeback or locked wait without the
 *     file's lock, and ones that find no free page take one without it;
 *     nothing deadlocks, and every page ends up in the backend as its
 *     writer last wrote it;
 *   - no free page under file: device A completes nothing and holds 60 of
 *     the arena's 64 pages; a writer to a file_lock=file device B takes
 *     the last free pages and must then wait in page allocation (counted)
 *     for B's own pages to be written, which the flusher can only do with
 *     the file's lock: the writer waits without it, and finishes.
 * The handshakes are flags under the gate's mutex, never sleeps: the
 * only bounded waits (60 s) are deadlines for progress that must come.
 */
#include "testutil.h"
#include "wbcache_backend.h"
#include "backend_util.h"
#include "backend/backends.h"

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

#define S_PAGES 4096            /* 16 MiB file, 4 MiB cache */
#define S_WRITERS 3
#define S_ROUNDS 3000

struct swriter {
	wbc_file *f;
	int id;
	unsigned char last[S_PAGES];   /* round + 1 of the page's last write */
};

static void s_fill(char *buf, size_t n, int id, uint64_t page, unsigned gen)
{
	t_fill(buf, n, (page * 1000003u + gen) * 8 + (unsigned)id);
}

static void *s_writer(void *arg)
{
	struct swriter *w = arg;
	uint64_t seed = (uint64_t)w->id * 77 + 5;
	char buf[PAGE];
	for (unsigned r = 1; r <= S_ROUNDS; r++) {
		uint64_t page = (t_rand(&seed) % (S_PAGES / S_WRITERS)) * S_WRITERS + (uint64_t)w->id;
		unsigned gen = r & 255 ? r & 255 : 1;
		s_fill(buf, PAGE, w->id, page, gen);
		if (!w->last[page] || r % 4) {
			CHECK_EQ(wbc_pwrite(w->f, buf, PAGE, page * PAGE), PAGE);
		} else {
			/* two halves: the first is a partial write of a page
			 * that may have left the cache (read first) */
			CHECK_EQ(wbc_pwrite(w->f, buf, PAGE / 2, page * PAGE), PAGE / 2);
			CHECK_EQ(wbc_pwrite(w->f, buf + PAGE / 2, PAGE / 2, page * PAGE + PAGE / 2),
				 PAGE / 2);
		}
		w->last[page] = (unsigned char)gen;
	}
	return NULL;
}

static atomic_bool s_stop;

static void *s_fsyncer(void *arg)
{
	wbc_file *f = arg;
	while (!atomic_load(&s_stop))
		CHECK_EQ(wbc_fsync(f), 0);
	return NULL;
}

static void stress(void)
{
	struct wbc_config cfg = t_config(4u << 20, PAGE);
	cfg.dirty_expire_centisecs = 1;
	cfg.dirty_writeback_centisecs = 1;
	/* dirty pages may fill the cache: writers run out of free pages */
	cfg.dirty_bytes = 4u << 20;
	cfg.dirty_background_bytes = 2u << 20;
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "model:lat=200us,qd=4,file_lock=file", &dev), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "s", WBC_O_CREAT, &f), 0);
	static struct swriter w[S_WRITERS];
	pthread_t th[S_WRITERS], fs;
	atomic_store(&s_stop, false);
	CHECK_EQ(pthread_create(&fs, NULL, s_fsyncer, f), 0);
	for (int i = 0; i < S_WRITERS; i++) {
		w[i].f = f;
		w[i].id = i;
		CHECK_EQ(pthread_create(&th[i], NULL, s_writer, &w[i]), 0);
	}
	for (int i = 0; i < S_WRITERS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&s_stop, true);
	pthread_join(fs, NULL);
	CHECK_EQ(wbc_fsync(f), 0);
	struct wbc_dev_debug d = debug_of(dev);
	printf("stress: file-lock waits %llu (%.1f ms in all)\n",
	       (unsigned long long)d.file_lock_waits, (double)d.file_lock_wait_ns / 1e6);
	static char back[S_PAGES * PAGE];
	char want[PAGE];
	uint64_t size = 0;
	CHECK_EQ(t_backend_read(dev, "s", back, sizeof(back), &size), 0);
	uint64_t top = 0;
	for (uint64_t p = 0; p < S_PAGES; p++) {
		int id = (int)(p % S_WRITERS);
		unsigned gen = w[id].last[p];
		if (!gen) {
			CHECK(p * PAGE >= size || !back[p * PAGE]);
			continue;
		}
		top = p + 1;
		s_fill(want, PAGE, id, p, gen);
		CHECK(!memcmp(back + p * PAGE, want, PAGE));
	}
	CHECK_EQ(size, top * PAGE);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

#define NP 64
static wbc_dev *pw_b;
static char pw_bdata[32 * PAGE];

static void *pw_writer(void *arg)
{
	(void)arg;
	wbc_file *f;
	CHECK_EQ(wbc_file_open(pw_b, "b", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, pw_bdata, sizeof(pw_bdata), 0), sizeof(pw_bdata));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

static void no_free_page(void)
{
	struct wbc_config cfg = t_config(NP * PAGE, PAGE);
	cfg.dirty_ratio = 100;
	cfg.dirty_background_ratio = 90;
	wbc_cache *c;
	wbc_dev *a;
	wbc_file *fa;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=100M,stall=0s+3600s", &a), 0);
	CHECK_EQ(wbc_dev_add(c, "mem,file_lock=file", &pw_b), 0);
	static char adata[60 * PAGE];
	t_fill(adata, sizeof(adata), 1);
	t_fill(pw_bdata, sizeof(pw_bdata), 2);
	CHECK_EQ(wbc_file_open(a, "a", WBC_O_CREAT, &fa), 0);
	CHECK_EQ(wbc_pwrite(fa, adata, sizeof(adata), 0), sizeof(adata));
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, pw_writer, NULL), 0);
	struct wbc_stats st;
	CHECK(T_WAIT_UNTIL((wbc_stats(c, &st), st.page_waits > 0)));
	pthread_join(t, NULL);   /* B's writer finishes while A is stalled */
	struct wbc_dev_stats ds;
	CHECK_EQ(wbc_dev_stats(a, &ds), 0);
	CHECK_EQ(ds.written_back_bytes, 0);
	static char back[32 * PAGE];
	uint64_t size;
	CHECK_EQ(t_backend_read(pw_b, "b", back, sizeof(back), &size), 0);
	CHECK_EQ(size, sizeof(pw_bdata));
	CHECK(!memcmp(back, pw_bdata, sizeof(pw_bdata)));
	model_release_stall(a);
	CHECK_EQ(wbc_fsync(fa), 0);
	CHECK_EQ(wbc_file_close(fa), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("no free page: the writer waited %llu time(s) for one and finished\n",
	       (unsigned long long)st.page_waits);
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
	stress();
	no_free_page();
	printf("ok\n");
	return 0;
}
