/* Test helper: read a file's bytes straight from a device's backend,
 * bypassing the cache (for mem devices, whose contents no other process
 * can see).  Returns the backend size in *size and fills buf up to len. */
#ifndef WBC_BACKEND_UTIL_H
#define WBC_BACKEND_UTIL_H
#include "internal.h"

static inline int t_backend_read(wbc_dev *dev, const char *name, void *buf, size_t len,
				 uint64_t *size)
{
	void *obj;
	int err = backend_open(dev->be, name, false, &obj, size);
	if (err)
		return err;
	ssize_t n = *size ? backend_read_sync(dev->be, obj, buf, (size_t)WBC_MIN(len, *size), 0) : 0;
	backend_close(dev->be, obj);
	return n < 0 ? (int)n : 0;
}
#endif
