/*
 * The file backend where the kernel refuses io_uring (src/backend/file.c):
 * as container runtimes' default seccomp profiles do, and
 * kernel.io_uring_disabled=2.  A child process installs a seccomp filter
 * that fails io_uring_setup with EPERM (checked: a direct io_uring_setup
 * then fails), then adds "file:" and "dir:" devices with default options:
 *   - the add succeeds (it failed: "io_uring setup failed: Operation not
 *     permitted"), and says the I/O goes through worker threads;
 *   - 8 MiB written at odd offsets through a 2 MiB cache (writeback, and
 *     reads of evicted pages) read back right through the cache, and the
 *     backing files hold every byte after fsync;
 *   - a read of 8 KiB of a 5,000-byte backing file gives its 5,000 bytes
 *     (the workers' short read at the end of the file).
 */
#include "testutil.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define LEN (8u << 20)

static char *dir;

static void refuse_io_uring(void)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = { .len = sizeof(prog) / sizeof(prog[0]), .filter = prog };
	CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	CHECK_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp), 0);
	char params[120] = { 0 };
	errno = 0;
	CHECK_EQ(syscall(__NR_io_uring_setup, 8, params), -1);
	CHECK_EQ(errno, EPERM);
}

/* Write @LEN bytes to @name of @spec's device in odd pieces, read them
 * back, fsync, and compare the backing file at @path. */
static void round_trip(const char *spec, const char *name, const char *path)
{
	struct wbc_config cfg = t_config(2u << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	char msg[256] = "";
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	int r = wbc_dev_add_msg(c, spec, &dev, msg, sizeof(msg));
	printf("    %s: add %d %s\n", spec, r, msg);
	CHECK_EQ(r, 0);
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	char *data = malloc(LEN), *back = malloc(LEN);
	CHECK(data && back);
	t_fill(data, LEN, 5);
	for (size_t off = 0; off < LEN;) {
		size_t n = LEN - off < 12345 ? LEN - off : 12345;
		CHECK_EQ(wbc_pwrite(f, data + off, n, off), (ssize_t)n);
		off += n;
	}
	CHECK_EQ(wbc_pread(f, back, LEN, 0), (ssize_t)LEN);   /* mostly evicted */
	CHECK(!memcmp(back, data, LEN));
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	struct wbc_stats st;
	CHECK_EQ(wbc_cache_close_stats(c, &st), 0);
	CHECK_EQ(st.lost_bytes, 0);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	memset(back, 0, LEN);
	CHECK_EQ(pread(fd, back, LEN, 0), (ssize_t)LEN);
	CHECK(!memcmp(back, data, LEN));
	close(fd);
	printf("    8 MiB through a 2 MiB cache: read back, and in %s\n", path);
	free(data);
	free(back);
}

/* A backing file of 5,000 bytes read as a page and more. */
static void short_read(void)
{
	char path[600], spec[700], buf[8192], want[8192];
	snprintf(path, sizeof(path), "%s/short", dir);
	t_fill(want, 5000, 9);
	memset(want + 5000, 0, sizeof(want) - 5000);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, want, 5000) == 5000);
	close(fd);
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	struct wbc_config cfg = t_config(2u << 20, 4096);
	wbc_cache *c;
	wbc_dev *dev;
	wbc_file *f;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add(c, spec, &dev), 0);
	CHECK_EQ(wbc_file_open(dev, "short", 0, &f), 0);
	memset(buf, 0x77, sizeof(buf));
	CHECK_EQ(wbc_pread(f, buf, sizeof(buf), 0), 5000);
	CHECK(!memcmp(buf, want, 5000));
	CHECK_EQ(wbc_file_close(f), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("    a 5,000-byte file read as 8 KiB: its 5,000 bytes\n");
}

int main(void)
{
	dir = t_mkdtemp();
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		refuse_io_uring();
		printf("io_uring_setup refused (seccomp, EPERM)\n");
		char spec[700], path[600];
		snprintf(path, sizeof(path), "%s/one", dir);
		snprintf(spec, sizeof(spec), "file:%s", path);
		round_trip(spec, "", path);
		snprintf(spec, sizeof(spec), "dir:%s", dir);
		snprintf(path, sizeof(path), "%s/two", dir);
		round_trip(spec, "two", path);
		short_read();
		fflush(stdout);
		_exit(0);
	}
	int ws;
	CHECK_EQ(waitpid(pid, &ws, 0), pid);
	CHECK(WIFEXITED(ws));
	CHECK_EQ(WEXITSTATUS(ws), 0);
	t_rmdir(dir);
	printf("no_uring: ok\n");
	return 0;
}
