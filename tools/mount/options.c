/*
 * The -o options of `wbcache mount`: the engine's configuration, the
 * device's options and the FUSE and mount options, with the kernel's
 * names.
 */
#include "mount.h"
#include "wbcache_backend.h"   /* wbc_parse_time */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void mount_usage(FILE *out)
{
	fprintf(out,
"usage: wbcache mount BACKING_DIR MOUNTPOINT [-o OPT[,OPT...]] [-f]\n"
"\n"
"Mounts a FUSE file system at MOUNTPOINT whose files are those of BACKING_DIR,\n"
"with their data cached and written back by wbcache, and returns once it is\n"
"mounted (a bad option or directory: a reason, exit 2, nothing mounted).\n"
"`wbcache umount MOUNTPOINT` writes everything back, unmounts and returns when\n"
"the daemon has ended; `fusermount3 -u`, `umount` or SIGTERM return at once\n"
"and the daemon writes back before it ends.  Also: `mount -t fuse.wbcache`\n"
"and fstab lines (type fuse.wbcache).  See wbcache-mount(8).\n"
"\n"
"  -f             stay in the foreground, log to stderr, exit when unmounted:\n"
"                 0, or 1 if data could not be written (default: detach and\n"
"                 log to syslog)\n"
"  -o OPTS        comma-separated, with the kernel's names:\n"
"     mem=SIZE                        cache size (default 256M)\n"
"     page_size=SIZE                  cache page size (default 4K)\n"
"     dirty_ratio=N, dirty_bytes=SIZE\n"
"     dirty_background_ratio=N, dirty_background_bytes=SIZE\n"
"     dirty_expire_centisecs=N, dirty_writeback_centisecs=N\n"
"     min_ratio=N, max_ratio=N, max_bytes=SIZE, strict_limit=0|1,\n"
"     on_error=retry|drop             the device's tunables\n"
"     retry_timeout=SECONDS           retry failing writes that long (default\n"
"                                     30), then paused writers get the error\n"
"                                     (fsync reports its writes' at once)\n"
"     qd=N, max_io=SIZE, direct=0|1   the backing I/O (io_uring, O_DIRECT)\n"
"     backend=rados:POOL[/PREFIX]     file data in a Ceph pool instead (one\n"
"                                     writer per file: a RADOS lock), the\n"
"                                     metadata in BACKING_DIR; with\n"
"     rados_conf=PATH, rados_id=NAME, object_size=SIZE, rados_timeout=SECONDS\n"
"     direct_io=auto|1|0              opens that bypass the kernel's page cache\n"
"                                     (auto: write-only and, where the kernel\n"
"                                     maps such files, read-write ones)\n"
"     entry_timeout=S, attr_timeout=S, negative_timeout=S\n"
"                                     seconds the kernel keeps names, attributes\n"
"                                     and absent names (default 1)\n"
"     noflush=0|1                     1: close sends no FLUSH (writeback errors\n"
"                                     reach fsync only); read-only opens never do\n"
"     readdirplus=0|1                 1: a directory listing carries each\n"
"                                     entry's attributes (default 1)\n"
"     threads=N, idle_threads=N, clone_fd=0|1\n"
"                                     FUSE workers (default 16, 16, 0)\n"
"     uring=auto|1|0                  requests through io_uring, one queue and\n"
"                                     thread per CPU (Linux 6.14+, the fuse\n"
"                                     module's enable_uring=Y); auto (default):\n"
"                                     where the kernel offers it; 1: or fail;\n"
"                                     0: never\n"
"     allow_other, allow_root, auto_unmount, ro, nodev, nosuid, noexec,\n"
"     noatime, ...                    FUSE and mount options\n"
"\n"
"`wbcache stat [--json] MOUNTPOINT` prints the mount's live statistics.\n");
}

static int parse_u64(const char *key, const char *val, uint64_t min, uint64_t max,
		     uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(val, &end, 10);
	/* digits only: strtoull also takes leading spaces and a sign
	 * ("+5", " 5", " -0" were taken; a size, wbc_parse_size, never is) */
	if (errno || !isdigit((unsigned char)val[0]) || *end || v < min || v > max) {
		fprintf(stderr, "wbcache mount: bad value for %s: '%s' (%llu..%llu)\n", key, val,
			(unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_size_opt(const char *key, const char *val, uint64_t *out)
{
	if (wbc_parse_size(val, out)) {
		fprintf(stderr, "wbcache mount: bad size for %s: '%s'\n", key, val);
		return -1;
	}
	return 0;
}

/* -o options: engine config, device options, FUSE options. */
static int parse_seconds(const char *key, const char *val, double *out)
{
	double v;
	if (wbc_parse_time(val, &v) || v > 1e9) {
		fprintf(stderr, "wbcache mount: bad value for %s: '%s' (seconds)\n", key, val);
		return -1;
	}
	*out = v;
	return 0;
}

/* @list ("k=v,k=v", or a spec "rados:POOL,k=v") with @key set to @val: a
 * new string, the key's earlier value replaced (a later -o wins, as in
 * mount(8): the device refuses a key given twice), else the pair added
 * at the end; NULL without memory. */
static char *kv_set(const char *list, const char *key, const char *val)
{
	size_t kl = strlen(key), n = strlen(list) + kl + strlen(val) + 3;
	char *out = malloc(n);
	if (!out)
		return NULL;
	out[0] = '\0';
	bool set = false;
	for (const char *t = *list ? list : NULL; t;) {
		const char *next = strchr(t, ',');
		size_t len = next ? (size_t)(next - t) : strlen(t);
		size_t used = strlen(out);
		if (len > kl && !strncmp(t, key, kl) && t[kl] == '=') {
			if (!set)
				snprintf(out + used, n - used, "%s%s=%s", used ? "," : "", key, val);
			set = true;
		} else {
			snprintf(out + used, n - used, "%s%.*s", used ? "," : "", (int)len, t);
		}
		t = next ? next + 1 : NULL;
	}
	if (!set) {
		size_t used = strlen(out);
		snprintf(out + used, n - used, "%s%s=%s", used ? "," : "", key, val);
	}
	return out;
}

int parse_opts(char *opts, struct wbc_config *cfg, char *devopts, size_t devlen,
	       char *fuseopts, size_t fuselen, enum dio_mode *dio, struct mopts *mo)
{
	for (char *save = NULL, *kv = strtok_r(opts, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *val = strchr(kv, '=');
		if (val)
			*val++ = '\0';
		uint64_t v;
		const char *devkeys[] = { "min_ratio", "max_ratio", "max_bytes", "strict_limit",
					  "on_error", "retry_timeout", "qd", "max_io", "direct" };
		bool devkey = false;
		for (size_t i = 0; i < sizeof(devkeys) / sizeof(devkeys[0]); i++)
			devkey |= !strcmp(kv, devkeys[i]);
		/* what mount(8) and mount.fuse3 pass for an fstab line, and
		 * the FUSE mount's own: to the kernel's mount */
		static const char *const mntkeys[] = {
			"allow_other", "allow_root", "auto_unmount", "ro", "rw", "dev", "nodev",
			"suid", "nosuid", "exec", "noexec", "atime", "noatime", "sync", "async",
			"dirsync",
		};
		/* atime flavours FUSE's mount does not take (libfuse refuses
		 * them): the mount has the kernel's default (relatime), and
		 * reads from the cache move no atime anyway; accepted, as in
		 * an fstab line, with no effect */
		static const char *const atimekeys[] = {
			"relatime", "norelatime", "strictatime", "diratime", "nodiratime",
			"lazytime", "nolazytime",
		};
		bool atimekey = false;
		for (size_t i = 0; i < sizeof(atimekeys) / sizeof(atimekeys[0]); i++)
			atimekey |= !strcmp(kv, atimekeys[i]);
		bool mntkey = false;
		for (size_t i = 0; i < sizeof(mntkeys) / sizeof(mntkeys[0]); i++)
			mntkey |= !strcmp(kv, mntkeys[i]);
		/* a flag given a value: said so (it was "unknown option
		 * 'allow_other'", or "has no value (noatime=...)") */
		if ((atimekey || mntkey) && val) {
			fprintf(stderr, "wbcache mount: option '%s' takes no value (-o %s)\n", kv, kv);
			return -1;
		}
		if (atimekey)
			continue;
		if (mntkey) {
			size_t used = strlen(fuseopts);
			if ((size_t)snprintf(fuseopts + used, fuselen - used, ",%s", kv) >= fuselen - used) {
				fprintf(stderr, "wbcache mount: too many mount options\n");
				return -1;
			}
			continue;
		}
		/* mount(8)'s own, not for the file system */
		if (!strcmp(kv, "defaults") || !strcmp(kv, "_netdev") || !strcmp(kv, "nofail") ||
		    !strcmp(kv, "auto") || !strcmp(kv, "noauto") || !strcmp(kv, "user") ||
		    !strcmp(kv, "nouser") || !strcmp(kv, "users") || !strncmp(kv, "x-", 2) ||
		    !strcmp(kv, "comment") ||
		    /* always on (the daemon's permission checks are the kernel's) */
		    !strcmp(kv, "default_permissions"))
			continue;
		if (val && !*val) {
			fprintf(stderr, "wbcache mount: option '%s' has no value (%s=...; see "
				"wbcache mount --help)\n", kv, kv);
			return -1;
		}
		if (!val) {
			fprintf(stderr, "wbcache mount: unknown option '%s' (or one that needs a "
				"value; see wbcache mount --help)\n", kv);
			return -1;
		}
		/* the rados backend's spec and its options (the spec's own
		 * commas cannot pass through -o: each is an option here) */
		static const char *const radoskeys[][2] = {
			{ "rados_conf", "conf" }, { "rados_id", "id" },
			{ "object_size", "object_size" }, { "rados_timeout", "timeout" },
		};
		bool radoskey = false;
		for (size_t i = 0; val && i < sizeof(radoskeys) / sizeof(radoskeys[0]); i++)
			if (!strcmp(kv, radoskeys[i][0])) {
				char *spec = kv_set(M.remote ? M.remote : "", radoskeys[i][1], val);
				if (!spec)
					return -1;
				free(M.remote);
				M.remote = spec;
				radoskey = true;
			}
		if (radoskey)
			continue;
		if (!strcmp(kv, "backend")) {
			if (strncmp(val, "rados:", 6) || !val[6]) {
				fprintf(stderr, "wbcache mount: bad backend '%s' (rados:POOL[/PREFIX])\n",
					val);
				return -1;
			}
			/* the rados options given so far stay; a backend=
			 * given before is replaced (the later wins) */
			const char *rest = M.remote;
			if (rest && !strncmp(rest, "rados:", 6))
				rest = strchr(rest, ',') ? strchr(rest, ',') + 1 : "";
			char *spec = NULL;
			if (asprintf(&spec, "%s%s%s", val, rest && *rest ? "," : "",
				     rest ? rest : "") < 0)
				return -1;
			free(M.remote);
			M.remote = spec;
			continue;
		}
		if (devkey) {
			char *set = kv_set(devopts, kv, val);
			if (!set || strlen(set) >= devlen) {
				free(set);
				fprintf(stderr, "wbcache mount: too many device options\n");
				return -1;
			}
			strcpy(devopts, set);
			free(set);
			continue;
		}
		int rc = -1;
		double *secs = !strcmp(kv, "entry_timeout") ? &mo->entry :
			       !strcmp(kv, "attr_timeout") ? &mo->attr :
			       !strcmp(kv, "negative_timeout") ? &mo->negative : NULL;
		if (secs) {
			if (parse_seconds(kv, val, secs))
				return -1;
			continue;
		}
		bool *flag = !strcmp(kv, "noflush") ? &mo->noflush :
			     !strcmp(kv, "clone_fd") ? &mo->clone_fd :
			     !strcmp(kv, "readdirplus") ? &mo->no_readdirplus : NULL;
		if (flag) {
			if (strcmp(val, "0") && strcmp(val, "1")) {
				fprintf(stderr, "wbcache mount: bad value for %s: '%s' (0 or 1)\n", kv, val);
				return -1;
			}
			*flag = (val[0] == '1') != (flag == &mo->no_readdirplus);
			continue;
		}
		if (!strcmp(kv, "threads") || !strcmp(kv, "idle_threads")) {
			if (parse_u64(kv, val, kv[0] == 't', 1024, &v))
				return -1;
			*(kv[0] == 't' ? &mo->threads : &mo->idle_threads) = (unsigned)v;
			continue;
		}
		if (!strcmp(kv, "uring")) {
			if (!strcmp(val, "auto") || !strcmp(val, "1") || !strcmp(val, "0")) {
				mo->uring = !strcmp(val, "auto") ? URING_AUTO :
					    val[0] == '1' ? URING_ON : URING_OFF;
				mo->uring_given = true;
				continue;
			}
			fprintf(stderr, "wbcache mount: bad value for uring: '%s' (auto, 1 or 0)\n", val);
			return -1;
		}
		if (!strcmp(kv, "direct_io")) {
			if (!strcmp(val, "auto") || !strcmp(val, "1") || !strcmp(val, "0")) {
				*dio = !strcmp(val, "auto") ? DIO_AUTO : val[0] == '1' ? DIO_ALWAYS : DIO_NEVER;
				continue;
			}
			fprintf(stderr, "wbcache mount: bad value for direct_io: '%s' (auto, 1 or 0)\n", val);
			return -1;
		}
		if (!strcmp(kv, "mem"))
			rc = parse_size_opt(kv, val, &cfg->mem_bytes);
		else if (!strcmp(kv, "page_size") && !(rc = parse_size_opt(kv, val, &v)))
			cfg->page_size = v > UINT32_MAX ? 0 : (uint32_t)v;
		else if (!strcmp(kv, "dirty_ratio") && !(rc = parse_u64(kv, val, 0, 100, &v)))
			cfg->dirty_ratio = (uint32_t)v;
		else if (!strcmp(kv, "dirty_bytes"))
			rc = parse_size_opt(kv, val, &cfg->dirty_bytes);
		else if (!strcmp(kv, "dirty_background_ratio") && !(rc = parse_u64(kv, val, 0, 100, &v)))
			cfg->dirty_background_ratio = (uint32_t)v;
		else if (!strcmp(kv, "dirty_background_bytes"))
			rc = parse_size_opt(kv, val, &cfg->dirty_background_bytes);
		else if (!strcmp(kv, "dirty_expire_centisecs") && !(rc = parse_u64(kv, val, 0, UINT32_MAX, &v)))
			cfg->dirty_expire_centisecs = (uint32_t)v;
		else if (!strcmp(kv, "dirty_writeback_centisecs") &&
			 !(rc = parse_u64(kv, val, 0, UINT32_MAX, &v)))
			cfg->dirty_writeback_centisecs = (uint32_t)v;
		else if (rc && strcmp(kv, "page_size") && strcmp(kv, "dirty_ratio") &&
			 strcmp(kv, "dirty_background_ratio") && strcmp(kv, "dirty_expire_centisecs") &&
			 strcmp(kv, "dirty_writeback_centisecs")) {
			fprintf(stderr, "wbcache mount: unknown option '%s' (see wbcache mount --help)\n", kv);
			return -1;
		}
		if (rc)
			return -1;
	}
	/* allow_root makes the kernel's mount allow_other, and libfuse then
	 * turns away every caller but root and the mounting user: with
	 * allow_other too, what allow_other asked for was silently denied */
	bool other = false, root = false;
	for (const char *t = fuseopts; t && *t; t = strchr(t, ',')) {
		t += *t == ',';
		size_t len = strcspn(t, ",");
		other |= len == 11 && !strncmp(t, "allow_other", len);
		root |= len == 10 && !strncmp(t, "allow_root", len);
	}
	if (other && root) {
		fprintf(stderr, "wbcache mount: allow_other and allow_root exclude each other\n");
		return -1;
	}
	return 0;
}
