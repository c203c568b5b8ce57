/*
 * Device specs: the built-in backend a spec names ("mem", "model[:opts]",
 * "file:PATH[,opts]", "dir:PATH[,opts]", an NBD URI ("nbd://HOST/EXPORT[,opts]",
 * "nbd+unix:///EXPORT?socket=PATH[,opts]"), "rados:POOL[/PREFIX][,opts]",
 * and "opener[,opts]" for
 * wbc_dev_add_opener), made with its options.  The per-device tunables
 * were taken out of the spec before (device.c).
 */
#include "backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* backend_create, or with @check (backend_spec_check) only its parse
 * step: nothing made, opened or connected.  @opener: the spec may be
 * "opener[,opts]" (given @op, NULL when checking). */
static int create(const char *spec, bool opener, const struct file_opener *op, bool check,
		  const struct wbc_backend_ops **ops, void **ctx, char *err, size_t errlen)
{
	if (!strcmp(spec, "mem"))
		return check ? 0 : mem_backend_new(false, ops, ctx);
	if (!strcmp(spec, "model"))
		return check ? 0 : model_backend_new("", ops, ctx, err, errlen);
	bool mem = !strncmp(spec, "mem,", 4);
	if (mem || !strncmp(spec, "model,", 6)) {
		/* what is left after the tunables: not one */
		const char *o = strchr(spec, ',') + 1;
		/* the reason before the spec, which may be long */
		snprintf(err, errlen, "bad option '%.*s' (%s) in device spec '%s'",
			 (int)strcspn(o, ","), o, mem ? "mem takes only the device tunables" :
			 "model's options follow a colon: model:bw=100M,...", spec);
		return -EINVAL;
	}
	if (!strncmp(spec, "model:", 6))
		return check ? model_spec_check(spec + 6, err, errlen) :
			       model_backend_new(spec + 6, ops, ctx, err, errlen);
	if (nbd_is_uri(spec))
		return check ? nbd_spec_check(spec, err, errlen) :
			       nbd_backend_new(spec, ops, ctx, err, errlen);
	if (!strncmp(spec, "rados:", 6))
		return check ? rados_spec_check(spec + 6, err, errlen) :
			       rados_backend_new(spec + 6, ops, ctx, err, errlen);
	bool dir;
	size_t skip;
	if (opener && (!strcmp(spec, "opener") || !strncmp(spec, "opener,", 7))) {
		dir = true;
		skip = 6;
	} else if (!strncmp(spec, "file:", 5)) {
		dir = false;
		skip = 5;
	} else if (!strncmp(spec, "dir:", 4)) {
		dir = true;
		skip = 4;
	} else {
		snprintf(err, errlen, "unknown device spec '%s' (expected mem, model[:opts], file:PATH, "
			 "dir:PATH, stack:ID/NAME, rados:POOL[/PREFIX] or an NBD URI: "
			 "nbd://HOST/EXPORT, nbd+unix:///EXPORT?socket=PATH)", spec);
		return -EINVAL;
	}
	char *copy = skip == 6 ? malloc(strlen(spec) + 16) : strdup(spec + skip);
	if (copy && skip == 6)   /* a placeholder path, for messages */
		sprintf(copy, "(opener)%s", spec + 6);
	if (!copy)
		return -ENOMEM;
	unsigned qd = 0;        /* from the block device (file_backend_new) */
	uint64_t max_io = 0;
	bool direct = true, uring = true;
	char *opts = strchr(copy, ',');
	if (opts)
		*opts++ = '\0';
	int rc = 0;
	while (opts && *opts && !rc) {
		char *next = strchr(opts, ',');
		if (next)
			*next++ = '\0';
		char *val = strchr(opts, '=');
		if (val)
			*val++ = '\0';
		/* the option's own range (a mount takes some of them among
		 * its own, whose uring= is another one); a value that is no
		 * number is told as one out of it ("uring=x" was "bad option
		 * 'uring=x' in device spec (expected key=number)") */
		const char *range = !strcmp(opts, "qd") ? "1..4096" :
				    !strcmp(opts, "max_io") ? "512..256M" :
				    !strcmp(opts, "direct") || !strcmp(opts, "uring") ? "0|1" : NULL;
		uint64_t v = 0;
		bool num = val && !wbc_parse_size(val, &v);
		if (num && !strcmp(opts, "qd") && v >= 1 && v <= 4096)
			qd = (unsigned)v;
		else if (num && !strcmp(opts, "max_io") && v >= 512 && v <= (256u << 20))
			max_io = v;
		else if (num && !strcmp(opts, "direct") && v <= 1)
			direct = v;
		else if (num && !strcmp(opts, "uring") && v <= 1)
			uring = v;
		else {
			if (range)
				snprintf(err, errlen, "bad value for device option %s: '%s' (%s=%s)",
					 opts, val ? val : "", opts, range);
			else
				snprintf(err, errlen, "unknown device option '%s' (qd=1..4096, "
					 "max_io=512..256M, direct=0|1, uring=0|1)", opts);
			rc = -EINVAL;
		}
		opts = next;
	}
	if (!rc && !*copy) {
		snprintf(err, errlen, "no path in device spec '%s'", spec);
		rc = -EINVAL;
	}
	if (!rc && !check)
		rc = file_backend_new(copy, dir, direct, uring, qd, (size_t)max_io, op, ops, ctx,
				      err, errlen);
	free(copy);
	return rc;
}

int backend_create(const char *spec, const struct file_opener *opener,
		   const struct wbc_backend_ops **ops, void **ctx, char *err, size_t errlen)
{
	return create(spec, opener != NULL, opener, false, ops, ctx, err, errlen);
}

int backend_spec_check(const char *spec, bool opener, char *err, size_t errlen)
{
	return create(spec, opener, NULL, true, NULL, NULL, err, errlen);
}
