/*
 * Concurrency stress (for ThreadSanitizer): writers to different pages of
 * one shared file and to files of their own, readers that verify what
 * their writer has acknowledged, and threads that fsync, sync devices and
 * reopen files, all at once, on two devices, through a cache small enough
 * that reclaim and writeback run throughout.  The data is checked at the
 * end against what each writer wrote.
 */
#include "testutil.h"
#include "backend_util.h"

#define PS 4096
#define NW 4
#define REGION (96 * 1024)          /* each writer's slice of the shared file */
#define ROUNDS 1500

static wbc_cache *c;
static wbc_dev *devs[2];
static wbc_file *shared;
static char model[NW][REGION];
static atomic_int stop;

struct wctx {
	int id;
	pthread_mutex_t lock;        /* model[id] vs this writer's reader */
};
static struct wctx ctx[NW];

static void *writer(void *arg)
{
	struct wctx *w = arg;
	uint64_t s = (uint64_t)w->id * 7919 + 1;
	char name[16], buf[3 * PS];
	snprintf(name, sizeof(name), "own%d", w->id);
	wbc_file *own;
	CHECK_EQ(wbc_file_open(devs[w->id & 1], name, WBC_O_CREAT | WBC_O_TRUNC, &own), 0);
	for (int r = 0; r < ROUNDS; r++) {
		size_t len = 1 + (size_t)(t_rand(&s) % sizeof(buf));
		uint64_t off = t_rand(&s) % (REGION - len);
		t_fill(buf, len, t_rand(&s));
		pthread_mutex_lock(&w->lock);
		CHECK_EQ(wbc_pwrite(shared, buf, len, (uint64_t)w->id * REGION + off), len);
		memcpy(model[w->id] + off, buf, len);
		pthread_mutex_unlock(&w->lock);
		CHECK_EQ(wbc_pwrite(own, buf, len, off), len);
		if (r % 100 == 0)
			CHECK_EQ(wbc_fsync(own), 0);
		if (r % 250 == 0) {
			CHECK_EQ(wbc_file_close(own), 0);
			CHECK_EQ(wbc_file_open(devs[w->id & 1], name, 0, &own), 0);
		}
	}
	CHECK_EQ(wbc_file_close(own), 0);
	return NULL;
}

static void *reader(void *arg)
{
	struct wctx *w = arg;
	uint64_t s = (uint64_t)w->id + 100;
	char buf[2 * PS];
	while (!atomic_load(&stop)) {
		uint64_t off = t_rand(&s) % (REGION - sizeof(buf));
		pthread_mutex_lock(&w->lock);
		ssize_t n = wbc_pread(shared, buf, sizeof(buf), (uint64_t)w->id * REGION + off);
		/* the file may end inside this writer's region early on */
		CHECK(n >= 0);
		CHECK(!memcmp(buf, model[w->id] + off, (size_t)n));
		pthread_mutex_unlock(&w->lock);
	}
	return NULL;
}

static void *syncer(void *arg)
{
	(void)arg;
	int i = 0;
	while (!atomic_load(&stop)) {
		if (i++ % 3)
			CHECK_EQ(wbc_fsync(shared), 0);
		else
			CHECK_EQ(wbc_dev_sync(devs[i & 1]), 0);
		struct wbc_stats st;
		CHECK_EQ(wbc_stats(c, &st), 0);
		CHECK(st.cached_bytes <= st.mem_bytes);
	}
	return NULL;
}

int main(void)
{
	struct wbc_config cfg = t_config(64 * PS, PS);
	cfg.dirty_expire_centisecs = 5;
	cfg.dirty_writeback_centisecs = 1;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &devs[0]), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &devs[1]), 0);
	CHECK_EQ(wbc_file_open(devs[0], "shared", WBC_O_CREAT, &shared), 0);
	pthread_t wt[NW], rt[NW], st;
	for (int i = 0; i < NW; i++) {
		ctx[i].id = i;
		pthread_mutex_init(&ctx[i].lock, NULL);
	}
	pthread_create(&st, NULL, syncer, NULL);
	for (int i = 0; i < NW; i++) {
		pthread_create(&wt[i], NULL, writer, &ctx[i]);
		pthread_create(&rt[i], NULL, reader, &ctx[i]);
	}
	for (int i = 0; i < NW; i++)
		pthread_join(wt[i], NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < NW; i++)
		pthread_join(rt[i], NULL);
	pthread_join(st, NULL);

	CHECK_EQ(wbc_cache_sync(c), 0);
	static char b[NW * REGION];
	uint64_t size;
	CHECK_EQ(t_backend_read(devs[0], "shared", b, sizeof(b), &size), 0);
	for (int i = 0; i < NW; i++)
		CHECK(!memcmp(b + (size_t)i * REGION, model[i],
			      (size_t)WBC_MIN((uint64_t)REGION, size - (uint64_t)i * REGION)));
	struct wbc_stats s;
	wbc_stats(c, &s);
	printf("threads: written %llu KiB, written back %llu KiB, reclaimed %llu pages\n",
	       (unsigned long long)s.written_bytes >> 10,
	       (unsigned long long)s.written_back_bytes >> 10,
	       (unsigned long long)s.reclaimed_pages);
	CHECK(s.reclaimed_pages > 0);
	/* the dirty-list lock's hold-time histogram is consistent */
	for (int d = 0; d < 2; d++) {
		struct wbc_dev_debug dd;
		uint64_t sum = 0;
		int top = -1;
		/* the flusher still runs: a hold that ends while the counters
		 * are read is in some of them only; read until none did */
		for (int tries = 0; tries < 1000; tries++) {
			if (tries)
				usleep(1000);
			CHECK_EQ(wbc_dev_debug(devs[d], &dd), 0);
			sum = 0;
			top = -1;
			for (int k = 0; k < 32; k++) {
				sum += dd.list_lock_hold_hist[k];
				if (dd.list_lock_hold_hist[k])
					top = k;
			}
			if (sum == dd.list_lock_holds && top >= 0 &&
			    (top == 31 || dd.list_lock_max_hold_ns < (1ull << top)) &&
			    (top == 0 || dd.list_lock_max_hold_ns >= (1ull << (top - 1))))
				break;
		}
		CHECK(dd.list_lock_holds > 0 && sum == dd.list_lock_holds && top >= 0);
		CHECK(top == 31 || dd.list_lock_max_hold_ns < (1ull << top));
		CHECK(top == 0 || dd.list_lock_max_hold_ns >= (1ull << (top - 1)));
		/* the same holds in CPU time: as many, none longer than its
		 * wall time (a hold that ends while the counters are read
		 * is in one histogram and not yet in the other: read until
		 * none did) */
		bool same = false;
		for (int tries = 0; tries < 1000 && !same; tries++) {
			if (tries)
				usleep(1000);
			CHECK_EQ(wbc_dev_debug(devs[d], &dd), 0);
			uint64_t csum = 0;
			for (int k = 0; k < 32; k++)
				csum += dd.list_lock_cpu_hist[k];
			same = csum == dd.list_lock_holds &&
			       dd.list_lock_max_cpu_ns <= dd.list_lock_max_hold_ns;
		}
		CHECK(same);
		CHECK(wbc_lock_cpu_percentile(&dd, 99) <= dd.list_lock_max_cpu_ns);
	}
	CHECK_EQ(wbc_file_close(shared), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
