/*
 * Randomized model test: 200,000 mixed operations (60,000 under a
 * sanitizer, where races and memory are the point) (write, read, truncate,
 * fsync, device sync, reopen) on several files through a cache far smaller
 * than the data, so reclaim and background / periodic writeback run all
 * the time.  Every read is checked against an in-memory reference model,
 * and at the end the backend holds exactly the model's bytes and sizes.
 * Runs on the mem backend, then (fewer operations) on the file backend.
 *   random.t [OPS [SEED]]
 */
#include "testutil.h"
#include "backend_util.h"

#include <fcntl.h>
#include <sys/stat.h>

#define NFILES 4
#define MAXSIZE (640u << 10)   /* per file: 160 pages, 4 files = 2.5 MiB */
#define PS 4096

struct model {
	char *data;
	uint64_t size;
};

static char rbuf[64 << 10], wbuf[64 << 10];

static size_t rand_len(uint64_t *s)
{
	switch (t_rand(s) % 4) {
	case 0: return 1 + t_rand(s) % 64;           /* tiny, unaligned */
	case 1: return 1 + t_rand(s) % PS;           /* within a page or across two */
	case 2: return PS * (1 + t_rand(s) % 4);     /* whole pages */
	default: return 1 + t_rand(s) % sizeof(wbuf);
	}
}

static void run(const char *spec, const char *dir, long ops, uint64_t seed)
{
	struct wbc_config cfg = t_config(48 * PS, PS);   /* 48 pages */
	cfg.dirty_ratio = 40;
	cfg.dirty_background_ratio = 10;
	cfg.dirty_expire_centisecs = 5;
	cfg.dirty_writeback_centisecs = 2;
	wbc_cache *c;
	wbc_dev *dev;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);

	struct model m[NFILES];
	wbc_file *f[NFILES];
	char names[NFILES][16];
	for (int i = 0; i < NFILES; i++) {
		snprintf(names[i], sizeof(names[i]), "f%d", i);
		m[i].data = calloc(1, MAXSIZE + sizeof(wbuf));
		m[i].size = 0;
		CHECK_EQ(wbc_file_open(dev, names[i], WBC_O_CREAT | WBC_O_TRUNC, &f[i]), 0);
	}
	uint64_t s = seed;
	long counts[8] = { 0 };
	for (long op = 0; op < ops; op++) {
		int i = (int)(t_rand(&s) % NFILES);
		unsigned r = (unsigned)(t_rand(&s) % 100);
		if (r < 42) {                                   /* write */
			size_t len = rand_len(&s);
			uint64_t off = t_rand(&s) % MAXSIZE;
			t_fill(wbuf, len, t_rand(&s));
			CHECK_EQ(wbc_pwrite(f[i], wbuf, len, off), len);
			memcpy(m[i].data + off, wbuf, len);
			if (off + len > m[i].size)
				m[i].size = off + len;
			counts[0]++;
		} else if (r < 84) {                            /* read */
			size_t len = rand_len(&s);
			uint64_t off = t_rand(&s) % (MAXSIZE + PS);
			ssize_t want = off >= m[i].size ? 0 :
				(ssize_t)(len < m[i].size - off ? len : m[i].size - off);
			ssize_t got = wbc_pread(f[i], rbuf, len, off);
			if (got != want || memcmp(rbuf, m[i].data + off, (size_t)want)) {
				fprintf(stderr, "op %ld: read %s off %llu len %zu: got %zd want %zd%s\n",
					op, names[i], (unsigned long long)off, len, got, want,
					got == want ? " (bytes differ)" : "");
				exit(1);
			}
			counts[1]++;
		} else if (r < 90) {                            /* truncate */
			uint64_t size = t_rand(&s) % 3 ? t_rand(&s) % MAXSIZE : m[i].size / 2;
			CHECK_EQ(wbc_truncate(f[i], size), 0);
			if (size < m[i].size)
				memset(m[i].data + size, 0, m[i].size - size);
			m[i].size = size;
			counts[2]++;
		} else if (r < 94) {                            /* fsync, fdatasync, range */
			int e = r == 90 ? wbc_fsync(f[i]) : r == 91 ? wbc_fdatasync(f[i]) :
				wbc_fsync_range(f[i], t_rand(&s) % MAXSIZE, t_rand(&s) % (64 << 10), 1);
			CHECK_EQ(e, 0);
			counts[3]++;
		} else if (r < 95) {                            /* device sync */
			CHECK_EQ(wbc_dev_sync(dev), 0);
			counts[4]++;
		} else if (r < 97) {                            /* reopen */
			CHECK_EQ(wbc_file_close(f[i]), 0);
			CHECK_EQ(wbc_file_open(dev, names[i], 0, &f[i]), 0);
			counts[5]++;
		} else {                                        /* size */
			CHECK_EQ(wbc_file_size(f[i]), m[i].size);
			counts[6]++;
		}
	}
	struct wbc_stats st;
	CHECK_EQ(wbc_stats(c, &st), 0);
	printf("%s: %ld ops: %ld writes %ld reads %ld truncates %ld fsyncs %ld syncs %ld reopens\n",
	       spec, ops, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
	printf("  reclaimed %llu pages, written back %llu KiB in %llu I/Os, read in %llu KiB\n",
	       (unsigned long long)st.reclaimed_pages,
	       (unsigned long long)st.written_back_bytes >> 10,
	       (unsigned long long)st.write_ios, (unsigned long long)st.read_in_bytes >> 10);
	CHECK(st.reclaimed_pages > 0);       /* the cache really was too small */
	CHECK(st.write_errors == 0 && st.lost_bytes == 0);
	CHECK(st.cached_bytes <= st.mem_bytes);

	CHECK_EQ(wbc_cache_sync(c), 0);
	if (!dir) {
		/* mem: compare the backend through the device, cache still open */
		for (int i = 0; i < NFILES; i++) {
			uint64_t size;
			char *b = malloc(MAXSIZE + sizeof(wbuf));
			CHECK_EQ(t_backend_read(dev, names[i], b, MAXSIZE + sizeof(wbuf), &size), 0);
			CHECK_EQ(size, m[i].size);
			CHECK(!memcmp(b, m[i].data, size));
			free(b);
		}
	}
	CHECK_EQ(wbc_stats(c, &st), 0);
	CHECK_EQ(st.dirty_bytes, 0);
	CHECK_EQ(st.writeback_bytes, 0);
	for (int i = 0; i < NFILES; i++)
		CHECK_EQ(wbc_file_close(f[i]), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	if (dir) {
		/* file backend: the backing files, read with plain read(2) */
		for (int i = 0; i < NFILES; i++) {
			char path[512];
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
			int fd = open(path, O_RDONLY);
			CHECK(fd >= 0);
			struct stat sb;
			CHECK_EQ(fstat(fd, &sb), 0);
			CHECK_EQ(sb.st_size, m[i].size);
			char *b = malloc(MAXSIZE + sizeof(wbuf));
			CHECK_EQ(pread(fd, b, m[i].size, 0), m[i].size);
			CHECK(!memcmp(b, m[i].data, m[i].size));
			free(b);
			close(fd);
		}
	}
	for (int i = 0; i < NFILES; i++)
		free(m[i].data);
}

int main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : T_SANITIZED ? 60000 : 200000;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed;
	run("mem", NULL, ops, seed);
	char *dir = t_mkdtemp();
	char spec[600];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	run(spec, dir, ops / 10, seed + 1);
	t_rmdir(dir);
	return 0;
}
