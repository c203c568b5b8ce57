/*
 * wbc_file_remove(): a file's cached pages are dropped, never written, and
 * the backend's copy deleted; an open file is refused (-EBUSY), a missing
 * one is -ENOENT, and a backend that cannot remove says so (-EOPNOTSUPP).
 * An open of the name while the backend removes it (a mem backend whose
 * remove takes 300 ms): it waits for the remove and gets -ENOENT (with
 * WBC_O_CREAT: a new, empty file).  It got a handle on the removed file,
 * and its writes went to the backend's freed object (AddressSanitizer:
 * heap-use-after-free in the mem backend).
 *
 * A file left with nothing to write (truncated to 0, or removed) is let go
 * by the flusher's next pass once its last handle closes: it stayed
 * listed, its backend file open (a descriptor on a directory device),
 * until it was dirty_expire old (here an hour).
 */
#include "testutil.h"
#include "wbcache_backend.h"

#include <pthread.h>

static const struct wbc_backend_ops *mops;
static atomic_int in_remove;   /* the backend's remove has begun */
static int slow_remove(void *ctx, void *file)
{
	atomic_store(&in_remove, 1);
	usleep(300 * 1000);
	return mops->remove(ctx, file);
}
static void no_destroy(void *ctx) { (void)ctx; }   /* the mem device's */


/* A cache with a device of a mem device's backend whose remove takes
 * 300 ms. */
static wbc_cache *slow_remove_cache(wbc_dev **dev)
{
	struct wbc_config cfg = t_config(4 << 20, 4096);
	wbc_cache *c;
	wbc_dev *inner;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &inner), 0);
	void *ctx = wbc_dev_backend(inner, &mops);
	static struct wbc_backend_ops wrap;
	wrap = *mops;
	wrap.remove = slow_remove;
	wrap.destroy = no_destroy;
	CHECK_EQ(wbc_dev_add_backend(c, &wrap, ctx, "", dev), 0);
	return c;
}

struct rm_job {
	wbc_dev *dev;
	int res;
};
static void *remove_main(void *arg)
{
	struct rm_job *j = arg;
	j->res = wbc_file_remove(j->dev, "r");
	return NULL;
}

static void open_while_removed(bool create)
{
	wbc_dev *dev;
	wbc_cache *c = slow_remove_cache(&dev);
	char buf[8192];
	t_fill(buf, sizeof(buf), 4);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "r", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_store(&in_remove, 0);
	struct rm_job j = { .dev = dev };
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, remove_main, &j), 0);
	/* in the backend's remove, the name shut: the open waits for it
	 * (a fixed 100 ms sleep let a late remover find the open's handle:
	 * remove -EBUSY) */
	CHECK(T_WAIT_UNTIL(atomic_load(&in_remove)));
	int r = wbc_file_open(dev, "r", create ? WBC_O_CREAT : 0, &f);
	CHECK_EQ(pthread_join(t, NULL), 0);
	printf("  open%s while the backend removes: %d (%s), remove %d\n",
	       create ? " (create)" : "", r, wbc_strerror(r), j.res);
	CHECK_EQ(j.res, 0);
	if (!create) {
		CHECK_EQ(r, -ENOENT);
	} else {
		CHECK_EQ(r, 0);
		CHECK_EQ(wbc_file_size(f), 0);            /* a new file */
		CHECK_EQ(wbc_pwrite(f, buf, 4096, 0), 4096);
		CHECK_EQ(wbc_fsync(f), 0);
		CHECK_EQ(wbc_file_close(f), 0);
	}
	CHECK_EQ(wbc_cache_close(c), 0);
}

static void written_then_removed(const char *spec)
{
	struct wbc_config cfg = t_config(4 << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;    /* nothing written back unasked */
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	static char buf[64 << 10];
	t_fill(buf, sizeof(buf), 3);
	wbc_file *f, *g;
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_fsync(f), 0);                      /* in the backend */
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 1 << 20), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_remove(dev, "a"), -EBUSY);
	CHECK_EQ(wbc_file_close(f), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK(st.dirty_bytes >= sizeof(buf));
	CHECK_EQ(wbc_file_remove(dev, "a"), 0);
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.dirty_bytes, 0);                    /* dropped, not written */
	CHECK_EQ(wbc_file_remove(dev, "a"), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "a", 0, &f), -ENOENT);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_size(f), 0);                  /* a new, empty file */
	char back[16];
	CHECK_EQ(wbc_pread(f, back, sizeof(back), 0), 0);
	/* a second handle open: refused, the file stays */
	CHECK_EQ(wbc_file_open(dev, "a", 0, &g), 0);
	CHECK_EQ(wbc_pwrite(f, "x", 1, 0), 1);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), -EBUSY);
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), 0);
	CHECK_EQ(wbc_file_remove(dev, "../a"), -EINVAL);
	CHECK_EQ(wbc_file_remove(NULL, "a"), -EINVAL);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("  %s: removed\n", spec);
}

static void released_soon(const char *spec)
{
	struct wbc_config cfg = t_config(4 << 20, 4096);
	cfg.dirty_expire_centisecs = 360000;     /* an hour */
	cfg.dirty_writeback_centisecs = 10;
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f, *g;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	static char buf[8192];
	t_fill(buf, sizeof(buf), 5);
	CHECK_EQ(wbc_file_open(dev, "t", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_open(dev, "r", WBC_O_CREAT, &g), 0);
	CHECK_EQ(wbc_pwrite(g, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_close(g), 0);
	CHECK_EQ(wbc_file_remove(dev, "r"), 0);
	CHECK_EQ(wbc_truncate(f, 0), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	struct wbc_dev_stats st;
	bool gone = T_WAIT_UNTIL((wbc_dev_stats(dev, &st),
				  st.files_dirty + st.files_io + st.files_more_io == 0));
	printf("  %s: truncated and removed files listed %llu after their close (0 wanted)\n",
	       spec, (unsigned long long)(st.files_dirty + st.files_io + st.files_more_io));
	CHECK(gone);
	struct wbc_stats cs;
	CHECK_EQ(wbc_stats(c, &cs), 0);
	CHECK_EQ(cs.dirty_bytes, 0);
	CHECK_EQ(wbc_file_open(dev, "t", 0, &f), 0);
	CHECK_EQ(wbc_file_size(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_open(dev, "r", 0, &f), -ENOENT);
	CHECK_EQ(wbc_cache_close(c), 0);
}

static wbc_dev *rm_dev;
static pthread_barrier_t rm_bar;
static void *race_main(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&rm_bar);
	return (void *)(intptr_t)wbc_file_remove(rm_dev, "r");
}

/* Removes of one name at once (each held a reference before any shut
 * the name: the second's shut asserted, an abort): with a handle open,
 * four removers all get EBUSY, 300 times; with none, two removers, 2,000
 * times on a device whose remove is quick: one removes it, the other gets
 * ENOENT (a remover's handle does not make the file busy), and the name
 * is gone.  A remover that had its handle but was not yet counted one
 * made the other's EBUSY, and then the other's its own: both failed
 * (under ThreadSanitizer within 100 rounds). */
#define RACERS 4
static void removes_race(void)
{
	wbc_cache *c = slow_remove_cache(&rm_dev);
	wbc_dev *slow = rm_dev;
	struct wbc_config cfg = t_config(4 << 20, 4096);
	wbc_cache *qc;
	wbc_dev *quick;
	CHECK_EQ(wbc_cache_open(&cfg, &qc), 0);
	CHECK_EQ(wbc_dev_add(qc, "mem", &quick), 0);
	unsigned removed = 0, rounds = 0;
	for (int it = 0; it < 2300; it++) {
		bool held = it >= 2000;
		unsigned n = held ? RACERS : 2;
		rm_dev = held ? slow : quick;
		wbc_file *f;
		CHECK_EQ(wbc_file_open(rm_dev, "r", WBC_O_CREAT, &f), 0);
		if (!held)
			CHECK_EQ(wbc_file_close(f), 0);
		pthread_barrier_init(&rm_bar, NULL, n);
		pthread_t t[RACERS];
		int r[RACERS];
		for (unsigned k = 0; k < n; k++)
			CHECK_EQ(pthread_create(&t[k], NULL, race_main, NULL), 0);
		for (unsigned k = 0; k < n; k++) {
			void *v;
			pthread_join(t[k], &v);
			r[k] = (int)(intptr_t)v;
		}
		pthread_barrier_destroy(&rm_bar);
		if (held) {
			for (unsigned k = 0; k < n; k++)
				CHECK_EQ(r[k], -EBUSY);
			CHECK_EQ(wbc_file_close(f), 0);
			rounds++;
		} else {
			if (!((r[0] == 0 && r[1] == -ENOENT) || (r[0] == -ENOENT && r[1] == 0))) {
				fprintf(stderr, "round %d: removes returned %d and %d\n", it, r[0], r[1]);
				exit(1);
			}
			removed++;
			CHECK_EQ(wbc_file_open(rm_dev, "r", 0, &f), -ENOENT);
		}
	}
	printf("  removes at once: %u rounds of %d on an open file all EBUSY, no abort; "
	       "%u rounds of 2 on a closed one: one removed it, the other got ENOENT\n",
	       rounds, RACERS, removed);
	CHECK_EQ(wbc_cache_close(qc), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
}

int main(void)
{
	written_then_removed("mem");
	written_then_removed("model:bw=100M");
	open_while_removed(false);
	open_while_removed(true);
	removes_race();
	released_soon("mem");
	released_soon("mem,dirty_list=list");

	/* a directory's files belong to the directory */
	char *dir = t_mkdtemp();
	char spec[4200];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(4 << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_file_remove(dev, "a"), -EOPNOTSUPP);
	CHECK_EQ(wbc_cache_close(c), 0);
	t_rmdir(dir);
	printf("remove: ok\n");
	return 0;
}
