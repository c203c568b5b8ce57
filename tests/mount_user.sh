#!/usr/bin/env bash
# A mount by an unprivileged user (the daemon not root: no file handles,
# a descriptor per file, and the backing directory's permissions apply to
# the daemon itself), in the default background mode:
#   - files created read-only (cp and install of a 0444 file, as git
#     makes its objects) keep their data: the daemon, which may not
#     reopen such a file for writing, writes through the create's own
#     descriptor (their data was accepted and then failed writeback);
#   - a writable open of a file the daemon may not write is refused
#     with EACCES at open, not accepted and lost at writeback;
#   - a hard link works;
#   - `wbcache umount` by that user writes back and unmounts.
# Needs root to become another user (setpriv) and a setuid fusermount3;
# makes /dev/fuse usable by others for the test where it is not.
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skip: needs root to run as another user"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: no setpriv"; exit 77; }
. tests/mountlib.bash
[ -u "$(command -v fusermount3)" ] || skip "fusermount3 is not setuid"
U=65534
as_user() { setpriv --reuid=$U --regid=$U --clear-groups "$@"; }
fuse_mode=$(stat -c %a /dev/fuse)
# (root cannot look into this user's mount: no allow_other)
listed() { grep -q " $mt fuse.wbcache " /proc/self/mounts; }
extra_cleanup() {
	listed && { as_user fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt"; }
	chmod "$fuse_mode" /dev/fuse
}
chmod o+rw /dev/fuse
chown $U:$U "$bk" "$mt"

as_user "$W" mount "$bk" "$mt" || fail "mount as user $U: exit $?"
src=$top/src
mkdir "$src"
seq 1 30000 >"$src/ro.txt"
head -c 300000 /dev/urandom >"$src/ro.bin"
chmod 0444 "$src"/*
chmod 755 "$src"
as_user cp "$src/ro.txt" "$mt/" || fail "cp of a 0444 file"
as_user install -m 0444 "$src/ro.bin" "$mt/ro.bin" || fail "install -m 0444"
as_user cmp "$mt/ro.txt" "$src/ro.txt" || fail "read back through the mount"
# a writable open of a file the daemon may not write: refused at open
msg=$(as_user sh -c "echo more >>'$mt/ro.txt'" 2>&1) && fail "append to a 0444 file succeeded"
echo "$msg" | grep -q "Permission denied" || fail "append to a 0444 file: '$msg'"
# a file the user may write, and a directory of read-only files
as_user sh -c "seq 1 1000 >'$mt/rw.txt'" || fail "a plain write"
as_user mkdir "$mt/d" && as_user sh -c "cd '$mt/d' && for i in 1 2 3; do echo \$i >f\$i; chmod 0444 f\$i; done" ||
	fail "small files made read-only"
# a hard link (AT_EMPTY_PATH needs a capability before Linux 6.10: /proc then)
as_user ln "$mt/rw.txt" "$mt/rw.link" || fail "ln as user $U"
[ "$(as_user stat -c %h "$mt/rw.txt")" = 2 ] || fail "link count $(as_user stat -c %h "$mt/rw.txt")"
out=$(as_user "$W" umount "$mt" 2>&1) || fail "umount as user $U: exit $?: $out"
listed && fail "still mounted after umount"
cmp "$bk/ro.txt" "$src/ro.txt" || fail "ro.txt in the backing directory"
cmp "$bk/ro.bin" "$src/ro.bin" || fail "ro.bin in the backing directory"
[ "$(stat -c %a "$bk/ro.bin")" = 444 ] || fail "ro.bin mode $(stat -c %a "$bk/ro.bin")"
[ "$(seq 1 1000)" = "$(cat "$bk/rw.txt")" ] || fail "rw.txt in the backing directory"
[ "$(stat -c %i "$bk/rw.txt")" = "$(stat -c %i "$bk/rw.link")" ] || fail "the link in the backing directory"
[ "$(cat "$bk/d/f1" "$bk/d/f2" "$bk/d/f3" | tr -d '\n')" = 123 ] || fail "the small files"
echo "mount_user: ok"
