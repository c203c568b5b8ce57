/*
 * Write bandwidth estimate per device, the kernel's wb_update_write_bandwidth:
 *
 *   every >= 200 ms (BW_INTERVAL), with elapsed time e and bytes completed d:
 *       rate            = d / e
 *       write_bw       := (write_bw * (T - e) + rate * e) / T     T = 3 s
 *   (a 3 s moving window; e is capped at T), then a second smoothing that
 *   only follows write_bw when it moves in one direction twice:
 *       avg_write_bw   += (old_write_bw - avg_write_bw) / 8
 *
 * The estimate sizes each file's writeback slice: half a second of device
 * bandwidth, rounded down to 4 MiB and never less (MIN_WRITEBACK), so a fast
 * device writes big chunks per file and a slow one does not hold one file
 * for long.  Runs in the flusher thread only.
 */
#include "internal.h"

#define BW_INTERVAL_NS  (200ull * 1000 * 1000)
#define BW_PERIOD_NS    (3000ull * 1000 * 1000)
#define MIN_WRITEBACK   (4ull << 20)

void bandwidth_update(struct wbc_dev *dev, uint64_t now)
{
	uint64_t elapsed = now - dev->bw_stamp_ns;
	if (elapsed < BW_INTERVAL_NS)
		return;
	uint64_t done = atomic_load(&dev->completed_bytes);
	uint64_t delta = done - dev->bw_completed;
	dev->bw_stamp_ns = now;
	dev->bw_completed = done;
	/* Idle: nothing completed and nothing in flight means there was no
	 * demand, not a slow device; restart the window instead. */
	bool busy;
	pthread_mutex_lock(&dev->io_lock);
	busy = dev->inflight > 0;
	pthread_mutex_unlock(&dev->io_lock);
	if (!delta && !busy)
		return;
	if (elapsed > BW_PERIOD_NS)
		elapsed = BW_PERIOD_NS;
	double rate = (double)delta * 1e9 / (double)(now - (now - elapsed));
	uint64_t old = atomic_load(&dev->write_bw);
	double bw = ((double)old * (double)(BW_PERIOD_NS - elapsed) +
		     rate * (double)elapsed) / (double)BW_PERIOD_NS;
	uint64_t cur = (uint64_t)bw;
	uint64_t avg = dev->avg_write_bw;
	if (avg > old && old >= cur)
		avg -= (avg - old) / 8;
	else if (avg < old && old <= cur)
		avg += (old - avg) / 8;
	dev->avg_write_bw = avg;
	atomic_store(&dev->write_bw, cur);
}

long writeback_slice_pages(struct wbc_dev *dev)
{
	uint64_t bytes = dev->avg_write_bw / 2;
	bytes -= bytes % MIN_WRITEBACK;
	if (bytes < MIN_WRITEBACK)
		bytes = MIN_WRITEBACK;
	return (long)(bytes >> dev->cache->page_shift);
}
