/*
 * The writeback layer's types that the shared objects (src/objects.h)
 * embed: the dirty lists' queues, an inbox slot, and the statistics of a
 * lock's hold times.  Types only: what writeback offers is declared in
 * writeback/writeback.h.
 */
#ifndef WBC_WRITEBACK_TYPES_H
#define WBC_WRITEBACK_TYPES_H

#include <stdatomic.h>
#include <stdint.h>

struct inode;

/* A singly linked queue of inodes (linked by wb_next): append, splice at
 * either end and pop from the head, each O(1) (iq_* in
 * writeback/writeback.h). */
struct ino_queue {
	struct inode *head, *tail;
};

/*
 * One CPU slot's inbox: a lock-free stack of the files writers on that CPU
 * dirtied, newest first, linked by wb_next.  Its top is one 16-byte word,
 * changed only by compare-and-swap: the newest file, the oldest (the
 * chain's end) and how many (dirty.c, inbox_pack).  A writer pushes with
 * one CAS; the flusher takes the whole chain with another and knows its
 * ends and length without a walk.
 */
struct inbox_slot {
	union inbox_top {
		unsigned __int128 v;
		uint64_t w[2];
	} top;
	/* files pushed here, not yet filed: counted before the push and
	 * dropped after the filing, so a file is always counted */
	atomic_llong n;
	atomic_ullong retries;      /* pushes that lost a CAS race */
	/* writers between their clean -> dirty CAS and the end of their
	 * filing, by the parity of the device's mark_epoch they entered
	 * under (dirty.c, mark_begin): a sync waits for the old parity's to
	 * drain.  Per slot, in the line the writer's push writes anyway. */
	atomic_long marking[2];
} __attribute__((aligned(64)));

/* lock hold times */
#define LOCK_HIST_BUCKETS 32
/* Hold times of one lock: bucket i counts holds in [2^(i-1), 2^i) ns. */
struct lock_stat {
	atomic_ullong hist[LOCK_HIST_BUCKETS];
	atomic_ullong max_ns;
};

#endif
