#!/usr/bin/env bash
# Random 4 KiB writes, one writer, side by side in one run on one directory:
#   wbcache   `wbcache run randwrite`: a 1 GiB file through a 256 MiB cache
#             on the file backend (its queue depth: the device's nr_requests)
#   fio       io_uring, O_DIRECT, 4 KiB random writes, iodepth 32, and again
#             at wbcache's queue depth
# for TIME seconds each, ROUNDS rounds (medians), plus writeback's CPU time
# per page written back.  Environment: WBCACHE_BENCH_DIR (default
# /var/tmp/wbcache-bench), TIME (10), ROUNDS (3).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
DIR=${WBCACHE_BENCH_DIR:-/var/tmp/wbcache-bench}
TIME=${TIME:-10}
ROUNDS=${ROUNDS:-3}
command -v fio >/dev/null || { echo "fio is missing: scripts/install-deps" >&2; exit 1; }
mkdir -p "$DIR/rw"
trap 'rm -rf "$DIR/rw"' EXIT
dev=$(df --output=source "$DIR" | tail -1)
dev=$(basename "$(readlink -f "$dev")")
disk=$(basename "$(readlink -f "/sys/class/block/$dev/..")" 2>/dev/null || true)
QD=$(cat "/sys/class/block/$dev/queue/nr_requests" 2>/dev/null ||
     cat "/sys/class/block/$disk/queue/nr_requests" 2>/dev/null || echo 32)
QD=$(( QD < 32 ? 32 : QD > 256 ? 256 : QD ))

run_wbcache() {
	"$BUILD"/wbcache run randwrite --dir "$DIR/rw" --file-size 1G --mem 256M --time "$TIME" \
		--quiet >"$DIR/w.log" 2>&1
	sed -n 's/^randwrite: .* = \([0-9]*\) MB\/s$/\1/p' "$DIR/w.log"
	# "... N us per page written back (...); in user space ...: M us per page"
	sed -n 's/^writeback CPU.*: \([0-9.]*\) us per page written back.*: \([0-9.]*\) us per page$/\1 \2/p' \
		"$DIR/w.log" >"$DIR/cpu.$1"
}
run_fio() {
	fio --name=fio --directory="$DIR/rw" --ioengine=io_uring --direct=1 --bs=4k \
	    --iodepth="$1" --size=1G --rw=randwrite --time_based --runtime="$TIME" \
	    --output-format=terse --terse-version=3 |
		awk -F';' '{ printf "%d\n", $47 * 1024 / ($50 / 1000) / 1e6 }'
}

w=() f=() q=() c=() u=()
for r in $(seq "$ROUNDS"); do
	w+=("$(run_wbcache "$r")"); c+=("$(cut -d' ' -f1 "$DIR/cpu.$r")"); u+=("$(cut -d' ' -f2 "$DIR/cpu.$r")")
	f+=("$(run_fio 32)")
	q+=("$(run_fio "$QD")")
	echo "round $r: wbcache ${w[-1]} MB/s (${c[-1]} us CPU/page, ${u[-1]} in user space), fio QD32 ${f[-1]} MB/s, fio QD$QD ${q[-1]} MB/s"
done
W=$(printf '%s\n' "${w[@]}" | median)
F=$(printf '%s\n' "${f[@]}" | median)
Q=$(printf '%s\n' "${q[@]}" | median)
C=$(printf '%s\n' "${c[@]}" | median)
U=$(printf '%s\n' "${u[@]}" | median)
echo
echo "random 4 KiB writes, 1 GiB file, ${TIME} s, $DIR, median of $ROUNDS rounds"
printf '%-48s %8s %s\n' "peer" "MB/s" "wbcache / peer"
printf '%-48s %8s %s\n' "wbcache run randwrite (256 MiB cache, QD$QD)" "$W" "-"
printf '%-48s %8s %.2fx\n' "fio io_uring O_DIRECT iodepth=32" "$F" "$(ratio "$W" "$F")"
printf '%-48s %8s %.2fx\n' "fio io_uring O_DIRECT iodepth=$QD" "$Q" "$(ratio "$W" "$Q")"
echo "writeback CPU (flusher + completion threads) per 4 KiB page written back: $C us," \
     "of which in user space (the engine; the rest is the kernel's I/O path): $U us"
