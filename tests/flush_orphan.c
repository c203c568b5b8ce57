/*
 * A failed flush of the whole device (wbc_dev_sync) is the error of every
 * file written since the device's last good flush (doc/design.md), also of
 * a file whose inode went meanwhile (written and closed, no handle open
 * when the flush failed): the error is kept by name, and the next opener's
 * fsync tells it, as a failed write's is.
 *   1. written, closed, and written back by the sync whose flush fails
 *      (its inode was let go before the flush: the error was no one's).
 *   2. a file left open at wbc_cache_close() whose close fails in the
 *      backend after it returned (as a rados close's size write or
 *      unlock, sent asynchronously): the backend's next flush of the
 *      whole device reports it, and wbc_cache_close() returns it (it
 *      closed such files after its last flush: 0, the error printed by
 *      the backend's destroy at best).
 *   3. the same close under a stacked device of the same cache: the
 *      stacked device's stop closes its lower file (the lower device's
 *      backend fails that close asynchronously), and the lower device is
 *      stopped after it: wbc_cache_close() returns the error (the lower
 *      device flushed only after closes of its own stop: 0, lost).
 *   4. a file written and closed before wbc_cache_close(): its last
 *      reference is its sync's, let go after that sync's flush, and its
 *      close fails: wbc_cache_close() returns the error (0 before).
 * The backend (tests/store_backend.h) fails the next flush on demand.
 */
#include "store_backend.h"

static wbc_cache *c;
static wbc_dev *dev;

static void open_cache(bool periodic)
{
	struct wbc_config cfg = t_config(16u << 20, 4096);
	cfg.dirty_writeback_centisecs = periodic ? 1 : 0;
	cfg.dirty_expire_centisecs = 1;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_backend(c, &sb_ops, NULL, "", &dev), 0);
}

/* 2: a close whose (asynchronous) failure the next flush reports */
static bool close_fails;
static void failing_close(void *ctx, void *file)
{
	sb_close(ctx, file);
	pthread_mutex_lock(&sb_lock);
	if (close_fails)
		sb_fail_flush = true;
	pthread_mutex_unlock(&sb_lock);
}

static void write_close(const char *name)
{
	wbc_file *f;
	char buf[8192];
	memset(buf, 'x', sizeof(buf));
	CHECK_EQ(wbc_file_open(dev, name, WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	CHECK_EQ(wbc_file_close(f), 0);
}

static void reopen_told(const char *name)
{
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, name, 0, &f), 0);
	CHECK_EQ(wbc_fsync(f), -EIO);      /* the flush lost its writes */
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
}

int main(void)
{
	/* 1 */
	open_cache(false);
	write_close("a");
	sb_set(&sb_fail_flush, true);
	CHECK_EQ(wbc_dev_sync(dev), -EIO);
	reopen_told("a");
	printf("1. written by the sync whose flush failed: the next opener is told\n");
	CHECK_EQ(wbc_cache_close(c), 0);

	/* 2 */
	struct wbc_config cfg = t_config(16u << 20, 4096);
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	struct wbc_backend_ops ops = sb_ops;
	ops.close = failing_close;
	CHECK_EQ(wbc_dev_add_backend(c, &ops, NULL, "", &dev), 0);
	wbc_file *f;
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &f), 0);
	CHECK_EQ(wbc_pwrite(f, "y", 1, 0), 1);
	CHECK_EQ(wbc_fsync(f), 0);
	pthread_mutex_lock(&sb_lock);
	close_fails = true;
	pthread_mutex_unlock(&sb_lock);
	CHECK_EQ(wbc_cache_close(c), -EIO);
	CHECK_EQ(sb_fail_flush, false);   /* the flush after the close took it */
	printf("2. a close that fails after wbc_cache_close's sync: its error returned\n");

	/* 3 */
	close_fails = false;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_backend(c, &ops, NULL, "", &dev), 0);
	wbc_dev *up;
	char msg[256] = "";
	CHECK_EQ(wbc_dev_add_stacked(c, dev, "img", "", &up, msg, sizeof(msg)), 0);
	CHECK_EQ(wbc_file_open(up, "", 0, &f), 0);
	CHECK_EQ(wbc_pwrite(f, "z", 1, 0), 1);
	CHECK_EQ(wbc_fsync(f), 0);
	CHECK_EQ(wbc_file_close(f), 0);
	pthread_mutex_lock(&sb_lock);
	close_fails = true;
	pthread_mutex_unlock(&sb_lock);
	CHECK_EQ(wbc_cache_close(c), -EIO);
	CHECK_EQ(sb_fail_flush, false);
	printf("3. the lower file's close under a stacked device fails: its error returned\n");

	/* 4 */
	close_fails = false;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	CHECK_EQ(wbc_dev_add_backend(c, &ops, NULL, "", &dev), 0);
	write_close("e");
	pthread_mutex_lock(&sb_lock);
	close_fails = true;
	pthread_mutex_unlock(&sb_lock);
	CHECK_EQ(wbc_cache_close(c), -EIO);
	CHECK_EQ(sb_fail_flush, false);
	printf("4. written and closed, its last reference the close's sync's: its close's "
	       "error returned\n");

	printf("flush_orphan: ok\n");
	return 0;
}
