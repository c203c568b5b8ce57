/*
 * wbcache command-line tool.
 *
 *   wbcache run [WORKLOAD] [options]   drive a workload through the engine (run.c)
 *   wbcache lab [options] [NAME...|all]  replay writeback problems (lab.c)
 *   wbcache mount | umount | stat      the FUSE file system (mount/)
 *   wbcache rados-unlock SPEC NAME     break the RADOS lock on a file
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

#include "run.h"

static void usage(FILE *out)
{
	fprintf(out,
"usage: wbcache COMMAND [options]\n"
"\n"
"commands:\n"
"  run [WORKLOAD] [--dev SPEC]... [options]\n"
"                   drive a workload (dd, randwrite, randrw, fsmark, jbod)\n"
"                   through the engine and report; no workload: the\n"
"                   demonstration (wbcache run --help lists the options)\n"
"  mount BACKING_DIR MOUNTPOINT [-o OPTS] [-f]\n"
"                   a FUSE file system over BACKING_DIR whose data goes\n"
"                   through the engine (wbcache mount --help)\n"
"  lab [--quick] [--out DIR] [--list] [NAME...|all]\n"
"                   replay five historical Linux writeback problems, old\n"
"                   policy against new, with a table and charts\n"
"                   (wbcache lab --help)\n"
"  stat [--json] MOUNTPOINT\n"
"                   live statistics of a mount (--json: as one JSON object)\n"
"  umount MOUNTPOINT\n"
"                   write everything back, unmount, wait for the daemon\n"
"  rados-unlock SPEC NAME | --file BACKING_FILE\n"
"                   break the lock a cache holds on file NAME of the rados\n"
"                   device SPEC (rados:POOL[/PREFIX][,conf=PATH,id=NAME]): for\n"
"                   a cache that died holding it.  A cache still running\n"
"                   stops writing the file (its writes fail, kept at risk)\n"
"\n"
"  --help, --version, help COMMAND (its --help)\n"
"\n"
"exit status: 0; 1 the command failed (its output not written, too); 2 a\n"
"bad command line; 3 a run that passed its --deadline; 130 a run or lab\n"
"interrupted (SIGINT, SIGTERM; lab: 128 + the signal)\n");
}

/* wbcache rados-unlock SPEC NAME | --file BACKING_FILE: 0 broken (or not
 * locked), 1 failed, 2 usage. */
static int cmd_rados_unlock(int argc, char **argv)
{
	static const char use[] =
		"usage: wbcache rados-unlock rados:POOL[/PREFIX][,conf=PATH,id=NAME] NAME\n"
		"       wbcache rados-unlock rados:POOL[/PREFIX][,...] --file BACKING_FILE\n"
		"Break the RADOS lock a cache that died left on a file (the cache that\n"
		"holds it is fenced first: blocklisted).  NAME: the file's name in the\n"
		"pool (the rados: device's wbc_file_open name).  --file: a file of a\n"
		"rados mount's BACKING_DIR (not through the mount), whose data the mount\n"
		"names by its file handle.\n"
		"exit status: 0 broken or not locked; 1 failed; 2 a bad command line\n";
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(use, stdout);
		return 0;
	}
	bool file = argc >= 3 && !strcmp(argv[2], "--file");
	const char *name = file ? (argc == 4 ? argv[3] : NULL) : argc == 3 ? argv[2] : NULL;
	if (!name || strncmp(argv[1], "rados:", 6) || !name[0]) {
		fprintf(stderr, "wbcache rados-unlock: %s\n%s",
			file && argc == 3 ? "--file needs a BACKING_FILE" :
			!name ? "needs a SPEC and a NAME (or --file BACKING_FILE)" :
			!name[0] ? "the NAME is empty" : "the SPEC must start with rados:", use);
		return 2;
	}
	char msg[512], hname[300];
	if (file) {
		int r = backing_file_name(name, hname, sizeof(hname), msg, sizeof(msg));
		if (r) {
			fprintf(stderr, "wbcache rados-unlock: %s\n", msg);
			return 1;
		}
		printf("%s: %s\n", name, hname);
		name = hname;
	}
	int r = wbc_rados_break_lock(argv[1], name, msg, sizeof(msg));
	if (r < 0) {
		fprintf(stderr, "wbcache rados-unlock: %s\n", msg[0] ? msg : wbc_strerror(r));
		return r == -EINVAL ? 2 : 1;
	}
	printf("%s\n", msg);
	return 0;
}

/*
 * What a command printed reached standard output: `wbcache stat MNT
 * >/dev/full` and --help into a closed pipe said nothing and exited 0.
 * Flushed and closed here, the error said on standard error.  A closed
 * descriptor 1 (>&-) is no error where nothing was written to it (EBADF
 * at the close, as coreutils' close_stdout).
 */
static int close_stdout(int rc)
{
	/* e: the error, -1 where stdio kept only that there was one (an
	 * earlier write's, its buffer dropped) */
	int e = ferror(stdout) ? -1 : 0;
	errno = 0;
	if (fflush(stdout))
		e = errno ? errno : -1;
	errno = 0;
	if (fclose(stdout) && !e && errno != EBADF)
		e = errno ? errno : -1;
	if (!e || rc)
		return rc;
	if (e > 0)
		fprintf(stderr, "wbcache: writing to standard output: %s\n", strerror(e));
	else
		fprintf(stderr, "wbcache: writing to standard output failed\n");
	return 1;
}

static int dispatch(int argc, char **argv);

int main(int argc, char **argv)
{
	/* not a terminal: one buffer for what a command says (its help, a
	 * report), so that a failed write happens at the flush, where its
	 * errno is still there (one inside printf left only "failed") */
	static char obuf[1 << 16];
	if (!isatty(STDOUT_FILENO))
		setvbuf(stdout, obuf, _IOFBF, sizeof(obuf));
	return close_stdout(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "help") && argc == 3) {
		/* `wbcache help COMMAND`: the command's own --help */
		char *sub[] = { argv[2], "--help", NULL };
		const char *known[] = { "run", "lab", "mount", "stat", "umount", "rados-unlock" };
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			if (!strcmp(argv[2], known[i]))
				return dispatch(3, (char *[]){ argv[0], sub[0], sub[1], NULL });
		fprintf(stderr, "wbcache: help: unknown command '%s' (try --help)\n", argv[2]);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		if (argc > 2) {
			/* `help COMMAND x`: x is the stray one, not COMMAND */
			int k = !strcmp(argv[1], "help") && argc > 3 ? 3 : 2;
			fprintf(stderr, "wbcache: unexpected argument '%s' (try --help)\n", argv[k]);
			return 2;
		}
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		if (argc > 2) {
			fprintf(stderr, "wbcache: unexpected argument '%s' (try --help)\n", argv[2]);
			return 2;
		}
		printf("wbcache %s\n", WBCACHE_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (!strcmp(argv[1], "lab"))
		return cmd_lab(argc - 1, argv + 1);
	if (!strcmp(argv[1], "mount"))
		return cmd_mount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount"))
		return cmd_umount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "rados-unlock"))
		return cmd_rados_unlock(argc - 1, argv + 1);
	/* `wbcache SOURCE MOUNTPOINT -o OPTS`: how mount.fuse3 runs the
	 * program of an fstab line or `mount -t fuse.wbcache` */
	if (argc >= 3 && argv[1][0] != '-' && strchr(argv[1], '/'))
		return cmd_mount(argc, argv);
	fprintf(stderr, "wbcache: unknown command '%s' (try --help)\n", argv[1]);
	return 2;
}
