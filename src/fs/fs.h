/*
 * Layer fs, the files: inode lookup, lifetime and reuse, the name shards
 * of a device (fs/inode.c), the waits on an inode, the handle table
 * (fs/handle.c), and the error sequences of files and devices
 * (fs/errseq.c).  Above mm and bio; below writeback, which holds inodes
 * by reference, and the I/O paths (core/file.c).
 *
 * LOCKS (the global order is at the top of src/internal.h).  fs owns, per
 * inode, inode->lock (made with the inode; what it guards: src/objects.h
 * and mm/page.h), inode->wait and inode->rwsem (made here, taken by the
 * I/O paths), inode->file_lock (made here, taken only under the old
 * policy file_lock=file, by core's writers and writeback's
 * write_inode_pages: writeback/writeback.h); per device, the name shards' locks and err_lock; and the
 * handle table's lock.  The shards' locks, err_lock and the handle
 * table's lock are leaves.  Call iget, iput, inode_sync_size,
 * inode_drop_all_pages, names_* and handle_* with no lock held (they take
 * inode->lock or a shard's lock, and call the backend);
 * inode_wait_locked, inode_wake_locked, page_wait_unlocked and
 * drop_pages_from_locked with inode->lock held; igrab under any lock (it
 * takes none).
 *
 * TEARDOWN.  The last iput of a file drops its pages and closes its
 * backend object.  A thread that drops many files in a row (a completion
 * batch of the writeback layer) brackets the drops with
 * inode_teardown_begin/_end: their pages go back in one lru_lock hold and
 * their memory is kept, at inode_teardown_flush.
 */
#ifndef WBC_FS_H
#define WBC_FS_H

#include "mm/mm.h"
#include "bio/bio.h"

/* errseq.c */
void errseq_record(struct errseq *e, int err);
/* A new handle's sample (*@since) and whether the error no handle was
 * told yet is its to tell (*@inherit). */
void errseq_sample(const struct errseq *e, uint32_t *since, bool *inherit);
/* Returns the error a handle that sampled *@since (and *@inherit) has not
 * seen, advances the sample and marks the error seen; 0 when none. */
int errseq_check_advance(struct errseq *e, uint32_t *since, bool *inherit);
/* The same without marking the error seen (a WBC_O_NOERRSEEN handle's). */
int errseq_check_advance_quiet(struct errseq *e, uint32_t *since, bool *inherit);
/* An error since the sample (not one inherited), without advancing or
 * marking anything. */
int errseq_peek(const struct errseq *e, uint32_t since);
/* Record @err in the device's error sequence (err_lock). */
void dev_record_error(struct wbc_dev *dev, int err);
/* ... and in every open file's of the device written since flush
 * generation @gen began (inode->written_gen >= @gen: a flush of the whole
 * device failed, and any of their writes may be what it lost).  No lock
 * held. */
void dev_record_error_files(struct wbc_dev *dev, int err, uint64_t gen);

/* inode.c */
struct inode *iget(struct wbc_dev *dev, const char *name, bool create,
		   struct wbc_group *group, int *err);
void igrab(struct inode *ino);
void iput(struct inode *ino);
bool inode_removing(struct inode *ino, bool on, bool unhash);
void inode_wait_locked(struct inode *ino);
void inode_wake_locked(struct inode *ino);
/* ino->lock held: wait once for @p's PG_LOCKED to clear (the caller looks
 * the page up again afterwards). */
void page_wait_unlocked(struct inode *ino, struct page *p);
int inode_sync_size(struct inode *ino);
int names_init(struct wbc_dev *dev);
/* Returns the inodes still hashed (0 when all were released). */
size_t names_destroy(struct wbc_dev *dev);
/* Give back half of the inode memory kept for reuse. */
void names_trim(struct wbc_dev *dev);
void inode_drop_all_pages(struct inode *ino);
/* Remove the pages of @ino from index @first on (ino->lock held): see
 * inode.c. */
void drop_pages_from_locked(struct inode *ino, uint64_t first);
void inode_prefetch_unhash(const struct inode *ino);   /* a hint */
void inode_prefetch_page(const struct inode *ino);     /* a hint */
/* The teardown batch of the calling thread (see above): begin and end
 * bracket it; flush finishes the teardowns so far (a batch that moves on
 * to another device's files flushes first). */
void inode_teardown_begin(void);
void inode_teardown_flush(void);
void inode_teardown_end(void);

/* handle.c: a handle (wbc_file *) names a slot of a table of fixed
 * chunks and its generation, so that a handle used after close is
 * answered -EBADF instead of touching freed memory. */
struct wbc_file {
	struct inode *inode;
	/* atomic: handles_close_dev reads it of every slot, also of one
	 * another cache's thread fills meanwhile (it then finds the
	 * generation changed) */
	struct wbc_dev *_Atomic dev;
	uint32_t err_since;         /* errseq sample: inode->lock */
	/* an error no handle was told when this one opened is this one's to
	 * tell, once, unless it is told or healed first (errseq.c) */
	bool err_inherit;
	bool direct;                /* WBC_O_DIRECT: I/O to the backend, not the cache */
	/* WBC_O_NOERRSEEN: tells errors without marking them seen */
	bool noerrseen;
	bool remover;               /* wbc_file_remove's own (inode->nr_removers) */
};
/* How handle_open opens: through the cache, direct, or as a remover's
 * handle (through the cache, also counted in inode->nr_removers in the
 * same hold of the inode's lock, so that a remover never sees another's
 * handle before it counts as a remover's). */
enum handle_kind { HANDLE_CACHED, HANDLE_DIRECT, HANDLE_REMOVER };
/* Open @name on @dev (iget) into a new handle of @kind: 0 and *@out, or
 * -errno; -EBUSY when the file has handles of the other kind (a file is
 * open either through the cache or direct, never both at once:
 * inode->nr_cached_handles, nr_direct_handles), or UINT8_MAX removers.
 * @noerrseen: the handle tells errors without marking them seen. */
int handle_open(struct wbc_dev *dev, const char *name, bool create, struct wbc_group *group,
		enum handle_kind kind, bool noerrseen, wbc_file **out);
/* The file of handle @h; NULL when @h is not an open handle. */
struct wbc_file *handle_get(wbc_file *h);
/* Close handle @h (its inode's reference put): 0, or -EBADF. */
int handle_close(wbc_file *h);
/* Close every handle that belongs to @dev (cache close). */
void handles_close_dev(struct wbc_dev *dev);

#endif
