#!/usr/bin/env bash
# Remote storage over NBD, side by side in one run, each against its peer
# on the same nbdkit server (Unix socket, memory plugin):
#   1. local: 1 MiB writes + flush through `wbcache run dd --dev nbd+unix:`
#      against fio's nbd engine (iodepth 32); random 4 KiB writes both ways;
#   2. slow remote (delay wdelay=5ms, rate 50 MB/s: the rate filter counts
#      bits, rate=400M): the adaptive window against
#      window=fixed:128: MB/s against the server's 50 MB/s, bytes in flight
#      and round-trip time streaming 512 MiB, and the latency of an
#      fdatasync every 32 MiB of a stream;
#   3. the NFS job shape: randrw 8 KiB, 70% reads, 4 threads, over the
#      delayed server (delay 1ms both ways): adaptive window, fixed:256,
#      and fio's nbd engine with no cache;
#   4. the nbdkit filter: fio's nbd engine, 1 MiB writes + fsync, through
#      --filter=wbcache and through nbdkit's --filter=cache
#      cache=writeback, in front of the delayed memory plugin: MB/s and
#      the nbdkit process's peak memory;
#   5. kill -9 of nbdkit right after a client FLUSH (file plugin): the
#      flushed data missing from the file, wbcache filter and cache filter.
# Environment: SIZE_MB (1024), TIME (8).  Noisy: one round each.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
SIZE_MB=${SIZE_MB:-1024}
TIME=${TIME:-8}
W=$BUILD/wbcache
for c in nbdkit fio; do command -v $c >/dev/null || { echo "$c is missing: scripts/install-deps" >&2; exit 1; }; done
top=$(mktemp -d /var/tmp/wbc-nbd-XXXXXX)
srv=
stop() { [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null; srv=; rm -f "$top/s.sock"; }
trap 'stop; rm -rf "$top"' EXIT
# start nbdkit with "$@" (filters, plugin, args) on $top/s.sock, in the foreground
start() {
	stop
	nbdkit -f -U "$top/s.sock" -P "$top/pid" "$@" >"$top/nbdkit.log" 2>&1 &
	srv=$!
	for _ in $(seq 100); do [ -S "$top/s.sock" ] && [ -s "$top/pid" ] && return; sleep 0.05; done
	echo "nbdkit did not start: $(cat "$top/nbdkit.log")" >&2; exit 1
}
URI="nbd+unix:///?socket=$top/s.sock"
wb() { "$W" run "$@" --mem 256M --quiet 2>&1; }
mbs() { sed -n 's/^[a-z]*: .* = \([0-9]*\) MB\/s.*/\1/p'; }
fio_nbd() {   # fio_nbd RW BS DEPTH [extra]: MB/s written (or read+written for randrw)
	local rw=$1 bs=$2 qd=$3; shift 3
	fio --name=nbd --ioengine=nbd --uri="$URI" --rw="$rw" --bs="$bs" --iodepth="$qd" \
	    "$@" --output-format=terse --terse-version=3 2>/dev/null |
		awk -F';' 'NF > 100 { printf "%d %d %d\n", ($47 * 1024 / ($50 / 1000 + 1e-9)) / 1e6, $8, $49 }'
}

echo "== 1. local: nbdkit memory over a Unix socket"
start memory 4G
a=$(wb dd --dev "$URI" --size "${SIZE_MB}M" | mbs)
start memory 4G
b=$(fio_nbd write 1M 32 --size="${SIZE_MB}M" --end_fsync=1 | cut -d' ' -f1)
start memory 4G
c=$(wb randwrite --dev "$URI" --file-size 1G --time "$TIME" | mbs)
start memory 4G
d=$(fio_nbd randwrite 4k 32 --size=1G --time_based --runtime="$TIME" | cut -d' ' -f1)
printf '%-56s %8s %8s %s\n' "local NBD (MB/s)" wbcache fio "wbcache/fio"
printf '%-56s %8s %8s %.2fx\n' "stream ${SIZE_MB} MiB, 1 MiB writes + flush (fio iodepth 32)" "$a" "$b" "$(ratio "$a" "$b")"
printf '%-56s %8s %8s %.2fx\n' "random 4 KiB writes, 1 GiB, ${TIME} s (fio iodepth 32)" "$c" "$d" "$(ratio "$c" "$d")"

echo
echo "== 2. slow remote: memory behind delay wdelay=5ms and rate 50 MB/s (rate=400M bits)"
slow() { start --filter=delay --filter=rate memory 1G wdelay=5ms rate=400M burstiness=0.2; }
for win in adaptive fixed:128; do
	# throughput and bytes in flight streaming; then the latency of an
	# fdatasync every 32 MiB of a stream
	slow
	out=$(wb dd --dev "$URI,window=$win" --size 512M)
	m=$(echo "$out" | mbs)
	infl=$(echo "$out" | sed -n 's/.*in flight MiB mean \([0-9.]*\) max \([0-9.]*\); RTT ms mean \([0-9.]*\).*/\1 \2 \3/p')
	slow
	out=$(wb dd --dev "$URI,window=$win" --size 256M --fsync-every 32M)
	fs=$(echo "$out" | sed -n 's/^fsyncs: [0-9]*, p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms.*/\1 \2/p')
	printf 'window=%-9s %5s MB/s (%.2fx of 50 MB/s); in flight MiB mean %s max %s, RTT mean %s ms; fsync every 32 MiB: p50 %s ms p99 %s ms\n' \
		"$win" "$m" "$(ratio "$m" 50)" ${infl:-? ? ?} ${fs:-? ?}
done

echo
echo "== 3. the NFS job shape: randrw 8 KiB, 70% reads, 4 threads, delay 1ms"
nfs() { start --filter=delay memory 2G wdelay=1ms rdelay=1ms; }
for win in adaptive fixed:256; do
	nfs
	out=$(wb randrw --dev "$URI,window=$win" --bs 8K --threads 4 --rwmix 30 --file-size 256M --time "$TIME")
	echo "$out" | sed -n "s/^randrw: .*; \([0-9]*\) write IOPS, \([0-9]*\) read IOPS.*/wbcache window=$win: \2 read IOPS, \1 write IOPS/p"
done
# no cache: fio's nbd engine straight to the server, 4 jobs of one I/O at
# a time (as the 4 writer threads above), and 4 jobs of 16
for qd in 1 16; do
	nfs
	fio --name=nfs --ioengine=nbd --uri="$URI" --rw=randrw --rwmixread=70 --bs=8k --iodepth=$qd \
	    --numjobs=4 --group_reporting --size=256M --time_based --runtime="$TIME" \
	    --output-format=terse --terse-version=3 2>/dev/null |
		awk -F';' -v q=$qd 'NF > 100 { r = $8; w = $49 }
			END { printf "fio nbd, no cache (4 jobs, iodepth %d): %d read IOPS, %d write IOPS\n", q, r, w }'
done

echo
echo "== 4. the nbdkit filter against nbdkit's cache filter (memory behind delay wdelay=5ms)"
F=$PWD/$BUILD/nbdkit-wbcache-filter.so
for f in none wbcache cache; do
	case $f in
	none) start --filter=delay memory 2G wdelay=5ms ;;
	wbcache) start --filter="$F" --filter=delay memory 2G wdelay=5ms wbcache-mem=256M ;;
	cache) start --filter=cache --filter=delay memory 2G wdelay=5ms cache=writeback ;;
	esac
	m=$(fio_nbd write 1M 32 --size=512M --end_fsync=1 | cut -d' ' -f1)
	hwm=$(awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$(cat "$top/pid")/status")
	printf 'filter %-8s %6s MB/s (512 MiB, 1 MiB writes, iodepth 32, end_fsync), nbdkit peak RSS %s MiB\n' \
		"$f" "$m" "$hwm"
done

echo
echo "== 5. kill -9 of nbdkit after a client FLUSH (file plugin behind delay wdelay=2ms)"
# 64 MiB of random data written by nbdcopy, which flushes at its end
# (--flush), then nbdkit is killed at once; what of the flushed data is in
# the plugin's file?  With the wbcache filter the flush is the engine's
# sync: all of it.  The cache filter with cache=writeback: reported.
head -c 64M /dev/urandom >"$top/data"
for f in wbcache cache; do
	truncate -s 0 "$top/img" && truncate -s 256M "$top/img"
	case $f in
	wbcache) start --filter="$F" --filter=delay file "$top/img" wdelay=2ms wbcache-mem=256M ;;
	cache) start --filter=cache --filter=delay file "$top/img" wdelay=2ms cache=writeback ;;
	esac
	nbdcopy --flush "$top/data" "$URI"
	kill -9 "$srv"; wait "$srv" 2>/dev/null || true; srv=; rm -f "$top/s.sock"
	lost=$(python3 - "$top/data" "$top/img" <<'P'
import sys
a, b = open(sys.argv[1], "rb"), open(sys.argv[2], "rb")
lost = 0
while True:
    x = a.read(1 << 20)
    if not x:
        break
    y = b.read(len(x))
    for i in range(0, len(x), 4096):
        lost += x[i:i + 4096] != y[i:i + 4096]
print(lost * 4096 // 1024)
P
)
	printf 'filter %-8s flushed 64 MiB, then kill -9: %s KiB of it missing from the file\n' "$f" "$lost"
done
