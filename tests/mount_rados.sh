#!/usr/bin/env bash
# `wbcache mount -o backend=rados:...`: file data in a RADOS pool (the Ceph
# test cluster), metadata in BACKING_DIR.  Data written through the mount
# reads back after a remount from RADOS (BACKING_DIR holds only sparse
# files of the right sizes, no data); each file's objects are named by its
# backing inode's file handle, so a rename keeps its data; an unlinked
# file's objects go, every one, also those of a file removed before its
# writeback, and of a whole tree at the end; a truncate reaches the
# backing file's size; bad backend options exit 2 with nothing mounted.
# Skips (77) where FUSE or the test cluster cannot be used here.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
[ -n "${WBCACHE_CEPH_SKIP:-}" ] && skip "$WBCACHE_CEPH_SKIP"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/tsan-ceph.supp"
dir=${WBCACHE_CEPH_DIR:-}
if [ -z "$dir" ]; then
	out=$(scripts/ceph-test-cluster start "$top/c" 2>&1); rc=$?
	[ $rc = 77 ] && skip "no Ceph test cluster: $(echo "$out" | tail -n1)"
	[ $rc = 0 ] || fail "ceph-test-cluster: $out"
	dir=$top/c
	extra_cleanup() { scripts/ceph-test-cluster stop "$dir"; }
fi
conf=$dir/ceph.conf
prefix=m$$
# objs: this test's objects in the pool, one a line, into $top/objs.mine
# (bounded: a placement group that serves no more hung this test for good;
# run in this shell, not in $(...), where its fail ended only the
# subshell and an empty list passed the check of objects left)
objs() {
	timeout 120 rados -c "$conf" -p wbc ls >"$top/objs.txt" ||
		fail "rados ls: the cluster did not list the pool in 120 s"
	grep "^$prefix/" "$top/objs.txt" | sort >"$top/objs.mine"
}
nobjs() { wc -l <"$top/objs.mine"; }

for bad in "backend=nbd:x" "rados_conf=$conf" "backend=rados:wbc,rados_conf=/nonexistent" \
	   "backend=rados:nosuchpool,rados_conf=$conf" "backend=rados:wbc,rados_conf=$conf,object_size=3M"; do
	msg=$("$W" mount "$bk" "$mt" -o "$bad" 2>&1); rc=$?
	[ $rc -eq 2 ] || fail "-o $bad: exit $rc, not 2 ($msg)"
	echo "-o $bad: $msg"
	mounted "$mt" && fail "-o $bad mounted anyway"
done

opts="backend=rados:wbc/$prefix,rados_conf=$conf,object_size=1M,mem=64M"
do_mount "$opts"
head -c 5000000 /dev/urandom >"$top/model"
cp "$top/model" "$mt/a" || fail "cp into the mount"
echo hello >"$mt/small"
mkdir "$mt/d" && cp "$top/model" "$mt/d/b" || fail "a file in a directory"
cmp "$top/model" "$mt/a" || fail "read back differs"
getfattr -n user.wbcache.sync "$mt" >/dev/null 2>&1 || fail "sync through the mount"
# wbcache stat shows the remote transport: a window, round trips measured
st=$("$W" stat "$mt") || fail "wbcache stat"
echo "$st" | grep -E '^Remote'
win=$(echo "$st" | awk '/^RemoteWindow:/ {print $2}')
rtt=$(echo "$st" | awk '/^RemoteBaseRttUs:/ {print $2}')
[ "${win:-0}" -gt 0 ] || fail "stat: no RemoteWindow"
[ "${rtt:-0}" -gt 0 ] || fail "stat: no RemoteBaseRttUs after writes"
"$W" stat --json "$mt" | grep -q '"RemoteWindow_kB"' || fail "stat --json: no RemoteWindow_kB"
objs; n=$(nobjs)
echo "objects after sync: $n"
[ "$n" -ge 10 ] || fail "expected the files' objects in the pool: $(cat "$top/objs.mine")"
[ "$(stat -c %s "$bk/a")" = 5000000 ] || fail "backing size $(stat -c %s "$bk/a")"
cmp -s "$top/model" "$bk/a" && fail "the data is in BACKING_DIR, not only in RADOS"
mv "$mt/a" "$mt/renamed" || fail "rename"
truncate -s 1000000 "$mt/d/b" || fail "truncate"
do_umount || fail "umount: $(cat "$top/umount.log")"
[ "$(stat -c %s "$bk/d/b")" = 1000000 ] || fail "backing size after truncate: $(stat -c %s "$bk/d/b")"
[ "$(du -k "$bk/renamed" | cut -f1)" -lt 100 ] || fail "backing file not sparse"

do_mount "$opts"
cmp "$top/model" "$mt/renamed" || fail "after a remount: the renamed file differs"
[ "$(cat "$mt/small")" = hello ] || fail "after a remount: small file"
cmp -n 1000000 "$top/model" "$mt/d/b" || fail "after a remount: the truncated file differs"
[ "$(stat -c %s "$mt/d/b")" = 1000000 ] || fail "after a remount: truncated size"
objs; before=$(nobjs)
rm "$mt/renamed" || fail "rm"
# (removed when the kernel forgets the file, which rm does not wait for:
# polled, 10 s)
for _ in $(seq 100); do
	getfattr -n user.wbcache.sync "$mt" >/dev/null 2>&1
	objs; after=$(nobjs)
	[ $((before - after)) -eq 5 ] && break
	sleep 0.1
done
echo "objects: $before before the unlink, $after after"
[ $((before - after)) -eq 5 ] || fail "the unlinked file's 5 objects are not all gone: $before -> $after"
# a file removed while its data is only in the cache, and a whole tree
for i in 1 2 3; do echo "tmp $i" >"$mt/tmp$i"; rm "$mt/tmp$i" || fail "rm tmp$i"; done
rm -r "$mt/small" "$mt/d" || fail "rm -r"
do_umount || fail "umount: $(cat "$top/umount.log")"
objs; left=$(cat "$top/objs.mine")
[ -z "$left" ] || fail "objects left in the pool after every file was removed: $left"
# a file still open when the daemon ends (SIGTERM: no release comes)
# keeps its size for the next mount
do_mount "$opts"
exec 7>"$mt/held"
head -c 300000 "$top/model" >&7
do_umount TERM
exec 7>&-
do_mount "$opts"
[ "$(stat -c %s "$mt/held")" = 300000 ] || fail "a file open at SIGTERM: size $(stat -c %s "$mt/held") after a remount"
cmp -n 300000 "$top/model" "$mt/held" || fail "a file open at SIGTERM: its data after a remount"
rm "$mt/held"
do_umount || fail "umount: $(cat "$top/umount.log")"
# a daemon killed (-9) with a file open leaves its lock: the next mount's
# open of it is refused (EBUSY) until `wbcache rados-unlock SPEC --file
# BACKING_FILE` breaks it (the name in the pool is the backing file's
# handle, which only --file finds)
do_mount "$opts"
exec 7>"$mt/crashed"
echo before >&7
kill -9 "$pid"
wait_gone "$pid" 100 || fail "the daemon survived kill -9"
pid=
exec 7>&-
fusermount3 -u "$mt" || fail "fusermount3 -u after kill -9"
do_mount "$opts"
echo again 2>/dev/null >>"$mt/crashed" && fail "a file locked by a dead mount opened"
msg=$("$W" rados-unlock "rados:wbc/$prefix,conf=$conf" --file "$mt/crashed" 2>&1) &&
	fail "rados-unlock --file through the mount: $msg"
echo "$msg" | grep -q "BACKING_DIR" || fail "rados-unlock --file through the mount: $msg"
"$W" rados-unlock "rados:wbc/$prefix,conf=$conf" --file "$bk/crashed" || fail "rados-unlock --file"
echo again >>"$mt/crashed" || fail "the file after rados-unlock --file"
rm "$mt/crashed"
do_umount || fail "umount: $(cat "$top/umount.log")"
echo "mount_rados: ok"
