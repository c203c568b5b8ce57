/*
 * wbcopy: copy standard input into DIR/NAME through a wbcache cache, as a
 * program of your own would use the library: open a cache, add a device
 * over a directory, write, fsync, print what the engine did.
 *
 *   cc wbcopy.c $(pkg-config --cflags --libs wbcache) -o wbcopy
 *   mkdir -p /var/tmp/out && ./wbcopy /var/tmp/out copy.bin </etc/services
 *
 * Built only against the installed header and library.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wbcache.h>

/* a name the library's internals once exported too: no clash now */
void iput(void);
void iput(void)
{
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: wbcopy DIR NAME <input\n");
		return 2;
	}
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.mem_bytes = 16u << 20;
	wbc_cache *cache = NULL;   /* wbc_cache_open leaves it as it was on failure */
	wbc_dev *dev;
	wbc_file *f;
	char spec[4096], msg[256] = "";
	snprintf(spec, sizeof(spec), "dir:%s", argv[1]);
	int err = wbc_cache_open(&cfg, &cache);
	if (err || (err = wbc_dev_add_msg(cache, spec, &dev, msg, sizeof(msg)))) {
		fprintf(stderr, "wbcopy: %s\n", msg[0] ? msg : wbc_strerror(err));
		wbc_cache_close(cache);   /* NULL: nothing to close */
		return 1;
	}
	if ((err = wbc_file_open(dev, argv[2], WBC_O_CREAT | WBC_O_TRUNC, &f))) {
		fprintf(stderr, "wbcopy: %s: %s\n", argv[2], wbc_strerror(err));
		wbc_cache_close(cache);
		return 1;
	}
	char buf[1 << 16];
	uint64_t off = 0;
	ssize_t n;
	int werr = 0;   /* a failed read or write: the copy is short */
	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) > 0) {
		ssize_t w = wbc_pwrite(f, buf, (size_t)n, off);
		if (w != n) {
			werr = w < 0 ? (int)w : -EIO;
			fprintf(stderr, "wbcopy: write: %s\n", wbc_strerror(werr));
			break;
		}
		off += (uint64_t)n;
	}
	if (n < 0) {
		werr = -errno;
		fprintf(stderr, "wbcopy: read: %s\n", strerror(errno));
	}
	err = wbc_fsync(f);
	struct wbc_stats st;
	wbc_stats(cache, &st);
	printf("wbcache %s: %llu bytes copied, %llu written back in %llu I/Os%s%s\n", wbc_version(),
	       (unsigned long long)off, (unsigned long long)st.written_back_bytes,
	       (unsigned long long)st.write_ios, err ? ", fsync: " : "", err ? wbc_strerror(err) : "");
	wbc_file_close(f);
	int cerr = wbc_cache_close(cache);
	return werr || err || cerr ? 1 : 0;
}
