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
#   - a hard link works; a directory of mode 0644 is listed;
#   - fallocate on a 0444 file open for writing grows it;
#   - `wbcache umount` by that user writes back and unmounts;
#   - a file forgotten by the kernel while its writeback fails keeps its
#     data, reports the error at fsync and is written once there is room.
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
py=/usr/bin/python3; [ -x "$py" ] || py=$(command -v python3)
fuse_mode=$(stat -c %a /dev/fuse)
# (root cannot look into this user's mount: no allow_other)
listed() { grep -q " $mt fuse.wbcache " /proc/self/mounts; }
extra_cleanup() {
	listed && { as_user fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt"; }
	chmod "$fuse_mode" /dev/fuse
}
chmod o+rw /dev/fuse
chown $U:$U "$bk" "$mt"

# a mount fusermount3 refuses: its reason reaches the caller, exit 2
# (nothing mounted; it was exit 1 with fusermount3's message lost)
if ! grep -qs '^[[:space:]]*user_allow_other' /etc/fuse.conf; then
	out=$(as_user "$W" mount "$bk" "$mt" -o allow_other 2>&1); rc=$?
	[ $rc = 2 ] || fail "a refused allow_other mount: exit $rc: $out"
	echo "$out" | grep -q "user_allow_other" || fail "fusermount3's reason lost: $out"
	listed && fail "mounted anyway"
fi
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
# a directory its owner may read but not search (mode 0644): listed, as
# on a local file system (the daemon's opendir went through "." in it,
# which needs search permission: EACCES)
as_user mkdir "$mt/noexec" && as_user touch "$mt/noexec/a" "$mt/noexec/b" &&
	as_user chmod 0644 "$mt/noexec" || fail "a directory made unsearchable"
ls_out=$(as_user ls "$mt/noexec" 2>&1) && [ "$(echo $ls_out)" = "a b" ] ||
	fail "ls of a directory of mode 0644: $ls_out"
as_user chmod 0755 "$mt/noexec"
# fallocate on a file made read-only (0444) through a descriptor open for
# writing (rsync --preallocate of a read-only file): the size grows as on
# a local file system (EACCES: the daemon could not reopen it to reserve)
as_user "$py" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
os.posix_fallocate(fd, 0, 1 << 20)
os.pwrite(fd, b"end", (1 << 20) - 3)
os.close(fd)' "$mt/prealloc" || fail "posix_fallocate of a 0444 file being written"
[ "$(as_user stat -c %s "$mt/prealloc")" = 1048576 ] ||
	fail "posix_fallocate of a 0444 file: size $(as_user stat -c %s "$mt/prealloc")"
out=$(as_user "$W" umount "$mt" 2>&1) || fail "umount as user $U: exit $?: $out"
listed && fail "still mounted after umount"
cmp "$bk/ro.txt" "$src/ro.txt" || fail "ro.txt in the backing directory"
cmp "$bk/ro.bin" "$src/ro.bin" || fail "ro.bin in the backing directory"
[ "$(stat -c %a "$bk/ro.bin")" = 444 ] || fail "ro.bin mode $(stat -c %a "$bk/ro.bin")"
[ "$(seq 1 1000)" = "$(cat "$bk/rw.txt")" ] || fail "rw.txt in the backing directory"
[ "$(stat -c %i "$bk/rw.txt")" = "$(stat -c %i "$bk/rw.link")" ] || fail "the link in the backing directory"
[ "$(cat "$bk/d/f1" "$bk/d/f2" "$bk/d/f3" | tr -d '\n')" = 123 ] || fail "the small files"
[ "$(stat -c %s "$bk/prealloc")" = 1048576 ] && [ "$(tail -c 3 "$bk/prealloc")" = end ] ||
	fail "the preallocated 0444 file in the backing directory"

# ---- a file the kernel forgets while its writeback fails (a full backing
# file system): its data stays in the cache under the node's name, the
# node stays for a lookup to find it again; reads give the data, fsync
# the error, and it is written once there is room.  (Without file
# handles the node is the data's only name: it was freed, the data read
# as zeros, fsync of a reopen returned 0, and later writes landed over
# old bytes.)
mkdir "$top/tiny"
mount -t tmpfs -o size=8M,uid=$U,gid=$U tmpfs "$top/tiny" || skip "cannot mount a tmpfs"
tiny_cleanup() { mountpoint -q "$top/tiny" && umount -l "$top/tiny"; }
extra_cleanup() {
	listed && { as_user fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt"; }
	chmod "$fuse_mode" /dev/fuse
	tiny_cleanup
}
as_user "$W" mount "$top/tiny" "$mt" -o mem=64M,retry_timeout=600 || fail "mount of the tmpfs as user $U"
as_user head -c 7M /dev/zero >"$top/tiny/filler"
as_user sh -c "yes A | head -c 3M >'$mt/f'" || fail "write of 3 MiB"
for _ in 1 2 3; do echo 2 >/proc/sys/vm/drop_caches; sleep 0.2; done   # the kernel forgets f
[ "$(as_user stat -c %s "$mt/f")" = 3145728 ] || fail "size after the forget: $(as_user stat -c %s "$mt/f")"
[ "$(as_user tail -c 4 "$mt/f" | od -An -c | tr -d ' ')" = 'A\nA\n' ] ||
	fail "the data after the forget: $(as_user tail -c 4 "$mt/f" | od -An -c)"
as_user "$py" -c '
import os, sys, errno
fd = os.open(sys.argv[1], os.O_WRONLY)
try:
    os.fsync(fd)
    sys.exit("fsync after the forget succeeded with the data unwritten")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.close(fd)' "$mt/f" || fail "fsync after the forget"
as_user sh -c "printf BBBB | dd of='$mt/f' bs=4 seek=100 conv=notrunc status=none" || fail "overwrite"
rm -f "$top/tiny/filler"
out=$(as_user "$W" umount "$mt" 2>&1) || fail "umount once there was room: exit $?: $out"
yes A | head -c 3M >"$top/expect"
printf BBBB | dd of="$top/expect" bs=4 seek=100 conv=notrunc status=none
cmp -s "$top/tiny/f" "$top/expect" || fail "the backing file after unmount: $(tr -d '\n' <"$top/tiny/f" | fold -w1 | sort | uniq -c | tr '\n' ' ')"
tiny_cleanup
echo "mount_user: ok"
