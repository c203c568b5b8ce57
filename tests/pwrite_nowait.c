/*
 * wbc_pwrite_nowait: on a model device slower than the writers, three
 * writers that wait their owed pauses themselves (as the mount's replier
 * does) are throttled like wbc_pwrite's: a call stops where a pause is
 * owed and returns the bytes in (then the rest goes in after the pause),
 * each pause owed is at most one max pause, dirty + writeback stays under
 * the limit plus the slack at every sample, and every byte reads back.
 * One thread serving two writers: the second's write right after the
 * first was told to pause owes a pause too, at its first check.  A fast device passes with
 * no pause owed.  A device that fails every write (retry policy, far
 * from its retry_timeout): two such writers, 150 owed pauses each, leave
 * dirty + writeback under the limit plus the slack (after each pause at
 * the limit the next page went in, one page a pause: 300 pages over).
 */
#include "testutil.h"
#include "internal.h"
#include "backend/backends.h"

#define WRITERS 3
#define PER_WRITER (24u << 20)
#define CHUNK (1u << 20)

static wbc_cache *c;
static wbc_dev *dev;
static atomic_int left = WRITERS;
static atomic_long short_calls, owed;

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	while (nanosleep(&ts, &ts))
		;
}

static void *writer(void *arg)
{
	long id = (long)arg;
	char name[16];
	static _Thread_local char buf[CHUNK];
	snprintf(name, sizeof(name), "w%ld", id);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	for (uint64_t off = 0; off < PER_WRITER; off += CHUNK) {
		t_fill(buf, CHUNK, off ^ (uint64_t)id);
		size_t done = 0;
		while (done < CHUNK) {
			uint64_t pause = 7;   /* must be overwritten */
			ssize_t r = wbc_pwrite_nowait(f, buf + done, CHUNK - done, off + done,
						      &pause);
			CHECK(r >= 0);
			done += (size_t)r;
			if (done < CHUNK) {
				/* stopped short: only where a pause is owed */
				CHECK(pause > 0);
				atomic_fetch_add(&short_calls, 1);
			}
			CHECK(pause != 7);
			if (pause) {
				CHECK(pause <= 200ull * 1000 * 1000);   /* one max pause */
				atomic_fetch_add(&owed, 1);
				sleep_ns(pause);
			}
		}
	}
	CHECK_EQ(wbc_fsync(f), 0);
	for (uint64_t off = 0; off < PER_WRITER; off += CHUNK) {
		char want[4096], got[4096];
		t_fill(want, sizeof(want), off ^ (uint64_t)id);
		CHECK_EQ(wbc_pread(f, got, sizeof(got), off), (ssize_t)sizeof(got));
		CHECK(!memcmp(want, got, sizeof(got)));
	}
	CHECK_EQ(wbc_file_close(f), 0);
	atomic_fetch_sub(&left, 1);
	return NULL;
}

#define FAIL_PAUSES 150
static wbc_file *ffiles[2];

/* Writes 1 MiB at a time until it has waited FAIL_PAUSES owed pauses. */
static void *failing_writer(void *arg)
{
	long id = (long)arg;
	char name[16];
	static _Thread_local char buf[CHUNK];
	snprintf(name, sizeof(name), "fail%ld", id);
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &ffiles[id]), 0);
	uint64_t off = 0;
	for (int pauses = 0; pauses < FAIL_PAUSES;) {
		uint64_t pause = 0;
		ssize_t r = wbc_pwrite_nowait(ffiles[id], buf, CHUNK, off, &pause);
		CHECK(r >= 0);
		off += (uint64_t)r;
		CHECK(off < (32u << 20));   /* the arena: never past it */
		if (pause) {
			pauses++;
			sleep_ns(pause);
		}
	}
	return NULL;
}

int main(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 32u << 20;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=40M", &dev), 0);
	pthread_t w[WRITERS], s;
	struct t_limit_watch lw = {
		.c = c, .running = &left,
		.slack = ((uint64_t)WRITERS * throttle_slack_pages(c) + 32) * 4096,
	};
	CHECK_EQ(pthread_create(&s, NULL, t_limit_watch, &lw), 0);
	for (long i = 0; i < WRITERS; i++)
		CHECK_EQ(pthread_create(&w[i], NULL, writer, (void *)i), 0);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	pthread_join(s, NULL);
	printf("pauses owed %ld, calls stopped short %ld, limit violations %ld\n",
	       atomic_load(&owed), atomic_load(&short_calls), atomic_load(&lw.violations));
	CHECK(atomic_load(&owed) > 0);           /* the writers were throttled */
	CHECK(atomic_load(&short_calls) > 0);    /* at a pause, mid-write */
	CHECK_EQ(atomic_load(&lw.violations), 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* one thread serving several writers (the mount's workers): a write
	 * for a second file right after the first was told to pause still
	 * owes a pause; the first pause ends in the future, and its time was
	 * once read as long past, forgetting the debt */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=4M", &dev), 0);
	{
		wbc_file *a, *b;
		static char big[CHUNK];
		CHECK_EQ(wbc_file_open(dev, "a", WBC_O_CREAT, &a), 0);
		CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &b), 0);
		/* the throttle's shortest pause (throttle.c): a debt within it of
		 * its end is forgiven.  The first writer writes on, pausing as
		 * told, until it owes three times that (its first debts are
		 * barely more: a preemption of 0.3 ms between the two calls
		 * let the second through); a pair of calls further apart than
		 * the debt less that proves nothing, and is tried again (the
		 * gap from the start of the first call: a preemption between
		 * the two calls counts; 100 tries, for a loaded machine) */
		const uint64_t min_pause = 10 * 1000 * 1000;
		uint64_t pa = 0, pb = 0, off = 0, gap = 0, t0 = 0;
		ssize_t r = 0;
		int pairs = 0;
		for (;;) {
			int tries = 0;
			for (pa = 0; pa < 3 * min_pause && tries++ < 2000;) {
				if (pa)
					sleep_ns(pa);
				t0 = wbc_now_ns();
				r = wbc_pwrite_nowait(a, big, CHUNK, off, &pa);
				CHECK(r >= 0);   /* 0: stopped at its first check, at the limit */
				off += (uint64_t)r;
			}
			CHECK(pa >= 3 * min_pause);
			r = wbc_pwrite_nowait(b, big, CHUNK, 0, &pb);
			gap = wbc_now_ns() - t0;
			if (gap + min_pause < pa || ++pairs == 100)
				break;
			sleep_ns(pa > pb ? pa : pb);
		}
		printf("one thread, two writers: the first owes %.1f ms, the second then %.1f ms "
		       "(%zd bytes in, %.1f ms after; %d pairs too far apart)\n", (double)pa / 1e6,
		       (double)pb / 1e6, r, (double)gap / 1e6, pairs);
		CHECK(r >= 0);
		CHECK(pb > 0);
		/* stopped at its first check (36 KiB here), not let through
		 * until a later one (488 KiB when the debt was forgotten) */
		CHECK(r < (ssize_t)CHUNK / 4);
		sleep_ns(pa > pb ? pa : pb);
		CHECK_EQ(wbc_file_close(a), 0);
		CHECK_EQ(wbc_file_close(b), 0);
	}
	CHECK_EQ(wbc_cache_close(c), 0);

	/* a device that fails every write: writers that wait their owed
	 * pauses stay at the limit, a page a pause does not go past it
	 * (counted in pauses, not in time) */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "model:bw=400M,retry_timeout=600", &dev), 0);
	model_set_faults(dev, 0, UINT64_MAX / 2, 0);
	{
		pthread_t fw[2];
		for (long i = 0; i < 2; i++)
			CHECK_EQ(pthread_create(&fw[i], NULL, failing_writer, (void *)i), 0);
		for (int i = 0; i < 2; i++)
			pthread_join(fw[i], NULL);
		struct wbc_stats st;
		wbc_stats(c, &st);
		uint64_t over = st.dirty_bytes + st.writeback_bytes;
		uint64_t bound = st.limit_bytes + (2 * throttle_slack_pages(c) + 32) * 4096;
		printf("a store failing every write: %llu KiB dirty after 2 x %d owed pauses "
		       "(limit and slack %llu KiB)\n", (unsigned long long)over >> 10, FAIL_PAUSES,
		       (unsigned long long)bound >> 10);
		CHECK(over <= bound);
		model_set_faults(dev, 0, 0, 0);
		for (int i = 0; i < 2; i++)
			CHECK_EQ(wbc_file_close(ffiles[i]), 0);
		int e = wbc_cache_close(c);
		CHECK(e == 0 || e == -EIO);   /* the failed writes, told once */
	}

	/* a fast device and a writer under freerun: nothing owed, all in */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	wbc_file *f;
	static char buf[CHUNK];
	CHECK_EQ(wbc_file_open(dev, "fast", WBC_O_CREAT, &f), 0);
	uint64_t pause = 1;
	CHECK_EQ(wbc_pwrite_nowait(f, buf, CHUNK, 0, &pause), (ssize_t)CHUNK);
	CHECK_EQ(pause, 0);
	CHECK_EQ(wbc_pwrite_nowait(f, buf, CHUNK, CHUNK, NULL), (ssize_t)CHUNK);
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
