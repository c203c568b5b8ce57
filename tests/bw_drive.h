/* Driving a device's bandwidth estimate (throttle/bandwidth.c) with
 * made-up times and counts: the device's own flusher sees times before
 * them and leaves the estimate alone.  For tests that include
 * "internal.h". */
#ifndef WBC_BW_DRIVE_H
#define WBC_BW_DRIVE_H

/* The estimate's last update at @t, with what the device did so far. */
static inline void bw_park(struct wbc_dev *dev, uint64_t t)
{
	pthread_mutex_lock(&dev->bw_lock);
	dev->bw_stamp_ns = t;
	dev->bw_completed = atomic_load(&dev->completed_bytes);
	dev->bw_busy = dev_busy_ns(dev, t);
	pthread_mutex_unlock(&dev->bw_lock);
}

/* @bytes completed and @busy ns busy since, then an update at @now. */
static inline void bw_feed(struct wbc_dev *dev, uint64_t now, uint64_t bytes, uint64_t busy)
{
	pthread_mutex_lock(&dev->io_lock);
	dev->busy_ns += busy;
	pthread_mutex_unlock(&dev->io_lock);
	atomic_fetch_add(&dev->completed_bytes, bytes);
	bandwidth_update(dev, now);
}

#endif
