/* Device spec parsing: every backend's options and the per-device
 * tunables; bad input gets -EINVAL and a message naming the problem. */
#include "testutil.h"
#include "wbcache_backend.h"

#include <locale.h>

static void no_destroy(void *ctx) { (void)ctx; }   /* the mem device's */

/* Durations: plain decimals, the point whatever the locale. */
static void parse_times(void)
{
	double t;
	CHECK_EQ(wbc_parse_time("0.5", &t), 0);
	CHECK(t == 0.5);
	CHECK_EQ(wbc_parse_time(".5s", &t), 0);
	CHECK(t == 0.5);
	CHECK_EQ(wbc_parse_time("3.", &t), 0);
	CHECK(t == 3);
	CHECK_EQ(wbc_parse_time("0.1", &t), 0);
	CHECK(t == 0.1);
	CHECK_EQ(wbc_parse_time("250ms", &t), 0);
	CHECK(t == 0.25);
	CHECK_EQ(wbc_parse_time("100us", &t), 0);
	CHECK(t == 100 / 1e6);
	/* leading zeros of a fraction are not its digits */
	CHECK_EQ(wbc_parse_time("0.000000000000000001", &t), 0);
	CHECK(t > 0.99e-18 && t < 1.01e-18);
	/* strtod's other forms were taken: 1e3 as 1000 s */
	const char *bad[] = { "1e3", "1E-3", "1e3ms", ".", "", "-1", "+1", " 1", "0x10", "1.2.3",
			      "inf", "nan", "1,5", "5 s", "5m" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (wbc_parse_time(bad[i], &t) != -EINVAL) {
			fprintf(stderr, "wbc_parse_time(\"%s\") taken: %g\n", bad[i], t);
			exit(1);
		}
	/* under a locale whose decimal point is a comma (strtod read "0.5"
	 * as 0 there, and refused it) */
	char dir[] = "/tmp/wbc-locale-XXXXXX", cmd[300], path[300];
	CHECK(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1",
		 dir);
	int rc = system(cmd);
	snprintf(path, sizeof(path), "%s/de_DE.UTF-8", dir);
	setenv("LOCPATH", dir, 1);
	if (access(path, F_OK) || !setlocale(LC_NUMERIC, "de_DE.UTF-8")) {
		printf("    a comma locale: not checked (localedef: %d)\n", rc);
	} else {
		CHECK(strtod("0.5", NULL) == 0);   /* the comma locale is in effect */
		CHECK_EQ(wbc_parse_time("0.5", &t), 0);
		CHECK(t == 0.5);
		struct wbc_config cfg = t_config(1 << 20, 4096);
		wbc_cache *c;
		wbc_dev *d;
		char msg[256] = "";
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add_msg(c, "model:errp=0.5,retry_timeout=0.25", &d, msg, sizeof(msg)), 0);
		CHECK_EQ(wbc_cache_close(c), 0);
		printf("    a comma locale: 0.5 read as 0.5\n");
		CHECK(setlocale(LC_NUMERIC, "C"));
	}
	unsetenv("LOCPATH");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
}

int main(void)
{
	parse_times();
	struct wbc_config cfg = t_config(1 << 20, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	const char *good[] = {
		"mem", "model", "model:bw=200M", "model:bw=200M/s", "model:bw=200M,lat=1ms,qd=32",
		"model:bw=1G,iops=1000,lat=250us,max_io=256K",
		"model:bw=50M,sched=5s@10%;8s@100%", "model:err=1M+4K", "model:errp=0.01,seed=7",
		"model:stall=2s+500ms", "mem,min_ratio=10", "mem,max_ratio=50,max_bytes=1M",
		"model:bw=10M,strict_limit=1", "model:bw=10M,strict_limit=1,min_ratio=5,lat=1ms",
		/* a tunable is an option like the others, first or not */
		"model:min_ratio=5", "model:on_error=drop,bw=1M", "model:discard=1,min_ratio=5",
		"model,max_ratio=50", "model:", "mem,on_error=drop",
		"model:errp=1,retry_timeout=0.5", "mem,retry_timeout=250ms", "model:retry_timeout=0",
		"model:errn=3", "mem,max_bytes=8K,strict_limit=1", "mem,max_ratio=4,strict_limit=1",
		"mem,max_ratio=1",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		wbc_dev *d;
		char msg[256];
		int e = wbc_dev_add_msg(c, good[i], &d, msg, sizeof(msg));
		if (e) {
			fprintf(stderr, "'%s' refused: %s\n", good[i], msg);
			return 1;
		}
	}
	struct { const char *spec, *word; } bad[] = {
		{ "model:bw=fast", "bw" }, { "model:bw=/s", "bw" }, { "model:bw=1M/m", "bw" },
		{ "model:lat=3x", "lat" }, { "model:qd=0", "qd" },
		{ "model:sched=5s", "sched" }, { "model:sched=5s@", "sched" },
		{ "model:sched=8s@10%;5s@20%", "sched" }, { "model:err=5", "err" },
		{ "model:err=1M+0", "err" }, { "model:errp=2", "errp" }, { "model:stall=5s", "stall" },
		/* a stall of no time (as err=1M+0: taken, a fault that never
		 * came); a schedule's empty point (skipped unsaid) */
		{ "model:stall=1s+0", "stall" }, { "model:stall=0+0ms", "stall" },
		{ "model:sched=5s@10%;", "sched" }, { "model:sched=;5s@10%", "sched" },
		{ "model:sched=5s@10%;;8s@100%", "sched" },
		/* a schedule scales bw=: of an unlimited one, nothing (taken,
		 * and the device never slowed) */
		{ "model:sched=5s@10%", "sched= scales bw=" },
		{ "model:bw=0,lat=1ms,sched=0s@1%", "sched= scales bw=" },
		{ "model:bogus=1", "bogus" }, { "model:bw", "bw" }, { "mem,min_ratio=101", "min_ratio" },
		{ "mem,max_ratio=0", "max_ratio" },
		{ "mem,min_ratio=50,max_ratio=20", "min_ratio=50 above max_ratio=20" },
		{ "mem,strict_limit=2", "strict_limit" },
		{ "mem,min_ratio=60,max_ratio=50", "min_ratio" }, { "mem,max_bytes=lots", "max_bytes" },
		/* a device's own cap under two pages (each page written paused) */
		{ "mem,max_bytes=1", "max_bytes=1: must be at least two pages" },
		{ "model:max_bytes=8191,strict_limit=1", "two pages" },
		{ "mem,max_ratio=3,strict_limit=1", "max_ratio=3 with strict_limit=1" },
		{ "modelx", "modelx" },
		/* the same tunable, bad, wherever it stands: the same message */
		{ "model:min_ratio=500", "min_ratio=500" },
		{ "model:discard=0,min_ratio=500", "min_ratio=500" },
		{ "mem,min_ratio=500", "min_ratio=500" }, { "model:on_error=never", "on_error" },
		{ "model:min_ratio=5,bogus=1", "bogus" }, { "mem,,min_ratio=1", "mem," },
		{ "mem,retry_timeout=-1", "retry_timeout" }, { "mem,qd=4", "qd=4" }, { "model:retry_timeout=soon", "retry_timeout" },
		{ "model:errn=x", "errn" },
		/* every option named, once (an empty one was skipped, a
		 * repeated one's last value won) */
		{ "model:bw=1M,", "empty option" }, { "model:,bw=1M", "empty option" },
		{ "model:,", "empty option" }, { "dir:/nonexistent,qd=4,", "empty option" },
		{ "stack:0/z,", "empty option" }, { "mem,min_ratio=5,min_ratio=6", "'min_ratio' given twice" },
		{ "model:bw=1M,lat=1ms,bw=2M", "'bw' given twice" },
		{ "file:/nonexistent,qd=1,qd=2", "'qd' given twice" },
		/* a device number is digits (" 0" and "+0" were taken as 0, and
		 * " -1" named device 18446744073709551615) */
		{ "stack:+0/y", "expected stack:ID" }, { "stack: 0/y", "expected stack:ID" },
		{ "stack: -1/y", "expected stack:ID" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		wbc_dev *d = NULL;
		char msg[256] = "";
		int e = wbc_dev_add_msg(c, bad[i].spec, &d, msg, sizeof(msg));
		if (e != -EINVAL || !strstr(msg, bad[i].word)) {
			fprintf(stderr, "'%s': %d, message '%s' (should name '%s')\n", bad[i].spec, e,
				msg, bad[i].word);
			return 1;
		}
	}
	/* the reason before a long spec: a 256-byte message keeps it (the
	 * URI came first, and pushed it off the end) */
	{
		char spec[600], msg[256] = "";
		wbc_dev *d = NULL;
		snprintf(spec, sizeof(spec), "nbd://localhost/%0300d?frob=1", 0);
		CHECK_EQ(wbc_dev_add_msg(c, spec, &d, msg, sizeof(msg)), -EINVAL);
		printf("a long URI: %s\n", msg);
		CHECK(strstr(msg, "unknown URI parameter 'frob'"));
	}
	/* a reason is one line: the control characters of the spec it
	 * quotes are '?' (a newline in a spec broke it in two, an escape
	 * reached the terminal) */
	{
		const char *ctl[] = { "model:bw=1\nM", "file:/nonexistent/\nx",
				      "mem,fr\033[2Job=1", "nbd://h/\r?frob=1" };
		for (size_t i = 0; i < sizeof(ctl) / sizeof(*ctl); i++) {
			char msg[256] = "";
			wbc_dev *d = NULL;
			CHECK(wbc_dev_add_msg(c, ctl[i], &d, msg, sizeof(msg)) < 0);
			CHECK(*msg);
			for (const char *p = msg; *p; p++)
				if ((unsigned char)*p < 0x20 || *p == 0x7f) {
					fprintf(stderr, "'%s': control character %d in '%s'\n", ctl[i],
						*p, msg);
					return 1;
				}
			CHECK(strchr(msg, '?'));
		}
		/* ... and wbc_rados_break_lock's (its conf= path quoted;
		 * no cluster needed: the conf cannot be read) */
		char msg[256] = "";
		CHECK(wbc_rados_break_lock("rados:pool,conf=/nonexistent/\nx", "n", msg,
					   sizeof(msg)) < 0);
		CHECK(*msg);
		for (const char *p = msg; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f) {
				fprintf(stderr, "rados-unlock: control character %d in '%s'\n", *p,
					msg);
				return 1;
			}
		CHECK(strchr(msg, '?'));
	}
	CHECK_EQ(wbc_cache_close(c), 0);

	/* a first option that is a tunable takes effect: min_ratio=80
	 * reserves 80% of the dirty threshold for the device (without it,
	 * one of two new devices has half) */
	const char *first[] = { "model:min_ratio=80", "model:bw=1G,min_ratio=80", "mem,min_ratio=80" };
	for (size_t i = 0; i < sizeof(first) / sizeof(*first); i++) {
		wbc_dev *d, *other;
		struct wbc_stats st;
		struct wbc_dev_stats ds;
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add(c, first[i], &d), 0);
		CHECK_EQ(wbc_dev_add(c, "mem", &other), 0);   /* without a reserve */
		wbc_stats(c, &st);
		wbc_dev_stats(d, &ds);
		CHECK(ds.wb_thresh_bytes >= st.thresh_bytes * 8 / 10 - st.page_size);
		CHECK_EQ(wbc_cache_close(c), 0);
	}
	/* the devices' min_ratio add up to 100 at most, as the kernel's;
	 * a refused add reserves nothing */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *d60, *d50, *d40;
	char msg[256] = "";
	CHECK_EQ(wbc_dev_add(c, "mem,min_ratio=60", &d60), 0);
	CHECK_EQ(wbc_dev_add_msg(c, "mem,min_ratio=50", &d50, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "over 100"));
	CHECK_EQ(wbc_dev_add(c, "mem,min_ratio=40", &d40), 0);
	CHECK_EQ(wbc_dev_add_msg(c, "mem,min_ratio=1", &d50, msg, sizeof(msg)), -EINVAL);
	/* refused before its backend is made, as a bad tunable is: no
	 * image file made, no lower file created on device 0 (both were) */
	{
		char *dir = t_mkdtemp(), spec[600], path[600];
		snprintf(spec, sizeof(spec), "file:%s/img,min_ratio=1", dir);
		msg[0] = 0;
		CHECK_EQ(wbc_dev_add_msg(c, spec, &d50, msg, sizeof(msg)), -EINVAL);
		CHECK(strstr(msg, "over 100"));
		snprintf(path, sizeof(path), "%s/img", dir);
		CHECK(access(path, F_OK) && errno == ENOENT);
		msg[0] = 0;
		CHECK_EQ(wbc_dev_add_msg(c, "stack:0/lower,min_ratio=1", &d50, msg, sizeof(msg)),
			 -EINVAL);
		CHECK(strstr(msg, "over 100"));
		wbc_file *lf;
		CHECK_EQ(wbc_file_open(d60, "lower", 0, &lf), -ENOENT);
		t_rmdir(dir);
	}
	CHECK_EQ(wbc_cache_close(c), 0);

	/* a backend of the caller's: its options by the same rules */
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	wbc_dev *inner, *d;
	const struct wbc_backend_ops *mops;
	CHECK_EQ(wbc_dev_add(c, "mem", &inner), 0);
	void *ctx = wbc_dev_backend(inner, &mops);
	static struct wbc_backend_ops wrap;
	wrap = *mops;
	wrap.destroy = no_destroy;
	struct { const char *opts, *word; } bopts[] = {
		{ "min_ratio=1,", "empty option" }, { ",min_ratio=1", "empty option" },
		{ "min_ratio=1,min_ratio=2", "'min_ratio' given twice" },
	};
	for (size_t i = 0; i < sizeof(bopts) / sizeof(*bopts); i++) {
		msg[0] = 0;
		int e = wbc_dev_add_backend_msg(c, &wrap, ctx, bopts[i].opts, &d, msg, sizeof(msg));
		if (e != -EINVAL || !strstr(msg, bopts[i].word)) {
			fprintf(stderr, "backend options '%s': %d, message '%s'\n", bopts[i].opts, e, msg);
			return 1;
		}
	}
	CHECK_EQ(wbc_dev_add_backend_msg(c, &wrap, ctx, "min_ratio=1", &d, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("spec: ok\n");
	return 0;
}
