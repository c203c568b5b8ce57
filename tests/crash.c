/*
 * Crash durability: a child process writes and fsyncs through wbcache to a
 * file backend and is killed with SIGKILL at a random point; afterwards
 * every byte covered by an fsync that returned 0 is in the backing file.
 * 100 kills (WBCACHE_CRASH_KILLS for more).  The child reports each
 * successful fsync through a pipe; the parent kills it after a random
 * number of reports plus a random delay, so kills land in writes, in
 * writeback and in fsync alike.
 */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define CHUNK 10007          /* unaligned: partial pages everywhere */
#define MAX_CHUNKS 400

static void chunk_data(char *buf, unsigned round, unsigned i)
{
	t_fill(buf, CHUNK, ((uint64_t)round << 20) | i);
}

static void child(const char *dir, unsigned round, int fd)
{
	struct wbc_config cfg = t_config(2u << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	char spec[600], buf[CHUNK];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	if (wbc_cache_open(&cfg, &c) || wbc_dev_add(c, spec, &dev) ||
	    wbc_file_open(dev, "c", WBC_O_CREAT | WBC_O_TRUNC, &f))
		_exit(3);
	uint64_t s = round * 77 + 1;
	for (unsigned i = 0; i < MAX_CHUNKS; i++) {
		chunk_data(buf, round, i);
		if (wbc_pwrite(f, buf, CHUNK, (uint64_t)i * CHUNK) != CHUNK)
			_exit(4);
		if (t_rand(&s) % 3 == 0) {            /* fsync every few chunks */
			if (wbc_fsync(f))
				_exit(5);
			uint32_t acked = i + 1;       /* chunks 0..i are durable */
			if (write(fd, &acked, sizeof(acked)) != sizeof(acked))
				_exit(6);
		}
	}
	wbc_file_close(f);
	wbc_cache_close(c);
	_exit(0);
}

int main(void)
{
	const char *env = getenv("WBCACHE_CRASH_KILLS");
	unsigned kills = env ? (unsigned)atoi(env) : 100;
	char *dir = t_mkdtemp();
	char path[700], buf[CHUNK], got[CHUNK];
	snprintf(path, sizeof(path), "%s/c", dir);
	uint64_t s = 12345;
	unsigned total_acked = 0;
	for (unsigned round = 0; round < kills; round++) {
		int p[2];
		CHECK_EQ(pipe(p), 0);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (!pid) {
			close(p[0]);
			child(dir, round, p[1]);
		}
		close(p[1]);
		unsigned want = (unsigned)(t_rand(&s) % 40), acked = 0;
		uint32_t a;
		while (acked < want && read(p[0], &a, sizeof(a)) == sizeof(a))
			acked = a;
		struct timespec ts = { 0, (long)(t_rand(&s) % 3000) * 1000 };
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		/* reports already in the pipe count too: they were sent after a
		 * successful fsync */
		while (read(p[0], &a, sizeof(a)) == sizeof(a))
			acked = a;
		close(p[0]);
		int status;
		CHECK_EQ(waitpid(pid, &status, 0), pid);
		CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
		int fd = open(path, O_RDONLY);
		CHECK(fd >= 0);
		for (unsigned i = 0; i < acked; i++) {
			chunk_data(buf, round, i);
			if (pread(fd, got, CHUNK, (off_t)i * CHUNK) != CHUNK || memcmp(got, buf, CHUNK)) {
				fprintf(stderr, "round %u: chunk %u of %u fsynced chunks is not on disk\n",
					round, i, acked);
				return 1;
			}
		}
		close(fd);
		total_acked += acked;
	}
	t_rmdir(dir);
	printf("crash: %u kills, %u fsynced chunks checked\n", kills, total_acked);
	CHECK(total_acked > 0);
	return 0;
}
