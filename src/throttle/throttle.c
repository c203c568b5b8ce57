/*
 * Thresholds, and the IO-less throttle of writers (the kernel's
 * balance_dirty_pages), on the page counters of mm (mm/account.c).
 *
 * THRESHOLDS (pages).  For the cache (the global domain):
 *   thresh    = dirty_bytes (in pages, rounded up), or dirty_ratio% of the cache's pages
 *   bg_thresh = dirty_background_bytes (likewise), or dirty_background_ratio% of them
 *               (if bg_thresh >= thresh: bg_thresh = thresh / 2)
 *   limit     = thresh (the arena is fixed, so thresh never moves and the
 *               kernel's slowly-following hard limit is thresh itself)
 *   freerun   = (thresh + bg_thresh) / 2
 *   setpoint  = (freerun + limit) / 2
 * A group has its own thresh (bytes or ratio), bg_thresh = thresh / 2 and
 * the same derived points.  "Dirty" for throttling is dirty + writeback;
 * background writeback compares dirty alone with bg_thresh.
 *
 * THE CONTROL LINE.  Above freerun a writer may dirty at
 *     task_ratelimit = dirty_ratelimit * pos_ratio       (pages/s)
 * where dirty_ratelimit is its device's estimate of the rate at which N
 * writers together match the device's write bandwidth (bandwidth.c), and
 *
 *     pos_ratio = 1 + ((setpoint - dirty) / (limit - setpoint))^3
 *
 *   pos_ratio
 *     2.0 +.
 *         |  `.
 *         |    `-.
 *     1.0 +-------`--.___________.                    <- balance at setpoint
 *         |                       `-.
 *         |                          `.
 *     0.0 +---------+---------------+--`+-----> dirty
 *               freerun          setpoint limit
 *
 * 2 at freerun, 1 at the setpoint, 0 at the limit, monotone between, flat
 * near the setpoint (so dirty settles there without oscillating) and steep
 * near the ends.  Times a per-device line (wb_pos_ratio) that steers each
 * device's dirty pages towards its share of the setpoint; and for a file in
 * a group, the lower of the global and the group's pos_ratio wins.
 *
 * THE PAUSE.  Each thread counts the pages it newly dirties; every
 * nr_dirtied_pause pages it computes
 *     pause = nr_dirtied / task_ratelimit - (time since its last pause)
 * sleeps that long (at most MAX_PAUSE, 200 ms, and at most the time its
 * device needs to write the pages it holds; nothing below MIN_PAUSE,
 * 10 ms: the debt carries over), and picks the next interval so that the
 * next pause is about TARGET_PAUSE.  At or over the limit pos_ratio is 0:
 * the writer sleeps that maximum at a time until dirty falls below it.  A
 * writer whose own device holds almost no dirty pages (dev_pass) is never
 * paused, so a stalled device cannot hold up writers to other devices
 * (the kernel's "give the other good wb's a pipe").  Writers never do I/O.
 *
 * A DEAD DEVICE.  A writer to be throttled for a device whose writes have
 * all failed for its retry_timeout (retry policy, dev_dead_error) is not
 * paused: balance_dirty_pages returns the device's error, and the thread
 * stays due, so that its next write checks again before it dirties
 * anything (wbc_pwrite): pauses would wait for writeback that is not
 * coming.  Its dirty pages stay, counted at risk, retried in the
 * background; once a write succeeds, writers are paused as before.
 *
 * Pages a dead device holds do not count for writers to other devices
 * (dom_writer): nothing cleans them until it recovers, and writers to
 * healthy devices must not wait for that (invariant 5).  So while a
 * device is dead, dirty pages may exceed the limit by its pages; the
 * arena still bounds them.
 *
 * SLACK (invariant 2): a thread may dirty up to its interval before it
 * checks, and the interval is capped at throttle_slack_pages(); a device
 * passing as "nearly clean" adds at most its pass allowance (at most
 * thresh / 16, and a quarter of its share; but never under dev_pass(),
 * 128 KiB and a page: with a dirty limit under 2 MiB that floor is the
 * larger, and each device's writers may hold it over the limit).
 *
 * LOCAL THROTTLE (wbc_thread_set_local_throttle; the kernel's
 * PF_LOCAL_THROTTLE).  A thread that writes into a lower device in order
 * to clean an upper device's pages (the stacked backend's workers, as
 * loop's worker and nfsd writing to a local file system in the kernel)
 * must not be throttled by the global domain: the upper device's own
 * dirty pages fill it, and they are cleaned only as fast as this thread
 * writes, so it would be slowed by a throttle its own work causes (the
 * loop device of 2021: a test of 12 s took 20 minutes).  For such a
 * thread the domain is the device it writes to:
 *     dirty     = the device's dirty + writeback pages (wb_dirty)
 *     thresh    = the device's share of the cache's thresh (dev_wb_thresh,
 *                 its fraction of recent completions within min_ratio,
 *                 max_ratio and max_bytes), at least thresh / LOCAL_MIN_PART
 *                 so that a device with no completions yet can ramp up
 *     bg_thresh = thresh x (the cache's bg_thresh / thresh)
 *     freerun, setpoint, limit derived as for every domain (above),
 * and the control line is that domain's pos_ratio times the device's
 * dirty_ratelimit, without the per-device factor (the domain is the
 * device).  The global domain's dirty count, and the pages of dead
 * devices, are not looked at; a group's line still applies to a file in
 * a group; the pass of a nearly clean device and the dead-device error
 * are as for every writer.  The kernel's rule (mm/page-writeback.c since
 * Linux 5.9, balance_dirty_pages): a PF_LOCAL_THROTTLE task free-runs
 * while wb_dirty is below dirty_freerun_ceiling(wb_thresh, wb_bg_thresh)
 * even when the global domain is above its freerun, which is our freerun
 * too; above it the kernel falls back to the global line times the wb's
 * factor, where ours keeps the device's own line (what the first version
 * of the kernel's change did: strictlimit for such tasks), so that the
 * upper device's pages never slow it.  Memory stays bounded: what a
 * local thread dirties is bounded by its device's limit, and everything
 * by the arena.
 *
 * THE 2011 RULE (throttle=2011, a device tunable; for experiments: the
 * wbcache lab).  The IO-less throttle as first posted, with
 * the two areas above the limit that were then in the kernel, rendered
 * from the sources (not a slowed-down copy of the rule above):
 *   - Linux commit ffd1f609ab10 ("writeback: introduce max-pause and
 *     pass-good dirty limits", 2011): the max-pause area (limit, limit +
 *     limit/16), where a throttled task is let go after one pause of at
 *     most MAX_PAUSE (200 ms) instead of looping until dirty falls below
 *     the limit ("8 pages per 200ms is typically more than enough to curb
 *     heavy dirtiers"), and the pass-good area up to limit + limit/8,
 *     where a task whose device is below its share (bdi_dirty <
 *     bdi_thresh) is let go too: "at least let go of the good bdi's";
 *   - Wu Fengguang's "IO-less dirty throttling" v8 (linux-mm, 6 Aug 2011,
 *     "[PATCH 5/5] writeback: IO-less balance_dirty_pages()" and "4/5
 *     per task dirty rate limit"): the pause is pages_dirtied /
 *     (dirty_ratelimit x pos_ratio) in jiffies, rounded, capped at
 *     MAX_PAUSE, and MAX_PAUSE where pos_ratio is 0 (at or over the
 *     limit); the task checks again after sqrt(thresh - dirty) pages (1
 *     at or over thresh), at most 8 while its device is "dirty exceeded"
 *     (bdi_dirty > bdi_thresh or dirty > thresh); the areas above are
 *     tested after each pause, on the counts read before it.
 *   - Linux commit bb0822954aab ("writeback: squeeze max-pause area and
 *     drop pass-good area", Aug 2011) removed both: on a JBOD of 12
 *     disks with 8 random writers each they cost ~30% of the throughput
 *     (global dirty pages sat in the pass-good area for minutes while
 *     some disks' own dirty pages ran dry: every writer was paused
 *     MAX_PAUSE however little its own disk held, and the disks idled).
 * So under this rule: free below freerun as now; above it a pause of
 * nr_dirtied / task_ratelimit on the same control line (the global
 * cubic times the device's factor, the group's line for a group), with
 * none of the later refinements: no think-time compensation (the time
 * since the last pause is not subtracted), no minimum pause (a pause
 * shorter than half a jiffy, HZ = 1000 here, is no pause, and is not
 * carried over), no bound by the time the device needs to write what it
 * holds (a flat 200 ms), no pass for a nearly clean device; and the
 * areas above the limit: below limit + limit/16 a writer is let go after
 * one pause, up to limit + limit/8 when its device is below its share,
 * else it pauses again.  A group's limit still holds its writers (there
 * were no groups then); a local-throttle thread and a dead device are
 * handled as above.  The test is tests/throttle_2011.c.
 */
#include "throttle/throttle.h"

#include <math.h>
#include <time.h>

#define NS_PER_MS    (1000ull * 1000)
#define MAX_PAUSE_NS (200 * NS_PER_MS)
#define MIN_PAUSE_NS (10 * NS_PER_MS)
#define TARGET_PAUSE_NS (20 * NS_PER_MS)
/* Above freerun a thread checks again before it has dirtied more than
 * 1/GAP_SHARE of the room left below the limit. */
#define GAP_SHARE 16
/* A device with at most this many unclean bytes (in pages: dev_pass,
 * at least one; 32 of 4 KiB) passes the throttle; more when its
 * bandwidth warrants (PASS_WINDOW of it, at most thresh / PASS_MAX_PART
 * and a quarter of its share).  In bytes: in pages, 64 devices of 1 MiB
 * pages passed 2 GiB over the limit. */
#define DEV_PASS_BYTES (128u << 10)
#define PASS_WINDOW_NS (20 * NS_PER_MS)
#define PASS_MAX_PART 16
/* A local-throttle thread's device has at least this part of thresh. */
#define LOCAL_MIN_PART 8
/* THE 2011 RULE: the areas above the limit (limit / AREA), the pages a
 * "dirty exceeded" device's writer may dirty between checks, and the
 * jiffy the pauses were counted in (HZ = 1000). */
#define MAXPAUSE_AREA 16
#define PASSGOOD_AREA 8
#define EXCEEDED_PAGES 8
#define JIFFY_NS NS_PER_MS

/* A thread's interval and debt in one cache (throttle_tls). */
struct throttle_cache_state {
	uint64_t uid;
	long nr_dirtied, nr_dirtied_pause;
	uint64_t paused_when;
};
#define TLS_CACHES 4

struct throttle_tls {
	/* the cache (uid) whose thresholds set the interval and the debt
	 * below: a write into another cache checks first, with that cache's
	 * own (a small cache took a big one's interval and held 14 times its
	 * limit); the states of the last caches written before, most recent
	 * first, are kept (a thread that writes two caches in turn keeps
	 * its debt in each) */
	uint64_t cache_uid;
	struct throttle_cache_state others[TLS_CACHES];
	long nr_dirtied;            /* newly dirtied since the last check */
	long nr_dirtied_pause;      /* check when nr_dirtied reaches this */
	uint64_t paused_when;       /* ns: end of the last pause (or check) */
	/* wbc_pwrite_nowait: pauses are owed by the caller, not slept */
	bool defer;
	uint64_t deferred_ns;
	/* wbc_thread_set_local_throttle: the device's own domain only */
	bool local;
	struct wbc_thread_stats st;
};
static _Thread_local struct throttle_tls tls = { .nr_dirtied_pause = 1 };

/* ------------------------------------------------------------------ */
/* thresholds and domains                                               */

uint64_t limit_pages(const struct wbc_cache *c, uint64_t bytes)
{
	return (bytes >> c->page_shift) + !!(bytes & (c->page_size - 1));
}

void thresholds_compute(struct wbc_cache *c)
{
	uint64_t n = c->nr_pages;
	const struct wbc_config *cfg = &c->cfg;
	uint64_t t = cfg->dirty_bytes ? limit_pages(c, cfg->dirty_bytes) :
		n * cfg->dirty_ratio / 100;
	uint64_t bg = cfg->dirty_background_bytes ? limit_pages(c, cfg->dirty_background_bytes) :
		n * cfg->dirty_background_ratio / 100;
	t = WBC_MIN(WBC_MAX(t, 1), n);
	if (bg >= t)
		bg = t / 2;
	c->thresh = t;
	c->bg_thresh = bg;
}

static void dom_fill(struct dom *d, double dirty, double thresh, double bg)
{
	d->dirty = dirty;
	d->thresh = thresh;
	d->bg_thresh = bg;
	d->limit = thresh;
	d->freerun = (thresh + bg) / 2;
	d->setpoint = (d->freerun + d->limit) / 2;
}

void dom_global(struct wbc_cache *c, struct dom *d)
{
	dom_fill(d, (double)ctr_unclean(&c->ctr), (double)c->thresh, (double)c->bg_thresh);
}

void dom_group(struct wbc_group *g, struct dom *d)
{
	dom_fill(d, (double)ctr_unclean(&g->ctr), (double)g->thresh, (double)g->bg_thresh);
}

long over_bg_pages(struct wbc_cache *c)
{
	long over = ctr_dirty(&c->ctr) - (long)c->bg_thresh;
	/* lock-free walk: may be called with dev->work_lock held */
	for (struct wbc_group *g = atomic_load_explicit(&c->groups, memory_order_acquire); g;
	     g = g->next)
		over = WBC_MAX(over, ctr_dirty(&g->ctr) - (long)g->bg_thresh);
	return over;
}

bool over_bg_thresh(struct wbc_cache *c)
{
	return over_bg_pages(c) > 0;
}

static long dev_pass(const struct wbc_cache *c)
{
	return (long)WBC_MAX((uint64_t)DEV_PASS_BYTES >> c->page_shift, 1);
}

uint64_t throttle_slack_pages(struct wbc_cache *c)
{
	struct dom d;
	dom_global(c, &d);
	/* a quarter of the distance from the setpoint to the limit: near the
	 * limit pos_ratio is already small, so the last check before it came
	 * with a short interval */
	return WBC_MAX((uint64_t)((d.limit - d.setpoint) / 4), (uint64_t)dev_pass(c));
}

/* ------------------------------------------------------------------ */
/* control lines                                                        */

double pos_ratio_cubic(double setpoint, double dirty, double limit)
{
	if (limit <= setpoint)
		return dirty < limit ? 1 : 0;
	double x = (setpoint - dirty) / (limit - setpoint);
	double pos = 1 + x * x * x;
	return pos < 0 ? 0 : pos > 2 ? 2 : pos;
}

/*
 * The device's share of @thresh: thresh x (its fraction of recent
 * writeback completions), with min_ratio% of thresh reserved for it and
 * capped by max_ratio% and max_bytes (the kernel's __wb_calc_thresh).
 */
double dev_wb_thresh(struct wbc_dev *dev, double thresh)
{
	struct wbc_cache *c = dev->cache;
	unsigned min_sum = 0;
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next)
		min_sum += d->min_ratio;
	pthread_mutex_unlock(&c->dev_lock);
	min_sum = WBC_MIN(min_sum, 100u);
	double t = thresh * (100 - min_sum) / 100 * prop_fraction(dev);
	t += thresh * dev->min_ratio / 100;
	t = WBC_MIN(t, thresh * dev->max_ratio / 100);
	if (dev->max_bytes)
		t = WBC_MIN(t, (double)limit_pages(c, dev->max_bytes));
	return t;
}

/*
 * Per-device factor around the device's own setpoint (the kernel's
 * wb_position_ratio), for domain @d; sets *wb_thresh.
 *
 *   wb_setpoint = setpoint * wb_thresh / thresh
 *   span        = (thresh - wb_thresh + 8 * write_bw) * wb_thresh / thresh
 *                 (wide for a lone device, its share of thresh in a JBOD)
 *   factor      = (x_intercept - wb_dirty) / (x_intercept - wb_setpoint),
 *                 x_intercept = wb_setpoint + span, never below 1/4,
 *   and below wb_thresh / 2 the device is boosted (up to 8x) so that its
 *   queue never runs dry.
 */
double wb_pos_ratio(struct wbc_dev *dev, const struct dom *d, double *wb_thresh_out)
{
	struct wbc_cache *c = dev->cache;
	double wb_dirty = (double)ctr_unclean(&dev->ctr);
	double wb_thresh = dev_wb_thresh(dev, d->thresh);
	/* a new device (no completions yet) still gets room to ramp up */
	if (d->limit > d->dirty)
		wb_thresh = WBC_MAX(wb_thresh, (d->limit - d->dirty) / 8);
	wb_thresh = WBC_MIN(WBC_MAX(wb_thresh, 1), d->thresh);
	*wb_thresh_out = wb_thresh;
	double bw_pages = (double)atomic_load(&dev->avg_write_bw) / (double)c->page_size;
	double x = wb_thresh / d->thresh;
	double f;
	double wb_setpoint = d->setpoint * x;
	double span = (d->thresh - wb_thresh + 8 * bw_pages) * x;
	double x_intercept = wb_setpoint + span;
	if (wb_dirty < x_intercept - span / 4)
		f = (x_intercept - wb_dirty) / WBC_MAX(x_intercept - wb_setpoint, 1);
	else
		f = 0.25;
	double reserve = wb_thresh / 2;
	if (wb_dirty < reserve)
		f *= wb_dirty > reserve / 8 ? reserve / wb_dirty : 8;
	return f;
}

/* The most of @thresh that @dev's max_ratio and max_bytes let it hold. */
static double dev_cap_pages(struct wbc_dev *dev, double thresh)
{
	double cap = thresh * dev->max_ratio / 100;
	if (dev->max_bytes)
		cap = WBC_MIN(cap, (double)limit_pages(dev->cache, dev->max_bytes));
	return cap;
}

/* pos_ratio of a writer to @dev in group @grp (NULL: none). */
static double writer_pos_ratio(struct wbc_dev *dev, struct wbc_group *grp,
			       struct dom *gd, double *wb_thresh)
{
	double pos = pos_ratio_cubic(gd->setpoint, gd->dirty, gd->limit);
	double f = wb_pos_ratio(dev, gd, wb_thresh);
	if (dev->strict_limit) {
		/* the device's own share (max_ratio and max_bytes kept), not
		 * wb_pos_ratio's ramp-up room, which is thresh/8 whatever the
		 * share: a strict device capped at 1 MiB held 6.4 MiB.  As the
		 * kernel's strictlimit: a device with under 8 pages unclean
		 * is sped up instead (a new one ramps up). */
		double wb_dirty = (double)ctr_unclean(&dev->ctr);
		double st = WBC_MIN(WBC_MAX(dev_wb_thresh(dev, gd->thresh), 1), gd->thresh);
		double wb_bg = st * gd->bg_thresh / gd->thresh;
		/* the ramp-up floor: 8 pages, or a cap under that (max_ratio,
		 * max_bytes), never the share a new device has yet */
		if (wb_dirty < WBC_MIN(8, dev_cap_pages(dev, gd->thresh)))
			pos = WBC_MIN(pos * 2, 2);
		else
			pos = WBC_MIN(pos, pos_ratio_cubic((st + wb_bg) / 2, wb_dirty, st));
	} else {
		pos *= f;
	}
	if (grp) {
		struct dom md;
		dom_group_writer(grp, dev, &md, wbc_now_ns());
		if (md.dirty > md.freerun || gd->dirty > gd->freerun)
			pos = WBC_MIN(pos, pos_ratio_cubic(md.setpoint, md.dirty, md.limit));
	}
	return pos;
}

/* pos_ratio of a local-throttle thread: its device's domain @d alone
 * (and its group's line). */
static double local_pos_ratio(struct wbc_dev *dev, struct wbc_group *grp, const struct dom *d)
{
	double pos = pos_ratio_cubic(d->setpoint, d->dirty, d->limit);
	if (grp) {
		struct dom md;
		dom_group_writer(grp, dev, &md, wbc_now_ns());
		if (md.dirty > md.freerun)
			pos = WBC_MIN(pos, pos_ratio_cubic(md.setpoint, md.dirty, md.limit));
	}
	return pos;
}

/* ------------------------------------------------------------------ */
/* the throttle                                                         */

static void tls_cache(struct wbc_cache *c);

bool throttle_dirtied(struct wbc_cache *c)
{
	tls_cache(c);
	tls.st.pages_dirtied++;
	return ++tls.nr_dirtied >= tls.nr_dirtied_pause;
}

void throttle_defer_begin(void)
{
	tls.defer = true;
	tls.deferred_ns = 0;
}

bool throttle_owed(void)
{
	return tls.deferred_ns != 0;
}

uint64_t throttle_defer_end(void)
{
	uint64_t ns = tls.deferred_ns;
	tls.defer = false;
	tls.deferred_ns = 0;
	return ns;
}

bool throttle_due(struct wbc_cache *c)
{
	return tls.nr_dirtied >= tls.nr_dirtied_pause || tls.cache_uid != c->uid;
}

/* The thread's interval and debt are @c's from now on: the other
 * cache's are kept for its next write there (TLS_CACHES of them). */
static void tls_cache(struct wbc_cache *c)
{
	if (tls.cache_uid == c->uid)
		return;
	struct throttle_cache_state cur = {
		tls.cache_uid, tls.nr_dirtied, tls.nr_dirtied_pause, tls.paused_when
	};
	struct throttle_cache_state next = { c->uid, 0, 1, wbc_now_ns() };
	int i;
	for (i = 0; i < TLS_CACHES - 1; i++)
		if (tls.others[i].uid == c->uid)
			break;
	if (tls.others[i].uid == c->uid)
		next = tls.others[i];
	/* others[0..i) move down one, the one taken (or the oldest) out */
	memmove(&tls.others[1], &tls.others[0], (size_t)i * sizeof(tls.others[0]));
	tls.others[0] = cur;
	tls.cache_uid = next.uid;
	tls.nr_dirtied = next.nr_dirtied;
	tls.nr_dirtied_pause = next.nr_dirtied_pause;
	tls.paused_when = next.paused_when;
}

void wbc_thread_stats(struct wbc_thread_stats *st)
{
	if (st)
		*st = tls.st;
}

int wbc_thread_set_local_throttle(int on)
{
	int was = tls.local;
	tls.local = on != 0;
	return was;
}

static uint64_t isqrt(uint64_t v)
{
	return (uint64_t)sqrt((double)v);
}

/* Below freerun: check again after about sqrt(gap to thresh) pages, so
 * the check gets frequent as dirty approaches the limits (the kernel's
 * dirty_poll_interval). */
static long poll_interval(double dirty, double thresh)
{
	return thresh > dirty ? (long)WBC_MAX(isqrt((uint64_t)(thresh - dirty)), 1) : 1;
}

static bool dom_freerun(const struct dom *d)
{
	return d->dirty <= d->freerun;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Unclean pages of dead devices other than @dev (dev_dead_error): no
 * writeback cleans them before their device recovers.  A writer to a
 * live device does not count them in the global domain: waiting for them
 * would stop it for as long as the other device is dead (invariant 5;
 * a strict_limit device, which then had no pass, waited for ever).  They stay
 * in the arena, which bounds memory all the same (invariant 1).
 */
static double dead_pages_except(struct wbc_cache *c, struct wbc_dev *dev, uint64_t now)
{
	long n = 0;
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next)
		if (d != dev && dev_dead_error(d, now))
			n += ctr_unclean(&d->ctr);
	pthread_mutex_unlock(&c->dev_lock);
	return (double)n;
}

/* The domain of a local-throttle thread writing to @dev: the device's own
 * (LOCAL THROTTLE above). */
void dom_local(struct wbc_dev *dev, struct dom *d)
{
	struct wbc_cache *c = dev->cache;
	double thresh = (double)c->thresh;
	double wb_thresh = dev_wb_thresh(dev, thresh);
	wb_thresh = WBC_MIN(WBC_MAX(wb_thresh, thresh / LOCAL_MIN_PART), thresh);
	wb_thresh = WBC_MAX(wb_thresh, 1);
	dom_fill(d, (double)ctr_unclean(&dev->ctr), wb_thresh,
		 wb_thresh * (double)c->bg_thresh / thresh);
}

void dom_global_writer(struct wbc_dev *dev, struct dom *d, uint64_t now)
{
	dom_global(dev->cache, d);
	d->dirty = WBC_MAX(d->dirty - dead_pages_except(dev->cache, dev, now), 0);
}

/* The global domain as a writer to @dev sees it; the device's own for a
 * local-throttle thread. */
static void dom_writer(struct wbc_dev *dev, struct dom *d, uint64_t now)
{
	if (tls.local) {
		dom_local(dev, d);
		return;
	}
	dom_global_writer(dev, d, now);
}

/* Group @g's domain as a writer to @dev sees it: without the group's own
 * pages on dead devices but @dev, as the global one (a group's limit
 * filled by a dead device's pages held the writers of a healthy device
 * in it until the dead one came back).  Only the group's: with every
 * dead page taken off, of any group or none, a 2 MiB group beside a dead
 * device holding the cache's limit held 8 MiB and more, the cache's. */
void dom_group_writer(struct wbc_group *g, struct wbc_dev *dev, struct dom *d, uint64_t now)
{
	dom_group(g, d);
	if (d->dirty <= d->freerun)
		return;
	long n = 0;
	for (struct wbc_group_dev *gd = atomic_load_explicit(&g->devs, memory_order_acquire); gd;
	     gd = gd->next)
		if (gd->dev != dev && dev_dead_error(gd->dev, now))
			n += ctr_unclean(&gd->ctr);
	d->dirty = WBC_MAX(d->dirty - (double)n, 0);
}

/* Pause the calling thread for @pause ns (or owe it, deferred) and count
 * it for the thread, the device and the cache. */
static void pause_for(struct wbc_dev *dev, uint64_t pause)
{
	struct wbc_cache *c = dev->cache;
	if (tls.defer)
		tls.deferred_ns += pause;
	else
		sleep_ns(pause);
	tls.st.pauses++;
	tls.st.paused_ns += pause;
	tls.st.last_pause_ns = pause;
	tls.st.max_pause_ns = WBC_MAX(tls.st.max_pause_ns, pause);
	atomic_fetch_add_explicit(&dev->st_pauses, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&dev->st_paused_ns, pause, memory_order_relaxed);
	atomic_fetch_add(&c->st_pauses, 1);
	atomic_fetch_add(&c->st_paused_ns, pause);
	unsigned long long mx = atomic_load(&c->st_max_pause_ns);   /* its type */
	while (pause > mx && !atomic_compare_exchange_weak(&c->st_max_pause_ns, &mx, pause))
		;
}

/*
 * One check of a writer under THE 2011 RULE (above), in domain @d, with
 * its device's unclean pages @wb_dirty against its share @wb_thresh, its
 * task_ratelimit @rate (pages/s; under 1 where pos_ratio is 0) and
 * @nr_dirtied pages dirtied since its last check: the pause, the pages
 * before its next check, and whether it pauses again (held above the
 * areas) or is let go after the pause.  Called above freerun.
 */
void throttle_2011_step(const struct dom *d, double wb_dirty, double wb_thresh, double rate,
			long nr_dirtied, struct step_2011 *st)
{
	double pause_ns;
	if (rate < 1) {
		pause_ns = (double)MAX_PAUSE_NS;
	} else {
		/* in jiffies, rounded: (HZ * pages + bw / 2) / bw */
		double jiffies = floor((double)nr_dirtied / rate * 1e9 / (double)JIFFY_NS + 0.5);
		pause_ns = WBC_MIN(jiffies * (double)JIFFY_NS, (double)MAX_PAUSE_NS);
	}
	st->pause_ns = (uint64_t)pause_ns;
	/* the next check: sqrt of the room below thresh, 1 at or over it,
	 * at most EXCEEDED_PAGES while the device is dirty exceeded */
	long next = poll_interval(d->dirty, d->thresh);
	if (wb_dirty > wb_thresh || d->dirty > d->thresh)
		next = WBC_MIN(next, (long)EXCEEDED_PAGES);
	st->next_check = next;
	/* after the pause: let go below the max-pause area's top, and in the
	 * pass-good area when the device is below its share */
	bool maxpause = d->dirty < d->limit + d->limit / MAXPAUSE_AREA;
	bool passgood = d->dirty < d->limit + d->limit / PASSGOOD_AREA && wb_dirty < wb_thresh;
	st->again = !maxpause && !passgood;
}

/* The start of each round of balance_dirty_pages (either rule): the
 * writer's domain and its group's, the flushers woken over the background
 * threshold, the device's bandwidth estimate brought up to @now. */
static void balance_domains(struct wbc_dev *dev, struct wbc_group *grp, struct dom *gd,
			    struct dom *md, uint64_t now)
{
	dom_writer(dev, gd, now);
	if (grp) {
		dom_group_writer(grp, dev, md, now);
		/* its line may hold this writer: the rate update balances it */
		if (md->dirty > md->freerun &&
		    atomic_load_explicit(&dev->throttled_group, memory_order_relaxed) != grp)
			atomic_store_explicit(&dev->throttled_group, grp, memory_order_relaxed);
	}
	if (over_bg_thresh(dev->cache))
		wakeup_flusher_threads(dev->cache, false);
	bandwidth_update(dev, now);
}

/* strict_limit: the device's own pages are over its freerun (the middle
 * of its share of the background and dirty thresholds) */
static bool dev_strict_over(struct wbc_dev *dev, const struct dom *gd)
{
	double wb_dirty = (double)ctr_unclean(&dev->ctr);
	double t = dev_wb_thresh(dev, gd->thresh);
	return wb_dirty > (t + t * gd->bg_thresh / gd->thresh) / 2;
}

/* Below freerun (the writer's domain and its group's): no pause; the
 * next check after poll_interval's pages.  True when it passed. */
static bool freerun_pass(struct wbc_cache *c, const struct dom *gd, const struct dom *md,
			 uint64_t now)
{
	if (!dom_freerun(gd) || (md && !dom_freerun(md)))
		return false;
	long intv = poll_interval(gd->dirty, gd->thresh);
	if (md)
		intv = WBC_MIN(intv, poll_interval(md->dirty, md->thresh));
	/* Without periodic writeback (dirty_writeback_centisecs=0), check
	 * again no later than the page that takes the cache (or a group)
	 * over its background threshold: that check wakes the flushers
	 * (balance_domains).  Unchecked, a writer's last pages left it over
	 * with every flusher asleep for good.  (Two writers that checked
	 * under it at once can still cross it together between checks; a
	 * flusher then looks by itself at least once a second,
	 * flusher.c's BG_CHECK_NS.)  With it, the flushers look at each
	 * periodic wakeup, as the kernel's (wb_check_background_flush): no
	 * check per page near the threshold, where small files would wake a
	 * flusher for each. */
	if (!c->cfg.dirty_writeback_centisecs) {
		long below_bg = -over_bg_pages(c);
		if (below_bg >= 0)
			intv = WBC_MIN(intv, below_bg + 1);
	}
	tls.nr_dirtied = 0;
	tls.nr_dirtied_pause = intv;
	tls.paused_when = now;
	return true;
}

/* balance_dirty_pages under THE 2011 RULE (throttle=2011). */
static int balance_dirty_pages_2011(struct wbc_dev *dev, struct wbc_group *grp)
{
	for (;;) {
		uint64_t now = wbc_now_ns();
		struct dom gd, md = { 0 };
		balance_domains(dev, grp, &gd, &md, now);
		bool strict_over = dev->strict_limit && dev_strict_over(dev, &gd);
		if (!strict_over && freerun_pass(dev->cache, &gd, grp ? &md : NULL, now))
			return 0;
		/* the kernel started background writeback when none ran */
		if (ctr_dirty(&dev->ctr) > 0)
			flusher_kick(dev, false);
		int err = dev_dead_error(dev, now);
		if (err)
			return err;
		double wb_thresh = 0;
		double pos = writer_pos_ratio(dev, grp, &gd, &wb_thresh);
		double rate = (double)atomic_load(&dev->dirty_ratelimit) * pos;   /* pages/s */
		struct step_2011 st;
		throttle_2011_step(&gd, (double)ctr_unclean(&dev->ctr), wb_thresh, rate,
				   tls.nr_dirtied, &st);
		/* a group's limit holds its writers as under the current rule */
		if (grp && md.dirty >= md.limit)
			st.again = true;
		if (st.pause_ns)
			pause_for(dev, st.pause_ns);
		tls.nr_dirtied = 0;
		tls.nr_dirtied_pause = st.next_check;
		tls.paused_when = wbc_now_ns() + (tls.defer ? st.pause_ns : 0);
		/* a deferred pause is waited before the caller's next write,
		 * which checks again then: held, before it dirties a page (as
		 * a blocking writer pauses again; given the next check's
		 * pages, a wbc_pwrite_nowait writer went on past the areas a
		 * page a pause) */
		if (!st.again)
			return 0;
		if (tls.defer) {
			tls.nr_dirtied_pause = 0;
			return 0;
		}
	}
}

int balance_dirty_pages(struct wbc_dev *dev, struct wbc_group *grp)
{
	struct wbc_cache *c = dev->cache;
	tls_cache(c);
	if (dev->throttle_2011 && !tls.local)
		return balance_dirty_pages_2011(dev, grp);
	long slack = (long)throttle_slack_pages(c);
	for (;;) {
		uint64_t now = wbc_now_ns();
		struct dom gd, md = { 0 };
		balance_domains(dev, grp, &gd, &md, now);

		double wb_thresh = 0;
		/* a local thread's domain is its device's: its strict line */
		bool strict = dev->strict_limit && !tls.local;
		if (tls.local && gd.dirty > gd.bg_thresh && ctr_dirty(&dev->ctr) > 0)
			flusher_kick(dev, false);   /* the device's own background */
		bool strict_over = strict && dev_strict_over(dev, &gd);
		if (!strict_over && freerun_pass(dev->cache, &gd, grp ? &md : NULL, now))
			return 0;
		/* pass: this writer's device holds little of its share (a pipe
		 * through a domain filled by some other, slower or stalled,
		 * device): enough for PASS_WINDOW of its bandwidth, at most
		 * thresh / PASS_MAX_PART and a quarter of its share */
		long unclean = ctr_unclean(&dev->ctr);
		double pass = (double)atomic_load(&dev->write_bw) / (double)c->page_size *
			      (double)PASS_WINDOW_NS / 1e9;
		pass = WBC_MIN(pass, (double)c->thresh / PASS_MAX_PART);
		pass = WBC_MIN(pass, dev_wb_thresh(dev, (double)c->thresh) / 4);
		/* a strict device passes too, as the kernel's wb under
		 * strictlimit ("give the other good wb's a pipe"), within its
		 * cap: with no pass its writers waited, spinning, for as long
		 * as another, stalled, device held the cache at its limit */
		double floor = (double)dev_pass(c);
		if (strict)
			floor = WBC_MIN(floor, dev_cap_pages(dev, (double)c->thresh));
		pass = WBC_MAX(pass, floor);
		/* a group at its limit lets through only a writer whose
		 * device holds less than the floor, a page per check (the
		 * kernel's pipe for a wb with next to nothing dirty): its
		 * limit filled by a stalled device's pages held the group's
		 * writers to every other device for as long as it stalled */
		bool grp_full = grp && md.dirty >= md.limit;
		if (unclean <= (long)pass && !strict_over && (!grp_full || unclean < (long)floor)) {
			long intv = WBC_MIN((long)pass - unclean, slack);
			/* in a group, a part of the room under the group's limit
			 * (pass and slack are the cache's: a 1 MiB group in a
			 * 512 MiB cache held 4 MiB, over its limit most of the
			 * time, with one writer) */
			if (grp)
				intv = WBC_MIN(intv, (long)((md.limit - md.dirty) / GAP_SHARE));
			tls.nr_dirtied = 0;
			tls.nr_dirtied_pause = WBC_MAX(intv, 1);
			tls.paused_when = now;
			return 0;
		}

		/* throttled: make sure this device's own pages are moving */
		if (ctr_dirty(&dev->ctr) > 0)
			flusher_kick(dev, false);
		/* the rate estimate balances the line its writers are on */
		if (tls.local && !atomic_load_explicit(&dev->local_throttled, memory_order_relaxed))
			atomic_store_explicit(&dev->local_throttled, true, memory_order_relaxed);
		/* ... unless none of them has moved for its retry_timeout:
		 * then this writer would wait for nothing (its counters stay
		 * as they are: it is still due, and checks before it dirties
		 * more) */
		int err = dev_dead_error(dev, now);
		if (err)
			return err;
		double pos = tls.local ? local_pos_ratio(dev, grp, &gd)
				       : writer_pos_ratio(dev, grp, &gd, &wb_thresh);
		/* near the limit, each thread may take only a small part of
		 * what is left before it checks again */
		double room = WBC_MAX(gd.limit - gd.dirty, 0);
		if (grp)   /* and of its group's */
			room = WBC_MIN(room, WBC_MAX(md.limit - md.dirty, 0));
		long gap_share = (long)(room / GAP_SHARE);
		double rate = (double)atomic_load(&dev->dirty_ratelimit) * pos;  /* pages/s */
		/* never sleep longer than the device needs to write what it
		 * holds (the kernel's wb_max_pause): a small cache on a fast
		 * device must not idle it for 200 ms */
		double bw_pages = (double)atomic_load(&dev->write_bw) / (double)c->page_size;
		/* half of it: wake while the device still has work queued */
		double drain_ns = (double)ctr_unclean(&dev->ctr) / WBC_MAX(bw_pages, 1) * 1e9 / 2;
		uint64_t max_pause = (uint64_t)WBC_MIN(WBC_MAX(drain_ns, (double)MIN_PAUSE_NS / 10),
						       (double)MAX_PAUSE_NS);
		uint64_t pause, carry = 0;
		if (rate < 1) {
			pause = max_pause;
		} else {
			double period = (double)tls.nr_dirtied / rate * 1e9;
			/* signed: a deferred pause (wbc_pwrite_nowait) ends
			 * in the future, and a thread that serves several
			 * writers checks again before it has (the time still
			 * owed counts, not a wrap to "long ago") */
			double p = period - (double)(int64_t)(now - tls.paused_when);
			if (p < (double)MIN_PAUSE_NS) {
				/* too short to sleep: carry the debt, check later */
				if (p < -1e9) {               /* a slow writer: forget */
					tls.nr_dirtied = 0;
					tls.paused_when = now;
				}
				long next = (long)(rate * (double)TARGET_PAUSE_NS / 1e9);
				tls.nr_dirtied_pause = tls.nr_dirtied +
					WBC_MAX(WBC_MIN(WBC_MIN(next, slack), gap_share), 1);
				return 0;
			}
			pause = (uint64_t)WBC_MIN(p, (double)max_pause);
			/* the debt past max_pause is carried, one max pause of
			 * it at most (the kernel's "occasional dropped
			 * task_ratelimit"): the next check starts that much
			 * later */
			carry = (uint64_t)WBC_MIN(p - (double)pause, (double)max_pause);
		}
		pause_for(dev, pause);
		tls.paused_when = wbc_now_ns() + (tls.defer ? pause : 0) + carry;
		tls.nr_dirtied = 0;
		long next = (long)(rate * (double)TARGET_PAUSE_NS / 1e9);
		tls.nr_dirtied_pause = WBC_MAX(WBC_MIN(WBC_MIN(next, slack), gap_share), 1);
		/* a deferred pause is waited before the caller's next write,
		 * which checks again then: at or over the limit before it
		 * dirties a page (nr_dirtied_pause 0), as a blocking writer
		 * pauses again until below it.  One page a pause went in: the
		 * mount's writers to a store that failed every write took the
		 * cache past its limit a page a pause each, towards the arena */
		if (rate >= 1)
			return 0;
		if (tls.defer) {
			tls.nr_dirtied_pause = 0;
			return 0;
		}
		/* at or over the limit: pause again until below it */
		dom_writer(dev, &gd, wbc_now_ns());
		if (gd.dirty < gd.limit && (!grp || (dom_group_writer(grp, dev, &md, wbc_now_ns()), md.dirty < md.limit)))
			return 0;
	}
}
