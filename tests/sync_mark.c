/*
 * A sync covers every write that returned before it began, also one to a
 * file another writer is still making dirty (src/writeback/dirty.c,
 * mark_inode_dirty): writer 1 dirties page 0 of a clean file, sets
 * I_DIRTY and is held (a test hook, dirty_mark_pause) before it files
 * the file; writer 2 then writes page 1, finds I_DIRTY and returns, and
 * calls wbc_dev_sync.  The sync must write page 1: it waits for writer 1
 * to file the file (dirty_wait_marks), and a third thread lets writer 1
 * go once it sees the sync waiting (or after a bound, so that nothing
 * hangs).  Before, the sync found no file and returned 0 with page 1
 * unwritten.  On both dirty-list policies (the old one's writer is held
 * before it takes the list lock).
 */
#include "testutil.h"
#include "internal.h"

#include <fcntl.h>

#define PS 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool paused, released;
static struct wbc_dev *gdev;
static wbc_file *gf;
static uint64_t waits_before;

/* Wait on cv under mu for @flag, at most @ms; true if it was set. */
static bool wait_flag(bool *flag, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&mu);
	int e = 0;
	while (!*flag && e != ETIMEDOUT)
		e = pthread_cond_timedwait(&cv, &mu, &ts);
	bool ok = *flag;
	pthread_mutex_unlock(&mu);
	return ok;
}

static void set_flag(bool *flag)
{
	pthread_mutex_lock(&mu);
	*flag = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* writer 1, between its CAS and its filing */
static void hold_writer(void *arg)
{
	(void)arg;
	set_flag(&paused);
	CHECK(wait_flag(&released, 60 * 1000));
}

static void *writer1(void *arg)
{
	(void)arg;
	char buf[PS];
	memset(buf, 'a', sizeof(buf));
	CHECK_EQ(wbc_pwrite(gf, buf, PS, 0), PS);
	return NULL;
}

/* Lets writer 1 go once the sync waits for it; after 2 s whatever the
 * sync does (one that does not wait has returned by then). */
static void *releaser(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2000; i++) {
		if (atomic_load(&gdev->mark_waits) != waits_before)
			break;
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	set_flag(&released);
	return NULL;
}

static bool backend_has(const char *path, uint64_t off, int c)
{
	char buf[PS];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	ssize_t n = pread(fd, buf, PS, (off_t)off);
	close(fd);
	if (n != PS)
		return false;
	for (size_t i = 0; i < PS; i++)
		if (buf[i] != c)
			return false;
	return true;
}

static void run(const char *dir, const char *opts)
{
	char spec[600], path[700];
	snprintf(spec, sizeof(spec), "dir:%s%s", dir, opts);
	snprintf(path, sizeof(path), "%s/f%s", dir, *opts ? "-list" : "");
	struct wbc_config cfg = t_config(16u << 20, PS);
	cfg.dirty_writeback_centisecs = 0;   /* only the sync writes */
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &gdev), 0);
	CHECK_EQ(wbc_file_open(gdev, path + strlen(dir) + 1, WBC_O_CREAT, &gf), 0);
	paused = released = false;
	waits_before = atomic_load(&gdev->mark_waits);
	dirty_mark_pause(gdev, hold_writer, NULL);

	pthread_t w1, rel;
	CHECK_EQ(pthread_create(&w1, NULL, writer1, NULL), 0);
	CHECK(wait_flag(&paused, 60 * 1000));
	/* writer 2: the file is I_DIRTY, not yet filed */
	char buf[PS];
	memset(buf, 'b', sizeof(buf));
	CHECK_EQ(wbc_pwrite(gf, buf, PS, PS), PS);
	CHECK_EQ(pthread_create(&rel, NULL, releaser, NULL), 0);
	CHECK_EQ(wbc_dev_sync(gdev), 0);
	bool written = backend_has(path, PS, 'b');
	uint64_t waits = atomic_load(&gdev->mark_waits) - waits_before;
	printf("%s: page written by the sync: %s; the sync waited for the "
	       "first writer: %s\n", *opts ? "dirty_list=list" : "buckets",
	       written ? "yes" : "no", waits ? "yes" : "no");
	CHECK(written);
	CHECK(waits == 1);
	CHECK_EQ(pthread_join(w1, NULL), 0);
	CHECK_EQ(pthread_join(rel, NULL), 0);
	CHECK_EQ(wbc_file_close(gf), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	CHECK(backend_has(path, 0, 'a') && backend_has(path, PS, 'b'));
}

int main(void)
{
	char *dir = t_mkdtemp();
	run(dir, "");
	run(dir, ",dirty_list=list");
	t_rmdir(dir);
	printf("sync_mark: ok\n");
	return 0;
}
