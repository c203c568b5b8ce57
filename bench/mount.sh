#!/usr/bin/env bash
# The FUSE mount against the kernel, side by side in one run on one backing
# directory (default /var/tmp/wbm, on the disk):
#   dd      dd bs=1M count=SIZE_MB conv=fsync: through the mount vs the
#           kernel's buffered dd on the backing directory
#   fio     1 MiB sequential writes (psync, end_fsync=1): through the mount
#           vs the same job buffered on the backing directory
#   fs_mark 4 KiB files, 2 threads, no fsync (-S 0): through the mount vs on
#           the backing directory
#   meta    stat and readdir latency (p50, p99, max) through the mount while
#           WRITERS (64) processes rewrite files as fast as they can, every
#           one of them throttled (MEM_META: 64M cache)
# Median of ROUNDS (3) rounds each; caches dropped before every run.  The
# mount runs in its default (background) mode, unmounted by wbcache umount.
# Environment: WBCACHE_BENCH_DIR, SIZE_MB (2048), ROUNDS (3), MEM (1G: the
# mount's cache), FILES (20000: fs_mark files per thread).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
W=$(realpath "$BUILD/wbcache")
DIR=${WBCACHE_BENCH_DIR:-/var/tmp/wbm}   # short: fs_mark takes paths under 40 bytes
SIZE_MB=${SIZE_MB:-2048}
ROUNDS=${ROUNDS:-3}
MEM=${MEM:-1G}
FILES=${FILES:-20000}
for t in fio fs_mark fusermount3; do
	command -v $t >/dev/null || { echo "$t is missing: scripts/install-deps" >&2; exit 1; }
done
bk=$DIR/b mt=$DIR/m
mkdir -p "$bk" "$mt"
cleanup() {
	mountpoint -q "$mt" && "$W" umount "$mt"
	rm -rf "$DIR"
}
trap cleanup EXIT

drop_caches() { sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches || true; }
do_mount() { "$W" mount "$bk" "$mt" -o "mem=${1:-$MEM}"; }
do_umount() { "$W" umount "$mt"; }

dd_mbs() {   # dd_mbs DIR -> MB/s
	dd if=/dev/zero of="$1/dd.out" bs=1M count="$SIZE_MB" conv=fsync 2>&1 |
		awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") t = $(i-1);
			       printf "%d\n", $1 / t / 1e6 }'
	rm -f "$1/dd.out"
}
fio_mbs() {  # fio_mbs DIR -> MB/s (terse v3: 47 = KiB written, 50 = ms)
	fio --name=seq --directory="$1" --rw=write --bs=1M --size="${SIZE_MB}M" \
	    --ioengine=psync --end_fsync=1 --output-format=terse --terse-version=3 |
		awk -F';' '{ printf "%d\n", $47 * 1024 / ($50 / 1000) / 1e6 }'
	rm -f "$1"/seq.*
}
fsmark_fps() {   # fsmark_fps DIR -> files/s
	mkdir -p "$1/fsm"
	(cd "$DIR" && fs_mark -d "$1/fsm" -n "$FILES" -s 4096 -t 2 -S 0 -k -L 1) >"$DIR/fsmark.log" 2>&1 || true
	local v
	v=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { printf "%d\n", v }' "$DIR/fsmark.log")
	[ "$v" -gt 0 ] || { echo "fs_mark failed in $1:" >&2; head -3 "$DIR/fsmark.log" >&2; }
	echo "$v"
	rm -rf "$1/fsm"
}

declare -A R
for r in $(seq "$ROUNDS"); do
	for test in dd fio fsmark; do
		case $test in dd) f=dd_mbs ;; fio) f=fio_mbs ;; fsmark) f=fsmark_fps ;; esac
		drop_caches; do_mount; m=$($f "$mt"); do_umount
		drop_caches; k=$($f "$bk")
		R[$test.m]+="$m "; R[$test.k]+="$k "
		echo "round $r $test: mount $m, kernel $k"
	done
done
echo
echo "wbcache mount vs the kernel on $bk, median of $ROUNDS rounds"
printf '%-58s %10s %10s %8s\n' "test" "mount" "kernel" "ratio"
row() {
	m=$(echo ${R[$1.m]} | tr ' ' '\n' | median); k=$(echo ${R[$1.k]} | tr ' ' '\n' | median)
	printf '%-58s %10s %10s %7.2fx\n' "$2" "$m" "$k" "$(ratio "$m" "$k")"
}
row dd "dd bs=1M count=$SIZE_MB conv=fsync, MB/s"
row fio "fio 1 MiB sequential write, psync, end_fsync, MB/s"
row fsmark "fs_mark 2 threads x $FILES files of 4 KiB, -S 0, files/s"

# ---- metadata while every writer is throttled
WRITERS=${WRITERS:-64}
do_mount "${MEM_META:-64M}"
rm -f "$DIR/stop"
# one long-lived process per writer, rewriting 4 MiB of its file in 1 MiB
# writes (a dd per pass would measure the scheduler's fork/exec storm)
for i in $(seq "$WRITERS"); do
	python3 - "$mt/w$i" "$DIR/stop" <<'PY' &
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
buf, i = bytes(1 << 20), 0
while not os.path.exists(sys.argv[2]):
    try:
        os.pwrite(fd, buf, (i % 4) << 20)
    except OSError:
        break
    i += 1
PY
done
sleep 2
python3 - "$mt" <<'PY'
import os, sys, time
m = sys.argv[1]
lat = []
for i in range(200):
    t = time.monotonic(); os.stat(os.path.join(m, "w1")); lat.append(time.monotonic() - t)
    t = time.monotonic(); os.listdir(m); lat.append(time.monotonic() - t)
    time.sleep(0.02)
lat.sort()
print("metadata (stat, readdir) with throttled writers: %d probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms"
      % (len(lat), lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99) - 1] * 1e3, lat[-1] * 1e3))
PY
"$W" stat "$mt" | awk '/^Pauses:|^DeferredReplies:/ { printf "%s %s  ", $1, $2 } END { print "" }'
touch "$DIR/stop"; wait
do_umount
