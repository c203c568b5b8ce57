/*
 * Page counters (layer mm, mm/account.c): per-CPU counters, and the dirty
 * and unclean pages of a domain (the cache, a device, a group).  The
 * structures that embed them (src/objects.h) need these types; the
 * accounting of page state changes into them is declared in mm/mm.h.
 */
#ifndef WBC_MM_COUNTERS_H
#define WBC_MM_COUNTERS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdatomic.h>

/*
 * Per-CPU counters.  Hot-path counts (pages dirtied, bytes written) are
 * striped over PCPU_SLOTS slots 64 bytes apart, chosen by the CPU the
 * caller runs on (sched_getcpu reads rseq's cpu_id: no system call), so
 * writers on different CPUs never bounce a cache line per page.  Every
 * slot is an exact atomic, so the sum is exact once updates stop; while
 * they run it may lag by the updates in flight, like the kernel's percpu
 * counters.  Readers (throttle checks, the flusher, stats) sum the slots.
 * Each slot is aligned to its own line; the structures that hold these
 * are allocated 64-byte aligned (wbc_zalloc).
 */
#define PCPU_SLOTS 16
static inline unsigned pcpu_slot(void)
{
	int cpu = sched_getcpu();
	return cpu < 0 ? 0 : (unsigned)cpu % PCPU_SLOTS;
}

struct pcount {
	struct { atomic_llong v; } __attribute__((aligned(64))) s[PCPU_SLOTS];
};
static inline void pcount_add(struct pcount *c, long long n)
{
	atomic_fetch_add_explicit(&c->s[pcpu_slot()].v, n, memory_order_relaxed);
}
long long pcount_sum(struct pcount *c);

/* Pages of one domain (the cache, a device, a group): dirty; and dirty +
 * under writeback in one counter, so that the flusher moving pages from
 * one state to the other never changes the total writers are limited by.
 * Per CPU: both counts of one CPU share its slot. */
struct dirty_ctr {
	struct { atomic_llong dirty, unclean; } __attribute__((aligned(64))) s[PCPU_SLOTS];
};
long ctr_dirty(struct dirty_ctr *c);
long ctr_unclean(struct dirty_ctr *c);
void ctr_set_unclean(struct dirty_ctr *c, long v);   /* tests */

#endif
