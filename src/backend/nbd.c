/*
 * NBD backend: one export of an NBD server, the single file "" (a block
 * device of the export's size), over libnbd's asynchronous API.
 *
 *   nbd://HOST[:PORT]/EXPORT[,opts]
 *   nbd+unix:///EXPORT?socket=PATH[,opts]
 *   (and libnbd's other URIs: nbds://, nbds+unix://, nbd+vsock://)
 *
 * The URI ends at the first comma: what follows are options, this
 * backend's and the device tunables (min_ratio=, on_error=, ...; the
 * engine takes those out first).  A URI holding a comma writes it %2C.
 * Its query may hold socket=, and in a URI of TLS (nbds...)
 * tls-psk-file= and tls-certificates= (local files: allowed); anything
 * else is refused (check_uri), where libnbd would ignore it.
 *   conns=N          connections (1..16); default 4 where the server
 *                    allows multi-conn, else 1 (more is refused then)
 *   window=adaptive  (default) the congestion control below;
 *   window=fixed:N   N I/Os in flight at most (for comparisons)
 *   max_io=SIZE      largest command (default 1 MiB, at most the server's)
 *   timeout=SECONDS  a command without a reply, or a connection attempt,
 *                    for that long ends its connection (default 30; 0: none)
 *   fua=1            writes carry FUA (where the server offers it) and
 *                    flush sends nothing; off by default, see below
 *
 * I/O.  Each I/O becomes one NBD command per run of its iovec that is
 * contiguous in memory (cache pages next to each other merge); an I/O of
 * more than MAX_RUNS runs is copied into one buffer and sent as one
 * command instead (a command costs a request, a reply and a server-side
 * dispatch: copying 1 MiB is cheaper than 256 of them).  No command is
 * above the server's maximum block size, a hard limit: the engine's least
 * I/O is a page, which may be larger, and is then sent as several.  The I/O completes
 * when all its commands have, with the first error.  A read at the end
 * of the export is cut short there (the file ends); a write beyond it
 * fails with ENOSPC.  flush() sends NBD_CMD_FLUSH where the server has a
 * cache to flush (nbd_can_flush), else does nothing.
 *
 * FUA is not used by default: the engine flushes once after a batch of
 * writes, and FUA on each write instead makes every write durable on its
 * own.  Measured with nbdkit's file plugin (a file on ext4 on a virtual
 * disk; FUA there is an fdatasync after the write): `wbcache run dd`, 1
 * GiB then fsync, was 1.3 to 1.5 times faster with fua=1 (the durability
 * spread over the stream instead of one fdatasync of 1 GiB at the end),
 * and `wbcache run randwrite` (4 KiB) 3 to 4 times slower (60-82 MB/s
 * against 250: an fdatasync per write).  Most writeback is background
 * writeback that no one waits on, so FUA stays off unless asked for.
 *
 * Multi-conn.  Where the server sets NBD_FLAG_CAN_MULTI_CONN, commands are
 * spread over conns= connections (each to the one with the fewest bytes
 * in flight).  The NBD protocol says of that flag that "the effects of
 * NBD_CMD_FLUSH and NBD_CMD_FLAG_FUA MUST be visible across all
 * connections when the server sends its reply", and that a client MUST
 * NOT send a flush before it has the replies of the writes the flush
 * is to cover: so one flush, on any connection, sent once those replies
 * are in (the engine calls flush() after the writes completed), covers
 * the writes completed on every connection.  One is sent; flushing every
 * connection would add round trips and make nothing more durable.
 * Without the flag there is one connection (the protocol: clients
 * "SHOULD NOT multiplex their commands over more than one connection").
 *
 * Congestion control: a window of bytes in flight, TCP Vegas's scheme on
 * the I/Os' round-trip times (the mechanism is window.c, shared with the
 * rados backend).  Vegas compares the rate the window would
 * give without queueing (window / base RTT) with the rate measured
 * (window / RTT); the difference times the base RTT is what the window
 * keeps queued at the server:
 *     queued = inflight * (1 - base_rtt / rtt)
 * Once per round trip (a round ends when an I/O sent after it began
 * completes), with the least-queued sample of the round (noise only ever
 * adds delay):
 *   - slow start: the window doubles every other round (the round after a
 *     doubling measures it) while queued stays under GAMMA I/Os; past that
 *     it drops to what queues nothing plus one I/O, and
 *   - then grows by one I/O per round while queued < ALPHA I/Os, holds
 *     between ALPHA and BETA, and shrinks above BETA: by one I/O, or by
 *     half the excess over BETA when that is more (plain Vegas takes one
 *     I/O per round trip to drain each I/O of excess; a server that
 *     slows down tenfold would wait long for that), at most by half.
 *   ALPHA = 2, BETA = 4, GAMMA = 1 I/Os of the round's mean size: Linux's
 *   tcp_vegas defaults (in packets).  A few I/Os queued at the server keep
 *   it busy between one reply and the next command; more only add latency
 *   (the engine's writers, its reads on cache misses and its fsyncs wait
 *   behind them) and hide from the throttle that the device is slower.
 * The base RTT is the lowest RTT seen for I/Os of the same kind and size
 * (reads and writes apart, sizes by powers of two: a 1 MiB write takes
 * longer than a 4 KiB one with no queue at all), over the last 10 to 20
 * s (two 10 s windows: a server that got slower is believed within 20 s),
 * and forgotten when the server comes back after a loss.  The window grows
 * only in rounds in which it was full (an I/O waited for room), starts at
 * 256 KiB and stays within [256 KiB, 1 GiB]; one I/O may always be in flight, however large.  The floor: on a
 * server bound by its CPU (nbdkit on the same machine) small I/Os queue
 * in its scheduler at any depth, and Vegas would shrink to a few I/Os;
 * 64 of 4 KiB keep its batching (nbdkit's threads, our one poll for many
 * replies) at work, at a millisecond of RTT, and are nothing to a slow
 * server (4 I/Os of 64 KiB).  Why Vegas and not BBR or AIMD: an NBD server
 * drops nothing, so AIMD's loss signal never comes (the window would grow
 * until the engine's queue ran out and the server's queue held it all);
 * BBR's window (gain x max rate x min RTT) keeps its own queue and needs
 * probing phases to drain it and learn the RTT again; Vegas holds a small
 * queue by construction and needs only RTTs, which a block device's
 * requests give on every completion.
 * The engine's queue depth for this backend is large (256), so that the
 * window and not the engine's bio pool limits; I/Os beyond the window
 * wait here, reads ahead of writes (a reader waits; the engine never has
 * two overlapping I/Os in flight, so the order between them is free).
 *
 * Faults.  When a connection dies (an error, the server gone, no reply
 * within timeout=), libnbd fails its commands in flight: their I/Os
 * complete with EIO and the engine's policy takes over (on_error=retry:
 * the pages stay dirty, at risk, and are retried with backoff;
 * on_error=drop: counted lost).  The connection is made again in the
 * background, 100 ms after the loss, then waiting twice as long after
 * each failure up to 5 s.  While no connection is up, submit() refuses
 * I/Os with EIO at once (those queued when the last one went are failed
 * so too), and flush() fails with EIO.  Writes completed on
 * a connection that died before a flush covered them may be lost with
 * the server's cache: the next flush then fails with EIO, once.
 *
 * Threads.  One completion thread per backend does all of libnbd's work:
 * it polls the connections' sockets (as nbd_aio_get_direction says) and
 * an eventfd that submitters write when they queue work while it sleeps,
 * moves queued I/Os into the window, issues commands, and completes
 * I/Os as a batch (wbc_io_complete_batch) once libnbd's callbacks (which
 * run on this thread with libnbd's handle lock held: they only note
 * results) have seen all their commands.  submit() and flush() take
 * lock, queue and wake it; no lock of ours is held around libnbd calls
 * or completions.
 */
#include "backends.h"

#include <fcntl.h>
#include <libnbd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define NBD_MAX_CONNS 16
#define NBD_DEFAULT_CONNS 4
#define NBD_QUEUE_DEPTH 256u            /* caps.queue_depth: the window limits */
#define NBD_DEFAULT_MAX_IO (1u << 20)
#define NBD_SAFE_MAX_CMD (32u << 20)    /* the protocol's largest without a limit told */
#define NBD_DEFAULT_TIMEOUT_S 30.0
#define MS_NS 1000000ull
#define RECONNECT_MIN_NS (100 * MS_NS)
#define RECONNECT_MAX_NS (5000 * MS_NS)
#define MAX_RUNS 8                      /* commands per I/O, else one copied */
#define COMPLETE_BATCH 64
#define TAKE_BATCH 64

enum { C_DOWN, C_CONNECTING, C_UP };

struct nbe;
struct nbd_req;
struct nbd_flushreq;

/* The connector thread's state.  It may outlive the backend: a close does
 * not wait for a name's resolution (a server whose name no resolver
 * answers for: libc's resolver tries for tens of seconds, and a close
 * joined the thread that long).  The backend and the thread each hold a
 * reference; the last to let go frees it, and any handle it holds. */
struct nbd_connector {
	pthread_mutex_t lock;
	pthread_cond_t cond;        /* want set, or stop */
	uint32_t want;              /* a bit per connection to connect */
	bool stop;
	bool busy;                  /* connecting: lock not held */
	unsigned refs;
	char *uri;
	int efd;                    /* the backend's eventfd, dup'd: wakes it */
	/* per connection: done, and its handle (NULL: the attempt failed) */
	bool connected[NBD_MAX_CONNS];
	struct nbd_handle *connected_h[NBD_MAX_CONNS];
};

struct nbd_conn {
	struct nbe *b;
	struct nbd_handle *h;
	int state;                  /* C_* */
	bool was_up;                /* up before: coming up again is a reconnect */
	uint64_t retry_at_ns;       /* C_DOWN: next attempt */
	uint64_t backoff_ns;        /* the wait after the next failure */
	/* C_CONNECTING, h NULL: the connector thread starts the connect
	 * (struct nbd_connector's connected[], connected_h[]) */
	uint64_t connect_ns;        /* C_CONNECTING: since */
	uint64_t inflight_bytes;
	struct list_head cmds;      /* commands in flight, oldest first */
	uint64_t last_write_gen;    /* generation of its last write completed */
};

/* One NBD command: part of an I/O (req), or a flush (flush). */
struct nbd_cmd {
	struct list_head node;      /* conn->cmds */
	struct nbd_conn *conn;
	struct nbd_req *req;
	struct nbd_flushreq *flush;
	uint64_t sent_ns;
	void *buf;                  /* set up before the I/O's commands are sent */
	uint64_t off;
	uint32_t len;
	bool write;
};

struct nbd_req {
	struct wbc_io *io;
	struct nbd_req *next;       /* the done list */
	uint64_t sent_ns;
	size_t len;                 /* bytes its commands cover */
	void *bounce;               /* the copy sent as one command, or NULL */
	unsigned ncmds, left;       /* commands; not yet completed */
	int err;                    /* the first error */
	struct nbd_cmd cmd[];
};

struct nbd_flushreq {
	struct nbd_flushreq *next;
	struct nbd_cmd cmd;
	uint64_t gen;               /* writes completed before it was sent */
	int err;
	bool done;                  /* lock: the caller may return */
};

struct nbe {
	char *uri;
	uint64_t size;              /* the export's */
	/* the file's: the size cut to the server's minimum block size (the
	 * last, partial block can be neither read nor written alone) */
	uint64_t usable;
	bool can_flush, can_fua, multi_conn, fua;
	size_t max_io, align;
	size_t cmd_max;             /* the server's maximum block size: a hard limit */
	unsigned nconns;
	unsigned fixed;             /* window=fixed:N; 0: adaptive */
	uint64_t timeout_ns;        /* 0: none */
	struct nbd_conn conns[NBD_MAX_CONNS];
	int efd;
	pthread_t thread;
	/* The connector thread connects what went down (C_CONNECTING), off
	 * the completion thread: libnbd resolves a host name with a blocking
	 * getaddrinfo() as it starts a connect, which stalled every other
	 * connection's replies and timers for as long as the resolver
	 * took. */
	pthread_t connector;
	struct nbd_connector *k;    /* NULL: no connector thread */

	pthread_mutex_t lock;       /* the queues and flags below */
	pthread_cond_t flush_cond;
	/* I/Os waiting for the window, linked through backend_data[0] */
	struct remote_queue q;        /* waiting for room in the window */
	struct nbd_flushreq *flushq;
	unsigned nup;               /* connections up */
	bool sleeping;              /* the thread waits in poll: wake it */
	bool stop;

	/* the completion thread's own */
	struct nbd_req *done;
	struct nbd_flushreq *flush_done;
	struct wbc_io *failed_head; /* completed without a request (no memory) */
	uint64_t write_gen, flushed_gen;
	uint64_t failed_gen;        /* writes up to it: a failed flush told so */
	bool lost_unflushed;
	struct vegas_window win;   /* congestion control (window.c) */

	/* for stats(), from any thread */
	_Atomic uint64_t st_window, st_inflight, st_rtt, st_base, st_reconnects;
	atomic_uint st_up;
};

static const struct wbc_backend_ops nbd_ops;

/* Writes go with FUA (fua=1 and the server offers it): a completed
 * write is durable, no flush needed, none lost with the connection. */
static bool writes_fua(const struct nbe *b)
{
	return b->fua && b->can_fua;
}

/* ------------------------------------------------------------------ */
/* congestion control                                                   */

static void cc_publish(struct nbe *b)
{
	atomic_store_explicit(&b->st_window, window_bytes(&b->win), memory_order_relaxed);
	atomic_store_explicit(&b->st_rtt, (uint64_t)b->win.srtt, memory_order_relaxed);
	atomic_store_explicit(&b->st_base, (uint64_t)b->win.sbase, memory_order_relaxed);
}

/* A fresh start when the server comes back (it may be another one, or
 * the same on another path). */
static void cc_reset(struct nbe *b, uint64_t now)
{
	window_reset(&b->win, now);
	cc_publish(b);
}

/* A completed I/O's round trip. */
static void cc_sample(struct nbe *b, const struct nbd_req *r, uint64_t now)
{
	window_sample(&b->win, r->io->op == WBC_IO_WRITE, r->len, r->sent_ns, now);
	cc_publish(b);
}

/* ------------------------------------------------------------------ */
/* commands and their completions (the completion thread)               */

static bool handle_alive(struct nbd_handle *h)
{
	return !nbd_aio_is_dead(h) && !nbd_aio_is_closed(h);
}

static bool handle_ready(struct nbd_handle *h)
{
	return nbd_aio_is_ready(h) || nbd_aio_is_processing(h);
}

static void push_done(struct nbe *b, struct nbd_req *r)
{
	r->next = b->done;
	b->done = r;
}

/* libnbd's errno of a failed command as ours: a connection gone is EIO. */
static int cmd_error(int error)
{
	return error == ENOTCONN || error == ECONNRESET || error == EPIPE || !error ? -EIO : -error;
}

/* A command is done: @error is its errno, 0 for success. */
static void cmd_finish(struct nbd_cmd *cmd, int error)
{
	struct nbd_conn *conn = cmd->conn;
	struct nbe *b = conn->b;
	list_del_init(&cmd->node);
	conn->inflight_bytes -= cmd->len;
	if (cmd->flush) {
		struct nbd_flushreq *f = cmd->flush;
		if (error) {
			f->err = cmd_error(error);
			b->failed_gen = WBC_MAX(b->failed_gen, f->gen);
		} else {
			b->flushed_gen = WBC_MAX(b->flushed_gen, f->gen);
			if (b->lost_unflushed) {
				/* writes a dead connection had not flushed */
				f->err = -EIO;
				b->lost_unflushed = false;
			}
		}
		f->next = b->flush_done;
		b->flush_done = f;
		return;
	}
	struct nbd_req *r = cmd->req;
	if (error && !r->err)
		r->err = cmd_error(error);
	else if (!error && cmd->write)
		conn->last_write_gen = ++b->write_gen;
	if (--r->left == 0)
		push_done(b, r);
}

/* libnbd's completion callback: with its handle lock held, on our thread. */
static int cmd_cb(void *user_data, int *error)
{
	cmd_finish(user_data, *error);
	return 1;   /* retire the command */
}

/* The up connection with the fewest bytes in flight, or NULL.  Not one
 * whose handle died since it was last looked at (a send that killed it
 * aborted its commands: it looked the least loaded, and every command
 * after it would have gone there to fail while the others were up). */
static struct nbd_conn *pick_conn(struct nbe *b)
{
	struct nbd_conn *best = NULL;
	for (unsigned i = 0; i < b->nconns; i++) {
		struct nbd_conn *c = &b->conns[i];
		if (c->state == C_UP && (!best || c->inflight_bytes < best->inflight_bytes) &&
		    handle_alive(c->h))
			best = c;
	}
	return best;
}

/* Send one command (set up but for its connection); on failure it is
 * finished at once. */
static void send_cmd(struct nbe *b, struct nbd_cmd *cmd, void *buf, uint64_t off, uint64_t now)
{
	struct nbd_conn *conn = pick_conn(b);
	if (!conn) {
		/* no connection: finish it on the list of a connection that is
		 * not up (every command belongs to one) */
		cmd->conn = &b->conns[0];
		list_add_tail(&cmd->node, &cmd->conn->cmds);
		cmd->conn->inflight_bytes += cmd->len;
		cmd_finish(cmd, ENOTCONN);
		return;
	}
	cmd->conn = conn;
	cmd->sent_ns = now;
	list_add_tail(&cmd->node, &conn->cmds);
	conn->inflight_bytes += cmd->len;
	nbd_completion_callback cb = { .callback = cmd_cb, .user_data = cmd };
	int64_t cookie;
	if (cmd->flush)
		cookie = nbd_aio_flush(conn->h, cb, 0);
	else if (cmd->write)
		cookie = nbd_aio_pwrite(conn->h, buf, cmd->len, off, cb,
					writes_fua(b) ? LIBNBD_CMD_FLAG_FUA : 0);
	else
		cookie = nbd_aio_pread(conn->h, buf, cmd->len, off, cb, 0);
	if (cookie == -1) {
		/* not queued: libnbd calls no callback.  A handle that died
		 * (in an earlier send) refuses with EINVAL: the connection's
		 * loss, told as such */
		int e = nbd_get_errno();
		cmd_finish(cmd, !handle_alive(conn->h) || !e ? ENOTCONN : e);
	}
}

static void fail_io(struct nbe *b, struct wbc_io *io, int err)
{
	io->res = err;
	io->backend_data[0] = b->failed_head;
	b->failed_head = io;
}

/* The commands for the first @len bytes of @iov: one per run contiguous
 * in memory, cut at @cmd_max bytes (the server's maximum block size, a
 * hard limit: the engine makes an I/O of at least a page, which may be
 * more).  Sets up @cmds (for @r, at @off) where not NULL; the count. */
static unsigned plan_cmds(const struct iovec *iov, int iovcnt, size_t len, size_t cmd_max,
			  bool write, struct nbd_req *r, uint64_t off, struct nbd_cmd *cmds)
{
	unsigned k = 0;
	const char *end = NULL;
	size_t cur = 0;
	for (int i = 0; i < iovcnt && len; i++) {
		char *p = iov[i].iov_base;
		size_t l = WBC_MIN(iov[i].iov_len, len);
		len -= l;
		while (l) {
			if (!k || p != end || cur == cmd_max) {
				if (cmds) {
					cmds[k] = (struct nbd_cmd){ .req = r, .write = write, .buf = p,
								    .off = off };
					list_init(&cmds[k].node);
				}
				k++;
				cur = 0;
			}
			size_t take = WBC_MIN(l, cmd_max - cur);
			if (cmds)
				cmds[k - 1].len += (uint32_t)take;
			cur += take;
			p += take;
			off += take;
			l -= take;
			end = p;
		}
	}
	return k;
}

/* Start @io (taken into the window: counted in flight). */
static void issue_io(struct nbe *b, struct wbc_io *io, uint64_t now)
{
	bool write = io->op == WBC_IO_WRITE;
	size_t len = io->len;
	int err = 0;
	/* the file ends at usable: the export's partial last block can be
	 * neither read nor written (the server refuses a request there) */
	if (!write)
		len = io->off >= b->usable ? 0 : (size_t)WBC_MIN((uint64_t)len, b->usable - io->off);
	else if (io->off > b->usable || io->len > b->usable - io->off)
		err = -ENOSPC;
	if (err)
		len = 0;
	/* runs of the iovec contiguous in memory, over its first len bytes */
	unsigned runs = plan_cmds(io->iov, io->iovcnt, len, SIZE_MAX, write, NULL, 0, NULL);
	bool bounce = runs > MAX_RUNS;
	/* a copy: one command, or several of cmd_max bytes; else a command
	 * per run, a run longer than cmd_max cut (not copied for that) */
	unsigned ncmds = bounce ? (unsigned)((len + b->cmd_max - 1) / b->cmd_max) :
				  plan_cmds(io->iov, io->iovcnt, len, b->cmd_max, write, NULL, 0, NULL);
	struct nbd_req *r = calloc(1, sizeof(*r) + ncmds * sizeof(struct nbd_cmd));
	if (r && bounce && !(r->bounce = malloc(len))) {
		free(r);
		r = NULL;
	}
	if (!r) {
		fail_io(b, io, -ENOMEM);
		return;
	}
	r->io = io;
	r->len = len;
	r->err = err;
	r->sent_ns = now;
	r->ncmds = r->left = ncmds;
	io->backend_data[1] = r;
	if (!ncmds) {
		push_done(b, r);
		return;
	}
	if (bounce) {
		if (write) {
			size_t at = 0;
			for (int i = 0; i < io->iovcnt && at < len; i++) {
				size_t l = WBC_MIN(io->iov[i].iov_len, len - at);
				memcpy((char *)r->bounce + at, io->iov[i].iov_base, l);
				at += l;
			}
		}
		struct iovec one = { .iov_base = r->bounce, .iov_len = len };
		plan_cmds(&one, 1, len, b->cmd_max, write, r, io->off, r->cmd);
	} else {
		plan_cmds(io->iov, io->iovcnt, len, b->cmd_max, write, r, io->off, r->cmd);
	}
	/* the commands are set up first, then sent: a callback may run
	 * inside a send (a connection dying) and finish them all */
	for (unsigned i = 0; i < ncmds; i++)
		send_cmd(b, &r->cmd[i], r->cmd[i].buf, r->cmd[i].off, now);
}

/* Hand what completed to the engine (no lock held), and wake flushers. */
static void finish(struct nbe *b)
{
	uint64_t now = wbc_now_ns();
	struct wbc_io *batch[COMPLETE_BATCH];
	unsigned n = 0;
	struct nbd_req *r = b->done;
	b->done = NULL;
	struct wbc_io *failed = b->failed_head;
	b->failed_head = NULL;
	while (r || failed) {
		struct wbc_io *io;
		if (r) {
			struct nbd_req *next = r->next;
			io = r->io;
			if (!r->err && r->ncmds)
				cc_sample(b, r, now);
			if (r->bounce && !r->err && io->op == WBC_IO_READ) {
				size_t at = 0;
				for (int i = 0; i < io->iovcnt && at < r->len; i++) {
					size_t l = WBC_MIN(io->iov[i].iov_len, r->len - at);
					memcpy(io->iov[i].iov_base, (char *)r->bounce + at, l);
					at += l;
				}
			}
			io->res = r->err ? r->err : io->op == WBC_IO_READ ? (ssize_t)r->len :
				  (ssize_t)io->len;
			free(r->bounce);
			free(r);
			r = next;
		} else {
			io = failed;
			failed = io->backend_data[0];
		}
		io->backend_data[0] = io->backend_data[1] = NULL;
		window_put(&b->win, io->len);
		batch[n++] = io;
		if (n == COMPLETE_BATCH) {
			atomic_store_explicit(&b->st_inflight, b->win.inflight_bytes, memory_order_relaxed);
			wbc_io_complete_batch(batch, n);
			n = 0;
		}
	}
	atomic_store_explicit(&b->st_inflight, b->win.inflight_bytes, memory_order_relaxed);
	if (n)
		wbc_io_complete_batch(batch, n);
	if (b->flush_done) {
		pthread_mutex_lock(&b->lock);
		for (struct nbd_flushreq *f = b->flush_done; f; f = f->next)
			f->done = true;
		b->flush_done = NULL;
		pthread_cond_broadcast(&b->flush_cond);
		pthread_mutex_unlock(&b->lock);
	}
}

/* ------------------------------------------------------------------ */
/* connections (the completion thread)                                  */

/* Take every queued I/O (lock held): none will be sent. */
static struct wbc_io *take_all_locked(struct nbe *b)
{
	assert_held(&b->lock);
	return rqueue_take_all(&b->q);
}

static void conn_down(struct nbe *b, struct nbd_conn *c, uint64_t now, const char *why)
{
	bool was_up = c->state == C_UP;
	if (c->h) {
		nbd_close(c->h);   /* a dead handle's commands were failed already */
		c->h = NULL;
	}
	/* anything libnbd did not call back (a handle closed while alive) */
	while (!list_empty(&c->cmds))
		cmd_finish(container_of(c->cmds.next, struct nbd_cmd, node), ENOTCONN);
	/* its writes no flush covered, unless a flush that failed told of
	 * them (its own, failed just above: told twice, the next good flush
	 * failed too) */
	if (was_up && c->last_write_gen > WBC_MAX(b->flushed_gen, b->failed_gen) &&
	    b->can_flush && !writes_fua(b))
		b->lost_unflushed = true;
	c->state = C_DOWN;
	c->retry_at_ns = now + c->backoff_ns;
	c->backoff_ns = WBC_MIN(c->backoff_ns * 2, RECONNECT_MAX_NS);
	if (!was_up)
		return;
	pthread_mutex_lock(&b->lock);
	unsigned up = --b->nup;
	struct wbc_io *orphans = up ? NULL : take_all_locked(b);
	pthread_mutex_unlock(&b->lock);
	atomic_store_explicit(&b->st_up, up, memory_order_relaxed);
	/* nothing can send what waited: the engine gets it back */
	while (orphans) {
		struct wbc_io *next = orphans->backend_data[0];
		window_take(&b->win, orphans->len);   /* put back in finish() */
		fail_io(b, orphans, -EIO);
		orphans = next;
	}
	if (!up)
		fprintf(stderr, "wbcache: nbd: lost %s (%s); reconnecting\n", b->uri,
			why ? why : "connection closed");
}

static void connect_failed(struct nbe *b, struct nbd_conn *c, uint64_t now)
{
	conn_down(b, c, now, NULL);
}

/* Hand @c to the connector thread; conn_timers takes its handle. */
static void start_connect(struct nbe *b, struct nbd_conn *c, uint64_t now)
{
	c->state = C_CONNECTING;
	c->connect_ns = now;   /* timeout= counts the name's resolution too */
	struct nbd_connector *k = b->k;
	pthread_mutex_lock(&k->lock);
	k->want |= 1u << (c - b->conns);
	pthread_cond_signal(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

/* Whether @h shows the export connection 0 found at open, as it was: its
 * size, several connections, and what the writes rely on (FUA where they
 * use it, a flush where fsync needs one, writable); else false and why. */
static bool same_export(struct nbe *b, struct nbd_handle *h, char *why, size_t len)
{
	int64_t size = nbd_get_size(h);
	bool fua_gone = writes_fua(b) && nbd_can_fua(h) != 1;
	bool flush_changed = (nbd_can_flush(h) == 1) != b->can_flush;
	bool ro = nbd_is_read_only(h) == 1;
	/* a maximum block size below the largest command is met by cutting
	 * commands smaller (adopt_block_max), down to one block of the
	 * alignment the engine was given at add: not below it; and a
	 * minimum that alignment is not a multiple of would refuse the
	 * engine's I/Os (the server's EINVAL, libnbd's own check).  A device
	 * added with none (a server that said no block size) writes whole
	 * cache pages, 4 KiB by default: a minimum up to that is taken (a
	 * direct handle's smaller I/O is refused by the server then) */
	int64_t bmin = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
	int64_t bmax = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
	size_t unit = b->align ? b->align : 1;
	bool blocks_changed = (bmax > 0 && (uint64_t)bmax < unit) ||
			      (bmin > 1 && (b->align ? unit % (uint64_t)bmin != 0 : bmin > 4096));
	if (size == (int64_t)b->size && (b->nconns < 2 || nbd_can_multi_conn(h) == 1) &&
	    !fua_gone && !flush_changed && !ro && !blocks_changed)
		return true;
	snprintf(why, len, "size %lld, was %llu; multi-conn %d; FUA %s; flush %s; %s; "
		 "block sizes %lld..%lld%s", (long long)size, (unsigned long long)b->size,
		 nbd_can_multi_conn(h), fua_gone ? "gone" : "as before",
		 flush_changed ? "changed" : "as before", ro ? "read-only" : "writable",
		 (long long)bmin, (long long)bmax,
		 blocks_changed ? " (below the I/Os' alignment)" : "");
	return false;
}

/* A server (the same export, same_export said so) whose maximum block
 * size is below the largest command sent: commands are cut to it from
 * now on (the completion thread's; at add, before it runs). */
static void adopt_block_max(struct nbe *b, struct nbd_handle *h)
{
	int64_t bmax = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
	size_t unit = b->align ? b->align : 1;
	if (bmax > 0 && (uint64_t)bmax < b->cmd_max)
		b->cmd_max = WBC_MAX((size_t)bmax / unit * unit, unit);
}

static void conn_ready(struct nbe *b, struct nbd_conn *c, uint64_t now)
{
	char why[200];
	if (!same_export(b, c->h, why, sizeof(why))) {
		/* not the export we had (or it no longer takes several
		 * connections): keep trying, never write to it */
		if (!c->was_up || c == &b->conns[0])
			fprintf(stderr, "wbcache: nbd: %s: the export changed (%s); not using it\n",
				b->uri, why);
		c->was_up = true;
		connect_failed(b, c, now);
		return;
	}
	adopt_block_max(b, c->h);
	c->state = C_UP;
	c->backoff_ns = RECONNECT_MIN_NS;
	pthread_mutex_lock(&b->lock);
	unsigned up = ++b->nup;
	pthread_mutex_unlock(&b->lock);
	atomic_store_explicit(&b->st_up, up, memory_order_relaxed);
	if (c->was_up)
		atomic_fetch_add_explicit(&b->st_reconnects, 1, memory_order_relaxed);
	if (up == 1) {
		cc_reset(b, now);
		if (c->was_up)
			fprintf(stderr, "wbcache: nbd: reconnected to %s\n", b->uri);
	}
	c->was_up = true;
}


/* Connection timers: attempts due, attempts and commands past timeout=;
 * and connections that died in a send (the handle is dead, its socket
 * closed: no poll would tell). */
static void conn_timers(struct nbe *b, uint64_t now)
{
	for (unsigned i = 0; i < b->nconns; i++) {
		struct nbd_conn *c = &b->conns[i];
		if (c->state == C_UP && !handle_alive(c->h))
			conn_down(b, c, now, nbd_get_error());
		if (c->state == C_DOWN && now >= c->retry_at_ns)
			start_connect(b, c, now);
		if (c->state == C_CONNECTING && !c->h) {
			/* the connector's handle, its connect started */
			struct nbd_connector *k = b->k;
			pthread_mutex_lock(&k->lock);
			bool done = k->connected[i];
			struct nbd_handle *h = k->connected_h[i];
			k->connected[i] = false;
			k->connected_h[i] = NULL;
			pthread_mutex_unlock(&k->lock);
			if (done && h)
				c->h = h;
			else if (done)
				connect_failed(b, c, now);
		}
		if (c->state == C_CONNECTING && c->h) {
			if (handle_ready(c->h))
				conn_ready(b, c, now);
			else if (!handle_alive(c->h) ||
				 (b->timeout_ns && now - c->connect_ns >= b->timeout_ns))
				connect_failed(b, c, now);
		}
		if (c->state == C_UP && b->timeout_ns && !list_empty(&c->cmds)) {
			struct nbd_cmd *old = container_of(c->cmds.next, struct nbd_cmd, node);
			if (now - old->sent_ns >= b->timeout_ns)
				conn_down(b, c, now, "no reply within timeout=");
		}
	}
}

/* Milliseconds until the next connection timer (-1: none). */
static int timer_ms(struct nbe *b, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	for (unsigned i = 0; i < b->nconns; i++) {
		struct nbd_conn *c = &b->conns[i];
		if (c->state == C_DOWN)
			next = WBC_MIN(next, c->retry_at_ns);
		else if (b->timeout_ns && c->state == C_CONNECTING && c->h)
			next = WBC_MIN(next, c->connect_ns + b->timeout_ns);
		else if (b->timeout_ns && c->state == C_UP && !list_empty(&c->cmds))
			next = WBC_MIN(next, container_of(c->cmds.next, struct nbd_cmd, node)->sent_ns +
					     b->timeout_ns);
	}
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)WBC_MIN((next - now + MS_NS - 1) / MS_NS, 60000u);
}

/* ------------------------------------------------------------------ */
/* the completion thread                                                */


/* Tell libnbd what poll() saw on its socket: a hang-up or an error goes to
 * the direction it waits in (a read notified while it connects is
 * "invalid in state CONNECT.START", which hid the connection's own
 * error).  0, or -1 with libnbd's error. */
static int notify_events(struct nbd_handle *h, short ev)
{
	unsigned dir = nbd_aio_get_direction(h);
	bool hup = ev & (POLLHUP | POLLERR);
	int rc = 0;
	if ((ev & POLLIN) || (hup && (dir & LIBNBD_AIO_DIRECTION_READ)))
		rc = nbd_aio_notify_read(h);
	if (rc != -1 && ((ev & POLLOUT) || (hup && (dir & LIBNBD_AIO_DIRECTION_WRITE))) &&
	    handle_alive(h))
		rc = nbd_aio_notify_write(h);
	return rc;
}

/* Move queued work into the window and send it; true when asked to stop. */
static bool pull_work(struct nbe *b, uint64_t now)
{
	for (;;) {
		struct wbc_io *take[TAKE_BATCH];
		pthread_mutex_lock(&b->lock);
		b->sleeping = false;
		bool stop = b->stop;
		struct nbd_flushreq *flushes = b->flushq;
		b->flushq = NULL;
		unsigned n = rqueue_take(&b->q, &b->win, take, TAKE_BATCH);
		pthread_mutex_unlock(&b->lock);
		atomic_store_explicit(&b->st_inflight, b->win.inflight_bytes, memory_order_relaxed);
		while (flushes) {
			struct nbd_flushreq *f = flushes;
			flushes = f->next;
			f->gen = b->write_gen;
			f->cmd = (struct nbd_cmd){ .flush = f };
			list_init(&f->cmd.node);
			send_cmd(b, &f->cmd, NULL, 0, now);
		}
		for (unsigned i = 0; i < n; i++)
			issue_io(b, take[i], now);
		if (stop)
			return true;
		if (n < TAKE_BATCH)
			return false;
	}
}

static void *nbd_main(void *arg)
{
	struct nbe *b = arg;
	pthread_setname_np(pthread_self(), "wbc-nbd");
	struct pollfd pfd[1 + NBD_MAX_CONNS];
	struct nbd_conn *polled[1 + NBD_MAX_CONNS];
	for (;;) {
		uint64_t now = wbc_now_ns();
		if (pull_work(b, now))
			break;
		finish(b);
		conn_timers(b, now);
		finish(b);

		unsigned np = 1;
		pfd[0] = (struct pollfd){ .fd = b->efd, .events = POLLIN };
		for (unsigned i = 0; i < b->nconns; i++) {
			struct nbd_conn *c = &b->conns[i];
			if (!c->h)
				continue;   /* down, or the connector's */
			int fd = nbd_aio_get_fd(c->h);
			if (fd < 0)
				continue;
			unsigned dir = nbd_aio_get_direction(c->h);
			pfd[np] = (struct pollfd){
				.fd = fd,
				.events = (short)(((dir & LIBNBD_AIO_DIRECTION_READ) ? POLLIN : 0) |
						  ((dir & LIBNBD_AIO_DIRECTION_WRITE) ? POLLOUT : 0)),
			};
			polled[np++] = c;
		}
		int ms = timer_ms(b, now);
		pthread_mutex_lock(&b->lock);
		bool ready = b->stop || b->flushq || b->done || b->failed_head ||
			     (rqueue_peek(&b->q) && window_fits(&b->win, rqueue_peek(&b->q)->len));
		if (ready)
			ms = 0;
		else
			b->sleeping = true;
		pthread_mutex_unlock(&b->lock);
		int r = poll(pfd, np, ms);
		if (r < 0)
			continue;   /* EINTR */
		if (pfd[0].revents) {
			uint64_t v;
			if (read(b->efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: another read took it */
			}
		}
		now = wbc_now_ns();
		for (unsigned i = 1; i < np; i++) {
			struct nbd_conn *c = polled[i];
			short ev = pfd[i].revents;
			if (!ev || !c->h)
				continue;
			int rc = notify_events(c->h, ev);
			bool hup = (ev & (POLLHUP | POLLERR)) && !(ev & POLLIN);
			if (c->state == C_CONNECTING) {
				if (handle_ready(c->h))
					conn_ready(b, c, now);
				else if (rc == -1 || !handle_alive(c->h) || hup)
					connect_failed(b, c, now);
			} else if (rc == -1 || !handle_alive(c->h) || hup) {
				conn_down(b, c, now, nbd_get_error());
			}
		}
		finish(b);
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* the operations                                                       */

/* Wake the thread if it sleeps (lock held); write the eventfd after
 * unlocking when this returns true. */
static bool kick_locked(struct nbe *b)
{
	assert_held(&b->lock);
	bool k = b->sleeping;
	b->sleeping = false;
	return k;
}

static void kick(struct nbe *b)
{
	uint64_t one = 1;
	if (write(b->efd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake anyway */
	}
}

static int nbd_submit(void *ctx, struct wbc_io *const *ios, unsigned n, unsigned *queued)
{
	struct nbe *b = ctx;
	pthread_mutex_lock(&b->lock);
	if (!b->nup) {
		pthread_mutex_unlock(&b->lock);
		*queued = 0;
		return -EIO;   /* no server: the engine retries later */
	}
	for (unsigned i = 0; i < n; i++)
		rqueue_add(&b->q, ios[i]);
	bool k = kick_locked(b);
	pthread_mutex_unlock(&b->lock);
	if (k)
		kick(b);
	*queued = n;
	return 0;
}

static int nbd_flush_op(void *ctx, void *file, unsigned flags)
{
	(void)file;
	(void)flags;
	struct nbe *b = ctx;
	if (!b->can_flush || writes_fua(b))
		return 0;   /* completed writes are durable already */
	struct nbd_flushreq f = { .done = false };
	pthread_mutex_lock(&b->lock);
	if (!b->nup) {
		pthread_mutex_unlock(&b->lock);
		return -EIO;
	}
	f.next = b->flushq;
	b->flushq = &f;
	bool k = kick_locked(b);
	pthread_mutex_unlock(&b->lock);
	if (k)
		kick(b);
	pthread_mutex_lock(&b->lock);
	while (!f.done)
		pthread_cond_wait(&b->flush_cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	return f.err;
}

static void nbd_caps(void *ctx, struct wbc_backend_caps *caps)
{
	struct nbe *b = ctx;
	caps->max_io = b->max_io;
	caps->queue_depth = WBC_MAX(NBD_QUEUE_DEPTH, b->fixed);
	caps->align = b->align;
	caps->flags = WBC_BACKEND_ONE_FILE;
	/* the export's size: a write past it is refused when made, not
	 * cached to fail at writeback (an empty export is refused at add) */
	caps->max_file_size = b->usable;
}

static int nbd_open(void *ctx, const char *name, unsigned flags, void **file, uint64_t *size)
{
	(void)flags;
	struct nbe *b = ctx;
	if (*name)
		return -ENOENT;
	*file = b;
	*size = b->usable;
	return 0;
}

static void nbd_close_file(void *ctx, void *file)
{
	(void)ctx;
	(void)file;
}

static int nbd_resize(void *ctx, void *file, uint64_t size)
{
	(void)file;
	struct nbe *b = ctx;
	/* a fixed export: neither cut (its bytes would read back when
	 * extended again) nor extended */
	return size == b->usable ? 0 : size > b->usable ? -EFBIG : -EINVAL;
}

static void nbd_stats(void *ctx, struct wbc_backend_stats *st)
{
	struct nbe *b = ctx;
	st->window_bytes = atomic_load_explicit(&b->st_window, memory_order_relaxed);
	st->inflight_bytes = atomic_load_explicit(&b->st_inflight, memory_order_relaxed);
	st->rtt_ns = atomic_load_explicit(&b->st_rtt, memory_order_relaxed);
	st->min_rtt_ns = atomic_load_explicit(&b->st_base, memory_order_relaxed);
	st->reconnects = atomic_load_explicit(&b->st_reconnects, memory_order_relaxed);
	st->connected = atomic_load_explicit(&b->st_up, memory_order_relaxed);
	st->conns = b->nconns;
	pthread_mutex_lock(&b->lock);
	st->queued_bytes = b->q.bytes;
	pthread_mutex_unlock(&b->lock);
}

/* Drop a reference to @k (its lock held; released): the last frees it. */
static void connector_put(struct nbd_connector *k)
{
	bool last = --k->refs == 0;
	pthread_mutex_unlock(&k->lock);
	if (!last)
		return;
	for (unsigned i = 0; i < NBD_MAX_CONNS; i++)
		if (k->connected_h[i])
			nbd_close(k->connected_h[i]);   /* connected as it closed */
	if (k->efd >= 0)
		close(k->efd);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->cond);
	free(k->uri);
	free(k);
}

/* Stop the connector thread: joined when idle, left to finish the
 * connect it is in (a name's resolution) on its own, detached. */
static void stop_connector(struct nbe *b)
{
	struct nbd_connector *k = b->k;
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->stop = true;
	pthread_cond_signal(&k->cond);
	bool busy = k->busy;
	pthread_mutex_unlock(&k->lock);
	if (busy)
		pthread_detach(b->connector);
	else
		pthread_join(b->connector, NULL);
	pthread_mutex_lock(&k->lock);
	connector_put(k);
	b->k = NULL;
}

/* Free @b, its threads stopped (the completion thread joined first: it
 * hands connections to the connector). */
static void free_nbe(struct nbe *b)
{
	stop_connector(b);
	for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
		if (b->conns[i].h) {
			if (b->conns[i].state == C_UP)
				nbd_aio_disconnect(b->conns[i].h, 0);   /* tell the server */
			nbd_close(b->conns[i].h);
		}
	}
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->flush_cond);
	free(b->uri);
	free(b);
}

static void nbd_destroy(void *ctx)
{
	struct nbe *b = ctx;
	pthread_mutex_lock(&b->lock);
	b->stop = true;
	kick_locked(b);
	pthread_mutex_unlock(&b->lock);
	kick(b);
	pthread_join(b->thread, NULL);
	free_nbe(b);
}

static const struct wbc_backend_ops nbd_ops = {
	.size = sizeof(struct wbc_backend_ops),
	.name = "nbd",
	.caps = nbd_caps,
	.open = nbd_open,
	.close = nbd_close_file,
	.submit = nbd_submit,
	.flush = nbd_flush_op,
	.resize = nbd_resize,
	.destroy = nbd_destroy,
	.stats = nbd_stats,
};

/* ------------------------------------------------------------------ */
/* making one                                                           */

bool nbd_is_uri(const char *spec)
{
	/* a scheme of libnbd's: nbd, nbds, then +unix or +vsock, then "://" */
	if (strncmp(spec, "nbd", 3))
		return false;
	const char *p = spec + 3;
	if (*p == 's')
		p++;
	if (!strncmp(p, "+unix", 5))
		p += 5;
	else if (!strncmp(p, "+vsock", 6))
		p += 6;
	return !strncmp(p, "://", 3);
}

static int parse_opts(char *opts, struct nbe *b, unsigned *conns, char *err, size_t errlen)
{
	for (char *save = NULL, *kv = strtok_r(opts, ",", &save); kv;
	     kv = strtok_r(NULL, ",", &save)) {
		char *v = strchr(kv, '=');
		uint64_t n = 0;
		double secs = 0;   /* read below also when it did not parse */
		bool ok = v != NULL;
		if (ok)
			*v++ = '\0';
		if (!ok) {
			v = NULL;
		} else if (!strcmp(kv, "conns")) {
			ok = !wbc_parse_size(v, &n) && n >= 1 && n <= NBD_MAX_CONNS;
			*conns = (unsigned)n;
		} else if (!strcmp(kv, "window")) {
			if (!strcmp(v, "adaptive")) {
				b->fixed = 0;
			} else {
				ok = !strncmp(v, "fixed:", 6) && !wbc_parse_size(v + 6, &n) &&
				     n >= 1 && n <= 4096;
				b->fixed = (unsigned)n;
			}
		} else if (!strcmp(kv, "max_io")) {
			ok = !wbc_parse_size(v, &n) && n >= 4096 && n <= (32u << 20);
			b->max_io = (size_t)n;
		} else if (!strcmp(kv, "timeout")) {
			ok = !wbc_parse_time(v, &secs);
			b->timeout_ns = wbc_secs_to_ns(secs);
		} else if (!strcmp(kv, "fua")) {
			ok = !wbc_parse_size(v, &n) && n <= 1;
			b->fua = n;
		} else {
			ok = false;
		}
		if (!ok) {
			snprintf(err, errlen, "bad nbd option '%s%s%s' (conns=1..%d, "
				 "window=adaptive|fixed:1..4096, max_io=4K..32M, timeout=SECONDS, "
				 "fua=0|1)", kv, v ? "=" : "", v ? v : "", NBD_MAX_CONNS);
			return -EINVAL;
		}
	}
	return 0;
}

/* The query parameters of @b's URI: only those libnbd acts on (socket=,
 * tls-psk-file=, tls-certificates=), and the TLS ones only in a URI that
 * asks for TLS (nbds...): libnbd ignores a parameter it does not know,
 * and with local files allowed (new_handle) it takes a nbd:// URI's TLS
 * files and connects without TLS, so a misspelt name or a missing "s"
 * went unnoticed.  0, or -EINVAL with a message. */
static int check_uri(const struct nbe *b, char *err, size_t errlen)
{
	const char *p = strstr(b->uri, "://");
	if (!p)
		return 0;   /* libnbd says what is wrong */
	bool tls = !strncmp(b->uri, "nbds", 4);
	size_t end = strcspn(p, "#");
	const char *q = memchr(p, '?', end);
	if (!q)
		return 0;
	const char *qend = p + end;
	for (q++; q < qend;) {
		size_t n = strcspn(q, "&#");
		const char *eq = memchr(q, '=', n);
		size_t nl = eq ? (size_t)(eq - q) : n;
		if (n && !(nl == 6 && !strncmp(q, "socket", 6)) &&
		    !(nl == 12 && !strncmp(q, "tls-psk-file", 12)) &&
		    !(nl == 16 && !strncmp(q, "tls-certificates", 16))) {
			snprintf(err, errlen, "unknown URI parameter '%.*s' (socket=, "
				 "tls-psk-file=, tls-certificates=) in %s", (int)nl, q, b->uri);
			return -EINVAL;
		}
		if (n && !strncmp(q, "tls-", 4) && !tls) {
			snprintf(err, errlen, "%s: %.*s= without TLS (a URI of TLS begins "
				 "nbds: nbds://, nbds+unix://)", b->uri, (int)nl, q);
			return -EINVAL;
		}
		q += n + (q + n < qend);
	}
	return 0;
}

/* The parse step of nbd_backend_new: @copy (the spec, cut up) into @b's
 * URI (b->uri, set on success and by a failed check_uri) and options,
 * connecting nowhere.  0, or -errno with a message. */
static int parse_spec(struct nbe *b, char *copy, unsigned *conns, char *err, size_t errlen)
{
	char *opts = strchr(copy, ',');
	if (opts)
		*opts++ = '\0';
	int rc = opts ? parse_opts(opts, b, conns, err, errlen) : 0;
	if (!rc && !(b->uri = strdup(copy)))
		rc = -ENOMEM;
	if (!rc)
		rc = check_uri(b, err, errlen);
	return rc;
}

int nbd_spec_check(const char *spec, char *err, size_t errlen)
{
	struct nbe *b = calloc(1, sizeof(*b));
	char *copy = strdup(spec);
	unsigned conns = 0;
	int rc = b && copy ? parse_spec(b, copy, &conns, err, errlen) : -ENOMEM;
	if (b)
		free(b->uri);
	free(b);
	free(copy);
	return rc;
}

/* A handle for @b's URI, as every connection's: the URI may name local
 * files (tls-psk-file=, tls-certificates=): libnbd refuses them unless
 * told, and nbds:// could use no key or certificates of its own. */
static struct nbd_handle *new_handle(void)
{
	struct nbd_handle *h = nbd_create();
	if (h && nbd_set_uri_allow_local_file(h, true) == -1) {
		nbd_close(h);
		h = NULL;
	}
	return h;
}

/* Connect @h to @uri and wait for the handshake, at most timeout= (the
 * background reconnects keep the same bound): 0, or -errno with a
 * message. */
static int connect_sync(struct nbd_handle *h, const struct nbe *b, char *err, size_t errlen)
{
	uint64_t start = wbc_now_ns();
	if (nbd_aio_connect_uri(h, b->uri) == -1)
		goto failed;
	while (!handle_ready(h)) {
		if (!handle_alive(h))
			goto failed;
		uint64_t now = wbc_now_ns();
		int ms = -1;
		if (b->timeout_ns) {
			if (now - start >= b->timeout_ns) {
				snprintf(err, errlen, "cannot connect to %s: no answer within timeout=%g s",
					 b->uri, (double)b->timeout_ns / 1e9);
				return -ETIMEDOUT;
			}
			ms = (int)WBC_MIN((b->timeout_ns - (now - start) + MS_NS - 1) / MS_NS, 60000u);
		}
		unsigned dir = nbd_aio_get_direction(h);
		struct pollfd p = {
			.fd = nbd_aio_get_fd(h),
			.events = (short)(((dir & LIBNBD_AIO_DIRECTION_READ) ? POLLIN : 0) |
					  ((dir & LIBNBD_AIO_DIRECTION_WRITE) ? POLLOUT : 0)),
		};
		if (p.fd < 0)
			goto failed;
		int r = poll(&p, 1, ms);
		if (r < 0 && errno != EINTR) {
			snprintf(err, errlen, "cannot connect to %s: poll: %s", b->uri, strerror(errno));
			return -errno;
		}
		if (r <= 0)
			continue;
		if (notify_events(h, p.revents) == -1)
			goto failed;
	}
	return 0;
failed:;
	int e = nbd_get_errno();
	const char *why = nbd_get_error();
	snprintf(err, errlen, "cannot connect to %s: %s", b->uri,
		 why ? why : "the server closed the connection");
	return e > 0 ? -e : -EIO;
}

/* The connector thread: for each connection the completion thread hands
 * it (want), a handle whose connect has started (the server's name
 * resolved), handed back (connected, connected_h) with the completion
 * thread woken; that thread polls the handshake as before. */
static void *connector_main(void *arg)
{
	struct nbd_connector *k = arg;
	pthread_setname_np(pthread_self(), "wbc-nbd-conn");
	pthread_mutex_lock(&k->lock);
	for (;;) {
		while (!k->want && !k->stop)
			pthread_cond_wait(&k->cond, &k->lock);
		if (k->stop)
			break;
		unsigned i = (unsigned)__builtin_ctz(k->want);
		k->want &= ~(1u << i);
		k->busy = true;
		pthread_mutex_unlock(&k->lock);
		struct nbd_handle *h = new_handle();
		if (h && nbd_aio_connect_uri(h, k->uri) == -1) {
			nbd_close(h);
			h = NULL;
		}
		pthread_mutex_lock(&k->lock);
		k->busy = false;
		k->connected[i] = true;
		k->connected_h[i] = h;   /* closed at the end where not taken */
		pthread_mutex_unlock(&k->lock);
		uint64_t one = 1;
		if (write(k->efd, &one, sizeof(one)) < 0) {
			/* the counter is full: the thread is awake anyway */
		}
		pthread_mutex_lock(&k->lock);
	}
	connector_put(k);
	return NULL;
}

/* Start the connector thread (b->k): 0 or -errno. */
static int start_connector(struct nbe *b)
{
	struct nbd_connector *k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->efd = fcntl(b->efd, F_DUPFD_CLOEXEC, 0);
	k->uri = strdup(b->uri);
	wbc_mutex_init(&k->lock);
	pthread_cond_init(&k->cond, NULL);
	k->refs = 2;   /* the backend's, the thread's */
	int rc = k->efd < 0 || !k->uri ? -ENOMEM : -pthread_create(&b->connector, NULL,
								   connector_main, k);
	if (rc) {
		k->refs = 1;
		pthread_mutex_lock(&k->lock);
		connector_put(k);
		return rc;
	}
	b->k = k;
	return 0;
}

int nbd_backend_new(const char *spec, const struct wbc_backend_ops **ops, void **ctx,
		    char *err, size_t errlen)
{
	struct nbe *b = calloc(1, sizeof(*b));
	char *copy = strdup(spec);
	if (!b || !copy) {
		free(b);
		free(copy);
		return -ENOMEM;
	}
	b->efd = -1;
	wbc_mutex_init(&b->lock);
	pthread_cond_init(&b->flush_cond, NULL);
	b->max_io = NBD_DEFAULT_MAX_IO;
	b->timeout_ns = wbc_secs_to_ns(NBD_DEFAULT_TIMEOUT_S);
	for (unsigned i = 0; i < NBD_MAX_CONNS; i++) {
		b->conns[i].b = b;
		b->conns[i].backoff_ns = RECONNECT_MIN_NS;
		list_init(&b->conns[i].cmds);
	}
	unsigned conns = 0;
	int rc = parse_spec(b, copy, &conns, err, errlen);
	free(copy);
	struct nbd_handle *h = NULL;
	if (!rc && !(h = new_handle())) {
		snprintf(err, errlen, "nbd: %s", nbd_get_error());
		rc = -ENOMEM;
	}
	if (!rc) {
		b->conns[0].h = h;
		rc = connect_sync(h, b, err, errlen);
	}
	if (!rc) {
		int64_t size = nbd_get_size(h);
		int64_t bmin = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
		int64_t bmax = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
		b->can_flush = nbd_can_flush(h) == 1;
		b->can_fua = nbd_can_fua(h) == 1;
		b->multi_conn = nbd_can_multi_conn(h) == 1;
		if (size < 0) {
			snprintf(err, errlen, "%s: no export size: %s", b->uri, nbd_get_error());
			rc = -EIO;
		} else if (nbd_is_read_only(h) == 1) {
			snprintf(err, errlen, "%s: the export is read-only", b->uri);
			rc = -EROFS;
		} else if (size == 0) {
			/* it can hold no byte: a write taken would fail at
			 * writeback for good */
			snprintf(err, errlen, "%s: the export is empty (0 bytes)", b->uri);
			rc = -EINVAL;
		} else if (conns > 1 && !b->multi_conn) {
			snprintf(err, errlen, "%s: the server does not allow multi-conn: conns=1",
				 b->uri);
			rc = -EINVAL;
		}
		b->size = (uint64_t)(size < 0 ? 0 : size);
		b->nconns = conns ? conns : b->multi_conn ? NBD_DEFAULT_CONNS : 1;
		if (bmin > 1 && bmin <= 65536)
			b->align = (size_t)bmin;
		if (bmax > 0 && (uint64_t)bmax < b->max_io)
			b->max_io = (size_t)bmax;
		/* no command above it, however large an I/O the engine makes */
		b->cmd_max = bmax > 0 && bmax < NBD_SAFE_MAX_CMD ? (size_t)bmax : NBD_SAFE_MAX_CMD;
		if (b->align)
			b->cmd_max = WBC_MAX(b->cmd_max / b->align * b->align, b->align);
		if (b->align)
			b->max_io = WBC_MAX(b->max_io / b->align * b->align, b->align);
		b->usable = b->align ? b->size / b->align * b->align : b->size;
		if (!rc && !b->usable) {
			snprintf(err, errlen, "%s: the export (%llu bytes) is smaller than the "
				 "server's minimum block size (%zu)", b->uri,
				 (unsigned long long)b->size, b->align);
			rc = -EINVAL;
		} else if (!rc && b->usable != b->size) {
			fprintf(stderr, "wbcache: nbd: %s: %llu bytes, not a multiple of the "
				"server's minimum block size (%zu): the last %llu are not used\n",
				b->uri, (unsigned long long)b->size, b->align,
				(unsigned long long)(b->size - b->usable));
		}
	}
	if (!rc) {
		b->conns[0].state = C_UP;
		b->conns[0].was_up = true;
		b->nup = 1;
	}
	for (unsigned i = 1; !rc && i < b->nconns; i++) {
		struct nbd_conn *c = &b->conns[i];
		if (!(c->h = new_handle())) {
			snprintf(err, errlen, "nbd: %s", nbd_get_error());
			rc = -ENOMEM;
		} else if (!(rc = connect_sync(c->h, b, err, errlen))) {
			/* each connection to the export the first one found (a
			 * server behind a balancer may differ) */
			char why[200];
			if (!same_export(b, c->h, why, sizeof(why))) {
				snprintf(err, errlen, "%s: connection %u found another export than "
					 "connection 0 (%s)", b->uri, i, why);
				rc = -EIO;
				break;
			}
			adopt_block_max(b, c->h);
			c->state = C_UP;
			c->was_up = true;
			b->nup++;
		}
	}
	if (!rc && (b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = -errno;
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
	}
	if (!rc) {
		atomic_store(&b->st_up, b->nup);
		window_init(&b->win, b->fixed, b->max_io, wbc_now_ns());
		cc_publish(b);
		rc = start_connector(b);
		if (!rc)
			rc = -pthread_create(&b->thread, NULL, nbd_main, b);
		if (rc)
			snprintf(err, errlen, "cannot start the nbd threads");
	}
	if (rc) {
		free_nbe(b);
		return rc;
	}
	*ops = &nbd_ops;
	*ctx = b;
	return 0;
}
