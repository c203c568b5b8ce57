/*
 * Deferred writes.  Where the throttle pauses a writer, the worker that
 * copied its data does not sleep: wbc_pwrite_nowait stops at the pause,
 * the rest of the write (copied) and its reply are queued, due after the
 * pause, and the replier thread writes the rest then, pausing again as the
 * throttle says, and answers once all of it is in.  The writer waits in
 * the kernel meanwhile, as a throttled writer of a local file system waits
 * in balance_dirty_pages, and the workers stay free for every other
 * request (lookups, stat, readdir, fsync, other devices' writers), however
 * many writers are throttled.  As there, only a fatal signal ends a
 * pause: a writer killed meanwhile is answered at once with what is in (a
 * short write, or EINTR); any other signal (a handler for SIGUSR1,
 * SIGCHLD, a profiler's SIGPROF) leaves its write to finish whole, as a
 * local file system's write would.
 * The queue is sorted by due time (its lock, D.lock: see the lock order in
 * mount.h).
 */
#include "mount.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct deferred {
	fuse_req_t req;
	pid_t tid;                   /* the writer's thread (0: not known) */
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

/*
 * Whether the thread @tid has a fatal signal pending.  FUSE sends an
 * INTERRUPT for any signal; the kernel then waits on for the answer, and
 * gives up only at a fatal one (which it marks, whatever the signal was, as
 * a SIGKILL queued on each thread of the process).  /proc shows the
 * thread's pending set (SigPnd) and the process's (ShdPnd).  A thread not
 * found (gone; or 0: the writer is outside the daemon's pid namespace)
 * counts as killed: its write is answered at once.  No lock held (a read
 * of /proc).
 */
static bool fatal_pending(pid_t tid)
{
	if (tid <= 0)
		return true;
	char path[48], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return true;
	unsigned long long set, pending = 0;
	int found = 0;
	while (found < 2 && fgets(line, sizeof(line), f))
		if (sscanf(line, "SigPnd: %llx", &set) == 1 ||
		    sscanf(line, "ShdPnd: %llx", &set) == 1) {
			pending |= set;
			found++;
		}
	fclose(f);
	return found < 2 || (pending & (1ull << (SIGKILL - 1)));
}

/* Under D.lock: an INTERRUPT for @req that came after the look without
 * the lock (@looked: what it saw) found the write not queued; was its
 * writer killed?  Rare: a read of /proc under the lock. */
static bool killed_since_locked(fuse_req_t req, pid_t tid, bool looked)
{
	assert_held(&D.lock);
	return !looked && fuse_req_interrupted(req) && fatal_pending(tid);
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
 * queued again (paused again).  @stopping (the daemon ends, the cache is
 * written back after): all of it now, waiting out the pauses here, not
 * dropped: the writer was told nothing yet, and for a mapping's
 * write-back (FUSE_WRITE_CACHE) the kernel ignores a short count, so the
 * rest would be lost without a word. */
static bool deferred_continue(struct deferred *d, bool stopping)
{
	if (!d->rest_len || d->interrupted)
		return false;
	uint64_t pause = 0;
	ssize_t r = stopping ? wbc_pwrite(d->h, d->rest, d->rest_len, d->off) :
			       wbc_pwrite_nowait(d->h, d->rest, d->rest_len, d->off, &pause);
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
			/* A writer a signal interrupted: killed since?  Asked
			 * at each of its pauses (an INTERRUPT comes once, for
			 * the first signal, and one that came while the write
			 * was off the queue found nothing). */
			bool killed = d->req && !d->interrupted &&
				      fuse_req_interrupted(d->req) && fatal_pending(d->tid);
			if (killed)
				d->interrupted = true;
			bool again = deferred_continue(d, stopping);
			bool intr = again && fuse_req_interrupted(d->req);
			bool killed_now = intr && fatal_pending(d->tid);
			pthread_mutex_lock(&D.lock);
			if (again && killed_since_locked(d->req, d->tid, intr))
				killed_now = true;
			if (killed_now) {
				killed = true;
				d->interrupted = true;
				d->due = 0;
			}
			if (killed)
				D.interrupted++;
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

/* libfuse: the writer of @req was interrupted by a signal; if it was a
 * fatal one, answer it now.  @req is alive during the call; if it is no
 * longer queued it was answered. */
static void deferred_interrupt(fuse_req_t req, void *unused)
{
	(void)unused;
	if (!fatal_pending(fuse_req_ctx(req)->pid))
		return;   /* the replier asks again at the writer's next pause */
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

/* Answer everything queued (what is left of each write written first,
 * its pauses waited out by the replier), and end the thread. */
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
	d->tid = fuse_req_ctx(req)->pid;
	d->count = count;
	d->due = mono_ns() + pause_ns;
	d->interrupted = false;
	d->h = h;
	d->off = off;
	d->rest = d->buf;
	d->rest_len = rest_len;
	memcpy(d->buf, rest, rest_len);
	fuse_req_interrupt_func(req, deferred_interrupt, NULL);
	bool intr = fuse_req_interrupted(req);
	bool killed = intr && fatal_pending(d->tid);
	pthread_mutex_lock(&D.lock);
	if (killed_since_locked(req, d->tid, intr))
		killed = true;
	if (killed) {
		d->due = 0;
		d->interrupted = true;
		D.interrupted++;
	}
	deferred_queue_locked(d);
	D.queued++;
	pthread_mutex_unlock(&D.lock);
}
