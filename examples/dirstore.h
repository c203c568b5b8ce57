/*
 * dirstore: an example wbcache backend.  Each cached file is a file in a
 * local directory, written with plain pwritev(); every batch of I/Os pays
 * a simulated network round trip first, as a remote store would.
 *
 * Built only against the installed public headers:
 *   cc -c dirstore.c $(pkg-config --cflags wbcache)
 */
#ifndef DIRSTORE_H
#define DIRSTORE_H

#include <wbcache_backend.h>

/* A dirstore over directory @dir (it must exist) whose every batch of
 * I/Os waits @rtt_us microseconds before it runs, served by @threads
 * worker threads.  Returns 0 and sets *ops and *ctx (for
 * wbc_dev_add_backend), or a negative errno. */
int dirstore_new(const char *dir, unsigned rtt_us, unsigned threads,
		 const struct wbc_backend_ops **ops, void **ctx);

/* What the backend did (for tests and reports). */
struct dirstore_stats {
	unsigned long long batches;     /* batches of I/Os served */
	unsigned long long ios;         /* I/Os completed */
	unsigned long long flushes;     /* flush() calls */
};
void dirstore_stats(void *ctx, struct dirstore_stats *st);

#endif
