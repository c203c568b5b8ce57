/*
 * The per-file page index (layer mm, mm/pagemap.c): a radix tree with
 * per-node tag bitmaps.  Callers hold the owning inode's lock.
 */
#ifndef WBC_MM_PAGEMAP_H
#define WBC_MM_PAGEMAP_H

#include <stdbool.h>
#include <stdint.h>

enum pm_tag { PM_TAG_DIRTY, PM_TAG_WRITEBACK, PM_TAG_TOWRITE, PM_NR_TAGS };
#define PM_BITS 6
#define PM_FANOUT (1u << PM_BITS)

struct pm_node;
struct pagemap {
	struct pm_node *root;
	uint64_t count;        /* entries present */
	/* With no tree (root NULL), the entry at index 0 lives here: a file
	 * of one page needs no node (the kernel's xarray does the same). */
	void *single;
	unsigned single_tags;  /* bit t: tag t */
};

void pm_init(struct pagemap *pm);
void pm_destroy(struct pagemap *pm);       /* frees nodes, not entries */
void *pm_lookup(const struct pagemap *pm, uint64_t index);
int pm_insert(struct pagemap *pm, uint64_t index, void *entry);  /* 0, -EEXIST, -ENOMEM */
void *pm_delete(struct pagemap *pm, uint64_t index);             /* removed entry or NULL */
void pm_tag_set(struct pagemap *pm, uint64_t index, enum pm_tag tag);
void pm_tag_clear(struct pagemap *pm, uint64_t index, enum pm_tag tag);
bool pm_tag_get(const struct pagemap *pm, uint64_t index, enum pm_tag tag);
/* First entry at index >= start carrying @tag (or any entry for tag < 0);
 * sets *index.  NULL when none. */
void *pm_next(const struct pagemap *pm, uint64_t start, int tag, uint64_t *index);
bool pm_any_tagged(const struct pagemap *pm, enum pm_tag tag);
void pm_check(const struct pagemap *pm);   /* asserts the structure (tests) */
/* Tests: the @nth node allocation from now fails (0: none). */
void pm_fail_alloc(unsigned nth);

#endif
