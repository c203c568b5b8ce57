/*
 * Turns bytes into a sequence of API operations on a small cache (two
 * files on a mem device, 512-byte pages, 24 pages) and checks every read
 * and, at the end, the backend against a reference model.  Shared by the
 * libFuzzer target (fuzz/fuzz_ops.c, `make fuzz`) and the regression test
 * (tests/fuzz_regress.c), which replays tests/fuzz-corpus/.
 * Returns normally when all checks pass; aborts on a mismatch.
 */
#ifndef WBC_FUZZ_OPS_H
#define WBC_FUZZ_OPS_H
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcache.h"
#include "internal.h"

#define FZ_FILES 2
#define FZ_MAX (32u << 10)

static void fz_check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_ops: %s\n", what);
		abort();
	}
}

static unsigned fz_take(const uint8_t **p, const uint8_t *end, unsigned nbytes)
{
	unsigned v = 0;
	for (unsigned i = 0; i < nbytes && *p < end; i++)
		v = v << 8 | *(*p)++;
	return v;
}

static void fuzz_run(const uint8_t *data, size_t size)
{
	static char model[FZ_FILES][FZ_MAX + 512], buf[FZ_MAX + 512], back[FZ_MAX + 512];
	uint64_t msize[FZ_FILES] = { 0 };
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.page_size = 512;
	cfg.mem_bytes = 24 * 512;
	cfg.dirty_ratio = 50;
	cfg.dirty_background_ratio = 20;
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f[FZ_FILES];
	const char *names[FZ_FILES] = { "a", "b" };
	fz_check(!wbc_cache_open(&cfg, &c), "open");
	fz_check(!wbc_dev_add(c, "mem", &dev), "dev");
	for (int i = 0; i < FZ_FILES; i++) {
		fz_check(!wbc_file_open(dev, names[i], WBC_O_CREAT | WBC_O_TRUNC, &f[i]), "file");
		memset(model[i], 0, sizeof(model[i]));
	}
	const uint8_t *p = data, *end = data + size;
	while (p < end) {
		unsigned op = fz_take(&p, end, 1);
		int i = op & 1;
		switch ((op >> 1) % 7) {
		case 0: case 1: {                      /* write */
			unsigned off = fz_take(&p, end, 2) % FZ_MAX;
			unsigned len = 1 + fz_take(&p, end, 2) % 2048;
			unsigned fill = fz_take(&p, end, 1);
			if (off + len > FZ_MAX)
				len = FZ_MAX - off;
			for (unsigned k = 0; k < len; k++)
				buf[k] = (char)(fill + k * 7);
			fz_check(wbc_pwrite(f[i], buf, len, off) == (ssize_t)len, "pwrite");
			memcpy(model[i] + off, buf, len);
			if (off + len > msize[i])
				msize[i] = off + len;
			break;
		}
		case 2: case 3: {                      /* read */
			unsigned off = fz_take(&p, end, 2) % (FZ_MAX + 512);
			unsigned len = 1 + fz_take(&p, end, 2) % 4096;
			if (len > sizeof(buf))
				len = sizeof(buf);
			ssize_t want = off >= msize[i] ? 0 :
				(ssize_t)(len < msize[i] - off ? len : msize[i] - off);
			ssize_t got = wbc_pread(f[i], buf, len, off);
			fz_check(got == want, "pread length");
			fz_check(!memcmp(buf, model[i] + off, (size_t)want), "pread bytes");
			break;
		}
		case 4: {                              /* truncate */
			unsigned size2 = fz_take(&p, end, 2) % FZ_MAX;
			fz_check(!wbc_truncate(f[i], size2), "truncate");
			if (size2 < msize[i])
				memset(model[i] + size2, 0, msize[i] - size2);
			msize[i] = size2;
			break;
		}
		case 5:                                /* fsync / range / device sync */
			if (op & 0x80)
				fz_check(!wbc_dev_sync(dev), "dev sync");
			else if (op & 0x40) {
				/* taken in order (arguments are evaluated in
				 * no set order: gcc and clang differ, and an
				 * input would replay another way) */
				uint64_t roff = fz_take(&p, end, 2), rlen = fz_take(&p, end, 2);
				fz_check(!wbc_fsync_range(f[i], roff, rlen, 1), "fsync range");
			} else
				fz_check(!wbc_fsync(f[i]), "fsync");
			break;
		case 6:                                /* reopen */
			fz_check(!wbc_file_close(f[i]), "close");
			fz_check(!wbc_file_open(dev, names[i], 0, &f[i]), "reopen");
			fz_check(wbc_file_size(f[i]) == (int64_t)msize[i], "size");
			break;
		}
	}
	fz_check(!wbc_cache_sync(c), "sync");
	for (int i = 0; i < FZ_FILES; i++) {
		void *obj;
		uint64_t bsize;
		fz_check(!backend_open(dev->be, names[i], false, &obj, &bsize), "backend open");
		fz_check(bsize == msize[i], "backend size");
		if (bsize)
			fz_check(backend_read_sync(dev->be, obj, back, bsize, 0) == (ssize_t)bsize,
				 "backend read");
		fz_check(!memcmp(back, model[i], bsize), "backend bytes");
		backend_close(dev->be, obj);
		wbc_file_close(f[i]);
	}
	fz_check(!wbc_cache_close(c), "close cache");
}
#endif
