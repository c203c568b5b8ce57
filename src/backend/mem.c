/*
 * RAM backend: named byte arrays in a hash table.  I/O is done in submit
 * and completed before submit returns.  Objects live until the backend is
 * destroyed.  A discarding backend keeps sizes only: writes succeed and
 * are dropped, reads return zeros.
 */
#include "../internal.h"

#define MEM_QD 32
#define MEM_MAX_IO (4u << 20)
/* Objects larger than this are refused (-EFBIG) rather than attempted. */
#define MEM_MAX_OBJ (1ull << 40)

struct mobj {
	struct mobj *next;
	char *name;
	pthread_rwlock_t lock;   /* data, size, cap */
	char *data;
	uint64_t size, cap;
};

struct mem {
	pthread_mutex_t lock;    /* the hash */
	struct mobj **hash;
	size_t hash_size, nr;
	bool discard;
};

#define MEM_HASH_INIT 256

static size_t mem_hash(const char *s, size_t size)
{
	uint64_t h = 1469598103934665603ull;           /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (size_t)h & (size - 1);
}

/* Double the table when it is full on average (lock held). */
static void mem_grow(struct mem *m)
{
	size_t nsize = m->hash_size * 2;
	struct mobj **n = calloc(nsize, sizeof(*n));
	if (!n)
		return;                  /* longer chains, still correct */
	for (size_t i = 0; i < m->hash_size; i++)
		for (struct mobj *o = m->hash[i], *next; o; o = next) {
			next = o->next;
			size_t k = mem_hash(o->name, nsize);
			o->next = n[k];
			n[k] = o;
		}
	free(m->hash);
	m->hash = n;
	m->hash_size = nsize;
}

static int mem_open(struct backend *be, const char *name, bool create, void **obj,
		    uint64_t *size)
{
	struct mem *m = be->priv;
	pthread_mutex_lock(&m->lock);
	struct mobj *o = m->hash[mem_hash(name, m->hash_size)];
	while (o && strcmp(o->name, name))
		o = o->next;
	if (!o) {
		if (!create) {
			pthread_mutex_unlock(&m->lock);
			return -ENOENT;
		}
		o = calloc(1, sizeof(*o));
		if (!o || !(o->name = strdup(name))) {
			free(o);
			pthread_mutex_unlock(&m->lock);
			return -ENOMEM;
		}
		pthread_rwlock_init(&o->lock, NULL);
		if (m->nr >= m->hash_size)
			mem_grow(m);
		size_t k = mem_hash(name, m->hash_size);
		o->next = m->hash[k];
		m->hash[k] = o;
		m->nr++;
	}
	pthread_mutex_unlock(&m->lock);
	pthread_rwlock_rdlock(&o->lock);
	*size = o->size;
	pthread_rwlock_unlock(&o->lock);
	*obj = o;
	return 0;
}

static void mem_close(struct backend *be, void *obj)
{
	(void)be;
	(void)obj;
}

/* Caller holds o->lock for writing (an rwlock: not assertable). */
static int resize_locked(struct mem *m, struct mobj *o, uint64_t size)
{
	if (size > MEM_MAX_OBJ)
		return -EFBIG;
	if (m->discard) {
		o->size = size;
		return 0;
	}
	if (size > o->cap) {
		uint64_t cap = WBC_MAX(size, o->cap * 2);
		char *d = realloc(o->data, cap);
		if (!d)
			return -ENOMEM;
		o->data = d;
		o->cap = cap;
	}
	if (size > o->size)
		memset(o->data + o->size, 0, size - o->size);
	o->size = size;
	return 0;
}

static int mem_submit(struct backend *be, struct wbc_bio *bio)
{
	struct mem *m = be->priv;
	(void)atomic_load_explicit(&bio->handoff, memory_order_acquire);
	struct mobj *o = bio->obj;
	uint64_t off = bio->off;
	int res = 0;
	if (bio->op == BIO_WRITE) {
		pthread_rwlock_wrlock(&o->lock);
		if (off + bio->len > o->size)
			res = resize_locked(m, o, off + bio->len);
		for (int i = 0; i < bio->iovcnt && !res; i++) {
			if (!m->discard)
				memcpy(o->data + off, bio->iov[i].iov_base, bio->iov[i].iov_len);
			off += bio->iov[i].iov_len;
		}
	} else {
		pthread_rwlock_rdlock(&o->lock);
		for (int i = 0; i < bio->iovcnt; i++) {
			size_t n = off >= o->size ? 0 :
				   (size_t)WBC_MIN(bio->iov[i].iov_len, o->size - off);
			if (n && m->discard)
				memset(bio->iov[i].iov_base, 0, n);
			else if (n)
				memcpy(bio->iov[i].iov_base, o->data + off, n);
			off += n;
			if (n < bio->iov[i].iov_len)
				break;
		}
	}
	pthread_rwlock_unlock(&o->lock);
	bio->res = res ? res : (int)(off - bio->off);
	atomic_store_explicit(&bio->handoff, 2, memory_order_release);
	bio->end_io(bio);
	return 0;
}

static int mem_flush(struct backend *be, void *obj, bool datasync)
{
	(void)be;
	(void)obj;
	(void)datasync;
	return 0;
}

static int mem_setsize(struct backend *be, void *obj, uint64_t size)
{
	struct mobj *o = obj;
	pthread_rwlock_wrlock(&o->lock);
	int err = resize_locked(be->priv, o, size);
	pthread_rwlock_unlock(&o->lock);
	return err;
}

static void mem_destroy(struct backend *be)
{
	struct mem *m = be->priv;
	for (size_t i = 0; i < m->hash_size; i++)
		for (struct mobj *o = m->hash[i], *next; o; o = next) {
			next = o->next;
			pthread_rwlock_destroy(&o->lock);
			free(o->data);
			free(o->name);
			free(o);
		}
	free(m->hash);
	pthread_mutex_destroy(&m->lock);
	free(m);
	free(be);
}

static const struct backend_ops mem_ops = {
	.kind = "mem",
	.open = mem_open,
	.close = mem_close,
	.submit = mem_submit,
	.flush = mem_flush,
	.setsize = mem_setsize,
	.destroy = mem_destroy,
};

int mem_backend_create(struct backend **out, bool discard)
{
	struct backend *be = calloc(1, sizeof(*be));
	struct mem *m = calloc(1, sizeof(*m));
	if (!be || !m || !(m->hash = calloc(MEM_HASH_INIT, sizeof(*m->hash)))) {
		free(be);
		free(m);
		return -ENOMEM;
	}
	m->hash_size = MEM_HASH_INIT;
	m->discard = discard;
	wbc_mutex_init(&m->lock);
	be->ops = &mem_ops;
	be->qd = MEM_QD;
	be->max_io = MEM_MAX_IO;
	be->priv = m;
	*out = be;
	return 0;
}
