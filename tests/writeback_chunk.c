/*
 * The writeback chunk (device tunable chunk=, for experiments: the
 * writeback lab).  chunk=4M is the kernel before 2011: writeback wrote at
 * most MAX_WRITEBACK_PAGES (4 MiB) of a file and moved on to the next
 * dirty file, the file requeued behind the others, so several large
 * files were written 4 MiB at a time, round robin.  chunk=bw (the
 * default) sizes the chunk from the device's bandwidth: larger runs.
 *
 * A backend written here on the public interface records the sequence of
 * (file, offset, length) it is given; four files of 32 MiB are dirtied
 * with no writeback running, then one flusher pass (start-all, the
 * flusher's own non-sync pass) writes them.  The runs of that sequence
 * (consecutive I/Os to one file) are what the device saw: with chunk=4M
 * each is 4 MiB and every four runs visit the four files; with chunk=bw a
 * file is written in one run.
 */
#include "testutil.h"
#include "internal.h"

#include <pthread.h>

#define MiB (1ull << 20)
#define NFILES 4
#define FILE_BYTES (32 * MiB)
#define MAX_RECS 4096

struct rec {
	int file;
	uint64_t off, len;
};

struct recorder {
	pthread_mutex_t lock;
	char names[NFILES][16];
	int nfiles;
	struct rec recs[MAX_RECS];
	int n;
	bool overflow;
};

static void r_caps(void *ctx, struct wbc_backend_caps *caps)
{
	caps->max_io = MiB;
	caps->queue_depth = 32;
}

static int r_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	struct recorder *r = ctx;
	pthread_mutex_lock(&r->lock);
	int id = -1;
	for (int i = 0; i < r->nfiles; i++)
		if (!strcmp(r->names[i], name))
			id = i;
	if (id < 0 && r->nfiles < NFILES && strlen(name) < sizeof(r->names[0])) {
		id = r->nfiles++;
		strcpy(r->names[id], name);
	}
	pthread_mutex_unlock(&r->lock);
	if (id < 0)
		return -ENOSPC;
	*file = (void *)(intptr_t)(id + 1);
	*size = 0;
	return 0;
}

static void r_close(void *ctx, void *file) {}

/* Record each I/O and complete it at once (stores nothing: the test
 * never reads back). */
static int r_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct recorder *r = ctx;
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < n; i++) {
		if (ios[i]->op != WBC_IO_WRITE)
			continue;
		if (r->n == MAX_RECS) {
			r->overflow = true;
			continue;
		}
		r->recs[r->n++] = (struct rec){ (int)(intptr_t)ios[i]->file - 1, ios[i]->off,
						ios[i]->len };
	}
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < n; i++)
		ios[i]->res = (ssize_t)ios[i]->len;
	*queued = n;
	wbc_io_complete_batch(ios, n);
	return 0;
}

static int r_resize(void *ctx, void *file, uint64_t size) { return 0; }
static void r_destroy(void *ctx) {}

static const struct wbc_backend_ops r_ops = {
	.size = sizeof(struct wbc_backend_ops), .name = "recorder",
	.caps = r_caps, .open = r_open, .close = r_close, .submit = r_submit,
	.resize = r_resize, .destroy = r_destroy,
};

struct runs {
	int n;                 /* runs: maximal stretches of one file */
	int file[MAX_RECS];
	uint64_t bytes[MAX_RECS];
	uint64_t max;
	bool contiguous;       /* each run's I/Os follow each other */
};

static void runs_of(const struct recorder *r, struct runs *o)
{
	memset(o, 0, sizeof(*o));
	o->contiguous = true;
	for (int i = 0; i < r->n; i++) {
		const struct rec *x = &r->recs[i];
		if (i && x->file == r->recs[i - 1].file) {
			if (x->off != r->recs[i - 1].off + r->recs[i - 1].len)
				o->contiguous = false;
			o->bytes[o->n - 1] += x->len;
		} else {
			o->file[o->n] = x->file;
			o->bytes[o->n++] = x->len;
		}
		o->max = WBC_MAX(o->max, o->bytes[o->n - 1]);
	}
}

/* Dirty NFILES files of FILE_BYTES on a device with tunables @opts, with
 * no writeback, then let one flusher pass write them; the runs the
 * device saw. */
static void scenario(const char *opts, struct recorder *r, struct runs *o)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	struct wbc_config cfg = t_config(256 * MiB, 4096);
	cfg.dirty_writeback_centisecs = 0;         /* no periodic pass */
	cfg.dirty_bytes = 224 * MiB;               /* the 128 MiB stay below */
	cfg.dirty_background_bytes = 192 * MiB;    /* ... freerun and bg_thresh */
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add_backend(c, &r_ops, r, opts, &dev), 0);
	static char buf[MiB];
	t_fill(buf, sizeof(buf), 3);
	wbc_file *f[NFILES];
	for (int i = 0; i < NFILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f[i]), 0);
		for (uint64_t off = 0; off < FILE_BYTES; off += MiB)
			CHECK_EQ(wbc_pwrite(f[i], buf, MiB, off), (long long)MiB);
	}
	struct wbc_dev_stats ds;
	CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
	CHECK_EQ(ds.dirty_bytes, NFILES * FILE_BYTES);   /* nothing written yet */
	CHECK_EQ(r->n, 0);
	/* the flusher's own pass over everything dirty (the kernel's
	 * wb_writeback with WB_SYNC_NONE) */
	flusher_kick(dev, true);
	for (int ms = 0; ms < 120 * 1000; ms++) {
		CHECK_EQ(wbc_dev_stats(dev, &ds), 0);
		if (!ds.dirty_bytes && !ds.writeback_bytes)
			break;
		usleep(1000);
	}
	CHECK_EQ(ds.dirty_bytes + ds.writeback_bytes, 0);
	pthread_mutex_lock(&r->lock);
	CHECK(!r->overflow);
	runs_of(r, o);
	pthread_mutex_unlock(&r->lock);
	uint64_t sum = 0;
	for (int i = 0; i < o->n; i++)
		sum += o->bytes[i];
	CHECK_EQ(sum, NFILES * FILE_BYTES);          /* each page once */
	CHECK(o->contiguous);
	printf("%s: %d I/Os in %d runs, longest %llu MiB; runs:", opts, r->n, o->n,
	       (unsigned long long)(o->max / MiB));
	for (int i = 0; i < o->n && i < 40; i++)
		printf(" f%d:%llu", o->file[i], (unsigned long long)(o->bytes[i] / MiB));
	printf("\n");
	for (int i = 0; i < NFILES; i++)
		CHECK_EQ(wbc_file_close(f[i]), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	pthread_mutex_destroy(&r->lock);
}

int main(void)
{
	static struct recorder r;
	static struct runs o;

	/* the values: bw, or a size of at least a byte */
	struct wbc_config cfg = t_config(16 * MiB, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *d;
	CHECK_EQ(wbc_dev_add(c, "mem,chunk=bw", &d), 0);
	CHECK_EQ(wbc_dev_add(c, "mem,chunk=4M", &d), 0);
	CHECK_EQ(writeback_slice_pages(d), 1024);   /* MAX_WRITEBACK_PAGES */
	CHECK_EQ(wbc_dev_add(c, "model:chunk=0", &d), -EINVAL);
	CHECK_EQ(wbc_dev_add(c, "mem,chunk=fast", &d), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* chunk=4M: 4 MiB per file and visit, round robin */
	scenario("chunk=4M", &r, &o);
	CHECK(o.max <= 4 * MiB);
	CHECK_EQ(o.n, NFILES * FILE_BYTES / (4 * MiB));
	for (int i = 0; i < o.n; i++) {
		CHECK_EQ(o.bytes[i], 4 * MiB);
		/* every NFILES consecutive runs visit every file */
		if (i % NFILES == 0)
			for (int j = i; j < i + NFILES; j++)
				for (int k = j + 1; k < i + NFILES; k++)
					CHECK(o.file[j] != o.file[k]);
	}

	/* chunk=bw (the default, the same as no chunk=): half a second of
	 * the device's bandwidth (100 MB/s before a measurement: 48 MiB),
	 * so each file is written in one visit */
	scenario("chunk=bw", &r, &o);
	CHECK(o.max > 4 * MiB);
	CHECK_EQ(o.max, FILE_BYTES);
	CHECK((uint64_t)o.n < NFILES * FILE_BYTES / (4 * MiB));
	printf("ok\n");
	return 0;
}
