/*
 * wbcache private headers, all of them: the umbrella that tests and
 * benchmarks include to look inside.  The engine's own files include only
 * their layer's header (src/<layer>/<layer>.h), which includes the
 * layers below it.
 *
 * LAYERS (bottom up; each calls only the layers below it, and
 * scripts/check-layers checks the #include lines that say so):
 *
 *   base       src/base       helpers below everything, backends included
 *   bio        src/bio        the engine's side of the backend interface
 *   mm         src/mm         arena, pages and their states, page index,
 *                             page counters
 *   fs         src/fs         inodes, names, handles, error sequences
 *   writeback  src/writeback  dirty lists, bio pool, completion, writing
 *                             a file, the flusher
 *   throttle   src/throttle   thresholds, domains, bandwidth, the throttle
 *   core       src/core       the public API: cache, devices, file I/O
 *
 * The backends (src/backend) are written on the public interface
 * (include/wbcache_backend.h) and base alone.  The shared structures
 * (cache, group, device, inode) are in src/objects.h, each field marked
 * with the layer that owns it.  Where a lower layer needs something of an
 * upper one, the upper one sets a hook at open (struct page_alloc_ops in
 * mm/mm.h, struct wb_throttle_ops in writeback/writeback.h).  Each
 * layer's header says which locks it owns and what may be held when
 * calling in; the global order of all of them is this one:
 *
 * LOCK ORDERING (outermost first; a thread holding a lock may take only
 * locks listed below it):
 *
 *   inode->rwsem        pthread rwlock: shared by pread/pwrite, exclusive
 *                       for truncate and for a direct write that extends
 *                       the file (core/file.c).  Never taken by
 *                       flusher or completion.
 *   inode->file_lock    only under file_lock=file (the old policy, for
 *                       experiments): held by a writer across each page's
 *                       claim, copy and dirtying (core/file.c; never while
 *                       it waits for a free page, for its page locked or
 *                       under writeback, or is throttled), and by
 *                       write_inode_pages (the flusher, fsync, a direct
 *                       open) from the collection of each run of pages
 *                       until its submission, never across a wait for a
 *                       free bio: the one lock held across a backend's
 *                       submit (see below).  Never taken by completion.
 *                       Taken with rwsem held or not.
 *     inode->lock       the inode's page index, the flags of its pages
 *                       (except the lock-free PG_LOCKED release, see
 *                       pg_flags in mm/page.h), i_size, backend_size,
 *                       counters, errseq.
 *       cache->lru_lock free list, CLOCK hand, page->inode/index binding,
 *                       nr_cached (mm/page_alloc.c).  Reclaim holds
 *                       lru_lock and only TRYLOCKS inode->lock.
 *   dev->list_lock      the time buckets (b_dirty), b_io, b_more_io
 *                       (writeback/dirty.c) (leaf).  Only the device's
 *                       flusher takes it (or close, after the flusher
 *                       stopped): it changes the lists in O(1) splices
 *                       under it; stats read the counts without it.
 *                       Writers take no lock to dirty a file: they push
 *                       it on the device's inbox with a CAS (lock-free),
 *                       and the flusher takes an inbox slot's files with
 *                       another.  Under dirty_list=list (the old policy,
 *                       for experiments) writers and completions take it
 *                       too, in mark_inode_dirty, with no lock held but
 *                       inode->file_lock (file_lock=file) and the lock
 *                       bit of the page dirtied (no one waits for a
 *                       page's lock under list_lock), and queue_io
 *                       walks b_dirty under it.
 *   (marking)           not a lock, a wait: a writer that makes a clean
 *                       file dirty is counted from its CAS on ino->state
 *                       until the file is filed (in the inbox, or under
 *                       list_lock), holding the lock bit of the page it
 *                       dirtied (and inode->file_lock, file_lock=file);
 *                       a sync (the flusher's thread) waits for those
 *                       counts before it drains (writeback/dirty.c,
 *                       dirty_wait_marks), holding no lock at all.
 *   name_shard->lock    one shard of a device's name hash (fs/inode.c),
 *                       the drop of the last reference of an inode in it
 *                       (refs is atomic; iput takes the lock only to drop
 *                       to zero), the shard's free inodes (taken
 *                       again after a teardown, never held across it)
 *                       and its orphan errors (fs/inode.c) (leaf).  iget waits on the shard's condition
 *                       (name_shard->wait) while the backend opens,
 *                       closes or removes the name (inode->hstate),
 *                       holding no other lock; the opener and the closer
 *                       hold none of the engine's across that open or
 *                       close (the remover holds its inode's rwsem and
 *                       waits for its writeback, neither of which a
 *                       thread in iget holds).
 *   dev->bw_lock        rate estimation of one device
 *                       (throttle/bandwidth.c; only ever trylocked, so no
 *                       thread waits for it)
 *     cache->dev_lock   the device list, group creation (core/device.c)
 *       dev->work_lock  (wakeup_flusher_threads kicks under dev_lock)
 *       cache->prop_lock  flexible proportions of the devices
 *                       (throttle/bandwidth.c)
 *     dev->io_lock      bio pool, in-flight count, busy time
 *                       (writeback/pool.c; dev_busy_ns) (leaf)
 *   dev->work_lock      work queue, flusher wakeups (writeback/flusher.c)
 *                       (leaf).
 *   dev->err_lock       the device's errseq (fs/errseq.c) (leaf).
 *   handle table lock   (fs/handle.c, leaf).
 *   backend-private locks (the mem backend's name shards and object
 *   rwlocks, the model's queue lock, the
 *   file backend's submission lock and descriptor-cache lock, the stack
 *   backend's queue lock) are leaves:
 *   backends call end_io with none of them held; an opener device's
 *   callback runs under the descriptor-cache lock and takes none of ours.
 *
 * A stacked device's backend (src/backend/stack.c) calls the public
 * functions of the device under it: its workers and flush with no lock
 * of ours held, its resize with the upper file's inode->rwsem held
 * (truncate).  So every lock of a device comes before every lock of the
 * device under it, and the device under it never calls up: the order
 * above holds within each device, and devices are ordered top down
 * (a device can only stand on one made before it: no cycle).
 *
 * No mutex is held across backend submission, a wait for I/O, a sleep, or a
 * read-in from the backend (an invariant of the design): waits use condition
 * variables, which release the mutex.  inode->rwsem is not a mutex: a
 * writer holds it shared across its throttle pauses and a read-in, as the
 * kernel's writer holds i_rwsem in balance_dirty_pages; a truncate waiting
 * for it exclusive goes before new readers (it is made writer-preferring,
 * like i_rwsem: with readers first, writers whose holds overlapped kept a
 * truncate out for good), so nothing takes it shared twice in one thread.  The one exception is the old policy
 * file_lock=file, kept for experiments because it is what it renders:
 * inode->file_lock is held across the submission of a file's run and a
 * writer's read of a partial page it claimed; neither waits for anything
 * that takes that lock.
 */
#ifndef WBC_INTERNAL_H
#define WBC_INTERNAL_H

#include "objects.h"
#include "bio/bio.h"
#include "mm/mm.h"
#include "fs/fs.h"
#include "writeback/writeback.h"
#include "throttle/throttle.h"
#include "core/core.h"

#endif
