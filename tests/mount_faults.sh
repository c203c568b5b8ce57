#!/usr/bin/env bash
# A full backing file system through the mount (default mode): writers
# get ENOSPC once the store has failed for retry_timeout, never hang;
# a writer paused by the throttle dies at once on SIGKILL, and a signal
# it handles leaves its write whole; metadata
# answers meanwhile; fsync reports the error; SIGTERM ends the daemon,
# and in the foreground the unwritten data makes the exit status 1; a
# lost write is reported by the close of a dup and still by fsync.
# The waits below are watchdogs against hangs, not timings.
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skip: needs root (tmpfs)"; exit 77; }
. tests/mountlib.bash
# told_once FILE: a new descriptor's fsync tells the lost write (ENOSPC),
# once: the next one succeeds
told_once() {
	python3 - "$1" <<'PY'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    os.fsync(fd)
    sys.exit("fsync of a new descriptor did not tell the lost write")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.fsync(fd)          # told once
os.close(fd)
PY
}
# wait_lost: the mount counts bytes lost (on_error=drop), within 30 s
wait_lost() {
	local i
	for i in $(seq 300); do
		"$W" stat "$mt" | awk '/^Lost:/ { exit $2 > 0 ? 0 : 1 }' && return 0
		sleep 0.1
	done
	fail "nothing lost in 30 s"
}
mkdir "$top/tiny"
mount -t tmpfs -o size=16M tmpfs "$top/tiny" 2>/dev/null || skip "cannot mount a tmpfs"
extra_cleanup() {
	[ -n "${dpids:-}" ] && kill -9 $dpids 2>/dev/null
	mountpoint -q "$top/tiny" && umount -l "$top/tiny"
	# the store of the namespace tests below, unmounted after the
	# mount over it (cleanup unmounts that after extra_cleanup: lazily)
	mountpoint -q "$top/small" && umount -l "$top/small"
	return 0
}
bk=$top/tiny
# writers_gone WHAT: the writers ($dpids) end within 30 s of the daemon
writers_gone() {
	local d
	for d in $dpids; do
		for _ in $(seq 300); do alive "$d" || break; sleep 0.1; done
		alive "$d" && fail "$1 still ran 30 s after the daemon ended"
	done
	wait $dpids 2>/dev/null
	dpids=
	mountpoint -q "$mt" && fusermount3 -u "$mt"
}
# paused N: N or more writes are paused (their answers deferred)
paused() { "$W" stat "$mt" | awk -v n="$1" '/^DeferredReplies:/ { exit $2 >= n ? 0 : 1 }'; }

# ---- writers end with ENOSPC (retry_timeout 2 s), metadata answers
do_mount "mem=64M,retry_timeout=2"
for i in 1 2 3 4; do
	( timeout 120 dd if=/dev/zero of="$mt/w$i" bs=1M count=100 status=none 2>"$top/dd$i.err"
	  echo $? >"$top/dd$i.rc" ) &
done
sleep 1
timeout 20 ls "$mt" >/dev/null || fail "ls did not answer while writers were stuck on a full store"
timeout 20 stat "$mt/w1" >/dev/null || fail "stat did not answer"
timeout 20 "$W" stat "$mt" >/dev/null || fail "wbcache stat did not answer"
wait
for i in 1 2 3 4; do
	rc=$(cat "$top/dd$i.rc")
	[ "$rc" = 124 ] && fail "writer $i still ran after 120 s on a full store"
	[ "$rc" != 0 ] || fail "writer $i succeeded on a full store"
	grep -q "No space left" "$top/dd$i.err" || fail "writer $i: $(cat "$top/dd$i.err")"
done
python3 - "$mt" <<'PY' || fail "fsync on a full store"
import os, sys, errno
failed = 0
for i in range(1, 5):
    fd = os.open(os.path.join(sys.argv[1], "w%d" % i), os.O_WRONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
        failed += 1
    os.close(fd)
assert failed, "every fsync succeeded: nothing was at risk"
PY
"$W" stat "$mt" | awk '/^AtRisk:/ { exit $2 > 0 ? 0 : 1 }' || fail "no data counted at risk"

# ---- SIGTERM ends the daemon (what it cannot write is counted lost)
kill -TERM "$pid"
wait_gone "$pid" 600 || fail "the daemon did not end at SIGTERM"
pid=
mountpoint -q "$mt" && fail "still mounted after SIGTERM"

# ---- SIGTERM while writers are paused on the full store: the daemon ends
# (after retry_timeout), the writers get an error and end
rm -f "$bk"/*
do_mount "mem=64M,retry_timeout=3"
head -c 15000000 /dev/zero >"$bk/filler"
dpids=
for i in 1 2 3 4; do
	dd if=/dev/zero of="$mt/t$i" bs=1M count=1000 status=none 2>/dev/null &
	dpids="$dpids $!"
done
for _ in $(seq 300); do paused 4 && break; sleep 0.1; done
kill -TERM "$pid"
wait_gone "$pid" 600 || fail "the daemon did not end at SIGTERM with writers paused"
pid=
writers_gone "a writer"

# ---- SIGTERM while writes (of one request each) are paused, then the
# store freed: each paused write is written whole before the daemon ends, not answered with what
# was in (a short count the writer did not ask for; for a mapping's
# write-back, whose count the kernel does not read, a silent loss)
rm -f "$bk"/*
do_mount "mem=64M,retry_timeout=600,dirty_bytes=1M,dirty_background_bytes=512K"
head -c 16000000 /dev/zero >"$bk/filler" 2>/dev/null
cat >"$top/w4.py" <<'PY'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = mmap.mmap(-1, 1 << 20)     # page-aligned: one FUSE request
buf.write(b"\x5a" * (1 << 20))
try:
    r = os.write(fd, buf)
    print("wrote %d" % r)
except OSError as e:
    print("error %s" % e.strerror)
PY
dpids=
for i in 1 2 3 4; do
	python3 "$top/w4.py" "$mt/p$i" >"$top/p$i.out" 2>&1 &
	dpids="$dpids $!"
done
# each writer paused or done (the first may get its 1 MiB in whole, alone
# under the limit), at least one paused
settled() {
	local n=0 i d
	for i in 1 2 3 4; do [ -s "$top/p$i.out" ] && n=$((n + 1)); done
	d=$("$W" stat "$mt" | awk '/^DeferredReplies:/ {print $2}')
	[ "${d:-0}" -ge 1 ] && [ $((n + ${d:-0})) -ge 4 ]
}
for _ in $(seq 600); do settled && break; sleep 0.1; done
settled || fail "the four writers were neither paused nor done: $(cat "$top"/p?.out) $("$W" stat "$mt" | grep Deferred)"
kill -TERM "$pid"
sleep 1
rm -f "$bk/filler"
wait_gone "$pid" 1200 || fail "the daemon did not end at SIGTERM once space was freed"
pid=
writers_gone "a paused writer"
for i in 1 2 3 4; do
	grep -qx "wrote $((1 << 20))" "$top/p$i.out" ||
		fail "writer $i paused at SIGTERM: $(cat "$top/p$i.out")"
	[ "$(stat -c %s "$bk/p$i")" = $((1 << 20)) ] ||
		fail "writer $i's file after SIGTERM: $(stat -c %s "$bk/p$i") bytes"
done

# ---- SIGTERM while a worker's direct write over a full store has a dirty
# mapped page in its range (over /dev/fuse; mount_uring.sh: the rings):
# once the store has room the write ends without invalidating the
# kernel's pages (the page's write-back, which that sends, no thread
# reads any more: libfuse's loop waited for the worker for ever)
rm -f "$bk"/*
term_during_inval "uring=0,mem=16M,dirty_bytes=256K,dirty_background_bytes=128K,retry_timeout=300" \
	"a worker's direct write waits for a write-back no thread reads"

# ---- 24 writers paused by the throttle (more than the daemon's 16 FUSE
# workers) on a store that stays full: metadata answers; they die at once
# on SIGKILL
rm -f "$bk"/*
do_mount "mem=64M,retry_timeout=600"
head -c 15000000 /dev/zero >"$bk/filler"   # the store is full
dpids=
for i in $(seq 24); do
	dd if=/dev/zero of="$mt/k$i" bs=1M count=1000 status=none 2>/dev/null &
	dpids="$dpids $!"
done
# (polled, 60 s; the answers bounded by 30 s, as in mount_uring.sh: 24
# writers start slowly beside a sanitized daemon on a busy machine)
for _ in $(seq 600); do paused 24 && break; sleep 0.1; done
paused 24 || fail "the writers were not paused"
timeout 30 ls "$mt" >/dev/null || fail "ls did not answer in 30 s with 24 writers paused"
timeout 30 stat "$mt/k1" >/dev/null || fail "stat did not answer in 30 s with 24 writers paused"
timeout 30 "$W" stat "$mt" >/dev/null || fail "wbcache stat did not answer in 30 s with 24 writers paused"
kill_wait "a paused writer" $dpids
rm -f "$bk/filler"
do_umount || fail "wbcache umount once space was freed: $(cat "$top/umount.log")"

# ---- a signal a paused writer handles does not cut its write short, as
# on a local file system (only a fatal one does): no short write, no
# EINTR, the data whole; a writer so signalled and then killed still dies
rm -f "$bk"/*
do_mount "mem=32M,retry_timeout=600"
head -c 15000000 /dev/zero >"$bk/filler"
cat >"$top/sigw.py" <<'PY'
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
got = 0
def handler(sig, frame):
    global got
    got += 1
signal.signal(signal.SIGUSR1, handler)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n = 1 << 20
buf = ctypes.create_string_buffer(b"\x5a" * n, n)
bad = []
for i in range(int(sys.argv[2])):
    r = libc.write(fd, buf, n)
    if r < 0:
        bad.append("errno %d" % ctypes.get_errno())
        break
    if r != n:
        bad.append("short write %d of %d" % (r, n))
        break
try:
    os.close(fd)      # may tell of the writeback the full store failed
except OSError:
    pass
print("signals %d bad %s" % (got, bad or "none"))
PY
python3 "$top/sigw.py" "$mt/s1" 12 >"$top/s1.out" 2>&1 & s1=$!
python3 "$top/sigw.py" "$mt/s2" 12 >"$top/s2.out" 2>&1 & s2=$!
dpids="$s1 $s2"
# both paused: their replies deferred, each waiting in a write (at the
# limit they stay so: the store is full; once the next page went in after
# each pause, and DeferredReplies grew with it)
both_paused() {
	paused 2 && grep -q request_wait_answer /proc/$s1/wchan /proc/$s2/wchan 2>/dev/null &&
		grep -q request_wait_answer /proc/$s1/wchan 2>/dev/null &&
		grep -q request_wait_answer /proc/$s2/wchan 2>/dev/null
}
for _ in $(seq 600); do both_paused && break; sleep 0.1; done
both_paused || fail "the signalled writers were not paused: $("$W" stat "$mt" |
	grep -E "Deferred|AtRisk|WrittenByApps" | tr -s " " | tr "\n" " ")"
# and held at the limit: no page a pause goes past it
sleep 1
"$W" stat "$mt" | awk '/^DirtyThresh:/ { t = $2 } /^AtRisk:/ { r = $2 }
	END { exit r <= t + 1024 ? 0 : 1 }' ||
	fail "paused writers went past the limit: $("$W" stat "$mt" | grep -E "DirtyThresh|AtRisk" | tr -s " " | tr "\n" " ")"
for _ in $(seq 40); do kill -USR1 $s1 $s2; sleep 0.05; done
alive $s1 || fail "a paused writer ended at SIGUSR1: $(cat "$top/s1.out")"
"$W" stat "$mt" | awk '/^InterruptedPauses:/ { exit $2 == 0 ? 0 : 1 }' ||
	fail "a pause ended for a handled signal"
kill_wait "a paused writer signalled before" $s1
dpids=$s2
rm -f "$mt/s1" "$bk/filler"
timeout 120 tail --pid=$s2 -f /dev/null || fail "the signalled writer did not finish once space was freed"
wait $s2; dpids=
grep -q "bad none" "$top/s2.out" || fail "signalled writer: $(cat "$top/s2.out")"
grep -q "signals 0 " "$top/s2.out" && fail "the writer never saw a signal: $(cat "$top/s2.out")"
do_umount || fail "wbcache umount after the signalled writer: $(cat "$top/umount.log")"
[ "$(stat -c %s "$bk/s2")" = $((12 << 20)) ] || fail "the signalled writer's file: $(stat -c %s "$bk/s2") bytes"

# ---- on_error=drop: the close of one of two descriptors (dup, a child's
# exit) reports the lost write and leaves it to the fsync of the other
# (the close's FLUSH marked it seen: fsync returned 0 for lost data)
rm -f "$bk"/*
head -c 15000000 /dev/zero >"$bk/filler"
do_mount "mem=64M,on_error=drop"
python3 - "$mt" <<'PY' || fail "a lost write after the close of a dup"
import os, sys, errno, subprocess
mt = sys.argv[1]
fd = os.open(os.path.join(mt, "dup"), os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"A" * (3 << 20))
fd2 = os.dup(fd)
# the device's sync: writeback fails (the store is full), the data is dropped
subprocess.run(["getfattr", "-n", "user.wbcache.sync", mt], capture_output=True)
try:
    os.close(fd2)
    sys.exit("close of the dup returned 0 after a lost write")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
try:
    os.fsync(fd)
    sys.exit("fsync returned 0 after a lost write (the dup's close took the error)")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.fsync(fd)          # seen now: the next one has nothing to report
os.close(fd)
PY
"$W" stat "$mt" | awk '/^Lost:/ { exit $2 > 0 ? 0 : 1 }' || fail "nothing counted lost"
# a hole punched after the lost write (its range written back first) may
# fail with the error, but leaves it to the descriptor's fsync (the punch
# took it: fsync returned 0 for lost data)
python3 - "$mt" <<'PY' || fail "a lost write before a punched hole"
import ctypes, errno, os, subprocess, sys
mt = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.path.join(mt, "punch"), os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"P" * (3 << 20))
subprocess.run(["getfattr", "-n", "user.wbcache.sync", mt], capture_output=True)
# FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
if libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(1 << 20)):
    assert ctypes.get_errno() == errno.ENOSPC, os.strerror(ctypes.get_errno())
try:
    os.fsync(fd)
    sys.exit("fsync returned 0 after a lost write (the punch took the error)")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.fsync(fd)
os.close(fd)
PY
do_umount
rm -f "$bk"/*

# ---- a write lost with no descriptor open (written, closed, dropped
# later): a later open's close does not fail for it (each close of any
# later descriptor failed, until something fsynced the file); its fsync
# tells it once
do_mount "mem=64M,on_error=drop,dirty_expire_centisecs=100,dirty_writeback_centisecs=50,allow_other"
head -c 15000000 /dev/zero >"$bk/filler"
head -c 4000000 /dev/urandom >"$mt/gone" 2>/dev/null
wait_lost
python3 -c 'import os, sys
for i in range(3):
    os.close(os.open(sys.argv[1], os.O_RDWR))   # raised ENOSPC' "$mt/gone" ||
	fail "open/close after a write lost before"
told_once "$mt/gone" || fail "fsync of a new descriptor after a write lost before"
# another user's sync is told of the loss, and does not use it up: the
# owner's first umount's sync reports it too (and unmounts nothing)
chmod 755 "$top"
setpriv --reuid=65534 --regid=65534 --clear-groups getfattr -n user.wbcache.sync "$mt" \
	>/dev/null 2>"$top/nobody.err" && fail "nobody's sync: no word of the lost write"
do_umount && fail "wbcache umount: no word of the lost write (nobody's sync had it)"
# nothing at risk: it says the data was lost and a second umount will do
# (it said "the data stays in the cache")
grep -q "data was lost.*wbcache umount $mt. again unmounts it" "$top/umount.log" ||
	fail "wbcache umount after a dropped write: $(cat "$top/umount.log")"
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"
rm -f "$bk"/*

# ---- a write lost with no descriptor open, then the file forgotten by
# the kernel (drop_caches): the daemon settles it (writes it back through
# an engine handle of its own; WBCACHE_MOUNT_GHOST_AGE_MS=0: at the
# forget, not a minute later) and learns that its writeback failed, but
# the error stays the next opener's: its fsync tells it once (the
# settle's fsync took it, and the user's returned 0 for lost data)
head -c 15000000 /dev/zero >"$bk/filler"
WBCACHE_MOUNT_GHOST_AGE_MS=0 "$W" mount "$bk" "$mt" -f \
	-o mem=64M,on_error=drop,dirty_expire_centisecs=100,dirty_writeback_centisecs=50 2>"$top/fg.log" &
fg=$!
fg_up "$fg" "$top/fg.log"
pid=$fg
head -c 4000000 /dev/urandom >"$mt/forgot" 2>/dev/null
wait_lost
# the kernel forgets the inode (its FORGET may take a moment): the
# settle's failed writeback is logged
for i in $(seq 300); do
	[ $((i % 10)) = 1 ] && echo 2 >/proc/sys/vm/drop_caches
	grep -q "writeback of a forgotten file failed" "$top/fg.log" && break
	sleep 0.1
done
grep -q "writeback of a forgotten file failed" "$top/fg.log" ||
	fail "the forgotten file was not settled in 30 s: $(cat "$top/fg.log")"
rm -f "$bk/filler"
told_once "$mt/forgot" || fail "open/fsync after a forgotten file's lost write (the settle took it)"
fusermount3 -u "$mt"
wait "$fg"; pid=
rm -f "$bk"/*

# ---- a failed flush of the store (its syncfs fails with EIO, through a
# library preloaded under the daemon, once per trigger file made): the
# sync attribute and wbcache umount fail with it, once (both succeeded:
# what was written may not be on the store), and the foreground daemon
# exits 1 when its own last flush fails
preload=$PWD/$BUILD/tests/failsyncfs.so
[ -e "$preload" ] || fail "$preload is not built"
export WBCACHE_TEST_FAIL_SYNCFS=$top/failsyncfs
asan_was=${ASAN_OPTIONS-}
# a sanitizer's runtime wants to come first; the preload only wraps syncfs
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
export LD_PRELOAD=$preload
do_mount "mem=64M"
unset LD_PRELOAD
echo one >"$mt/flushed"
: >"$WBCACHE_TEST_FAIL_SYNCFS"
getfattr -n user.wbcache.sync "$mt" >/dev/null 2>"$top/sync.err" &&
	fail "the sync attribute succeeded over a failed flush of the store"
[ -e "$WBCACHE_TEST_FAIL_SYNCFS" ] && fail "the sync attribute did not flush the store"
grep -q "Input/output error" "$top/sync.err" || fail "the failed sync said: $(cat "$top/sync.err")"
getfattr -n user.wbcache.sync "$mt" >/dev/null || fail "a second sync failed (told once)"
echo two >"$mt/flushed2"
: >"$WBCACHE_TEST_FAIL_SYNCFS"
do_umount && fail "wbcache umount succeeded over a failed flush of the store"
grep -q "data was lost" "$top/umount.log" ||
	fail "wbcache umount over a failed flush: $(cat "$top/umount.log")"
[ -e "$WBCACHE_TEST_FAIL_SYNCFS" ] && fail "wbcache umount did not flush the store"
mounted "$mt" || fail "wbcache umount unmounted over a failed flush of the store"
do_umount || fail "wbcache umount after the failed one: $(cat "$top/umount.log")"
[ "$(cat "$bk/flushed" "$bk/flushed2")" = "$(printf 'one\ntwo')" ] || fail "the files are not on the store"
rm -f "$bk"/*
LD_PRELOAD=$preload "$W" mount "$bk" "$mt" -f -o mem=64M 2>"$top/fg.log" &
fg=$!
fg_up "$fg" "$top/fg.log"
pid=$fg
echo three >"$mt/flushed"
: >"$WBCACHE_TEST_FAIL_SYNCFS"
fusermount3 -u "$mt"
wait "$fg"; rc=$?; pid=
[ -e "$WBCACHE_TEST_FAIL_SYNCFS" ] && fail "the daemon's end did not flush the store"
[ $rc = 1 ] || fail "exit status $rc after its flush of the store failed: $(cat "$top/fg.log")"
grep -q "flush of the backing store" "$top/fg.log" || fail "no report of the failed flush: $(cat "$top/fg.log")"
unset WBCACHE_TEST_FAIL_SYNCFS
rm -f "$bk"/*

# ---- an explicit mtime set while writeback of the file's data lands
# (a preloaded library sets the backing mtime to now right after the
# daemon's utimensat, once per trigger file): the file keeps the time it
# was given, through the mount and on the store after unmount (the daemon
# took the time it read back, the writeback's, for the one set)
preload=$PWD/$BUILD/tests/mtimes.so
[ -e "$preload" ] || fail "$preload is not built"
export WBCACHE_TEST_MOVE_MTIME=$top/movemtime
LD_PRELOAD=$preload do_mount "mem=64M"
python3 - "$mt/timed" "$WBCACHE_TEST_MOVE_MTIME" <<'PY' || fail "an explicit mtime set during a writeback"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"x" * 100000, 0)
want = 1176130163123456789
open(sys.argv[2], "w").close()
os.utime(fd, ns=(want, want))
assert not os.path.exists(sys.argv[2]), "the daemon set no time"
got = os.fstat(fd).st_mtime_ns
os.close(fd)
assert got == want, ("fstat", got, want)
got = os.stat(sys.argv[1]).st_mtime_ns
assert got == want, ("stat after close", got, want)
PY
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"
[ "$(stat -c %Y "$bk/timed")" = 1176130163 ] ||
	fail "the store's mtime after unmount: $(stat -c %y "$bk/timed")"
unset WBCACHE_TEST_MOVE_MTIME
rm -f "$bk"/*

# ---- an explicit mtime is durable once fsync returns, and once the
# unmount returns: the same library logs the daemon's utimensat, fsync
# and syncfs calls; a time put back on a backing file after its flush
# must be followed by a flush (it was put back after the last one: a
# crash of the store lost it)
export WBCACHE_TEST_SYNCLOG=$top/synclog
LD_PRELOAD=$preload do_mount "mem=64M"
python3 - "$mt" <<'PY' || fail "explicit mtimes through the mount"
import os, sys
for name in ("synced", "closed"):
    fd = os.open(sys.argv[1] + "/" + name, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"y" * 50000, 0)
    os.utime(fd, ns=(1176130163000000000, 1176130163000000000))
    if name == "synced":
        os.fsync(fd)
    os.close(fd)
PY
# flushed_after INO: the last utimensat of INO has an fsync of it or a
# syncfs after it
flushed_after() {
	awk -v ino="$1" '$1 == "utimensat" && $2 == ino {u = NR; f = 0}
		u && (($1 == "fsync" && $2 == ino) || $1 == "syncfs") {f = 1}
		END {exit !(u && f)}' "$WBCACHE_TEST_SYNCLOG"
}
flushed_after "$(stat -c %i "$bk/synced")" ||
	fail "fsync returned with the explicit mtime put back after its flush: $(tr '\n' ' ' <"$WBCACHE_TEST_SYNCLOG")"
# a second fsync with no write since: the time is there, nothing is put
# back, and the fsync costs one flush (it cost two: a utimensat of the
# same time and a flush after it, at every fsync)
ino=$(stat -c %i "$bk/synced")
before=$(grep -c "^utimensat $ino\$" "$WBCACHE_TEST_SYNCLOG")
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDWR); os.fsync(fd); os.close(fd)' "$mt/synced"
[ "$(grep -c "^utimensat $ino\$" "$WBCACHE_TEST_SYNCLOG")" = "$before" ] ||
	fail "an fsync with no write since put the mtime back again: $(tr '\n' ' ' <"$WBCACHE_TEST_SYNCLOG")"
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"
flushed_after "$(stat -c %i "$bk/closed")" ||
	fail "the unmount returned with an explicit mtime put back after its flush: $(tr '\n' ' ' <"$WBCACHE_TEST_SYNCLOG")"
[ "$(stat -c %Y "$bk/closed")" = 1176130163 ] || fail "the closed file's mtime: $(stat -c %y "$bk/closed")"
unset WBCACHE_TEST_SYNCLOG
export ASAN_OPTIONS=$asan_was
rm -f "$bk"/*

# ---- the foreground daemon: exit status 1 for data it could not write
head -c 15000000 /dev/zero >"$bk/filler"
"$W" mount "$bk" "$mt" -f -o mem=64M,retry_timeout=1 2>"$top/fg.log" &
fg=$!
fg_up "$fg" "$top/fg.log"
pid=$fg
head -c 8000000 /dev/zero >"$mt/lost" 2>/dev/null
fusermount3 -u "$mt"
wait "$fg"; rc=$?; pid=
[ $rc = 1 ] || fail "exit status $rc with data that could not be written: $(cat "$top/fg.log")"
grep -q "bytes lost" "$top/fg.log" || fail "no report of the loss: $(cat "$top/fg.log")"

# ---- namespace and metadata operations on a store out of inodes, then
# read-only (remounted so under the mount): each answers what the same
# operation on a local tmpfs does (ENOSPC, then EROFS), a failed create
# leaves nothing behind, and other files keep working.  A truncate by
# name on the read-only store said EINVAL (the ftruncate of the engine's
# read-only descriptor), which truncate(2) never says for that.
mkdir "$top/small"
mount -t tmpfs -o size=4M,nr_inodes=64 tmpfs "$top/small" || fail "cannot mount a small tmpfs"
bk=$top/small
do_mount "mem=64M,retry_timeout=2"
timeout 120 python3 - "$mt" "$bk" <<'PY' || fail "namespace operations on a store out of inodes, then read-only"
import errno, os, subprocess, sys, time
mt, bk = sys.argv[1], sys.argv[2]
J = lambda p: os.path.join(mt, p)
def expect(what, err, f):
    try:
        f()
    except OSError as e:
        assert e.errno == err, (what, errno.errorcode.get(e.errno), errno.errorcode[err])
        return
    assert err == 0, (what, "succeeded", errno.errorcode[err])
i = 0
while True:
    try:
        os.close(os.open(J("f%d" % i), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
    except OSError as e:
        assert e.errno == errno.ENOSPC, ("create", e)
        break
    i += 1
assert i > 10, ("created only", i)
assert not os.path.lexists(J("f%d" % i)), "the failed create left an entry"
assert not os.path.lexists(os.path.join(bk, "f%d" % i)), "the failed create left a backing file"
for what, f in (("mkdir", lambda: os.mkdir(J("D"))),
                ("symlink", lambda: os.symlink("x", J("S"))),
                ("link", lambda: os.link(J("f0"), J("L"))),
                ("mknod", lambda: os.mknod(J("N"), 0o600 | 0o10000))):
    expect(what + " out of inodes", errno.ENOSPC, f)
expect("rename out of inodes", 0, lambda: os.rename(J("f1"), J("R")))
expect("rename over a file out of inodes", 0, lambda: os.rename(J("f2"), J("f3")))
expect("setxattr out of inodes", 0, lambda: os.setxattr(J("f0"), "user.a", b"v"))
with open(J("f4"), "w") as w:
    w.write("kept")
assert open(J("f4")).read() == "kept"
# an unlinked file's inode is freed once the kernel forgets it (the daemon
# pins it until then: node.c, pin_unlinked_locked), which races with the
# next request: the create may wait for that forget
os.unlink(J("f5"))
for _ in range(50):
    try:
        os.close(os.open(J("new"), os.O_CREAT | os.O_WRONLY, 0o644))
        break
    except OSError as e:
        assert e.errno == errno.ENOSPC, ("create after an unlink", e)
        time.sleep(0.1)
else:
    assert False, "no create 5 s after an unlink freed an inode"
# read-only: the mount's data written back first (a file the daemon
# holds open for writing makes the remount busy)
os.getxattr(mt, "user.wbcache.sync")
subprocess.run(["mount", "-o", "remount,ro", bk], check=True)
try:
    for what, f in (("create", lambda: os.close(os.open(J("n2"), os.O_CREAT | os.O_WRONLY, 0o644))),
                    ("open for writing", lambda: os.close(os.open(J("f4"), os.O_WRONLY))),
                    ("O_TRUNC open", lambda: os.close(os.open(J("f4"), os.O_WRONLY | os.O_TRUNC))),
                    ("truncate", lambda: os.truncate(J("f4"), 1)),
                    ("mkdir", lambda: os.mkdir(J("D"))),
                    ("symlink", lambda: os.symlink("x", J("S"))),
                    ("link", lambda: os.link(J("f0"), J("L"))),
                    ("mknod", lambda: os.mknod(J("N"), 0o600 | 0o10000)),
                    ("rename", lambda: os.rename(J("f6"), J("R2"))),
                    ("unlink", lambda: os.unlink(J("f7"))),
                    ("chmod", lambda: os.chmod(J("f4"), 0o600)),
                    ("utime", lambda: os.utime(J("f4"), (1, 1))),
                    ("setxattr", lambda: os.setxattr(J("f0"), "user.b", b"v")),
                    ("removexattr", lambda: os.removexattr(J("f0"), "user.a"))):
        expect(what + " on a read-only store", errno.EROFS, f)
    assert open(J("f4")).read() == "kept", "read on a read-only store"
    assert os.getxattr(J("f0"), "user.a") == b"v"
    assert os.stat(J("f4")).st_size == 4
finally:
    subprocess.run(["mount", "-o", "remount,rw", bk], check=True)
expect("truncate once the store is writable again", 0, lambda: os.truncate(J("f4"), 1))
assert os.stat(J("f4")).st_size == 1
PY
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"

# ---- a file written back, its own mtime not yet put back on the store
# (writeback moved the backing file's to its own time), then the store
# remounted read-only: the time cannot be put back, and wbcache umount
# says so (exit status 1) rather than succeed with the file's time lost
# (it said nothing, exit status 0, and the backing file kept the
# writeback's time)
rm -rf "${bk:?}"/*
do_mount "mem=64M,dirty_expire_centisecs=100,dirty_writeback_centisecs=50"
timeout 60 python3 - "$mt/timed" "$bk/timed" <<'PY' || fail "a written file's time before the store went read-only"
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"t" * 10000)
shown = os.fstat(fd).st_mtime_ns   # open: no settle puts it back
os.close(fd)
# no stat through the mount (it would settle the file: its time put back)
for _ in range(200):
    if os.stat(sys.argv[2]).st_mtime_ns != shown:
        break
    time.sleep(0.05)
else:
    assert False, "the writeback did not move the backing file's mtime"
PY
for _ in $(seq 100); do
	"$W" stat "$mt" | awk '/^BdiReclaimable:/ { exit $2 == 0 ? 0 : 1 }' && break
	sleep 0.1
done
# the daemon lets go of the file's descriptor after the writeback (held
# for writing, it makes the remount busy)
for _ in $(seq 100); do mount -o remount,ro "$bk" 2>/dev/null && break; sleep 0.1; done
awk -v d="$bk" '$2 == d && $4 ~ /^ro/ {f = 1} END {exit !f}' /proc/self/mounts ||
	fail "the store could not be remounted read-only"
do_umount && fail "wbcache umount succeeded with a file's time not put back on a read-only store"
mount -o remount,rw "$bk"
grep -q "could not be put back" "$top/umount.log" ||
	fail "wbcache umount with times not put back: $(cat "$top/umount.log")"
mounted "$mt" && fusermount3 -u "$mt"
wait_gone "$pid" 600 || fail "the daemon did not end"
pid=
umount "$top/small"

echo "mount fault tests passed"
