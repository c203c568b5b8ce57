/*
 * Layer throttle: the dirty thresholds of the cache and its groups, the
 * throttling domains and their control lines, the IO-less throttle of
 * writers (throttle/throttle.c, balance_dirty_pages), and the devices'
 * rate estimates and proportions (throttle/bandwidth.c).  The top of the
 * engine's layers: above writeback, whose flushers it kicks and whose
 * retry state and busy time it reads; the counters it judges are mm's
 * (mm/counters.h, mm/account.c).
 *
 * LOCKS (the global order is at the top of src/internal.h).  throttle
 * owns dev->bw_lock (the rate estimates: only ever trylocked, so no
 * thread waits for it; dev_busy_ns takes io_lock inside it) and
 * cache->prop_lock (the proportions: taken inside cache->dev_lock).  It
 * takes dev_lock to walk the devices.  Call balance_dirty_pages, which
 * sleeps, with no lock held but the writer's inode->rwsem, shared
 * (src/internal.h); over_bg_pages and over_bg_thresh under any
 * lock (they take none); the rest with no lock held.
 */
#ifndef WBC_THROTTLE_H
#define WBC_THROTTLE_H

#include "writeback/writeback.h"

/* The numbers of one throttling domain, read once per decision (pages). */
struct dom {
	double dirty, thresh, bg_thresh, freerun, setpoint, limit;
};

/* throttle.c */
void thresholds_compute(struct wbc_cache *c);
/* @bytes of a limit in whole pages of @c, rounded up as the kernel's
 * DIV_ROUND_UP (domain_dirty_limits): dirty_bytes, max_bytes, a group's */
uint64_t limit_pages(const struct wbc_cache *c, uint64_t bytes);
bool over_bg_thresh(struct wbc_cache *c);
/* Dirty pages above the background threshold of the cache or of the
 * group furthest above its own; 0 or less when none is above. */
long over_bg_pages(struct wbc_cache *c);
/* Pause the calling thread as the control line says.  Returns 0, or the
 * device's error when the thread is to be throttled and the device is
 * dead (dev_dead_error): the thread then stays due (throttle_due) and
 * must not dirty more before a call that returns 0. */
int balance_dirty_pages(struct wbc_dev *dev, struct wbc_group *grp);
/* Count one newly dirtied page (of cache @c); true when the caller should
 * call balance_dirty_pages (its thread reached its check interval, or
 * the interval is another cache's). */
bool throttle_dirtied(struct wbc_cache *c);
/* Between these, balance_dirty_pages owes its pause instead of sleeping
 * (wbc_pwrite_nowait): throttle_owed() is then true and the write stops
 * there; end returns the pause. */
void throttle_defer_begin(void);
bool throttle_owed(void);
uint64_t throttle_defer_end(void);
/* The calling thread is due for balance_dirty_pages before it dirties a
 * page of cache @c (its last check failed, or its interval is another
 * cache's). */
bool throttle_due(struct wbc_cache *c);
/* One check under the 2011 rule (throttle=2011, for experiments; throttle.c,
 * THE 2011 RULE): the pause, the pages before the next check, and whether
 * the writer pauses again after it. */
struct step_2011 {
	uint64_t pause_ns;
	long next_check;
	bool again;
};
void throttle_2011_step(const struct dom *d, double wb_dirty, double wb_thresh, double rate,
			long nr_dirtied, struct step_2011 *st);
double pos_ratio_cubic(double setpoint, double dirty, double limit);
void dom_global(struct wbc_cache *c, struct dom *d);
/* The domain of a local-throttle thread writing to @dev: the device's own
 * pages against its share (throttle.c, LOCAL THROTTLE). */
void dom_local(struct wbc_dev *dev, struct dom *d);
void dom_group(struct wbc_group *g, struct dom *d);
/* The global domain, and group @g's, as a writer to @dev sees them: the
 * pages of dead devices other than @dev left out (throttle.c). */
void dom_global_writer(struct wbc_dev *dev, struct dom *d, uint64_t now);
void dom_group_writer(struct wbc_group *g, struct wbc_dev *dev, struct dom *d, uint64_t now);
double wb_pos_ratio(struct wbc_dev *dev, const struct dom *d, double *wb_thresh);
double dev_wb_thresh(struct wbc_dev *dev, double thresh);
/* The most pages one thread may dirty past the limit before it checks:
 * the documented slack of invariant 2, per writing thread. */
uint64_t throttle_slack_pages(struct wbc_cache *c);

/* bandwidth.c */
void bandwidth_update(struct wbc_dev *dev, uint64_t now);   /* any thread */
void prop_account(struct wbc_dev *dev, uint64_t pages);
double prop_fraction(struct wbc_dev *dev);
long writeback_slice_pages(struct wbc_dev *dev);
#define WBC_INIT_BW (100ull << 20)   /* Linux INIT_BW: 100 MB/s before any sample */

#endif
