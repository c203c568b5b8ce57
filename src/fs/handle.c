/*
 * The handle table (layer fs).  Handles are generation-checked slots in a
 * table of fixed chunks, so a handle used after close is answered -EBADF
 * instead of touching freed memory.  handle_get takes no reference (an
 * atomic per call on the hot path): a close while another thread is in a
 * call on the handle may free the inode that call uses.  The contract
 * (wbc_file_open(3)) is that the caller closes a handle once no call on it
 * is running; the mount, the filter and the CLI each close a handle only
 * after its last request.
 */
#include "fs/fs.h"

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

struct wbc_file *handle_get(wbc_file *h)
{
	uint64_t v = (uint64_t)(uintptr_t)h;
	uint64_t slot1 = v >> 32;
	/* an odd generation: a free slot's (even) was no handle's */
	if (!slot1 || slot1 > (uint64_t)HMAX_CHUNKS * HCHUNK || !(v & 1))
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

int handle_open(struct wbc_dev *dev, const char *name, bool create, struct wbc_group *group,
		enum handle_kind kind, bool noerrseen, wbc_file **out)
{
	bool direct = kind == HANDLE_DIRECT, remover = kind == HANDLE_REMOVER;
	uint32_t slot, gen;
	struct hslot *s;
	int err = handle_alloc(&slot, &gen, &s);
	if (err)
		return err;
	struct inode *ino;
again:
	ino = iget(dev, name, create, group, &err);
	if (ino) {
		pthread_mutex_lock(&ino->lock);
		if (ino->removing) {
			/* removed under us (its name was shut after our
			 * iget): the name again, once the remove is done */
			pthread_mutex_unlock(&ino->lock);
			iput(ino);
			goto again;
		}
		/* a file is open either through the cache or direct, never
		 * both at once (fs.h) */
		if ((direct ? ino->nr_cached_handles : ino->nr_direct_handles) ||
		    (remover && ino->nr_removers == UINT8_MAX)) {
			err = -EBUSY;
		} else {
			if (direct)
				ino->nr_direct_handles++;
			else
				ino->nr_cached_handles++;
			if (remover)
				ino->nr_removers++;
			errseq_sample(&ino->wb_err, &s->f.err_since, &s->f.err_inherit);
		}
		pthread_mutex_unlock(&ino->lock);
		if (err) {
			iput(ino);
			ino = NULL;
		}
	}
	if (!ino) {
		pthread_mutex_lock(&htab_lock);
		s->next_free = hfree;
		hfree = slot;
		pthread_mutex_unlock(&htab_lock);
		return err;
	}
	s->f.inode = ino;
	atomic_store_explicit(&s->f.dev, dev, memory_order_relaxed);
	s->f.direct = direct;
	s->f.remover = remover;
	s->f.noerrseen = noerrseen;
	atomic_store_explicit(&s->gen, gen, memory_order_release);
	*out = handle_encode(slot, gen);
	return 0;
}

int handle_close(wbc_file *h)
{
	struct wbc_file *f = handle_get(h);
	if (!f)
		return -EBADF;
	uint64_t v = (uint64_t)(uintptr_t)h;
	uint32_t slot = (uint32_t)((v >> 32) - 1);
	struct inode *ino = f->inode;
	bool direct = f->direct, remover = f->remover;
	handle_free(hslot_of(slot), slot);
	pthread_mutex_lock(&ino->lock);
	if (direct)
		ino->nr_direct_handles--;
	else
		ino->nr_cached_handles--;
	if (remover)
		ino->nr_removers--;
	pthread_mutex_unlock(&ino->lock);
	iput(ino);
	return 0;
}

void handles_close_dev(struct wbc_dev *dev)
{
	pthread_mutex_lock(&htab_lock);
	uint32_t n = hnext;
	pthread_mutex_unlock(&htab_lock);
	for (uint32_t i = 0; i < n; i++) {
		struct hslot *s = hslot_of(i);
		uint32_t gen = atomic_load(&s->gen);
		if ((gen & 1) && atomic_load_explicit(&s->f.dev, memory_order_relaxed) == dev)
			handle_close(handle_encode(i, gen));
	}
}
