/*
 * wbcache command-line tool.
 *
 *   wbcache run [options]     stream writes through the engine (see --help)
 *   wbcache --help | --version
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wbcache.h"

int wbc_parse_size(const char *s, uint64_t *out);   /* src/spec.c */

#define DEFAULT_DIR "/var/tmp/wbcache"

static void usage(FILE *out)
{
	fprintf(out,
"usage: wbcache COMMAND [options]\n"
"\n"
"commands:\n"
"  run        stream writes through the engine to a backend, fsync, report\n"
"\n"
"options of run:\n"
"  --dir DIR          data directory (default $WBCACHE_DIR or " DEFAULT_DIR ")\n"
"  --dev SPEC         device instead of dir:DIR (mem, file:PATH, dir:PATH[,qd=N,max_io=SIZE,direct=0])\n"
"  --size SIZE        bytes to write (default 1G)\n"
"  --bs SIZE          bytes per write call (default 1M)\n"
"  --mem SIZE         cache memory budget (default 256M)\n"
"  --page-size SIZE   cache page size (default 4K)\n"
"  --dirty-ratio N, --dirty-background-ratio N, --dirty-bytes SIZE,\n"
"  --dirty-background-bytes SIZE, --dirty-expire-centisecs N,\n"
"  --dirty-writeback-centisecs N      the kernel's tunables, same meaning\n"
"  --keep             leave the written file in place\n"
"\n"
"  --help, --version\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_u32(const char *opt, const char *s, uint32_t max, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max) {
		fprintf(stderr, "wbcache: bad value '%s' for %s (0..%u)\n", s, opt, max);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int parse_sz(const char *opt, const char *s, uint64_t *out)
{
	if (wbc_parse_size(s, out)) {
		fprintf(stderr, "wbcache: bad size '%s' for %s (e.g. 4096, 64K, 1M, 2G)\n", s, opt);
		return -1;
	}
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	enum { O_DIR = 256, O_DEV, O_SIZE, O_BS, O_MEM, O_PS, O_DR, O_DBR, O_DB, O_DBB,
	       O_EXP, O_WB, O_KEEP, O_HELP };
	static const struct option opts[] = {
		{ "dir", required_argument, 0, O_DIR },
		{ "dev", required_argument, 0, O_DEV },
		{ "size", required_argument, 0, O_SIZE },
		{ "bs", required_argument, 0, O_BS },
		{ "mem", required_argument, 0, O_MEM },
		{ "page-size", required_argument, 0, O_PS },
		{ "dirty-ratio", required_argument, 0, O_DR },
		{ "dirty-background-ratio", required_argument, 0, O_DBR },
		{ "dirty-bytes", required_argument, 0, O_DB },
		{ "dirty-background-bytes", required_argument, 0, O_DBB },
		{ "dirty-expire-centisecs", required_argument, 0, O_EXP },
		{ "dirty-writeback-centisecs", required_argument, 0, O_WB },
		{ "keep", no_argument, 0, O_KEEP },
		{ "help", no_argument, 0, O_HELP },
		{ 0, 0, 0, 0 },
	};
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 256ull << 20;
	const char *dir = getenv("WBCACHE_DIR");
	if (!dir || !*dir)
		dir = DEFAULT_DIR;
	const char *spec = NULL;
	uint64_t size = 1ull << 30, bs = 1ull << 20, u64;
	bool keep = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case O_DIR: dir = optarg; break;
		case O_DEV: spec = optarg; break;
		case O_SIZE: bad = parse_sz("--size", optarg, &size); break;
		case O_BS: bad = parse_sz("--bs", optarg, &bs); break;
		case O_MEM: bad = parse_sz("--mem", optarg, &cfg.mem_bytes); break;
		case O_PS:
			bad = parse_sz("--page-size", optarg, &u64);
			if (!bad && u64 > UINT32_MAX) {
				fprintf(stderr, "wbcache: --page-size too large\n");
				bad = -1;
			}
			cfg.page_size = (uint32_t)u64;
			break;
		case O_DR: bad = parse_u32("--dirty-ratio", optarg, 100, &cfg.dirty_ratio); break;
		case O_DBR: bad = parse_u32("--dirty-background-ratio", optarg, 100, &cfg.dirty_background_ratio); break;
		case O_DB: bad = parse_sz("--dirty-bytes", optarg, &cfg.dirty_bytes); break;
		case O_DBB: bad = parse_sz("--dirty-background-bytes", optarg, &cfg.dirty_background_bytes); break;
		case O_EXP: bad = parse_u32("--dirty-expire-centisecs", optarg, UINT32_MAX, &cfg.dirty_expire_centisecs); break;
		case O_WB: bad = parse_u32("--dirty-writeback-centisecs", optarg, UINT32_MAX, &cfg.dirty_writeback_centisecs); break;
		case O_KEEP: keep = true; break;
		case O_HELP: usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "wbcache: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!bs || bs > (1ull << 30)) {
		fprintf(stderr, "wbcache: --bs must be 1 .. 1G\n");
		return 2;
	}

	char specbuf[4096];
	if (!spec) {
		if (mkdir(dir, 0755) && errno != EEXIST) {
			fprintf(stderr, "wbcache: cannot create %s: %s\n", dir, strerror(errno));
			return 1;
		}
		snprintf(specbuf, sizeof(specbuf), "dir:%s", dir);
		spec = specbuf;
	}

	wbc_cache *cache;
	int err = wbc_cache_open(&cfg, &cache);
	if (err) {
		fprintf(stderr, "wbcache: bad cache configuration: %s (page size a power of two "
			"512..1M, at least 16 pages, ratios 0..100)\n", wbc_strerror(err));
		return 2;
	}
	char msg[256];
	wbc_dev *dev;
	err = wbc_dev_add_msg(cache, spec, &dev, msg, sizeof(msg));
	if (err) {
		fprintf(stderr, "wbcache: %s\n", msg[0] ? msg : wbc_strerror(err));
		wbc_cache_close(cache);
		return 2;
	}
	bool single = !strncmp(spec, "file:", 5);
	char name[64];
	snprintf(name, sizeof(name), single ? "" : "stream.%d", (int)getpid());
	wbc_file *f;
	err = wbc_file_open(dev, name, WBC_O_CREAT | WBC_O_TRUNC, &f);
	if (err) {
		fprintf(stderr, "wbcache: cannot open %s on %s: %s\n", name, spec, wbc_strerror(err));
		wbc_cache_close(cache);
		return 1;
	}
	char *buf = aligned_alloc(4096, (bs + 4095) / 4096 * 4096);
	if (!buf) {
		fprintf(stderr, "wbcache: out of memory for a %llu-byte buffer\n", (unsigned long long)bs);
		return 1;
	}
	for (uint64_t i = 0; i < bs; i++)
		buf[i] = (char)(i * 131 + 7);

	printf("wbcache run: %llu MiB in %llu KiB writes to %s (cache %llu MiB)\n",
	       (unsigned long long)(size >> 20), (unsigned long long)(bs >> 10), spec,
	       (unsigned long long)(cfg.mem_bytes >> 20));
	double t0 = now_s();
	uint64_t done = 0;
	while (done < size && !err) {
		size_t n = (size_t)(size - done < bs ? size - done : bs);
		ssize_t r = wbc_pwrite(f, buf, n, done);
		if (r < 0)
			err = (int)r;
		else
			done += (uint64_t)r;
	}
	double t1 = now_s();
	if (!err)
		err = wbc_fsync(f);
	double t2 = now_s();
	struct wbc_stats st;
	wbc_stats(cache, &st);
	if (err)
		fprintf(stderr, "wbcache: write failed: %s\n", wbc_strerror(err));
	double total = t2 - t1 + (t1 - t0);
	printf("wrote %.2f GiB in %.2f s (writes %.2f s, fsync %.2f s): %.0f MB/s\n",
	       (double)done / (1 << 30), total, t1 - t0, t2 - t1, (double)done / total / 1e6);
	printf("written back %.2f GiB in %llu I/Os (avg %.0f KiB), dirty-limit waits %llu, "
	       "page waits %llu, device bw estimate %.0f MB/s\n",
	       (double)st.written_back_bytes / (1 << 30), (unsigned long long)st.write_ios,
	       st.write_ios ? (double)st.written_back_bytes / (double)st.write_ios / 1024 : 0.0,
	       (unsigned long long)st.dirty_waits, (unsigned long long)st.page_waits,
	       (double)st.write_bw / 1e6);
	free(buf);
	wbc_file_close(f);
	int cerr = wbc_cache_close(cache);
	if (cerr && !err) {
		fprintf(stderr, "wbcache: close failed: %s\n", wbc_strerror(cerr));
		err = cerr;
	}
	if (!keep && !single) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		unlink(path);
	}
	return err ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("wbcache %s\n", WBCACHE_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	fprintf(stderr, "wbcache: unknown command '%s' (try --help)\n", argv[1]);
	return 2;
}
