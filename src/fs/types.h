/*
 * The files layer's types that the shared objects (src/objects.h) embed:
 * the error sequence of a file or device, and a shard of a device's name
 * hash.  Types only: what fs offers is declared in fs/fs.h.
 */
#ifndef WBC_FS_TYPES_H
#define WBC_FS_TYPES_H

#include <pthread.h>
#include <stdint.h>

struct inode;

/* errseq (fs/errseq.c): per-file writeback error sequence */
struct errseq {
	uint32_t seq;          /* bumped on each recorded error */
	int err : 24;          /* latest error (negative errno) */
	unsigned seen : 1;     /* the latest error was reported to a handle */
	/* the latest error is a failed write whose pages stay dirty, to be
	 * retried (on_error=retry): once they are all written nothing was
	 * lost, and it counts as seen (end_io.c) */
	unsigned retried : 1;
	unsigned healed : 1;   /* ... and they are: an inheriting handle is not told */
};
_Static_assert(sizeof(struct errseq) == 8, "errseq: two words (the inode's layout)");

#define NAME_SHARDS 64
struct name_shard {             /* two cache lines each */
	pthread_mutex_t lock;       /* the shard's chains, the drop of the
				     * last reference of its inodes, and
				     * its free inodes */
	struct inode **tab;
	uint32_t size, n;
	/* inodes torn down, kept for reuse (linked by hash_next, oldest
	 * first): a file written back and dropped by the completion thread
	 * gives its memory to a later file a writer creates, without a
	 * free() and a malloc() in two threads' heaps */
	struct inode *free, **free_tail;
	uint32_t nfree;
	/* an inode of the shard left its open or close (hstate, fs/inode.c) */
	pthread_cond_t wait;
	/* errors of files gone with no handle told (fs/inode.c): newest
	 * first, at most ORPHANS_MAX */
	struct orphan_err *orphans;
	uint32_t norphans;
} __attribute__((aligned(64)));

#endif
