/*
 * The page arena (layer mm): one mapping for the pages, one for their
 * descriptors, both made at open.
 *
 * Invariant (the memory bound):
 *   1. All page memory is one mmap()ed arena made at open; nothing else ever
 *      holds file data.  Page descriptors are one array made at open.
 */
#include "mm/mm.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The arena's alignment: one transparent huge page (x86-64's PMD size). */
#define ARENA_HUGE (2ul << 20)

/* The unit of mmap and munmap lengths (4 KiB on x86-64).  munmap refuses
 * an unaligned address, and a length it must round: every length passed
 * to them is rounded up to this first. */
static size_t sys_page_size(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	return ps > 0 ? (size_t)ps : 4096;
}

/* @len rounded up to whole system pages; 0 when that overflows. */
static size_t map_round(size_t len)
{
	size_t sp = sys_page_size();
	return len > SIZE_MAX - (sp - 1) ? 0 : (len + sp - 1) & ~(sp - 1);
}

/* Unmap what arena_map(@len) returned.  0 or -errno (a bad address or
 * length: a bug, never a condition to live with). */
static int arena_unmap(void *p, size_t len)
{
	if (munmap(p, map_round(len))) {
		int err = -errno;
		assert(!"munmap of an arena failed");
		return err;
	}
	return 0;
}

/*
 * Address space for the page arena or the page descriptors, aligned to
 * 2 MiB, so that transparent huge pages can back it where the kernel
 * allows them (the kernel's own page cache lives in the direct map's large
 * pages): a cache that touches gigabytes of pages takes a TLB miss per
 * 2 MiB, not per 4 KiB.  O_DIRECT buffers need 4 KiB alignment, which this
 * exceeds.  Maps 2 MiB more than asked and trims both ends; the trims
 * work in whole system pages (an unaligned tail would make munmap fail
 * and leak the 2 MiB slack at every open).  Nothing is committed here:
 * arena_populate does that once every mapping of the cache exists.
 * Returns the address, or NULL (and -errno in *err).
 */
static char *arena_map(size_t len, int *err)
{
	size_t rlen = map_round(len);
	if (!rlen || rlen > SIZE_MAX - ARENA_HUGE) {
		*err = -ENOMEM;
		return NULL;
	}
	size_t maplen = rlen + ARENA_HUGE;
	char *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		*err = -errno;
		return NULL;
	}
	char *a = (char *)(((uintptr_t)p + ARENA_HUGE - 1) & ~(uintptr_t)(ARENA_HUGE - 1));
	size_t head = (size_t)(a - p), tail = maplen - head - rlen;
	if ((head && munmap(p, head)) || (tail && munmap(a + rlen, tail))) {
		*err = -errno;
		assert(!"trimming the arena mapping failed");
		/* whatever is still mapped of it: munmap ignores holes */
		munmap(p, maplen);
		return NULL;
	}
	return a;
}

/* Back [a, a + len) with memory now where the kernel can, so that no
 * write pays for a first-touch fault later; zeroed, as anonymous memory
 * is.  A hint both: the pages fault in on use if refused. */
/* 0, or -ENOMEM where the memory cannot be had now (the open fails then,
 * rather than a later write meeting the out-of-memory killer); an old
 * kernel without MADV_POPULATE_WRITE (EINVAL) commits it as it is used */
static int arena_populate(char *a, size_t len)
{
#ifdef MADV_HUGEPAGE
	(void)madvise(a, map_round(len), MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
	if (madvise(a, map_round(len), MADV_POPULATE_WRITE) && errno == ENOMEM)
		return -ENOMEM;
#endif
	return 0;
}

/* The lowest memory limit of the control groups holding this process,
 * from its own group up (cgroup v2's memory.max, v1's
 * memory.limit_in_bytes), or UINT64_MAX: none found. */
static uint64_t cgroup_limit(void)
{
	uint64_t lim = UINT64_MAX;
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return lim;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		/* "ID:CONTROLLERS:PATH"; v2: "0::PATH" */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		char *path = c2 + 1;
		path[strcspn(path, "\n")] = 0;
		const char *roots[2], *file;
		int nroots;
		if (!c1[1] && line[0] == '0' && c1 == line + 1) {
			roots[0] = "/sys/fs/cgroup";
			roots[1] = "/sys/fs/cgroup/unified";
			nroots = 2;
			file = "memory.max";
		} else {
			bool mem = false;
			/* strtok_r: caches may be opened on several threads */
			char *save = NULL;
			for (char *tok = strtok_r(c1 + 1, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save))
				mem |= !strcmp(tok, "memory");
			if (!mem)
				continue;
			roots[0] = "/sys/fs/cgroup/memory";
			nroots = 1;
			file = "memory.limit_in_bytes";
		}
		for (int r = 0; r < nroots; r++) {
			char dir[4096];
			snprintf(dir, sizeof(dir), "%s%s", roots[r], strcmp(path, "/") ? path : "");
			for (;;) {
				char fn[4200];
				snprintf(fn, sizeof(fn), "%s/%s", dir, file);
				FILE *lf = fopen(fn, "re");
				unsigned long long v;
				if (lf) {
					if (fscanf(lf, "%llu", &v) == 1 && v < lim)
						lim = v;   /* "max": none */
					fclose(lf);
				}
				char *slash = strrchr(dir, '/');
				if (!slash || (size_t)(slash - dir) < strlen(roots[r]))
					break;
				*slash = 0;
			}
		}
	}
	fclose(f);
	return lim;
}

/*
 * Sizes of the arena (*arena_len) and of the descriptors (*pages_len) for
 * @nr_pages of 2^@shift bytes, checked before anything is mapped: 0, or
 * -ENOMEM when they do not fit in size_t, or when the two together exceed
 * the machine's memory or its control group's limit (the arena is
 * committed at open and never swapped by design: a cache larger than RAM,
 * or than the group may have, could only be refused by the out-of-memory
 * killer).
 */
int arena_sizes(uint64_t nr_pages, uint32_t shift, size_t *arena_len, size_t *pages_len)
{
	if (nr_pages > (SIZE_MAX >> shift) || nr_pages > SIZE_MAX / sizeof(struct page))
		return -ENOMEM;
	*arena_len = (size_t)(nr_pages << shift);
	*pages_len = (size_t)nr_pages * sizeof(struct page);
	if (*arena_len > SIZE_MAX - *pages_len)
		return -ENOMEM;
	long phys = sysconf(_SC_PHYS_PAGES);
	uint64_t ram = UINT64_MAX;       /* unknown: mmap is the judge */
	if (phys > 0 && (uint64_t)phys <= UINT64_MAX / sys_page_size())
		ram = (uint64_t)phys * sys_page_size();
	ram = WBC_MIN(ram, cgroup_limit());
	return (uint64_t)*arena_len + *pages_len > ram ? -ENOMEM : 0;
}

int arena_init(struct wbc_cache *c)
{
	int err = 0;
	/* the arena first: when it cannot be had, nothing else was mapped;
	 * the page descriptors too (writeback and reclaim walk them); both
	 * committed only once both exist */
	c->arena = arena_map(c->arena_len, &err);
	if (c->arena)
		c->pages = (struct page *)arena_map(c->pages_len, &err);
	if (!c->pages) {
		if (c->arena)
			arena_unmap(c->arena, c->arena_len);
		return err;
	}
	if ((err = arena_populate(c->arena, c->arena_len)) ||
	    (err = arena_populate((char *)c->pages, c->pages_len))) {
		arena_unmap((char *)c->pages, c->pages_len);
		arena_unmap(c->arena, c->arena_len);
		c->pages = NULL;
		c->arena = NULL;
		return err;
	}
	wbc_mutex_init(&c->lru_lock);
	wbc_cond_init(&c->free_cond);
	/* Free list in arena order, so a streaming writer gets neighbouring
	 * pages and writeback can merge them into fewer iovecs. */
	for (uint64_t i = c->nr_pages; i-- > 0;) {
		c->pages[i].on_free = true;
		c->pages[i].next_free = c->free_list;
		c->free_list = &c->pages[i];
	}
	c->nr_free = c->nr_pages;
	/* the memalloc threads' reserve: a page is all one needs to go on
	 * (each copy waits for the one before to be written), more keep
	 * their writes flowing; 2..256 pages, a 64th of the cache */
	c->nr_reserve = WBC_MIN(WBC_MAX(c->nr_pages / 64, 2), 256);
	return 0;
}

int arena_destroy(struct wbc_cache *c)
{
	int err = arena_unmap(c->arena, c->arena_len);
	if (!err)
		err = arena_unmap(c->pages, c->pages_len);
	pthread_mutex_destroy(&c->lru_lock);
	pthread_cond_destroy(&c->free_cond);
	return err;
}

bool cache_page_in_arena(const struct wbc_cache *c, const void *addr)
{
	const char *p = addr;
	return p >= c->arena && p < c->arena + c->arena_len;
}
