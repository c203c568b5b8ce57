/*
 * The base layer, below everything else (the engine and the backends
 * alike): small helpers for locks, time, lists, names and option values.
 * It knows nothing of caches, files or devices.
 */
#ifndef WBC_BASE_H
#define WBC_BASE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wbcache_backend.h"   /* wbc_parse_size, wbc_parse_time */

#define WBC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define WBC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Largest file offset accepted: keeps page indices and sums far from
 * overflow (the same bound as the kernel's MAX_LFS_FILESIZE on 64-bit). */
#define WBC_MAX_OFFSET (1ULL << 62)

/* Assert that the calling thread holds a mutex.  glibc records the
 * owner's thread id in every mutex it locks (all types, also when a
 * condition wait takes it back), so the check costs a load and a compare;
 * release builds with NDEBUG, and other C libraries, compile it away. */
#if !defined(NDEBUG) && defined(__GLIBC__)
pid_t wbc_gettid(void);                     /* cached per thread */
#define assert_held(m) assert((m)->__data.__owner == wbc_gettid())
#else
#define assert_held(m) ((void)(m))
#endif
/* Our mutexes spin briefly before they sleep (PTHREAD_MUTEX_ADAPTIVE_NP):
 * critical sections are short, and a futex sleep and wakeup cost more
 * than the wait. */
void wbc_mutex_init(pthread_mutex_t *m);
/* Zeroed memory aligned to a cache line (structures laid out by line:
 * the cache, devices, groups); free() releases it.  NULL without memory. */
void *wbc_zalloc(size_t bytes);

uint64_t wbc_now_ns(void);                  /* CLOCK_MONOTONIC */
void wbc_cond_init(pthread_cond_t *c);      /* condvar on CLOCK_MONOTONIC */
/* Wait on @c for at most @ns; returns 0 or ETIMEDOUT. */
int wbc_cond_timedwait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns);

/* intrusive doubly linked list */
struct list_head {
	struct list_head *next, *prev;
};
static inline void list_init(struct list_head *h) { h->next = h->prev = h; }
static inline bool list_empty(const struct list_head *h) { return h->next == h; }
static inline void __list_add(struct list_head *n, struct list_head *prev,
			      struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}
static inline void list_add(struct list_head *n, struct list_head *h)
{
	__list_add(n, h, h->next);
}
static inline void list_add_tail(struct list_head *n, struct list_head *h)
{
	__list_add(n, h->prev, h);
}
static inline void list_del_init(struct list_head *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}
static inline void list_move_tail(struct list_head *n, struct list_head *h)
{
	list_del_init(n);
	list_add_tail(n, h);
}
/* Append all of @from to the tail of @to; @from becomes empty. */
static inline void list_splice_tail_init(struct list_head *from, struct list_head *to)
{
	if (list_empty(from))
		return;
	from->next->prev = to->prev;
	to->prev->next = from->next;
	from->prev->next = to;
	to->prev = from->prev;
	list_init(from);
}

/* A name's hash for the sharded tables (name hash, mem backend): FNV-1a,
 * then mixed by murmur3's finalizer, because FNV-1a's top bits hardly
 * depend on the last characters, and names that differ only there (file1,
 * file2, ...) would all pick the same shard, which takes the top bits. */
/* Advance the iovec *@v of *@cnt entries past @n bytes (at most their
 * total): the entries used up are passed, the first one left shortened
 * in place (the rest of a short read or write). */
static inline void iov_advance(struct iovec **v, int *cnt, size_t n)
{
	while (*cnt && n >= (*v)->iov_len) {
		n -= (*v)->iov_len;
		++*v;
		--*cnt;
	}
	if (n) {
		(*v)->iov_base = (char *)(*v)->iov_base + n;
		(*v)->iov_len -= n;
	}
}

static inline uint64_t wbc_name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

/* base.c: a reason is one line: the user's bytes it quotes (a spec with
 * a newline or an escape sequence in it; a backend's own words) with
 * their control characters as '?' (wbc_dev_add_msg, wbc_rados_break_lock). */
void wbc_msg_one_line(char *msg);

/* base.c: option values */
/* A duration, in seconds: "2", "0.5s", "250ms", "100us" (not negative,
 * finite).  0 or -EINVAL. */
#define NS_PER_SEC 1e9
/* "Never" in nanoseconds from now: about 146 years, far below UINT64_MAX,
 * so that adding it to a clock reading cannot wrap. */
#define WBC_NEVER_NS (UINT64_MAX / 4)
/* Seconds (from a spec: any size) to nanoseconds, saturating at
 * WBC_NEVER_NS, never by a cast that overflows; negative or NaN: 0. */
uint64_t wbc_secs_to_ns(double s);

/* A plain decimal ("0.5", ".5", "12"; no sign, space, hex or exponent;
 * '.' whatever the locale): its value and end, or -EINVAL. */
int parse_decimal(const char *s, double *out, const char **endp);

#endif
