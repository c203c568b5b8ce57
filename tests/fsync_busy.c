/*
 * fsync ends while writers keep rewriting the same file and the flusher
 * keeps writing it back in the background: its wait moves past each page
 * once that page's writeback has ended (it searched from the start of
 * the range again at every completion, and some page of the file was
 * nearly always in flight: fsync waited for as long as the writers went
 * on; with four writers on a 20 MB/s model device, over 40 s).  Four
 * writers rewrite random pages of a 32 MiB file over a cache held above
 * its background threshold; three fsyncs must each return 0, and the
 * marker each wrote first must be in the backend when it does.  A wait
 * that chased the writers never returns: the alarm ends the test.
 */
#include "testutil.h"
#include "backend_util.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#define MiB (1u << 20)

static wbc_file *f;
static atomic_int stop;
static atomic_long writes;

static void *writer(void *arg)
{
	char buf[4096];
	uint64_t s = (uintptr_t)arg + 5;
	memset(buf, 'x', sizeof(buf));
	while (!atomic_load(&stop)) {
		uint64_t off = (1 + t_rand(&s) % (32 * MiB / 4096 - 1)) * 4096;   /* not page 0 */
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), off), sizeof(buf));
		atomic_fetch_add(&writes, 1);
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "fsync_busy: an fsync did not return in 120 s\n";
	(void)!write(2, m, sizeof(m) - 1);
	_exit(1);
}

int main(void)
{
	struct wbc_config cfg = t_config(64 * MiB, 4096);
	cfg.dirty_background_bytes = 1 * MiB;
	cfg.dirty_bytes = 8 * MiB;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=20M,lat=5ms,qd=64", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &f), 0);
	pthread_t t[4];
	for (long k = 0; k < 4; k++)
		CHECK_EQ(pthread_create(&t[k], NULL, writer, (void *)k), 0);
	while (atomic_load(&writes) < 4000)     /* over the background threshold */
		sched_yield();
	signal(SIGALRM, on_alarm);
	alarm(120);
	for (int i = 0; i < 3; i++) {
		char mark[4096];
		memset(mark, 'a' + i, sizeof(mark));
		CHECK_EQ(wbc_pwrite(f, mark, sizeof(mark), 0), sizeof(mark));
		long w0 = atomic_load(&writes);
		CHECK_EQ(wbc_fsync(f), 0);
		char back[4096];
		uint64_t size;
		CHECK_EQ(t_backend_read(dev, "a", back, sizeof(back), &size), 0);
		CHECK(!memcmp(back, mark, sizeof(mark)));
		printf("fsync %d returned; the writers wrote %ld pages meanwhile\n", i,
		       atomic_load(&writes) - w0);
	}
	alarm(0);
	atomic_store(&stop, 1);
	for (int k = 0; k < 4; k++)
		pthread_join(t[k], NULL);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
