/*
 * What the mount's root answers besides its own extended attributes:
 * "user.wbcache.stats", the live statistics, and "user.wbcache.sync",
 * everything written back (`wbcache umount`); and `wbcache stat`, which
 * prints the statistics.
 */
#include "mount.h"
#include "wbcache_backend.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

/* The fields of the kernel's /sys/kernel/debug/bdi/<dev>/stats, and more. */
size_t stats_text(char *buf, size_t len)
{
	struct wbc_stats s;
	struct wbc_dev_stats d;
	wbc_stats(M.cache, &s);
	wbc_dev_stats(M.dev, &d);
	struct wbc_dev_debug dd;
	wbc_dev_debug(M.dev, &dd);
	pthread_mutex_lock(&D.lock);
	uint64_t deferred_queued = D.queued, deferred_interrupted = D.interrupted;
	pthread_mutex_unlock(&D.lock);
	pthread_mutex_lock(&M.lock);
	uint64_t ghosts = M.nghosts;
	pthread_mutex_unlock(&M.lock);
	unsigned uring_queues;
	uint64_t uring_entries, uring_requests, uring_helped;
	uring_stats(&uring_queues, &uring_entries, &uring_requests, &uring_helped);
	int n = snprintf(buf, len,
		"BdiWriteback:       %10" PRIu64 " kB\n"
		"BdiReclaimable:     %10" PRIu64 " kB\n"
		"BdiDirtyThresh:     %10" PRIu64 " kB\n"
		"DirtyThresh:        %10" PRIu64 " kB\n"
		"BackgroundThresh:   %10" PRIu64 " kB\n"
		"BdiDirtied:         %10" PRIu64 " kB\n"
		"BdiWritten:         %10" PRIu64 " kB\n"
		"BdiWriteBandwidth:  %10" PRIu64 " kBps\n"
		"BdiAvgWriteBandwidth: %8" PRIu64 " kBps\n"
		"DirtyRatelimit:     %10" PRIu64 " kBps\n"
		"b_dirty:            %10" PRIu64 "\n"
		"b_io:               %10" PRIu64 "\n"
		"b_more_io:          %10" PRIu64 "\n"
		"dirty_buckets:      %10" PRIu64 "\n"
		"Cached:             %10" PRIu64 " kB\n"
		"CacheSize:          %10" PRIu64 " kB\n"
		"WrittenByApps:      %10" PRIu64 " kB\n"
		"WriteErrors:        %10" PRIu64 "\n"
		"AtRisk:             %10" PRIu64 " kB\n"
		"Lost:               %10" PRIu64 " kB\n"
		"Pauses:             %10" PRIu64 "\n"
		"PausedMs:           %10" PRIu64 "\n"
		"ListLockMaxHoldUs:  %10" PRIu64 "\n"
		"ListLockMaxCpuUs:   %10" PRIu64 "\n"
		"ListLockWaits:      %10" PRIu64 "\n"
		"InboxPushRetries:   %10" PRIu64 "\n"
		"DeferredReplies:    %10" PRIu64 "\n"
		"InterruptedPauses:  %10" PRIu64 "\n"
		"ForgottenCached:    %10" PRIu64 "\n"
		"UringQueues:        %10u\n"
		"UringEntries:       %10" PRIu64 "\n"
		"UringRequests:      %10" PRIu64 "\n"
		"UringHelped:        %10" PRIu64 "\n"
		"DaemonPid:          %10ld\n",
		d.writeback_bytes >> 10, d.dirty_bytes >> 10, d.wb_thresh_bytes >> 10,
		s.thresh_bytes >> 10, s.bg_thresh_bytes >> 10, d.dirtied_bytes >> 10,
		d.written_back_bytes >> 10, d.write_bw >> 10, d.avg_write_bw >> 10,
		d.dirty_ratelimit >> 10, d.files_dirty, d.files_io, d.files_more_io,
		d.dirty_buckets, s.cached_bytes >> 10, s.mem_bytes >> 10, s.written_bytes >> 10,
		s.write_errors, s.at_risk_bytes >> 10, s.lost_bytes >> 10, s.pauses,
		s.paused_ns / 1000000, dd.list_lock_max_hold_ns / 1000,
		dd.list_lock_max_cpu_ns / 1000, dd.list_lock_waits, dd.inbox_push_retries, deferred_queued, deferred_interrupted, ghosts,
		uring_queues, uring_entries, uring_requests, uring_helped, (long)getpid());
	/* a remote backend (-o backend=rados:): its transport */
	struct wbc_backend_stats bs;
	if (n >= 0 && (size_t)n < len && !wbc_dev_backend_stats(M.dev, &bs)) {
		int k = snprintf(buf + n, len - (size_t)n,
			"RemoteWindow:       %10" PRIu64 " kB\n"
			"RemoteInflight:     %10" PRIu64 " kB\n"
			"RemoteQueued:       %10" PRIu64 " kB\n"
			"RemoteRttUs:        %10" PRIu64 "\n"
			"RemoteBaseRttUs:    %10" PRIu64 "\n"
			"RemoteConnected:    %10u\n"
			"RemoteReconnects:   %10" PRIu64 "\n",
			bs.window_bytes >> 10, bs.inflight_bytes >> 10, bs.queued_bytes >> 10,
			bs.rtt_ns / 1000, bs.min_rtt_ns / 1000, bs.connected, bs.reconnects);
		if (k > 0)
			n += k;
	}
	return n < 0 ? 0 : MINU((size_t)n, len - 1);
}

/* Write back and flush everything (`wbcache umount`): 0 once every byte
 * is on the backing store; the error while data stays at risk, or when
 * data was dropped (on_error=drop) or a flush of the store failed (its
 * syncfs: what it covered may not be there) since the previous such sync.
 * An error that a later write made good is not one: each open file's
 * fsync has reported it already. */
/* Lost bytes and failed flushes a sync has reported: to the daemon's user
 * or root (who may unmount: what `wbcache umount` was told), and to other
 * users (whose syncs must not use up what the owner is to be told) */
static _Atomic uint64_t lost_seen[2], flush_err_seen[2];

uint64_t mount_lost_reported(void)
{
	return atomic_load(&lost_seen[1]);
}

uint64_t mount_flush_errors_reported(void)
{
	return atomic_load(&flush_err_seen[1]);
}

int mount_sync(bool owner)
{
	int err = wbc_cache_sync(M.cache);
	struct wbc_stats s;
	wbc_stats(M.cache, &s);
	uint64_t seen = atomic_exchange(&lost_seen[owner], s.lost_bytes);
	uint64_t fseen = atomic_exchange(&flush_err_seen[owner], s.flush_errors);
	if (!s.at_risk_bytes && s.lost_bytes == seen && s.flush_errors == fseen)
		return 0;
	return err ? err : -EIO;
}

/* `wbcache stat --json`: the same lines as one JSON object; a value with
 * a unit gets it in its name (BdiWriteback_kB). */
static void print_json(char *text)
{
	printf("{");
	bool first = true;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char key[64], unit[16] = "";
		long long v;
		if (sscanf(line, " %63[^:]: %lld %15s", key, &v, unit) < 2)
			continue;
		printf("%s\n  \"%s%s%s\": %lld", first ? "" : ",", key, unit[0] ? "_" : "", unit, v);
		first = false;
	}
	printf("\n}\n");
}

int cmd_stat(int argc, char **argv)
{
	static const char use[] = "usage: wbcache stat [--json] MOUNTPOINT\n"
		"prints the live statistics of a wbcache mount (--json: as one JSON object)\n";
	bool json = false, help = false;
	const char *mnt = NULL, *bad = NULL;
	for (int i = 1; i < argc; i++) {   /* in any order */
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			help = true;
		else if (argv[i][0] == '-' || mnt)
			bad = bad ? bad : argv[i];
		else
			mnt = argv[i];
	}
	if (help) {
		fputs(use, stdout);
		return 0;
	}
	if (!bad && mnt && !*mnt)
		bad = "";
	if (bad || !mnt) {
		if (bad)
			fprintf(stderr, "wbcache stat: unexpected argument '%s'\n", bad);
		else
			fprintf(stderr, "wbcache stat: no MOUNTPOINT\n");
		fputs(use, stderr);
		return 2;
	}
	char buf[4096];
	ssize_t n = getxattr(mnt, STATS_XATTR, buf, sizeof(buf) - 1);
	if (n < 0) {
		char at[PATH_MAX];
		bool notours = errno == ENODATA || errno == ENOTSUP;
		if (notours && mount_of_backing(mnt, at, sizeof(at)))
			fprintf(stderr, "wbcache stat: %s: not a wbcache mount: the BACKING_DIR of "
				"the one at %s\n", mnt, at);
		else if (notours && mount_containing(mnt, at, sizeof(at)))
			fprintf(stderr, "wbcache stat: %s: not a wbcache mount's root: inside the "
				"one at %s (wbcache stat %s)\n", mnt, at, at);
		else
			fprintf(stderr, "wbcache stat: %s: %s\n", mnt,
				notours ? "not a wbcache mount" : strerror(errno));
		return 1;
	}
	buf[n] = '\0';
	if (json)
		print_json(buf);
	else
		fputs(buf, stdout);
	return 0;
}
