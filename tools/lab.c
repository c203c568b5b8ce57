/*
 * wbcache lab: five historical Linux writeback problems, each replayed
 * with the old policy and with today's, side by side.
 *
 * Each experiment is a handful of `wbcache run` invocations that differ
 * only in the policy switches of their devices (dirty_list=, file_lock=,
 * chunk=, throttle=, stack_throttle=) or in whether writeback runs.  The
 * lab runs each as a child process of this program (so every run starts
 * from a fresh cache, and the exact command is printed and can be run
 * alone), reads back the run's --json figures and --trace timeline, prints
 * a table (the thread's figures, old, new, old/new beside the thread's
 * ratio, whether the effect reproduced) and draws one SVG per experiment
 * with the runs' timelines in one chart.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"
#include "svg.h"

extern char **environ;

#define MAX_RUNS 4   /* runs of one experiment */
#define MAX_ARGS 96

/* A run's figures, from its --json file. */
struct figs {
	double secs, bytes, mb_per_s, ops_per_s, reads_per_s;
	double list_lock_max_us, list_lock_holds, cpu_sys_s, cpu_user_s;
	double pause_p99_ms, dirty_mean_mib;
	double dev0_written;         /* bytes the first device wrote back */
	bool unfinished;             /* stopped by its --deadline */
};

/* A run's timeline, from its --trace file. */
struct timeline {
	double *t, *tput, *ops, *dirty, *lock;
	size_t n;
};

struct lab_run {
	const char *label;           /* "old", "new", "old, writeback off" ... */
	const char *color, *dash;
	bool plot;                   /* drawn in the chart */
	int tput_dev;                /* the device whose throughput the chart
					shows; -1: all devices' together */
	double deadline;             /* its --deadline (0: the lab's default) */
	bool may_stop;               /* stopped at its --deadline, it is a bound
					its experiment's judge uses; otherwise
					the run failed (its figures are not of
					the run asked for) */
	char *argv[MAX_ARGS];
	int argc;
	bool overflow;               /* an argument did not fit: not run */
	char json[512], trace[512], log[512];
	int status;                  /* the run's exit status; -1 not run */
	struct figs f;
	struct timeline tl;
};

struct exp_result {
	double old_v, new_v;         /* the headline figure, old and new */
	bool old_more, new_more;     /* a lower bound: the run did not finish */
	const char *unit;
	bool higher_better;
	bool reproduced;             /* the goal's direction and size held */
	char extra[512];             /* more lines for the table */
};

struct experiment {
	const char *name;
	const char *title;
	const char *story;           /* --list */
	/* the thread's own figures and ratio */
	const char *thread_old, *thread_new;
	double thread_ratio;
	const char *goal;
	const char *chart_rate;      /* "MB/s" or "ops/s": the chart's top panel */
	void (*build)(struct lab_run *runs, int *nruns, bool quick);
	void (*judge)(const struct lab_run *runs, int nruns, struct exp_result *r);
};

/* ------------------------------------------------------------------ */
/* building runs                                                        */

static void arg(struct lab_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct lab_run *r, const char *fmt, ...)
{
	if (r->argc >= MAX_ARGS - 1) {   /* the last one is the NULL */
		r->overflow = true;
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (s)
		r->argv[r->argc++] = s;
	else
		r->overflow = true;
}

static struct lab_run *new_run(struct lab_run *runs, int *n, const char *label, const char *color,
			       const char *dash, const char *workload)
{
	struct lab_run *r = &runs[(*n)++];
	memset(r, 0, sizeof(*r));
	r->label = label;
	r->color = color;
	r->dash = dash;
	r->plot = true;
	r->tput_dev = -1;
	r->status = -1;
	arg(r, "wbcache");
	arg(r, "run");
	arg(r, "%s", workload);
	return r;
}

#define OLD_COLOR "#d62728"
#define NEW_COLOR "#1f77b4"
#define SOLID ""
#define DASHED " stroke-dasharray='5,3'"

/* 1. 2014: fs_mark's creates and a dirty-inode list walked under one lock */
static void build_dirty_list(struct lab_run *runs, int *n, bool quick)
{
	static const char *pol[2] = { "list", "buckets" };
	static const char *lab[2][2] = { { "old, writeback off", "old, writeback running" },
					 { "new, writeback off", "new, writeback running" } };
	for (int p = 0; p < 2; p++) {
		for (int wb = 0; wb < 2; wb++) {
			struct lab_run *r = new_run(runs, n, lab[p][wb], p ? NEW_COLOR : OLD_COLOR,
						    wb ? SOLID : DASHED, "fsmark");
			arg(r, "--dev");
			arg(r, "model:bw=2G,discard=1,dirty_list=%s", pol[p]);
			arg(r, "--threads");
			arg(r, "2");
			arg(r, "--files");
			arg(r, "100000000");
			arg(r, "--time");
			arg(r, "%s", quick ? "1" : "5");
			/* 1 KiB files in 1 KiB pages: with writeback off every
			 * file of the run stays in the cache, and this many fit */
			arg(r, "--page-size");
			arg(r, "1K");
			arg(r, "--file-size");
			arg(r, "1K");
			arg(r, "--mem");
			arg(r, "%s", quick ? "1G" : "6G");
			arg(r, "--dirty-ratio");
			arg(r, "60");
			arg(r, "--dirty-background-ratio");
			arg(r, "%s", wb ? "1" : "59");
			arg(r, "--dirty-expire-centisecs");
			arg(r, "%s", wb ? "20" : "360000");
			arg(r, "--dirty-writeback-centisecs");
			arg(r, "%s", wb ? "10" : "0");
		}
	}
}

static void judge_dirty_list(const struct lab_run *r, int n, struct exp_result *x)
{
	(void)n;
	/* runs: old off, old on, new off, new on */
	double old_loss = 1 - r[1].f.ops_per_s / fmax(r[0].f.ops_per_s, 1);
	double new_loss = 1 - r[3].f.ops_per_s / fmax(r[2].f.ops_per_s, 1);
	x->old_v = r[1].f.ops_per_s;
	x->new_v = r[3].f.ops_per_s;
	x->unit = "files/s";
	x->higher_better = true;
	x->reproduced = old_loss >= 0.20 && new_loss <= 0.10;
	snprintf(x->extra, sizeof(x->extra),
		 "create rate lost to writeback: old %.0f%% (%.0f -> %.0f files/s), new %.0f%% "
		 "(%.0f -> %.0f); reported: 30%% (40k -> 28k)\n"
		 "longest list-lock hold: old %.0f us, new %.0f us; system CPU: old %.2f s, new "
		 "%.2f s (writeback off: %.2f, %.2f)",
		 old_loss * 100, r[0].f.ops_per_s, r[1].f.ops_per_s, new_loss * 100,
		 r[2].f.ops_per_s, r[3].f.ops_per_s, r[1].f.list_lock_max_us,
		 r[3].f.list_lock_max_us, r[1].f.cpu_sys_s, r[3].f.cpu_sys_s, r[0].f.cpu_sys_s,
		 r[2].f.cpu_sys_s);
}

/* 2. 2017: NFS, a per-inode lock across writes and writeback, and a
 * fixed limit on writes in flight */
static void build_remote(struct lab_run *runs, int *n, bool quick)
{
	for (int p = 0; p < 2; p++) {
		struct lab_run *r = new_run(runs, n, p ? "new: per-page claims, the full queue"
						      : "old: per-file lock, fixed in-flight limit",
					    p ? NEW_COLOR : OLD_COLOR, SOLID, "randrw");
		/* a server 1 ms away whose writes are sent (copied) at
		 * submission, as an RPC's are; the files stay cached, as on
		 * the NFS client */
		arg(r, "--dev");
		arg(r, "model:lat=1ms,qd=64,send=1,%s",
		    p ? "file_lock=page" : "file_lock=file,max_inflight=16");
		arg(r, "--threads");
		arg(r, "4");
		arg(r, "--bs");
		arg(r, "8K");
		arg(r, "--rwmix");
		arg(r, "30");
		arg(r, "--file-size");
		arg(r, "32M");
		arg(r, "--mem");
		arg(r, "512M");
		/* writeback all the time, as an NFS client's */
		arg(r, "--dirty-expire-centisecs");
		arg(r, "100");
		arg(r, "--dirty-writeback-centisecs");
		arg(r, "10");
		arg(r, "--time");
		arg(r, "%s", quick ? "3" : "20");
	}
}

static void judge_remote(const struct lab_run *r, int n, struct exp_result *x)
{
	(void)n;
	x->old_v = r[0].f.ops_per_s + r[0].f.reads_per_s;
	x->new_v = r[1].f.ops_per_s + r[1].f.reads_per_s;
	x->unit = "IOPS";
	x->higher_better = true;
	x->reproduced = x->new_v > 0 && x->old_v <= 0.8 * x->new_v;
	snprintf(x->extra, sizeof(x->extra),
		 "reads/writes per second: old %.0f/%.0f, new %.0f/%.0f; reported: 76k/33k vs "
		 "105k/45k", r[0].f.reads_per_s, r[0].f.ops_per_s, r[1].f.reads_per_s,
		 r[1].f.ops_per_s);
}

/* 3. 2021: a loop device throttled a second time on the dirty limit its
 * own pages filled.  The stacked device's workers write into the lower
 * device through its cache; throttled like any writer (global) they wait
 * on a limit the stacked device's own pages hold up.  Today's control
 * line passes a writer whose device holds little of its share, which
 * lets them through; the 2011 line (no such pass, flat 200 ms pauses)
 * shows the trouble, so the old policy runs on both. */
static void build_stacked(struct lab_run *runs, int *n, bool quick)
{
	static const char *const label[3] = { "old: stack_throttle=global, 2011 line",
					      "old: stack_throttle=global, today's line",
					      "new: stack_throttle=local" };
	static const char *const mode[3] = { "global", "global", "local" };
	static const char *const line[3] = { "2011", "current", "current" };
	static const char *const color[3] = { OLD_COLOR, "#ff7f0e", NEW_COLOR };
	for (int p = 0; p < 3; p++) {
		struct lab_run *r = new_run(runs, n, label[p], color[p], p == 1 ? DASHED : SOLID, "dd");
		r->tput_dev = 0;   /* what reaches the lower device */
		/* the old policy may take many minutes: it is given up on
		 * (and counted as at least this long) */
		r->deadline = quick ? 8 : 60;
		r->may_stop = true;   /* judge_stacked: a lower bound */
		arg(r, "--dev");
		arg(r, "model:bw=200M,discard=1,throttle=%s", line[p]);
		arg(r, "--dev");
		arg(r, "stack:0/img,stack_throttle=%s,throttle=%s", mode[p], line[p]);
		arg(r, "--threads");
		arg(r, "16");
		arg(r, "--size");
		arg(r, "%s", quick ? "256M" : "1G");
		arg(r, "--mem");
		arg(r, "64M");
	}
}

static void judge_stacked(const struct lab_run *r, int n, struct exp_result *x)
{
	(void)n;
	x->old_v = r[0].f.secs;
	x->old_more = r[0].f.unfinished;
	x->new_v = r[2].f.secs;
	x->new_more = r[2].f.unfinished;
	x->unit = "s";
	x->higher_better = false;
	x->reproduced = x->new_v > 0 && x->old_v >= 5 * x->new_v && !x->new_more;
	snprintf(x->extra, sizeof(x->extra), "a dd of 16 streams through the stacked device "
		 "(cache 64 MiB; the lower device: model:bw=200M): global on the 2011 line %s%.1f s "
		 "(%.1f MiB written), global on today's line %s%.1f s, local %s%.1f s; reported: 20 "
		 "minutes vs 12 seconds", r[0].f.unfinished ? "did not finish in " : "", r[0].f.secs,
		 r[0].f.bytes / 1048576, r[1].f.unfinished ? "did not finish in " : "",
		 r[1].f.secs, r[2].f.unfinished ? "did not finish in " : "", r[2].f.secs);
}

/* 4. 2011: the first IO-less throttle's areas on a 12-disk JBOD */
static void build_jbod(struct lab_run *runs, int *n, bool quick)
{
	static const char *pol[2] = { "2011", "current" };
	for (int p = 0; p < 2; p++) {
		struct lab_run *r = new_run(runs, n, p ? "new: today's control line"
						      : "old: 2011 max-pause and pass-good areas",
					    p ? NEW_COLOR : OLD_COLOR, SOLID, "dd");
		/* disks of 25 to 100 MiB/s (bw= is binary), a stream each */
		for (int d = 0; d < 12; d++) {
			arg(r, "--dev");
			arg(r, "model:bw=%dM,discard=1,throttle=%s", (d % 4 + 1) * 25, pol[p]);
		}
		arg(r, "--threads");
		arg(r, "12");
		arg(r, "--size");
		arg(r, "100G");
		arg(r, "--time");
		arg(r, "%s", quick ? "4" : "30");
		arg(r, "--mem");
		arg(r, "256M");
	}
}

static void judge_mbs(const struct lab_run *r, int n, struct exp_result *x, double goal)
{
	(void)n;
	x->old_v = r[0].f.mb_per_s;
	x->new_v = r[1].f.mb_per_s;
	x->unit = "MB/s";
	x->higher_better = true;
	x->reproduced = x->new_v > 0 && x->old_v * goal <= x->new_v;
}

static void judge_jbod(const struct lab_run *r, int n, struct exp_result *x)
{
	judge_mbs(r, n, x, 1.25);
	snprintf(x->extra, sizeof(x->extra), "writers' pauses p99: old %.0f ms, new %.0f ms; "
		 "dirty mean: old %.1f MiB, new %.1f MiB; reported: about 30%% of the array lost",
		 r[0].f.pause_p99_ms, r[1].f.pause_p99_ms, r[0].f.dirty_mean_mib,
		 r[1].f.dirty_mean_mib);
}

/* 5. 2009: MAX_WRITEBACK_PAGES, 4 MiB per file per pass, on a seeking disk */
static void build_chunk(struct lab_run *runs, int *n, bool quick)
{
	static const char *pol[2] = { "4M", "bw" };
	for (int p = 0; p < 2; p++) {
		struct lab_run *r = new_run(runs, n, p ? "new: chunk from measured bandwidth"
						      : "old: 4 MiB per file per pass",
					    p ? NEW_COLOR : OLD_COLOR, SOLID, "dd");
		arg(r, "--dev");
		arg(r, "model:bw=300M,seek=8ms,discard=1,chunk=%s", pol[p]);
		arg(r, "--threads");
		arg(r, "4");
		arg(r, "--size");
		arg(r, "%s", quick ? "1G" : "6G");
		/* dirty room for a bandwidth chunk per file */
		arg(r, "--mem");
		arg(r, "%s", quick ? "1G" : "2G");
	}
}

static void judge_chunk(const struct lab_run *r, int n, struct exp_result *x)
{
	judge_mbs(r, n, x, 1.5);
	snprintf(x->extra, sizeof(x->extra), "four streams onto one seeking disk (8 ms a seek, "
		 "300 MiB/s, 315 MB/s); reported: 313 MB/s vs 659 MB/s on XFS");
}

static const struct experiment experiments[] = {
	{ "dirty-list", "Dirty-inode list contention (2014)",
	  "16 fs_mark threads created 10 million 4 KiB files; writeback walked one dirty-inode\n"
	  "list under one lock, and the create rate fell from 40k to 28k files/s.  Old: one\n"
	  "list ordered by dirtying time, walked under the device's list lock, writers\n"
	  "appending under it (dirty_list=list).  New: lock-free inboxes and time buckets.",
	  "28k files/s", "40k files/s", 0.70,
	  "old loses >= 20% to writeback, new <= 10%", "ops/s", build_dirty_list, judge_dirty_list },
	{ "remote", "Writeback to a remote server (2017)",
	  "An NFS client's per-inode lock, taken by writers and by writeback, and a fixed\n"
	  "limit on writes to the server cost an fio 8 KiB 70/30 random read/write job 30% of\n"
	  "its IOPS.  Old: one lock per file across the write path and writeback submission,\n"
	  "a fixed in-flight limit (file_lock=file, max_inflight=16).  New: per-page claims\n"
	  "and the device's full queue (file_lock=page).  A model server 1 ms away (send=1).",
	  "76k/33k IOPS", "105k/45k IOPS", 0.72, "old >= 20% below new", "ops/s", build_remote,
	  judge_remote },
	{ "stacked", "Stacked devices (2021)",
	  "A loop device's writes into its backing file were throttled a second time, on the\n"
	  "dirty limit its own pages had filled: a test took 20 minutes instead of 12 seconds.\n"
	  "Old: the stacked device's workers throttled like any writer (stack_throttle=global),\n"
	  "on the 2011 control line and on today's.  New: against their own device's share\n"
	  "only (stack_throttle=local).",
	  "20 min", "12 s", 100, "old >= 5x slower", "MB/s", build_stacked, judge_stacked },
	{ "jbod", "Throttle areas on a JBOD (2011)",
	  "With 12 disks, the first IO-less throttle's max-pause area and pass-good area lost\n"
	  "about 30% of the array's throughput.  Old: those areas (throttle=2011).  New:\n"
	  "today's control line.  12 model devices of 25 to 100 MiB/s, a stream each.",
	  "70% of the array", "100%", 0.70, "old >= 20% below new", "MB/s", build_jbod, judge_jbod },
	{ "chunk", "Writeback chunk size (2009)",
	  "Writeback wrote at most 4 MiB of one file before moving to the next; streaming\n"
	  "several large files on XFS reached 313 MB/s where larger chunks reached 659 MB/s.\n"
	  "Old: a fixed 4 MiB chunk (chunk=4M).  New: the chunk from measured bandwidth.  A\n"
	  "model disk with a seek cost (seek=8ms), four streams.",
	  "313 MB/s", "659 MB/s", 0.47, "new >= 1.5x old", "MB/s", build_chunk, judge_chunk },
};
#define NR_EXP (sizeof(experiments) / sizeof(experiments[0]))

/* ------------------------------------------------------------------ */
/* running and reading back                                             */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0, len = 0;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			size_t ncap = cap ? cap * 2 : 65536;
			char *p = realloc(buf, ncap);
			if (!p)
				break;
			buf = p;
			cap = ncap;
		}
		size_t k = fread(buf + len, 1, cap - len - 1, f);
		if (!k)
			break;
		len += k;
	}
	fclose(f);
	if (buf)
		buf[len] = 0;
	return buf;
}

/* the first top-level-or-not number after "key": in a JSON text; the
 * run's figures are flat, and the totals come after the devices' */
static double json_num(const char *js, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	const char *p = NULL, *q = js;
	while ((q = strstr(q, pat))) {
		p = q;
		q += strlen(pat);
	}
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void read_figs(struct lab_run *r)
{
	char *js = slurp(r->json);
	if (!js)
		return;
	r->f.secs = json_num(js, "secs");
	r->f.bytes = json_num(js, "bytes");
	r->f.mb_per_s = json_num(js, "mb_per_s");
	r->f.ops_per_s = json_num(js, "ops_per_s");
	r->f.reads_per_s = json_num(js, "reads_per_s");
	r->f.list_lock_max_us = json_num(js, "list_lock_max_us");
	r->f.list_lock_holds = json_num(js, "list_lock_holds");
	r->f.cpu_sys_s = json_num(js, "cpu_sys_s");
	r->f.cpu_user_s = json_num(js, "cpu_user_s");
	r->f.pause_p99_ms = json_num(js, "pause_p99_ms");
	r->f.dirty_mean_mib = json_num(js, "dirty_mean_mib");
	r->f.unfinished = strstr(js, "\"finished\": false") != NULL;
	const char *d0 = strstr(js, "\"devices\": [");
	d0 = d0 ? strstr(d0, "\"written_bytes\": ") : NULL;
	r->f.dev0_written = d0 ? strtod(d0 + strlen("\"written_bytes\": "), NULL) : NAN;
	free(js);
}

static int col_of(char **names, int n, const char *want)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], want))
			return i;
	return -1;
}

static void read_trace(struct lab_run *r)
{
	char *txt = slurp(r->trace);
	if (!txt)
		return;
	char *save = NULL, *line = strtok_r(txt, "\n", &save);
	char *names[8 + 5 * RUN_MAX_DEVS + 4];
	int nc = 0;
	char *hs = NULL;
	for (char *c = line ? strtok_r(line, ",", &hs) : NULL; c && nc < (int)(sizeof(names) / sizeof(*names));
	     c = strtok_r(NULL, ",", &hs))
		names[nc++] = c;
	int ct = col_of(names, nc, "t_s"), cd = col_of(names, nc, "dirty_mib"),
	    cw = col_of(names, nc, "writeback_mib"), co = col_of(names, nc, "ops_per_s"),
	    cl = col_of(names, nc, "lock_max_us");
	int ctp[RUN_MAX_DEVS], ntp = 0;
	for (int d = 0; d < RUN_MAX_DEVS; d++) {
		char want[40];
		snprintf(want, sizeof(want), "dev%d_throughput_mbs", d);
		int c = col_of(names, nc, want);
		if (c >= 0 && (r->tput_dev < 0 || r->tput_dev == d))
			ctp[ntp++] = c;
	}
	size_t cap = 0;
	struct timeline *t = &r->tl;
	for (line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		double v[8 + 5 * RUN_MAX_DEVS + 4];
		int k = 0;
		char *vs = NULL;
		for (char *c = strtok_r(line, ",", &vs); c && k < nc; c = strtok_r(NULL, ",", &vs))
			v[k++] = strtod(c, NULL);
		if (k < nc)
			continue;
		if (t->n == cap) {
			cap = cap ? cap * 2 : 256;
			double **arrs[5] = { &t->t, &t->tput, &t->ops, &t->dirty, &t->lock };
			for (int a = 0; a < 5; a++) {
				double *p = realloc(*arrs[a], cap * sizeof(double));
				if (!p) {
					free(txt);
					return;
				}
				*arrs[a] = p;
			}
		}
		double tp = 0;
		for (int i = 0; i < ntp; i++)
			tp += v[ctp[i]];
		t->t[t->n] = ct >= 0 ? v[ct] : 0;
		t->tput[t->n] = tp;
		t->ops[t->n] = co >= 0 ? v[co] : 0;
		t->dirty[t->n] = (cd >= 0 ? v[cd] : 0) + (cw >= 0 ? v[cw] : 0);
		t->lock[t->n] = cl >= 0 ? v[cl] : 0;
		t->n++;
	}
	free(txt);
}

static void print_cmd(FILE *f, const struct lab_run *r)
{
	for (int i = 0; i < r->argc; i++)
		fprintf(f, "%s%s", i ? " " : "", r->argv[i]);
}

/*
 * SIGINT, SIGTERM, SIGHUP: the lab stops.  The run going on (a child,
 * which a kill of the lab alone left running up to its --deadline) is
 * sent SIGTERM: it stops as at its --time, writes back, removes its files
 * and exits; the lab waits for it, prints the table of what it has and
 * exits 128 + the signal.  The run is in a process group of its own, so
 * a terminal's ^C or hang-up reaches the lab alone (a second SIGINT
 * straight to the run would end it at once, its files left behind); the
 * lab sends SIGTERM, whatever it got.  (^Z stops the lab, not the run.)
 */
static volatile sig_atomic_t lab_sig, lab_child;

static void on_lab_signal(int sig)
{
	int saved = errno;
	lab_sig = sig;
	if (lab_child > 0)
		kill((pid_t)lab_child, SIGTERM);
	errno = saved;
}

static void lab_signals(void)
{
	struct sigaction sa = { .sa_handler = on_lab_signal };   /* no SA_RESTART: waitpid */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static int exec_run(struct lab_run *r, const char *self)
{
	if (r->overflow)   /* a run without all its arguments is not this run */
		return -E2BIG;
	/* the lab's signals held from before the spawn until lab_child is
	 * set: one that comes between is forwarded, not lost */
	sigset_t sigs, old;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, &old);
	if (lab_sig) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		return -EINTR;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, r->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	/* the run: the caller's signal mask, SIGPIPE as by default (the lab
	 * ignores it) */
	posix_spawnattr_t at;
	posix_spawnattr_init(&at);
	sigset_t dfl;
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGPIPE);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setsigmask(&at, &old);
	/* its own process group: a terminal's ^C or hang-up reaches the lab
	 * alone, which stops the run with SIGTERM (a second ^C straight to
	 * the run killed it with its files left) */
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
				      POSIX_SPAWN_SETPGROUP);
	r->argv[r->argc] = NULL;
	pid_t pid;
	int e = posix_spawn(&pid, self, &fa, &at, r->argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (!e)
		lab_child = pid;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (e)
		return -e;
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			lab_child = 0;
			return -errno;
		}
	}
	lab_child = 0;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return 0;
}

/* stdout still reaches its reader (a closed pipe: EPIPE, SIGPIPE being
 * ignored): the lab stops before its next run, none of which anyone
 * would see */
static int lab_out_errno;

static bool out_ok(void)
{
	errno = 0;
	if (!fflush(stdout) && !ferror(stdout))
		return true;
	lab_out_errno = errno ? errno : EIO;
	if (!lab_sig)
		lab_sig = -1;
	return false;
}

/* ------------------------------------------------------------------ */
/* the chart                                                            */

/* false, said, where the chart could not be written: the lab's failure,
 * as a run's output file is the run's (it said "chart: PATH" after
 * "cannot write PATH" and exited 0) */
static bool chart(const char *path, const struct experiment *e, const struct lab_run *runs, int n)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "wbcache lab: cannot write %s: %s\n", path, strerror(errno));
		return false;
	}
	bool ops = !strcmp(e->chart_rate, "ops/s");
	struct panel p[3] = { { 80, 40, 640, 170, 1, 1 }, { 80, 260, 640, 150, 1, 1 },
			      { 80, 460, 640, 150, 1, 1 } };
	for (int i = 0; i < n; i++) {
		const struct timeline *t = &runs[i].tl;
		if (!runs[i].plot)
			continue;
		for (size_t k = 0; k < t->n; k++) {
			for (int q = 0; q < 3; q++)
				p[q].tmax = fmax(p[q].tmax, t->t[k]);
			p[0].vmax = fmax(p[0].vmax, ops ? t->ops[k] : t->tput[k]);
			p[1].vmax = fmax(p[1].vmax, t->dirty[k]);
			p[2].vmax = fmax(p[2].vmax, t->lock[k]);
		}
	}
	for (int q = 0; q < 3; q++)
		p[q].vmax *= 1.1;
	/* the legend right of the panels: room for 44 characters (a run's
	 * label of 41, cut at 40 to fit 980 px, read "... in-flight limi") */
	svg_begin(f, 1060, 680, e->title);
	svg_axes(f, &p[0], ops ? "operations/s" : "MB/s written back");
	svg_axes(f, &p[1], "dirty + writeback, MiB");
	svg_axes(f, &p[2], "longest list-lock hold, us");
	double lx = p[0].x0 + p[0].w + 16, ly = p[0].y0 + 10;
	for (int i = 0; i < n; i++) {
		const struct lab_run *r = &runs[i];
		if (!r->plot || !r->tl.n)
			continue;
		svg_polyline(f, &p[0], r->tl.t, ops ? r->tl.ops : r->tl.tput, r->tl.n, r->color, r->dash);
		svg_polyline(f, &p[1], r->tl.t, r->tl.dirty, r->tl.n, r->color, r->dash);
		svg_polyline(f, &p[2], r->tl.t, r->tl.lock, r->tl.n, r->color, r->dash);
		char lab[80];
		snprintf(lab, sizeof(lab), "%.44s", r->label);
		svg_legend(f, lx, ly, r->color, r->dash, lab);
		ly += 18;
	}
	fprintf(f, "</svg>\n");
	errno = EIO;   /* a write that failed before (ferror) may leave none */
	if (ferror(f) | fclose(f)) {
		fprintf(stderr, "wbcache lab: cannot write %s: %s\n", path, strerror(errno));
		return false;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* the command                                                          */

static void lab_usage(FILE *out)
{
	fprintf(out,
"usage: wbcache lab [options] [NAME...|all]\n"
"\n"
"Replays historical Linux writeback problems with the old policy and with\n"
"today's, on model devices, and prints a table: the thread's figures, old,\n"
"new, old/new beside the thread's ratio, and whether the effect reproduced.\n"
"Each experiment also gets a chart (NAME.svg: throughput, dirty pages and\n"
"list-lock holds over time, old and new in one chart) and each run its\n"
"report (NAME-N.log), figures (NAME-N.json) and timeline (NAME-N.csv).\n"
"\n"
"experiments (default all; by name or number):\n");
	for (size_t i = 0; i < NR_EXP; i++)
		fprintf(out, "  %zu %-11s %s\n", i + 1, experiments[i].name, experiments[i].title);
	fprintf(out,
"\n"
"options:\n"
"  --quick      about 10 seconds an experiment instead of about a minute\n"
"  --out DIR    where the charts and the runs' files go (default wbcache-lab;\n"
"               made, with its parents, where missing)\n"
"  --list       each experiment's story and its runs' commands, without running\n");
}

static const struct experiment *find_exp(const char *name)
{
	for (size_t i = 0; i < NR_EXP; i++)
		if (!strcmp(experiments[i].name, name))
			return &experiments[i];
	char *end;
	long k = strtol(name, &end, 10);
	if (name[0] >= '1' && name[0] <= '9' && !*end && k >= 1 && k <= (long)NR_EXP)
		return &experiments[k - 1];
	return NULL;
}

static void free_runs(struct lab_run *runs, int n)
{
	for (int i = 0; i < n; i++) {
		for (int a = 0; a < runs[i].argc; a++)
			free(runs[i].argv[a]);
		free(runs[i].tl.t);
		free(runs[i].tl.tput);
		free(runs[i].tl.ops);
		free(runs[i].tl.dirty);
		free(runs[i].tl.lock);
	}
}

static const char *fmt_v(char *buf, size_t len, double v, bool more, const char *unit)
{
	const char *ge = more ? ">" : "";
	if (isnan(v))
		snprintf(buf, len, "-");
	else if (v >= 10000)
		snprintf(buf, len, "%s%.0fk %s", ge, v / 1000, unit);
	else if (v >= 100)
		snprintf(buf, len, "%s%.0f %s", ge, v, unit);
	else
		snprintf(buf, len, "%s%.2f %s", ge, v, unit);
	return buf;
}

/* A run's --deadline: its own, or the lab's (60 s with --quick, 300 s);
 * WBCACHE_LAB_DEADLINE=SECONDS replaces the lab's, for tests/lab.sh's
 * hung run (which otherwise waits a minute). */
static double run_deadline(const struct lab_run *r, bool quick)
{
	if (r->deadline > 0)
		return r->deadline;
	const char *e = getenv("WBCACHE_LAB_DEADLINE");
	char *end;
	double t = e ? strtod(e, &end) : 0;
	if (e && end != e && !*end && t > 0 && t < 1e6)
		return t;
	return quick ? 60 : 300;
}

int cmd_lab(int argc, char **argv)
{
	/* see out_ok() */
	signal(SIGPIPE, SIG_IGN);
	bool quick = false, list = false;
	const char *out = "wbcache-lab";
	const struct experiment *sel[NR_EXP];
	size_t nsel = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			lab_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--quick")) {
			quick = true;
		} else if (!strcmp(a, "--list")) {
			list = true;
		} else if (!strcmp(a, "--out") || !strncmp(a, "--out=", 6)) {
			if (a[5] == '=') {
				out = a + 6;
			} else if (i + 1 < argc) {
				out = argv[++i];
			} else {
				fprintf(stderr, "wbcache lab: --out needs a directory\n");
				return 2;
			}
			if (!*out) {
				fprintf(stderr, "wbcache lab: --out needs a directory\n");
				return 2;
			}
			/* its files' names must fit (EXP-N.json, .csv, .log) */
			if (strlen(out) > 400) {
				fprintf(stderr, "wbcache lab: --out: the path is too long (400 "
					"characters at most)\n");
				return 2;
			}
		} else if (a[0] == '-') {
			fprintf(stderr, "wbcache lab: unknown option '%s' (see wbcache lab --help)\n", a);
			return 2;
		} else if (!strcmp(a, "all")) {
			for (size_t k = 0; k < NR_EXP; k++)
				sel[k] = &experiments[k];
			nsel = NR_EXP;
		} else {
			const struct experiment *e = find_exp(a);
			if (!e) {
				fprintf(stderr, "wbcache lab: no experiment '%s' (see wbcache lab --help)\n", a);
				return 2;
			}
			bool dup = false;
			for (size_t k = 0; k < nsel; k++)
				dup |= sel[k] == e;
			if (!dup && nsel < NR_EXP)
				sel[nsel++] = e;
		}
	}
	if (!nsel) {
		for (size_t k = 0; k < NR_EXP; k++)
			sel[k] = &experiments[k];
		nsel = NR_EXP;
	}
	if (list) {
		for (size_t i = 0; i < nsel; i++) {
			struct lab_run runs[MAX_RUNS];
			int n = 0;
			sel[i]->build(runs, &n, quick);
			printf("%s: %s\n%s\n", sel[i]->name, sel[i]->title, sel[i]->story);
			for (int k = 0; k < n; k++) {
				printf("  %-40s ", runs[k].label);
				print_cmd(stdout, &runs[k]);
				printf("\n");
			}
			printf("\n");
			free_runs(runs, n);
		}
		return 0;
	}
	size_t made;
	int e = mkdir_p_made(out, &made);
	if (e == -ENOTDIR) {
		fprintf(stderr, "wbcache lab: --out %s: not a directory\n", out);
		return 2;
	}
	if (e) {
		fprintf(stderr, "wbcache lab: cannot create %s: %s\n", out, strerror(-e));
		/* the parents it made before a deeper one failed (out of
		 * inodes, EACCES on one it made read-only) */
		unmake_dir(out, made);
		return 2;
	}
	/* the runs write their files there: a directory this cannot write
	 * into is said now, not as a failed run */
	char probe[4200];
	snprintf(probe, sizeof(probe), "%s/.wbcache-lab-XXXXXX", out);
	int pfd = mkstemp(probe);
	if (pfd < 0) {
		fprintf(stderr, "wbcache lab: --out %s: cannot write there: %s\n", out,
			strerror(errno));
		unmake_dir(out, made);   /* those it made for nothing */
		return 2;
	}
	close(pfd);
	unlink(probe);
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0) {
		fprintf(stderr, "wbcache lab: cannot find this program: %s\n", strerror(errno));
		return 1;
	}
	self[sl] = 0;

	struct row {
		const struct experiment *e;
		struct exp_result x;
		bool ok;
		bool interrupted;          /* stopped by a signal: no figures */
	} rows[NR_EXP];
	int failed = 0;
	size_t ndone = 0;   /* rows with an experiment's outcome */
	lab_signals();
	for (size_t i = 0; i < nsel && !lab_sig; i++) {
		const struct experiment *x = sel[i];
		struct lab_run runs[MAX_RUNS];
		int n = 0;
		x->build(runs, &n, quick);
		printf("== %s: %s\n", x->name, x->title);
		bool ok = out_ok();
		for (int k = 0; k < n && ok; k++) {
			struct lab_run *r = &runs[k];
			snprintf(r->json, sizeof(r->json), "%s/%s-%d.json", out, x->name, k + 1);
			snprintf(r->trace, sizeof(r->trace), "%s/%s-%d.csv", out, x->name, k + 1);
			snprintf(r->log, sizeof(r->log), "%s/%s-%d.log", out, x->name, k + 1);
			unlink(r->json);
			printf("   %-42s ", r->label);
			print_cmd(stdout, r);
			printf("\n");
			if (!out_ok()) {
				ok = false;
				break;
			}
			/* the run's own files, then the quiet report */
			arg(r, "--json");
			arg(r, "%s", r->json);
			arg(r, "--trace");
			arg(r, "%s", r->trace);
			arg(r, "--quiet");
			/* no run goes on for ever: one that has not finished by
			 * then reports what it did, "finished": false */
			arg(r, "--deadline");
			arg(r, "%g", run_deadline(r, quick));
			int se = exec_run(r, self);
			if (lab_sig) {   /* the run was stopped: its figures are not the run's */
				ok = false;
				break;
			}
			/* a run given up at its --deadline (3) has figures of
			 * part of the run: judged only where the experiment
			 * counts them as a bound (stacked); elsewhere they were
			 * read as a finished run's (an old run that hung for
			 * the deadline "reproduced" chunk at 5 MB/s) */
			bool gave_up = !se && r->status == 3;
			if (se || (r->status && !(gave_up && r->may_stop))) {
				char *lg = slurp(r->log);
				const char *last = lg ? lg : "";
				/* its last line says why */
				size_t len = strlen(last);
				while (len && last[len - 1] == '\n')
					len--;
				size_t st = len;
				while (st && last[st - 1] != '\n')
					st--;
				char why[640];
				if (se && !r->overflow)   /* its log (or this program) */
					snprintf(why, sizeof(why), "cannot start it, its report to %s: %s",
						 r->log, strerror(-se));
				else if (se)
					snprintf(why, sizeof(why), "%s", strerror(-se));
				else if (gave_up)
					snprintf(why, sizeof(why), "did not finish in its --deadline, %g s",
						 run_deadline(r, quick));
				else
					snprintf(why, sizeof(why), "exit status %d", r->status);
				fprintf(stderr, "wbcache lab: %s run %d failed (%s): %.*s\n", x->name, k + 1,
					why, (int)(len - st), last + st);
				free(lg);
				ok = false;
				break;
			}
			read_figs(r);
			read_trace(r);
		}
		rows[i].e = x;
		rows[i].ok = ok;
		rows[i].interrupted = !ok && lab_sig;
		ndone = i + 1;
		memset(&rows[i].x, 0, sizeof(rows[i].x));
		if (ok) {
			x->judge(runs, n, &rows[i].x);
			char svg[600];
			snprintf(svg, sizeof(svg), "%s/%s.svg", out, x->name);
			if (chart(svg, x, runs, n))
				printf("   chart: %s\n", svg);
			else
				failed++;
		} else if (!rows[i].interrupted) {
			failed++;
		}
		free_runs(runs, n);
	}
	if (lab_sig == -1) {
		fprintf(stderr, "wbcache lab: writing the report: %s; stopped\n",
			strerror(lab_out_errno));
		return 1;
	}

	printf("\n%-11s %-18s %-16s %-12s %-12s %8s %8s  %s\n", "experiment", "reported: old",
	       "reported: new", "old", "new", "old/new", "reported", "effect");
	for (size_t i = 0; i < ndone; i++) {
		const struct experiment *x = rows[i].e;
		if (!rows[i].ok) {
			printf("%-11s %-18s %-16s %-12s %-12s %8s %8.2f  %s\n", x->name,
			       x->thread_old, x->thread_new, "-", "-", "-", x->thread_ratio,
			       rows[i].interrupted ? "interrupted" : "run failed");
			continue;
		}
		const struct exp_result *r = &rows[i].x;
		char a[32], b[32];
		/* a run that did not finish makes the ratio a bound */
		char ratio[32];
		snprintf(ratio, sizeof(ratio), "%s%.2f",
			 r->old_more && !r->new_more ? ">" : r->new_more && !r->old_more ? "<" : "",
			 r->old_v / r->new_v);
		printf("%-11s %-18s %-16s %-12s %-12s %8s %8.2f  %s (%s)\n", x->name, x->thread_old,
		       x->thread_new, fmt_v(a, sizeof(a), r->old_v, r->old_more, r->unit),
		       fmt_v(b, sizeof(b), r->new_v, r->new_more, r->unit), ratio, x->thread_ratio,
		       r->reproduced ? "reproduced" : "NOT reproduced", x->goal);
	}
	for (size_t i = 0; i < ndone; i++)
		if (rows[i].ok && rows[i].x.extra[0])
			printf("\n%s: %s\n", rows[i].e->name, rows[i].x.extra);
	if (quick)
		printf("\n(--quick: short runs, seconds an experiment; the effects need the full runs)\n");
	if (lab_sig > 0) {
		fflush(stdout);
		fprintf(stderr, "wbcache lab: %s: stopped; the table is of the experiments "
			"that ran\n", strsignal(lab_sig));
		return 128 + lab_sig;
	}
	return failed ? 1 : 0;
}
