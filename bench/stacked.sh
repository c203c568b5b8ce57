#!/usr/bin/env bash
# Stacked devices (the user-space loop device): a dd of SIZE (default 4G)
# through a stacked device over a file of a model:bw=200M device, with its
# workers' writes throttled globally, locally, or sent direct, against the
# same dd straight to the model device; one 256 MiB cache each time (MEM).
# Prints each run's time and its factor against the device alone, and
# draws the four timelines (the MB/s reaching the model device, and the
# cache's dirty + writeback) in one chart, PLOT (default
# $OUT/stacked.svg; the one in doc/ is PLOT=doc/stacked.svg).  Traces and
# each run's own chart go to $OUT (default build/bench).
# Quick: SIZE=512M bench/stacked.sh
set -eu
cd "$(dirname "$0")/.."
BUILD=${WBCACHE_BUILD:-build/release}
OUT=${OUT:-build/bench}
SIZE=${SIZE:-4G}
MEM=${MEM:-256M}
PLOT=${PLOT:-$OUT/stacked.svg}
LOWER=model:bw=200M
W=$BUILD/wbcache
mkdir -p "$OUT"

secs() { sed -n 's/^dd: .* in \([0-9.]*\) s = .*/\1/p'; }

echo "== stacked devices: dd of $SIZE (1 MiB writes, then fsync) through a stacked device over $LOWER, cache $MEM"
t_alone=$($W run dd --dev "$LOWER" --size "$SIZE" --mem "$MEM" --quiet \
	--trace "$OUT/stacked-alone.csv" --plot "$OUT/stacked-alone.svg" | secs)
printf '   %-34s %7.2f s\n' "the device alone ($LOWER)" "$t_alone"
declare -A T
for m in global local direct; do
	T[$m]=$($W run dd --dev "$LOWER" --dev "stack:0/img,stack_throttle=$m" --size "$SIZE" \
		--mem "$MEM" --quiet --trace "$OUT/stacked-$m.csv" --plot "$OUT/stacked-$m.svg" | secs)
	printf '   %-34s %7.2f s  %5.2fx the device alone\n' "stacked, stack_throttle=$m" "${T[$m]}" \
		"$(awk -v a="${T[$m]}" -v b="$t_alone" 'BEGIN{print a / b}')"
done
for m in local direct; do
	ok=$(awk -v a="${T[$m]}" -v b="$t_alone" 'BEGIN{print (a <= 1.2 * b) ? "yes" : "NO"}')
	echo "   $m within 1.2x of the device alone: $ok"
done

# One chart of the four runs.  Trace columns: t_s is 1, the cache's dirty
# and writeback 2 and 3, its limit 7; device d's throughput 13 + 5d.  What
# reaches the model device: its own writeback (device 0), or, direct, the
# stacked device's (device 1), whose writes go to the model's storage.
awk -F, -v size="$SIZE" -v lower="$LOWER" -v mem="$MEM" '
FNR == 1 { run++; next }
{
	t = $1; tput = (run == 4) ? $18 : $13; dirty = $2 + $3
	n[run]++; T[run, n[run]] = t; P[run, n[run]] = tput; D[run, n[run]] = dirty
	if (t > tmax) tmax = t; if (tput > pmax) pmax = tput; if (dirty > dmax) dmax = dirty
	if ($7 > dmax) dmax = $7; lim = $7
}
function x(t) { return 70 + t / tmax * 620 }
function yp(v) { return 250 - v / pmax * 200 }
function yd(v) { return 530 - v / dmax * 200 }
function step(r,  s, m) { s = r / 5; m = 10 ^ int(log(s) / log(10)); return (s / m < 1.5 ? 1 : s / m < 3.5 ? 2 : s / m < 7.5 ? 5 : 10) * m }
END {
	pmax *= 1.1; dmax *= 1.1
	name[1] = "the device alone"; name[2] = "stacked, global"; name[3] = "stacked, local"
	name[4] = "stacked, direct"
	col[1] = "#7f7f7f"; col[2] = "#d62728"; col[3] = "#2ca02c"; col[4] = "#1f77b4"
	printf "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"600\" font-family=\"sans-serif\">\n"
	printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
	printf "<text x=\"450\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">dd %s through a stacked device over %s (cache %s)</text>\n", size, lower, mem
	split("50 330", top, " ")
	for (p = 1; p <= 2; p++) {
		y0 = top[p]
		printf "<rect x=\"70\" y=\"%d\" width=\"620\" height=\"200\" fill=\"none\" stroke=\"#444\"/>\n", y0
		ts = step(tmax)
		for (t = 0; t <= tmax; t += ts)
			printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", x(t), y0, x(t), y0 + 200, x(t), y0 + 214, t
		vmax = (p == 1) ? pmax : dmax; vs = step(vmax)
		for (v = 0; v <= vmax; v += vs)
			printf "<line x1=\"70\" y1=\"%.1f\" x2=\"690\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"66\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", y0 + 200 - v / vmax * 200, y0 + 200 - v / vmax * 200, y0 + 204 - v / vmax * 200, v
		printf "<text x=\"380\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">time (s)</text>\n", y0 + 230
		printf "<text x=\"28\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 28 %d)\">%s</text>\n", y0 + 100, y0 + 100, (p == 1) ? "MB/s to the model device" : "dirty + writeback (MiB)"
	}
	printf "<line x1=\"70\" y1=\"%.1f\" x2=\"690\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"5,3\"/><text x=\"694\" y=\"%.1f\" font-size=\"11\">limit</text>\n", yd(lim), yd(lim), yd(lim) + 4
	for (r = 1; r <= 4; r++) {
		printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", col[r]
		for (i = 1; i <= n[r]; i++) printf "%.1f,%.1f ", x(T[r, i]), yp(P[r, i])
		printf "\"/>\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", col[r]
		for (i = 1; i <= n[r]; i++) printf "%.1f,%.1f ", x(T[r, i]), yd(D[r, i])
		printf "\"/>\n"
		printf "<line x1=\"705\" y1=\"%d\" x2=\"727\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/><text x=\"732\" y=\"%d\" font-size=\"11\">%s</text>\n", 60 + 18 * r, 60 + 18 * r, col[r], 64 + 18 * r, name[r]
	}
	printf "</svg>\n"
}' "$OUT/stacked-alone.csv" "$OUT/stacked-global.csv" "$OUT/stacked-local.csv" \
	"$OUT/stacked-direct.csv" >"$PLOT"
echo "   chart: $PLOT; traces and each run's chart: $OUT/stacked-{alone,global,local,direct}.{csv,svg}"
