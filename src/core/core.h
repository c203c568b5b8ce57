/*
 * The top of the engine (src/core): the public API of wbcache.h on the
 * layers below.  The cache's lifetime, its tunables and statistics
 * (core/cache.c); devices, their tunables and statistics, and groups
 * (core/device.c); and the I/O paths of files: open and close, read,
 * write, truncate, fsync (core/file.c).  Nothing is above it: it may call
 * every layer, and it sets the calls the lower layers make up (the hooks
 * in struct wbc_cache) at open.
 *
 * LOCKS (the global order is at the top of src/internal.h).  core owns
 * cache->dev_lock: the device list and group creation; writeback and
 * throttle take it to walk the devices, and kick flushers (work_lock)
 * and count proportions (prop_lock) under it.  The I/O paths take
 * inode->rwsem (shared by pread and pwrite, exclusive for truncate)
 * before anything else, and call the throttle with no lock held but that
 * (pwrite pauses with rwsem shared, as the kernel's writer with i_rwsem:
 * src/internal.h).  Under
 * the old policy file_lock=file a writer takes inode->file_lock after
 * rwsem for each page it writes (claim, copy, dirtying: inode->lock and
 * under dirty_list=list the list lock are taken inside it), never across
 * a wait for a free page or the throttle.
 */
#ifndef WBC_CORE_H
#define WBC_CORE_H

#include "throttle/throttle.h"

/* device.c */
/* The parse step of wbc_dev_add_msg (@opener: of wbc_dev_add_opener's
 * "opener[,opts]") alone: 0, or -errno with the message it would give
 * for a spec that does not parse.  Nothing is made, opened or connected
 * (the parsers' fuzz target, fuzz/fuzz_spec.c). */
int dev_spec_check(wbc_cache *c, const char *spec, bool opener, char *msg, size_t msglen);
int dev_stop(struct wbc_dev *dev);
void dev_free(struct wbc_dev *dev);
int group_dev_make(struct wbc_group *g, struct wbc_dev *dev);

#endif
