/*
 * Inode memory reuse (src/file.c): a closed file dropped once written back
 * leaves its inode in its name shard, and the next file made in that
 * shard takes it.
 *   1. short names: every file written, closed and synced is dropped from
 *      the name hash (files whose size the flusher trims after the sync
 *      once they expire: periodic passes visit files with no dirty page
 *      too), and the shards keep some of the inodes (at most their
 *      bound);
 *   2. names of every length from 1 to 250 bytes, made after that: longer
 *      names than a kept inode has room for get a new one (an overflow
 *      here is what SAN=address would catch), shorter ones reuse;
 *   3. every file of both rounds reads back its own data under its own
 *      name, so no reused inode kept a trace of its former file.
 */
#include "testutil.h"
#include "internal.h"

#define FILES 3000

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
	if (round == 1) {
		snprintf(out, cap, "r1-%d", i);
		return;
	}
	/* round 2: lengths 1..250, the number last so names stay unique */
	size_t len = 1 + (size_t)i % 250, n = 0;
	char num[16];
	int k = snprintf(num, sizeof(num), "%d", i);
	while (n + (size_t)k < len)
		out[n++] = 'a' + (char)(i % 26);
	memcpy(out + n, num, (size_t)k + 1);
}

static void make(struct wbc_dev *dev, int round)
{
	char buf[4096], name[300];
	for (int i = 0; i < FILES; i++) {
		wbc_file *f;
		name_of(name, sizeof(name), round, i);
		t_fill(buf, sizeof(buf), (uint64_t)(round * FILES + i));
		CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
		CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf) - (size_t)i % 100, 0),
			 sizeof(buf) - (size_t)i % 100);
		CHECK_EQ(wbc_file_close(f), 0);
	}
	CHECK_EQ(wbc_dev_sync(dev), 0);
}

int main(void)
{
	struct wbc_config cfg = t_config(8u << 20, 4096);
	/* a file whose last page went out whole is listed again until the
	 * flusher trims its size: let that come soon */
	cfg.dirty_expire_centisecs = 5;
	cfg.dirty_writeback_centisecs = 5;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	size_t listed, kept;

	make(dev, 1);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	CHECK(kept > 0);
	CHECK(kept <= (size_t)NAME_SHARDS * 64);

	make(dev, 2);
	CHECK(T_WAIT_UNTIL((sums(dev, &listed, &kept), listed == 0)));
	CHECK(kept > 0);

	char want[4096], got[4096], name[300];
	for (int round = 1; round <= 2; round++)
		for (int i = 0; i < FILES; i++) {
			wbc_file *f;
			name_of(name, sizeof(name), round, i);
			size_t len = sizeof(want) - (size_t)i % 100;
			t_fill(want, sizeof(want), (uint64_t)(round * FILES + i));
			CHECK_EQ(wbc_file_open(dev, name, 0, &f), 0);
			CHECK_EQ(wbc_file_size(f), len);
			CHECK_EQ(wbc_pread(f, got, sizeof(got), 0), len);
			CHECK(!memcmp(got, want, len));
			CHECK_EQ(wbc_file_close(f), 0);
		}
	CHECK_EQ(wbc_cache_close(c), 0);
	return 0;
}
