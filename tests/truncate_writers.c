/*
 * A truncate of a file that other threads keep writing gets its turn.  Each write holds the file's I/O lock shared for the whole
 * call, throttle pauses included, and a truncate or a remove takes it
 * exclusive; with readers let in while a writer of the lock waited (the
 * default of glibc's rwlock), the writes' shared holds overlapped without
 * a gap and the truncate never got the lock: with three writers on a
 * slow device, none of three truncates had returned after 60 s.  The
 * lock now lets a waiting truncate in before new readers, as the
 * kernel's i_rwsem does.  The 60 s below is a watchdog against that hang
 * (each finishes within a pause, 200 ms, when it works), not a timing.
 */
#include "testutil.h"

#include <pthread.h>

#define WRITERS 3
#define CHUNK (256u << 10)

static wbc_file *f;
static atomic_int stop;
static atomic_llong writes;

static void *writer(void *arg)
{
	char *b = malloc(CHUNK);
	CHECK(b);
	memset(b, 1 + (int)(uintptr_t)arg, CHUNK);
	uint64_t off = (uintptr_t)arg * (8u << 20);
	while (!atomic_load(&stop)) {
		ssize_t r = wbc_pwrite(f, b, CHUNK, off);
		CHECK(r > 0);
		atomic_fetch_add(&writes, 1);
		off = (off + CHUNK) % (64u << 20);
	}
	free(b);
	return NULL;
}

static atomic_int done;
static void *watchdog(void *arg)
{
	(void)arg;
	for (int i = 0; i < 600 && !atomic_load(&done); i++)
		usleep(100 * 1000);
	if (!atomic_load(&done)) {
		fprintf(stderr, "FAIL: a truncate still waited for the writers after 60 s\n");
		_exit(1);
	}
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(32 << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	/* slow: the writers are throttled, and pause with the lock held */
	CHECK_EQ(wbc_dev_add(c, "model:bw=20M", &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "f", WBC_O_CREAT, &f), 0);
	pthread_t w[WRITERS], dog;
	for (uintptr_t i = 0; i < WRITERS; i++)
		CHECK_EQ(pthread_create(&w[i], NULL, writer, (void *)i), 0);
	CHECK_EQ(pthread_create(&dog, NULL, watchdog, NULL), 0);
	/* the writers are going (and throttled: 32 MiB, 20 MB/s) */
	CHECK(T_WAIT_UNTIL(atomic_load(&writes) >= 200));
	for (int k = 0; k < 3; k++) {
		long long before = atomic_load(&writes);
		CHECK_EQ(wbc_truncate(f, 0), 0);
		printf("truncate %d returned\n", k);
		/* the writers go on between them */
		CHECK(T_WAIT_UNTIL(atomic_load(&writes) >= before + WRITERS));
	}
	atomic_store(&done, 1);
	atomic_store(&stop, 1);
	for (int i = 0; i < WRITERS; i++)
		CHECK_EQ(pthread_join(w[i], NULL), 0);
	CHECK_EQ(pthread_join(dog, NULL), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("truncate_writers: ok\n");
	return 0;
}
