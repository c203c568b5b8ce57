/*
 * The congestion window of the remote backends (nbd, rados): bytes in
 * flight, TCP Vegas's scheme on the I/Os' round-trip times.  The reasoning
 * (why Vegas, the constants, the floor) is in nbd.c's header comment and
 * doc/backends.md; this file is the mechanism, shared.
 *
 * Vegas compares the rate the window would give without queueing (window /
 * base RTT) with the rate measured (window / RTT); the difference times the
 * base RTT is what the window keeps queued at the server:
 *     queued = inflight * (1 - base_rtt / rtt)
 * Once per round trip (a round ends when an I/O sent after it began
 * completes), with the least-queued sample of the round (noise only ever
 * adds delay):
 *   - slow start: the window doubles every other round (the round after a
 *     doubling measures it) while queued stays under GAMMA I/Os; past that
 *     it drops to what queues nothing plus one I/O, and
 *   - then grows by one I/O per round while queued < ALPHA I/Os, holds
 *     between ALPHA and BETA, and shrinks above BETA: by one I/O, or by
 *     half the excess over BETA when that is more, at most by half.
 * The base RTT is the lowest RTT seen for I/Os of the same kind and size
 * class (reads and writes apart, sizes by powers of two), over the last 10
 * to 20 s (two 10 s windows).  The window grows only in rounds in which it
 * was full (an I/O waited for room), starts at WINDOW_INIT and stays
 * within [WINDOW_MIN, WINDOW_MAX]; one I/O may always be in flight.
 *
 * Not thread-safe: one thread (the backend's completion thread) owns it.
 */
#include "backends.h"

#include <string.h>

#define MS_NS 1000000ull
#define WINDOW_INIT (256u << 10)
#define WINDOW_MIN (256u << 10)
#define WINDOW_MAX (1ull << 30)
#define VEGAS_ALPHA 2.0
#define VEGAS_BETA 4.0
#define VEGAS_GAMMA 1.0
#define BASE_WINDOW_NS (10000 * MS_NS)

void window_init(struct vegas_window *w, unsigned fixed, size_t max_io, uint64_t now)
{
	memset(w, 0, sizeof(*w));
	w->fixed = fixed;
	w->max_io = max_io;
	window_reset(w, now);
}

void window_reset(struct vegas_window *w, uint64_t now)
{
	w->cwnd = WINDOW_INIT;
	w->slow_start = true;
	w->ss_hold = false;
	for (int op = 0; op < 2; op++)
		for (int k = 0; k < WINDOW_RTT_CLASSES; k++)
			w->base_cur[op][k] = w->base_prev[op][k] = UINT64_MAX;
	w->base_epoch_ns = now;
	w->srtt = w->sbase = 0;
	w->round_start_ns = 0;
	w->r_max_ratio = 0;
	w->r_bytes = w->r_ios = 0;
	w->r_max_inflight = w->inflight_bytes;
	w->limited = false;
}

static unsigned rtt_class(size_t len)
{
	unsigned k = 0;
	for (size_t units = len >> 12; units > 1 && k < WINDOW_RTT_CLASSES - 1; units >>= 1)
		k++;
	return k;
}

/* A round ended: move the window as the round's samples say. */
static void round_end(struct vegas_window *w, uint64_t now)
{
	if (w->r_ios && !w->fixed) {
		double avg = (double)w->r_bytes / (double)w->r_ios;
		double pipe = (double)w->r_max_inflight;   /* what was in flight */
		double queued = pipe * (1.0 - w->r_max_ratio);
		double c = (double)w->cwnd;
		if (w->slow_start) {
			if (queued > VEGAS_GAMMA * avg) {
				w->slow_start = false;
				c = WBC_MIN(c, pipe * w->r_max_ratio + avg);
			} else if (w->limited && (w->ss_hold = !w->ss_hold)) {
				c *= 2;   /* every other round: the next one sees it */
			}
		} else if (queued < VEGAS_ALPHA * avg) {
			if (w->limited)
				c += avg;
		} else if (queued > VEGAS_BETA * avg) {
			c -= WBC_MIN(WBC_MAX(avg, (queued - VEGAS_BETA * avg) / 2), c / 2);
		}
		w->cwnd = c < WINDOW_MIN ? WINDOW_MIN : c > (double)WINDOW_MAX ? WINDOW_MAX :
			  (uint64_t)c;
	}
	w->round_start_ns = now;
	w->r_max_ratio = 0;
	w->r_bytes = w->r_ios = 0;
	w->r_max_inflight = w->inflight_bytes;
	w->limited = false;
}

void window_sample(struct vegas_window *w, bool write, size_t len, uint64_t sent_ns,
		   uint64_t now)
{
	uint64_t rtt = now > sent_ns ? now - sent_ns : 1;
	int op = write;
	unsigned k = rtt_class(len);
	if (now - w->base_epoch_ns > BASE_WINDOW_NS) {
		/* after an idle spell of more than two windows the previous
		 * one's base is older than a window too: forgotten (a device
		 * that slowed while idle looked queued for a window more) */
		if (now - w->base_epoch_ns > 2 * BASE_WINDOW_NS)
			memset(w->base_cur, 0xff, sizeof(w->base_cur));
		memcpy(w->base_prev, w->base_cur, sizeof(w->base_prev));
		for (int o = 0; o < 2; o++)
			for (int i = 0; i < WINDOW_RTT_CLASSES; i++)
				w->base_cur[o][i] = UINT64_MAX;
		w->base_epoch_ns = now;
	}
	w->base_cur[op][k] = WBC_MIN(w->base_cur[op][k], rtt);
	uint64_t base = WBC_MIN(w->base_cur[op][k], w->base_prev[op][k]);
	double ratio = (double)base / (double)rtt;
	w->srtt = w->srtt > 0 ? w->srtt + ((double)rtt - w->srtt) / 8 : (double)rtt;
	w->sbase = w->sbase > 0 ? w->sbase + ((double)base - w->sbase) / 8 : (double)base;
	w->r_max_ratio = WBC_MAX(w->r_max_ratio, ratio);
	w->r_bytes += len;
	w->r_ios++;
	if (sent_ns >= w->round_start_ns)
		round_end(w, now);
}

bool window_fits(const struct vegas_window *w, size_t len)
{
	if (w->fixed)
		return w->inflight_ios < w->fixed;
	return !w->inflight_bytes || w->inflight_bytes + len <= w->cwnd;
}

void window_take(struct vegas_window *w, size_t len)
{
	w->inflight_bytes += len;
	w->inflight_ios++;
	w->r_max_inflight = WBC_MAX(w->r_max_inflight, w->inflight_bytes);
}

void window_put(struct vegas_window *w, size_t len)
{
	w->inflight_bytes -= len;
	w->inflight_ios--;
}

uint64_t window_bytes(const struct vegas_window *w)
{
	return w->fixed ? (uint64_t)w->fixed * w->max_io : w->cwnd;
}

void rqueue_add(struct remote_queue *q, struct wbc_io *io)
{
	bool read = io->op == WBC_IO_READ;
	struct wbc_io **tail = read ? &q->rq_tail : &q->wq_tail;
	io->backend_data[0] = NULL;
	if (*tail)
		(*tail)->backend_data[0] = io;
	else
		*(read ? &q->rq_head : &q->wq_head) = io;
	*tail = io;
	q->bytes += io->len;
}

struct wbc_io *rqueue_peek(const struct remote_queue *q)
{
	return q->rq_head ? q->rq_head : q->wq_head;
}

unsigned rqueue_take(struct remote_queue *q, struct vegas_window *w, struct wbc_io **take,
		     unsigned max)
{
	unsigned n = 0;
	while (n < max) {
		bool read = q->rq_head != NULL;
		struct wbc_io *io = read ? q->rq_head : q->wq_head;
		if (!io)
			break;
		if (!window_fits(w, io->len)) {
			w->limited = true;
			break;
		}
		struct wbc_io **head = read ? &q->rq_head : &q->wq_head;
		if (!(*head = io->backend_data[0]))
			*(read ? &q->rq_tail : &q->wq_tail) = NULL;
		io->backend_data[0] = NULL;
		q->bytes -= io->len;
		window_take(w, io->len);
		take[n++] = io;
	}
	return n;
}

struct wbc_io *rqueue_take_all(struct remote_queue *q)
{
	struct wbc_io *head = q->rq_head;
	if (head)
		q->rq_tail->backend_data[0] = q->wq_head;
	else
		head = q->wq_head;
	q->rq_head = q->rq_tail = q->wq_head = q->wq_tail = NULL;
	q->bytes = 0;
	return head;
}
