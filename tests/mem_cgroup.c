/*
 * A cache larger than the memory its control group may use is refused
 * with ENOMEM before anything is committed, as one larger than the
 * machine is.  Before, only the machine's memory was compared: the open
 * committed the arena, and the group's out-of-memory killer ended the
 * process (SIGKILL) instead of an error.  Needs root and a cgroup v1
 * memory controller (a group of its own made under this process's);
 * skips otherwise.
 */
#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT (256ull << 20)

/* The directory of this process's v1 memory group, or false. */
static bool memory_group(char *dir, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		if (strcmp(c1 + 1, "memory"))
			continue;
		char *path = c2 + 1;
		path[strcspn(path, "\n")] = 0;
		snprintf(dir, len, "/sys/fs/cgroup/memory%s", strcmp(path, "/") ? path : "");
		found = true;
	}
	fclose(f);
	return found;
}

static bool put(const char *dir, const char *file, const char *what)
{
	char fn[600];
	snprintf(fn, sizeof(fn), "%s/%s", dir, file);
	FILE *f = fopen(fn, "we");
	if (!f)
		return false;
	bool ok = fputs(what, f) >= 0;
	return fclose(f) == 0 && ok;
}

static int open_size(uint64_t mem)
{
	struct wbc_config cfg = t_config(mem, 4096);
	wbc_cache *c;
	int r = wbc_cache_open(&cfg, &c);
	if (!r)
		CHECK_EQ(wbc_cache_close(c), 0);
	return r;
}

int main(void)
{
	if (geteuid()) {
		printf("skipped: needs root (a control group of its own)\n");
		return T_SKIP;
	}
	char base[400], dir[500];
	if (!memory_group(base, sizeof(base))) {
		printf("skipped: no cgroup v1 memory controller here\n");
		return T_SKIP;
	}
	snprintf(dir, sizeof(dir), "%s/wbc-test-%d", base, (int)getpid());
	char lim[32];
	snprintf(lim, sizeof(lim), "%llu", LIMIT);
	if (mkdir(dir, 0755) || !put(dir, "memory.limit_in_bytes", lim)) {
		printf("skipped: cannot make a memory group under %s: %s\n", base, strerror(errno));
		rmdir(dir);
		return T_SKIP;
	}
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		char me[32];
		snprintf(me, sizeof(me), "%d", (int)getpid());
		if (!put(dir, "cgroup.procs", me))
			_exit(77);
		int small = open_size(32ull << 20), big = open_size(2 * LIMIT);
		printf("in a group of %llu MiB: a cache of 32 MiB %d, of %llu MiB %d\n",
		       LIMIT >> 20, small, (2 * LIMIT) >> 20, big);
		fflush(stdout);
		_exit(small == 0 && big == -ENOMEM ? 0 : 1);
	}
	int st;
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	for (int i = 0; i < 100 && rmdir(dir) && errno == EBUSY; i++)
		usleep(10000);
	if (WIFSIGNALED(st))
		printf("the child was killed by signal %d (the group's out-of-memory killer)\n",
		       WTERMSIG(st));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		printf("skipped: cannot join the group made\n");
		return T_SKIP;
	}
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("mem_cgroup: ok\n");
	return 0;
}
