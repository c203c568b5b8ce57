/*
 * The base layer: locks, time and option values (base.h).
 */
#include "base.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(NDEBUG) && defined(__GLIBC__)
/* The calling thread's id, cached; a fork's child (its one thread, the
 * forking one) drops the parent's (every lock it held read as another's) */
static __thread pid_t cached_tid;

static void tid_forget(void)
{
	cached_tid = 0;
}

static void tid_atfork(void)
{
	pthread_atfork(NULL, NULL, tid_forget);
}

pid_t wbc_gettid(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	if (!cached_tid) {
		pthread_once(&once, tid_atfork);
		cached_tid = gettid();
	}
	return cached_tid;
}
#endif

void wbc_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

void *wbc_zalloc(size_t bytes)
{
	size_t n = (bytes + 63) & ~(size_t)63;
	void *p = aligned_alloc(64, n);
	if (p)
		memset(p, 0, n);
	return p;
}

void wbc_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

uint64_t wbc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int wbc_cond_timedwait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns)
{
	uint64_t now = wbc_now_ns();
	/* a deadline past 2^64 ns (584 years) is no deadline: not one that
	 * wrapped into the past */
	uint64_t t = ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ull),
			       .tv_nsec = (long)(t % 1000000000ull) };
	return pthread_cond_timedwait(c, m, &ts);
}

int wbc_parse_size(const char *s, uint64_t *out)
{
	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case '\0': break;
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: return -EINVAL;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (shift && (*end == 'b' || *end == 'B'))
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/*
 * A plain decimal number at @s ("12", "0.5", ".5", "3."): digits and one
 * point, nothing else (strtod takes a sign, spaces, hex and exponents,
 * and reads the point of the program's locale: under one that writes
 * "0,5" it stopped at "0.5"'s point).  Its value and where it ends, or
 * -EINVAL.
 */
int parse_decimal(const char *s, double *out, const char **endp)
{
	double v = 0, frac = 0, scale = 1;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (*p - '0');
	bool digits = p != s;
	if (*p == '.') {
		const char *q = ++p;
		/* at most 17 significant fraction digits count (frac stays
		 * exact); the rest cannot change a double.  Leading zeros
		 * only scale ("0.000000000000000001" is not 0) */
		int sig = 0;
		for (; *p >= '0' && *p <= '9'; p++)
			if (sig < 17) {
				frac = frac * 10 + (*p - '0');
				scale *= 10;
				sig += frac > 0;
			}
		digits = digits || p != q;
	}
	if (!digits)
		return -EINVAL;
	v += frac / scale;
	if (!isfinite(v))
		return -EINVAL;
	*out = v;
	*endp = p;
	return 0;
}

int wbc_parse_time(const char *s, double *out)
{
	const char *end;
	double v;
	if (!s || parse_decimal(s, &v, &end))
		return -EINVAL;
	if (!strcmp(end, "s") || !*end)
		*out = v;
	else if (!strcmp(end, "ms"))
		*out = v / 1e3;
	else if (!strcmp(end, "us"))
		*out = v / 1e6;
	else
		return -EINVAL;
	return 0;
}

uint64_t wbc_secs_to_ns(double s)
{
	if (!(s > 0))
		return 0;
	if (s >= (double)WBC_NEVER_NS / NS_PER_SEC)
		return WBC_NEVER_NS;
	return (uint64_t)(s * NS_PER_SEC);
}

void wbc_msg_one_line(char *msg)
{
	for (unsigned char *p = (unsigned char *)msg; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
}
