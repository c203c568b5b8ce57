#!/usr/bin/env bash
# Throttling benchmarks on model devices (no disk involved):
#   1. one dd writer to bw=200M: dirty vs setpoint after 5 s, throughput vs
#      device bandwidth, p99 pause
#   2. four dd writers to one device: Jain's fairness index
#   3. jbod: devices at 25/50/100/200 MB/s, 2 random writers each: busy%,
#      global dirty vs limit
#   4. bandwidth drops 10x at t = 5 s: dirty before/after, the limit held
# Each prints its figures; traces and plots go to $OUT (default
# build/bench).  TIME (default 15) sets each run's length in seconds.
set -eu
cd "$(dirname "$0")/.."
BUILD=${WBCACHE_BUILD:-build/release}
OUT=${OUT:-build/bench}
TIME=${TIME:-15}
W=$BUILD/wbcache
mkdir -p "$OUT"

# stats over a trace: column sums of dirty+writeback for t >= FROM
trace_stats() {   # FILE FROM TO -> "mean min max setpoint limit within10pct"
	awk -F, -v from="$2" -v to="$3" 'NR > 1 && $1 >= from && $1 <= to {
		d = $2 + $3; n++; s += d; if (min == "" || d < min) min = d; if (d > max) max = d
		sp = $6; lim = $7; if (d >= 0.9 * sp && d <= 1.1 * sp) w++ }
		END { printf "%.1f %.1f %.1f %.1f %.1f %.0f\n", s / n, min, max, sp, lim, 100 * w / n }' "$1"
}
trace_max() {     # FILE -> max dirty+writeback over the whole run, and the limit
	awk -F, 'NR > 1 { d = $2 + $3; if (d > m) m = d; lim = $7 } END { printf "%.1f %.1f\n", m, lim }' "$1"
}
field() { sed -n "s/.*$1 \([0-9.]*\).*/\1/p" | head -1; }

echo "== 1. one dd writer, model:bw=200M (209.7 MB/s), ${TIME} s, cache 256 MiB"
r=$($W run dd --dev model:bw=200M --time "$TIME" --mem 256M --quiet \
	--trace "$OUT/single.csv" --plot "$OUT/single.svg")
tput=$(echo "$r" | awk '/^ *0 +0 /{print $3}')
p99=$(echo "$r" | sed -n 's/^pauses: .*p99 \([0-9.]*\) ms.*/\1/p')
read -r mean min max sp lim within <<<"$(trace_stats "$OUT/single.csv" 5 "$((TIME - 1))")"
echo "   writer $tput MB/s = $(awk -v t="$tput" 'BEGIN{printf "%.3f", t / 209.7152}')x device bandwidth; p99 pause $p99 ms"
echo "   dirty+writeback from 5 s until the writer stops: mean $mean MiB (min $min, max $max) vs setpoint $sp MiB:" \
     "$(awk -v m="$mean" -v s="$sp" 'BEGIN{printf "%+.1f%%", 100 * (m - s) / s}'), $within% of samples within +-10%"

echo "== 2. four dd writers, one model:bw=200M device"
r=$($W run dd --threads 4 --dev model:bw=200M --time "$TIME" --mem 256M --quiet)
echo "$r" | awk '/^ +[0-9]+ +0 +[0-9.]+ /{printf "   thread %s: %s MB/s\n", $1, $3}'
echo "   $(echo "$r" | grep fairness)"

echo "== 3. jbod: model devices at 25/50/100/200 MB/s, 2 random 4 KiB writers each"
r=$($W run jbod --time "$TIME" --file-size 256M --mem 256M --quiet --trace "$OUT/jbod.csv" \
	--plot "$OUT/jbod.svg")
echo "$r" | sed -n '/^device/,/^$/p' | sed 's/^/   /'
read -r m lim <<<"$(trace_max "$OUT/jbod.csv")"
echo "   global dirty+writeback max $m MiB, limit $lim MiB"

echo "== 4. bandwidth drop: model:bw=200M, 10% from t = 5 s"
r=$($W run dd --dev 'model:bw=200M,sched=5s@10%' --time "$TIME" --mem 256M --quiet \
	--trace "$OUT/drop.csv" --plot "$OUT/drop.svg")
read -r mean1 _ _ sp lim _ <<<"$(trace_stats "$OUT/drop.csv" 2 5)"
read -r mean2 min2 max2 _ _ within2 <<<"$(trace_stats "$OUT/drop.csv" 10 "$((TIME - 1))")"
read -r m lim <<<"$(trace_max "$OUT/drop.csv")"
echo "   before the drop (2-5 s): mean $mean1 MiB; from 10 s (5 s after it) until the writer stops: mean $mean2 MiB" \
     "(min $min2, max $max2), setpoint $sp MiB, $within2% of samples within +-10%"
echo "   max dirty+writeback over the run $m MiB, limit $lim MiB"
echo "traces and plots: $OUT/{single,jbod,drop}.{csv,svg}"
