/*
 * Device model backend: RAM storage served at a configured speed.
 *
 *   model:bw=200M,lat=1ms,iops=0,qd=32,seek=8ms,sched=5s@10%;8s@100%,
 *         err=OFF+LEN,errp=0.001,errn=N,stall=T+D,seed=N
 *
 * Each I/O occupies the device's transfer pipe for max(len / bw, 1 / iops)
 * seconds, in submission order (one pipe: bandwidth is shared by all I/Os
 * in flight), then completes `lat` later.  `seek` (for experiments: the
 * disk head of the writeback lab) adds that much pipe time to every I/O
 * that does not begin where the one before it (in submission order, which
 * is service order) ended: another file, or another offset of the same
 * file.  The first I/O pays none.  The penalty is pipe time, like the
 * transfer: a disk has one head, so seeks are paid one after another
 * whatever the queue depth, and a device that seeks delivers less
 * bandwidth.  Discontiguous I/Os are counted whether or not seek is set
 * (backend stats: seeks, seek_ns).  `sched` multiplies bw by a
 * factor from a time on (seconds since the device was added; refused
 * without a bw, which it would leave unlimited).  `stall`
 * holds every completion due in [T, T+D) until T+D.  `err` fails writes
 * that touch byte range [OFF, OFF+LEN) with EIO, `errp` fails each write
 * with that probability, `errn` fails the first N writes (a fault that
 * ends by itself); a failed write stores nothing.
 *
 * One service thread per device completes I/Os in due order: it copies the
 * data at completion time and completes what is due as one batch
 * (wbc_io_complete_batch).  Storage is the mem backend.
 */
#include "backends.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <math.h>

#define MODEL_MAX_SCHED 16
#define MODEL_DEFAULT_QD 32
#define MODEL_MAX_IO (1u << 20)
#define MODEL_COMPLETE_BATCH 32
/* Times and rates come from the spec (stall=0+100000000000, iops=0.000000001,
 * a bandwidth of a few bytes per second): every one of them becomes
 * nanoseconds by wbc_secs_to_ns(), which saturates, never by a cast that
 * overflows (a stall of 1e11 s became a 1 ns wait: a busy loop). */

struct sched_point {
	double at_s;
	double factor;
};

struct model_cfg {
	double bw;                  /* bytes/s; 0: unlimited */
	double lat_s;
	double iops;                /* 0: unlimited */
	double seek_s;              /* pipe time of a discontiguous I/O; 0: none */
	unsigned qd;
	size_t max_io;
	struct sched_point sched[MODEL_MAX_SCHED];
	unsigned nr_sched;
	uint64_t err_off, err_len;  /* err_len 0: none */
	double errp;
	uint64_t errn;              /* writes still to fail (m->lock), from the first */
	double stall_at, stall_for; /* stall_for 0: none */
	uint64_t seed;
	bool discard;               /* keep sizes only, like null_blk */
	bool send;                  /* writes' data taken at submission, as a network send */
};

struct pending {
	uint64_t due_ns;
	uint64_t seq;
	struct wbc_io *io;
	int res;                    /* injected error, a sent write's result, else 0 */
};

struct model {
	struct model_cfg cfg;
	const struct wbc_backend_ops *mem_ops;
	void *mem;                  /* the mem backend's context: the storage */
	uint64_t t0;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* queued I/Os in due order: a ring from head, n of cap (a power of
	 * two).  Due times only grow with submission order (one pipe whose
	 * busy time only grows, one latency), so a FIFO is in due order. */
	struct pending *q;
	size_t head;
	size_t n, cap;
	uint64_t seq;
	double busy_until_s;        /* the pipe is busy until then (since t0) */
	uint64_t rng;
	bool stop;
	bool stall_released;        /* model_release_stall() */
	uint64_t waits;             /* timed waits of the model thread (tests) */
	/* the head (seek=): where the last I/O queued ended, and the I/Os
	 * that did not start there (lock) */
	void *head_file;
	uint64_t head_off;
	bool head_known;
	uint64_t seeks;
	double seek_s_total;
	pthread_t thread;
};

/* ------------------------------------------------------------------ */
/* spec parsing                                                         */

/* @base + @ns, at most UINT64_MAX. */
static uint64_t ns_add(uint64_t base, uint64_t ns)
{
	return ns > UINT64_MAX - base ? UINT64_MAX : base + ns;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	const char *end;
	double v;
	if (parse_decimal(s, &v, &end) || *end || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

/* "5s@10%;8s@100%": every point given (an empty one, as in "5s@10%;" or
 * "5s@10%;;8s@100%", was skipped unsaid) */
static int parse_sched(char *s, struct model_cfg *cfg)
{
	for (char *tok = s, *next; tok; tok = next) {
		if ((next = strchr(tok, ';')))
			*next++ = '\0';
		char *at = strchr(tok, '@');
		if (!at || cfg->nr_sched == MODEL_MAX_SCHED)
			return -EINVAL;
		*at++ = '\0';
		size_t n = strlen(at);
		if (!n || at[n - 1] != '%')
			return -EINVAL;
		at[n - 1] = '\0';
		struct sched_point *p = &cfg->sched[cfg->nr_sched];
		double pct;
		if (wbc_parse_time(tok, &p->at_s) || parse_double(at, 0.001, 1e6, &pct))
			return -EINVAL;
		if (cfg->nr_sched && p->at_s < cfg->sched[cfg->nr_sched - 1].at_s)
			return -EINVAL;
		p->factor = pct / 100;
		cfg->nr_sched++;
	}
	return cfg->nr_sched ? 0 : -EINVAL;
}

int model_parse(const char *opts, struct model_cfg *cfg, char *err, size_t errlen)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->qd = MODEL_DEFAULT_QD;
	cfg->max_io = MODEL_MAX_IO;
	cfg->seed = 1;
	if (!opts || !*opts)
		return 0;
	char *copy = strdup(opts);
	if (!copy)
		return -ENOMEM;
	int rc = 0;
	char *save = NULL;
	for (char *kv = strtok_r(copy, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
		char *v = strchr(kv, '=');
		if (!v) {
			snprintf(err, errlen, "bad model option '%s' (expected key=value)", kv);
			rc = -EINVAL;
			break;
		}
		*v++ = '\0';
		char shown[160];   /* the value as given: some parsers cut it up */
		snprintf(shown, sizeof(shown), "%s", v);
		uint64_t u;
		if (!strcmp(kv, "bw")) {
			/* bytes a second: "200M" or, as the help writes it,
			 * "200M/s" */
			char num[64];
			size_t vl = strlen(v);
			if (vl > 2 && vl < sizeof(num) && !strcmp(v + vl - 2, "/s")) {
				memcpy(num, v, vl - 2);
				num[vl - 2] = 0;
				v = num;
			}
			rc = wbc_parse_size(v, &u);
			cfg->bw = (double)u;
		} else if (!strcmp(kv, "lat")) {
			/* a model of a device: a minute is already none (a
			 * run with lat=1e9 never ended) */
			rc = wbc_parse_time(v, &cfg->lat_s);
			if (!rc && cfg->lat_s > 60)
				rc = -EINVAL;
		} else if (!strcmp(kv, "iops")) {
			rc = parse_double(v, 0, 1e9, &cfg->iops);
		} else if (!strcmp(kv, "seek")) {
			rc = wbc_parse_time(v, &cfg->seek_s);
			if (!rc && cfg->seek_s > 60)
				rc = -EINVAL;
		} else if (!strcmp(kv, "qd")) {
			rc = wbc_parse_size(v, &u);
			if (!rc && (u < 1 || u > 4096))
				rc = -EINVAL;
			cfg->qd = (unsigned)u;
		} else if (!strcmp(kv, "max_io")) {
			rc = wbc_parse_size(v, &u);
			if (!rc && (u < 512 || u > (64u << 20)))
				rc = -EINVAL;
			cfg->max_io = (size_t)u;
		} else if (!strcmp(kv, "sched")) {
			rc = parse_sched(v, cfg);
		} else if (!strcmp(kv, "err")) {
			char *plus = strchr(v, '+');
			uint64_t off = 0, len = 0;
			if (!plus)
				rc = -EINVAL;
			else {
				*plus++ = '\0';
				rc = wbc_parse_size(v, &off) || wbc_parse_size(plus, &len) || !len ?
				     -EINVAL : 0;
				cfg->err_off = off;
				cfg->err_len = len;
			}
		} else if (!strcmp(kv, "errn")) {
			rc = wbc_parse_size(v, &cfg->errn);
		} else if (!strcmp(kv, "errp")) {
			rc = parse_double(v, 0, 1, &cfg->errp);
		} else if (!strcmp(kv, "stall")) {
			char *plus = strchr(v, '+');
			if (!plus)
				rc = -EINVAL;
			else {
				*plus++ = '\0';
				/* a stall of no time, as an err= of no bytes, is none:
				 * refused, not a fault that never happens */
				rc = wbc_parse_time(v, &cfg->stall_at) ||
				     wbc_parse_time(plus, &cfg->stall_for) || !(cfg->stall_for > 0) ?
				     -EINVAL : 0;
			}
		} else if (!strcmp(kv, "seed")) {
			rc = wbc_parse_size(v, &cfg->seed);
		} else if (!strcmp(kv, "discard")) {
			rc = wbc_parse_size(v, &u);
			if (!rc && u > 1)
				rc = -EINVAL;
			cfg->discard = u;
		} else if (!strcmp(kv, "send")) {
			rc = wbc_parse_size(v, &u);
			if (!rc && u > 1)
				rc = -EINVAL;
			cfg->send = u;
		} else {
			rc = -EINVAL;
		}
		if (rc)
			snprintf(err, errlen, "bad model option '%s=%s' (bw=SIZE/s lat=TIME<=60s iops=N "
				 "qd=N seek=TIME<=60s max_io=SIZE sched=T@P%%;... err=OFF+LEN errp=P errn=N "
				 "stall=T+D seed=N "
				 "discard=0|1 send=0|1, "
				 "and the device tunables)",
				 kv, shown);
	}
	/* sched= is a factor of bw=: on an unlimited bandwidth it changed
	 * nothing, and the schedule asked for was taken unsaid */
	if (!rc && cfg->nr_sched && !(cfg->bw > 0)) {
		snprintf(err, errlen, "bad model option 'sched=': sched= scales bw=, which is "
			 "unlimited here (give bw=SIZE/s)");
		rc = -EINVAL;
	}
	free(copy);
	return rc;
}

/* ------------------------------------------------------------------ */
/* timing                                                               */

static double bw_factor_at(const struct model_cfg *cfg, double t)
{
	double f = 1;
	for (unsigned i = 0; i < cfg->nr_sched && cfg->sched[i].at_s <= t; i++)
		f = cfg->sched[i].factor;
	return f;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

static struct pending *q_at(struct model *m, size_t i)
{
	return &m->q[(m->head + i) & (m->cap - 1)];
}

/* Caller made room (n < cap). */
static void q_push(struct model *m, struct pending p)
{
	assert(!m->n || q_at(m, m->n - 1)->due_ns <= p.due_ns);
	*q_at(m, m->n++) = p;
}

static struct pending q_pop(struct model *m)
{
	struct pending top = *q_at(m, 0);
	m->head = (m->head + 1) & (m->cap - 1);
	m->n--;
	return top;
}

static bool in_stall_locked(struct model *m, double t)
{
	assert_held(&m->lock);
	const struct model_cfg *cfg = &m->cfg;
	return cfg->stall_for > 0 && !m->stall_released && t >= cfg->stall_at &&
	       t < cfg->stall_at + cfg->stall_for;
}

static void *model_main(void *arg)
{
	pthread_setname_np(pthread_self(), "wbc-model");
	struct model *m = arg;
	/* A timed sleep ends up to the thread's timer slack late (50 us by
	 * default): what is due within one slack completes at this wakeup,
	 * not one late sleep later.  Otherwise a fast device's queue sits
	 * drained for most of each oversleep, and it delivers half its
	 * bandwidth.  The bandwidth stays exact: busy time is booked at
	 * submission, so an early completion only lets the next I/O queue
	 * behind the ones still in the pipe. */
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	uint64_t early_ns = slack > 0 ? (uint64_t)slack : 0;
	pthread_mutex_lock(&m->lock);
	for (;;) {
		if (m->stop && !m->n)
			break;
		if (!m->n) {
			pthread_cond_wait(&m->cond, &m->lock);
			continue;
		}
		uint64_t now = wbc_now_ns();
		double t = (double)(now - m->t0) / NS_PER_SEC;
		uint64_t due = q_at(m, 0)->due_ns;
		/* a stall holds completions until it ends (or is released) */
		if (in_stall_locked(m, t)) {
			double end = m->cfg.stall_at + m->cfg.stall_for;
			m->waits++;
			wbc_cond_timedwait_ns(&m->cond, &m->lock, wbc_secs_to_ns(end - t) + 1);
			continue;
		}
		uint64_t horizon = now + early_ns;
		if (m->cfg.stall_for > 0 && !m->stall_released) {
			/* never early into a stall */
			uint64_t stall_ns = ns_add(m->t0, wbc_secs_to_ns(m->cfg.stall_at));
			if (stall_ns > now)
				horizon = WBC_MIN(horizon, stall_ns);
		}
		if (due > horizon) {
			m->waits++;
			wbc_cond_timedwait_ns(&m->cond, &m->lock, due - now);
			continue;
		}
		/* everything due now, in one hold (completions in due order) */
		struct pending due_now[MODEL_COMPLETE_BATCH];
		unsigned n = 0;
		do
			due_now[n++] = q_pop(m);
		while (n < MODEL_COMPLETE_BATCH && m->n && q_at(m, 0)->due_ns <= horizon);
		pthread_mutex_unlock(&m->lock);
		/* the data is stored (or not) now, at completion time */
		struct wbc_io *ios[MODEL_COMPLETE_BATCH];
		for (unsigned i = 0; i < n; i++) {
			ios[i] = due_now[i].io;
			ios[i]->res = due_now[i].res ? due_now[i].res : mem_backend_rw(m->mem, ios[i]);
		}
		wbc_io_complete_batch(ios, n);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* Queue one I/O submitted at @now_ns (m->lock held); false without
 * memory. */
static bool queue_locked(struct model *m, struct wbc_io *io, uint64_t now_ns)
{
	assert_held(&m->lock);
	const struct model_cfg *cfg = &m->cfg;
	if (m->n == m->cap) {
		/* grow, the ring unrolled from its head */
		size_t ncap = m->cap ? m->cap * 2 : 64;
		struct pending *nq = malloc(ncap * sizeof(*nq));
		if (!nq)
			return false;
		for (size_t i = 0; i < m->n; i++)
			nq[i] = *q_at(m, i);
		free(m->q);
		m->q = nq;
		m->head = 0;
		m->cap = ncap;
	}
	double now = (double)(now_ns - m->t0) / NS_PER_SEC;
	double start = WBC_MAX(now, m->busy_until_s);
	double xfer = 0;
	if (cfg->bw > 0)
		xfer = (double)io->len / (cfg->bw * bw_factor_at(cfg, start));
	if (cfg->iops > 0)
		xfer = WBC_MAX(xfer, 1.0 / cfg->iops);
	/* one head: an I/O that does not continue the last one moves it
	 * first, in the pipe's time (paid serially, never overlapped) */
	if (m->head_known && (io->file != m->head_file || io->off != m->head_off)) {
		m->seeks++;
		xfer += cfg->seek_s;
		m->seek_s_total += cfg->seek_s;
	}
	m->head_known = true;
	m->head_file = io->file;
	m->head_off = io->off + io->len;
	m->busy_until_s = start + xfer;
	double done = m->busy_until_s + cfg->lat_s;
	int res = 0;
	if (io->op == WBC_IO_WRITE) {
		/* [off, off + len) meets [err_off, err_off + err_len), by
		 * differences: the sums may exceed 2^64 (err=1M+<2^64 - 1>) */
		if (cfg->err_len && (io->off >= cfg->err_off ?
				     io->off - cfg->err_off < cfg->err_len :
				     cfg->err_off - io->off < io->len))
			res = -EIO;
		if (cfg->errp > 0 && (double)(rng_next(&m->rng) >> 11) / 9007199254740992.0 < cfg->errp)
			res = -EIO;
		if (m->cfg.errn) {
			m->cfg.errn--;
			res = -EIO;
		}
	}
	/* send=1: a write's data is taken now, in the submitter's thread, as
	 * a network client's send copies it into the socket; it completes
	 * (is acknowledged) when due */
	if (cfg->send && io->op == WBC_IO_WRITE && !res)
		res = (int)mem_backend_rw(m->mem, io);
	struct pending p = { .due_ns = ns_add(m->t0, wbc_secs_to_ns(done)), .seq = m->seq++,
			     .io = io, .res = res };
	q_push(m, p);
	return true;
}

static int model_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct model *m = ctx;
	pthread_mutex_lock(&m->lock);
	uint64_t first = m->n ? q_at(m, 0)->seq : UINT64_MAX, now = wbc_now_ns();
	unsigned i = 0;
	while (i < n && queue_locked(m, ios[i], now))
		i++;
	/* wake the model thread only when its next deadline moved earlier:
	 * an I/O queued behind others is found when they complete */
	if (i && q_at(m, 0)->seq != first)
		pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	*queued = i;
	return i == n ? 0 : -ENOMEM;
}

static void model_caps(void *ctx, struct wbc_backend_caps *caps)
{
	struct model *m = ctx;
	caps->queue_depth = m->cfg.qd;
	caps->max_io = m->cfg.max_io;
	/* its data is a mem backend's: that one's largest file */
	struct wbc_backend_caps mc = { 0 };
	m->mem_ops->caps(m->mem, &mc);
	caps->max_file_size = mc.max_file_size;
}

static int model_open(void *ctx, const char *name, unsigned flags, void **obj, uint64_t *size)
{
	struct model *m = ctx;
	return m->mem_ops->open(m->mem, name, flags, obj, size);
}

static void model_close(void *ctx, void *obj)
{
	struct model *m = ctx;
	m->mem_ops->close(m->mem, obj);
}

static int model_remove(void *ctx, void *obj)
{
	struct model *m = ctx;
	return m->mem_ops->remove(m->mem, obj);
}

static int model_resize(void *ctx, void *obj, uint64_t size)
{
	struct model *m = ctx;
	return m->mem_ops->resize(m->mem, obj, size);
}

static void model_destroy(void *ctx)
{
	struct model *m = ctx;
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	m->stall_released = true;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	m->mem_ops->destroy(m->mem);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	free(m->q);
	free(m);
}

/* The head's figures (seek=): the I/Os that did not continue the one
 * before them, and the pipe time they paid for it. */
static void model_stats(void *ctx, struct wbc_backend_stats *st)
{
	struct model *m = ctx;
	pthread_mutex_lock(&m->lock);
	st->seeks = m->seeks;
	st->seek_ns = wbc_secs_to_ns(m->seek_s_total);
	pthread_mutex_unlock(&m->lock);
}

/* No flush: a completed write is stored (in RAM). */
static const struct wbc_backend_ops model_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "model",
	.caps = model_caps,
	.open = model_open,
	.close = model_close,
	.submit = model_submit,
	.resize = model_resize,
	.destroy = model_destroy,
	.stats = model_stats,
	.remove = model_remove,
};

/* The model behind @dev, or NULL. */
static struct model *model_of(wbc_dev *dev)
{
	const struct wbc_backend_ops *ops;
	void *ctx = wbc_dev_backend(dev, &ops);
	return ops == &model_ops ? ctx : NULL;
}

/* Change the injected errors now (tests: a fault that ends). */
void model_set_faults(wbc_dev *dev, uint64_t err_off, uint64_t err_len, double errp)
{
	struct model *m = model_of(dev);
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->cfg.err_off = err_off;
	m->cfg.err_len = err_len;
	m->cfg.errp = errp;
	pthread_mutex_unlock(&m->lock);
}

/* Timed waits the model's thread began so far (tests: a wait that
 * overflowed to nothing made it spin). */
uint64_t model_waits(wbc_dev *dev)
{
	struct model *m = model_of(dev);
	if (!m)
		return 0;
	pthread_mutex_lock(&m->lock);
	uint64_t n = m->waits;
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* End a configured stall now (tests). */
void model_release_stall(wbc_dev *dev)
{
	struct model *m = model_of(dev);
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stall_released = true;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

int model_spec_check(const char *opts, char *err, size_t errlen)
{
	struct model_cfg cfg;
	return model_parse(opts, &cfg, err, errlen);
}

int model_backend_new(const char *opts, const struct wbc_backend_ops **ops, void **ctx,
		      char *err, size_t errlen)
{
	struct model_cfg cfg;
	int rc = model_parse(opts, &cfg, err, errlen);
	if (rc)
		return rc;
	struct model *m = calloc(1, sizeof(*m));
	if (!m || (rc = mem_backend_new(cfg.discard, &m->mem_ops, &m->mem))) {
		free(m);
		return rc ? rc : -ENOMEM;
	}
	m->cfg = cfg;
	/* the seed is the xorshift state, which must not be 0: 0 becomes a
	 * constant of its own (cfg.seed | 1 made seed=2 seed=3 and seed=0
	 * seed=1: two seeds, one fault pattern) */
	m->rng = cfg.seed ? cfg.seed : 0x9e3779b97f4a7c15ull;
	m->t0 = wbc_now_ns();
	wbc_mutex_init(&m->lock);
	wbc_cond_init(&m->cond);
	rc = -pthread_create(&m->thread, NULL, model_main, m);
	if (rc) {
		m->mem_ops->destroy(m->mem);
		free(m);
		snprintf(err, errlen, "cannot start the model thread");
		return rc;
	}
	*ops = &model_ops;
	*ctx = m;
	return 0;
}
