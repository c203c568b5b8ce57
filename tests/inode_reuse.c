/*
 * Inode memory reuse (src/fs/inode.c): a closed file dropped once written back
 * leaves its inode in its name shard, and the next file made in that
 * shard takes it.
 *   1. short names: every file written, closed and synced is dropped from
 *      the name hash, and the shards keep inodes for reuse; opening names
 *      that do not exist takes none of them;
 *   2. names of every length from 1 to 250 bytes, made after that: longer
 *      names than a kept inode has room for get a new one (an overflow
 *      here is what SAN=address would catch), shorter ones reuse;
 *   3. every file of both rounds reads back its own data under its own
 *      name, so no reused inode kept a trace of its former file;
 *   4. names_trim gives back half of what each shard keeps, and repeated,
 *      all of it;
 *   5. files whose last page is partial: writeback writes the whole page,
 *      so the backend size is trimmed afterwards and the file is listed
 *      again with no dirty page; periodic passes visit such files too,
 *      and every file leaves the hash;
 *   6. stress (for SAN=thread): three threads create, write, close and
 *      reopen files while writeback drops them and another thread trims
 *      the kept inodes over and over; every file reads back right.
 */
#include "testutil.h"
#include "internal.h"

#include <pthread.h>

#define FILES 3000
#define STRESS_THREADS 3
#define STRESS_FILES 2000

static struct wbc_dev *sdev;
static atomic_bool stop_trim;

static void *stress_writer(void *arg)
{
	int id = (int)(intptr_t)arg;
	char buf[512], got[512], name[64];
	for (int i = 0; i < STRESS_FILES; i++) {
		wbc_file *f;
		snprintf(name, sizeof(name), "s%d-%d", id, i);
		t_fill(buf, sizeof(buf), (uint64_t)(id * STRESS_FILES + i));
		CHECK_EQ(wbc_file_open(sdev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), sizeof(buf));
		CHECK_EQ(wbc_file_close(f), 0);
		if (i % 7 == 0) {
			/* an earlier file, perhaps dropped by now */
			int j = i / 2;
			snprintf(name, sizeof(name), "s%d-%d", id, j);
			t_fill(buf, sizeof(buf), (uint64_t)(id * STRESS_FILES + j));
			CHECK_EQ(wbc_file_open(sdev, name, 0, &f), 0);
			CHECK_EQ(wbc_pread(f, got, sizeof(got), 0), sizeof(got));
			CHECK(!memcmp(got, buf, sizeof(got)));
			CHECK_EQ(wbc_file_close(f), 0);
		}
	}
	return NULL;
}

static void *trimmer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_trim)) {
		names_trim(sdev);
		struct timespec ts = { 0, 200 * 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void sums(struct wbc_dev *dev, size_t *listed, size_t *kept)
{
	*listed = *kept = 0;
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		pthread_mutex_lock(&s->lock);
		*listed += s->n;
		*kept += s->nfree;
		pthread_mutex_unlock(&s->lock);
	}
}

static void name_of(char *out, size_t cap, int round, int i)
{
	if (round != 2) {
		snprintf(out, cap, "r%d-%d", round, i);
		return;
	}
	/* lengths 1..250, the number last so names stay unique */
	size_t len = 1 + (size_t)i % 250, n = 0;
	char num[16];
	int k = snprintf(num, sizeof(num), "%d", i);
	while (n + (size_t)k < len)
		out[n++] = 'a' + (char)(i % 26);
	memcpy(out + n, num, (size_t)k + 1);
}

/* round 3 has partial last pages */
static size_t len_of(int round, int i)
{
	return round == 3 ? 4096 - (size_t)i % 100 : 4096;
}

static void make(struct wbc_dev *dev, int round)
{
	char buf[4096], name[300];
	for (int i = 0; i < FILES; i++) {
		wbc_file *f;
		name_of(name, sizeof(name), round, i);
		t_fill(buf, sizeof(buf), (uint64_t)(round * FILES + i));
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, len_of(round, i), 0), len_of(round, i));
		CHECK_EQ(wbc_file_close(f), 0);
	}
	CHECK_EQ(wbc_dev_sync(dev), 0);
}

static void verify(struct wbc_dev *dev, int round)
{
	char want[4096], got[4096], name[300];
	for (int i = 0; i < FILES; i++) {
		wbc_file *f;
		name_of(name, sizeof(name), round, i);
		size_t len = len_of(round, i);
		t_fill(want, sizeof(want), (uint64_t)(round * FILES + i));
		CHECK_EQ(wbc_file_open(dev, name, 0, &f), 0);
		CHECK_EQ(wbc_file_size(f), len);
		CHECK_EQ(wbc_pread(f, got, sizeof(got), 0), len);
		CHECK(!memcmp(got, want, len));
		CHECK_EQ(wbc_file_close(f), 0);
	}
}

int main(void)
{
	struct wbc_config cfg = t_config(8u << 20, 4096);
	cfg.dirty_writeback_centisecs = 0;   /* no periodic pass, no trim */
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	size_t listed, kept;

	make(dev, 1);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	CHECK(kept > 0);
	/* a lookup that finds nothing costs no kept inode */
	size_t before_miss = kept;
	wbc_file *nf;
	for (int i = 0; i < 100; i++) {
		char miss[32];
		snprintf(miss, sizeof(miss), "missing-%d", i);
		CHECK_EQ(wbc_file_open(dev, miss, 0, &nf), -ENOENT);
	}
	sums(dev, &listed, &kept);
	CHECK_EQ(kept, before_miss);
	CHECK_EQ(listed, 0);
	make(dev, 2);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	CHECK(kept > 0);
	verify(dev, 1);
	verify(dev, 2);

	/* 4. trimming */
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	size_t before = kept;
	CHECK(before > 1);
	names_trim(dev);
	sums(dev, &listed, &kept);
	CHECK(kept <= before / 2 + NAME_SHARDS / 2 && kept >= before / 2 - NAME_SHARDS / 2 - 1);
	for (int i = 0; i < 12; i++)
		names_trim(dev);
	sums(dev, &listed, &kept);
	CHECK_EQ(kept, 0);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* 5. partial last pages, periodic passes every 50 ms */
	cfg.dirty_expire_centisecs = 5;
	cfg.dirty_writeback_centisecs = 5;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	make(dev, 3);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	verify(dev, 3);

	/* 6. stress */
	sdev = dev;
	pthread_t th[STRESS_THREADS], tr;
	CHECK_EQ(pthread_create(&tr, NULL, trimmer, NULL), 0);
	for (int i = 0; i < STRESS_THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, stress_writer, (void *)(intptr_t)i), 0);
	for (int i = 0; i < STRESS_THREADS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&stop_trim, true);
	pthread_join(tr, NULL);
	CHECK_EQ(wbc_dev_sync(dev), 0);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
