/*
 * A sync waits for the writes in flight when it waits, not for those
 * that others start meanwhile: an fsync whose write is still out must not
 * hold up a wbc_dev_sync that began before it (else a sync among
 * fsyncs that keep the device busy never ends).
 *   - file C dirty; a sync writes it (its write is held by the backend)
 *     and waits for it;
 *   - meanwhile an fsync of file B starts a write, held too;
 *   - C's write completes: the sync returns while B's write is still out;
 *   - B's write completes: its fsync returns.
 * The backend here (the public interface) holds every write until the
 * test completes it.
 */
#include "testutil.h"
#include "internal.h"
#include "held_backend.h"

#define PS 4096

static wbc_dev *dev;
static wbc_file *fb;
static atomic_int sync_done, fsync_done;

static void *syncer(void *arg)
{
	(void)arg;
	CHECK_EQ(wbc_dev_sync(dev), 0);
	atomic_store(&sync_done, 1);
	return NULL;
}

static void *fsyncer(void *arg)
{
	(void)arg;
	CHECK_EQ(wbc_pwrite(fb, "b", 1, 0), 1);
	CHECK_EQ(wbc_fsync(fb), 0);
	atomic_store(&fsync_done, 1);
	return NULL;
}


/* someone waits in the device's bio pool: the sync, for its writes */
static bool pool_waiter(void)
{
	pthread_mutex_lock(&dev->io_lock);
	bool w = dev->io_waiters > 0;
	pthread_mutex_unlock(&dev->io_lock);
	return w;
}

/* complete the held write at @i */
static void complete(int i)
{
	pthread_mutex_lock(&hb_lock);
	struct wbc_io *io = hb_held[i];
	hb_held[i] = NULL;
	pthread_mutex_unlock(&hb_lock);
	CHECK(io);
	wbc_io_complete(io, (ssize_t)io->len);
}

int main(void)
{
	wbc_cache *c = t_quiet_cache(16 << 20);
	CHECK_EQ(wbc_dev_add_backend(c, &hb_ops, NULL, "", &dev), 0);
	wbc_file *fc;
	CHECK_EQ(wbc_file_open(dev, "b", WBC_O_CREAT, &fb), 0);
	CHECK_EQ(wbc_file_open(dev, "c", WBC_O_CREAT, &fc), 0);
	static char page[PS];
	CHECK_EQ(wbc_pwrite(fb, page, PS, 0), PS);   /* B: sized and clean before the sync */
	CHECK_EQ(wbc_fsync(fb), 0);
	CHECK_EQ(wbc_pwrite(fc, page, PS, 0), PS);   /* C: dirty */

	pthread_mutex_lock(&hb_lock);
	hb_hold = true;
	pthread_mutex_unlock(&hb_lock);
	pthread_t ts, tf;
	CHECK_EQ(pthread_create(&ts, NULL, syncer, NULL), 0);
	CHECK(T_WAIT_UNTIL(hb_count() == 1));   /* the sync's write of C */
	CHECK(T_WAIT_UNTIL(pool_waiter()));    /* the sync waits for it */
	CHECK_EQ(pthread_create(&tf, NULL, fsyncer, NULL), 0);
	CHECK(T_WAIT_UNTIL(hb_count() == 2));   /* B's fsync write, out too */
	complete(0);
	/* the sync returns with B's write still out */
	CHECK(T_WAIT_UNTIL(atomic_load(&sync_done)));
	CHECK(!atomic_load(&fsync_done));
	CHECK_EQ(pthread_join(ts, NULL), 0);
	printf("a sync returned while a later fsync's write was still out\n");
	pthread_mutex_lock(&hb_lock);
	hb_hold = false;
	pthread_mutex_unlock(&hb_lock);
	complete(1);
	CHECK_EQ(pthread_join(tf, NULL), 0);
	CHECK(atomic_load(&fsync_done));
	CHECK_EQ(wbc_file_close(fb), 0);
	CHECK_EQ(wbc_file_close(fc), 0);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("sync_drain: ok\n");
	return 0;
}
