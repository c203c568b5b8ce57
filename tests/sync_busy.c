/*
 * Sync is livelock-free: while one thread keeps rewriting a hot file and
 * another keeps creating small files (each newly dirty, so the dirty lists
 * never stop growing), wbc_dev_sync() and wbc_cache_sync() return, and
 * each writes what was dirty when it began: a marker written just before
 * every sync is in the backing directory when the sync returns.  A sync
 * that chased the writers would never return and the test would time out.
 * Also a concurrency stress for the dirty lists (run under SAN=thread).
 */
#include "testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

static wbc_dev *dev;
static atomic_int stop;
static atomic_long created, rewrites;

static void *hot_writer(void *arg)
{
	(void)arg;
	wbc_file *f;
	char buf[16384];
	uint64_t s = 7;
	t_fill(buf, sizeof(buf), 3);
	CHECK_EQ(wbc_file_open(dev, "hot", WBC_O_CREAT, &f), 0);
	while (!atomic_load(&stop)) {
		uint64_t off = (t_rand(&s) % 512) * sizeof(buf);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
		atomic_fetch_add(&rewrites, 1);
	}
	CHECK_EQ(wbc_file_close(f), 0);
	return NULL;
}

static void *creator(void *arg)
{
	(void)arg;
	char buf[4096], name[32];
	t_fill(buf, sizeof(buf), 4);
	for (long i = 0; !atomic_load(&stop); i++) {
		wbc_file *f;
		snprintf(name, sizeof(name), "small%ld", i % 5000);
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
		CHECK_EQ(wbc_file_close(f), 0);
		atomic_fetch_add(&created, 1);
	}
	return NULL;
}

static void check_backing(const char *dir, const char *name, const char *want, size_t len)
{
	char path[512], got[64];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, got, len, 0), (ssize_t)len);
	CHECK(!memcmp(got, want, len));
	close(fd);
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(32u << 20, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);

	pthread_t th[2];
	CHECK_EQ(pthread_create(&th[0], NULL, hot_writer, NULL), 0);
	CHECK_EQ(pthread_create(&th[1], NULL, creator, NULL), 0);
	/* let both get going: wait until each has done some work */
	while (atomic_load(&created) < 200 || atomic_load(&rewrites) < 200)
		sched_yield();

	for (int i = 0; i < 8; i++) {
		char msg[32];
		int len = snprintf(msg, sizeof(msg), "marker round %d", i);
		wbc_file *m;
		CHECK_EQ(wbc_file_open(dev, "marker", WBC_O_CREAT, &m), 0);
		CHECK_EQ(wbc_pwrite(m, msg, (size_t)len, 0), len);
		long before = atomic_load(&created);
		CHECK_EQ(i % 2 ? wbc_cache_sync(c) : wbc_dev_sync(dev), 0);
		check_backing(dir, "marker", msg, (size_t)len);
		CHECK_EQ(wbc_file_close(m), 0);
		/* the writers kept going during the sync (no lock shut them out
		 * for its length): wait for fresh progress before the next one */
		while (atomic_load(&created) < before + 50)
			sched_yield();
	}
	atomic_store(&stop, 1);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK_EQ(st.lost_bytes, 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("created %ld files, %ld rewrites during 8 syncs\n", atomic_load(&created),
	       atomic_load(&rewrites));
	t_rmdir(dir);
	return 0;
}
