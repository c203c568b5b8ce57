/*
 * RAM backend: named byte arrays in a hash table.  I/O is done in submit
 * and completed (as one batch) before submit returns.  Objects live until the backend is
 * destroyed.  A discarding backend keeps sizes only: writes succeed and
 * are dropped, reads return zeros.
 */
#include "backends.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MEM_QD 32
#define MEM_MAX_IO (4u << 20)
/* Objects larger than this are refused (-EFBIG) rather than attempted. */
#define MEM_MAX_OBJ (1ull << 40)
/* Past this an object's bytes are a mapping of their own, which costs
 * only the pages written: one 4 KiB write at 16 GiB zeroed 16 GiB of
 * heap (a sparse randwrite file of 128 GiB ended in the OOM killer).
 * Smaller ones stay on the heap (a mapping each would cost a system call
 * and count against vm.max_map_count, 65,530 by default). */
#define MEM_MAP_MIN (1ull << 20)
#define MEM_MAP_ALIGN 4096ull

struct mobj {
	struct mobj *next;
	char *name;
	uint64_t hash;           /* wbc_name_hash(name) */
	pthread_rwlock_t lock;   /* data, cap; size's changes with data */
	char *data;
	uint64_t cap;            /* > MEM_MAP_MIN: data is a mapping, and
				  * its bytes in [size, cap) are zeros */
	/* atomic: a discarding backend has no data, and sizes it without
	 * the lock */
	_Atomic uint64_t size;
};

#define MEM_SHARDS 64
#define MEM_HASH_INIT 64

/* The objects by name, in shards with a lock each, so that threads that
 * create files do not queue on one lock. */
struct mem_shard {
	pthread_mutex_t lock;    /* this shard's chains */
	struct mobj **hash;
	size_t hash_size, nr;
} __attribute__((aligned(64)));

struct mem {
	struct mem_shard shards[MEM_SHARDS];
	bool discard;
};

static struct mem_shard *shard_of(struct mem *m, uint64_t h)
{
	return &m->shards[h >> 58];
}

static struct mobj *find_locked(struct mem_shard *s, const char *name, uint64_t h)
{
	assert_held(&s->lock);
	struct mobj *o = s->hash[h & (s->hash_size - 1)];
	while (o && (o->hash != h || strcmp(o->name, name)))
		o = o->next;
	return o;
}

/* Double the shard's table when it is full on average (lock held). */
static void mem_grow_locked(struct mem_shard *s)
{
	assert_held(&s->lock);
	size_t nsize = s->hash_size * 2;
	struct mobj **n = calloc(nsize, sizeof(*n));
	if (!n)
		return;                  /* longer chains, still correct */
	for (size_t i = 0; i < s->hash_size; i++)
		for (struct mobj *o = s->hash[i], *next; o; o = next) {
			next = o->next;
			size_t k = (size_t)o->hash & (nsize - 1);
			o->next = n[k];
			n[k] = o;
		}
	free(s->hash);
	s->hash = n;
	s->hash_size = nsize;
}

static void mobj_free(struct mobj *o)
{
	pthread_rwlock_destroy(&o->lock);
	if (o->cap > MEM_MAP_MIN)
		munmap(o->data, o->cap);
	else
		free(o->data);
	free(o->name);
	free(o);
}

static int mem_open(void *ctx, const char *name, unsigned flags, void **obj, uint64_t *size)
{
	struct mem *m = ctx;
	bool create = flags & WBC_OPEN_CREATE;
	uint64_t h = wbc_name_hash(name);
	struct mem_shard *s = shard_of(m, h);
	pthread_mutex_lock(&s->lock);
	struct mobj *o = find_locked(s, name, h);
	pthread_mutex_unlock(&s->lock);
	if (!o) {
		if (!create)
			return -ENOENT;
		/* made without the lock; a racing creator's may win */
		struct mobj *n = calloc(1, sizeof(*n));
		if (!n || !(n->name = strdup(name))) {
			free(n);
			return -ENOMEM;
		}
		n->hash = h;
		pthread_rwlock_init(&n->lock, NULL);
		pthread_mutex_lock(&s->lock);
		if (!(o = find_locked(s, name, h))) {
			if (s->nr >= s->hash_size)
				mem_grow_locked(s);
			size_t k = (size_t)h & (s->hash_size - 1);
			n->next = s->hash[k];
			s->hash[k] = n;
			s->nr++;
			o = n;
			n = NULL;
		}
		pthread_mutex_unlock(&s->lock);
		if (n)
			mobj_free(n);
	}
	*size = atomic_load_explicit(&o->size, memory_order_relaxed);
	*obj = o;
	return 0;
}

static void mem_close(void *ctx, void *obj)
{
	(void)ctx;
	(void)obj;
}

/* Out of the table and freed: the engine calls only close (which does
 * nothing) on it afterwards. */
static int mem_remove(void *ctx, void *obj)
{
	struct mem *m = ctx;
	struct mobj *o = obj;
	struct mem_shard *s = shard_of(m, o->hash);
	pthread_mutex_lock(&s->lock);
	struct mobj **pp = &s->hash[o->hash & (s->hash_size - 1)];
	while (*pp && *pp != o)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = o->next;
		s->nr--;
	}
	pthread_mutex_unlock(&s->lock);
	mobj_free(o);
	return 0;
}

/* Caller holds o->lock for writing (an rwlock: not assertable). */
static int resize_locked(struct mem *m, struct mobj *o, uint64_t size)
{
	if (size > MEM_MAX_OBJ)
		return -EFBIG;
	if (m->discard) {
		atomic_store_explicit(&o->size, size, memory_order_relaxed);
		return 0;
	}
	uint64_t old = atomic_load_explicit(&o->size, memory_order_relaxed);
	if (size > o->cap) {
		uint64_t cap = WBC_MAX(size, o->cap * 2);
		char *d;
		if (cap <= MEM_MAP_MIN) {
			if (!(d = realloc(o->data, cap)))
				return -ENOMEM;
		} else {
			cap = (cap + MEM_MAP_ALIGN - 1) & ~(MEM_MAP_ALIGN - 1);
			d = mmap(NULL, cap, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
			if (d == MAP_FAILED)
				return -ENOMEM;
			if (o->cap > MEM_MAP_MIN) {
				/* the pages moved to the start of the new mapping,
				 * not copied (only those written exist); into one
				 * of ours, not where the kernel likes: a sanitizer
				 * sees the mmap, not mremap's choice, and took the
				 * next object there for the one moved away */
				if (mremap(o->data, o->cap, o->cap, MREMAP_MAYMOVE | MREMAP_FIXED,
					   d) == MAP_FAILED) {
					munmap(d, cap);
					return -ENOMEM;
				}
			} else {   /* from the heap: zeros past old */
				if (old)   /* (none yet: no heap block either) */
					memcpy(d, o->data, old);
				free(o->data);
			}
		}
		o->data = d;
		o->cap = cap;
	}
	if (o->cap <= MEM_MAP_MIN) {
		if (size > old)
			memset(o->data + old, 0, size - old);
	} else if (size < old) {
		/* cut: zeros past the size again, whole pages given back */
		uint64_t from = (size + MEM_MAP_ALIGN - 1) & ~(MEM_MAP_ALIGN - 1);
		uint64_t to = old & ~(MEM_MAP_ALIGN - 1);
		if (from < to) {
			memset(o->data + size, 0, from - size);
			memset(o->data + to, 0, old - to);
			if (madvise(o->data + from, to - from, MADV_DONTNEED))
				memset(o->data + from, 0, to - from);
		} else {
			memset(o->data + size, 0, old - size);
		}
	}
	atomic_store_explicit(&o->size, size, memory_order_relaxed);
	return 0;
}

/* A discarding backend's write: the size grows to cover it, no lock. */
static int discard_write(struct mobj *o, uint64_t end)
{
	if (end > MEM_MAX_OBJ)
		return -EFBIG;
	uint64_t size = atomic_load_explicit(&o->size, memory_order_relaxed);
	while (size < end &&
	       !atomic_compare_exchange_weak_explicit(&o->size, &size, end, memory_order_relaxed,
						      memory_order_relaxed))
		;
	return 0;
}

ssize_t mem_backend_rw(void *ctx, const struct wbc_io *io)
{
	struct mem *m = ctx;
	struct mobj *o = io->file;
	uint64_t off = io->off;
	int res = 0;
	if (io->op == WBC_IO_WRITE && m->discard) {
		res = discard_write(o, off + io->len);
		if (!res)
			off += io->len;
	} else if (io->op == WBC_IO_WRITE) {
		pthread_rwlock_wrlock(&o->lock);
		if (off + io->len > atomic_load_explicit(&o->size, memory_order_relaxed))
			res = resize_locked(m, o, off + io->len);
		for (int i = 0; i < io->iovcnt && !res; i++) {
			memcpy(o->data + off, io->iov[i].iov_base, io->iov[i].iov_len);
			off += io->iov[i].iov_len;
		}
		pthread_rwlock_unlock(&o->lock);
	} else {
		pthread_rwlock_rdlock(&o->lock);
		uint64_t size = atomic_load_explicit(&o->size, memory_order_relaxed);
		for (int i = 0; i < io->iovcnt; i++) {
			size_t n = off >= size ? 0 : (size_t)WBC_MIN(io->iov[i].iov_len, size - off);
			if (n && m->discard)
				memset(io->iov[i].iov_base, 0, n);
			else if (n)
				memcpy(io->iov[i].iov_base, o->data + off, n);
			off += n;
			if (n < io->iov[i].iov_len)
				break;
		}
		pthread_rwlock_unlock(&o->lock);
	}
	return res ? res : (ssize_t)(off - io->off);
}

static int mem_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	for (unsigned i = 0; i < n; i++)
		ios[i]->res = mem_backend_rw(ctx, ios[i]);
	*queued = n;
	wbc_io_complete_batch(ios, n);
	return 0;
}

static int mem_resize(void *ctx, void *obj, uint64_t size)
{
	struct mobj *o = obj;
	pthread_rwlock_wrlock(&o->lock);
	int err = resize_locked(ctx, o, size);
	pthread_rwlock_unlock(&o->lock);
	return err;
}

static void mem_destroy(void *ctx)
{
	struct mem *m = ctx;
	for (int i = 0; i < MEM_SHARDS; i++) {
		struct mem_shard *s = &m->shards[i];
		for (size_t k = 0; k < s->hash_size; k++)
			for (struct mobj *o = s->hash[k], *next; o; o = next) {
				next = o->next;
				mobj_free(o);
			}
		free(s->hash);
		pthread_mutex_destroy(&s->lock);
	}
	free(m);
}

static void mem_caps(void *ctx, struct wbc_backend_caps *caps)
{
	(void)ctx;
	caps->queue_depth = MEM_QD;
	caps->max_io = MEM_MAX_IO;
	caps->max_file_size = MEM_MAX_OBJ;
}

/* No flush: what a completed write stored is as durable as RAM gets. */
static const struct wbc_backend_ops mem_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "mem",
	.caps = mem_caps,
	.open = mem_open,
	.close = mem_close,
	.submit = mem_submit,
	.resize = mem_resize,
	.destroy = mem_destroy,
	.remove = mem_remove,
};

int mem_backend_new(bool discard, const struct wbc_backend_ops **ops, void **ctx)
{
	struct mem *m = aligned_alloc(64, sizeof(*m));
	if (!m)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < MEM_SHARDS; i++) {
		struct mem_shard *s = &m->shards[i];
		if (!(s->hash = calloc(MEM_HASH_INIT, sizeof(*s->hash)))) {
			while (i-- > 0) {
				free(m->shards[i].hash);
				pthread_mutex_destroy(&m->shards[i].lock);
			}
			free(m);
			return -ENOMEM;
		}
		s->hash_size = MEM_HASH_INIT;
		wbc_mutex_init(&s->lock);
	}
	m->discard = discard;
	*ops = &mem_ops;
	*ctx = m;
	return 0;
}
