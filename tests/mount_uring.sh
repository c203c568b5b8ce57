#!/usr/bin/env bash
# FUSE over io_uring (-o uring=): with the fuse module's enable_uring at N,
# uring=1 fails with a reason and exit 2 and uring=auto (the default)
# mounts over /dev/fuse; at Y the default uses the rings, uring=0 does not; (set here, the old value restored at the end) requests
# go through the rings (wbcache stat counts them) and real work runs
# through them, checked in BACKING_DIR after unmount: tar -x and diff -r,
# fio --verify=crc32c (psync and io_uring engines), concurrent mkdir and
# rmdir, fsync'd and O_DSYNC data on the store before unmount, a
# throttled writer that keeps going while metadata answers, 40 writers
# stuck on a full store while metadata answers on every CPU, a ring that
# fails ends the mount (data written back), and so does an entry's
# command that fails; a queue some of whose entries the kernel refused
# serves with the rest (auto and uring=1), direct writes
# beside cached and mapped opens (answered by a helper thread), writers
# stuck on a full store that die at SIGKILL (INTERRUPT through /dev/fuse
# for requests on the rings), SIGTERM with requests on the rings, 1 MiB
# direct writes and reads and error answers through the rings, a paused
# writer that handles SIGUSR1 (its writes whole), kill -9 of the daemon
# with requests on the rings (callers end, fusermount3 -u clears it).
# Skips (77) when not root or the kernel has no FUSE over io_uring.
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skip: needs root (the fuse module's enable_uring)"; exit 77; }
P=/sys/module/fuse/parameters/enable_uring
[ -e "$P" ] || { echo "skip: the kernel has no FUSE over io_uring ($P: Linux 6.14+, CONFIG_FUSE_IO_URING)"; exit 77; }
old=$(cat "$P")
unset WBCACHE_TEST_MOUNT_OPTS   # the options here are the test
. tests/mountlib.bash
bgpids=
extra_cleanup() {
	[ -n "$bgpids" ] && kill -9 $bgpids 2>/dev/null
	mountpoint -q "$top/tiny" 2>/dev/null && umount -l "$top/tiny"
	mountpoint -q "$top/full" 2>/dev/null && umount -l "$top/full"
	echo "$old" >"$P"
}
ncpu=$(awk -F'[-,]' '{ n = 0; for (i = 1; i <= NF; i += 2) n += (i < NF ? $(i+1) : $i) - $i + 1 } END { print n }' \
	/sys/devices/system/cpu/possible 2>/dev/null)
statv() { "$W" stat "$mt" | awk -v k="^$1:" '$0 ~ k { print $2 }'; }
# abort_mnt: the connection of $mt aborted (a daemon that serves it no
# more), so that its callers end and cleanup can unmount
abort_mnt() {
	local dev
	mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections
	dev=$(awk -v m="$mt" '$5 == m {print $3}' /proc/self/mountinfo)
	[ -n "$dev" ] && echo 1 >"/sys/fs/fuse/connections/${dev#*:}/abort"
}

# ---- enable_uring=N: uring=1 fails with a reason, exit 2, nothing mounted;
# auto mounts through /dev/fuse; a bad value is refused
echo N >"$P"
msg=$("$W" mount "$bk" "$mt" -o uring=1 2>&1); rc=$?
[ $rc = 2 ] || fail "uring=1 with enable_uring=N: exit $rc, not 2 ($msg)"
echo "$msg" | grep -q "enable_uring" || fail "uring=1 with enable_uring=N: no reason: $msg"
mountpoint -q "$mt" && fail "uring=1 with enable_uring=N mounted anyway"
msg=$("$W" mount "$bk" "$mt" -o uring=maybe 2>&1); rc=$?
[ $rc = 2 ] && [ -n "$msg" ] || fail "uring=maybe: exit $rc ($msg)"
for o in uring=auto ""; do   # "": the default, auto
	do_mount "$o"
	echo plain >"$mt/plain"
	[ "$(statv UringQueues)" = 0 ] || fail "'$o' with enable_uring=N uses rings"
	do_umount || fail "umount ('$o', N)"
	[ "$(cat "$bk/plain")" = plain ] || fail "data of the '$o' mount"
done

# ---- enable_uring=Y; a registration that fails after INIT asked for
# io_uring (the kernel then waits for the rings): auto falls back to
# /dev/fuse (requests must not wait for ever), uring=1 fails
echo Y >"$P" || skip "cannot set $P"
WBCACHE_MOUNT_URING_FAIL=1 "$W" mount "$bk" "$mt" -o uring=auto 2>"$top/mount.log" ||
	fail "uring=auto with a failed registration: $(cat "$top/mount.log")"
timeout -s KILL 10 sh -c "echo fallback >'$mt/fallback'" ||
	fail "a write waits for rings that failed to register"
pid=$(daemon_pid)
[ "$(statv UringQueues)" = 0 ] || fail "rings in use after their registration failed"
do_umount || fail "umount (auto, failed registration)"
[ "$(cat "$bk/fallback")" = fallback ] || fail "data of the fallback mount"
msg=$(WBCACHE_MOUNT_URING_FAIL=1 "$W" mount "$bk" "$mt" -o uring=1 2>&1); rc=$?
[ $rc = 2 ] || fail "uring=1 with a failed registration: exit $rc, not 2 ($msg)"
echo "$msg" | grep -q "registration failed" || fail "uring=1 with a failed registration: $msg"
mountpoint -q "$mt" && fail "uring=1 with a failed registration mounted anyway"
for o in uring=auto ""; do
	do_mount "$o"
	[ "$(statv UringQueues)" = "$ncpu" ] || fail "'$o' with enable_uring=Y uses no rings"
	do_umount || fail "umount ('$o', Y)"
done
do_mount "uring=0"
[ "$(statv UringQueues)" = 0 ] || fail "uring=0 with enable_uring=Y uses rings"
do_umount || fail "umount (uring=0, Y)"

# ---- a partial refusal (WBCACHE_MOUNT_URING_FAIL=part: the kernel takes
# every entry but the last queue's last, registered after all the others,
# so the kernel sends requests to the rings from that queue's first
# entry on): the rings serve, under auto and uring=1 (a fall back to
# /dev/fuse left requests waiting for ever on rings nothing served)
# (UringEntries: one fewer than a mount without the refusal, or the
# kernel took the entry and the test showed nothing)
do_mount uring=1
full=$(statv UringEntries)
do_umount || fail "umount (uring=1)"
for o in uring=auto uring=1; do
	WBCACHE_MOUNT_URING_FAIL=part "$W" mount "$bk" "$mt" -o "$o" 2>"$top/mount.log" ||
		fail "'$o' with a partial refusal: exit $?: $(cat "$top/mount.log")"
	if ! timeout -s KILL 10 taskset -c "$((ncpu - 1))" sh -c "echo part >'$mt/part'"; then
		abort_mnt
		fail "'$o' with a partial refusal: a write waits for rings nothing serves"
	fi
	pid=$(daemon_pid)
	[ "$(statv UringQueues)" = "$ncpu" ] || fail "'$o' with a partial refusal uses no rings"
	[ "$(statv UringEntries)" = $((full - 1)) ] ||
		fail "'$o' with a partial refusal: $(statv UringEntries) ring entries, expected $((full - 1))"
	do_umount || fail "umount ('$o', partial refusal)"
	[ "$(cat "$bk/part")" = part ] || fail "data of the mount with a partial refusal"
	rm -f "$bk/part"
done

# ---- the rings serve requests
do_mount "uring=1,mem=256M"
q=$(statv UringQueues)
[ "$q" = "$ncpu" ] || fail "UringQueues $q, not one per possible CPU ($ncpu)"
r0=$(statv UringRequests)
mkdir "$mt/many"
for i in $(seq 300); do echo "$i" >"$mt/many/f$i"; done
r1=$(statv UringRequests)
[ $((r1 - r0)) -ge 600 ] || fail "300 new files took $((r1 - r0)) requests through the rings"
# a request from each CPU is served (by that CPU's queue)
for c in $(seq 0 $((ncpu - 1))); do
	taskset -c "$c" sh -c "echo cpu$c >'$mt/cpu$c'" 2>/dev/null
done

# tar -x of a tree; checked after unmount
tree=/usr/include
[ -d "$tree" ] || tree=/usr/share/doc
tar -C "$(dirname "$tree")" -cf "$top/tree.tar" "$(basename "$tree")" 2>/dev/null
mkdir "$mt/x"
tar -C "$mt/x" -xf "$top/tree.tar" || fail "tar -x through the rings"

# fio with verification, psync and io_uring engines
if command -v fio >/dev/null; then
	for eng in psync io_uring; do
		fio --name=v$eng --directory="$mt" --rw=randwrite --bs=4k --size=24M --ioengine=$eng \
		    --iodepth=8 --numjobs=2 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --end_fsync=1 \
		    >"$top/fio.$eng" 2>&1 || fail "fio $eng: $(tail -5 "$top/fio.$eng")"
	done
fi

# two concurrent mkdir/rmdir loops: on one name (races: EEXIST, ENOENT)
# and each on its own names (every call succeeds)
(for i in $(seq 400); do mkdir "$mt/race" 2>/dev/null; rmdir "$mt/race" 2>/dev/null; done; echo done >"$top/l1") &
l1=$!
(for i in $(seq 400); do mkdir "$mt/race" 2>/dev/null; rmdir "$mt/race" 2>/dev/null; done; echo done >"$top/l2") &
l2=$!
bgpids="$l1 $l2"
for i in $(seq 300); do mkdir "$mt/own$i" && rmdir "$mt/own$i" || fail "mkdir/rmdir own$i"; done
wait $l1 $l2
bgpids=
[ -e "$top/l1" ] && [ -e "$top/l2" ] || fail "a mkdir/rmdir loop did not finish"
rmdir "$mt/race" 2>/dev/null
[ -z "$(ls "$mt" | grep -E '^(race|own)')" ] || fail "left over: $(ls "$mt" | grep -E '^(race|own)')"

# fsync'd data is on the store before unmount; O_DSYNC writes too
head -c 3000000 /dev/urandom >"$top/model"
dd if="$top/model" of="$mt/synced" bs=64k conv=fsync status=none || fail "dd conv=fsync"
cmp "$top/model" "$bk/synced" || fail "fsync'd data not on the store"
dd if="$top/model" of="$mt/dsync" bs=64k oflag=dsync status=none || fail "dd oflag=dsync"
cmp "$top/model" "$bk/dsync" || fail "O_DSYNC data not on the store"

# direct writes beside a cached open, and beside a shared mapping with
# dirty pages (the kernel writes those back when the write invalidates
# them: a helper thread answers the direct write, the ring the
# write-back)
python3 - "$mt/coh" <<'PY' || fail "direct writes beside cached and mapped opens"
import mmap, os, sys
p = sys.argv[1]
with open(p, "wb") as f:
    f.write(b"a" * 65536)
r = os.open(p, os.O_RDONLY)              # through the kernel's page cache
assert os.pread(r, 16, 0) == b"a" * 16
w = os.open(p, os.O_WRONLY)              # direct
for i in range(50):
    os.pwrite(w, bytes([65 + i % 26]) * 4096, 0)
    got = os.pread(r, 4096, 0)
    assert got == bytes([65 + i % 26]) * 4096, (i, got[:8])
m = os.open(p, os.O_RDWR)
mm = mmap.mmap(m, 65536)
for i in range(50):
    mm[8192:8192 + 4096] = bytes([97 + i % 26]) * 4096   # dirty a mapped page
    os.pwrite(w, b"Z" * 4096, 8192)                       # direct write over it
    assert os.pread(r, 4096, 8192) in (b"Z" * 4096, bytes([97 + i % 26]) * 4096)
mm.close()
for fd in (r, w, m):
    os.close(fd)
PY
r2=$(statv UringRequests)
[ $((r2 - r1)) -ge 10000 ] || fail "the work took only $((r2 - r1)) requests through the rings"
# every CPU's file is there, and nothing went wrong
for c in $(seq 0 $((ncpu - 1))); do
	[ "$(cat "$mt/cpu$c" 2>/dev/null)" = "cpu$c" ] || fail "a file made from CPU $c"
done
do_umount || fail "wbcache umount: $(cat "$top/umount.log")"
diff -r --no-dereference "$tree" "$bk/x/$(basename "$tree")" >"$top/diff" || fail "tar tree differs: $(head -5 "$top/diff")"
for i in $(seq 300); do [ "$(cat "$bk/many/f$i")" = "$i" ] || fail "many/f$i"; done
cmp "$top/model" "$bk/synced" && cmp "$top/model" "$bk/dsync" || fail "data after unmount"

# ---- a ring whose wait fails for good (WBCACHE_MOUNT_URING_FAIL=wait:
# the wait of the queue that answers a read of user.wbcache.ring-fail on
# the root, as for a dropped completion, EBADR): its CPU's requests would
# wait for ever; the mount ends as at SIGTERM instead, what it held
# written back
export WBCACHE_MOUNT_URING_FAIL=wait
do_mount "uring=1,dirty_expire_centisecs=60000"
unset WBCACHE_MOUNT_URING_FAIL
echo held >"$mt/held"
last=$((ncpu - 1))
timeout 60 taskset -c "$last" getfattr -n user.wbcache.ring-fail "$mt" >/dev/null 2>&1
timeout 60 taskset -c "$last" sh -c "echo cpu$last >'$mt/failing'" 2>/dev/null
wait_gone "$pid" 600 || fail "the daemon did not end after its ring failed"
pid=
for _ in $(seq 100); do mounted "$mt" || break; sleep 0.1; done
mounted "$mt" && fail "still mounted after a ring failed"
[ "$(cat "$bk/held" 2>/dev/null)" = held ] || fail "a failed ring's mount did not write back"
rm -f "$bk/held" "$bk/failing"

# ---- an entry's command that fails while the mount runs
# (WBCACHE_MOUNT_URING_FAIL=cmd: the answer to a read of
# user.wbcache.ring-fail on the root is committed naming a queue the
# kernel does not have, EINVAL): the entry is out of the kernel's pool (a queue
# that lost them all would leave its CPU's requests waiting for ever);
# the mount ends as at SIGTERM, what it held written back, exit status 1
export WBCACHE_MOUNT_URING_FAIL=cmd
do_mount "uring=1,dirty_expire_centisecs=60000"
unset WBCACHE_MOUNT_URING_FAIL
echo held >"$mt/held"
# (the read waits in the kernel for an answer that never comes until the
# connection ends: its caller cannot be killed before)
taskset -c "$last" getfattr -n user.wbcache.ring-fail "$mt" >/dev/null 2>&1 &
bgpids=$!
if ! wait_gone "$pid" 300; then
	abort_mnt
	fail "the daemon did not end after an entry's command failed"
fi
pid=
wait $bgpids
bgpids=
for _ in $(seq 100); do mounted "$mt" || break; sleep 0.1; done
mounted "$mt" && fail "still mounted after an entry's command failed"
[ "$(cat "$bk/held" 2>/dev/null)" = held ] || fail "the mount whose entry failed did not write back"
rm -f "$bk/held"

# ---- a throttled writer keeps going (its answers come from the replier)
# while metadata answers.  Its pauses are made certain by a store that is
# full until the test frees it (its pages stay dirty): a sanitized daemon
# wrote back as fast as dd wrote, and paused it 2 times of 150 MB
mkdir "$top/full"
if mount -t tmpfs -o size=64M tmpfs "$top/full" 2>/dev/null; then
	bk0=$bk bk=$top/full
	do_mount "uring=1,mem=16M,dirty_bytes=2M,dirty_background_bytes=1M,qd=1,max_io=64K,retry_timeout=300"
	head -c $((63 << 20)) /dev/zero >"$bk/filler" 2>/dev/null
	head -c 48000000 /dev/urandom >"$top/big" 2>/dev/null || head -c 48000000 /dev/zero >"$top/big"
	(timeout 300 dd if="$top/big" of="$mt/big" bs=1M status=none 2>"$top/dd.err"; echo $? >"$top/dd.rc") &
	bgpids=$!
	for i in $(seq 600); do
		[ "$(statv DeferredReplies)" -gt 0 ] && break
		sleep 0.1
	done
	[ "$(statv DeferredReplies)" -gt 0 ] || fail "the writer was never paused (DeferredReplies 0) over a full store"
	for i in $(seq 20); do
		timeout 20 ls "$mt" >/dev/null || fail "ls did not answer beside a throttled writer"
		timeout 20 stat "$mt/big" >/dev/null || fail "stat did not answer beside a throttled writer"
		sleep 0.1
	done
	rm -f "$bk/filler"
	wait $bgpids
	bgpids=
	# its writes all taken; the writeback's failures while the store was
	# full are told at close (retried, and written since: none lost)
	[ "$(cat "$top/dd.rc")" = 0 ] || grep -q "^dd: closing output file.*No space left" "$top/dd.err" ||
		fail "the throttled writer failed or hung: $(cat "$top/dd.rc") $(cat "$top/dd.err")"
	do_umount || fail "umount after the throttled writer"
	cmp "$top/big" "$bk/big" || fail "the throttled writer's data"
	rm -f "$top/big"
	umount "$top/full"
	bk=$bk0
fi

# ---- 40 writers stuck on a full store (more than a queue's first
# entries) while metadata answers on every CPU; they die at SIGKILL (the
# INTERRUPT comes through /dev/fuse for a request on a ring); SIGTERM ends
# the daemon
mkdir "$top/tiny"
if mount -t tmpfs -o size=16M tmpfs "$top/tiny" 2>/dev/null; then
	bk=$top/tiny
	do_mount "uring=1,mem=64M,retry_timeout=60"
	head -c 15000000 /dev/zero >"$bk/filler"
	# more writers than a queue's first entries: each holds one
	for i in $(seq 40); do
		dd if=/dev/zero of="$mt/t$i" bs=1M count=1000 status=none 2>/dev/null &
		bgpids="$bgpids $!"
	done
	# metadata answers on every CPU all along (each paused writer holds
	# a ring entry: the queues must grow; a queue that cannot never
	# answers: 30 s, for a sanitized daemon on a busy machine)
	for i in $(seq 20); do
		for c in $(seq 0 $((ncpu - 1))); do
			timeout 30 taskset -c "$c" ls "$mt" >/dev/null ||
				fail "ls on CPU $c did not answer in 30 s beside 40 writers stuck on a full store"
		done
		sleep 0.25
	done
	# all paused by now on an idle machine: polled (60 s), as 40 writers
	# start slowly beside a sanitized daemon on a busy one
	for i in $(seq 600); do
		[ "$(statv DeferredReplies)" -ge 40 ] && break
		sleep 0.1
	done
	[ "$(statv DeferredReplies)" -ge 40 ] || fail "the writers were not all paused"
	kill_wait "a writer paused on a full store" $bgpids
	bgpids=
	rm -f "$bk/filler" "$mt"/t*
	echo after >"$mt/after" || fail "a write after the writers died"
	# SIGTERM with a writer on the rings: the daemon ends
	dd if=/dev/zero of="$mt/last" bs=1M count=8 status=none 2>/dev/null &
	bgpids=$!
	sleep 0.2
	kill -TERM "$pid"
	wait_gone "$pid" 600 || fail "the daemon did not end at SIGTERM"
	pid=
	for _ in $(seq 300); do alive "$bgpids" || break; sleep 0.1; done
	alive "$bgpids" && fail "a writer still ran 30 s after the daemon ended"
	wait $bgpids 2>/dev/null
	bgpids=
	mountpoint -q "$mt" && fail "still mounted after SIGTERM"
	[ "$(cat "$bk/after")" = after ] || fail "data written after the writers died"
	umount "$top/tiny"
fi
# ---- 1 MiB requests (max_pages) and error answers through the rings; a
# writer that handles SIGUSR1 while its writes are paused keeps them whole
# (the INTERRUPT comes through /dev/fuse for a request on a ring); kill -9
# of the daemon with requests on the rings: their callers end, and
# fusermount3 -u clears the mount
bk=$top/backing
do_mount "uring=1,mem=64M,dirty_bytes=2M,dirty_background_bytes=1M,qd=1,max_io=64K"
head -c $((16 << 20)) /dev/urandom >"$top/model"
dd if="$top/model" of="$mt/large" bs=1M oflag=direct status=none || fail "1 MiB direct writes through the rings"
cmp <(dd if="$mt/large" bs=1M iflag=direct status=none) "$top/model" || fail "1 MiB direct reads through the rings"
python3 - "$mt" <<'PY' || fail "error answers through the rings"
import errno, os, sys
mt = sys.argv[1]
def err(want, fn, *a):
    try:
        fn(*a)
    except OSError as e:
        assert e.errno == want, (fn.__name__, a, e)
        return
    raise AssertionError((fn.__name__, a, "succeeded"))
err(errno.ENOENT, os.stat, mt + "/nope")
err(errno.ENOENT, os.open, mt + "/nope", os.O_RDONLY)
os.mkdir(mt + "/d")
err(errno.EEXIST, os.mkdir, mt + "/d")
open(mt + "/d/f", "w").close()
err(errno.ENOTEMPTY, os.rmdir, mt + "/d")
err(errno.ENODATA, os.getxattr, mt + "/d/f", "user.none")
err(errno.ENOTDIR, os.listdir, mt + "/d/f")
os.setxattr(mt + "/d/f", "user.small", b"v" * 100)
assert os.getxattr(mt + "/d/f", "user.small") == b"v" * 100
os.unlink(mt + "/d/f")
os.rmdir(mt + "/d")
PY
python3 - "$mt/sig" >"$top/sig.out" 2>&1 <<'PY' &
import os, signal, sys
got = [0]
signal.signal(signal.SIGUSR1, lambda s, f: got.__setitem__(0, got[0] + 1))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
print("ready", flush=True)
for i in range(200):
    r = os.pwrite(fd, bytes([i % 251]) * (1 << 20), i << 20)
    assert r == 1 << 20, ("short write", i, r)
os.close(fd)
# ignored from here: Python's exit puts a handled signal back to its
# default, which a late SIGUSR1 would then die of
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
print("done", got[0], flush=True)
PY
sp=$!
bgpids=$sp
# (its handler set before "ready": a SIGUSR1 sent before that kills it.
# Polled, 60 s: an interpreter may take seconds to start on a loaded
# machine, and the signals went out after 5 s whether or not it was ready)
for _ in $(seq 600); do grep -q ready "$top/sig.out" && break; sleep 0.1; done
grep -q ready "$top/sig.out" || fail "the writer to be signalled did not start in 60 s: $(cat "$top/sig.out")"
while kill -USR1 $sp 2>/dev/null; do sleep 0.01; done
wait $sp || fail "a writer handling SIGUSR1: $(cat "$top/sig.out")"
bgpids=
grep -q "^done [1-9]" "$top/sig.out" || fail "the writer got no signal: $(cat "$top/sig.out")"
[ "$(statv DeferredReplies)" -gt 0 ] || fail "the signalled writer was never paused"
python3 - "$mt/sig" <<'PY' || fail "the signalled writer's data"
import sys
d = open(sys.argv[1], "rb").read()
assert len(d) == 200 << 20, len(d)
for i in range(200):
    assert d[i << 20:(i + 1) << 20] == bytes([i % 251]) * (1 << 20), i
PY
for c in $(seq 0 $((ncpu - 1))); do
	taskset -c "$c" dd if=/dev/zero of="$mt/k$c" bs=1M count=4000 status=none 2>/dev/null &
	bgpids="$bgpids $!"
	taskset -c "$c" dd if=/dev/zero of="$mt/s$c" bs=64k count=4000 oflag=dsync status=none 2>/dev/null &
	bgpids="$bgpids $!"
	taskset -c "$c" sh -c "while ls '$mt' >/dev/null 2>&1; do :; done" &
	bgpids="$bgpids $!"
done
sleep 1
kill -9 "$pid"
wait_gone "$pid" 100 || fail "the daemon survived SIGKILL"
pid=
for p in $bgpids; do
	for _ in $(seq 100); do alive "$p" || break; sleep 0.1; done
	alive "$p" && fail "a caller still ran 10 s after the daemon was killed (state $(awk '{print $3}' /proc/$p/stat))"
done
wait $bgpids 2>/dev/null
bgpids=
timeout 30 fusermount3 -u "$mt" || fail "fusermount3 -u after the daemon was killed"
mounted "$mt" && fail "still mounted after fusermount3 -u"
rm -f "$bk"/k* "$bk"/s* "$bk/large" "$bk/sig"

# ---- SIGTERM while a helper runs a direct write over a full store whose
# range holds a dirty mapped page: once the store has room the write's
# invalidation sends that page's write-back to a ring, after the rings
# stopped handling requests; it is answered (ENOTCONN), so the helper
# ends and so does the daemon (it waited for the helper for ever)
if mount -t tmpfs -o size=16M tmpfs "$top/tiny" 2>/dev/null; then
	bk=$top/tiny
	term_during_inval "uring=1,mem=16M,dirty_bytes=256K,dirty_background_bytes=128K,retry_timeout=300" \
		"a helper's direct write waits for a write-back no ring answers"
	umount "$top/tiny"
fi
echo "mount_uring tests passed"
