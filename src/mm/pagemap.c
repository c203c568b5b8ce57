/*
 * Per-file page index: a radix tree of 64-way nodes keyed by page index.
 *
 * Each node keeps, besides its slots, a bitmap of present slots and one
 * bitmap per tag (DIRTY, WRITEBACK, TOWRITE).  A tag bit in an interior node
 * is set exactly when the child below it has that tag somewhere:
 *
 *   root (shift 12)   tags[DIRTY] = ..1.....1..
 *                                     |     |
 *   node (shift 6)    ........1.   ..1......       <- bit set iff some leaf
 *                             |      |                below is tagged
 *   leaf (shift 0)    [p][p][P][p]  [P][p]         <- P: page tagged DIRTY
 *
 * so "next page with tag T at or after i" skips untagged subtrees by
 * counting trailing zeros of one word per level: O(height) for a hit, and
 * untagged ranges cost nothing.  Height grows as indices grow; 11 levels
 * cover 2^64.  A map whose only entry is at index 0 keeps it in the
 * pagemap itself, with no node (most small files): the first entry
 * elsewhere moves it into a tree.  Callers hold the owning inode's lock.
 */
#include "mm/pagemap.h"
#include "base/base.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct pm_node {
	struct pm_node *parent;
	unsigned shift;          /* index bits below this node: 0 for leaves */
	unsigned offset;         /* slot in parent */
	uint64_t present;
	uint64_t tags[PM_NR_TAGS];
	void *slots[PM_FANOUT];
};

void pm_init(struct pagemap *pm)
{
	pm->root = NULL;
	pm->count = 0;
	pm->single = NULL;
	pm->single_tags = 0;
}

/* The single entry, held outside a tree (root NULL) */
static bool single_mode(const struct pagemap *pm)
{
	return !pm->root && pm->single;
}

static void free_subtree(struct pm_node *n)
{
	if (!n)
		return;
	if (n->shift) {
		uint64_t bits = n->present;
		while (bits) {
			free_subtree(n->slots[__builtin_ctzll(bits)]);
			bits &= bits - 1;
		}
	}
	free(n);
}

void pm_destroy(struct pagemap *pm)
{
	free_subtree(pm->root);
	pm_init(pm);
}

/* Largest index the tree can hold without growing. */
static uint64_t node_max(const struct pm_node *n)
{
	unsigned bits = n->shift + PM_BITS;
	return bits >= 64 ? UINT64_MAX : (1ULL << bits) - 1;
}

static unsigned slot_of(const struct pm_node *n, uint64_t index)
{
	return (unsigned)(index >> n->shift) & (PM_FANOUT - 1);
}

static struct pm_node *leaf_of(const struct pagemap *pm, uint64_t index)
{
	struct pm_node *n = pm->root;
	if (!n || index > node_max(n))
		return NULL;
	while (n && n->shift)
		n = n->slots[slot_of(n, index)];
	return n;
}

void *pm_lookup(const struct pagemap *pm, uint64_t index)
{
	if (!pm->root)
		return index == 0 ? pm->single : NULL;
	struct pm_node *n = leaf_of(pm, index);
	return n ? n->slots[index & (PM_FANOUT - 1)] : NULL;
}

static _Atomic unsigned fail_at;   /* pm_fail_alloc */

void pm_fail_alloc(unsigned nth)
{
	atomic_store(&fail_at, nth);
}

static struct pm_node *node_new(unsigned shift)
{
	unsigned f = atomic_load_explicit(&fail_at, memory_order_relaxed);
	if (f && atomic_fetch_sub(&fail_at, 1) == 1)
		return NULL;
	struct pm_node *n = calloc(1, sizeof(*n));
	if (n)
		n->shift = shift;
	return n;
}

static int tree_insert(struct pagemap *pm, uint64_t index, void *entry);

int pm_insert(struct pagemap *pm, uint64_t index, void *entry)
{
	assert(entry);
	if (!pm->root) {
		if (!pm->single && index == 0) {
			pm->single = entry;
			pm->single_tags = 0;
			pm->count = 1;
			return 0;
		}
		if (pm->single) {
			if (index == 0)
				return -EEXIST;
			/* a second entry: the single one moves into a tree */
			void *e0 = pm->single;
			unsigned tags = pm->single_tags;
			pm->single = NULL;
			pm->single_tags = 0;
			pm->count = 0;
			int err = tree_insert(pm, 0, e0);
			if (err) {
				pm->single = e0;
				pm->single_tags = tags;
				pm->count = 1;
				return err;
			}
			for (int t = 0; t < PM_NR_TAGS; t++)
				if (tags & (1u << t))
					pm_tag_set(pm, 0, t);
		}
	}
	return tree_insert(pm, index, entry);
}

/* A failed insert takes back the nodes it made (a chain under @top, in
 * slot @s of its parent; @top the root when the tree was empty): the tree
 * never holds an empty node, and a failed insert leaves it as it was. */
static void insert_undo(struct pagemap *pm, struct pm_node *top, uint64_t index)
{
	struct pm_node *parent = top->parent;
	unsigned s = top->offset;
	for (struct pm_node *n = top, *next; n; n = next) {
		next = n->shift ? n->slots[slot_of(n, index)] : NULL;
		free(n);
	}
	if (parent) {
		parent->slots[s] = NULL;
		parent->present &= ~(1ULL << s);
	} else {
		pm->root = NULL;
	}
}

static int tree_insert(struct pagemap *pm, uint64_t index, void *entry)
{
	struct pm_node *made = NULL;   /* the first node this insert made */
	if (!pm->root) {
		/* first entry: a root just tall enough, so the tree never holds
		 * an empty node (growth below summarizes the old root as one
		 * present child) */
		unsigned shift = 0;
		while (shift + PM_BITS < 64 && index >> (shift + PM_BITS))
			shift += PM_BITS;
		if (!(pm->root = node_new(shift)))
			return -ENOMEM;
		made = pm->root;
	}
	/* Grow: the old root (never empty: it holds an entry) becomes slot 0
	 * of a taller root; its tags and presence summarize into bit 0 of the
	 * new one.  A root made just now is tall enough: no growth. */
	while (index > node_max(pm->root)) {
		struct pm_node *old = pm->root, *r = node_new(old->shift + PM_BITS);
		if (!r)
			return -ENOMEM;   /* the roots made so far each hold the old one */
		r->slots[0] = old;
		r->present = 1;
		for (int t = 0; t < PM_NR_TAGS; t++)
			if (old->tags[t])
				r->tags[t] = 1;
		old->parent = r;
		old->offset = 0;
		pm->root = r;
	}
	struct pm_node *n = pm->root;
	while (n->shift) {
		unsigned s = slot_of(n, index);
		struct pm_node *c = n->slots[s];
		if (!c) {
			if (!(c = node_new(n->shift - PM_BITS))) {
				if (made)
					insert_undo(pm, made, index);
				return -ENOMEM;
			}
			c->parent = n;
			c->offset = s;
			n->slots[s] = c;
			n->present |= 1ULL << s;
			if (!made)
				made = c;
		}
		n = c;
	}
	unsigned s = index & (PM_FANOUT - 1);
	if (n->slots[s])
		return -EEXIST;
	n->slots[s] = entry;
	n->present |= 1ULL << s;
	pm->count++;
	return 0;
}

/* Clear tag bits upward from @n while a node's bitmap becomes empty. */
static void tag_clear_up(struct pm_node *n, unsigned s, enum pm_tag tag)
{
	while (n) {
		n->tags[tag] &= ~(1ULL << s);
		if (n->tags[tag])
			return;
		s = n->offset;
		n = n->parent;
	}
}

void pm_tag_set(struct pagemap *pm, uint64_t index, enum pm_tag tag)
{
	if (single_mode(pm)) {
		assert(index == 0);
		pm->single_tags |= 1u << tag;
		return;
	}
	struct pm_node *n = leaf_of(pm, index);
	unsigned s = index & (PM_FANOUT - 1);
	assert(n && n->slots[s]);
	while (n) {
		bool was = n->tags[tag] != 0;
		n->tags[tag] |= 1ULL << s;
		if (was)
			return;   /* ancestors already summarize a tagged child */
		s = n->offset;
		n = n->parent;
	}
}

void pm_tag_clear(struct pagemap *pm, uint64_t index, enum pm_tag tag)
{
	if (!pm->root) {
		if (index == 0)
			pm->single_tags &= ~(1u << tag);
		return;
	}
	struct pm_node *n = leaf_of(pm, index);
	unsigned s = index & (PM_FANOUT - 1);
	if (n && (n->tags[tag] & (1ULL << s)))
		tag_clear_up(n, s, tag);
}

bool pm_tag_get(const struct pagemap *pm, uint64_t index, enum pm_tag tag)
{
	if (!pm->root)
		return index == 0 && pm->single && (pm->single_tags >> tag & 1);
	struct pm_node *n = leaf_of(pm, index);
	return n && (n->tags[tag] >> (index & (PM_FANOUT - 1)) & 1);
}

bool pm_any_tagged(const struct pagemap *pm, enum pm_tag tag)
{
	if (!pm->root)
		return pm->single && (pm->single_tags >> tag & 1);
	return pm->root->tags[tag];
}

void *pm_delete(struct pagemap *pm, uint64_t index)
{
	if (!pm->root) {
		void *e = index == 0 ? pm->single : NULL;
		if (e) {
			pm->single = NULL;
			pm->single_tags = 0;
			pm->count = 0;
		}
		return e;
	}
	struct pm_node *n = leaf_of(pm, index);
	unsigned s = index & (PM_FANOUT - 1);
	if (!n || !n->slots[s])
		return NULL;
	void *entry = n->slots[s];
	for (int t = 0; t < PM_NR_TAGS; t++)
		if (n->tags[t] & (1ULL << s))
			tag_clear_up(n, s, t);
	n->slots[s] = NULL;
	n->present &= ~(1ULL << s);
	pm->count--;
	/* Free nodes that became empty, bottom up. */
	while (n && !n->present) {
		struct pm_node *p = n->parent;
		if (p) {
			p->slots[n->offset] = NULL;
			p->present &= ~(1ULL << n->offset);
		} else {
			pm->root = NULL;
		}
		free(n);
		n = p;
	}
	return entry;
}

static void *find(const struct pm_node *n, uint64_t base, uint64_t start, int tag,
		  uint64_t *out)
{
	unsigned o = start > base ? (unsigned)((start - base) >> n->shift) : 0;
	uint64_t bits = tag < 0 ? n->present : n->tags[tag];
	bits &= ~0ULL << o;
	while (bits) {
		unsigned i = __builtin_ctzll(bits);
		uint64_t cbase = base + ((uint64_t)i << n->shift);
		if (!n->shift) {
			*out = cbase;
			return n->slots[i];
		}
		void *r = find(n->slots[i], cbase, WBC_MAX(start, cbase), tag, out);
		if (r)
			return r;
		bits &= bits - 1;
	}
	return NULL;
}

void *pm_next(const struct pagemap *pm, uint64_t start, int tag, uint64_t *index)
{
	if (!pm->root) {
		if (start || !pm->single || (tag >= 0 && !(pm->single_tags >> tag & 1)))
			return NULL;
		*index = 0;
		return pm->single;
	}
	if (start > node_max(pm->root))
		return NULL;
	return find(pm->root, 0, start, tag, index);
}

/* Structural check for tests: presence and tag summaries agree with the
 * children, no node is empty, parent links and offsets are right.
 * Returns the entries found. */
static uint64_t check_node(const struct pm_node *n, const struct pm_node *parent, unsigned off)
{
	uint64_t count = 0, tags[PM_NR_TAGS] = { 0 }, present = 0;
	assert(n->parent == parent && (!parent || n->offset == off));
	for (unsigned i = 0; i < PM_FANOUT; i++) {
		if (!n->slots[i])
			continue;
		present |= 1ULL << i;
		if (n->shift) {
			const struct pm_node *c = n->slots[i];
			assert(c->shift + PM_BITS == n->shift);
			count += check_node(c, n, i);
			for (int t = 0; t < PM_NR_TAGS; t++)
				if (c->tags[t])
					tags[t] |= 1ULL << i;
		} else {
			count++;
		}
	}
	assert(present == n->present && present);
	for (int t = 0; t < PM_NR_TAGS; t++)
		assert(!n->shift ? (n->tags[t] & ~present) == 0 : tags[t] == n->tags[t]);
	(void)off;
	return count;
}

void pm_check(const struct pagemap *pm)
{
	assert(!pm->root || !pm->single);
	assert(pm->single || !pm->single_tags);
	uint64_t n = pm->root ? check_node(pm->root, NULL, 0) : pm->single ? 1 : 0;
	assert(n == pm->count);
	(void)n;
}
