/* wbcache run: workloads, sampling, report, trace and plot. */
#ifndef WBC_TOOLS_RUN_H
#define WBC_TOOLS_RUN_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "wbcache.h"

#define RUN_MAX_DEVS 16

/* One 100 ms sample of the timeline. */
struct sample {
	double t;                          /* seconds since start */
	double dirty, writeback;           /* MiB */
	double bg_thresh, freerun, setpoint, limit;   /* MiB */
	double pause_ms;                   /* mean pause in the interval */
	double ops_rate;                   /* writes + reads (fsmark: files) per second */
	double lock_max_us;                /* longest list-lock hold in the interval (to 2x) */
	unsigned ndev;
	struct {
		double dirty, writeback, write_bw, ratelimit, tput;   /* MiB, MB/s */
		/* a backend's transport (wbc_dev_backend_stats), where it has one */
		bool transport;
		double window, inflight, rtt_ms, base_rtt_ms;          /* MiB, ms */
	} dev[RUN_MAX_DEVS];
};

/* plot.c: @path opened for writing as fopen(path, "w") does; with
 * @nofollow a symbolic link there is refused (ELOOP), for the files the
 * demonstration names in a directory that may be someone else's.  NULL
 * with errno. */
FILE *out_fopen(const char *path, bool nofollow);
/* plot.c: draw the timeline as an SVG document; 0 or -errno. */
int plot_svg(const char *path, bool nofollow, const char *title, const struct sample *s,
	     size_t n, const char *const *dev_names);
/* plot.c: the timeline as CSV; 0 or -errno. */
int trace_csv(const char *path, bool nofollow, const struct sample *s, size_t n);

/* plot.c: the length of the well-formed UTF-8 sequence at @s, or 0 */
int utf8_len(const unsigned char *s);

/* run.c: make @dir and its missing parents; -ENOTDIR where it (or a
 * parent) is there but not a directory.  0 or -errno.  *made: the length
 * of the shallowest directory of @dir it made (0: none, or not only new
 * ones below it), for unmake_dir to remove them again while empty. */
int mkdir_p_made(const char *dir, size_t *made);
void unmake_dir(const char *dir, size_t made);

int cmd_run(int argc, char **argv);
int cmd_lab(int argc, char **argv);     /* lab.c */
int cmd_mount(int argc, char **argv);   /* mount/main.c */
int cmd_stat(int argc, char **argv);    /* mount/stats.c */
int cmd_umount(int argc, char **argv);  /* mount/main.c */
/* The name a rados mount (handle mode) gives the data of the backing file
 * @path (mount/node.c): 0, or -errno with @msg. */
int backing_file_name(const char *path, char *buf, size_t len, char *msg, size_t msglen);
int wbc_parse_size(const char *s, uint64_t *out);   /* wbcache_backend.h */
#endif
