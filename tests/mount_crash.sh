#!/usr/bin/env bash
# kill -9 of the mount's daemon in the middle of writes, KILLS (30) times
# (10 under a sanitizer):
# every byte acknowledged as durable — by fsync, fdatasync, an O_DSYNC or
# O_SYNC file's write, or an RWF_DSYNC write — is in BACKING_DIR afterwards,
# and the mount point is left in a state fusermount3 -u clears.  Writers
# log each acknowledgement outside the mount before the next write.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
# 30 in the plain build; under a sanitizer, whose value is the daemon's
# races and memory (each kill costs it several times as long), 10
case $BUILD in build/release) KILLS=${KILLS:-30} ;; *) KILLS=${KILLS:-10} ;; esac
cat >"$top/writer.py" <<'PY'
import os, sys, random
mnt, log, mode, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rnd = random.Random(seed)
flags = os.O_WRONLY | os.O_CREAT
if mode == "dsync": flags |= os.O_DSYNC
if mode == "sync": flags |= os.O_SYNC
name = "%s-%d" % (mode, seed)
fd = os.open(os.path.join(mnt, name), flags, 0o644)
lf = open(log, "a", buffering=1)
off = 0
try:
    while True:
        n = rnd.choice((512, 4096, 10000, 65536, 300000))
        b = bytes(((off + i) * 31 + seed) & 0xff for i in range(n)) if n <= 10000 else \
            (bytes(((off + i) * 31 + seed) & 0xff for i in range(256)) * (n // 256 + 1))[:n]
        if mode == "rwf":
            os.pwritev(fd, [b], off, os.RWF_DSYNC)
        else:
            os.pwrite(fd, b, off)
            if mode == "fsync": os.fsync(fd)
            if mode == "fdatasync": os.fdatasync(fd)
        lf.write("%s %d %d %d\n" % (name, off, n, seed))
        off += n
except OSError:
    pass
PY
cat >"$top/check.py" <<'PY'
import os, sys
bk, log = sys.argv[1], sys.argv[2]
acks = 0
for line in open(log):
    name, off, n, seed = line.split(); off, n, seed = int(off), int(n), int(seed)
    with open(os.path.join(bk, name), "rb") as f:
        f.seek(off); got = f.read(n)
    if n <= 10000:
        want = bytes(((off + i) * 31 + seed) & 0xff for i in range(n))
    else:
        want = (bytes(((off + i) * 31 + seed) & 0xff for i in range(256)) * (n // 256 + 1))[:n]
    if got != want:
        print("LOST: %s [%d, +%d) after its acknowledgement" % (name, off, n)); sys.exit(1)
    acks += 1
print(acks)
PY
total=0
for k in $(seq "$KILLS"); do
	do_mount "mem=64M"
	: >"$top/ack.log"
	wpids=
	for mode in fsync fdatasync dsync sync rwf; do
		python3 "$top/writer.py" "$mt" "$top/ack.log" $mode $((k * 10 + ${#mode})) 2>/dev/null &
		wpids="$wpids $!"
	done
	# each writer has had a write acknowledged (an interpreter may take a
	# second to start on a loaded machine), then the kill comes at a
	# random point of the writes that follow
	for _ in $(seq 600); do
		[ "$(awk '{ print $1 }' "$top/ack.log" | sort -u | wc -l)" -ge 5 ] && break
		sleep 0.1
	done
	[ "$(awk '{ print $1 }' "$top/ack.log" | sort -u | wc -l)" -ge 5 ] ||
		fail "kill $k: a writer had no write acknowledged in 60 s: $(cut -d' ' -f1 "$top/ack.log" | sort | uniq -c)"
	sleep "0.$((RANDOM % 5 + 1))"
	kill -9 "$pid"
	wait_gone "$pid" 100 || fail "the daemon survived kill -9"
	pid=
	wait $wpids 2>/dev/null
	fusermount3 -u "$mt" || fail "fusermount3 -u after kill -9 (kill $k)"
	mountpoint -q "$mt" && fail "still mounted after fusermount3 -u"
	n=$(python3 "$top/check.py" "$bk" "$top/ack.log") || fail "kill $k: $n"
	total=$((total + n))
	rm -f "$bk"/*
done
[ "$total" -gt 0 ] || fail "no write was acknowledged"
echo "$KILLS kills: $total acknowledged writes, none lost"
