#!/usr/bin/env bash
# Streaming write benchmark, side by side in one run on one directory:
#   wbcache   `wbcache run dd`: 1 MiB writes through the engine + file backend, then fsync
#   fio       io_uring, O_DIRECT, 1 MiB blocks, iodepth 32, end_fsync
#   dd        the kernel's buffered path: dd bs=1M conv=fsync
# Each round runs the three back to back; the median of ROUNDS rounds is
# reported with the ratios.  Environment: WBCACHE_BENCH_DIR (default
# /var/tmp/wbcache-bench), SIZE_MB (2048), ROUNDS (3), MEM (1G: wbcache's
# cache budget).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
DIR=${WBCACHE_BENCH_DIR:-/var/tmp/wbcache-bench}
SIZE_MB=${SIZE_MB:-2048}
ROUNDS=${ROUNDS:-3}
MEM=${MEM:-1G}
command -v fio >/dev/null || { echo "fio is missing: scripts/install-deps" >&2; exit 1; }
mkdir -p "$DIR"
trap 'rm -rf "$DIR"/stream.* "$DIR"/fio.* "$DIR"/dd.out' EXIT

drop_caches() { sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches || true; }

run_wbcache() {
	"$BUILD"/wbcache run dd --dir "$DIR" --size "${SIZE_MB}M" --bs 1M --mem "$MEM" --quiet |
		sed -n 's/^dd: .* = \([0-9]*\) MB\/s$/\1/p'
}
run_fio() {
	# terse v3: field 47 = KiB written, field 50 = write runtime in ms
	fio --name=fio --directory="$DIR" --ioengine=io_uring --direct=1 --bs=1M \
	    --iodepth=32 --size="${SIZE_MB}M" --rw=write --end_fsync=1 \
	    --output-format=terse --terse-version=3 |
		awk -F';' '{ printf "%d\n", $47 * 1024 / ($50 / 1000) / 1e6 }'
	rm -f "$DIR"/fio.*
}
run_dd() {
	dd if=/dev/zero of="$DIR/dd.out" bs=1M count="$SIZE_MB" conv=fsync 2>&1 |
		awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") t = $(i-1);
			       printf "%d\n", $1 / t / 1e6 }'
	rm -f "$DIR/dd.out"
}

w=() f=() d=()
for r in $(seq "$ROUNDS"); do
	drop_caches; w+=("$(run_wbcache)")
	drop_caches; f+=("$(run_fio)")
	drop_caches; d+=("$(run_dd)")
	echo "round $r: wbcache ${w[-1]} MB/s, fio O_DIRECT ${f[-1]} MB/s, kernel buffered dd ${d[-1]} MB/s"
done
W=$(printf '%s\n' "${w[@]}" | median)
F=$(printf '%s\n' "${f[@]}" | median)
D=$(printf '%s\n' "${d[@]}" | median)
echo
echo "stream ${SIZE_MB} MiB of 1 MiB writes + fsync, $DIR, median of $ROUNDS rounds"
printf '%-44s %8s %s\n' "peer" "MB/s" "wbcache / peer"
printf '%-44s %8s %s\n' "wbcache run (file backend, io_uring O_DIRECT)" "$W" "-"
printf '%-44s %8s %.2fx\n' "fio io_uring O_DIRECT bs=1M iodepth=32" "$F" "$(ratio "$W" "$F")"
printf '%-44s %8s %.2fx\n' "dd bs=1M conv=fsync (kernel buffered)" "$D" "$(ratio "$W" "$D")"
