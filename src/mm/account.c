/*
 * Page counters (layer mm): the per-CPU counters' sums, and the accounting
 * of page state changes (mm/page.h) in the domains of a file: its device,
 * its group and the cache (mm/counters.h).  Lock-free: each count is an
 * atomic in the calling CPU's slot.
 */
#include "mm/mm.h"

long long pcount_sum(struct pcount *c)
{
	long long v = 0;
	for (unsigned i = 0; i < PCPU_SLOTS; i++)
		v += atomic_load_explicit(&c->s[i].v, memory_order_relaxed);
	return v;
}

long ctr_dirty(struct dirty_ctr *c)
{
	long long v = 0;
	for (unsigned i = 0; i < PCPU_SLOTS; i++)
		v += atomic_load_explicit(&c->s[i].dirty, memory_order_relaxed);
	return (long)WBC_MAX(v, 0);
}

long ctr_unclean(struct dirty_ctr *c)
{
	long long v = 0;
	for (unsigned i = 0; i < PCPU_SLOTS; i++)
		v += atomic_load_explicit(&c->s[i].unclean, memory_order_relaxed);
	return (long)WBC_MAX(v, 0);
}

/* Tests: make the unclean count @v (quiescent counters only). */
void ctr_set_unclean(struct dirty_ctr *c, long v)
{
	for (unsigned i = 0; i < PCPU_SLOTS; i++)
		atomic_store(&c->s[i].unclean, i ? 0 : v);
}

static void ctr_add(struct dirty_ctr *c, unsigned slot, long dirty, long unclean)
{
	if (dirty)
		atomic_fetch_add_explicit(&c->s[slot].dirty, dirty, memory_order_relaxed);
	if (unclean)
		atomic_fetch_add_explicit(&c->s[slot].unclean, unclean, memory_order_relaxed);
}

void account_domains(struct wbc_dev *dev, struct wbc_group *g, long dirty, long unclean)
{
	unsigned slot = pcpu_slot();
	ctr_add(&dev->cache->ctr, slot, dirty, unclean);
	ctr_add(&dev->ctr, slot, dirty, unclean);
	if (g) {
		ctr_add(&g->ctr, slot, dirty, unclean);
		ctr_add(&group_dev(g, dev)->ctr, slot, dirty, unclean);
	}
}

struct wbc_group_dev *group_dev(struct wbc_group *g, struct wbc_dev *dev)
{
	struct wbc_group_dev *gd = atomic_load_explicit(&g->devs, memory_order_acquire);
	while (gd && gd->dev != dev)
		gd = gd->next;
	assert(gd);   /* made at the open of the group's first file on @dev */
	return gd;
}

static void account(struct inode *ino, long dirty, long unclean)
{
	account_domains(ino->dev, ino->group, dirty, unclean);
}

void account_dirtied(struct inode *ino, long n)
{
	account(ino, n, n);
	pcount_add(&ino->dev->dirtied_pages, n);
}
void account_writeback(struct inode *ino, long n) { account(ino, -n, 0); }
void account_cleaned(struct inode *ino, long n) { account(ino, 0, -n); }
void account_dropped(struct inode *ino, long n) { account(ino, -n, -n); }
void account_redirtied(struct inode *ino, long n) { account(ino, n, 0); }
