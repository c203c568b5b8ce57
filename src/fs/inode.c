/*
 * Inodes (layer fs): lookup by name in a device's name shards, lifetime,
 * the reuse of their memory, teardown, and the waits on an inode.
 *
 * Lifetime.  An inode is referenced by its handles, by the dirty lists
 * (while I_DIRTY or I_SYNC) and by each bio in flight.  The last iput
 * drops its clean pages and closes the backend object.
 */
#include "fs/fs.h"

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
				pthread_cond_destroy(&dev->shards[i].wait);
			}
			return -ENOMEM;
		}
		s->size = SHARD_INITIAL;
		s->free_tail = &s->free;
		wbc_mutex_init(&s->lock);
		wbc_cond_init(&s->wait);
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

/*
 * Errors no handle was told, of files whose inode went (a file written,
 * closed with no fsync, whose writeback failed under on_error=drop: its
 * last page gone, its inode with it).  The kernel keeps such an inode,
 * and its error, in its inode cache for the next opener; here the error
 * is kept by name in its shard, and an inode made for the name later
 * starts with it unseen (its first handle's fsync tells it).  At most
 * ORPHANS_MAX per shard (4,096 a device), the oldest forgotten first;
 * wbc_dev_sync reports every error of the device in any case.
 */
#define ORPHANS_MAX 64
struct orphan_err {
	struct orphan_err *next;
	uint64_t hash;
	int err;
	char name[];
};

static void orphan_add_locked(struct name_shard *s, struct orphan_err *oe)
{
	assert_held(&s->lock);
	struct orphan_err **pp = &s->orphans;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == oe->hash && !strcmp((*pp)->name, oe->name)) {
			struct orphan_err *old = *pp;   /* the newer error replaces it */
			*pp = old->next;
			free(old);
			s->norphans--;
			break;
		}
	oe->next = s->orphans;
	s->orphans = oe;
	if (++s->norphans > ORPHANS_MAX) {
		struct orphan_err **last = &s->orphans;
		while ((*last)->next)
			last = &(*last)->next;
		free(*last);
		*last = NULL;
		s->norphans--;
	}
}

/* The kept error of @name (taken out), or 0. */
static int orphan_take_locked(struct name_shard *s, const char *name, uint64_t h)
{
	assert_held(&s->lock);
	for (struct orphan_err **pp = &s->orphans; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == h && !strcmp((*pp)->name, name)) {
			struct orphan_err *oe = *pp;
			int err = oe->err;
			*pp = oe->next;
			free(oe);
			s->norphans--;
			return err;
		}
	return 0;
}

size_t names_destroy(struct wbc_dev *dev)
{
	size_t left = 0;
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		left += s->n;
		while (s->orphans) {
			struct orphan_err *oe = s->orphans;
			s->orphans = oe->next;
			free(oe);
		}
		while (s->free) {
			struct inode *ino = s->free;
			s->free = ino->hash_next;
			s->nfree--;
			inode_release_mem(ino);
		}
		free(s->tab);
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->wait);
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
 * An inode's memory keeps its locks (file_lock too), condition variable
 * and rwlock initialized (and idle) from inode_new to inode_release_mem, through
 * every file that reuses it: a teardown and the next create skip six
 * calls into the thread library, and the completion thread does not
 * touch those lines.  inode_clear zeroes everything else.
 */
static void inode_release_mem(struct inode *ino)
{
	pthread_rwlock_destroy(&ino->rwsem);
	pthread_mutex_destroy(&ino->file_lock);
	pthread_mutex_destroy(&ino->lock);
	pthread_cond_destroy(&ino->wait);
	free(ino);
}

static void inode_clear(struct inode *ino)
{
	_Static_assert(offsetof(struct inode, lock) < offsetof(struct inode, wait) &&
		       offsetof(struct inode, wait) < offsetof(struct inode, rwsem) &&
		       offsetof(struct inode, rwsem) < offsetof(struct inode, file_lock),
		       "inode_clear keeps these in this order");
	const struct { size_t off, len; } keep[] = {
		{ offsetof(struct inode, lock), sizeof(ino->lock) },
		{ offsetof(struct inode, wait), sizeof(ino->wait) },
		{ offsetof(struct inode, rwsem), sizeof(ino->rwsem) },
		{ offsetof(struct inode, file_lock), sizeof(ino->file_lock) },
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
		/* writer-preferring (internal.h, inode->rwsem) */
		pthread_rwlockattr_t ra;
		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&ino->rwsem, &ra);
		pthread_rwlockattr_destroy(&ra);
		wbc_mutex_init(&ino->file_lock);
		wbc_mutex_init(&ino->lock);
		wbc_cond_init(&ino->wait);
	}
	return ino;
}

/* hstate: the backend opens, closes or removes an inode's name; iget of
 * the name waits until it is done (the backend sees each name opened once
 * at a time, closed before it is opened again, and nothing opened while
 * it removes it) */
enum { INODE_OPENING = 1, INODE_CLOSING = 2, INODE_REMOVING = 3 };

static void hash_unlink_locked(struct name_shard *s, struct inode *ino)
{
	assert_held(&s->lock);
	*ino->hash_pprev = ino->hash_next;
	if (ino->hash_next)
		ino->hash_next->hash_pprev = ino->hash_pprev;
	ino->hash_next = NULL;
	ino->hash_pprev = NULL;
	s->n--;
}

/*
 * The inode of @name, a reference taken: the one in the name table, or a
 * new one the backend opened (created with @create).  While the backend
 * opens the name, the new inode is in the table as INODE_OPENING; a
 * second iget of the name waits for that open (and for the close of an
 * inode whose last reference went, INODE_CLOSING), then looks again.
 */
struct inode *iget(struct wbc_dev *dev, const char *name, bool create,
		   struct wbc_group *group, int *err)
{
	uint64_t h = wbc_name_hash(name);
	struct name_shard *s = shard_of(dev, h);
	size_t nlen = strlen(name) + 1;
	struct inode *ino = NULL;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct inode *found = hash_find_locked(s, name, h);
		if (found && found->hstate) {
			pthread_cond_wait(&s->wait, &s->lock);
			continue;
		}
		if (found) {
			atomic_fetch_add_explicit(&found->refs, 1, memory_order_relaxed);
			pthread_mutex_unlock(&s->lock);
			if (ino)
				inode_keep(s, ino);
			return found;
		}
		if (ino || (ino = inode_reuse_locked(s, nlen)))
			break;
		/* no kept inode to take: allocate one unlocked, look again */
		pthread_mutex_unlock(&s->lock);
		if (!(ino = inode_new(nlen))) {
			*err = -ENOMEM;
			return NULL;
		}
		pthread_mutex_lock(&s->lock);
	}
	ino->name = memcpy(ino->name_buf, name, nlen);
	ino->dev = dev;
	ino->group = group;
	ino->hash = h;
	pm_init(&ino->map);
	ino->wb_next = NULL;
	atomic_init(&ino->refs, 1);
	ino->hstate = INODE_OPENING;
	if (s->n >= s->size)
		hash_grow_locked(s);
	hash_link(&s->tab[h & (s->size - 1)], ino);
	s->n++;
	pthread_mutex_unlock(&s->lock);

	void *obj;
	uint64_t size;
	*err = backend_open(dev->be, name, create, &obj, &size);
	pthread_mutex_lock(&s->lock);
	if (*err) {
		hash_unlink_locked(s, ino);
	} else {
		ino->obj = obj;
		ino->i_size = ino->backend_size = size;
		/* an error of the name's last inode that no handle was told */
		int oerr = orphan_take_locked(s, name, h);
		if (oerr)
			errseq_record(&ino->wb_err, oerr);
		/* its data may be writes no good flush covers yet (written,
		 * closed, and its inode gone meanwhile) */
		ino->written_gen = size ? atomic_load_explicit(&dev->flush_gen,
							       memory_order_relaxed) : 0;
	}
	ino->hstate = 0;
	pthread_cond_broadcast(&s->wait);
	pthread_mutex_unlock(&s->lock);
	if (*err) {
		inode_free(s, ino);
		return NULL;
	}
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

/* ------------------------------------------------------------------ */
/* teardown batches                                                     */

/*
 * In a batch (inode_teardown_begin .. _end: a completion batch of the
 * writeback layer, in one thread), the teardown of a file whose last
 * reference a completion dropped is finished at the batch's flush: its
 * pages (out of the index, PG_LOCKED, so that reclaim leaves them) go
 * back in one lru_lock hold, then its memory (inode_dispose).  What a
 * batch holds between flushes is of one device (teardown_for).
 */
struct teardown_batch {
	bool open;
	struct wbc_dev *dev;           /* of what is held; NULL: nothing */
	struct page *pages;            /* to free, linked by next_free */
	unsigned npages;
	struct inode *dead;            /* to dispose of, linked by hash_next */
};
static _Thread_local struct teardown_batch tb;

/* inode_free in its shard */
static void inode_dispose(struct inode *ino)
{
	inode_free(shard_of(ino->dev, ino->hash), ino);
}

/* What the batch holds is of @dev from here on: another device's teardowns
 * held are finished first.  A completion may drop a file whose backend
 * then works on a file of another device (a stacked device's resize
 * truncates its lower file: its pages dropped in this thread's batch). */
static void teardown_for(struct wbc_dev *dev)
{
	if (tb.dev && tb.dev != dev)
		inode_teardown_flush();
	tb.dev = dev;
}

/* False outside a batch. */
static bool teardown_defer_page(struct page *p)
{
	if (!tb.open)
		return false;
	teardown_for(p->inode->dev);
	/* still bound: reclaim may look at it, and skips a locked page */
	atomic_store_explicit(&p->flags, PG_LOCKED, memory_order_relaxed);
	p->next_free = tb.pages;
	tb.pages = p;
	tb.npages++;
	return true;
}

static bool teardown_defer_inode(struct inode *ino)
{
	if (!tb.open)
		return false;
	teardown_for(ino->dev);
	ino->hash_next = tb.dead;
	tb.dead = ino;
	return true;
}

void inode_teardown_begin(void)
{
	assert(!tb.open);
	tb.open = true;
}

/* The torn-down files: pages, then the inodes they named. */
void inode_teardown_flush(void)
{
	if (tb.npages)
		page_release_chain(tb.dev->cache, tb.pages, tb.npages);
	tb.pages = NULL;
	tb.npages = 0;
	while (tb.dead) {
		struct inode *ino = tb.dead;
		tb.dead = ino->hash_next;
		inode_dispose(ino);
	}
	tb.dev = NULL;
}

void inode_teardown_end(void)
{
	assert(tb.open && !tb.npages && !tb.dead);
	tb.open = false;
}

/* ------------------------------------------------------------------ */
/* dropping pages, the last reference                                   */

/* Remove every page of @ino from the cache; dirty ones are uncharged (only
 * at destruction after a failed sync, or by truncate). Caller: ino->lock. */
void drop_pages_from_locked(struct inode *ino, uint64_t first)
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
		if (!teardown_defer_page(p))
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
		ino->nr_at_risk -= (uint32_t)dropped_err;
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
	/* not unhashed by wbc_file_remove: the name stays in the table until
	 * the backend closed it (an iget of it waits) */
	bool hashed = ino->hash_pprev != NULL;
	if (hashed)
		ino->hstate = INODE_CLOSING;
	pthread_mutex_unlock(&s->lock);

	/* No handle, no list, no bio: nothing can reach it but reclaim. */
	assert(!(ino->state & (I_DIRTY | I_SYNC)) && !ino->nr_writeback);
	if (ino->backend_size != ino->i_size) {
		int err = backend_resize(dev->be, ino->obj, ino->i_size);
		if (err) {
			dev_record_error(dev, err);
			errseq_record(&ino->wb_err, err);   /* no other reference: no lock */
		}
	}
	inode_drop_all_pages(ino);
	backend_close(dev->be, ino->obj);
	/* an error no handle was told goes with the name, not the inode */
	struct orphan_err *oe = NULL;
	if (hashed && ino->wb_err.seq && !ino->wb_err.seen && !ino->wb_err.healed &&
	    (oe = malloc(sizeof(*oe) + strlen(ino->name) + 1))) {
		oe->hash = ino->hash;
		oe->err = ino->wb_err.err;
		strcpy(oe->name, ino->name);
	}
	if (hashed) {
		pthread_mutex_lock(&s->lock);
		if (oe)
			orphan_add_locked(s, oe);
		hash_unlink_locked(s, ino);
		ino->hstate = 0;
		pthread_cond_broadcast(&s->wait);
		pthread_mutex_unlock(&s->lock);
	}
	if (!teardown_defer_inode(ino))
		inode_free(s, ino);
}

void dev_record_error_files(struct wbc_dev *dev, int err, uint64_t gen)
{
	dev_record_error(dev, err);
	for (int i = 0; i < NAME_SHARDS; i++) {
		struct name_shard *s = &dev->shards[i];
		pthread_mutex_lock(&s->lock);
		size_t n = 0, cap = s->n;
		/* no memory: the device's sequence has it (wbc_dev_sync) */
		struct inode **v = cap ? malloc(cap * sizeof(*v)) : NULL;
		for (uint32_t b = 0; v && b < s->size; b++)
			for (struct inode *ino = s->tab[b]; ino && n < cap; ino = ino->hash_next)
				if (!ino->hstate) {
					atomic_fetch_add_explicit(&ino->refs, 1, memory_order_relaxed);
					v[n++] = ino;
				}
		pthread_mutex_unlock(&s->lock);
		for (size_t k = 0; k < n; k++) {
			pthread_mutex_lock(&v[k]->lock);
			if (v[k]->written_gen >= gen)
				errseq_record(&v[k]->wb_err, err);
			pthread_mutex_unlock(&v[k]->lock);
			iput(v[k]);
		}
		free(v);
	}
}

/* Take @ino out of its device's name table (a removed file): a later
 * iget of the name opens the backend anew.  The references held stay
 * good; the last iput frees it without unhashing it again. */
/* wbc_file_remove: @on, the name shut (an iget of it waits) while the
 * backend removes it; false when another remove took it out meanwhile (a
 * second remover waits for the first: it held a reference, with hstate
 * 0, when the first shut the name).  Off, open again, and out of the
 * table (@unhash: it was removed, the name opens anew). */
bool inode_removing(struct inode *ino, bool on, bool unhash)
{
	struct name_shard *s = shard_of(ino->dev, ino->hash);
	pthread_mutex_lock(&s->lock);
	if (on) {
		/* held by the caller: never OPENING or CLOSING */
		while (ino->hstate == INODE_REMOVING)
			pthread_cond_wait(&s->wait, &s->lock);
		if (!ino->hash_pprev) {
			pthread_mutex_unlock(&s->lock);
			return false;
		}
	}
	assert(ino->hstate == (on ? 0 : INODE_REMOVING));
	if (unhash && ino->hash_pprev)
		hash_unlink_locked(s, ino);
	ino->hstate = on ? INODE_REMOVING : 0;
	if (!on)
		pthread_cond_broadcast(&s->wait);
	pthread_mutex_unlock(&s->lock);
	return true;
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
	if (err)        /* the device's too: wbc_dev_sync reports it */
		dev_record_error(ino->dev, err);
	return err;
}

/* ------------------------------------------------------------------ */
/* waits on an inode                                                    */

void inode_wait_locked(struct inode *ino)
{
	assert_held(&ino->lock);
	ino->waiters++;
	pthread_cond_wait(&ino->wait, &ino->lock);
	ino->waiters--;
}

void inode_wake_locked(struct inode *ino)
{
	assert_held(&ino->lock);
	if (ino->waiters)
		pthread_cond_broadcast(&ino->wait);
}

void page_wait_unlocked(struct inode *ino, struct page *p)
{
	assert_held(&ino->lock);
	uint32_t old = atomic_fetch_or_explicit(&p->flags, PG_WAITERS, memory_order_acq_rel);
	if (old & PG_LOCKED)
		inode_wait_locked(ino);
}
