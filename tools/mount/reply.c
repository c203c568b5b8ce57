/*
 * Deferred writes.  Where the throttle pauses a writer, the worker that
 * copied its data does not sleep: wbc_pwrite_nowait stops at the pause,
 * the rest of the write (copied) and its reply are queued, due after the
 * pause, and the replier thread writes the rest then, pausing again as the
 * throttle says, and answers once all of it is in.  The writer waits in
 * the kernel meanwhile, as a throttled writer of a local file system waits
 * in balance_dirty_pages, and the workers stay free for every other
 * request (lookups, stat, readdir, fsync, other devices' writers), however
 * many writers are throttled.  A writer interrupted meanwhile (any signal,
 * a SIGKILL too) is answered at once with what is in (a short write).
 * The queue is sorted by due time (its lock, D.lock: see the lock order in
 * mount.h).
 */
#include "mount.h"

#include <stdlib.h>
#include <string.h>

struct deferred {
	fuse_req_t req;
	size_t count;                /* bytes in so far */
	uint64_t due;                /* CLOCK_MONOTONIC ns */
	bool interrupted;
	wbc_file *h;                 /* the rest: where it goes */
	uint64_t off;
	size_t rest_len;
	char *rest;                  /* into buf */
	struct deferred *next;
	char buf[];
};

struct replier D;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void deferred_queue_locked(struct deferred *d)
{
	assert_held(&D.lock);
	struct deferred **pp = &D.head;
	while (*pp && (*pp)->due <= d->due)
		pp = &(*pp)->next;
	d->next = *pp;
	*pp = d;
	if (D.head == d)
		pthread_cond_signal(&D.cond);
}

/* Write what is left of @d once its pause is over; true when it is
 * queued again (paused again). */
static bool deferred_continue(struct deferred *d, bool stopping)
{
	if (!d->rest_len || d->interrupted || stopping)
		return false;
	uint64_t pause = 0;
	ssize_t r = wbc_pwrite_nowait(d->h, d->rest, d->rest_len, d->off, &pause);
	if (r < 0) {
		if (!d->count) {
			fuse_reply_err(d->req, (int)-r);
			d->req = NULL;
		}
		return false;
	}
	d->count += (size_t)r;
	d->rest += r;
	d->rest_len -= (size_t)r;
	d->off += (uint64_t)r;
	if (!d->rest_len || !pause)
		return false;     /* all in (or short: a dead device) */
	d->due = mono_ns() + pause;
	return true;
}

static void *replier_main(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "wbc-reply");
	pthread_mutex_lock(&D.lock);
	for (;;) {
		struct deferred *d = D.head;
		if (d && (D.stop || d->due <= mono_ns())) {
			D.head = d->next;
			bool stopping = D.stop;
			pthread_mutex_unlock(&D.lock);
			bool again = deferred_continue(d, stopping);
			pthread_mutex_lock(&D.lock);
			/* an interrupt while it was off the queue found nothing */
			if (again && d->req && fuse_req_interrupted(d->req)) {
				d->interrupted = true;
				d->due = 0;
			}
			if (again) {
				deferred_queue_locked(d);
				continue;
			}
			pthread_mutex_unlock(&D.lock);
			if (d->req && d->count)
				fuse_reply_write(d->req, d->count);
			else if (d->req)
				fuse_reply_err(d->req, EINTR);
			free(d);
			pthread_mutex_lock(&D.lock);
			continue;
		}
		if (D.stop)
			break;
		if (!d) {
			pthread_cond_wait(&D.cond, &D.lock);
		} else {
			struct timespec ts = { .tv_sec = (time_t)(d->due / 1000000000ull),
					       .tv_nsec = (long)(d->due % 1000000000ull) };
			pthread_cond_timedwait(&D.cond, &D.lock, &ts);
		}
	}
	pthread_mutex_unlock(&D.lock);
	return NULL;
}

/* libfuse: the writer of @req was interrupted; answer it now.  @req is
 * alive during the call; if it is no longer queued it was answered. */
static void deferred_interrupt(fuse_req_t req, void *unused)
{
	(void)unused;
	pthread_mutex_lock(&D.lock);
	for (struct deferred **pp = &D.head; *pp; pp = &(*pp)->next) {
		if ((*pp)->req == req) {
			struct deferred *d = *pp;
			*pp = d->next;
			d->due = 0;           /* to the front */
			d->interrupted = true;
			d->next = D.head;
			D.head = d;
			D.interrupted++;
			pthread_cond_signal(&D.cond);
			break;
		}
	}
	pthread_mutex_unlock(&D.lock);
}

int replier_start(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&D.cond, &ca);
	pthread_condattr_destroy(&ca);
	mutex_init_checked(&D.lock);
	int err = pthread_create(&D.thread, NULL, replier_main, NULL);
	D.started = !err;
	return -err;
}

/* Answer everything queued now, and end the thread. */
void replier_stop(void)
{
	if (!D.started)
		return;
	pthread_mutex_lock(&D.lock);
	D.stop = true;
	pthread_cond_signal(&D.cond);
	pthread_mutex_unlock(&D.lock);
	pthread_join(D.thread, NULL);
	D.started = false;
}

/*
 * Finish a write of which @count bytes are in and @rest_len bytes at
 * @rest (to go at @off) are not, after the throttle's pause @pause_ns:
 * answered now if nothing is owed, else queued for the replier.
 */
void write_after(fuse_req_t req, wbc_file *h, size_t count,
		 const char *rest, size_t rest_len, uint64_t off, uint64_t pause_ns)
{
	struct deferred *d = pause_ns && D.started ? malloc(sizeof(*d) + rest_len) : NULL;
	if (!d) {
		if (pause_ns) {   /* no queue: the worker waits and writes the rest */
			struct timespec ts = { .tv_sec = (time_t)(pause_ns / 1000000000ull),
					       .tv_nsec = (long)(pause_ns % 1000000000ull) };
			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
			ssize_t r = rest_len ? wbc_pwrite(h, rest, rest_len, off) : 0;
			if (r < 0 && !count) {
				fuse_reply_err(req, (int)-r);
				return;
			}
			count += r > 0 ? (size_t)r : 0;
		}
		fuse_reply_write(req, count);
		return;
	}
	d->req = req;
	d->count = count;
	d->due = mono_ns() + pause_ns;
	d->interrupted = false;
	d->h = h;
	d->off = off;
	d->rest = d->buf;
	d->rest_len = rest_len;
	memcpy(d->buf, rest, rest_len);
	fuse_req_interrupt_func(req, deferred_interrupt, NULL);
	pthread_mutex_lock(&D.lock);
	if (fuse_req_interrupted(req)) {
		d->due = 0;
		d->interrupted = true;
	}
	deferred_queue_locked(d);
	D.queued++;
	pthread_mutex_unlock(&D.lock);
}
