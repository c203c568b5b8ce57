/*
 * dirstore-demo: write files through a wbcache cache whose device is the
 * dirstore example backend (dirstore.c), then check them on disk.
 *
 *   cc dirstore_main.c dirstore.c $(pkg-config --cflags --libs wbcache) -o dirstore-demo
 *   mkdir -p /var/tmp/dirstore && ./dirstore-demo /var/tmp/dirstore 256 200
 *
 * Arguments: the directory, MiB to write (default 64), the simulated round
 * trip in microseconds (default 0).  Prints the throughput (bytes written
 * and synced over the time it took).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <wbcache.h>
#include "dirstore.h"

#define FILES 4
#define CHUNK (1u << 20)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The byte at @off of file @i: a pattern that differs per file. */
static unsigned char pattern(int i, uint64_t off)
{
	return (unsigned char)((off * 2654435761u >> 13) + (uint64_t)i * 77);
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: dirstore-demo DIR [MiB] [RTT_US]\n");
		return 2;
	}
	unsigned long mib = 64, rtt = 0;
	char *end;
	if (argc > 2) {
		errno = 0;
		mib = strtoul(argv[2], &end, 10);
		if (!isdigit((unsigned char)argv[2][0]) || *end || errno || !mib || mib > (1u << 20)) {
			fprintf(stderr, "dirstore-demo: MiB must be 1..1048576, not '%s'\n", argv[2]);
			return 2;
		}
	}
	if (argc > 3) {
		errno = 0;
		rtt = strtoul(argv[3], &end, 10);
		if (!isdigit((unsigned char)argv[3][0]) || *end || errno || rtt > 10000000) {
			fprintf(stderr, "dirstore-demo: RTT_US must be 0..10000000, not '%s'\n",
				argv[3]);
			return 2;
		}
	}
	const struct wbc_backend_ops *ops;
	void *ctx;
	int err = dirstore_new(argv[1], (unsigned)rtt, 4, &ops, &ctx);
	if (err) {
		fprintf(stderr, "dirstore-demo: %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 64u << 20;
	wbc_cache *cache;
	wbc_dev *dev;
	char msg[256];
	if ((err = wbc_cache_open(&cfg, &cache))) {
		fprintf(stderr, "dirstore-demo: %s\n", wbc_strerror(err));
		ops->destroy(ctx);
		return 1;
	}
	if ((err = wbc_dev_add_backend_msg(cache, ops, ctx, "", &dev, msg, sizeof(msg)))) {
		fprintf(stderr, "dirstore-demo: %s\n", msg);
		ops->destroy(ctx);   /* still ours: the device was not made */
		wbc_cache_close(cache);
		return 1;
	}
	unsigned char *buf = malloc(CHUNK);
	if (!buf) {
		fprintf(stderr, "dirstore-demo: out of memory\n");
		wbc_cache_close(cache);
		return 1;
	}
	uint64_t per_file = (uint64_t)mib * CHUNK / FILES;
	double t0 = now_s();
	for (int i = 0; i < FILES && !err; i++) {
		char name[32];
		snprintf(name, sizeof(name), "file%d", i);
		wbc_file *f;
		if ((err = wbc_file_open(dev, name, WBC_O_CREAT | WBC_O_TRUNC, &f)))
			break;
		for (uint64_t off = 0; off < per_file && !err; off += CHUNK) {
			size_t len = per_file - off < CHUNK ? (size_t)(per_file - off) : CHUNK;
			for (size_t k = 0; k < len; k++)
				buf[k] = pattern(i, off + k);
			ssize_t w = wbc_pwrite(f, buf, len, off);
			if (w != (ssize_t)len)
				err = w < 0 ? (int)w : -EIO;
		}
		int cerr = wbc_file_close(f);
		err = err ? err : cerr;
	}
	if (!err)
		err = wbc_cache_sync(cache);
	double secs = now_s() - t0;
	struct dirstore_stats st;
	dirstore_stats(ctx, &st);
	int cerr = wbc_cache_close(cache);   /* destroys the backend */
	err = err ? err : cerr;
	if (err) {
		fprintf(stderr, "dirstore-demo: %s\n", wbc_strerror(err));
		free(buf);
		return 1;
	}
	/* what reached the directory */
	for (int i = 0; i < FILES; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/file%d", argv[1], i);
		int fd = open(path, O_RDONLY);
		uint64_t off = 0;
		ssize_t n;
		while (fd >= 0 && (n = read(fd, buf, CHUNK)) > 0) {
			for (ssize_t k = 0; k < n; k++)
				if (buf[k] != pattern(i, off + (uint64_t)k)) {
					fprintf(stderr, "dirstore-demo: %s differs at %llu\n", path,
						(unsigned long long)(off + (uint64_t)k));
					close(fd);
					free(buf);
					return 1;
				}
			off += (uint64_t)n;
		}
		if (fd < 0 || off != per_file) {
			fprintf(stderr, "dirstore-demo: %s: %llu bytes, %llu expected\n", path,
				(unsigned long long)off, (unsigned long long)per_file);
			if (fd >= 0)
				close(fd);
			free(buf);
			return 1;
		}
		close(fd);
	}
	free(buf);
	printf("dirstore-demo: %lu MiB in %.3f s: %.1f MB/s (%llu batches, %llu I/Os, %llu flushes)\n",
	       mib, secs, (double)mib * CHUNK / secs / 1e6, st.batches, st.ios, st.flushes);
	return 0;
}
