#!/usr/bin/env bash
# The mount behaves as a local file system does, in its default
# (background) mode: O_TRUNC, sizes and times of cached data (explicit
# mtimes kept, no mtime moved by writeback; the same in a directory
# listing's attributes; ctime moved by a rename and a removed link, not
# by an fsync putting an mtime back, also after a link removed; the mtime
# moved by a punch or zero range past the end),
# EFBIG past the backing file system's largest file, inode numbers reused by the
# backing file system, symlink times, sparse files' blocks, O_DSYNC and
# RWF_DSYNC durable at once (also across kill -9), no descriptor kept on a
# removed file, an open fifo or a symlink unlinked (no ESTALE at fstat),
# `wbcache umount` returning once the data is in the backing
# directory, and exit status 0 after a write error that was resolved.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
extra_cleanup() { mountpoint -q "$top/tiny" 2>/dev/null && umount -l "$top/tiny"; }

# long expiry, no periodic writeback: data stays in the cache until asked
do_mount "mem=128M,dirty_writeback_centisecs=0,dirty_expire_centisecs=360000,dirty_background_bytes=100M,dirty_bytes=110M"
sync_all() { getfattr -n user.wbcache.sync "$mt" >/dev/null || fail "sync through the mount"; }
# the kernel keeps attributes 1 s: ask the daemon again
attr_expire() { sleep 1.1; }

# ---- O_TRUNC (atomic: the kernel sends it with the open)
seq 100000 >"$mt/f"
echo hi >"$mt/f"
[ "$(stat -c %s "$mt/f")" = 3 ] || fail "O_TRUNC: size $(stat -c %s "$mt/f")"
[ "$(cat "$mt/f")" = hi ] || fail "O_TRUNC: old data after the new"
seq 50000 >"$top/big"; echo small >"$top/small"
cp "$top/big" "$mt/c"; cp "$top/small" "$mt/c"
cmp "$top/small" "$mt/c" || fail "cp of a small file over a larger one"

# ---- size and explicit times of cached data
cp -p /etc/services "$mt/s"
want_s=$(stat -c %s /etc/services) want_t=$(stat -c %Y /etc/services)
attr_expire
[ "$(stat -c %s "$mt/s")" = "$want_s" ] || fail "cp -p: size $(stat -c %s "$mt/s"), not $want_s"
[ "$(stat -c %Y "$mt/s")" = "$want_t" ] || fail "cp -p: mtime lost"
head -c 100000 /dev/urandom >"$mt/t"
touch -d "2001-02-03 04:05:06" "$mt/t"
t2001=$(date -d "2001-02-03 04:05:06" +%s)
sync_all; attr_expire
[ "$(stat -c %Y "$mt/t")" = "$t2001" ] || fail "explicit mtime moved by writeback"

# ---- mtime does not move at writeback
head -c 300000 /dev/urandom >"$mt/w"
m0=$(stat -c %.9Y "$mt/w")
sleep 1.1
sync_all; attr_expire
[ "$(stat -c %.9Y "$mt/w")" = "$m0" ] || fail "mtime moved at writeback: $m0 -> $(stat -c %.9Y "$mt/w")"

# ---- a file written through the mount, its data written back, then
# changed in BACKING_DIR beside the mount: the change shows once the
# kernel asks again (size, data, mtime), and an append through the mount
# goes to its end (the node kept the size of its last close: the append
# went over the new data)
printf 'from mount 123' >"$mt/bes"; printf 'version-one-of-the-file\n' >"$mt/bes2"
sync_all; attr_expire
[ "$(stat -c %s "$mt/bes")" = 14 ] || fail "written through the mount: size"
printf 'BACKING-REWRITTEN-LONGER-CONTENT\n' >"$bk/bes"
printf 'v2\n' >"$bk/bes2"; touch -d "2003-04-05" "$bk/bes2"
attr_expire
[ "$(stat -c %s "$mt/bes")" = 33 ] || fail "changed beside the mount: size $(stat -c %s "$mt/bes"), not 33"
echo APPENDED >>"$mt/bes"
sync_all
[ "$(cat "$bk/bes")" = "$(printf 'BACKING-REWRITTEN-LONGER-CONTENT\nAPPENDED')" ] ||
	fail "an append after a change beside the mount: $(od -c "$bk/bes" | head -3)"
[ "$(cat "$mt/bes2")" = v2 ] && [ "$(stat -c %Y "$mt/bes2")" = "$(date -d 2003-04-05 +%s)" ] ||
	fail "changed beside the mount: $(stat -c '%s %y' "$mt/bes2")"

# ---- ctime moves with a rename and with a link removed (data cached)
head -c 5000 /dev/urandom >"$mt/cr"; ln "$mt/cr" "$mt/cr2"
c0=$(stat -c %.9Z "$mt/cr")
sleep 0.05; mv "$mt/cr" "$mt/cr3"; attr_expire
c1=$(stat -c %.9Z "$mt/cr3")
[ "$c1" != "$c0" ] || fail "ctime did not move with a rename: $c0"
rm "$mt/cr2"; attr_expire
[ "$(stat -c %.9Z "$mt/cr3")" != "$c1" ] || fail "ctime did not move with a link removed: $c1"

# ---- past the backing file system's largest file (ext4: 16 TiB): EFBIG
# at once, as there, not taken into the cache and never written
python3 - "$mt/big" "$bk" <<'EOF' || fail "writes past the largest file"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
try:
    os.pwrite(fd, b"x", 1 << 50)
    raise SystemExit("a write at 1 PiB was taken")
except OSError as e:
    assert e.errno == errno.EFBIG, e
# the same file on the backing file system: where it ends
probe = os.open(sys.argv[2] + "/probe", os.O_WRONLY | os.O_CREAT, 0o644)
lo, hi = 0, 1 << 62
while lo < hi:
    mid = (lo + hi + 1) // 2
    try:
        os.ftruncate(probe, mid); lo = mid
    except OSError:
        hi = mid - 1
os.close(probe)
os.unlink(sys.argv[2] + "/probe")
assert os.pwrite(fd, b"abcd", lo - 2) == 2, "no short write at the end"
os.ftruncate(fd, 0)
os.close(fd)
EOF

# ... also for a mount started under a file size limit (the probe of the
# largest file must not die of SIGXFSZ)
mkdir -p "$top/fb2" "$top/fm2"
(ulimit -f 1024; "$W" mount "$top/fb2" "$top/fm2" -o mem=64M) || fail "mount under ulimit -f"
python3 -c 'import os, sys, errno
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
try:
    os.pwrite(fd, b"x", 1 << 50)
    raise SystemExit("a write at 1 PiB was taken")
except OSError as e:
    assert e.errno == errno.EFBIG, e' "$top/fm2/big" || fail "EFBIG under ulimit -f"
"$W" umount "$top/fm2" || fail "umount of the second mount"

# ---- an O_TRUNC open while a throttled write is still being answered
# (its rest queued for the replier): the write is whole before or after
# the truncate, as on a local file system (the truncate went between its
# parts: the write returned 1 MiB, the file was zeros but its last bytes)
mkdir -p "$top/fb3" "$top/fm3"
trunc_fail() { fusermount3 -u "$top/fm3"; fail "$@"; }
"$W" mount "$top/fb3" "$top/fm3" -o mem=16M,dirty_bytes=512K,dirty_background_bytes=128K ||
	fail "mount with small dirty limits"
python3 - "$top/fm3/tr" <<'EOF2' || trunc_fail "O_TRUNC open during a throttled write"
import os, random, sys, threading, time
f, size = sys.argv[1], 1 << 20
buf = b"A" * size
for i in range(30):
    os.close(os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    delay = random.random() * 0.01
    def trunc():
        time.sleep(delay)
        os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))
    t = threading.Thread(target=trunc)
    t.start()
    fd = os.open(f, os.O_WRONLY)
    w = os.write(fd, buf)
    os.close(fd)
    t.join()
    data = open(f, "rb").read()
    if data and (w != size or data != buf):
        raise SystemExit(f"round {i}: write returned {w}, file {len(data)} bytes, "
                         f"{data.count(b'A')} of them written")
EOF2
"$W" umount "$top/fm3" || fail "umount of the mount with small dirty limits"

# ---- the same through a create: O_CREAT|O_TRUNC of a name the kernel
# believes absent (a negative entry) that was since made beside the mount
# (a second link to a file being written): the truncate is before or
# after the write (the daemon truncated at once, in the middle: a 48 MiB
# write read back with its first 5 MB zeros)
mkdir -p "$top/fb4" "$top/fm4"
"$W" mount "$top/fb4" "$top/fm4" -o mem=32M,dirty_bytes=4M,dirty_background_bytes=1M,qd=1,max_io=4K,direct=1 ||
	fail "mount with a slow store"
python3 - "$top/fm4" "$top/fb4" <<'EOF2' || { fusermount3 -u "$top/fm4"; fail "O_TRUNC create during a write"; }
import os, sys, threading, time
mt, bk = sys.argv[1], sys.argv[2]
n = 48 << 20
open(f"{mt}/a", "wb").close()
try:
    os.stat(f"{mt}/b")                     # a negative entry for b
except FileNotFoundError:
    pass
os.link(f"{bk}/a", f"{bk}/b")              # b, beside the mount
got = {}
def writer():
    fd = os.open(f"{mt}/a", os.O_WRONLY)
    got["n"] = os.pwrite(fd, b"D" * n, 0)
    os.close(fd)
w = threading.Thread(target=writer)
w.start()
time.sleep(0.3)
os.close(os.open(f"{mt}/b", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
w.join()
data = open(f"{mt}/a", "rb").read()
if data and (got["n"] != n or data != b"D" * n):
    raise SystemExit(f"write returned {got['n']}, file {len(data)} bytes, "
                     f"{len(data) - len(data.lstrip(bytes(1)))} leading zeros")
EOF2
"$W" umount "$top/fm4" || fail "umount of the mount with a slow store"

# ---- statfs: the free space without what the cache still has to write
# (the backing file system's free space read before and after the mount's:
# a test running beside this one on it moves it between two reads, and a
# pair it moved is read again)
head -c 16M /dev/urandom >"$mt/df1"
for _ in $(seq 50); do
	a=$(( $(stat -f -c '%a * %S' "$bk") ))
	free_mt=$(( $(stat -f -c '%a * %S' "$mt") ))
	free_bk=$(( $(stat -f -c '%a * %S' "$bk") ))
	[ "$a" = "$free_bk" ] && break
	sleep 0.1
done
[ $((free_bk - free_mt)) -ge $((15 << 20)) ] ||
	fail "df through the mount counts 16 MiB unwritten as free: $free_mt against $free_bk"
rm "$mt/df1"

# ---- symlink times
ln -s target "$mt/l"
touch -h -d "2002-01-01" "$mt/l" || fail "touch -h of a symlink"
[ "$(stat -c %Y "$bk/l")" = "$(date -d 2002-01-01 +%s)" ] || fail "symlink mtime"
# a symlink's xattr names, asked with a buffer (rsync -aX, tar --xattrs):
# an empty list (it was EIO)
r=$(/usr/bin/python3 -c "import os, sys; print(os.listxattr(sys.argv[1], follow_symlinks=False))" \
	"$mt/l" 2>&1) && [ "$r" = "[]" ] || fail "llistxattr of a symlink: $r"

# ---- a sparse file stays sparse
truncate -s 1T "$mt/sparse"
dd if=/dev/urandom of="$mt/sparse" bs=8k count=1 conv=notrunc status=none
b=$(stat -c %b "$mt/sparse")
[ "$b" -ge 16 ] && [ "$b" -lt 1024 ] || fail "1 TiB file with 8 KiB written reports $b blocks"
# ---- fallocate: reserve, extend, punch, zero; other modes refused
fallocate -l 10M "$mt/fa" || fail "fallocate"
[ "$(stat -c %s "$mt/fa")" = 10485760 ] || fail "fallocate size $(stat -c %s "$mt/fa")"
[ "$(stat -c %b "$bk/fa")" -ge 20480 ] || fail "fallocate reserved $(stat -c %b "$bk/fa") blocks"
head -c 65536 /dev/urandom >"$top/fa"; cp "$top/fa" "$mt/fb"
fallocate -p -o 4096 -l 8192 "$mt/fb" || fail "punch hole"
fallocate -z -o 60000 -l 10000 "$mt/fb" || fail "zero range"
python3 - "$top/fa" <<'PY' || fail "the expected content of the punched file"
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[4096:12288] = bytes(8192); b[60000:70000] = bytes(10000)
open(sys.argv[1], "wb").write(b)
PY
cmp "$top/fa" "$mt/fb" || fail "punch/zero range content"
fallocate -c -o 0 -l 4096 "$mt/fb" 2>/dev/null && fail "collapse range accepted"
cmp "$top/fa" "$mt/fb" || fail "a refused mode changed the file"
# a punch or a zero range (KEEP_SIZE) past the end of a file changes no
# data but moves its mtime, as on ext4; the mount reported it until the
# close, then the old one again (settled as a change beside the mount),
# and left it on the backing file.  (Not fallocate(1): its fsync puts
# the mtime back.)
for m in 3 0x11; do
	: >"$mt/fe"; touch -d 2004-01-01 "$mt/fe"
	python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDWR)
if libc.fallocate(fd, int(sys.argv[2], 0), 4096, 8192):
    sys.exit(os.strerror(ctypes.get_errno()))
os.close(fd)' "$mt/fe" $m || fail "fallocate mode $m past the end"
	attr_expire
	[ "$(stat -c %Y "$mt/fe")" -gt "$(date -d 2004-01-02 +%s)" ] ||
		fail "fallocate mode $m past the end: the old mtime came back"
	sync_all
	[ "$(stat -c %Y "$bk/fe")" -gt "$(date -d 2004-01-02 +%s)" ] ||
		fail "fallocate mode $m past the end: the backing file keeps the old mtime"
done
# a punch frees the backing file's space (fallocate -d, VM images)
head -c 8M /dev/urandom >"$mt/fp"; sync_all
[ "$(stat -c %b "$bk/fp")" -ge 16384 ] || fail "8 MiB written back: $(stat -c %b "$bk/fp") blocks"
fallocate -p -o 0 -l 8M "$mt/fp" || fail "punch of 8 MiB"
[ "$(stat -c %s "$mt/fp")" = 8388608 ] || fail "punch changed the size: $(stat -c %s "$mt/fp")"
[ "$(stat -c %b "$bk/fp")" -lt 1024 ] || fail "punched, the backing file keeps $(stat -c %b "$bk/fp") blocks"
cmp -n 8388608 "$mt/fp" /dev/zero || fail "punched range reads other than zeros"
# a punch of a sparse file takes no room in the backing file system
# (zeros were written over the whole range first: a punch of 256 MiB over
# a 16 MiB file system failed with ENOSPC and left them dirty)
mkdir -p "$top/pb" "$top/pm"
if mount -t tmpfs -o size=16M tmpfs "$top/pb" 2>/dev/null; then
	punch_fail() {
		mounted "$top/pm" && fusermount3 -u "$top/pm"
		for _ in $(seq 100); do mounted "$top/pm" || break; sleep 0.1; done
		umount -l "$top/pb"
		fail "$@"
	}
	"$W" mount "$top/pb" "$top/pm" -o mem=16M,retry_timeout=1 || punch_fail "mount over a 16 MiB tmpfs"
	truncate -s 256M "$top/pm/img" && head -c 1M /dev/urandom >"$top/p1" &&
		dd if="$top/p1" of="$top/pm/img" bs=1M seek=100 conv=notrunc status=none ||
		punch_fail "a sparse file on the small mount"
	fallocate -p -o 0 -l 256M "$top/pm/img" 2>"$top/punch.log" ||
		punch_fail "punch of a sparse file: $(cat "$top/punch.log")"
	cmp -n 268435456 "$top/pm/img" /dev/zero || punch_fail "punched sparse file reads other than zeros"
	"$W" umount "$top/pm" || punch_fail "umount after the punch of a sparse file"
	[ "$(stat -c %b "$top/pb/img")" -lt 1024 ] ||
		punch_fail "punched, the sparse file keeps $(stat -c %b "$top/pb/img") blocks"
	umount "$top/pb"
fi

# ---- rename over a file with dirty data and a handle open on it; copy_file_range
python3 - "$mt" <<'PY' || fail "rename over an open dirty file"
import os, sys
m = sys.argv[1]
v = os.open(os.path.join(m, "victim"), os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(v, b"V" * 100000, 0)
with open(os.path.join(m, "src"), "wb") as f: f.write(b"S" * 5000)
os.rename(os.path.join(m, "src"), os.path.join(m, "victim"))
os.pwrite(v, b"W" * 10, 100000)              # the open handle: the old inode
assert os.pread(v, 10, 99995) == b"VVVVVWWWWW"
assert open(os.path.join(m, "victim"), "rb").read() == b"S" * 5000
os.close(v)
src = os.open(os.path.join(m, "victim"), os.O_RDONLY)
dst = os.open(os.path.join(m, "copy"), os.O_WRONLY | os.O_CREAT, 0o644)
assert os.copy_file_range(src, dst, 5000) == 5000
os.close(src); os.close(dst)
assert open(os.path.join(m, "copy"), "rb").read() == b"S" * 5000
PY

# ---- a file whose last link goes keeps its data for an open that comes
# after: one that found the name before the rename over it or its unlink
# (a reader of a file replaced by rename), here a reopen through
# /proc/self/fd of an O_PATH descriptor.  The data was dropped at the
# unlink (or at the last close after it): the open read an empty file
python3 - "$mt" <<'PY' || fail "an open after the last link went"
import os, sys
m = sys.argv[1]
def put(name, data):
    with open(os.path.join(m, name), "wb") as f: f.write(data)
def reopen(pfd, flags=os.O_RDONLY):
    return os.open("/proc/self/fd/%d" % pfd, flags)
put("held", b"H" * 70000); put("newer", b"N" * 10)
p = os.open(os.path.join(m, "held"), os.O_PATH)
os.rename(os.path.join(m, "newer"), os.path.join(m, "held"))
fd = reopen(p)
got = os.pread(fd, 100000, 0)
assert got == b"H" * 70000, "renamed over: %d bytes, %r" % (len(got), got[:8])
os.close(fd); os.close(p)
put("held2", b"U" * 5000)
p = os.open(os.path.join(m, "held2"), os.O_PATH)
os.unlink(os.path.join(m, "held2"))
fd = reopen(p, os.O_RDWR)
got = os.pread(fd, 100000, 0)
assert got == b"U" * 5000, "unlinked: %d bytes, %r" % (len(got), got[:8])
os.pwrite(fd, b"more", 5000)
os.close(fd)
fd = reopen(p)
assert os.pread(fd, 100000, 0) == b"U" * 5000 + b"more", "unlinked, written, reopened"
os.close(fd); os.close(p)
put("held3", b"O" * 3000)
p = os.open(os.path.join(m, "held3"), os.O_PATH)
fd = os.open(os.path.join(m, "held3"), os.O_RDONLY)
os.unlink(os.path.join(m, "held3"))
os.close(fd)                                  # the last open of it
fd = reopen(p)
got = os.pread(fd, 100000, 0)
assert got == b"O" * 3000, "unlinked while open, closed: %d bytes" % len(got)
os.close(fd); os.close(p)
PY
# the same for files whose data never went through the mount (made in
# BACKING_DIR, or written by an earlier mount): nothing kept the backing
# inode, freed at the unlink, and the reopen or an fstat of the O_PATH
# descriptor failed with ESTALE
for f in old old2 old3 old4; do head -c 4000 /dev/zero | tr '\0' B >"$bk/$f"; done
echo N >"$bk/oldnew"
python3 - "$mt" <<'PY' || fail "an open after the last link went (data not written through the mount)"
import os, sys
m = sys.argv[1]
def reopen(pfd, flags=os.O_RDONLY):
    return os.open("/proc/self/fd/%d" % pfd, flags)
p = os.open(os.path.join(m, "old"), os.O_PATH)
os.unlink(os.path.join(m, "old"))
assert os.fstat(p).st_size == 4000, "unlinked: fstat"
fd = reopen(p)
got = os.pread(fd, 100000, 0)
assert got == b"B" * 4000, "unlinked: %d bytes" % len(got)
os.close(fd); os.close(p)
p = os.open(os.path.join(m, "old2"), os.O_PATH)
os.rename(os.path.join(m, "oldnew"), os.path.join(m, "old2"))
fd = reopen(p)
assert os.pread(fd, 100000, 0) == b"B" * 4000, "renamed over"
os.close(fd); os.close(p)
p = os.open(os.path.join(m, "old3"), os.O_PATH)
fd = os.open(os.path.join(m, "old3"), os.O_RDONLY)
os.unlink(os.path.join(m, "old3"))
os.close(fd)                                  # the last open of it
fd = reopen(p)
assert os.pread(fd, 100000, 0) == b"B" * 4000, "unlinked while open, closed"
os.close(fd); os.close(p)
# written after the unlink: its data dropped at the forget (below)
p = os.open(os.path.join(m, "old4"), os.O_PATH)
os.unlink(os.path.join(m, "old4"))
fd = reopen(p, os.O_WRONLY)
os.pwrite(fd, b"more", 4000)
os.close(fd); os.close(p)
PY
# the same for a fifo open while its last link goes (unlink, or a rename
# over it) and a symlink's O_PATH descriptor: their fstat, and the fifo's
# data, as on a local file system (nothing kept the backing inode: ESTALE)
python3 - "$mt" <<'PY' || fail "a fifo or symlink whose last link went"
import os, stat, sys
m = sys.argv[1]
os.mkfifo(os.path.join(m, "fifo"))
os.mkfifo(os.path.join(m, "fifo2")); os.mkfifo(os.path.join(m, "fifo2n"))
os.symlink("target", os.path.join(m, "sym"))
fd = os.open(os.path.join(m, "fifo"), os.O_RDWR | os.O_NONBLOCK)
fd2 = os.open(os.path.join(m, "fifo2"), os.O_RDWR | os.O_NONBLOCK)
sp = os.open(os.path.join(m, "sym"), os.O_PATH | os.O_NOFOLLOW)
os.unlink(os.path.join(m, "fifo"))
os.rename(os.path.join(m, "fifo2n"), os.path.join(m, "fifo2"))
os.unlink(os.path.join(m, "sym"))
for what, f, kind in (("unlinked fifo", fd, stat.S_ISFIFO),
                      ("fifo renamed over", fd2, stat.S_ISFIFO),
                      ("unlinked symlink", sp, stat.S_ISLNK)):
    try:
        st = os.fstat(f)
    except OSError as e:
        sys.exit("%s: fstat failed: %s" % (what, e))
    assert kind(st.st_mode) and st.st_nlink == 0, "%s: %o nlink %d" % (what, st.st_mode, st.st_nlink)
os.write(fd, b"through the fifo")
assert os.read(fd, 100) == b"through the fifo", "unlinked fifo: data"
for f in (fd, fd2, sp):
    os.close(f)
PY

# ---- inode numbers reused by the backing file system (no ESTALE)
loop() {
	local d=$1 i errs=0
	mkdir "$d"
	for i in $(seq 400); do
		mkdir "$d/x" 2>/dev/null || errs=$((errs + 1))
		rmdir "$d/x" 2>/dev/null || errs=$((errs + 1))
		echo "$i" >"$d/f" || errs=$((errs + 1))
		rm "$d/f" 2>/dev/null || errs=$((errs + 1))
	done
	echo $errs >"$d.errs"
}
loop "$mt/l1" & loop "$mt/l2" & wait
[ "$(cat "$mt/l1.errs") $(cat "$mt/l2.errs")" = "0 0" ] ||
	fail "create/delete loops failed $(cat "$mt/l1.errs") + $(cat "$mt/l2.errs") times"
mkdir "$mt/l1/x" && stat "$mt/l1/x" >/dev/null && rmdir "$mt/l1/x" || fail "a name after the loops"

# ---- O_DSYNC, O_SYNC, RWF_DSYNC: on the backing file when write returns
python3 - "$mt" <<'PY' || fail "O_DSYNC writes"
import os, sys
m = sys.argv[1]
bk = m[:-len("mnt")] + "backing"
for name, flags in (("dsync", os.O_DSYNC), ("sync", os.O_SYNC)):
    fd = os.open(os.path.join(m, name), os.O_WRONLY | os.O_CREAT | flags, 0o644)
    os.write(fd, b"D" * 1048576)
    size = os.stat(os.path.join(bk, name)).st_size
    assert size == 1048576, f"{name}: backing size {size} after the write"
    os.close(fd)
fd = os.open(os.path.join(m, "rwf"), os.O_WRONLY | os.O_CREAT, 0o644)
os.pwritev(fd, [b"R" * 65536], 0, os.RWF_DSYNC)
assert os.stat(os.path.join(bk, "rwf")).st_size == 65536, "RWF_DSYNC"
os.close(fd)
PY

# ---- shared writable mmap (fio's mmap engine, SQLite WAL), coherent with
# direct writes to the same file
python3 - "$mt/mc" <<'PY' || fail "mmap coherence"
import os, mmap, sys
m = sys.argv[1]
w = os.open(m, os.O_WRONLY | os.O_CREAT, 0o644)      # write-only: direct
os.pwrite(w, b"A" * 8192, 0)
r = os.open(m, os.O_RDONLY)
assert os.pread(r, 8192, 0) == b"A" * 8192
rw = os.open(m, os.O_RDWR)
mp = mmap.mmap(rw, 8192)                             # MAP_SHARED, writable
assert mp[:4] == b"AAAA"
os.pwrite(w, b"B" * 4096, 4096)
assert os.pread(r, 4096, 4096) == b"B" * 4096, "a cached reader missed a direct write"
assert mp[4096:4100] == b"BBBB", "a mapping missed a direct write"
mp[0:4] = b"CCCC"; mp.flush()
assert os.pread(r, 4, 0) == b"CCCC", "a reader missed a mapped write"
os.pwrite(rw, b"D" * 100, 200)
assert mp[200:204] == b"DDDD", "a mapping missed a write"
mp.close()
for fd in (w, r, rw): os.close(fd)
PY
if command -v fio >/dev/null; then
	fio --name=mm --directory="$mt" --ioengine=mmap --rw=randwrite --bs=4k --size=8M \
	    --verify=crc32c --verify_state_save=0 --output="$top/fio-mmap.log" >/dev/null 2>&1 ||
		fail "fio mmap verify: $(tail -3 "$top/fio-mmap.log")"
fi
if command -v sqlite3 >/dev/null; then
	sqlite3 "$mt/wal.db" "PRAGMA journal_mode=WAL; CREATE TABLE t(x);
		WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<5000)
		INSERT INTO t SELECT i FROM c;" >/dev/null || fail "sqlite3 in WAL mode"
	[ "$(sqlite3 "$mt/wal.db" "PRAGMA integrity_check; SELECT count(*) FROM t;" | tr '\n' ' ')" = "ok 5000 " ] ||
		fail "sqlite3 WAL database"
fi

# ---- a removed file keeps no descriptor in the daemon (its space is freed)
head -c 20000000 /dev/zero >"$mt/r"
sync_all
cat "$mt/r" >/dev/null; ls -l "$mt" >/dev/null
rm "$mt/r"
# (regular files: a thread's ring may keep a removed directory, no space)
# (the kernel's RELEASE may come after rm returns: polled, 60 s)
removed_held() { find -L /proc/"$pid"/fd -mindepth 1 -maxdepth 1 -type f -links 0 2>/dev/null | wc -l; }
for _ in $(seq 600); do held=$(removed_held); [ "$held" = 0 ] && break; sleep 0.1; done
[ "$held" = 0 ] || fail "the daemon holds $held descriptors of removed files"
head -c 1000 /dev/zero >"$mt/r2"; sync_all; stat "$mt/r2" >/dev/null
rm "$bk/r2"   # removed beside the mount
for _ in $(seq 600); do held=$(removed_held); [ "$held" = 0 ] && break; sleep 0.1; done
[ "$held" = 0 ] || fail "the daemon holds $held descriptors of a file removed in BACKING_DIR"

# ---- a listing's attributes (READDIRPLUS) are the cache's: sizes of data
# not yet written back, an explicit mtime, after the kernel forgot them
mkdir "$mt/ls"
for i in $(seq 300); do head -c $((i * 37)) /dev/zero >"$mt/ls/f$i"; done
touch -d 2001-02-03 "$mt/ls/f7"
[ "$(stat -c %s "$bk/ls/f300")" = 0 ] || fail "listing: the data is already in BACKING_DIR"
echo 2 >/proc/sys/vm/drop_caches
attr_expire
bad=$(find "$mt/ls" -type f -printf '%f %s\n' | awk '{ if ($2 != substr($1, 2) * 37) print }')
[ -z "$bad" ] || fail "listing: sizes not the cache's: $(echo "$bad" | head -3)"
[ "$(find "$mt/ls" -type f | wc -l)" = 300 ] || fail "listing: not 300 files"
[ "$(find "$mt/ls" -name f7 -printf '%TY')" = 2001 ] || fail "listing: explicit mtime"
ls -l "$mt/ls" >/dev/null && ls -l "$mt/ls" >/dev/null || fail "ls -l twice"
[ "$(stat -c %s "$mt/ls/f300")" = 11100 ] || fail "stat after listing"
rm -r "$mt/ls" || fail "rm -r after listing"

# ---- wbcache umount returns once the data is in BACKING_DIR
head -c 64000000 /dev/urandom >"$top/model"
cp "$top/model" "$mt/u"
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"
cmp "$top/model" "$bk/u" || fail "data not in BACKING_DIR when wbcache umount returned"
[ "$(stat -c %s "$bk/s")" = "$want_s" ] && [ "$(stat -c %Y "$bk/s")" = "$want_t" ] ||
	fail "cp -p file after unmount: size/mtime"
[ "$(stat -c %.9Y "$bk/w")" = "$m0" ] || fail "backing mtime after unmount is not the write's"
[ "$(stat -c %Y "$bk/t")" = "$t2001" ] || fail "explicit mtime not on the backing file after unmount"
[ "$(cat "$bk/f")" = hi ] && cmp "$top/small" "$bk/c" || fail "truncated files after unmount"
cmp "$top/fa" "$bk/fb" || fail "punched file after unmount"
[ "$(cat "$bk/victim")" = "$(head -c 5000 /dev/zero | tr '\0' S)" ] || fail "rename victim after unmount"
cmp "$bk/victim" "$bk/copy" || fail "copy_file_range after unmount"
[ "$(stat -c %s "$bk/fa")" = 10485760 ] || fail "fallocated size after unmount"

# ---- files removed with data in the cache, more than the engine keeps
# descriptors for (a daemon that cannot raise its limit of 256: 64), closed
# ones and open ones: their data dropped, sync and umount succeed (the
# engine, its descriptor closed, could neither write nor drop the data of
# a freed inode: ESTALE at every retry, and umount failed)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	(ulimit -n 256 && exec setpriv --bounding-set=-sys_resource --inh-caps=-sys_resource \
		"$W" mount "$bk" "$mt" -o mem=64M,dirty_expire_centisecs=360000,dirty_writeback_centisecs=0) \
		2>"$top/mount.log" || fail "mount with 256 descriptors: $(cat "$top/mount.log")"
	pid=$(daemon_pid)
	mkdir "$mt/rmd"
	for i in $(seq 200); do echo "data$i" >"$mt/rmd/f$i"; done
	declare -a ofd
	for i in $(seq 100); do
		exec {f}<>"$mt/rmd/o$i" && echo "open$i" >&$f || fail "open o$i"
		ofd[i]=$f
	done
	rm -r "$mt/rmd" || fail "rm -r of files with cached data"
	for i in $(seq 100); do exec {ofd[i]}>&-; done
	getfattr -n user.wbcache.sync "$mt" >/dev/null 2>"$top/sync.log" ||
		fail "sync after removing files with cached data: $(cat "$top/sync.log")"
	do_umount || fail "umount after removing files with cached data: $(cat "$top/umount.log")"
	# ... and removed while the kernel keeps their inodes (an O_PATH
	# descriptor each: no forget comes, as when forgets fall behind the
	# unlinks over io_uring): each pin held a descriptor until the
	# forget, 300 of them in a daemon of 256, which then could neither
	# write nor drop the data of the rest (EMFILE; the sync failed).
	# At most a quarter of its descriptors pin; the rest drop at once
	(ulimit -n 256 && exec setpriv --bounding-set=-sys_resource --inh-caps=-sys_resource \
		"$W" mount "$bk" "$mt" -o mem=64M,dirty_expire_centisecs=360000,dirty_writeback_centisecs=0) \
		2>"$top/mount.log" || fail "mount with 256 descriptors: $(cat "$top/mount.log")"
	pid=$(daemon_pid)
	(ulimit -n 4096 && python3 - "$mt" <<'PY') || fail "files removed while the kernel holds them"
import os, sys
mt = sys.argv[1]
os.mkdir(mt + "/heldmany")
keep = []
for i in range(300):
    p = "%s/heldmany/f%d" % (mt, i)
    with open(p, "w") as f:
        f.write("data%d" % i)
    keep.append(os.open(p, os.O_PATH))
for i in range(300):
    os.unlink("%s/heldmany/f%d" % (mt, i))
try:
    os.getxattr(mt, "user.wbcache.sync")
except OSError as e:
    sys.exit("sync after removing 300 held files: %s" % e)
for fd in keep:
    os.close(fd)
os.rmdir(mt + "/heldmany")
PY
	do_umount || fail "umount after removing held files: $(cat "$top/umount.log")"
fi

# ---- a file written, closed and written back (settled), then its mtime
# set through a read-only open, and a hard link of it made and removed
# through the mount: an fsync, which puts the mtime back on the backing
# file, does not move the file's ctime (it moved to the fsync's time, and
# back at the close), nor does the removed link leave the backing file's
# ctime to show as a change beside the mount (the fsync moved it again)
do_mount "attr_timeout=0"
python3 - "$mt/cts" "$mt" <<'EOF' || fail "ctime moved by an fsync"
import os, sys
p, mt = sys.argv[1:3]
for unlink in (False, True):
    with open(p, "wb") as f:
        f.write(b"x" * 10000)
    os.getxattr(mt, "user.wbcache.sync")
    os.stat(p)
    if unlink:
        os.link(p, p + ".l")
    r = os.open(p, os.O_RDONLY)
    os.utime(r, ns=(10 ** 18, 10 ** 18))
    if unlink:
        os.unlink(p + ".l")
    c = [os.stat(p).st_ctime_ns]
    os.fsync(r)
    c += [os.stat(p).st_ctime_ns, os.fstat(r).st_ctime_ns]
    os.close(r)
    c.append(os.stat(p).st_ctime_ns)
    assert len(set(c)) == 1, "link removed %d: ctime then, after fsync (stat, fstat), after close: %r" % (unlink, c)
EOF
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"

# ---- kill -9 after O_DSYNC writes: they are there
do_mount
python3 -c "
import os
fd = os.open('$mt/k', os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
os.write(fd, b'K' * 1048576)
" || fail "O_DSYNC write"
kill -9 "$pid"; wait_gone "$pid" 100; pid=
fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt"
[ "$(stat -c %s "$bk/k")" = 1048576 ] || fail "O_DSYNC data lost at kill -9: $(stat -c %s "$bk/k")"

# ---- a write error that was resolved leaves exit status 0 (foreground)
mkdir "$top/tiny"
if mount -t tmpfs -o size=1M tmpfs "$top/tiny" 2>/dev/null; then
	bk=$top/tiny
	"$W" mount "$bk" "$mt" -f -o mem=16M 2>"$top/fg.log" &
	fg=$!
	fg_up "$fg" "$top/fg.log"
	pid=$fg
	dd if=/dev/zero of="$mt/big" bs=1M count=3 conv=fsync status=none 2>/dev/null &&
		fail "fsync on a full file system succeeded"
	mount -o remount,size=8M "$top/tiny"
	dd if=/dev/zero of="$mt/big2" bs=1k count=1 conv=fsync status=none || fail "fsync after space was freed"
	fusermount3 -u "$mt"
	wait "$fg"; rc=$?; pid=
	[ $rc = 0 ] || fail "exit status $rc after the error was resolved: $(cat "$top/fg.log")"
	[ "$(stat -c %s "$bk/big")" = 3145728 ] || fail "data written once space was freed"
	umount "$top/tiny"
fi
echo "mount POSIX tests passed"
