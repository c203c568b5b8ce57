#!/usr/bin/env bash
# RADOS, side by side in one run on a cluster this script starts
# (scripts/ceph-test-cluster: one monitor, one bluestore OSD on a sparse
# file under /var/tmp, so the OSD writes to a disk), each against its peer
# on the same pool:
#   1. streaming SIZE_MB (2048) MiB of 1 MiB writes + fsync through
#      `wbcache run dd --dev rados:` against fio's rados engine (iodepth 32);
#   2. random 4 KiB writes over a FILE_MB (1024) MiB file for TIME (30) s,
#      an fdatasync every 256 writes, through `wbcache run randwrite` (one
#      writer) against fio's rbd engine (iodepth 1, fsync=256) on an image
#      of the same size with librbd's write-back cache on, both with a
#      dirty limit of 24 MiB (librbd's rbd_cache_max_dirty default;
#      wbcache --dirty-bytes 24M): MB/s, write latency p50/p99/max, the
#      fsyncs' latency, and the longest stall of the writer (the longest
#      gap between two writes' completions);
#   3. the same with the OSD killed (SIGKILL) at 10 s and started again at
#      20 s: what each lost, how long its writer stalled, how long the OSD
#      took to be up again (the kill to the monitor's "osd.0 ... boot",
#      which varies with the machine's load) and how long the writer
#      stalled after that (its stall less the OSD's time down; the stall
#      begins in the fdatasync waiting at the kill, up to one fdatasync's
#      time before it).  Before each of these runs the OSD is restarted
#      and waited for: an OSD's start replays the write-ahead log of every
#      small write since its last start (deferred writes: here all 4 KiB
#      ones), so without it the first killed run's restart replayed the
#      runs before it too (1 GB against 0.2 GB: 20 s of boot against 8).
# Both start from empty storage (wbcache --no-layout, a fresh image), so
# that every run writes the same way.  Latency timelines of 2 and 3 (the
# longest write latency per 100 ms, both programs) go to
# OUT_SVG (doc/rados-latency.svg).  Noisy, one round each.
# Environment: SIZE_MB, FILE_MB, TIME, OUT_SVG.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
SIZE_MB=${SIZE_MB:-2048}
FILE_MB=${FILE_MB:-1024}
TIME=${TIME:-30}
OUT_SVG=${OUT_SVG:-doc/rados-latency.svg}
W=$BUILD/wbcache
for c in fio rbd rados python3; do
	command -v $c >/dev/null || { echo "$c is missing: scripts/install-deps" >&2; exit 1; }
done
top=$(mktemp -d /var/tmp/wbc-radosbench-XXXXXX)
cl=$top/c
trap 'scripts/ceph-test-cluster stop "$cl" >/dev/null 2>&1; rm -rf "$top"' EXIT
t0=$(date +%s.%N)
scripts/ceph-test-cluster start "$cl" --store bluestore --osd-size 32G >/dev/null
echo "test cluster up in $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}') s"
conf=$cl/ceph.conf
export CEPH_CONF=$conf
# librbd's write-back cache, said explicitly (these are its defaults but
# writethrough_until_flush, which fio's first fsync ends anyway)
cp "$conf" "$top/rbd.conf"
cat >>"$top/rbd.conf" <<EOF
[client]
rbd_cache = true
rbd_cache_size = 33554432
rbd_cache_max_dirty = 25165824
rbd_cache_target_dirty = 16777216
rbd_cache_writethrough_until_flush = false
EOF
purge() { rados -p wbc purge wbc --yes-i-really-really-mean-it >/dev/null 2>&1 || true; }
fio_json() {   # fio_json FILE EXPR: a Python expression over j (the job)
	python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print($2)" "$1"
}
mbs() { sed -n 's/^[a-z]*: .* = \([0-9]*\) MB\/s.*/\1/p'; }

echo "== 1. stream ${SIZE_MB} MiB, 1 MiB writes + fsync"
purge
a=$("$W" run dd --dev "rados:wbc/s,conf=$conf" --size "${SIZE_MB}M" --mem 256M --quiet 2>&1 | mbs)
purge
fio --name=s --ioengine=rados --conf="$conf" --pool=wbc --clientname=admin --rw=write --bs=1M \
    --iodepth=32 --size="${SIZE_MB}M" --nrfiles=$(( (SIZE_MB + 127) / 128 )) \
    --output-format=json >"$top/s.json" 2>/dev/null
b=$(fio_json "$top/s.json" "int(j['write']['bw_bytes'] / 1e6)")
printf '%-60s %8s %8s %s\n' "stream (MB/s)" wbcache fio "wbcache/fio"
printf '%-60s %8s %8s %.2fx\n' "${SIZE_MB} MiB, 1 MiB writes + fsync (fio rados, iodepth 32)" "$a" "$b" "$(ratio "$a" "$b")"

monlog=$cl/log/mon.a.log
boots() { grep -c ' osd\.0 .* boot$' "$monlog" || true; }
# Kill the OSD and start it again, and wait until the pool takes writes:
# a clean start for a run that kills it.
fresh_osd() {
	local nb
	nb=$(boots)
	scripts/ceph-test-cluster kill-osd "$cl" 0
	scripts/ceph-test-cluster start-osd "$cl" 0
	for _ in $(seq 1200); do [ "$(boots)" -gt "$nb" ] && break; sleep 0.1; done
	for _ in $(seq 600); do timeout 5 rados -p wbc put .probe "$conf" 2>/dev/null && break; sleep 0.1; done
	rados -p wbc rm .probe 2>/dev/null || true
}
# randwrite KILL(0|1): one run of each, their logs in $top/{wb,rbd}-KILL.log;
# with KILL, the kill's time and the OSD's boot after it (seconds since
# the epoch; the monitor's log in UTC) in $top/{wb,rbd}.down
randwrite() {
	local kill=$1 killer nb
	for who in wb rbd; do
		purge
		[ $who = rbd ] && rbd create --size "${FILE_MB}M" wbc/img >/dev/null
		killer=
		if [ "$kill" = 1 ]; then
			fresh_osd
			nb=$(boots)
			( sleep 10; date +%s.%N >"$top/$who.down"
			  scripts/ceph-test-cluster kill-osd "$cl" 0
			  sleep 10; scripts/ceph-test-cluster start-osd "$cl" 0 ) &
			killer=$!
		fi
		if [ $who = wb ]; then
			"$W" run randwrite --dev "rados:wbc/r,conf=$conf" --file-size "${FILE_MB}M" \
			    --no-layout --time "$TIME" --fsync-every 1M --dirty-bytes 24M \
			    --dirty-background-bytes 16M --mem 256M --lat-log "$top/wb-$kill.log" \
			    --quiet >"$top/wb-$kill.out" 2>&1 || true
		else
			CEPH_CONF=$top/rbd.conf fio --name=r --ioengine=rbd --pool=wbc --rbdname=img \
			    --clientname=admin --rw=randwrite --bs=4k --iodepth=1 --fsync=256 \
			    --time_based --runtime="$TIME" --size="${FILE_MB}M" \
			    --write_lat_log="$top/rbdlat-$kill" --log_avg_msec=0 \
			    --output-format=json >"$top/rbd-$kill.json" 2>/dev/null || true
			mv "$top/rbdlat-$kill"_lat.1.log "$top/rbd-$kill.log"
			rm -f "$top/rbdlat-$kill"_*.log
		fi
		if [ -n "$killer" ]; then
			wait "$killer"
			for _ in $(seq 1200); do [ "$(boots)" -gt "$nb" ] && break; sleep 0.1; done
			grep ' osd\.0 .* boot$' "$monlog" | tail -n1 | cut -d' ' -f1 |
				python3 -c 'import sys, datetime; print(datetime.datetime.strptime(sys.stdin.read().strip(), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp())' \
				>>"$top/$who.down"
		fi
		[ $who = rbd ] && rbd rm wbc/img >/dev/null 2>&1
	done
	true
}
# report KILL: the lines for one pair of runs
report() {
	local k=$1 wb_mbs rbd_mbs
	wb_mbs=$(mbs <"$top/wb-$k.out")
	rbd_mbs=$(fio_json "$top/rbd-$k.json" "int(j['write']['bw_bytes'] / 1e6)")
	python3 - "$top/wb-$k.log" "$top/rbd-$k.log" "$top/wb-$k.out" "$top/rbd-$k.json" \
		"$wb_mbs" "$rbd_mbs" "$k" "$top/wb.down" "$top/rbd.down" <<'EOF'
import json, re, sys
def lats(path):
    t, l = [], []
    for line in open(path):
        f = line.split(',')
        if len(f) >= 2:
            t.append(int(f[0])); l.append(int(f[1]))
    return t, l
def pct(v, p):
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(round(p / 100 * len(v))) - 1))] if v else 0
def stall(t, end_ms):
    # the longest time without a write completing, to the run's end (a
    # writer waiting in an fsync completes none)
    t = t + [max(end_ms, t[-1] if t else 0)]
    return max((b - a for a, b in zip(t, t[1:])), default=0) / 1000
wt, wl = lats(sys.argv[1]); rt, rl = lats(sys.argv[2])
out = open(sys.argv[3]).read()
m = re.search(r'fsyncs: (\d+), p50 ([\d.]+) ms, p99 ([\d.]+) ms, max ([\d.]+) ms', out)
wf = m.groups() if m else ('?',) * 4
r = re.search(r'^randwrite: .* in ([\d.]+) s', out, re.M)
wend = float(r.group(1)) * 1000 if r else 0
lost = re.search(r'([\d.]+) MiB lost', out)
j = json.load(open(sys.argv[4]))['jobs'][0]
s = j['sync']['lat_ns']
rend = j['job_runtime']
rf = (s['N'], s['percentile']['50.000000'] / 1e6, s['percentile']['99.000000'] / 1e6, s['max'] / 1e6)
wm, rm = float(sys.argv[5] or 0), float(sys.argv[6] or 0)
print('%-34s %14s %14s %s' % ('', 'wbcache', 'librbd (fio)', 'wbcache/librbd'))
print('%-34s %14.0f %14.0f %.2fx' % ('MB/s', wm, rm, wm / rm if rm else 0))
for name, p in (('write latency p50 (us)', 50), ('write latency p99 (us)', 99)):
    a, b = pct(wl, p) / 1e3, pct(rl, p) / 1e3
    print('%-34s %14.1f %14.1f %.3fx' % (name, a, b, a / b if b else 0))
a, b = max(wl, default=0) / 1e6, max(rl, default=0) / 1e6
print('%-34s %14.1f %14.1f' % ('write latency max (ms)', a, b))
print('%-34s %14s %14s' % ('fsyncs: n, p50/p99/max (ms)', '%s, %s/%s/%s' % wf,
      '%d, %.1f/%.1f/%.1f' % rf))
ws, rs = stall(wt, wend), stall(rt, rend)
print('%-34s %14.1f %14.1f' % ('longest writer stall (s)', ws, rs))
if sys.argv[7] == '1':
    def down(path):   # the kill to the OSD's boot, s
        try:
            v = [float(x) for x in open(path).read().split()]
            return v[1] - v[0]
        except (OSError, ValueError, IndexError):
            return float('nan')
    wd, rd = down(sys.argv[8]), down(sys.argv[9])
    print('%-34s %14.1f %14.1f' % ('OSD killed to up again (s)', wd, rd))
    print('%-34s %14.1f %14.1f' % ('writer stall after it was up (s)', ws - wd, rs - rd))
print('%-34s %14s %14s' % ('lost', (lost.group(1) + ' MiB') if lost else '0',
      'errors %d' % j['error']))
EOF
}

echo "== 2. random 4 KiB writes, ${FILE_MB} MiB, ${TIME} s, fdatasync every 256 writes, 24 MiB dirty limit"
randwrite 0
report 0
echo "== 3. the same, the OSD killed at 10 s and started again at 20 s"
randwrite 1
report 1
grep -E "at risk|lost|written back" "$top/wb-1.out" || true

mkdir -p "$(dirname "$OUT_SVG")"
python3 - "$OUT_SVG" "$TIME" "$top/wb-0.log" "$top/rbd-0.log" "$top/wb-1.log" "$top/rbd-1.log" <<'EOF'
import math, sys
out, T = sys.argv[1], float(sys.argv[2])
def series(path):   # the longest latency in each 100 ms, in seconds
    b = {}
    for line in open(path):
        f = line.split(',')
        if len(f) >= 2:
            k = int(f[0]) // 100
            b[k] = max(b.get(k, 0), int(f[1]) / 1e9)
    return sorted(b.items())
W, H, L, R, P = 900, 250, 70, 20, 30
lo, hi = -6, 2   # 1 us .. 100 s
def y(v, top):
    v = min(max(v, 10 ** lo), 10 ** hi)
    return top + P + (H - 2 * P) * (1 - (math.log10(v) - lo) / (hi - lo))
def x(k):
    return L + (W - L - R) * (k / 10) / T
svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, 2 * H + 30),
       '<rect width="100%" height="100%" fill="white"/>']
titles = ['random 4 KiB writes, fdatasync every 256: longest write latency per 100 ms',
          'the same, the OSD killed at 10 s and started again at 20 s']
for panel in range(2):
    top = panel * H
    svg.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (L, top + 18, titles[panel]))
    for e in range(lo, hi + 1):
        yy = y(10 ** e, top)
        label = {-6: '1 us', -5: '10 us', -4: '100 us', -3: '1 ms', -2: '10 ms', -1: '100 ms', 0: '1 s', 1: '10 s', 2: '100 s'}[e]
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, yy, yy))
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 5, yy + 4, label))
    for s in range(0, int(T) + 1, 5):
        xx = x(s * 10)
        svg.append('<text x="%.1f" y="%d" text-anchor="middle">%d s</text>' % (xx, top + H - 8, s))
    if panel == 1:
        for s in (10, 20):
            svg.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#888" stroke-dasharray="4,3"/>' % (x(s * 10), x(s * 10), top + P, top + H - P))
    for path, color, name, dy in ((sys.argv[3 + 2 * panel], '#1f77b4', 'wbcache', 0),
                                  (sys.argv[4 + 2 * panel], '#d62728', 'librbd write-back cache (fio rbd)', 1)):
        ser = series(path)
        # a line per run of 100 ms buckets with writes; a gap of a second
        # or more (the writer waiting in an fsync) is a band, its length
        runs, cur = [], []
        for k, v in ser:
            if cur and k - cur[-1][0] > 3:
                runs.append(cur); cur = []
                if k - prev > 10:
                    band = (prev + 1, k)
                    svg.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.15"/>' %
                               (x(band[0]), top + P + 4 + 14 * dy, x(band[1]) - x(band[0]), 12, color))
                    svg.append('<text x="%.1f" y="%d" fill="%s" font-size="10">no write completes for %.1f s (in fsync)</text>' %
                               (x(band[0]) + 3, top + P + 14 + 14 * dy, color, (band[1] - band[0]) / 10))
            cur.append((k, v)); prev = k
        if cur:
            runs.append(cur)
        for r in runs:
            pts = ' '.join('%.1f,%.1f' % (x(k), y(v, top)) for k, v in r)
            svg.append('<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>' % (color, pts))
        svg.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - 330, top + 40 + 15 * dy, color, name))
svg.append('</svg>')
open(out, 'w').write('\n'.join(svg) + '\n')
print('latency timelines: %s' % out)
EOF
