/*
 * Devices (the top): a backend, its flusher thread, its inodes and dirty
 * lists; their tunables and statistics; groups.  A spec's built-in backend
 * comes from the backends' registry (backend/backends.h), the one header
 * of src/backend the engine includes; a stacked device's (stack:ID/NAME,
 * wbc_dev_add_stacked) from the stack backend, given the lower device.
 */
#include <ctype.h>

#include "core/core.h"
#include "backend/backends.h"

/* The per-device tunables any spec takes, beside its backend's options. */
enum { T_MIN_RATIO, T_MAX_RATIO, T_MAX_BYTES, T_STRICT, T_ON_ERROR, T_RETRY_TIMEOUT,
       T_CHUNK, T_THROTTLE, T_MAX_INFLIGHT, T_DIRTY_LIST, T_FILE_LOCK,
       /* ^ old policies, for experiments (wbcache lab) */
       T_NR };
static const char *const tunable_keys[T_NR] = {
	[T_MIN_RATIO] = "min_ratio", [T_MAX_RATIO] = "max_ratio", [T_MAX_BYTES] = "max_bytes",
	[T_STRICT] = "strict_limit", [T_ON_ERROR] = "on_error", [T_RETRY_TIMEOUT] = "retry_timeout",
	[T_CHUNK] = "chunk", [T_THROTTLE] = "throttle", [T_MAX_INFLIGHT] = "max_inflight",
	[T_DIRTY_LIST] = "dirty_list", [T_FILE_LOCK] = "file_lock",
};
#define TUNABLES_HELP "min_ratio=0..100, max_ratio=1..100, max_bytes=SIZE, " \
		      "strict_limit=0|1, on_error=retry|drop, retry_timeout=SECONDS, " \
		      "chunk=bw|SIZE, throttle=current|2011, max_inflight=N, " \
		      "dirty_list=buckets|list, file_lock=page|file"

/* The tunables that pick an old policy (for experiments, wbcache lab):
 * @val's index in @names (the first is the default), or -1. */
static int pick(const char *val, const char *const names[2])
{
	for (int i = 0; i < 2; i++)
		if (!strcmp(val, names[i]))
			return i;
	return -1;
}

/* Set tunable @k from @val; false when the value is out of its range. */
static bool set_tunable(struct wbc_dev *dev, int k, const char *val)
{
	uint64_t v = 0;
	if (k == T_DIRTY_LIST || k == T_FILE_LOCK) {
		static const char *const lists[2] = { [WBC_DIRTY_LIST_BUCKETS] = "buckets",
						      [WBC_DIRTY_LIST_LIST] = "list" };
		static const char *const locks[2] = { [WBC_FILE_LOCK_PAGE] = "page",
						      [WBC_FILE_LOCK_FILE] = "file" };
		int i = pick(val, k == T_DIRTY_LIST ? lists : locks);
		if (i >= 0)
			*(k == T_DIRTY_LIST ? &dev->dirty_list : &dev->file_lock) = i;
		return i >= 0;
	}
	if (k == T_ON_ERROR) {
		if (strcmp(val, "retry") && strcmp(val, "drop"))
			return false;
		dev->on_error = strcmp(val, "retry") ? WBC_ON_ERROR_DROP : WBC_ON_ERROR_RETRY;
		return true;
	}
	/* old policies, for experiments: chunk=SIZE writes at most SIZE of
	 * a file per pass (4M: Linux's MAX_WRITEBACK_PAGES before 2011; bw:
	 * half a second of the device's bandwidth); throttle=2011 (throttle.c,
	 * THE 2011 RULE) */
	if (k == T_CHUNK) {
		if (!strcmp(val, "bw")) {
			dev->chunk_bytes = 0;
			return true;
		}
		return !wbc_parse_size(val, &v) && (dev->chunk_bytes = v) > 0;
	}
	if (k == T_THROTTLE) {
		dev->throttle_2011 = !strcmp(val, "2011");
		return dev->throttle_2011 || !strcmp(val, "current");
	}
	/* max_inflight=N: at most N I/Os of the device in flight, whatever
	 * its backend could take (a fixed client-side limit, as NFS's
	 * 2017 throttling of writes to the server) */
	if (k == T_MAX_INFLIGHT)
		return !wbc_parse_size(val, &v) && v >= 1 && v <= 65536 &&
		       (dev->max_inflight = (unsigned)v);
	if (k == T_RETRY_TIMEOUT) {
		double secs;
		if (wbc_parse_time(val, &secs))
			return false;
		dev->retry_timeout_ns = wbc_secs_to_ns(secs);
		return true;
	}
	if (wbc_parse_size(val, &v))
		return false;
	switch (k) {
	case T_MIN_RATIO:
		dev->min_ratio = (unsigned)v;
		return v <= 100;
	case T_MAX_RATIO:
		dev->max_ratio = (unsigned)v;
		return v >= 1 && v <= 100;
	case T_MAX_BYTES:
		dev->max_bytes = v;
		return v > 0;
	default:
		dev->strict_limit = v;
		return v <= 1;
	}
}

/* Options @opts (of @whole) each named, and once: "a,,b", "a,", ",a" and
 * "qd=1,qd=2" are refused (an empty one was skipped and a repeated
 * one's last value won, unsaid): 0, or -EINVAL with a message. */
static int opts_check(const char *opts, const char *whole, char *msg, size_t msglen)
{
	for (const char *tok = opts; tok;) {
		const char *next = strchr(tok, ',');
		size_t len = next ? (size_t)(next - tok) : strlen(tok);
		size_t kl = strcspn(tok, "=,");
		if (!len) {
			snprintf(msg, msglen, "empty option in device spec '%s'", whole);
			return -EINVAL;
		}
		for (const char *t = opts; t < tok; t = strchr(t, ',') + 1)
			if (strcspn(t, "=,") == kl && !strncmp(t, tok, kl)) {
				snprintf(msg, msglen, "option '%.*s' given twice in device spec '%s'",
					 (int)kl, tok, whole);
				return -EINVAL;
			}
		tok = next ? next + 1 : NULL;
	}
	return 0;
}

/*
 * Take the per-device tunables out of a spec's comma-separated options,
 * leaving the backend's own in place, and return them in *@tun (a new
 * string, "k=v,k=v", or "").  A spec's options begin after "model:" (the
 * model's options), else after the first comma (after the path of file:
 * and dir:, after stack:ID/NAME, after "mem", "model", "opener" and
 * "stack"): a tunable is the same option in every one of them, first or
 * not.  0, or -EINVAL (an empty option, or one given twice) or -ENOMEM
 * with a message.
 */
static int split_dev_opts(char *spec, char **tun, char *msg, size_t msglen)
{
	bool model = !strncmp(spec, "model:", 6);
	char *opts = model ? spec + 6 : strchr(spec, ',');
	if (opts && !model)
		opts++;   /* after the comma */
	int err = opts && (*opts || !model) ? opts_check(opts, spec, msg, msglen) : 0;
	if (err)
		return err;
	size_t cap = strlen(spec) + 1, tn = 0;
	if (!(*tun = calloc(1, cap))) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	/* the options kept are compacted in place, from @opts on */
	char *out = opts, *tok = opts;
	bool kept = false;
	while (tok) {
		char *next = strchr(tok, ',');
		size_t len = next ? (size_t)(next - tok) : strlen(tok);
		bool tunable = false;
		for (int i = 0; i < T_NR; i++) {
			size_t kl = strlen(tunable_keys[i]);
			if (len > kl && !strncmp(tok, tunable_keys[i], kl) && tok[kl] == '=')
				tunable = true;
		}
		if (tunable) {
			if (tn)
				(*tun)[tn++] = ',';
			memcpy(*tun + tn, tok, len);
			tn += len;
		} else {
			/* the backend's: keep it */
			if (kept)
				*out++ = ',';
			memmove(out, tok, len);
			out += len;
			kept = true;
		}
		tok = next ? next + 1 : NULL;
	}
	if (opts) {
		/* no option left after the comma that began them: no comma */
		if (!kept && opts[-1] == ',')
			out--;
		*out = '\0';
	}
	return 0;
}

/* Set @dev's tunables from @tun ("k=v,k=v"; NULL or "": none), for a
 * device of cache @c: 0, or -EINVAL with a message for an unknown key or
 * a bad value. */
static int parse_tunables(struct wbc_dev *dev, const char *tun, const wbc_cache *c,
			  char *msg, size_t msglen)
{
	for (const char *tok = tun; tok && *tok;) {
		const char *next = strchr(tok, ',');
		size_t len = next ? (size_t)(next - tok) : strlen(tok);
		int k = T_NR;
		for (int i = 0; i < T_NR; i++) {
			size_t kl = strlen(tunable_keys[i]);
			if (len > kl && !strncmp(tok, tunable_keys[i], kl) && tok[kl] == '=')
				k = i;
		}
		char val[64];
		size_t kl = k < T_NR ? strlen(tunable_keys[k]) + 1 : 0, vlen = len - kl;
		bool ok = k < T_NR && vlen < sizeof(val);
		if (ok) {
			memcpy(val, tok + kl, vlen);
			val[vlen] = '\0';
			ok = set_tunable(dev, k, val);
		}
		if (!ok) {
			snprintf(msg, msglen, "bad device tunable '%.*s' (" TUNABLES_HELP ")",
				 (int)len, tok);
			return -EINVAL;
		}
		tok = next ? next + 1 : NULL;
	}
	if (dev->min_ratio > dev->max_ratio) {
		snprintf(msg, msglen, "min_ratio=%u above max_ratio=%u", dev->min_ratio,
			 dev->max_ratio);
		return -EINVAL;
	}
	/* a device's own cap under two pages, as the cache's dirty_bytes
	 * (cache.c): a strict device paused at nearly every page */
	if (dev->max_bytes && dev->max_bytes < 2 * (uint64_t)c->page_size) {
		snprintf(msg, msglen, "max_bytes=%llu: must be at least two pages (%zu bytes)",
			 (unsigned long long)dev->max_bytes, 2 * c->page_size);
		return -EINVAL;
	}
	if (dev->strict_limit && c->thresh * dev->max_ratio / 100 < 2) {
		snprintf(msg, msglen, "max_ratio=%u with strict_limit=1: under two pages of the "
			 "cache's %llu-page dirty threshold", dev->max_ratio,
			 (unsigned long long)c->thresh);
		return -EINVAL;
	}
	return 0;
}

/* Take @r percent for a new device from what the devices' min_ratio may
 * add up to: the guaranteed shares cannot add up to more than the whole
 * (the kernel's bdi_set_min_ratio refuses that).  0, or -EINVAL with a
 * message. */
static int reserve_min_ratio(wbc_cache *c, unsigned r, char *msg, size_t msglen)
{
	int err = 0;
	pthread_mutex_lock(&c->dev_lock);
	if (c->min_ratio_sum + r > 100) {
		snprintf(msg, msglen, "min_ratio=%u: the devices' min_ratio would add up to "
			 "%u, over 100", r, c->min_ratio_sum + r);
		err = -EINVAL;
	} else {
		c->min_ratio_sum += r;
	}
	pthread_mutex_unlock(&c->dev_lock);
	return err;
}

static void release_min_ratio(wbc_cache *c, unsigned r)
{
	pthread_mutex_lock(&c->dev_lock);
	c->min_ratio_sum -= r;
	pthread_mutex_unlock(&c->dev_lock);
}

/*
 * Make a device of backend @ops/@ctx with the tunables in @tun.  On
 * failure the backend is not destroyed: the caller keeps it.  @reserved:
 * the caller took the device's min_ratio (reserve_min_ratio) and releases
 * it on failure.
 */
static int dev_add_be(wbc_cache *c, const struct wbc_backend_ops *ops, void *ctx,
		      const char *tun, const char *what, bool reserved, wbc_dev **out,
		      char *msg, size_t msglen)
{
	struct wbc_dev *dev = wbc_zalloc(sizeof(*dev));
	struct backend *be = calloc(1, sizeof(*be));
	if (!dev || !be || names_init(dev)) {
		free(dev);
		free(be);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	dev->max_ratio = 100;
	dev->retry_timeout_ns = WBC_RETRY_TIMEOUT_NS;
	int err = tun && *tun ? opts_check(tun, tun, msg, msglen) : 0;
	if (!err)
		err = parse_tunables(dev, tun, c, msg, msglen);
	unsigned taken = 0;     /* what this call added to the sum: released on failure */
	if (!err && !reserved && !(err = reserve_min_ratio(c, dev->min_ratio, msg, msglen)))
		taken = dev->min_ratio;
	if (!err)
		err = backend_init(be, ops, ctx, msg, msglen);
	if (!err && be->dio_align > c->page_size) {
		/* every write of such a page fails with EINVAL: refuse now,
		 * not retry it forever */
		/* (an NBD server's minimum block size too, which no
		 * direct=0 lifts) */
		bool local = !strncmp(what, "file:", 5) || !strncmp(what, "dir:", 4) ||
			     !strncmp(what, "opener", 6);
		snprintf(msg, msglen, "page size %zu is below the %zu-byte block size %s on "
			 "%s: use pages of at least %zu bytes%s",
			 c->page_size, be->dio_align,
			 local ? "that O_DIRECT needs" : "the backend requires", what,
			 be->dio_align, local ? ", or direct=0" : "");
		err = -EINVAL;
	}
	if (err) {
		release_min_ratio(c, taken);
		names_destroy(dev);
		free(dev);
		free(be);
		return err;
	}
	/* a page is the least one I/O carries (a block device's
	 * max_sectors_kb is a soft limit the kernel splits at) */
	if (be->max_io < c->page_size)
		be->max_io = c->page_size;
	backend_max_file(be, c->page_size);
	dev->cache = c;
	dev->be = be;
	wbc_mutex_init(&dev->list_lock);
	wbc_mutex_init(&dev->work_lock);
	wbc_mutex_init(&dev->err_lock);
	wbc_cond_init(&dev->work_cond);
	wbc_cond_init(&dev->done_cond);
	atomic_store(&dev->flush_gen, 1);   /* a file never written: written_gen 0 */
	dev->flush_good = 1;
	list_init(&dev->work_list);
	atomic_store(&dev->write_bw, WBC_INIT_BW);
	atomic_store(&dev->avg_write_bw, WBC_INIT_BW);
	atomic_store(&dev->dirty_ratelimit, WBC_INIT_BW >> c->page_shift);
	wbc_mutex_init(&dev->bw_lock);
	dev->bw_stamp_ns = wbc_now_ns();
	if ((err = dirty_init(dev)) || (err = dev_io_init(dev)) || (err = flusher_start(dev))) {
		release_min_ratio(c, taken);
		dev_io_destroy(dev);
		dirty_destroy(dev);
		names_destroy(dev);
		free(dev);
		free(be);
		snprintf(msg, msglen, "cannot start the flusher: %s", strerror(-err));
		return err;
	}
	pthread_mutex_lock(&c->dev_lock);
	dev->id = c->nr_devs++;
	dev->next = c->devs;
	c->devs = dev;
	pthread_mutex_unlock(&c->dev_lock);
	*out = dev;
	return 0;
}

/* The largest file a stacked device's writes through @lower's cache may
 * reach: what its own writers are held to (a one-file device's asked
 * again: it may have grown). */
static uint64_t lower_max_file(wbc_dev *lower)
{
	struct backend *be = lower->be;
	return be->single ? backend_max_file(be, lower->cache->page_size)
			  : __atomic_load_n(&be->max_file, __ATOMIC_RELAXED);
}

/* The lower file of a stacked device (wbc_dev_add_stacked). */
struct stack_target {
	wbc_dev *lower;
	const char *name;
};

/*
 * A stacked device over a device of the same cache writes its data back
 * into that cache's pages: with a dirty limit of (nearly) all of the cache
 * its dirty and writeback pages can fill it, its writeback then finds no
 * page to write into the device under it, and nothing else frees one (a
 * writer paused for good, every flusher idle).  The cache's pages past the
 * limit are the room its writeback has (writers overshoot the limit by a
 * little each, its workers write up to a megabyte each): refused with
 * fewer than an eighth of the cache (16 pages of room still hung with 16
 * writers, 52 once in three).  stack_throttle=direct writes around the
 * lower device's cache: no room needed.
 */
static bool stack_direct(const char *opts)
{
	for (const char *p = opts; p && *p; p += strcspn(p, ","), p += *p == ',') {
		size_t n = strcspn(p, ",");
		if (n == 21 && !strncmp(p, "stack_throttle=direct", n))
			return true;
	}
	return false;
}

static int stack_room(wbc_cache *c, wbc_dev *lower, const char *opts, char *msg,
		      size_t msglen)
{
	uint64_t room = WBC_MAX(1, c->nr_pages / 8);
	if (lower->cache != c || c->thresh + room <= c->nr_pages || stack_direct(opts))
		return 0;
	snprintf(msg, msglen, "stack: the device under it is in the same cache, whose dirty "
		 "limit (%llu of its %llu pages) leaves the stacked device's writeback fewer "
		 "than %llu pages to write into it: lower dirty_ratio or dirty_bytes",
		 (unsigned long long)c->thresh, (unsigned long long)c->nr_pages,
		 (unsigned long long)room);
	return -EINVAL;
}

/*
 * The backend of a spec "stack:ID/NAME[,opts]" (@rest: after "stack:"):
 * file NAME of device ID of cache @c (its number in the order devices
 * were added, from 0).  0 or -errno with a message.
 */
static int stack_from_spec(wbc_cache *c, const char *rest, bool check,
			   const struct wbc_backend_ops **ops, void **ctx, char *msg, size_t msglen)
{
	char *end;
	errno = 0;
	unsigned long id = strtoul(rest, &end, 10);
	if (!isdigit((unsigned char)*rest) || *end != '/' || errno) {
		snprintf(msg, msglen, "bad stacked device spec 'stack:%s' (expected "
			 "stack:ID/NAME[,opts], ID the number of an earlier device)", rest);
		return -EINVAL;
	}
	const char *name = end + 1;
	size_t nlen = strcspn(name, ",");
	char *nm = strndup(name, nlen);
	if (!nm) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	wbc_dev *lower = NULL;
	pthread_mutex_lock(&c->dev_lock);
	for (struct wbc_dev *d = c->devs; d; d = d->next)
		if (d->id == id)
			lower = d;
	pthread_mutex_unlock(&c->dev_lock);
	int err;
	if (!lower) {
		snprintf(msg, msglen, "stack:%lu: no device %lu in this cache (devices are "
			 "numbered from 0 in the order they were added)", id, id);
		err = -EINVAL;
	} else if (check) {
		err = stack_spec_check(name[nlen] ? name + nlen + 1 : "", msg, msglen);
	} else if (!(err = stack_room(c, lower, name + nlen, msg, msglen))) {
		err = stack_backend_new(lower, lower->cache, lower_max_file(lower), nm,
					name[nlen] ? name + nlen + 1 : "", ops, ctx, msg, msglen);
	}
	free(nm);
	return err;
}

/* @check: the spec parsed, nothing made (dev_spec_check, never with
 * @stack; @out unused) */
static int dev_add(wbc_cache *c, const char *spec, const struct file_opener *opener,
		   const struct stack_target *stack, bool check, wbc_dev **out, char *msg,
		   size_t msglen)
{
	char dummy[8];
	if (!msg || !msglen) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	msg[0] = '\0';
	if (!c || !spec || (!out && !check)) {
		snprintf(msg, msglen, "missing argument");
		return -EINVAL;
	}
	char *bspec = strdup(spec);
	if (!bspec) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	/* the tunables are checked before the backend is made (a bad one
	 * opens nothing, creates nothing), then given to the device; so is
	 * the devices' min_ratio sum, the share taken now */
	struct wbc_dev probe = { .max_ratio = 100 };
	char *tun = NULL;
	int err = split_dev_opts(bspec, &tun, msg, msglen);
	if (!err)
		err = parse_tunables(&probe, tun, c, msg, msglen);
	bool reserved = !err && !(err = reserve_min_ratio(c, probe.min_ratio, msg, msglen));
	const struct wbc_backend_ops *ops = NULL;
	void *ctx = NULL;
	if (!err && stack && !(err = stack_room(c, stack->lower, bspec, msg, msglen)))   /* "stack[,opts]" */
		err = stack_backend_new(stack->lower, stack->lower->cache,
					lower_max_file(stack->lower), stack->name,
					bspec[5] ? bspec + 6 : "", &ops, &ctx, msg, msglen);
	else if (!err && !strncmp(bspec, "stack:", 6))
		err = stack_from_spec(c, bspec + 6, check, &ops, &ctx, msg, msglen);
	else if (!err && check)
		err = backend_spec_check(bspec, opener != NULL, msg, msglen);
	else if (!err)
		err = backend_create(bspec, opener, &ops, &ctx, msg, msglen);
	free(bspec);
	if (check) {
		/* nothing made: the share taken only to see it fit */
	} else if (!err) {
		err = dev_add_be(c, ops, ctx, tun, spec, true, out, msg, msglen);
		if (err)
			ops->destroy(ctx);
	}
	if ((err || check) && reserved)
		release_min_ratio(c, probe.min_ratio);
	free(tun);
	wbc_msg_one_line(msg);
	return err;
}

int dev_spec_check(wbc_cache *c, const char *spec, bool opener, char *msg, size_t msglen)
{
	/* an opener spec is checked as one: the function is never called */
	struct file_opener op = { 0 };
	return dev_add(c, spec, opener ? &op : NULL, NULL, true, NULL, msg, msglen);
}

int wbc_dev_add_backend_msg(wbc_cache *c, const struct wbc_backend_ops *ops, void *ctx,
			    const char *opts, wbc_dev **out, char *msg, size_t msglen)
{
	char dummy[8];
	if (!msg || !msglen) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	msg[0] = '\0';
	if (!c || !ops || !out) {
		snprintf(msg, msglen, "missing argument");
		return -EINVAL;
	}
	char what[64];
	snprintf(what, sizeof(what), "backend '%s'", ops->name ? ops->name : "?");
	int err = dev_add_be(c, ops, ctx, opts, what, false, out, msg, msglen);
	wbc_msg_one_line(msg);
	return err;
}

int wbc_dev_add_backend(wbc_cache *c, const struct wbc_backend_ops *ops, void *ctx,
			const char *opts, wbc_dev **out)
{
	return wbc_dev_add_backend_msg(c, ops, ctx, opts, out, NULL, 0);
}

int wbc_dev_add_msg(wbc_cache *c, const char *spec, wbc_dev **out, char *msg, size_t msglen)
{
	return dev_add(c, spec, NULL, NULL, false, out, msg, msglen);
}

int wbc_dev_add_stacked(wbc_cache *c, wbc_dev *lower, const char *name, const char *opts,
			wbc_dev **out, char *msg, size_t msglen)
{
	if (!lower || !name) {
		if (msg && msglen)
			snprintf(msg, msglen, "missing argument");
		return -EINVAL;
	}
	struct stack_target st = { .lower = lower, .name = name };
	char *spec;
	if (asprintf(&spec, "stack%s%s", opts && *opts ? "," : "", opts ? opts : "") < 0)
		return -ENOMEM;
	int err = dev_add(c, spec, NULL, &st, false, out, msg, msglen);
	free(spec);
	return err;
}

int wbc_dev_add_opener(wbc_cache *c, int fs_fd, const char *opts, wbc_open_fn open,
		       void *ctx, unsigned open_flags, wbc_dev **out, char *msg,
		       size_t msglen)
{
	if (!opts || !open || fs_fd < 0 || (open_flags & ~WBC_OPENER_REOPEN)) {
		if (msg && msglen) {
			if (open_flags & ~WBC_OPENER_REOPEN)
				snprintf(msg, msglen, "unknown open_flags 0x%x (0 or "
					 "WBC_OPENER_REOPEN)", open_flags);
			else if (fs_fd < 0)
				snprintf(msg, msglen, "fs_fd %d is not a file descriptor", fs_fd);
			else
				snprintf(msg, msglen, "missing argument");
		}
		return -EINVAL;
	}
	struct file_opener op = { .fn = open, .ctx = ctx, .fs_fd = fs_fd, .flags = open_flags };
	char *spec;
	if (asprintf(&spec, "opener%s%s", *opts ? "," : "", opts) < 0)
		return -ENOMEM;
	int err = dev_add(c, spec, &op, NULL, false, out, msg, msglen);
	free(spec);
	return err;
}

int wbc_dev_add(wbc_cache *c, const char *spec, wbc_dev **out)
{
	return wbc_dev_add_msg(c, spec, out, NULL, 0);
}

void *wbc_dev_backend(wbc_dev *dev, const struct wbc_backend_ops **ops)
{
	if (!dev)
		return NULL;
	if (ops)
		*ops = dev->be->ops;
	return dev->be->ctx;
}

int wbc_dev_backend_stats(wbc_dev *dev, struct wbc_backend_stats *st)
{
	if (!dev || !st)
		return -EINVAL;
	const struct wbc_backend_ops *ops = dev->be->ops;
	memset(st, 0, sizeof(*st));
	/* a table from before stats() is shorter: never read past it */
	if (ops->size < offsetof(struct wbc_backend_ops, stats) + sizeof(ops->stats) ||
	    !ops->stats)
		return -EOPNOTSUPP;
	ops->stats(dev->be->ctx, st);
	return 0;
}

int wbc_dev_sync(wbc_dev *dev)
{
	if (!dev)
		return -EINVAL;
	return flusher_queue_sync(dev);
}

/* Detach every inode still on the dirty lists (cache close, after sync). */
static void release_listed_inodes(struct wbc_dev *dev)
{
	struct dirty_batch b;
	struct inode *ino;
	dirty_drain(dev);
	dirty_batch_init(&b);
	for (;;) {
		if (!(ino = dirty_next(dev, &b))) {
			if (!dirty_take(dev, &b, UINT64_MAX, UINT64_MAX, NULL))
				return;
			continue;
		}
		pthread_mutex_lock(&ino->lock);
		uint64_t left = ino->nr_dirty;
		pthread_mutex_unlock(&ino->lock);
		if (left) {
			/* Sync failed to clean them (or a caller wrote during
			 * close): the data is lost and counted. */
			atomic_fetch_add(&dev->cache->st_lost, left << dev->cache->page_shift);
			inode_drop_all_pages(ino);
		}
		dirty_requeue(ino, false, false);
	}
}

/* Stop @dev: its handles closed, its flusher and backend ended.  Its
 * struct stays (and in the cache's list) for dev_free(): other devices'
 * flushers and writers still walk the list until every one is stopped.
 * Returns the error of the backend's flush after the files closed since
 * its last flush of the whole device (the cache's sync's): a backend whose
 * close does I/O asynchronously (rados: a size write, an unlock) reports
 * its failure there.  Those closes are the files closed here (a file left
 * open at wbc_cache_close()), the ones whose last reference that sync let
 * go after its flush (written and closed), and the lower file a stacked
 * device of the same cache, stopped before, closed. */
int dev_stop(struct wbc_dev *dev)
{
	handles_close_dev(dev);
	flusher_stop(dev);
	release_listed_inodes(dev);
	int err = 0;
	if (atomic_load_explicit(&dev->be->closes, memory_order_relaxed) !=
	    atomic_load_explicit(&dev->be->flushed_closes, memory_order_relaxed) &&
	    !dev_dead_error(dev, wbc_now_ns()))
		err = backend_flush(dev->be, NULL, false);
	if (err)
		atomic_fetch_add(&dev->cache->st_flush_errors, 1);
	backend_destroy(dev->be);
	free(dev->be);
	dev->be = NULL;
	return err;
}

/* Free a stopped device (nothing runs that could reach it any more). */
void dev_free(struct wbc_dev *dev)
{
	dev_io_destroy(dev);
	dirty_destroy(dev);
	size_t left = names_destroy(dev);
	assert(!left);
	(void)left;
	pthread_mutex_destroy(&dev->list_lock);
	pthread_mutex_destroy(&dev->work_lock);
	pthread_mutex_destroy(&dev->err_lock);
	pthread_mutex_destroy(&dev->bw_lock);
	pthread_mutex_destroy(&dev->io_lock);
	pthread_cond_destroy(&dev->work_cond);
	pthread_cond_destroy(&dev->done_cond);
	pthread_cond_destroy(&dev->io_cond);
	free(dev);
}

int wbc_dev_stats(wbc_dev *dev, struct wbc_dev_stats *st)
{
	if (!dev || !st)
		return -EINVAL;
	struct wbc_cache *c = dev->cache;
	uint64_t ps = c->page_size;
	memset(st, 0, sizeof(*st));
	uint64_t unclean = (uint64_t)ctr_unclean(&dev->ctr);
	uint64_t dirty = WBC_MIN((uint64_t)ctr_dirty(&dev->ctr), unclean);
	st->dirty_bytes = dirty * ps;
	st->writeback_bytes = (unclean - dirty) * ps;
	st->wb_thresh_bytes = (uint64_t)dev_wb_thresh(dev, (double)c->thresh) * ps;
	st->write_bw = atomic_load(&dev->write_bw);
	st->avg_write_bw = atomic_load(&dev->avg_write_bw);
	st->dirty_ratelimit = atomic_load(&dev->dirty_ratelimit) * ps;
	st->written_back_bytes = atomic_load(&dev->completed_bytes);
	st->dirtied_bytes = (uint64_t)pcount_sum(&dev->dirtied_pages) * ps;
	/* without the list lock (only the flusher takes it): the inbox first,
	 * so a file the flusher moves from it to a bucket meanwhile is
	 * counted once or twice, never not at all */
	uint64_t inbox = (uint64_t)dirty_inbox_count(dev);
	st->files_dirty = count_read(&dev->nr_b_dirty) + inbox;
	st->files_io = count_read(&dev->nr_b_io) + atomic_load(&dev->nr_taken);
	st->files_more_io = count_read(&dev->nr_b_more_io);
	st->dirty_buckets = count_read(&dev->nr_buckets);
	uint64_t now = wbc_now_ns(), since = atomic_load(&dev->fail_since);
	long long at_risk = atomic_load(&dev->at_risk_pages);
	st->at_risk_bytes = (uint64_t)WBC_MAX(at_risk, 0) * ps;
	/* with no page at risk (the failed ones truncated away) the clock
	 * says nothing (dev_dead_error): not failing */
	st->failing_ns = since && now > since && at_risk > 0 ? now - since : 0;
	st->dead_error = dev_dead_error(dev, now);
	st->pauses = atomic_load(&dev->st_pauses);
	st->paused_ns = atomic_load(&dev->st_paused_ns);
	return 0;
}

int wbc_dev_debug(wbc_dev *dev, struct wbc_dev_debug *st)
{
	if (!dev || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	for (int i = 0; i < LOCK_HIST_BUCKETS; i++) {
		st->list_lock_hold_hist[i] = atomic_load(&dev->list_lock_stat.hist[i]);
		st->list_lock_holds += st->list_lock_hold_hist[i];
	}
	st->list_lock_max_hold_ns = atomic_load(&dev->list_lock_stat.max_ns);
	for (int i = 0; i < LOCK_HIST_BUCKETS; i++)
		st->list_lock_cpu_hist[i] = atomic_load(&dev->list_lock_cpu_stat.hist[i]);
	st->list_lock_max_cpu_ns = atomic_load(&dev->list_lock_cpu_stat.max_ns);
	st->list_lock_waits = atomic_load(&dev->list_lock_waits);
	st->list_lock_writer_takes = atomic_load(&dev->list_lock_writer_takes);
	st->queue_io_passes = atomic_load(&dev->queue_io_passes);
	st->queue_io_moved = atomic_load(&dev->queue_io_moved);
	st->queue_io_walked = atomic_load(&dev->queue_io_walked);
	st->queue_io_max_moved = atomic_load(&dev->queue_io_max_moved);
	st->queue_io_max_walked = atomic_load(&dev->queue_io_max_walked);
	st->file_lock_waits = atomic_load(&dev->file_lock_waits);
	st->file_lock_wait_ns = atomic_load(&dev->file_lock_wait_ns);
	st->dirty_list = (uint32_t)dev->dirty_list;
	st->file_lock = (uint32_t)dev->file_lock;
	for (int j = 0; j <= INBOX_RETRY; j++)
		st->inbox_push_retries += atomic_load_explicit(&dev->inbox[j].retries,
							       memory_order_relaxed);
	return 0;
}

/* The last entry counts every hold from 2^30 ns on (lock_stat_record):
 * it has no upper bound but the longest hold. */
static uint64_t hist_percentile(const uint64_t *hist, uint64_t max_ns, double pct)
{
	uint64_t n = 0, seen = 0;
	for (int b = 0; b < LOCK_HIST_BUCKETS; b++)
		n += hist[b];
	if (!n)
		return 0;
	for (int b = 0; b < LOCK_HIST_BUCKETS - 1; b++) {
		seen += hist[b];
		if ((double)seen >= (double)n * pct / 100)
			return WBC_MIN(b ? 1ull << b : 1, max_ns);
	}
	return max_ns;
}

uint64_t wbc_lock_hold_percentile(const struct wbc_dev_debug *st, double pct)
{
	return st ? hist_percentile(st->list_lock_hold_hist, st->list_lock_max_hold_ns, pct) : 0;
}

uint64_t wbc_lock_cpu_percentile(const struct wbc_dev_debug *st, double pct)
{
	return st ? hist_percentile(st->list_lock_cpu_hist, st->list_lock_max_cpu_ns, pct) : 0;
}

/* ------------------------------------------------------------------ */
/* groups                                                               */

int wbc_group_create(wbc_cache *c, uint64_t limit_bytes, unsigned limit_ratio, wbc_group **out)
{
	if (!c || !out || limit_ratio > 100 || (!limit_bytes && !limit_ratio))
		return -EINVAL;
	/* bytes at least two pages, then in pages rounded up, as the
	 * cache's dirty_bytes and a device's max_bytes */
	if (limit_bytes && limit_bytes < 2 * (uint64_t)c->page_size)
		return -EINVAL;
	uint64_t t = limit_bytes ? limit_pages(c, limit_bytes) : c->nr_pages * limit_ratio / 100;
	if (t < 2)
		return -EINVAL;
	struct wbc_group *g = wbc_zalloc(sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cache = c;
	g->thresh = WBC_MIN(t, c->nr_pages);
	g->bg_thresh = g->thresh / 2;
	pthread_mutex_lock(&c->dev_lock);
	g->next = atomic_load(&c->groups);
	atomic_store_explicit(&c->groups, g, memory_order_release);
	pthread_mutex_unlock(&c->dev_lock);
	*out = g;
	return 0;
}

/* Group @g's counters on @dev, made at the first open in @g of a file of
 * @dev: 0, or -ENOMEM. */
int group_dev_make(struct wbc_group *g, struct wbc_dev *dev)
{
	struct wbc_cache *c = dev->cache;
	int err = 0;
	pthread_mutex_lock(&c->dev_lock);
	struct wbc_group_dev *gd = atomic_load(&g->devs);
	while (gd && gd->dev != dev)
		gd = gd->next;
	if (!gd) {
		if ((gd = wbc_zalloc(sizeof(*gd)))) {
			gd->dev = dev;
			gd->next = atomic_load(&g->devs);
			atomic_store_explicit(&g->devs, gd, memory_order_release);
		} else {
			err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&c->dev_lock);
	return err;
}

int wbc_group_stats(wbc_group *g, struct wbc_group_stats *st)
{
	if (!g || !st)
		return -EINVAL;
	uint64_t ps = g->cache->page_size;
	uint64_t unclean = (uint64_t)ctr_unclean(&g->ctr);
	uint64_t dirty = WBC_MIN((uint64_t)ctr_dirty(&g->ctr), unclean);
	struct dom d;
	dom_group(g, &d);
	st->dirty_bytes = dirty * ps;
	st->writeback_bytes = (unclean - dirty) * ps;
	st->thresh_bytes = g->thresh * ps;
	st->bg_thresh_bytes = g->bg_thresh * ps;
	st->setpoint_bytes = (uint64_t)d.setpoint * ps;
	st->limit_bytes = (uint64_t)d.limit * ps;
	return 0;
}
