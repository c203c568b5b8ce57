/*
 * Per-device rate estimation: write bandwidth, the dirty rate limit, and
 * the device's proportion of recent writeback completions.
 *
 * WRITE BANDWIDTH (the kernel's wb_update_write_bandwidth): every >= 200 ms
 * (BW_INTERVAL), with elapsed time e and bytes completed d:
 *       write_bw       := (write_bw * (T - e) + (d / e) * e) / T      T = 3 s
 *   (a 3 s moving window; e capped at T as the weight, the rate d / e
 *   over the whole interval), then a second smoothing that
 *   follows write_bw only while it keeps moving one way:
 *       avg_write_bw   += (old_write_bw - avg_write_bw) / 8
 * The rate is measured over the time the device had I/O in flight, not
 * the wall time: a device that writers keep half idle is not half as fast.
 * An interval with nothing completed, or busy under 1/8 of it, is idle:
 * no measurement, the window restarts.  Unlike the kernel, the first measured
 * interval replaces the initial 100 MB/s guess (and seeds dirty_ratelimit)
 * instead of being blended into it: a guess is not a measurement, and
 * blending it in makes a fast device look slow for the first seconds,
 * which holds dirty_ratelimit down for as long.
 *
 * DIRTY RATELIMIT (wb_update_dirty_ratelimit): the rate each writer may
 * dirty at the setpoint.  With N writers each dirtying at task_ratelimit =
 * dirty_ratelimit * pos_ratio, the device sees dirty_rate = N *
 * task_ratelimit, so the rate that would balance dirtying with writeback is
 *       balanced = task_ratelimit * write_bw / dirty_rate   (= write_bw / N)
 * dirty_ratelimit moves towards it in damped steps: only when balanced and
 * task_ratelimit agree on the direction (below the setpoint, up; above,
 * down), by 1/8 of the gap, less the closer it already is.  Two changes
 * from the kernel, both for a device whose bandwidth changes: write_bw in
 * that formula is the rate written over the same interval as dirty_rate
 * (the 3 s average lags a 10x drop by seconds and makes the two estimates
 * disagree meanwhile), balanced is capped at that rate, and a gap of 2x
 * or more (with the position agreeing) is closed by up to 2x per update
 * instead of by 1/8 steps.
 *
 * A device whose writers are local-throttle threads (throttle.c, LOCAL
 * THROTTLE) is balanced on the line they use, its own domain's, in the
 * intervals in which one of them was throttled.
 *
 * PROPORTIONS (flexible proportions): each device counts the pages whose
 * writeback completed; every PROP_PERIOD (3 s) all counts halve.  A
 * device's share of the dirty threshold is its count over the sum.
 *
 * SLICE: half a second of avg_write_bw, rounded down to 4 MiB and never
 * below it (MIN_WRITEBACK): the pages one file may write per pass (the
 * kernel's writeback_chunk_size since 2011).  A device with chunk=SIZE
 * (for experiments: the wbcache lab) has a fixed slice instead: chunk=4M
 * is the kernel before that, whose MAX_WRITEBACK_PAGES (1024 pages)
 * capped what one file got before writeback moved on to the next dirty
 * file (the file requeued behind the others: b_more_io, as ours), so
 * streaming several large files seeked between them every 4 MiB.
 */
#include "throttle/throttle.h"

#include <math.h>

#define BW_INTERVAL_NS  (200ull * 1000 * 1000)
#define BW_PERIOD_NS    (3000ull * 1000 * 1000)
#define PROP_PERIOD_NS  (3000ull * 1000 * 1000)
#define MIN_WRITEBACK   (4ull << 20)

static void update_ratelimit_locked(struct wbc_dev *dev, double elapsed_s, uint64_t dirtied,
				    double written_rate)
{
	assert_held(&dev->bw_lock);
	struct wbc_cache *c = dev->cache;
	struct dom d;
	/* writers throttled on the device's own line (local throttle) since
	 * the last update: their line is the one to balance */
	bool local = atomic_exchange_explicit(&dev->local_throttled, false, memory_order_relaxed);
	/* a group whose line held writers to the device: theirs is the lower
	 * of it and the cache's (writer_pos_ratio).  Without it, writers
	 * held by a group while the cache was below its freerun were never
	 * balanced: dirty_ratelimit stayed at the device's whole bandwidth
	 * for any number of them */
	struct wbc_group *grp = atomic_exchange_explicit(&dev->throttled_group, NULL,
							 memory_order_relaxed);
	uint64_t now = wbc_now_ns();
	if (local)
		dom_local(dev, &d);
	else
		dom_global_writer(dev, &d, now);   /* as its writers see it: without
						    * dead devices' pages, which took
						    * dirty_ratelimit to 1 page/s */
	bool below = d.dirty < d.setpoint, held = d.dirty > d.freerun;
	double wb_thresh;
	double pos = pos_ratio_cubic(d.setpoint, d.dirty, d.limit);
	if (!local && dev->strict_limit) {
		/* the strict line (writer_pos_ratio), as the kernel's
		 * wb_update_dirty_ratelimit under strictlimit: held by it
		 * while the cache was below freerun, the writers were never
		 * balanced (4 writers on a 20 MB/s strict device each kept
		 * the whole 17 MB/s) */
		double wb_dirty = (double)ctr_unclean(&dev->ctr);
		double st = WBC_MIN(WBC_MAX(dev_wb_thresh(dev, d.thresh), 1), d.thresh);
		double sp = (st + st * d.bg_thresh / d.thresh) / 2;
		if (wb_dirty > sp) {
			double spos = pos_ratio_cubic(sp, wb_dirty, st);
			if (spos < pos) {
				pos = spos;
				below = false;
			}
			held = true;
		}
	} else if (!local) {
		pos *= wb_pos_ratio(dev, &d, &wb_thresh);
	}
	if (grp) {
		struct dom md;
		dom_group_writer(grp, dev, &md, now);
		if (md.dirty > md.freerun || held) {
			double mpos = pos_ratio_cubic(md.setpoint, md.dirty, md.limit);
			if (mpos < pos) {
				pos = mpos;
				below = md.dirty < md.setpoint;
			}
			held = true;
		}
	}
	if (!held)
		return;            /* nobody is throttled: nothing to balance */
	double ratelimit = (double)atomic_load(&dev->dirty_ratelimit);
	double task = ratelimit * pos;
	double dirty_rate = (double)dirtied / elapsed_s;
	/* the rate written over the same interval as dirty_rate, not the
	 * 3 s average: after a bandwidth change the two would disagree for
	 * seconds and hold dirty_ratelimit where it was */
	double write_bw = written_rate / (double)c->page_size;
	double balanced = task * write_bw / WBC_MAX(dirty_rate, 1);
	/* no writer usefully dirties faster than the device writes: when the
	 * writers are held at the limit (not by their rate) the formula above
	 * reads their shortfall as headroom */
	balanced = WBC_MIN(balanced, write_bw);
	double prev = dev->balanced_ratelimit > 0 ? dev->balanced_ratelimit : balanced;
	double step = 0;
	if (below) {
		double x = WBC_MIN(WBC_MIN(prev, balanced), task);
		if (ratelimit < x)
			step = x - ratelimit;
	} else {
		double x = WBC_MAX(WBC_MAX(prev, balanced), task);
		if (ratelimit > x)
			step = ratelimit - x;
	}
	/* slow down when close: no point chasing a target that itself
	 * fluctuates (shift = ratelimit / (2 step + 1), as the kernel) */
	double shift = ratelimit / (2 * step + 1);
	step = shift < 63 ? ceil(ldexp(step, -(int)shift) / 8) : 0;
	/* far off (2x or more) with the position agreeing: move at once by
	 * up to 2x rather than by 1/8 steps (a device whose bandwidth fell
	 * 10x would otherwise sit at the limit for many seconds) */
	if (!below && balanced < ratelimit / 2)
		step = ratelimit - WBC_MAX(balanced, ratelimit / 2);
	else if (below && balanced > ratelimit * 2)
		step = WBC_MIN(balanced, ratelimit * 2) - ratelimit;
	if (ratelimit < balanced)
		ratelimit = WBC_MIN(ratelimit + step, balanced);
	else
		ratelimit = WBC_MAX(ratelimit - step, balanced);
	dev->balanced_ratelimit = balanced;
	atomic_store(&dev->dirty_ratelimit, (uint64_t)WBC_MAX(ratelimit, 1));
}

void bandwidth_update(struct wbc_dev *dev, uint64_t now)
{
	if (pthread_mutex_trylock(&dev->bw_lock))
		return;            /* another thread is updating it */
	uint64_t elapsed = now - dev->bw_stamp_ns;
	if (now < dev->bw_stamp_ns || elapsed < BW_INTERVAL_NS) {
		pthread_mutex_unlock(&dev->bw_lock);
		return;
	}
	uint64_t done = atomic_load(&dev->completed_bytes);
	uint64_t dirtied = (uint64_t)pcount_sum(&dev->dirtied_pages);
	uint64_t delta = done - dev->bw_completed;
	uint64_t ddelta = dirtied - dev->bw_dirtied;
	dev->bw_stamp_ns = now;
	dev->bw_completed = done;
	dev->bw_dirtied = dirtied;
	uint64_t busy_total = dev_busy_ns(dev, now);
	uint64_t busy = busy_total - dev->bw_busy;
	dev->bw_busy = busy_total;
	if (!delta || busy < elapsed / 8) {
		pthread_mutex_unlock(&dev->bw_lock);
		/* (nearly) idle: no measurement, restart; but what it wrote
		 * counts in its proportion all the same (a fast device kept
		 * mostly idle by its writers had a share of 0 beside a slow,
		 * busy one, and its writers were throttled by its pages) */
		if (delta >> dev->cache->page_shift)
			prop_account(dev, delta >> dev->cache->page_shift);
		return;
	}
	/* bytes per second of time the device had work: what it can do, not
	 * how much it was asked to do (over the whole interval, however long:
	 * @delta is all it wrote since the last update) */
	double rate = (double)delta * 1e9 / (double)WBC_MIN(busy, elapsed);
	/* the interval's weight in the 3 s window: all of it at most */
	double e = (double)WBC_MIN(elapsed, BW_PERIOD_NS);
	uint64_t old = atomic_load(&dev->write_bw);
	uint64_t cur = (uint64_t)(((double)old * ((double)BW_PERIOD_NS - e) + rate * e) /
				  (double)BW_PERIOD_NS);
	uint64_t avg = atomic_load(&dev->avg_write_bw);
	if (!dev->bw_measured) {
		dev->bw_measured = true;
		old = cur = avg = (uint64_t)rate;
		atomic_store(&dev->dirty_ratelimit,
			     WBC_MAX(cur >> dev->cache->page_shift, (uint64_t)1));
	}
	if (avg > old && old >= cur)
		avg -= (avg - old) / 8;
	else if (avg < old && old <= cur)
		avg += (old - avg) / 8;
	atomic_store(&dev->avg_write_bw, avg);
	atomic_store(&dev->write_bw, cur);
	update_ratelimit_locked(dev, (double)elapsed / 1e9, ddelta,
				(double)delta * 1e9 / (double)elapsed);
	pthread_mutex_unlock(&dev->bw_lock);
	prop_account(dev, delta >> dev->cache->page_shift);
}

void prop_account(struct wbc_dev *dev, uint64_t pages)
{
	struct wbc_cache *c = dev->cache;
	uint64_t now = wbc_now_ns();
	pthread_mutex_lock(&c->dev_lock);
	pthread_mutex_lock(&c->prop_lock);
	/* signed: @now was read before the locks, and a thread that took
	 * them first with a later clock may have moved the stamp past it
	 * (unsigned, the difference wrapped: every count halved to nothing,
	 * and this device's share became the whole) */
	while ((int64_t)(now - c->prop_stamp_ns) >= (int64_t)PROP_PERIOD_NS) {
		c->prop_stamp_ns += PROP_PERIOD_NS;
		c->prop_total /= 2;
		for (struct wbc_dev *d = c->devs; d; d = d->next)
			d->prop_events /= 2;
		if (c->prop_total < 1e-9) {            /* long idle: start over */
			c->prop_stamp_ns = now;
			break;
		}
	}
	dev->prop_events += (double)pages;
	c->prop_total += (double)pages;
	pthread_mutex_unlock(&c->prop_lock);
	pthread_mutex_unlock(&c->dev_lock);
}

double prop_fraction(struct wbc_dev *dev)
{
	struct wbc_cache *c = dev->cache;
	pthread_mutex_lock(&c->dev_lock);
	unsigned n = c->nr_devs;
	pthread_mutex_lock(&c->prop_lock);
	double f = c->prop_total > 0 ? dev->prop_events / c->prop_total : 1.0 / WBC_MAX(n, 1u);
	pthread_mutex_unlock(&c->prop_lock);
	pthread_mutex_unlock(&c->dev_lock);
	return f;
}

long writeback_slice_pages(struct wbc_dev *dev)
{
	/* chunk=SIZE (for experiments): the fixed chunk of old kernels */
	if (dev->chunk_bytes)
		return (long)WBC_MAX(dev->chunk_bytes >> dev->cache->page_shift, (uint64_t)1);
	uint64_t bytes = atomic_load(&dev->avg_write_bw) / 2;
	bytes -= bytes % MIN_WRITEBACK;
	if (bytes < MIN_WRITEBACK)
		bytes = MIN_WRITEBACK;
	return (long)(bytes >> dev->cache->page_shift);
}
