/*
 * Test helper: the Ceph test cluster of the RADOS tests
 * (scripts/ceph-test-cluster).  tests/run starts one for the tests that
 * use it and passes it on in WBCACHE_CEPH_DIR (its directory, DIR/ceph.conf
 * the configuration); a test run alone starts its own and stops it at
 * exit.  The pool is "wbc".  Where no cluster can be started (not root,
 * packages missing) the reason comes back and the test skips.
 */
#ifndef WBC_TEST_CEPH_H
#define WBC_TEST_CEPH_H
#include "testutil.h"

#include <sys/wait.h>

/* ThreadSanitizer: librados and libceph-common are not built with it, so
 * their own synchronisation (atomic reference counts of buffers and
 * connections, lock-free handoffs between their messenger threads) is
 * invisible to it and it reports races inside them (a buffer freed by one
 * of their threads after another's memcpy, ...).  Reports with a frame in
 * those libraries are suppressed; a race in wbcache's own code between
 * wbcache's threads is still reported. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race:libceph-common.so\nrace:librados.so\n";
}

static char t_ceph_dir[256];
static bool t_ceph_own;

static inline void t_ceph_stop(void)
{
	if (!t_ceph_own)
		return;
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/ceph-test-cluster stop %s", t_ceph_dir);
	if (system(cmd)) {
		/* best effort */
	}
	t_ceph_own = false;
}

/* The cluster's directory, or NULL with the reason in @why. */
static inline const char *t_ceph_start(char *why, size_t len)
{
	const char *env = getenv("WBCACHE_CEPH_DIR");
	if (env && *env) {
		snprintf(t_ceph_dir, sizeof(t_ceph_dir), "%s", env);
		return t_ceph_dir;
	}
	const char *skip = getenv("WBCACHE_CEPH_SKIP");
	if (skip && *skip) {
		snprintf(why, len, "%s", skip);
		return NULL;
	}
	char *d = t_mkdtemp();
	snprintf(t_ceph_dir, sizeof(t_ceph_dir), "%s/ceph", d);
	free(d);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/ceph-test-cluster start %s 2>&1", t_ceph_dir);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(why, len, "cannot run scripts/ceph-test-cluster");
		return NULL;
	}
	char line[256] = "", last[256] = "";
	while (fgets(line, sizeof(line), p))
		snprintf(last, sizeof(last), "%s", line);
	int st = pclose(p);
	last[strcspn(last, "\n")] = '\0';
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		snprintf(why, len, "no Ceph test cluster: %s", last);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
			return NULL;
		fprintf(stderr, "%s\n", why);
		exit(1);   /* installed and root, and it did not start: a failure */
	}
	t_ceph_own = true;
	atexit(t_ceph_stop);
	return t_ceph_dir;
}

/* Run "scripts/ceph-test-cluster @what DIR @arg" (kill-osd, start-osd). */
static inline void t_ceph_ctl(const char *what, const char *arg)
{
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "scripts/ceph-test-cluster %s %s %s", what, t_ceph_dir, arg);
	CHECK_EQ(system(cmd), 0);
}

#endif
