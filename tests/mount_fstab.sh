#!/usr/bin/env bash
# Mounting the way FUSE file systems are mounted: `mount -t fuse.wbcache`
# and an fstab line (through mount.fuse3, which runs `wbcache SOURCE
# MOUNTPOINT -o OPTS` from the standard PATH), `umount` writing everything
# back.  Needs root and /usr/local/bin/wbcache: `make install` puts it
# there; this test links the build's binary there for its run if nothing
# is there, and skips if something else is.
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skip: needs root"; exit 77; }
command -v mount.fuse3 >/dev/null || [ -x /sbin/mount.fuse3 ] || { echo "skip: no mount.fuse3"; exit 77; }
. tests/mountlib.bash
link=/usr/local/bin/wbcache
linked=
if [ -e "$link" ] || [ -L "$link" ]; then
	[ "$(realpath "$link")" = "$W" ] || [ "$(readlink "$link")" = "$W" ] ||
		cmp -s "$link" "$W" || skip "$link is another wbcache"
else
	ln -s "$W" "$link" && linked=1
fi
extra_cleanup() { [ -n "$linked" ] && rm -f "$link"; }

# ---- mount -t fuse.wbcache, with mount(8)'s and FUSE's options
mount -t fuse.wbcache "$bk" "$mt" -o mem=32M,dirty_ratio=30,noatime,nodev,allow_other 2>"$top/m.log" ||
	fail "mount -t fuse.wbcache: $(cat "$top/m.log")"
pid=$(daemon_pid)
[ -n "$pid" ] || fail "not a wbcache mount"
"$W" stat "$mt" | grep -q "CacheSize: *32768 kB" || fail "mem=32M not applied"
findmnt -n -o OPTIONS "$mt" | grep -q nodev || fail "nodev not passed to the kernel"
head -c 5000000 /dev/urandom >"$top/model"
cp "$top/model" "$mt/a"
umount "$mt" || fail "umount"
wait_gone "$pid" 600 || fail "daemon did not end"
pid=
cmp "$top/model" "$bk/a" || fail "umount did not write back"

# ---- an fstab line
printf '%s %s fuse.wbcache mem=16M,_netdev,nofail,defaults,x-systemd.automount 0 0\n' "$bk" "$mt" >"$top/fstab"
mount --fstab "$top/fstab" "$mt" 2>"$top/m.log" || fail "mount from fstab: $(cat "$top/m.log")"
pid=$(daemon_pid)
"$W" stat "$mt" | grep -q "CacheSize: *16384 kB" || fail "fstab options not applied"
cmp "$top/model" "$mt/a" || fail "data through the fstab mount"
cp "$top/model" "$mt/b"
"$W" umount "$mt" || fail "wbcache umount of an fstab mount"
pid=
cmp "$top/model" "$bk/b" || fail "not written back"

# ---- the atime options of an fstab line a FUSE mount does not take
# (libfuse refused relatime and nodiratime: the mount failed), several -o
printf '%s %s fuse.wbcache mem=16M,relatime,nodiratime,lazytime 0 0\n' "$bk" "$mt" >"$top/fstab"
mount --fstab "$top/fstab" "$mt" 2>"$top/m.log" || fail "mount with relatime,nodiratime: $(cat "$top/m.log")"
pid=$(daemon_pid)
"$W" umount "$mt" || fail "umount (relatime)"
pid=
"$W" mount "$bk" "$mt" -o mem=16M -o noatime || fail "wbcache mount with two -o"
pid=$(daemon_pid)
"$W" stat "$mt" | grep -q "CacheSize: *16384 kB" || fail "the first -o was lost"
findmnt -n -o OPTIONS "$mt" | grep -q noatime || fail "the second -o was lost"
"$W" umount "$mt" || fail "umount (two -o)"
pid=

# ---- mount.fuse3's drop_privileges: it mounts, the daemon serves /dev/fd/N
# (it refused that mount point and left a dead mount behind)
mount -t fuse.wbcache "$bk" "$mt" -o mem=16M,drop_privileges 2>"$top/m.log" ||
	fail "mount -o drop_privileges: $(cat "$top/m.log")"
pid=$(daemon_pid)
[ -n "$pid" ] || fail "drop_privileges: not a wbcache mount"
cp "$top/model" "$mt/c"
# files made, written and removed by four processes at once: a sanitizer
# build sees the order the kernel gives requests on a descriptor it did
# not see opened (a node made by one request, used by the next)
for j in 1 2 3 4; do
	(mkdir "$mt/d$j" && for i in $(seq 300); do echo "$j $i" >"$mt/d$j/f$i" || exit 1; done &&
	 [ "$(cat "$mt/d$j/f77")" = "$j 77" ] && rm -r "$mt/d$j") &
done
for j in 1 2 3 4; do wait %$j || fail "drop_privileges: files made and removed ($j)"; done
umount "$mt" || fail "umount (drop_privileges)"
wait_gone "$pid" 600 || fail "daemon did not end (drop_privileges)"
pid=
cmp "$top/model" "$bk/c" || fail "drop_privileges: not written back"
# the daemon refuses (a cache larger than the machine) after mount.fuse3
# mounted: it says the mount stays and how to clear it
mount -t fuse.wbcache "$bk" "$mt" -o mem=20T,drop_privileges 2>"$top/m.log" &&
	fail "mem=20T accepted (drop_privileges)"
grep -q "is not served: .umount. its mount point" "$top/m.log" ||
	fail "drop_privileges, refused: $(cat "$top/m.log")"
# (the mount is dead: mountpoint(1), which stats it, says it is none)
grep -q " $mt fuse.wbcache " /proc/self/mounts || fail "drop_privileges, refused: no mount left to clear"
umount "$mt" || fail "umount of the refused mount"
grep -q " $mt fuse.wbcache " /proc/self/mounts && fail "umount left the refused mount"

# ---- a bad option: mount fails with the reason, nothing mounted
mount -t fuse.wbcache "$bk" "$mt" -o bogus=1 2>"$top/m.log" && fail "bogus option accepted"
grep -q "unknown option 'bogus'" "$top/m.log" || fail "no reason: $(cat "$top/m.log")"
mountpoint -q "$mt" && fail "mounted anyway"
echo "fstab tests passed"
