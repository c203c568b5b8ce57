/*
 * Turns bytes into text for the parsers that take users' text, and checks
 * what each says against an oracle.  The first byte picks the parser
 * (readable in a corpus file), the rest, up to a NUL, is the text:
 *
 *   s  wbc_parse_size, against a reference parser (digits, K/M/G/T, i, B)
 *   t  wbc_parse_time, against a reference (a plain decimal, s/ms/us)
 *   d  a device spec (wbc_dev_add_msg's): its parse step alone
 *      (dev_spec_check: no file, socket or cluster is touched), and for
 *      mem, model and stack:, which touch nothing outside, the whole
 *      wbc_dev_add_msg too, which must agree with it
 *   o  wbc_dev_add_opener's options ("opener,TEXT"), the parse step
 *   m  the mount's -o (tools/mount/options.c), then the device spec the
 *      mount would make of it, the parse step
 *   (any other first byte: one of these by its value)
 *
 * Every refusal must come with a message.  Shared by the libFuzzer target
 * (fuzz/fuzz_spec.c, `make fuzz`) and the regression test
 * (tests/fuzz_spec.c), which replays tests/fuzz-spec-corpus/.  Returns
 * normally when all checks pass; aborts on a mismatch.
 */
#ifndef WBC_FUZZ_SPEC_H
#define WBC_FUZZ_SPEC_H
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcache.h"
#include "internal.h"
/* the mount defines its own (a check of its mutexes), unused here */
#undef assert_held
#include "../tools/mount/mount.h"

/* options.c's parse_opts keeps the rados spec in the mount's state */
struct mnt M;

static void fs_check(int ok, const char *what, const char *text)
{
	if (!ok) {
		fprintf(stderr, "fuzz_spec: %s: '%s'\n", what, text);
		abort();
	}
}

/* wbc_parse_size as documented: digits, then K, M, G or T (any case),
 * then "i" and "B" (either, both, neither, any case), nothing else; at
 * most UINT64_MAX */
static int fs_size_ref(const char *s, uint64_t *out)
{
	const char *p = s;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	uint64_t v = 0;
	bool over = false;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			over = true;
		v = v * 10 + d;
	}
	unsigned shift = 0;
	const char *sfx = "KMGT";
	const char *at = *p ? strchr(sfx, toupper((unsigned char)*p)) : NULL;
	if (at) {
		shift = 10 * (unsigned)(at - sfx + 1);
		p++;
		if (*p == 'i' || *p == 'I')
			p++;
		if (*p == 'b' || *p == 'B')
			p++;
	}
	if (*p || over || (shift && v > UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

static void fs_size(const char *text)
{
	uint64_t got = 7, want = 9;
	int rc = wbc_parse_size(text, &got), ref = fs_size_ref(text, &want);
	fs_check(rc == ref, "wbc_parse_size: accepts what the reference refuses, or the other "
		 "way", text);
	fs_check(rc || got == want, "wbc_parse_size: wrong value", text);
}

static void fs_time(const char *text)
{
	/* the reference: [digits][.digits] with a digit, then "", s, ms or
	 * us; strtod (the C locale's point) for the value */
	const char *p = text;
	size_t ip = strspn(p, "0123456789");
	p += ip;
	size_t fp = 0;
	if (*p == '.') {
		p++;
		fp = strspn(p, "0123456789");
		p += fp;
	}
	double unit = !strcmp(p, "") || !strcmp(p, "s") ? 1 : !strcmp(p, "ms") ? 1e3 :
		      !strcmp(p, "us") ? 1e6 : 0;
	bool shape = (ip || fp) && unit;
	double ref = shape ? strtod(text, NULL) : 0;
	double got = -1;
	int rc = wbc_parse_time(text, &got);
	if (rc) {
		/* refused: not the shape, or a number no double holds */
		fs_check(!shape || !isfinite(ref) || ref > 1e300, "wbc_parse_time: refuses a "
			 "plain decimal", text);
		return;
	}
	fs_check(shape, "wbc_parse_time: accepts what is not a plain decimal", text);
	fs_check(isfinite(got) && got >= 0, "wbc_parse_time: not a finite time", text);
	ref /= unit;
	fs_check(fabs(got - ref) <= 1e-9 * ref || fabs(got - ref) < 1e-300,
		 "wbc_parse_time: wrong value", text);
	(void)wbc_secs_to_ns(got);   /* saturates: no cast that overflows */
}

/* A cache for the device specs: one mem device (device 0, for stack:0/...) */
static wbc_cache *fs_cache(void)
{
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	cfg.page_size = 4096;
	cfg.mem_bytes = 64 * 4096;
	wbc_cache *c;
	wbc_dev *d;
	fs_check(!wbc_cache_open(&cfg, &c), "cache open", "");
	fs_check(!wbc_dev_add(c, "mem", &d), "mem device", "");
	return c;
}

/* Whether the whole wbc_dev_add_msg of @spec touches nothing outside the
 * process (no file, socket or cluster): mem, model and stack: only, by
 * the spec's first word (what is refused as unknown touches nothing) */
static bool fs_inside(const char *spec)
{
	return !strncmp(spec, "mem", 3) || !strncmp(spec, "model", 5) ||
	       !strncmp(spec, "stack:", 6);
}

/* @spec with its first option moved to the end (the options begin after
 * "model:", else after the first comma), or NULL: fewer than two */
static char *fs_rotate(const char *spec)
{
	const char *opts = !strncmp(spec, "model:", 6) ? spec + 6 : strchr(spec, ',');
	if (opts && *opts == ',')
		opts++;
	const char *second = opts ? strchr(opts, ',') : NULL;
	if (!second)
		return NULL;
	char *r;
	fs_check(asprintf(&r, "%.*s%s,%.*s", (int)(opts - spec), spec, second + 1,
			  (int)(second - opts), opts) >= 0, "asprintf", spec);
	return r;
}

/* @spec through the checks; its message (of the parse step) into @out
 * when not NULL (256 bytes) */
static void fs_dev(const char *spec, bool opener, char *out)
{
	wbc_cache *c = fs_cache();
	char msg[256] = "", msg2[256] = "";
	int rc = dev_spec_check(c, spec, opener, msg, sizeof(msg));
	fs_check(!rc || *msg, "a refused device spec without a message", spec);
	fs_check(rc <= 0, "dev_spec_check: not 0 or -errno", spec);
	/* a spec's options are a set: their order changes nothing */
	char *rot = fs_rotate(spec);
	if (rot) {
		int rrc = dev_spec_check(c, rot, opener, msg2, sizeof(msg2));
		fs_check(!rc == !rrc, "the options' order changes whether a spec is taken", spec);
		free(rot);
		msg2[0] = '\0';
	}
	if (!opener && fs_inside(spec)) {
		wbc_dev *d = NULL;
		int rc2 = wbc_dev_add_msg(c, spec, &d, msg2, sizeof(msg2));
		fs_check(!rc2 || *msg2, "wbc_dev_add_msg: refused without a message", spec);
		/* the parse step says what the whole add says of a spec that
		 * does not parse; and what parses, mem and model make (a
		 * stacked device may still fail at its making) */
		if (rc)
			fs_check(rc2 == rc && !strcmp(msg, msg2), "wbc_dev_add_msg and its parse "
				 "step disagree on a bad spec", spec);
		else if (strncmp(spec, "stack:", 6))
			fs_check(!rc2, "wbc_dev_add_msg refuses a spec its parse step accepts",
				 spec);
	}
	fs_check(!wbc_cache_close(c), "cache close", spec);
	if (out)
		memcpy(out, msg, sizeof(msg));
}

/* @text as -o; what it printed into *@msgp when not NULL (to free) */
static void fs_mount(const char *text, char **msgp)
{
	char *opts = strdup(text);
	fs_check(opts != NULL, "out of memory", text);
	struct wbc_config cfg;
	wbc_config_init(&cfg);
	char devopts[512] = "", fuseopts[256] = "";
	enum dio_mode dio = DIO_AUTO;
	struct mopts mo = { .entry = TIMEOUT_DEFAULT, .attr = TIMEOUT_DEFAULT,
			    .negative = TIMEOUT_DEFAULT, .threads = 16, .idle_threads = 16,
			    .uring = URING_AUTO };
	/* its messages go to stderr: caught, each refusal must have one */
	char *out = NULL;
	size_t outlen = 0;
	FILE *mem = open_memstream(&out, &outlen), *saved = stderr;
	fs_check(mem != NULL, "open_memstream", text);
	stderr = mem;
	int rc = parse_opts(opts, &cfg, devopts, sizeof(devopts), fuseopts, sizeof(fuseopts),
			    &dio, &mo);
	stderr = saved;
	fclose(mem);
	fs_check(rc == 0 || rc == -1, "parse_opts: not 0 or -1", text);
	fs_check(!rc || outlen, "parse_opts: refused without a message", text);
	fs_check(strlen(devopts) < sizeof(devopts) && strlen(fuseopts) < sizeof(fuseopts),
		 "parse_opts: past its buffers", text);
	if (msgp)
		*msgp = out;
	else
		free(out);
	free(opts);
	if (!rc) {
		(void)wbc_config_check(&cfg);
		/* the device the mount would add (main.c) */
		char *spec = NULL;
		if (M.remote && !strncmp(M.remote, "rados:", 6))
			fs_check(asprintf(&spec, "%s%s%s", M.remote, *devopts ? "," : "",
					  devopts) >= 0, "asprintf", text);
		else
			fs_check(asprintf(&spec, "opener%s%s", *devopts ? "," : "", devopts) >= 0,
				 "asprintf", text);
		fs_dev(spec, !strncmp(spec, "opener", 6), NULL);
		free(spec);
	}
	free(M.remote);
	M.remote = NULL;
}

static void fuzz_spec_run(const uint8_t *data, size_t size)
{
	if (!size)
		return;
	char *text = strndup((const char *)data + 1, size - 1);
	fs_check(text != NULL, "out of memory", "");
	static const char modes[] = "stdom";
	char mode = strchr(modes, data[0]) && data[0] ? (char)data[0] : modes[data[0] % 5];
	switch (mode) {
	case 's':
		fs_size(text);
		break;
	case 't':
		fs_time(text);
		break;
	case 'd':
		fs_dev(text, false, NULL);
		break;
	case 'o': {
		char *spec;
		fs_check(asprintf(&spec, "opener%s%s", *text ? "," : "", text) >= 0, "asprintf",
			 text);
		fs_dev(spec, true, NULL);
		free(spec);
		break;
	}
	default:
		fs_mount(text, NULL);
	}
	free(text);
}
#endif
