#!/usr/bin/env bash
# A cache page smaller than the logical block size O_DIRECT needs is
# refused when the device is added (exit 2, a message naming the block
# size), never retried forever: on a loop device with 4 KiB sectors, as
# the device itself (file:) and under an ext4 on it (dir:, file: of a file
# there).  Pages of the block size, or direct=0, work.  Needs root and
# loop devices (skips otherwise).
set -u
BUILD=${WBCACHE_BUILD:-build/release}
W=$BUILD/wbcache
# long enough for a run that works; a refusal is immediate, and the bug
# this guards against ran until killed
LIMIT=60
SECTOR=4096
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root for a loop device"
command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null || skip "no losetup or mkfs.ext4"
tmp=$(mktemp -d /var/tmp/wbc-dio-XXXXXX)
loop= mnt=$tmp/mnt
cleanup() {
	mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
	[ -n "$loop" ] && losetup -d "$loop"
	rm -rf "$tmp"
}
trap cleanup EXIT
truncate -s 64M "$tmp/img"
loop=$(losetup -f --show --sector-size $SECTOR "$tmp/img" 2>/dev/null) || skip "cannot set up a loop device"
[ "$(cat /sys/block/"${loop#/dev/}"/queue/logical_block_size)" = $SECTOR ] ||
	skip "the loop device has no $SECTOR-byte sectors"

expect_refused() {   # expect_refused WHAT ARGS...: exit 2, the block size named
	local what=$1; shift
	out=$(timeout $LIMIT "$W" run "$@" --mem 64K --quiet 2>&1); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2: $out"
	echo "$out" | grep -q "$SECTOR-byte block size" || fail "$what: no message naming the block size: $out"
	echo "$what: $out"
}

# the device itself
expect_refused "file: on the device" dd --dev "file:$loop" --page-size 512 --size 1M

mkfs.ext4 -q "$loop" || fail "mkfs.ext4"
mkdir "$mnt"
mount "$loop" "$mnt" || skip "cannot mount"
expect_refused "dir: on its file system" fsmark --page-size 512 --dev "dir:$mnt" --files 100 \
	--file-size 1000
expect_refused "2 KiB pages" fsmark --page-size 2K --dev "dir:$mnt,qd=4" --files 10
expect_refused "file: of a file there" dd --dev "file:$mnt/img" --page-size 1K --size 1M
# (file: makes its file when missing: empty)
[ -z "$(ls -A "$mnt" | grep -v '^lost+found$\|^img$')" ] && [ ! -s "$mnt/img" ] ||
	fail "a refused run wrote: $(ls -l "$mnt")"

# (--keep: the files stay, to be counted)
out=$(timeout $LIMIT "$W" run fsmark --page-size 4K --dev "dir:$mnt" --files 100 --file-size 1000 \
	--mem 64K --quiet --keep 2>&1) || fail "4 KiB pages: $out"
out=$(timeout $LIMIT "$W" run fsmark --page-size 512 --dev "dir:$mnt,direct=0" --files 100 \
	--file-size 1000 --mem 64K --quiet --keep 2>&1) || fail "512-byte pages, direct=0: $out"
[ "$(ls "$mnt" | grep -c '^fsm\.')" = 200 ] || fail "the runs that work wrote $(ls "$mnt" | grep -c '^fsm\.') files"
echo "dio_align: ok"
