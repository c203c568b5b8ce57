/*
 * FUSE over io_uring (-o uring=auto|1|0; Linux 6.14+, the fuse module's
 * enable_uring parameter).
 *
 * What it does.  Over /dev/fuse every request costs the daemon a read()
 * and a writev(), and the caller's CPU wakes a worker that usually runs on
 * another CPU.  Over io_uring the kernel keeps one queue per possible CPU
 * and puts a request on the queue of the CPU its caller runs on; the
 * daemon's answer and its fetch of the next request are one command
 * (COMMIT_AND_FETCH).  Here each queue has one thread pinned to that CPU,
 * with its own ring and entries, so a request is served on the CPU that
 * issued it, with one system call per request.
 *
 * The wire (include/uapi/linux/fuse.h, fs/fuse/dev_uring.c).  An entry is
 * a header buffer (struct ring_header: the fuse_in_header, then the op's
 * own header, the first in-argument, then the entry's commit id and
 * payload size) and a payload buffer (the other in-arguments; on the way
 * back, the out-arguments), registered with FUSE_IO_URING_CMD_REGISTER on
 * the /dev/fuse descriptor (IORING_OP_URING_CMD, 128-byte SQEs).  A
 * request arrives as the completion of an entry's command; the entry's
 * buffer holds the payload at PREFIX and the request is rebuilt in front
 * of it (header, op header), so libfuse gets the contiguous request it
 * reads from /dev/fuse (fuse_session_process_buf) and every operation runs
 * unchanged.  Its answer reaches conn.c's writev hook, which hands it here
 * (uring_reply): the out header goes into the header buffer, the rest
 * into the payload, and the entry's COMMIT_AND_FETCH commits it and waits
 * for the next request.  FORGET, BATCH_FORGET and INTERRUPT still come
 * through /dev/fuse, where libfuse's loop keeps running.
 *
 * Start (uring_begin, the main thread, before the mount is reported up).
 * The kernel blocks every request of a connection whose INIT answer asked
 * for io_uring until every queue has an entry, or until a REGISTER fails
 * (which turns io_uring off for the connection).  So the rings are made
 * first (io_uring may be disabled), then the main thread reads and
 * answers INIT itself, where conn.c adds FUSE_OVER_IO_URING when the
 * kernel offered it; then every thread registers its entries.  Where that
 * fails after INIT asked for io_uring, a thread sends a REGISTER the
 * kernel must refuse (queue id out of range), so the connection falls
 * back to /dev/fuse rather than hang.  uring=1 turns any failure into
 * the mount's failure (exit 2, with the reason); uring=auto logs it and
 * serves /dev/fuse.  A queue the kernel took some entries of and
 * refused others is no such failure: each REGISTER is taken or refused
 * alone, and the kernel may already send requests to the rings (it does
 * once every queue has an entry: fuse_uring_do_register), which then
 * must be served; the queue runs with the entries taken (logged), as
 * where memory for more was short.  Only a queue with none taken fails
 * the start (the kernel cannot use the rings then: it waits for an
 * entry on every queue).  (WBCACHE_MOUNT_URING_FAIL=1 in the daemon's
 * environment makes the last queue's registration fail that way, for
 * the tests; =part makes the kernel refuse the last entry of the last
 * queue, registered after every other queue's and its own; =wait makes a
 * queue's wait fail later, =cmd a queue's commit, see FAIL_XATTR.)
 * A wait that fails for good later ends the mount (ring_wait_failed), and
 * so does an entry's command that fails while the mount runs (ended):
 * the entry is out of the kernel's pool, and a queue that lost them all
 * would leave its CPU's requests waiting for ever.
 *
 * Who answers.  A ring thread serves its completions in order.  An answer
 * the handling thread gives while it handles the request (the usual case)
 * is only recorded; the thread commits it once libfuse returns (so the
 * request's buffer stays valid as long as with /dev/fuse), the ring
 * thread by preparing the SQE it submits with its next wait.  An answer
 * from any other thread (the replier's deferred writes, reply.c; a
 * helper) goes on the queue's commit list and wakes the ring thread
 * through its eventfd; only the ring thread touches its ring (it is made
 * IORING_SETUP_SINGLE_ISSUER).  An entry stays the request's until its
 * answer is committed, so requests answered later (throttled writes, a
 * helper's) hold entries: a queue registers all of its entries, CHUNK *
 * MAX_CHUNKS, at the start; past that, further requests of its CPU wait in
 * the kernel until one is answered.  All at the start, because a request
 * that finds none of its queue's entries waiting goes on the kernel's list
 * for the queue, and only a COMMIT_AND_FETCH takes it from there, not a
 * REGISTER (fs/fuse/dev_uring.c, fuse_uring_do_register): entries
 * registered later, as writers paused on a full store held the first
 * ones, waited unused while an ls stayed on that list for as long as
 * nothing else of its CPU was answered.  The kernel hands out the entry
 * freed last first, and the payload buffers are mapped without reserve:
 * an entry never used costs no memory.  Fewer where the buffers' whole
 * size would count (vm.overcommit_memory=2: size_chunks), and one chunk
 * for a possible CPU not online (cpu_online).
 *
 * Helpers.  A ring thread must not wait long (its CPU's other requests
 * wait behind it), and must never wait for the kernel: a request that
 * waits for writeback (FSYNC, FSYNCDIR, the root's sync attribute,
 * O_DSYNC writes, FALLOCATE's zeros through the throttle) and a direct
 * write that invalidates the kernel's cached pages (ops.c: invalidating
 * a dirty page sends a write to the queue of the invalidating thread's
 * CPU) go to a helper thread (grown on demand up to threads=), which
 * answers as any other thread does.  Shorter waits stay on the ring
 * thread: a read from the store, a write into a page under writeback, a
 * truncate.
 *
 * Locks.  q->lock (a queue's commit list, quiet and stop flags) and H.lock (the
 * helpers' jobs) are taken with no other lock held, nothing nests under
 * them, and neither is held across a system call that waits.  S.lock
 * orders the start and the end (the threads' phases).
 *
 * Lifetimes.  The queues, their rings, entries and buffers live from
 * uring_begin to uring_end.  The end, once libfuse's loop has ended:
 * uring_quiesce makes the ring threads handle no more requests (one that
 * comes is answered ENOTCONN at once: a helper may wait for it, see
 * arrived) and waits until each has finished the ones it was handling,
 * then stops the helpers (each finishes its jobs, answering); the replier then
 * answers what it holds (replier_stop), through the ring threads, which
 * still commit; uring_end then ends each ring thread once it has
 * submitted the commits it holds, closing its ring (the kernel then
 * cancels the commands still waiting).  The buffers are freed after the
 * threads are joined, because the kernel copies a request into them only
 * in the context of their ring's thread.
 */
#include "mount.h"

#include <liburing.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

/* include/uapi/linux/fuse.h (7.42) */
#define CMD_REGISTER 1u          /* FUSE_IO_URING_CMD_REGISTER */
#define CMD_COMMIT_AND_FETCH 2u  /* FUSE_IO_URING_CMD_COMMIT_AND_FETCH */
#define IN_HEADER 40u            /* sizeof(struct fuse_in_header) */
#define OUT_HEADER 16u           /* sizeof(struct fuse_out_header) */
#define OP_IN_MAX 128u           /* FUSE_URING_OP_IN_OUT_SZ */
struct ring_ent_in_out {         /* struct fuse_uring_ent_in_out */
	uint64_t flags;
	uint64_t commit_id;
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};
struct ring_header {             /* struct fuse_uring_req_header */
	char in_out[128];        /* fuse_in_header in, fuse_out_header out */
	char op_in[OP_IN_MAX];   /* the op's header (first in-argument) */
	struct ring_ent_in_out io;
};
struct ring_cmd {                /* struct fuse_uring_cmd_req, in sqe->cmd */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};
_Static_assert(sizeof(struct ring_header) == 288, "fuse_uring_req_header");
_Static_assert(sizeof(struct ring_cmd) == 24, "fuse_uring_cmd_req");

/* Opcodes (fuse.h) the ring threads hand to a helper, and the fields of
 * their op headers that decide it. */
#define OP_WRITE 16
#define OP_FSYNC 20
#define OP_GETXATTR 22
#define OP_FSYNCDIR 30
#define OP_FALLOCATE 43
#define WRITE_IN_FLAGS 32        /* fuse_write_in.flags: the open's flags */

/* A queue's entries (its CPU's requests in the daemon at once, deferred
 * writes included): CHUNK * MAX_CHUNKS, all registered at the start (see
 * the header), in chunks.  The payload buffers are mapped without
 * reserve: an entry costs memory only as far as requests filled it. */
#define CHUNK 16
#define MAX_CHUNKS 16
/* the ring: room for every entry's command and a chunk's registration */
#define RING_SQES 512
/* The request is rebuilt in front of the payload: room for the in header
 * and the largest op header. */
#define PREFIX 256u
/* FUSE_MIN_READ_BUFFER: the least payload the kernel sizes a ring for */
#define MIN_PAYLOAD 8192u
/* user_data of the eventfd's read and of the refused REGISTER (entries'
 * are their addresses) */
#define WAKE_TAG 1u
#define POISON_TAG 2u
/* WBCACHE_MOUNT_URING_FAIL=wait in the daemon's environment (for the
 * tests): a read of this attribute on the root is answered, then the
 * wait of the queue that answered it fails for good (ring_wait_failed).
 * =cmd: its answer is committed naming a queue the kernel does not
 * have, which it refuses (EINVAL; its request stays unanswered until the
 * mount ends):
 * that entry's command fails while the mount runs (ended) */
#define FAIL_XATTR "user.wbcache.ring-fail"
static enum { FAIL_NONE, FAIL_WAIT, FAIL_CMD } fail_xattr;

struct uq;
struct ent {
	struct uq *q;
	struct ring_header *hdr;
	char *buf;                   /* PREFIX, then the payload */
	struct iovec iov[2];         /* REGISTER: header, payload */
	uint64_t commit_id;          /* of the request it holds */
	/* The request's unique while it waits for its answer (0: none):
	 * whoever answers claims it by exchanging it for 0. */
	_Atomic uint64_t unique;
	char *req;                   /* the rebuilt request */
	size_t req_len;
	bool replied;                /* answered by its handling thread */
	bool refused;                /* its REGISTER was refused: never in use */
	bool bad_cmd;                /* =cmd: its next commit names no queue */
	unsigned char chunk;         /* its chunk's index in its queue */
	struct ent *next;            /* q->lock: the commit list */
};

struct chunk {
	struct ent ents[CHUNK];
	struct ring_header *hdrs;
	void *area;                  /* the entries' buffers */
	size_t area_len;
};

struct uq {
	unsigned qid;
	pthread_t thread;
	bool started;
	struct io_uring ring;
	bool ring_made;
	bool fixed;                  /* /dev/fuse is the ring's file 0 */
	int efd;
	uint64_t efd_val;            /* the eventfd read's target */
	/* the entries: chunks[0..nchunks), each published (release) once
	 * set up, for answers from other threads to find */
	struct chunk *chunks[MAX_CHUNKS];
	atomic_uint nchunks;
	atomic_uint used;            /* chunks an entry of which held a request */
	unsigned waiting;            /* owner: entries whose command is in the kernel */
	/* the entries the kernel took at registration and still has (an
	 * entry whose command failed is gone): UringEntries in the stats */
	atomic_uint entries;
	unsigned short_of;           /* owner: waits failed for memory in a row */
	pthread_mutex_t lock;        /* commits, quiet, stop */
	pthread_cond_t cond;         /* quiet */
	struct ent *commits;
	bool quiet;                  /* it handles no more requests */
	bool stop;
	bool fail_now;               /* owner: FAIL_XATTR was read */
	struct io_uring_sqe *last_reg;   /* owner: the last REGISTER prepared */
	int rc;                      /* S.lock: the start's result */
	char why[160];               /* S.lock: its reason */
	bool reported;               /* S.lock */
	atomic_ullong requests;      /* served (owner adds; stats read) */
};

enum phase { PH_WAIT, PH_REGISTER, PH_RUN, PH_QUIT };

/* The start and the end: the threads' phase. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	enum phase phase;
	unsigned reported;
} S = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PH_WAIT, 0 };

static struct uq *Q;
static unsigned nq;
static size_t payload_len;
static struct fuse_session *sess;
static int fuse_fd;
static atomic_bool active;
static atomic_bool serving;      /* the ring threads handle requests */
static atomic_ullong offloaded;
static __thread struct uq *my_q;        /* a ring thread's queue */
static __thread struct ent *handling;   /* the entry this thread handles */

/* ---- helpers: requests that may wait, run off the ring threads ---- */

struct job {
	struct job *next;
	struct ent *e;               /* a request to handle, or */
	void (*fn)(void *);          /* a function to call */
	void *arg;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head, *tail;
	unsigned queued;             /* jobs in the queue */
	unsigned n, idle, max;       /* helpers: started, waiting, at most */
	bool stop;
	pthread_t *threads;
	cpu_set_t cpus;              /* the process's CPUs (uring_begin) */
} H = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void handle(struct ent *e);
static void commit_elsewhere(struct ent *e);
static void wake(struct uq *q);

static void *helper_main(void *unused)
{
	(void)unused;
	pthread_setname_np(pthread_self(), "wbc-ring-help");
	pthread_mutex_lock(&H.lock);
	for (;;) {
		struct job *j = H.head;
		if (!j) {
			if (H.stop)
				break;
			H.idle++;
			pthread_cond_wait(&H.cond, &H.lock);
			H.idle--;
			continue;
		}
		H.head = j->next;
		if (!H.head)
			H.tail = NULL;
		H.queued--;
		pthread_mutex_unlock(&H.lock);
		if (j->e) {
			handle(j->e);
			if (j->e->replied)
				commit_elsewhere(j->e);
		} else {
			j->fn(j->arg);
		}
		free(j);
		pthread_mutex_lock(&H.lock);
	}
	pthread_mutex_unlock(&H.lock);
	return NULL;
}

/* Queue @j for a helper, starting one if every idle one has a job
 * already: false if there is none to run it. */
static bool helper_queue(struct job *j)
{
	pthread_mutex_lock(&H.lock);
	if (H.queued >= H.idle && H.n < H.max && !H.stop) {
		pthread_attr_t at;
		bool attr = !pthread_attr_init(&at);
		if (attr && CPU_COUNT(&H.cpus))
			pthread_attr_setaffinity_np(&at, sizeof(H.cpus), &H.cpus);
		if (!pthread_create(&H.threads[H.n], attr ? &at : NULL, helper_main, NULL))
			H.n++;
		if (attr)
			pthread_attr_destroy(&at);
	}
	bool ok = H.n > 0 && !H.stop;
	if (ok) {
		j->next = NULL;
		if (H.tail)
			H.tail->next = j;
		else
			H.head = j;
		H.tail = j;
		H.queued++;
		pthread_cond_signal(&H.cond);
	}
	pthread_mutex_unlock(&H.lock);
	if (ok)
		atomic_fetch_add_explicit(&offloaded, 1, memory_order_relaxed);
	return ok;
}

bool uring_on_ring(void)
{
	return my_q != NULL;
}

bool uring_later(void (*fn)(void *), void *arg)
{
	struct job *j = malloc(sizeof(*j));
	if (!j)
		return false;
	j->e = NULL;
	j->fn = fn;
	j->arg = arg;
	if (helper_queue(j))
		return true;
	free(j);
	return false;
}

/* A request that may wait for writeback or the store: for a helper. */
static bool may_wait(const struct ent *e, uint32_t opcode, uint64_t nodeid, const char *op_in,
		     size_t op_len)
{
	uint32_t v = 0;
	switch (opcode) {
	case OP_FSYNC:
	case OP_FSYNCDIR:
	case OP_FALLOCATE:
		return true;
	case OP_GETXATTR:   /* the root's sync attribute: everything written back */
		return nodeid == FUSE_ROOT_ID &&
		       !strncmp(e->buf + PREFIX, SYNC_XATTR, sizeof(SYNC_XATTR));
	case OP_WRITE:
		if (op_len >= WRITE_IN_FLAGS + 4)
			memcpy(&v, op_in + WRITE_IN_FLAGS, 4);
		return v & (O_DSYNC | O_SYNC);
	}
	return false;
}

/* ---- a queue's ring ---- */

static struct io_uring_sqe *sqe_cmd(struct uq *q, struct ent *e, uint32_t op)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	if (!sqe) {   /* never: the ring has room for every entry's command */
		io_uring_submit(&q->ring);
		sqe = io_uring_get_sqe(&q->ring);
		if (!sqe)
			return NULL;
	}
	memset(sqe, 0, 128);
	sqe->opcode = IORING_OP_URING_CMD;
	if (q->fixed) {
		sqe->fd = 0;
		sqe->flags = IOSQE_FIXED_FILE;
	} else {
		sqe->fd = fuse_fd;
	}
	sqe->cmd_op = op;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	struct ring_cmd c = { .qid = e && e->bad_cmd ? UINT16_MAX : (uint16_t)q->qid,
			      .commit_id = e ? e->commit_id : 0 };
	memcpy(sqe->cmd, &c, sizeof(c));
	return sqe;
}

static void arm_wake(struct uq *q)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, q->efd, &q->efd_val, sizeof(q->efd_val), 0);
	sqe->user_data = WAKE_TAG;
}

/* The ring thread: commit @e's answer with its next submission. */
static void commit_here(struct uq *q, struct ent *e)
{
	if (sqe_cmd(q, e, CMD_COMMIT_AND_FETCH))
		q->waiting++;
}

/* Another thread answered @e: its ring thread commits it. */
static void commit_elsewhere(struct ent *e)
{
	struct uq *q = e->q;
	pthread_mutex_lock(&q->lock);
	e->next = q->commits;
	q->commits = e;
	pthread_mutex_unlock(&q->lock);
	wake(q);
}

/* Run the request @e holds through libfuse in this thread. */
static void handle(struct ent *e)
{
	struct fuse_buf fb = { .size = e->req_len, .mem = e->req };
	e->replied = false;
	handling = e;
	fuse_session_process_buf(sess, &fb);
	handling = NULL;
}

/* Answer @e's request with @err, without libfuse (a malformed request). */
static void answer_err(struct ent *e, uint64_t unique, int err)
{
	struct { uint32_t len; int32_t error; uint64_t unique; } out = { OUT_HEADER, -err, unique };
	memcpy(e->hdr->in_out, &out, sizeof(out));
	e->hdr->io.payload_sz = 0;
	atomic_store_explicit(&e->unique, 0, memory_order_relaxed);
	e->replied = true;
}

/* A request arrived in @e: rebuild it and serve it. */
static void arrived(struct uq *q, struct ent *e)
{
	struct ring_header *h = e->hdr;
	uint32_t len, opcode, psz = h->io.payload_sz;
	uint64_t unique, nodeid;
	memcpy(&len, h->in_out, 4);
	memcpy(&opcode, h->in_out + 4, 4);
	memcpy(&unique, h->in_out + 8, 8);
	memcpy(&nodeid, h->in_out + 16, 8);
	e->commit_id = h->io.commit_id;
	q->waiting--;
	/* the chunks answers from other threads look in (find) */
	unsigned bit = 1u << e->chunk;
	if (!(atomic_load_explicit(&q->used, memory_order_relaxed) & bit))
		atomic_fetch_or(&q->used, bit);
	conn_received();
	atomic_fetch_add_explicit(&q->requests, 1, memory_order_relaxed);
	if (!atomic_load_explicit(&serving, memory_order_acquire)) {
		/* Ending: answered at once, not left for the abort of the
		 * connection, which comes only after the helpers are joined:
		 * a helper's request may wait on this one (a direct write's
		 * invalidation of a dirty mapped page sends its write-back
		 * here and waits for it), and the end would wait for ever */
		answer_err(e, unique, ENOTCONN);
		commit_here(q, e);
		return;
	}
	if (len < IN_HEADER + psz || len - IN_HEADER - psz > OP_IN_MAX || psz > payload_len) {
		logmsg("io_uring: a malformed request (opcode %u, length %u, payload %u)",
		       opcode, len, psz);
		answer_err(e, unique, EIO);
		commit_here(q, e);
		return;
	}
	if (fail_xattr && opcode == OP_GETXATTR && nodeid == FUSE_ROOT_ID &&
	    psz >= sizeof(FAIL_XATTR) && !memcmp(e->buf + PREFIX, FAIL_XATTR, sizeof(FAIL_XATTR))) {
		answer_err(e, unique, ENODATA);
		if (fail_xattr == FAIL_WAIT)
			q->fail_now = true;   /* answered; then the queue's wait fails */
		else
			e->bad_cmd = true;   /* a commit the kernel refuses */
		commit_here(q, e);
		return;
	}
	size_t op_len = len - IN_HEADER - psz;
	e->req = e->buf + PREFIX - IN_HEADER - op_len;
	e->req_len = len;
	memcpy(e->req, h->in_out, IN_HEADER);
	memcpy(e->req + IN_HEADER, h->op_in, op_len);
	atomic_store_explicit(&e->unique, unique, memory_order_release);
	if (may_wait(e, opcode, nodeid, h->op_in, op_len)) {
		struct job *j = malloc(sizeof(*j));
		if (j) {
			j->e = e;
			j->fn = NULL;
			j->arg = NULL;
			if (helper_queue(j))
				return;
			free(j);
		}
	}
	handle(e);
	if (e->replied)
		commit_here(q, e);
}

/* An entry's command ended with @res < 0: the entry is out of service
 * (the kernel has no command of it to send a request to).  At the end of
 * the connection the kernel ends them all (ENOTCONN, ECANCELED, ...),
 * and a commit that races the end finds its request gone (ENOENT: the
 * kernel looks it up after its check that the connection is up, and an
 * abort in between, as at an unmount, ends it; its caller is gone too).
 * True for any other failure while the mount runs (a COMMIT_AND_FETCH
 * refused: EINVAL, EIO, EOPNOTSUPP after a refused REGISTER turned
 * io_uring off for the connection and enable_uring went to N): each
 * takes an entry from the kernel's pool for good, and a queue left with
 * none leaves its CPU's requests waiting for ever, so the mount ends
 * (mount_ends).  ENOENT is logged and the entry dropped: ending the mount
 * for it turned an unmount into a failed one (exit 1, "a ring failed"). */
static bool ended(struct ent *e, int res)
{
	e->q->waiting--;
	atomic_store_explicit(&e->unique, 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&e->q->entries, 1, memory_order_relaxed);
	if (res == -ENOTCONN || res == -ECANCELED || res == -ENODEV || res == -ECONNABORTED)
		return false;
	if (res == -ENOENT) {
		static atomic_bool told;
		if (atomic_load_explicit(&serving, memory_order_acquire) &&
		    !atomic_exchange(&told, true))
			logmsg("io_uring: queue %u: an answer's request was gone (the "
			       "connection ending?)", e->q->qid);
		return false;
	}
	logmsg("io_uring: queue %u: a ring entry's command failed: %s: the mount ends (an "
	       "entry the kernel no longer has)", e->q->qid, strerror(-res));
	return true;
}

/*
 * The ring's wait failed with @rc: true to go on.  A passing failure
 * (a signal, a full completion queue, memory short for a while) is
 * waited again.  Any other (a completion dropped, EBADR; the ring's
 * owner gone) leaves its CPU's requests unserved for ever, their callers
 * in D state: the mount ends then, as at SIGTERM (what the cache holds is
 * written back, the mount point is unmounted), with the reason in the log
 * and exit status 1.
 */
static atomic_bool ring_broke;
/* The end is asked of libfuse's loop itself, and its main thread (in
 * sem_wait) woken by a signal of the mount's own: not SIGTERM, which has
 * no handler where the daemon started with it ignored (libfuse installs
 * its handlers only over SIG_DFL). */
static pthread_t main_thread;

static void end_wake(int sig)
{
	(void)sig;
}

bool uring_failed(void)
{
	return atomic_load(&ring_broke);
}

static void mount_ends(void);

static bool ring_wait_failed(struct uq *q, int rc)
{
	static atomic_bool told;
	if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY)
		return true;
	if ((rc == -ENOMEM || rc == -ENOBUFS) && q->short_of++ < 10000) {
		if (!atomic_exchange(&told, true))
			logmsg("io_uring: queue %u: %s, waiting", q->qid, strerror(-rc));
		usleep(1000);
		return true;
	}
	logmsg("io_uring: queue %u: %s: the mount ends (its CPU's requests cannot be served)",
	       q->qid, strerror(-rc));
	mount_ends();
	return false;
}

/* End the mount as at SIGTERM (a ring that cannot serve its CPU's
 * requests any more); from a ring thread, which returns once the main
 * thread has left libfuse's loop. */
static void mount_ends(void)
{
	atomic_store(&ring_broke, true);
	fuse_session_exit(sess);
	/* libfuse's loop tests its flag, then waits (sem_wait): a signal
	 * handled between the two is lost, and the main thread would wait
	 * for ever.  So it is sent again until the main thread has left the
	 * loop (uring_quiesce clears serving; it joins this thread only
	 * later, so the main thread is there to be sent to) */
	while (atomic_load(&serving)) {
		pthread_kill(main_thread, SIGRTMIN);
		usleep(20000);
	}
}

static void ring_loop(struct uq *q)
{
	for (;;) {
		int rc;
		if (q->fail_now) {   /* the tests' failure (FAIL_XATTR) */
			io_uring_submit(&q->ring);
			rc = -EBADR;
		} else {
			rc = io_uring_submit_and_wait(&q->ring, 1);
		}
		if (rc >= 0)
			q->short_of = 0;
		else if (!ring_wait_failed(q, rc))
			return;
		bool stop = false;
		unsigned head, n = 0;
		struct io_uring_cqe *cqe;
		io_uring_for_each_cqe(&q->ring, head, cqe) {
			n++;
			if (cqe->user_data == WAKE_TAG) {
				pthread_mutex_lock(&q->lock);
				struct ent *c = q->commits;
				q->commits = NULL;
				stop = q->stop;
				pthread_mutex_unlock(&q->lock);
				for (; c; c = c->next)
					commit_here(q, c);
				if (!stop)
					arm_wake(q);
				continue;
			}
			if (cqe->user_data == POISON_TAG)
				continue;
			struct ent *e = (struct ent *)(uintptr_t)cqe->user_data;
			if (e->refused)
				continue;   /* its refusal, counted by ring_register */
			if (cqe->res >= 0)
				arrived(q, e);
			else if (ended(e, cqe->res))
				mount_ends();
		}
		io_uring_cq_advance(&q->ring, n);
		if (!atomic_load_explicit(&serving, memory_order_acquire) && !q->quiet) {
			pthread_mutex_lock(&q->lock);
			q->quiet = true;
			pthread_cond_broadcast(&q->cond);
			pthread_mutex_unlock(&q->lock);
		}
		if (stop) {
			io_uring_submit(&q->ring);
			return;
		}
	}
}

/* Make the ring (and its eventfd), in the thread that will use it. */
static int ring_make(struct uq *q)
{
	unsigned entries = RING_SQES;
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER |
					      IORING_SETUP_DEFER_TASKRUN };
	int rc = io_uring_queue_init_params(entries, &q->ring, &p);
	if (rc == -EINVAL) {   /* before 6.1: no deferred task work */
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_SQE128;
		rc = io_uring_queue_init_params(entries, &q->ring, &p);
	}
	if (rc) {
		snprintf(q->why, sizeof(q->why), "cannot make an io_uring: %s", strerror(-rc));
		return rc;
	}
	q->ring_made = true;
	/* /dev/fuse as a fixed file, and the ring's own descriptor
	 * registered: no descriptor look-ups per command (either may fail:
	 * then without) */
	q->fixed = !io_uring_register_files(&q->ring, &fuse_fd, 1);
	io_uring_register_ring_fd(&q->ring);
	q->efd = eventfd(0, EFD_CLOEXEC);
	if (q->efd < 0) {
		rc = -errno;
		snprintf(q->why, sizeof(q->why), "eventfd: %s", strerror(errno));
	}
	return rc;
}

/* Set up CHUNK entries more and prepare their REGISTERs (submitted with
 * the ring's next submission); 0, or -errno with the reason in q->why. */
static int add_chunk(struct uq *q)
{
	unsigned k = atomic_load_explicit(&q->nchunks, memory_order_relaxed);
	if (k >= MAX_CHUNKS)
		return -ENOSPC;
	struct chunk *c = calloc(1, sizeof(*c));
	size_t one = ((PREFIX + payload_len) + 4095) & ~(size_t)4095;
	if (c) {
		c->area_len = one * CHUNK;
		c->area = mmap(NULL, c->area_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		c->hdrs = aligned_alloc(64, sizeof(struct ring_header) * CHUNK);
	}
	if (!c || c->area == MAP_FAILED || !c->hdrs) {
		if (c && c->area != MAP_FAILED)
			munmap(c->area, c->area_len);
		if (c)
			free(c->hdrs);
		free(c);
		snprintf(q->why, sizeof(q->why), "no memory for the ring's buffers");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < CHUNK; i++) {
		struct ent *e = &c->ents[i];
		e->q = q;
		e->chunk = (unsigned char)k;
		e->hdr = &c->hdrs[i];
		e->buf = (char *)c->area + i * one;
		e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
		e->iov[1] = (struct iovec){ e->buf + PREFIX, payload_len };
		struct io_uring_sqe *sqe = sqe_cmd(q, e, CMD_REGISTER);
		if (!sqe)
			break;   /* never: the ring has room */
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
		q->waiting++;
		q->last_reg = sqe;
	}
	q->chunks[k] = c;
	atomic_store_explicit(&q->nchunks, k + 1, memory_order_release);
	return 0;
}

/* Chunks a queue registers at the start.  Under vm.overcommit_memory=2
 * MAP_NORESERVE is ignored: every buffer counts its whole size against
 * CommitLimit at once, and queues that took all that is left would leave
 * the daemon (libfuse's read buffers, the engine) and every other process
 * on the machine failing with ENOMEM.  Then the queues together take at
 * most a quarter of what is left (at least a chunk each). */
static unsigned chunk_cap = MAX_CHUNKS;

static void size_chunks(void)
{
	chunk_cap = MAX_CHUNKS;
	FILE *f = fopen("/proc/sys/vm/overcommit_memory", "re");
	int mode = f ? fgetc(f) : EOF;
	if (f)
		fclose(f);
	if (mode != '2')
		return;
	unsigned long long limit = 0, committed = 0, v;
	char line[128];
	f = fopen("/proc/meminfo", "re");
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "CommitLimit: %llu kB", &v) == 1)
			limit = v;
		else if (sscanf(line, "Committed_AS: %llu kB", &v) == 1)
			committed = v;
	}
	if (f)
		fclose(f);
	size_t one = ((PREFIX + payload_len) + 4095) & ~(size_t)4095;
	unsigned long long left = limit > committed ? (limit - committed) * 1024 : 0;
	unsigned long long per = left / 4 / (nq ? nq : 1) / (one * CHUNK);
	chunk_cap = per < 1 ? 1 : per > MAX_CHUNKS ? MAX_CHUNKS : (unsigned)per;
	if (chunk_cap < MAX_CHUNKS)
		logmsg("io_uring: strict overcommit (vm.overcommit_memory=2): %u ring entries a "
		       "queue of %u", chunk_cap * CHUNK, MAX_CHUNKS * CHUNK);
}

/* Is CPU @cpu online?  A possible CPU not online (a virtual machine's room
 * to add CPUs) sends no request until it comes online: its queue
 * registers one chunk, as the queues did before all were registered at
 * the start. */
static bool cpu_online(unsigned cpu)
{
	char path[64];
	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%u/online", cpu);
	FILE *f = fopen(path, "re");
	if (!f) {   /* no such file: a CPU that cannot go offline, if present */
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%u", cpu);
		return !access(path, F_OK);
	}
	int c = fgetc(f);
	fclose(f);
	return c != '0';
}

/* Register the queue's entries (all of them: see the header); 0, or -errno
 * with the reason in q->why.  After a failure the connection's io_uring
 * is off (see poison). */
static int ring_register(struct uq *q)
{
	const char *fail = getenv("WBCACHE_MOUNT_URING_FAIL");
	if (fail && !strcmp(fail, "1") && q->qid == nq - 1) {
		snprintf(q->why, sizeof(q->why), "registration failed (WBCACHE_MOUNT_URING_FAIL)");
		return -EIO;
	}
	/* =part: the last queue registers once every other queue has (so
	 * the kernel sends requests to the rings from its first entry on),
	 * and the kernel refuses its last entry (an iovec count it must
	 * refuse, EINVAL) */
	bool part = fail && !strcmp(fail, "part") && q->qid == nq - 1;
	if (part) {
		pthread_mutex_lock(&S.lock);
		while (S.reported < nq - 1)
			pthread_cond_wait(&S.cond, &S.lock);
		pthread_mutex_unlock(&S.lock);
	}
	int rc = add_chunk(q);
	if (rc)
		return rc;
	/* the rest: fewer where memory is short, or where a strict
	 * overcommit policy would count them all (chunk_cap) */
	unsigned cap = cpu_online(q->qid) ? chunk_cap : 1;
	while (atomic_load_explicit(&q->nchunks, memory_order_relaxed) < cap && !add_chunk(q))
		;
	unsigned k = atomic_load_explicit(&q->nchunks, memory_order_relaxed);
	if (k < cap)
		logmsg("io_uring: queue %u: %u ring entries of %u: %s", q->qid, k * CHUNK,
		       cap * CHUNK, q->why);
	if (part && q->last_reg)
		q->last_reg->len = 1;
	arm_wake(q);
	rc = io_uring_submit(&q->ring);
	if (rc < 0) {
		snprintf(q->why, sizeof(q->why), "io_uring_submit: %s", strerror(-rc));
		return rc;
	}
	/* A refused REGISTER completes at once; an accepted one when a
	 * request comes (one may have already: the completions stay for
	 * ring_loop, which passes over the refused ones).  Each is taken or
	 * refused alone: with some taken, the kernel may already send
	 * requests to the rings (see the header), so the queue serves with
	 * those; with none, the start fails. */
	unsigned head, refused = 0, regs = q->waiting;
	int err = 0;
	atomic_store_explicit(&q->entries, regs, memory_order_relaxed);
	struct io_uring_cqe *cqe;
	io_uring_for_each_cqe(&q->ring, head, cqe) {
		if (cqe->user_data != WAKE_TAG && cqe->user_data != POISON_TAG && cqe->res < 0) {
			struct ent *e = (struct ent *)(uintptr_t)cqe->user_data;
			e->refused = true;
			q->waiting--;
			atomic_fetch_sub_explicit(&q->entries, 1, memory_order_relaxed);
			refused++;
			if (!err)
				err = cqe->res;
		}
	}
	if (!refused)
		return 0;
	snprintf(q->why, sizeof(q->why), "the kernel refused %s ring entry: %s%s",
		 refused == regs ? "every" : "a", strerror(-err), err == -EOPNOTSUPP ?
		 " (/sys/module/fuse/parameters/enable_uring is N)" : "");
	if (refused == regs)
		return err;
	logmsg("io_uring: queue %u: %u ring entries of %u: %s", q->qid, regs - refused, regs,
	       q->why);
	return 0;
}

/* A REGISTER the kernel refuses inside its registration (queue id out of
 * range), which turns io_uring off for the connection: requests then go
 * through /dev/fuse instead of waiting for a ring that will never be
 * ready. */
static void poison(struct uq *q)
{
	if (!q->ring_made)
		return;
	struct io_uring_sqe *sqe = sqe_cmd(q, NULL, CMD_REGISTER);
	if (!sqe)
		return;
	struct ring_cmd c = { .qid = UINT16_MAX };
	memcpy(sqe->cmd, &c, sizeof(c));
	sqe->user_data = POISON_TAG;
	io_uring_submit(&q->ring);
}

static enum phase report(struct uq *q, int rc, enum phase after)
{
	pthread_mutex_lock(&S.lock);
	q->rc = rc;
	q->reported = true;
	S.reported++;
	pthread_cond_broadcast(&S.cond);
	while (S.phase != after && S.phase != PH_QUIT && S.phase != PH_RUN)
		pthread_cond_wait(&S.cond, &S.lock);
	enum phase ph = S.phase;
	pthread_mutex_unlock(&S.lock);
	return ph;
}

static void *ring_main(void *arg)
{
	struct uq *q = arg;
	char name[16];
	snprintf(name, sizeof(name), "wbc-ring%u", q->qid);
	pthread_setname_np(pthread_self(), name);
	/* on the queue's CPU (where allowed: a cpuset may forbid it; the
	 * queue is still served) */
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(q->qid, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	int rc = ring_make(q);
	enum phase ph = report(q, rc, PH_REGISTER);
	if (ph == PH_REGISTER && !rc) {
		rc = ring_register(q);
		if (rc)
			poison(q);
		ph = report(q, rc, PH_RUN);
	}
	if (ph == PH_RUN) {
		my_q = q;
		ring_loop(q);
		my_q = NULL;
		pthread_mutex_lock(&q->lock);
		q->quiet = true;
		pthread_cond_broadcast(&q->cond);
		pthread_mutex_unlock(&q->lock);
	}
	if (q->ring_made)
		io_uring_queue_exit(&q->ring);
	q->ring_made = false;
	return NULL;
}

/* Wait until every started thread has reported; the first failure. */
static int wait_reports(unsigned want, char *why, size_t len)
{
	int rc = 0;
	pthread_mutex_lock(&S.lock);
	while (S.reported < want)
		pthread_cond_wait(&S.cond, &S.lock);
	S.reported = 0;
	for (unsigned i = 0; i < nq; i++)
		if (Q[i].started && Q[i].rc && !rc) {
			rc = Q[i].rc;
			snprintf(why, len, "queue %u: %s", i, Q[i].why);
		}
	for (unsigned i = 0; i < nq; i++)
		Q[i].reported = false;
	pthread_mutex_unlock(&S.lock);
	return rc;
}

static void set_phase(enum phase ph)
{
	pthread_mutex_lock(&S.lock);
	S.phase = ph;
	pthread_cond_broadcast(&S.cond);
	pthread_mutex_unlock(&S.lock);
}

static void free_all(void)
{
	for (unsigned i = 0; Q && i < nq; i++) {
		struct uq *q = &Q[i];
		if (q->started)
			pthread_join(q->thread, NULL);
		if (q->efd >= 0)
			close(q->efd);
		for (unsigned k = 0; k < atomic_load(&q->nchunks); k++) {
			struct chunk *c = q->chunks[k];
			munmap(c->area, c->area_len);
			free(c->hdrs);
			free(c);
		}
		pthread_mutex_destroy(&q->lock);
		pthread_cond_destroy(&q->cond);
	}
	free(Q);
	Q = NULL;
	nq = 0;
	free(H.threads);
	H.threads = NULL;
}

/* The kernel's queues: one per possible CPU (num_possible_cpus). */
static unsigned possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	unsigned count = 0, a, b;
	if (f) {
		int c;
		do {
			if (fscanf(f, "%u", &a) != 1)
				break;
			b = a;
			c = fgetc(f);
			if (c == '-') {
				if (fscanf(f, "%u", &b) != 1)
					break;
				c = fgetc(f);
			}
			count += b >= a ? b - a + 1 : 0;
		} while (c == ',');
		fclose(f);
	}
	if (!count) {
		long n = sysconf(_SC_NPROCESSORS_CONF);
		count = n > 0 ? (unsigned)n : 1;
	}
	return count;
}

bool uring_enabled(void)
{
	FILE *f = fopen("/sys/module/fuse/parameters/enable_uring", "re");
	int c = f ? fgetc(f) : EOF;
	if (f)
		fclose(f);
	return c == 'Y' || c == 'y' || c == '1';
}

int uring_begin(struct fuse_session *se, unsigned helpers, bool required, char *why, size_t len)
{
	sess = se;
	main_thread = pthread_self();
	struct sigaction sa = { .sa_handler = end_wake };   /* no SA_RESTART: sem_wait returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGRTMIN, &sa, NULL);
	const char *fail = getenv("WBCACHE_MOUNT_URING_FAIL");
	fail_xattr = !fail ? FAIL_NONE : !strcmp(fail, "wait") ? FAIL_WAIT :
		     !strcmp(fail, "cmd") ? FAIL_CMD : FAIL_NONE;
	fuse_fd = fuse_session_fd(se);
	nq = possible_cpus();
	Q = calloc(nq, sizeof(*Q));
	H.max = helpers ? helpers : 1;
	H.threads = calloc(H.max, sizeof(*H.threads));
	S.phase = PH_WAIT;
	S.reported = 0;
	int rc = 0;
	unsigned started = 0;
	if (!Q || !H.threads) {
		snprintf(why, len, "out of memory");
		rc = -ENOMEM;
	}
	/* every queue's eventfd "none" before any thread starts: a failed
	 * start leaves the rest as calloc made them (0: free_all closed fd 0) */
	for (unsigned i = 0; Q && i < nq; i++)
		Q[i].efd = -1;
	/* helpers run anywhere: a ring thread that starts one is pinned to
	 * its CPU, and a thread inherits its creator's CPUs */
	CPU_ZERO(&H.cpus);
	if (sched_getaffinity(0, sizeof(H.cpus), &H.cpus))
		CPU_ZERO(&H.cpus);
	for (unsigned i = 0; !rc && i < nq; i++) {
		struct uq *q = &Q[i];
		q->qid = i;
		mutex_init_checked(&q->lock);
		pthread_cond_init(&q->cond, NULL);
		int err = pthread_create(&q->thread, NULL, ring_main, q);
		if (err) {
			snprintf(why, len, "cannot start a ring thread: %s", strerror(err));
			rc = -err;
			break;
		}
		q->started = true;
		started++;
	}
	if (!rc)
		rc = wait_reports(started, why, len);
	/* INIT, answered here: conn.c asks for io_uring where the kernel
	 * offers it and the rings are made */
	struct fuse_buf fb = { .mem = NULL };
	int r = 0;
	while (!fuse_session_exited(se) && (r = fuse_session_receive_buf(se, &fb)) == -EINTR)
		;
	if (r <= 0 || fuse_session_exited(se)) {
		if (!rc) {
			snprintf(why, len, "no INIT request: %s", r < 0 ? strerror(-r) : "session ended");
			rc = -EIO;
		}
	} else if (!rc && !conn_uring_offered()) {
		snprintf(why, len, "the kernel does not offer FUSE over io_uring (Linux 6.14+ with "
			 "CONFIG_FUSE_IO_URING; /sys/module/fuse/parameters/enable_uring must be Y)");
		rc = -EOPNOTSUPP;
	}
	if (r > 0 && !(required && rc)) {
		conn_uring_want(!rc);
		fuse_session_process_buf(se, &fb);
		if (!rc && !conn_uring_granted()) {
			snprintf(why, len, "INIT did not ask for io_uring");
			rc = -EOPNOTSUPP;
		}
	}
	free(fb.mem);
	if (!rc) {
		payload_len = conn_uring_payload();
		if (payload_len < MIN_PAYLOAD)
			payload_len = MIN_PAYLOAD;
		size_chunks();
		set_phase(PH_REGISTER);
		rc = wait_reports(started, why, len);
	}
	if (rc) {
		set_phase(PH_QUIT);
		free_all();
		return rc;
	}
	atomic_store(&active, true);
	atomic_store(&serving, true);
	set_phase(PH_RUN);
	return 0;
}

static void wake(struct uq *q)
{
	uint64_t one = 1;
	while (write(q->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void uring_quiesce(void)
{
	if (!atomic_load(&active) || !atomic_exchange(&serving, false))
		return;
	for (unsigned i = 0; i < nq; i++) {
		struct uq *q = &Q[i];
		wake(q);
		pthread_mutex_lock(&q->lock);
		while (!q->quiet)
			pthread_cond_wait(&q->cond, &q->lock);
		pthread_mutex_unlock(&q->lock);
	}
	pthread_mutex_lock(&H.lock);
	H.stop = true;
	pthread_cond_broadcast(&H.cond);
	unsigned nh = H.n;
	pthread_mutex_unlock(&H.lock);
	for (unsigned i = 0; i < nh; i++)
		pthread_join(H.threads[i], NULL);
}

void uring_end(void)
{
	if (!atomic_load(&active))
		return;
	uring_quiesce();
	for (unsigned i = 0; i < nq; i++) {
		struct uq *q = &Q[i];
		pthread_mutex_lock(&q->lock);
		q->stop = true;
		pthread_mutex_unlock(&q->lock);
		wake(q);
	}
	atomic_store(&active, false);
	free_all();
}

/* The entry holding the request @unique, claimed (its unique exchanged
 * for 0), or NULL: a look at every entry, for answers from threads other
 * than the request's handler (the replier's, a few per throttled write). */
static struct ent *find(uint64_t unique)
{
	for (unsigned i = 0; i < nq; i++) {
		struct uq *q = &Q[i];
		unsigned n = atomic_load_explicit(&q->nchunks, memory_order_acquire);
		/* a request's chunk is marked before its handler runs, so
		 * before any answer to it is looked for: the chunks never
		 * used (most, as the kernel reuses the entry freed last) are
		 * not looked at */
		unsigned used = atomic_load_explicit(&q->used, memory_order_acquire);
		for (unsigned k = 0; k < n; k++)
			for (unsigned j = 0; (used >> k & 1) && j < CHUNK; j++) {
				struct ent *e = &q->chunks[k]->ents[j];
				uint64_t want = unique;
				if (atomic_load_explicit(&e->unique, memory_order_relaxed) == unique &&
				    atomic_compare_exchange_strong(&e->unique, &want, 0))
					return e;
			}
	}
	return NULL;
}

/*
 * conn.c's writev hook: the answer @iov (the fuse_out_header first) to a
 * request that came through a ring goes back through it.  Returns the
 * bytes taken, or -1 when the request did not come through a ring (the
 * caller writes /dev/fuse).
 *
 * Never -ENOENT, as a writev to /dev/fuse gives for an answer whose
 * request the kernel no longer has (what makes ops.c release an open's
 * handle): the commit goes to the kernel later, with the ring thread's
 * next submission, and the kernel ends a request it finds whether or not
 * its caller still waits (fs/fuse/dev_uring.c: fuse_uring_commit, then
 * fuse_uring_req_end).  Its request is gone only once the connection is
 * aborted or ending (the ring's teardown ended it, ECONNABORTED); the
 * commit then fails (ENOTCONN, or ENOENT) on the entry's completion, with
 * the answer already taken: an open or a create answered then keeps its
 * engine handle until the daemon's end (which writes back and closes
 * what is still open), where /dev/fuse would have released it at once.
 */
ssize_t uring_reply(const struct iovec *iov, int count)
{
	if (!atomic_load_explicit(&active, memory_order_relaxed) || count < 1 ||
	    iov[0].iov_len < OUT_HEADER)
		return -1;
	uint64_t unique;
	memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
	if (!unique)
		return -1;   /* a notification */
	struct ent *e = handling;
	uint64_t want = unique;
	if (!e || !atomic_compare_exchange_strong(&e->unique, &want, 0)) {
		e = find(unique);
		if (!e)
			return -1;
	}
	size_t total = 0;
	for (int i = 1; i < count; i++)
		total += iov[i].iov_len;
	memcpy(e->hdr->in_out, iov[0].iov_base, OUT_HEADER);
	if (total > payload_len) {   /* never: the kernel sized the payload */
		int32_t err = -EIO;
		memcpy(e->hdr->in_out + 4, &err, sizeof(err));
		total = 0;
	}
	char *p = e->buf + PREFIX;
	for (int i = 1; i < count && total; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	e->hdr->io.payload_sz = (uint32_t)total;
	if (e == handling)
		e->replied = true;   /* committed when its handler returns */
	else
		commit_elsewhere(e);
	return (ssize_t)(OUT_HEADER + total);
}

void uring_stats(unsigned *queues, uint64_t *entries, uint64_t *requests, uint64_t *helped)
{
	*queues = 0;
	*entries = 0;
	*requests = 0;
	*helped = atomic_load_explicit(&offloaded, memory_order_relaxed);
	if (!atomic_load(&active))
		return;
	*queues = nq;
	for (unsigned i = 0; i < nq; i++) {
		*entries += atomic_load_explicit(&Q[i].entries, memory_order_relaxed);
		*requests += atomic_load_explicit(&Q[i].requests, memory_order_relaxed);
	}
}
