/*
 * Device specs ("mem", "file:PATH[,opts]", "dir:PATH[,opts]") and sizes.
 */
#include "internal.h"

#include <ctype.h>
#include <math.h>

#define DEFAULT_QD 32

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

int wbc_parse_time(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || !(v >= 0) || !isfinite(v))
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

int backend_create(const char *spec, const struct backend_opener *opener,
		   struct backend **out, char *err, size_t errlen)
{
	if (!strcmp(spec, "mem"))
		return mem_backend_create(out, false);
	if (!strcmp(spec, "model"))
		return model_backend_create("", out, err, errlen);
	if (!strncmp(spec, "model:", 6))
		return model_backend_create(spec + 6, out, err, errlen);
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
		snprintf(err, errlen, "unknown device spec '%s' (expected mem, model[:opts], file:PATH or dir:PATH)", spec);
		return -EINVAL;
	}
	char *copy = skip == 6 ? malloc(strlen(spec) + 16) : strdup(spec + skip);
	if (copy && skip == 6)   /* a placeholder path, for messages */
		sprintf(copy, "(opener)%s", spec + 6);
	if (!copy)
		return -ENOMEM;
	unsigned qd = DEFAULT_QD;
	uint64_t max_io = 0;
	bool direct = true;
	char *opts = strchr(copy, ',');
	if (opts)
		*opts++ = '\0';
	int rc = 0;
	while (opts && *opts && !rc) {
		char *next = strchr(opts, ',');
		if (next)
			*next++ = '\0';
		char *val = strchr(opts, '=');
		uint64_t v = 0;
		if (!val || wbc_parse_size(val + 1, &v)) {
			snprintf(err, errlen, "bad option '%s' in device spec (expected key=number)", opts);
			rc = -EINVAL;
			break;
		}
		*val = '\0';
		if (!strcmp(opts, "qd") && v >= 1 && v <= 4096)
			qd = (unsigned)v;
		else if (!strcmp(opts, "max_io") && v >= 512 && v <= (256u << 20))
			max_io = v;
		else if (!strcmp(opts, "direct") && v <= 1)
			direct = v;
		else {
			snprintf(err, errlen, "bad device option '%s' (qd=1..4096, max_io=512..256M, direct=0|1)", opts);
			rc = -EINVAL;
		}
		opts = next;
	}
	if (!rc && !*copy) {
		snprintf(err, errlen, "device spec '%s' has no path", spec);
		rc = -EINVAL;
	}
	if (!rc)
		rc = file_backend_create(copy, dir, direct, qd, (size_t)max_io, opener, out, err,
					 errlen);
	free(copy);
	return rc;
}
