/*
 * Files: inode lookup and lifetime, handles, and the read / write /
 * truncate / fsync paths.
 *
 * Concurrency.  pread and pwrite hold inode->rwsem shared, so writers to
 * different pages of one file run in parallel; each page is claimed with
 * PG_LOCKED under the short inode->lock and its data is copied with no lock
 * held.  A writer waits for a page under writeback (stable pages: the bytes
 * being written to the backend never change under the I/O).  truncate holds
 * rwsem exclusive.  The backend's size is owned by whoever sets
 * inode->sizing (truncate, size sync); the flusher does not submit for a
 * file while it is set.
 *
 * Lifetime.  An inode is referenced by its handles, by the dirty lists
 * (while I_DIRTY or I_SYNC) and by each bio in flight.  The last iput
 * drops its clean pages and closes the backend object.
 *
 * Handles are generation-checked slots in a table of fixed chunks, so a
 * handle used after close is answered -EBADF instead of touching freed
 * memory.
 */
#include "internal.h"

#include <limits.h>

/* ------------------------------------------------------------------ */
/* handle table                                                         */

#define HCHUNK_BITS 12
#define HCHUNK (1u << HCHUNK_BITS)
#define HMAX_CHUNKS 4096          /* 16M handles open at once */

struct hslot {
	atomic_uint gen;              /* odd: in use */
	struct wbc_file f;
	uint32_t next_free;
};

static pthread_mutex_t htab_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static struct hslot *_Atomic htab[HMAX_CHUNKS];   /* htab_lock to grow */
static uint32_t hfree = UINT32_MAX, hnext;        /* htab_lock */

static struct hslot *hslot_of(uint32_t i)
{
	struct hslot *chunk = atomic_load_explicit(&htab[i >> HCHUNK_BITS], memory_order_acquire);
	return chunk ? &chunk[i & (HCHUNK - 1)] : NULL;
}

static wbc_file *handle_encode(uint32_t slot, uint32_t gen)
{
	return (wbc_file *)(uintptr_t)(((uint64_t)(slot + 1) << 32) | gen);
}

static struct wbc_file *handle_get(wbc_file *h)
{
	uint64_t v = (uint64_t)(uintptr_t)h;
	uint64_t slot1 = v >> 32;
	if (!slot1 || slot1 > (uint64_t)HMAX_CHUNKS * HCHUNK)
		return NULL;
	struct hslot *s = hslot_of((uint32_t)(slot1 - 1));
	if (!s || atomic_load_explicit(&s->gen, memory_order_acquire) != (uint32_t)v)
		return NULL;
	return &s->f;
}

static int handle_alloc(uint32_t *slot, uint32_t *gen, struct hslot **out)
{
	pthread_mutex_lock(&htab_lock);
	uint32_t i = hfree;
	struct hslot *s;
	if (i != UINT32_MAX) {
		s = hslot_of(i);
		hfree = s->next_free;
	} else {
		i = hnext;
		if (i >> HCHUNK_BITS >= HMAX_CHUNKS) {
			pthread_mutex_unlock(&htab_lock);
			return -EMFILE;
		}
		if (!htab[i >> HCHUNK_BITS]) {
			struct hslot *chunk = calloc(HCHUNK, sizeof(*chunk));
			if (!chunk) {
				pthread_mutex_unlock(&htab_lock);
				return -ENOMEM;
			}
			atomic_store_explicit(&htab[i >> HCHUNK_BITS], chunk, memory_order_release);
		}
		hnext++;
		s = hslot_of(i);
	}
	pthread_mutex_unlock(&htab_lock);
	*slot = i;
	*gen = atomic_load(&s->gen) + 1;   /* odd while in use */
	*out = s;
	return 0;
}

static void handle_free(struct hslot *s, uint32_t slot)
{
	pthread_mutex_lock(&htab_lock);
	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);   /* even: free */
	s->next_free = hfree;
	hfree = slot;
	pthread_mutex_unlock(&htab_lock);
}

/* ------------------------------------------------------------------ */
/* inode lookup and lifetime                                            */

#define SHARD_INITIAL 64

static void inode_release_mem(struct inode *ino);

static struct name_shard *shard_of(struct wbc_dev *dev, uint64_t h)
{
	return &dev->shards[h >> 58];   /* the top 6 bits; chains use the low */
}

/*
 * Start the misses that unhashing @ino will take (iput's last drop): its
 * shard's lock and the neighbours in its chain, lines the writers who
 * made those files wrote.  The neighbours are read without the shard's
 * lock, as a hint only; ThreadSanitizer cannot know that, so its builds
 * leave them out.
 */
void inode_prefetch_unhash(const struct inode *ino)
{
	__builtin_prefetch(shard_of(ino->dev, ino->hash), 1);
#ifndef __SANITIZE_THREAD__
	struct inode **pprev = __atomic_load_n(&ino->hash_pprev, __ATOMIC_RELAXED);
	struct inode *next = __atomic_load_n(&ino->hash_next, __ATOMIC_RELAXED);
	if (pprev)
		__builtin_prefetch(pprev, 1);
	if (next)
		__builtin_prefetch(&next->hash_pprev, 1);
#endif
}

/* Start the miss on the page of a one-page file (most small files), read
 * without the inode's lock as a hint only (left out under ThreadSanitizer,
 * as above). */
void inode_prefetch_page(const struct inode *ino)
{
#ifndef __SANITIZE_THREAD__
	if (!__atomic_load_n(&ino->map.root, __ATOMIC_RELAXED)) {
		void *p = __atomic_load_n(&ino->map.single, __ATOMIC_RELAXED);
		if (p)
			__builtin_prefetch(p, 1);
	}
#else
	(void)ino;
#endif
}

int names_init(struct wbc_dev *dev)
{
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		if (!(s->tab = calloc(SHARD_INITIAL, sizeof(*s->tab)))) {
			while (i-- > 0) {
				free(dev->shards[i].tab);
				pthread_mutex_destroy(&dev->shards[i].lock);
			}
			return -ENOMEM;
		}
		s->size = SHARD_INITIAL;
		s->free_tail = &s->free;
		wbc_mutex_init(&s->lock);
	}
	return 0;
}

/* Free half of every shard's free inodes (the flusher, every periodic
 * wakeup: an idle device holds none after a minute or so). */
void names_trim(struct wbc_dev *dev)
{
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		struct inode *drop = NULL;
		pthread_mutex_lock(&s->lock);
		uint32_t keep = s->nfree / 2;
		if (s->nfree > keep) {
			struct inode **pp = &s->free;
			for (uint32_t k = 0; k < keep; k++)
				pp = &(*pp)->hash_next;
			drop = *pp;
			*pp = NULL;
			s->free_tail = pp;
			s->nfree = keep;
		}
		pthread_mutex_unlock(&s->lock);
		while (drop) {
			struct inode *next = drop->hash_next;
			inode_release_mem(drop);
			drop = next;
		}
	}
}

size_t names_destroy(struct wbc_dev *dev)
{
	size_t left = 0;
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		left += s->n;
		while (s->free) {
			struct inode *ino = s->free;
			s->free = ino->hash_next;
			s->nfree--;
			inode_release_mem(ino);
		}
		free(s->tab);
		pthread_mutex_destroy(&s->lock);
	}
	return left;
}

static struct inode *hash_find_locked(struct name_shard *s, const char *name, uint64_t h)
{
	assert_held(&s->lock);
	struct inode *i = s->tab[h & (s->size - 1)];
	while (i && (i->hash != h || strcmp(i->name, name)))
		i = i->hash_next;
	return i;
}

static void hash_link(struct inode **head, struct inode *ino)
{
	ino->hash_next = *head;
	if (*head)
		(*head)->hash_pprev = &ino->hash_next;
	ino->hash_pprev = head;
	*head = ino;
}

/* Double the shard's table (O(n) once per doubling, in one shard). */
static void hash_grow_locked(struct name_shard *s)
{
	assert_held(&s->lock);
	size_t nsize = (size_t)s->size * 2;
	struct inode **n = calloc(nsize, sizeof(*n));
	if (!n || nsize > UINT32_MAX) {
		free(n);
		return;   /* keep the smaller table: longer chains, still correct */
	}
	for (size_t b = 0; b < s->size; b++) {
		struct inode *i = s->tab[b];
		while (i) {
			struct inode *next = i->hash_next;
			hash_link(&n[i->hash & (nsize - 1)], i);
			i = next;
		}
	}
	free(s->tab);
	s->tab = n;
	s->size = (uint32_t)nsize;
}

/* Free inodes a shard keeps at most: 64 shards hold 64Ki inodes (about
 * 26 MB), enough to carry a background writeback burst (it runs until
 * the dirty pages fall below the background threshold, then writers
 * dirty again) over to the writers' next files.  names_trim() gives them
 * back over time. */
#define SHARD_FREE_MAX 1024

/*
 * An inode's memory keeps its lock, condition variable and rwlock
 * initialized (and idle) from inode_new to inode_release_mem, through
 * every file that reuses it: a teardown and the next create skip six
 * calls into the thread library, and the completion thread does not
 * touch those lines.  inode_clear zeroes everything else.
 */
static void inode_release_mem(struct inode *ino)
{
	pthread_rwlock_destroy(&ino->rwsem);
	pthread_mutex_destroy(&ino->lock);
	pthread_cond_destroy(&ino->wait);
	free(ino);
}

static void inode_clear(struct inode *ino)
{
	_Static_assert(offsetof(struct inode, lock) < offsetof(struct inode, wait) &&
		       offsetof(struct inode, wait) < offsetof(struct inode, rwsem),
		       "inode_clear keeps these in this order");
	const struct { size_t off, len; } keep[] = {
		{ offsetof(struct inode, lock), sizeof(ino->lock) },
		{ offsetof(struct inode, wait), sizeof(ino->wait) },
		{ offsetof(struct inode, rwsem), sizeof(ino->rwsem) },
	};
	uint32_t cap = ino->name_cap;
	char *b = (char *)ino;
	size_t at = 0;
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		memset(b + at, 0, keep[i].off - at);
		at = keep[i].off + keep[i].len;
	}
	memset(b + at, 0, offsetof(struct inode, name_buf) - at);
	ino->name_cap = cap;
}

/* Keep the memory of @ino (torn down, or never set up) in @s for the next
 * inode made there, or free it. */
static void inode_keep(struct name_shard *s, struct inode *ino)
{
	pthread_mutex_lock(&s->lock);
	if (s->nfree < SHARD_FREE_MAX) {
		/* at the tail: the head, taken next, stays put, so the lines
		 * of the one after it can be fetched ahead (inode_reuse_locked) */
		ino->hash_next = NULL;
		*s->free_tail = ino;
		s->free_tail = &ino->hash_next;
		s->nfree++;
		ino = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (ino)
		inode_release_mem(ino);
}

/* Tear @ino down (nothing can reach it) and keep its memory in @s, the
 * shard it was found by. */
static void inode_free(struct name_shard *s, struct inode *ino)
{
	pm_destroy(&ino->map);
	inode_keep(s, ino);
}

/* A free inode of @s with room for a name of @nlen bytes, zeroed; NULL
 * when the first one has not. */
static struct inode *inode_reuse_locked(struct name_shard *s, size_t nlen)
{
	assert_held(&s->lock);
	struct inode *ino = s->free;
	if (!ino || ino->name_cap < nlen)
		return NULL;
	s->free = ino->hash_next;
	if (!s->free)
		s->free_tail = &s->free;
	s->nfree--;
	/* the next create here takes the new head: its lines were written
	 * on the completion thread's CPU, start moving them now */
	if (s->free)
		for (size_t off = 0; off < offsetof(struct inode, name_buf); off += 64)
			__builtin_prefetch((char *)s->free + off, 1);
	inode_clear(ino);
	return ino;
}

/* A new zeroed inode for a name of @nlen bytes (rounded up, so that more
 * free inodes fit later names). */
static struct inode *inode_new(size_t nlen)
{
	/* 64-byte aligned: the fields are laid out by line */
	size_t bytes = (offsetof(struct inode, name_buf) + nlen + 63) & ~(size_t)63;
	struct inode *ino = aligned_alloc(64, bytes);
	if (ino && !inode_addr_ok(ino)) {
		/* an address the inbox cannot pack (never from malloc on
		 * Linux): no memory we can use */
		free(ino);
		ino = NULL;
	}
	if (ino) {
		memset(ino, 0, bytes);
		ino->name_cap = (uint32_t)(bytes - offsetof(struct inode, name_buf));
		pthread_rwlock_init(&ino->rwsem, NULL);
		wbc_mutex_init(&ino->lock);
		wbc_cond_init(&ino->wait);
	}
	return ino;
}

struct inode *iget(struct wbc_dev *dev, const char *name, bool create,
		   struct wbc_group *group, int *err)
{
	uint64_t h = wbc_name_hash(name);
	struct name_shard *s = shard_of(dev, h);
	size_t nlen = strlen(name) + 1;
	pthread_mutex_lock(&s->lock);
	struct inode *ino = hash_find_locked(s, name, h);
	if (ino) {
		atomic_fetch_add_explicit(&ino->refs, 1, memory_order_relaxed);
		pthread_mutex_unlock(&s->lock);
		return ino;
	}
	/* a file made now takes a kept inode in this hold; a lookup that
	 * may find nothing waits for the backend first */
	ino = create ? inode_reuse_locked(s, nlen) : NULL;
	pthread_mutex_unlock(&s->lock);

	void *obj;
	uint64_t size;
	*err = backend_open(dev->be, name, create, &obj, &size);
	if (*err) {
		if (ino)
			inode_keep(s, ino);
		return NULL;
	}
	if (!ino && !(ino = inode_new(nlen))) {
		backend_close(dev->be, obj);
		*err = -ENOMEM;
		return NULL;
	}
	ino->name = memcpy(ino->name_buf, name, nlen);
	ino->dev = dev;
	ino->obj = obj;
	ino->group = group;
	ino->hash = h;
	ino->i_size = ino->backend_size = size;
	pm_init(&ino->map);
	ino->wb_next = NULL;
	atomic_init(&ino->refs, 1);

	pthread_mutex_lock(&s->lock);
	struct inode *other = hash_find_locked(s, name, h);
	if (other) {   /* lost a race with another opener */
		atomic_fetch_add_explicit(&other->refs, 1, memory_order_relaxed);
		pthread_mutex_unlock(&s->lock);
		backend_close(dev->be, obj);
		inode_free(s, ino);
		return other;
	}
	if (s->n >= s->size)
		hash_grow_locked(s);
	hash_link(&s->tab[h & (s->size - 1)], ino);
	s->n++;
	pthread_mutex_unlock(&s->lock);
	return ino;
}

/* Take another reference; the caller holds one, so no lock is needed
 * (mark_inode_dirty calls this under the dirty-list lock, which must never
 * wait for the name hash). */
void igrab(struct inode *ino)
{
	unsigned old = atomic_fetch_add_explicit(&ino->refs, 1, memory_order_relaxed);
	assert(old > 0);
	(void)old;
}

/* Remove every page of @ino from the cache; dirty ones are uncharged (only
 * at destruction after a failed sync, or by truncate). Caller: ino->lock. */
static void drop_pages_from_locked(struct inode *ino, uint64_t first)
{
	assert_held(&ino->lock);
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	uint64_t idx = first, dropped_dirty = 0, dropped_err = 0;
	struct page *p;
	while ((p = pm_next(&ino->map, idx, -1, &idx))) {
		uint32_t fl = pg_flags(p);
		assert(!(fl & (PG_WRITEBACK | PG_LOCKED)));
		if (fl & PG_DIRTY)
			dropped_dirty++;
		if (fl & PG_ERROR)
			dropped_err++;
		pm_delete(&ino->map, idx);
		ino->nr_pages--;
		if (!end_batch_defer_page(p))
			page_release(c, p);
		if (idx == UINT64_MAX)
			break;
		idx++;
	}
	if (dropped_dirty) {
		ino->nr_dirty -= dropped_dirty;
		account_dropped(ino, (long)dropped_dirty);
	}
	if (dropped_err) {
		atomic_fetch_sub(&c->st_at_risk_pages, (long long)dropped_err);
		atomic_fetch_sub(&dev->at_risk_pages, (long long)dropped_err);
	}
}

void inode_drop_all_pages(struct inode *ino)
{
	pthread_mutex_lock(&ino->lock);
	drop_pages_from_locked(ino, 0);
	pthread_mutex_unlock(&ino->lock);
}

void iput(struct inode *ino)
{
	struct wbc_dev *dev = ino->dev;
	/* Not the last reference: drop it without the lock.  The last one
	 * drops under the shard's lock, so iget never finds an inode at zero. */
	unsigned r = atomic_load_explicit(&ino->refs, memory_order_relaxed);
	while (r > 1)
		if (atomic_compare_exchange_weak_explicit(&ino->refs, &r, r - 1,
							  memory_order_acq_rel, memory_order_relaxed))
			return;
	struct name_shard *s = shard_of(dev, ino->hash);
	pthread_mutex_lock(&s->lock);
	unsigned old = atomic_fetch_sub_explicit(&ino->refs, 1, memory_order_acq_rel);
	assert(old > 0);
	if (old > 1) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	*ino->hash_pprev = ino->hash_next;
	if (ino->hash_next)
		ino->hash_next->hash_pprev = ino->hash_pprev;
	s->n--;
	pthread_mutex_unlock(&s->lock);

	/* No handle, no list, no bio: nothing can reach it but reclaim. */
	assert(!(ino->state & (I_DIRTY | I_SYNC)) && !ino->nr_writeback);
	if (ino->backend_size != ino->i_size) {
		int err = backend_resize(dev->be, ino->obj, ino->i_size);
		if (err)
			dev_record_error(dev, err);
	}
	inode_drop_all_pages(ino);
	backend_close(dev->be, ino->obj);
	if (!end_batch_defer_inode(ino))
		inode_free(s, ino);
}

void inode_dispose(struct inode *ino)
{
	inode_free(shard_of(ino->dev, ino->hash), ino);
}

/*
 * Make the backend object's size equal i_size, once no write to the file
 * is in flight (a full tail page written back extends the backend past
 * i_size; the size is trimmed here, at fsync, sync and by the flusher).
 */
int inode_sync_size(struct inode *ino)
{
	struct backend *be = ino->dev->be;
	pthread_mutex_lock(&ino->lock);
	while (ino->sizing)
		inode_wait_locked(ino);
	if (ino->backend_size == ino->i_size) {
		pthread_mutex_unlock(&ino->lock);
		return 0;
	}
	ino->sizing = true;
	while (ino->nr_writeback)
		inode_wait_locked(ino);
	uint64_t size = ino->i_size;
	pthread_mutex_unlock(&ino->lock);
	int err = backend_resize(be, ino->obj, size);
	pthread_mutex_lock(&ino->lock);
	if (!err)
		ino->backend_size = size;
	else
		errseq_record(&ino->wb_err, err);
	ino->sizing = false;
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);
	return err;
}

/* ------------------------------------------------------------------ */
/* handles                                                              */

static bool name_ok(const struct backend *be, const char *name)
{
	if (be->single)
		return name[0] == '\0';
	size_t n = strnlen(name, 256);
	return n > 0 && n <= 255 && !strchr(name, '/') && strcmp(name, ".") &&
	       strcmp(name, "..");
}

int wbc_file_open(wbc_dev *dev, const char *name, int flags, wbc_file **out)
{
	return wbc_file_open_group(dev, name, flags, NULL, out);
}

int wbc_file_open_group(wbc_dev *dev, const char *name, int flags, wbc_group *group,
			wbc_file **out)
{
	if (!dev || !out || (flags & ~(WBC_O_CREAT | WBC_O_TRUNC)) ||
	    (group && group->cache != dev->cache))
		return -EINVAL;
	if (!name)
		name = "";
	if (!name_ok(dev->be, name))
		return -EINVAL;
	uint32_t slot, gen;
	struct hslot *s;
	int err = handle_alloc(&slot, &gen, &s);
	if (err)
		return err;
	struct inode *ino = iget(dev, name, flags & WBC_O_CREAT, group, &err);
	if (!ino) {
		pthread_mutex_lock(&htab_lock);
		s->next_free = hfree;
		hfree = slot;
		pthread_mutex_unlock(&htab_lock);
		return err;
	}
	s->f.inode = ino;
	s->f.dev = dev;
	pthread_mutex_lock(&ino->lock);
	s->f.err_since = ino->wb_err.seq;
	pthread_mutex_unlock(&ino->lock);
	atomic_store_explicit(&s->gen, gen, memory_order_release);
	*out = handle_encode(slot, gen);
	if (flags & WBC_O_TRUNC) {
		err = wbc_truncate(*out, 0);
		if (err) {
			wbc_file_close(*out);
			*out = NULL;
			return err;
		}
	}
	return 0;
}

int wbc_file_close(wbc_file *h)
{
	if (!h)
		return 0;
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	uint64_t v = (uint64_t)(uintptr_t)h;
	uint32_t slot = (uint32_t)((v >> 32) - 1);
	struct inode *ino = f->inode;
	handle_free(hslot_of(slot), slot);
	iput(ino);
	return 0;
}

/* Close every handle that belongs to @dev (cache close). */
void handles_close_dev(struct wbc_dev *dev)
{
	pthread_mutex_lock(&htab_lock);
	uint32_t n = hnext;
	pthread_mutex_unlock(&htab_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct hslot *s = hslot_of(i);
		uint32_t gen = atomic_load(&s->gen);
		if ((gen & 1) && s->f.dev == dev)
			wbc_file_close(handle_encode(i, gen));
	}
}

/* ------------------------------------------------------------------ */
/* page claim / release                                                 */

/* A page claim: what the caller asks for and what it got. */
struct claim {
	bool for_write;     /* wait for writeback to end (stable pages) */
	bool full;          /* the write covers the whole page */
	uint64_t end;       /* write: its end offset */
	/* results */
	bool uptodate;      /* the page held the file's data at claim */
	bool dirtied;       /* the claim already dirtied the page and set i_size */
	bool newly;         /* ... and the page was clean before */
	uint64_t isize;     /* i_size at claim, before this write */
};

/*
 * Return page @idx of @ino with PG_LOCKED set, inserting a fresh (not
 * up-to-date) page when absent.  Caller holds rwsem.  A write whose data
 * will be complete after its copy (the page is up to date, or the write
 * covers it) is dirtied here, in the same critical section: the flusher
 * never takes a locked page, so marking before the copy is safe, and the
 * writer then needs no second trip through the inode lock (page_unlock
 * is one atomic step).
 */
static int grab_page(struct inode *ino, uint64_t idx, struct claim *cl, struct page **out)
{
	struct wbc_cache *c = ino->dev->cache;
	struct page *spare = NULL, *p;
	int err = 0;
	pthread_mutex_lock(&ino->lock);
	for (;;) {
		p = pm_lookup(&ino->map, idx);
		if (p) {
			uint32_t fl = pg_flags(p);
			if (fl & PG_LOCKED) {
				page_wait_unlocked(ino, p);
				continue;
			}
			if (cl->for_write && (fl & PG_WRITEBACK)) {
				inode_wait_locked(ino);
				continue;
			}
			pg_set(p, PG_LOCKED);
			break;
		}
		if (spare) {
			err = pm_insert(&ino->map, idx, spare);
			if (err)
				break;
			atomic_store_explicit(&spare->flags, PG_LOCKED, memory_order_relaxed);
			page_bind(c, spare, ino, idx);
			ino->nr_pages++;
			p = spare;
			spare = NULL;
			break;
		}
		pthread_mutex_unlock(&ino->lock);
		spare = page_alloc(c, &err);
		pthread_mutex_lock(&ino->lock);
		if (!spare)
			break;   /* only dead devices hold the pages */
	}
	cl->isize = ino->i_size;
	cl->dirtied = cl->newly = false;
	if (p) {
		uint32_t fl = pg_flags(p);
		cl->uptodate = fl & PG_UPTODATE;
		if (cl->for_write && (cl->uptodate || cl->full)) {
			cl->dirtied = true;
			cl->newly = !(fl & PG_DIRTY);
			pg_set(p, PG_UPTODATE | PG_DIRTY);
			if (cl->newly) {
				pm_tag_set(&ino->map, idx, PM_TAG_DIRTY);
				ino->nr_dirty++;
			}
			if (cl->end > ino->i_size)
				ino->i_size = cl->end;
		}
	}
	pthread_mutex_unlock(&ino->lock);
	if (spare) {
		pthread_mutex_lock(&c->lru_lock);
		page_free_locked(c, spare);
		pthread_mutex_unlock(&c->lru_lock);
	}
	if (err)
		return err;
	if (!atomic_load_explicit(&p->referenced, memory_order_relaxed))
		atomic_store_explicit(&p->referenced, true, memory_order_relaxed);
	*out = p;
	return 0;
}

/* Drop PG_LOCKED (setting @set) in one atomic step, with no lock held;
 * take the inode lock only to wake a waiter. */
static void page_unlock(struct inode *ino, struct page *p, uint32_t set)
{
	uint32_t old = atomic_load_explicit(&p->flags, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&p->flags, &old,
						      (old | set) & ~(PG_LOCKED | PG_WAITERS),
						      memory_order_release, memory_order_relaxed))
		;
	assert(old & PG_LOCKED);
	if (old & PG_WAITERS) {
		pthread_mutex_lock(&ino->lock);
		inode_wake_locked(ino);
		pthread_mutex_unlock(&ino->lock);
	}
}

/* Read page @p's data from the backend; zeros past the backend's end and
 * past @isize. */
static int fill_page(struct inode *ino, struct page *p, uint64_t isize)
{
	struct wbc_cache *c = ino->dev->cache;
	size_t ps = c->page_size;
	char *data = page_data(c, p);
	uint64_t pos = p->index << c->page_shift;
	if (pos >= isize) {
		memset(data, 0, ps);
		return 0;
	}
	ssize_t n = backend_read_sync(ino->dev->be, ino->obj, data, ps, pos);
	if (n < 0)
		return (int)n;
	atomic_fetch_add(&c->st_read_in, (uint64_t)n);
	size_t valid = (size_t)WBC_MIN((uint64_t)n, isize - pos);
	memset(data + valid, 0, ps - valid);
	return 0;
}

/* ------------------------------------------------------------------ */
/* read / write                                                         */

static int range_check(uint64_t off, size_t len)
{
	if (off > WBC_MAX_OFFSET || len > WBC_MAX_OFFSET - off || len > SSIZE_MAX)
		return -EINVAL;
	return 0;
}

ssize_t wbc_pread(wbc_file *h, void *buf, size_t len, uint64_t off)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (!buf && len)
		return -EINVAL;
	int err = range_check(off, len);
	if (err)
		return err;
	struct inode *ino = f->inode;
	struct wbc_cache *c = ino->dev->cache;
	size_t done = 0;
	pthread_rwlock_rdlock(&ino->rwsem);
	while (done < len) {
		uint64_t pos = off + done;
		struct page *p;
		struct claim cl = { .for_write = false };
		err = grab_page(ino, pos >> c->page_shift, &cl, &p);
		if (err)
			break;
		uint64_t isize = cl.isize;
		if (pos >= isize) {
			page_unlock(ino, p, 0);
			break;
		}
		if (!cl.uptodate && (err = fill_page(ino, p, isize))) {
			page_unlock(ino, p, 0);
			break;
		}
		size_t poff = (size_t)(pos & (c->page_size - 1));
		size_t n = (size_t)WBC_MIN((uint64_t)WBC_MIN(c->page_size - poff, len - done),
					   isize - pos);
		memcpy((char *)buf + done, page_data(c, p) + poff, n);
		page_unlock(ino, p, PG_UPTODATE);
		done += n;
	}
	pthread_rwlock_unlock(&ino->rwsem);
	return done ? (ssize_t)done : err;
}

/* Copy into one page and mark it dirty.  Returns 1 when the page was
 * newly dirtied, 0 when it was dirty already, or -errno. */
static int write_page(struct inode *ino, uint64_t pos, const char *src, size_t n)
{
	struct wbc_cache *c = ino->dev->cache;
	size_t poff = (size_t)(pos & (c->page_size - 1));
	struct page *p;
	struct claim cl = { .for_write = true, .full = n == c->page_size, .end = pos + n };
	int err = grab_page(ino, pos >> c->page_shift, &cl, &p);
	if (err)
		return err;
	if (cl.dirtied) {
		/* the fast path: one trip through the inode lock */
		memcpy(page_data(c, p) + poff, src, n);
		page_unlock(ino, p, 0);
	} else {
		/* a partial write to a page not in the cache: read it first */
		if ((err = fill_page(ino, p, cl.isize))) {
			page_unlock(ino, p, 0);
			return err;
		}
		memcpy(page_data(c, p) + poff, src, n);
		pthread_mutex_lock(&ino->lock);
		cl.newly = !(pg_flags(p) & PG_DIRTY);
		pg_set(p, PG_UPTODATE | PG_DIRTY);
		if (cl.newly) {
			pm_tag_set(&ino->map, p->index, PM_TAG_DIRTY);
			ino->nr_dirty++;
		}
		if (cl.end > ino->i_size)
			ino->i_size = cl.end;
		pthread_mutex_unlock(&ino->lock);
		page_unlock(ino, p, 0);
	}
	if (cl.newly) {
		account_dirtied(ino, 1);
		mark_inode_dirty(ino);
	}
	return cl.newly;
}

ssize_t wbc_pwrite(wbc_file *h, const void *buf, size_t len, uint64_t off)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (!buf && len)
		return -EINVAL;
	int err = range_check(off, len);
	if (err)
		return err;
	struct inode *ino = f->inode;
	struct wbc_dev *dev = ino->dev;
	struct wbc_cache *c = dev->cache;
	size_t done = 0;
	pthread_rwlock_rdlock(&ino->rwsem);
	while (done < len) {
		uint64_t pos = off + done;
		size_t n = WBC_MIN(c->page_size - (size_t)(pos & (c->page_size - 1)), len - done);
		/* a thread whose last check failed (a dead device) checks
		 * again before it dirties more: it never adds to a dirty limit
		 * that nothing drains */
		if (throttle_due() && (err = balance_dirty_pages(dev, ino->group)))
			break;
		if (throttle_owed())
			break;      /* wbc_pwrite_nowait: the rest after the pause */
		int r = write_page(ino, pos, (const char *)buf + done, n);
		if (r < 0) {
			err = r;
			break;
		}
		done += n;
		if (r && throttle_dirtied() && (err = balance_dirty_pages(dev, ino->group)))
			break;
		if (throttle_owed())
			break;
	}
	pthread_rwlock_unlock(&ino->rwsem);
	pcount_add(&c->st_written, (long long)done);
	return done ? (ssize_t)done : err;
}

ssize_t wbc_pwrite_nowait(wbc_file *h, const void *buf, size_t len, uint64_t off,
			  uint64_t *pause_ns)
{
	throttle_defer_begin();
	ssize_t r = wbc_pwrite(h, buf, len, off);
	uint64_t p = throttle_defer_end();
	if (pause_ns)
		*pause_ns = p;
	return r;
}

int64_t wbc_file_size(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	pthread_mutex_lock(&f->inode->lock);
	int64_t s = (int64_t)f->inode->i_size;
	pthread_mutex_unlock(&f->inode->lock);
	return s;
}

int wbc_file_info(wbc_file *h, struct wbc_file_info *info)
{
	struct wbc_file *f = handle_get(h);
	if (!f || !info)
		return -EBADF;
	struct inode *ino = f->inode;
	uint64_t psize = ino->dev->cache->page_size;
	memset(info, 0, sizeof(*info));
	pthread_mutex_lock(&ino->lock);
	info->size = ino->i_size;
	info->unwritten_bytes = (ino->nr_dirty + ino->nr_writeback) * psize;
	pthread_mutex_unlock(&ino->lock);
	return 0;
}

int wbc_truncate(wbc_file *h, uint64_t size)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (size > WBC_MAX_OFFSET)
		return -EINVAL;
	struct inode *ino = f->inode;
	struct wbc_cache *c = ino->dev->cache;
	struct backend *be = ino->dev->be;
	pthread_rwlock_wrlock(&ino->rwsem);
	pthread_mutex_lock(&ino->lock);
	while (ino->sizing)
		inode_wait_locked(ino);
	ino->sizing = true;
	while (ino->nr_writeback)
		inode_wait_locked(ino);
	if (size < ino->i_size) {
		drop_pages_from_locked(ino, (size + c->page_size - 1) >> c->page_shift);
		size_t tail = (size_t)(size & (c->page_size - 1));
		struct page *p = tail ? pm_lookup(&ino->map, size >> c->page_shift) : NULL;
		if (p && (pg_flags(p) & PG_UPTODATE))
			memset(page_data(c, p) + tail, 0, c->page_size - tail);
	}
	ino->i_size = size;
	pthread_mutex_unlock(&ino->lock);
	int err = backend_resize(be, ino->obj, size);
	pthread_mutex_lock(&ino->lock);
	if (!err)
		ino->backend_size = size;
	ino->sizing = false;
	inode_wake_locked(ino);
	pthread_mutex_unlock(&ino->lock);
	pthread_rwlock_unlock(&ino->rwsem);
	return err;
}

/* ------------------------------------------------------------------ */
/* fsync                                                                */

int wbc_fsync_range(wbc_file *h, uint64_t off, uint64_t len, int datasync)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	if (off > WBC_MAX_OFFSET || len > WBC_MAX_OFFSET - off)
		return -EINVAL;
	struct inode *ino = f->inode;
	struct wbc_dev *dev = ino->dev;
	uint32_t shift = dev->cache->page_shift;
	uint64_t start = off >> shift;
	uint64_t end = len ? (off + len - 1) >> shift : UINT64_MAX;
	struct wbc_ctl ctl = {
		.sync_mode = WB_SYNC_ALL,
		.nr_to_write = LONG_MAX,
		.range_start = start,
		.range_end = end,
	};
	write_inode_pages(ino, &ctl);
	wait_on_writeback_range(ino, start, end);
	int err = inode_sync_size(ino);
	int ferr = backend_flush(dev->be, ino->obj, datasync);
	pthread_mutex_lock(&ino->lock);
	int werr = errseq_check_advance(&ino->wb_err, &f->err_since);
	pthread_mutex_unlock(&ino->lock);
	if (werr)
		return werr;
	return err ? err : ferr;
}

int wbc_file_check_error(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	pthread_mutex_lock(&f->inode->lock);
	int err = errseq_check_advance(&f->inode->wb_err, &f->err_since);
	pthread_mutex_unlock(&f->inode->lock);
	return err;
}

int wbc_fsync(wbc_file *f) { return wbc_fsync_range(f, 0, 0, 0); }
int wbc_fdatasync(wbc_file *f) { return wbc_fsync_range(f, 0, 0, 1); }
