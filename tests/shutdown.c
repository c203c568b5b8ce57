/*
 * Shutdown: closing the cache writes everything back (the backing files
 * hold the data afterwards) and leaves no thread and no file descriptor
 * behind, over 20 open/write/close cycles after a first one that sets the
 * baseline, with open handles left for the close to clean up.  Memory
 * leaks are LeakSanitizer's part (SAN=address).
 */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int main(void)
{
	char *dir = t_mkdtemp();
	char spec[600], path[700];
	snprintf(spec, sizeof(spec), "dir:%s", dir);
	static char data[300000];
	t_fill(data, sizeof(data), 4);
	int fds0 = 0, tasks0 = 0;
	for (int round = 0; round < 21; round++) {
		struct wbc_config cfg = t_config(4u << 20, 4096);
		cfg.dirty_writeback_centisecs = 0;    /* nothing written before close */
		wbc_cache *c;
		wbc_dev *d1, *d2;
		CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
		CHECK_EQ(wbc_dev_add(c, spec, &d1), 0);
		CHECK_EQ(wbc_dev_add(c, "model:bw=1G", &d2), 0);
		for (int i = 0; i < 5; i++) {
			char name[16];
			wbc_file *f, *g;
			snprintf(name, sizeof(name), "s%d", i);
			CHECK_EQ(wbc_file_open(d1, name, WBC_O_CREAT | WBC_O_TRUNC, &f), 0);
			CHECK_EQ(wbc_pwrite(f, data, sizeof(data) - (size_t)i, 0), sizeof(data) - (size_t)i);
			CHECK_EQ(wbc_file_open(d2, name, WBC_O_CREAT, &g), 0);
			CHECK_EQ(wbc_pwrite(g, data, 5000, 0), 5000);
			if (i % 2)
				CHECK_EQ(wbc_file_close(f), 0);   /* others stay open */
		}
		CHECK_EQ(wbc_cache_close(c), 0);
		for (int i = 0; i < 5; i++) {
			snprintf(path, sizeof(path), "%s/s%d", dir, i);
			int fd = open(path, O_RDONLY);
			CHECK(fd >= 0);
			static char back[300000];
			CHECK_EQ(read(fd, back, sizeof(back)), sizeof(data) - (size_t)i);
			CHECK(!memcmp(back, data, sizeof(data) - (size_t)i));
			close(fd);
		}
		if (round == 0) {
			/* the baseline after one cycle: a sanitizer's runtime
			 * starts a helper thread of its own the first time */
			fds0 = count_dir("/proc/self/fd");
			tasks0 = count_dir("/proc/self/task");
		}
		CHECK_EQ(count_dir("/proc/self/fd"), fds0);
		CHECK_EQ(count_dir("/proc/self/task"), tasks0);
	}
	t_rmdir(dir);
	printf("shutdown: ok\n");
	return 0;
}
