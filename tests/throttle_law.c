/*
 * The control law in isolation: the global position ratio is 2 at
 * freerun, 1 at the setpoint, 0 at the limit, monotone (non-increasing)
 * between and clamped outside; the domain points follow the kernel's
 * formulas; the per-device factor is 1-ish at a lone device's setpoint,
 * falls as the device's own dirty count rises, and boosts a device far
 * below its share.
 */
#include "testutil.h"
#include "internal.h"

#include <math.h>

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

int main(void)
{
	/* the cubic, for several shapes of domain */
	double shapes[][3] = { { 150, 175, 200 }, { 6000, 7000, 8000 }, { 1, 1.5, 2 } };
	for (int k = 0; k < 3; k++) {
		double fr = shapes[k][0], sp = shapes[k][1], lim = shapes[k][2];
		CHECK(near(pos_ratio_cubic(sp, fr, lim), 2));
		CHECK(near(pos_ratio_cubic(sp, sp, lim), 1));
		CHECK(near(pos_ratio_cubic(sp, lim, lim), 0));
		CHECK(near(pos_ratio_cubic(sp, fr - 100, lim), 2));     /* clamped */
		CHECK(near(pos_ratio_cubic(sp, lim + 100, lim), 0));
		double prev = 3;
		for (int i = 0; i <= 1000; i++) {
			double d = fr + (lim - fr) * i / 1000;
			double p = pos_ratio_cubic(sp, d, lim);
			CHECK(p <= prev + 1e-12 && p >= 0 && p <= 2);
			prev = p;
		}
		/* flat at the setpoint, steep towards the ends */
		double eps = (lim - sp) / 100;
		CHECK(fabs(pos_ratio_cubic(sp, sp + eps, lim) - 1) < 1e-5);
		CHECK(pos_ratio_cubic(sp, lim - eps, lim) < 0.05);
	}

	/* the domain of a cache: thresh 20% of 1000 pages, bg 10% */
	struct wbc_config cfg = t_config(1000 * 4096, 4096);
	wbc_cache *c;
	CHECK_EQ(wbc_cache_open(&cfg, &c), 0);
	struct dom d;
	dom_global(c, &d);
	CHECK(near(d.thresh, 200) && near(d.bg_thresh, 100) && near(d.limit, 200));
	CHECK(near(d.freerun, 150) && near(d.setpoint, 175));
	struct wbc_stats st;
	wbc_stats(c, &st);
	CHECK_EQ(st.freerun_bytes, 150 * 4096);
	CHECK_EQ(st.setpoint_bytes, 175 * 4096);
	CHECK_EQ(st.limit_bytes, 200 * 4096);

	/* the per-device factor of a lone device */
	wbc_dev *dev;
	CHECK_EQ(wbc_dev_add(c, "mem", &dev), 0);
	double wbt, prevf = 1e9;
	struct dom dd = d;
	for (int i = 0; i <= 200; i += 10) {
		ctr_set_unclean(&dev->ctr, i);
		dd.dirty = i;
		double f = wb_pos_ratio(dev, &dd, &wbt);
		CHECK(f > 0 && f <= prevf + 1e-12);
		prevf = f;
	}
	ctr_set_unclean(&dev->ctr, 175);
	dd.dirty = 175;
	double f = wb_pos_ratio(dev, &dd, &wbt);
	CHECK(fabs(f - 1) < 0.01);                 /* at its setpoint: neutral */
	CHECK(near(wbt, 200));                     /* a lone device's share: all */
	ctr_set_unclean(&dev->ctr, 5);
	dd.dirty = 5;
	CHECK(wb_pos_ratio(dev, &dd, &wbt) > 2);   /* far below its share: boosted */
	ctr_set_unclean(&dev->ctr, 0);

	/* max_ratio caps the share; min_ratio reserves one */
	wbc_dev *capped;
	CHECK_EQ(wbc_dev_add(c, "mem,max_ratio=10", &capped), 0);
	CHECK(dev_wb_thresh(capped, 200) <= 20 + 1e-9);
	wbc_dev *res;
	CHECK_EQ(wbc_dev_add(c, "mem,min_ratio=30", &res), 0);
	CHECK(dev_wb_thresh(res, 200) >= 60 - 1e-9);
	wbc_dev *maxb;
	CHECK_EQ(wbc_dev_add(c, "mem,max_bytes=40K", &maxb), 0);
	CHECK(dev_wb_thresh(maxb, 200) <= 10 + 1e-9);
	CHECK_EQ(wbc_cache_close(c), 0);

	/* the shares' counts: a clock read before the locks, older than the
	 * period's stamp another thread moved meanwhile (here: the stamp 1
	 * ms ahead), keeps them (unsigned, the difference wrapped: every
	 * count halved to nothing and the writer's device had the whole) */
	c = t_quiet_cache(64u << 20);
	wbc_dev *pa, *pb;
	CHECK_EQ(wbc_dev_add(c, "mem", &pa), 0);
	CHECK_EQ(wbc_dev_add(c, "mem", &pb), 0);
	prop_account(pa, 30000);
	prop_account(pb, 10000);
	double fa = prop_fraction(pa);
	CHECK(fa > 0.7 && fa < 0.8);
	pthread_mutex_lock(&c->prop_lock);
	c->prop_stamp_ns = wbc_now_ns() + 1000 * 1000;
	pthread_mutex_unlock(&c->prop_lock);
	prop_account(pb, 1);
	printf("shares after an event behind the stamp: %.3f / %.3f (were %.3f / %.3f)\n",
	       prop_fraction(pa), prop_fraction(pb), fa, 1 - fa);
	CHECK(fabs(prop_fraction(pa) - fa) < 0.001);
	CHECK_EQ(wbc_cache_close(c), 0);
	printf("throttle_law: ok\n");
	return 0;
}
