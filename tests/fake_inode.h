/* Synthetic inodes for tests of the dirty lists (internal API). */
#ifndef WBC_FAKE_INODE_H
#define WBC_FAKE_INODE_H

#include "testutil.h"
#include "internal.h"

/* An inode of @dev that never reaches a zero reference count (two held),
 * on no list; free() it when done. */
static inline struct inode *t_fake_inode(struct wbc_dev *dev)
{
	struct inode *ino = aligned_alloc(64, sizeof(*ino));   /* laid out by line */
	CHECK(ino && inode_addr_ok(ino));
	memset(ino, 0, sizeof(*ino));
	ino->dev = dev;
	atomic_init(&ino->refs, 2);
	return ino;
}

#endif
