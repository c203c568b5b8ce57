#!/usr/bin/env bash
# Differential test: the same seeded random sequence of file-system
# operations (tests/mount_diff.py: opens with O_CREAT, O_EXCL, O_TRUNC,
# O_APPEND; reads and writes at random offsets, sparse, past the end;
# truncates; fsync; fallocate modes; renames incl. RENAME_NOREPLACE and
# RENAME_EXCHANGE; links, symlinks, directories, modes, explicit times,
# user xattrs; several descriptors per file, also of removed files) on the
# mount, with a 16M cache so that data is evicted and written back
# mid-sequence, and on a local directory: every result (value or errno)
# and every byte read must be the same; after `wbcache umount` the
# backing directory must equal the local one (types, modes, links, sizes,
# data, explicit mtimes, xattrs).  After each step every open descriptor
# is fstat'd on both sides (sizes compared; an ESTALE is a difference).
# Also: shared writable mmap, a truncate of a mapped file, sendfile,
# splice, O_DIRECT, UTIME_NOW/UTIME_OMIT, directory streams open while
# entries change, offsets up to ext4's 16 TiB limit; a read or a sync
# must not move an mtime or ctime.  Then concurrent workloads (threads
# and processes: O_APPEND writers, writers of disjoint ranges, a writer
# against a truncater, renames under readers, listings under churn) on
# each side, each checked for what any order allows.
# The mount is allow_other (steps run as another user too).  Even seeds
# mount with attr_timeout=0: each stat is the daemon's answer,
# not the kernel's copy of an earlier one.
# Fixed seeds: deterministic.  WBCACHE_DIFF_SEEDS, WBCACHE_DIFF_OPS:
# other seeds, another length; tests/mount_diff.py says how to minimise.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
SEEDS=${WBCACHE_DIFF_SEEDS:-"1 2 3 4 5 6 7 8"}
NOPS=${WBCACHE_DIFF_OPS:-3000}
rc=0
for seed in $SEEDS; do
	ref=$top/ref-$seed
	rm -rf "$bk"; mkdir -p "$bk" "$ref"
	do_mount "mem=16M,allow_other$([ $((seed % 2)) = 0 ] && echo ,attr_timeout=0)"
	python3 tests/mount_diff.py "$ref" "$mt" "$seed" "$NOPS" "$top/explicit" ||
		{ echo "seed $seed: the mount differs from a local directory"; rc=1; }
	do_umount || fail "seed $seed: wbcache umount failed: $(cat "$top/umount.log")"
	python3 tests/mount_diff.py --compare "$ref" "$bk" "$top/explicit" ||
		{ echo "seed $seed: BACKING_DIR differs after unmount"; rc=1; }
	rm -rf "$ref"
done
[ $rc = 0 ] || fail "differences found"
echo "ok: seeds $SEEDS, $NOPS operations each"
