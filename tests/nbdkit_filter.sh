#!/usr/bin/env bash
# nbdkit-wbcache-filter.so under a real nbdkit, driven by libnbd's clients
# (nbdcopy, nbdinfo, and Python's nbd module):
#   - the shared object exports nbdkit's entry point and nothing else;
#   - bad parameters are refused at startup with a message naming them
#     (also a stats file that cannot be written, and the filter given
#     twice); good ones start; --help lists them; a plugin that needs a
#     connection to open (file dir=) refuses the client, nbdkit serves on;
#   - the export advertises flush, FUA and multi-conn, zero (emulated) and
#     no trim;
#   - data copied in (nbdcopy, four connections) with a cache a sixth of
#     its size reads back the same, and after the client's flush and a
#     kill -9 of nbdkit it is in the plugin's file byte for byte; a FUA
#     write is there after kill -9 without a flush, a plain one is not;
#     zeroes reach the file; extents see data still in the cache (and
#     stop at the range asked: a plugin's longer last extent is cut);
#   - dirty + writeback stay under the cache's limit while a writer
#     streams six times the cache into a slow plugin (nbdkit's rate
#     filter), and the writer was throttled;
#   - over a failing plugin (nbdkit's error filter under ours): writes are
#     taken, FLUSH fails (on every connection), a FUA write fails, the
#     data stays at risk; once the fault ends, FLUSH succeeds and the data
#     is in the file; at shutdown a failing plugin is retried until it
#     recovers (the data reaches the file), or, past the retry timeout,
#     the loss is logged and counted; on_error=drop counts it lost; FUA
#     writes racing on one connection are never acknowledged unwritten,
#     and two FLUSHes in flight at once over a loss both fail (the second
#     begun, over a plugin that delays each write, before the first ends).
#   - a relative stats path is nbdkit's directory's (nbdkit in the
#     background changes to /); an empty one or a directory is refused;
#     a flush of the plugin that fails at exit is reported; block status
#     never reports a hole where dropped data still reads from the cache.
# Skips when nbdkit is not installed.  A sanitized build's filter runs with
# its sanitizer runtime preloaded into nbdkit (skipped when it cannot be).
set -u
cd "$(dirname "$0")/.."
BUILD=${WBCACHE_BUILD:-build/release}
command -v nbdkit >/dev/null || { echo "skip: nbdkit is not installed (scripts/install-deps)"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
FILTER=$PWD/$BUILD/nbdkit-wbcache-filter.so
[ -e "$FILTER" ] || fail "$FILTER is not built"
[ -e "$BUILD/tests/nbdkit-flakyflush-plugin.so" ] || fail "$BUILD/tests/nbdkit-flakyflush-plugin.so is not built"
for c in nbdcopy nbdinfo; do
	command -v $c >/dev/null || fail "no $c (libnbd-bin: scripts/install-deps)"
done
# Debian's python3 (python3-libnbd), not another one first in PATH
PY=/usr/bin/python3
$PY -c 'import nbd' 2>/dev/null || fail "no Python nbd module (python3-libnbd: scripts/install-deps)"

# the exported symbols: nbdkit's filter_init, wbc_* at most
others=$(nm -D --defined-only "$FILTER" | awk '$2 != "A" && $3 != "filter_init" && $3 !~ /^wbc_/ && $3 !~ /^_(init|fini)$/ {print $3}')
[ -z "$others" ] || fail "the filter exports: $others"

# a sanitized filter needs its runtime loaded first into nbdkit (ASan's or
# TSan's before UBSan's); the clients run without it
san=$(ldd "$FILTER" 2>/dev/null | awk '$1 ~ /^lib(a|t)san\.so/ {print $3}'; ldd "$FILTER" 2>/dev/null | awk '$1 ~ /^libubsan\.so/ {print $3}')
san=$(echo $san | tr ' ' ':')
# (env execs nbdkit: a background one's $! is nbdkit's own)
NBDKIT=(nbdkit)
[ -z "$san" ] || NBDKIT=(env LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
			 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1 nbdkit)

T=$(mktemp -d /var/tmp/wbc-nbdkit-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -n "${WBCACHE_KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
if [ -n "$san" ]; then
	# (not --run: a TSan nbdkit's child crashes before its exec)
	"${NBDKIT[@]}" -f -U "$T/probe.sock" -P "$T/probe.pid" --filter="$FILTER" memory 1M >/dev/null 2>&1 &
	probe=$!
	for _ in $(seq 100); do [ -s "$T/probe.pid" ] && break; kill -0 $probe 2>/dev/null || break; sleep 0.1; done
	kill -9 $probe 2>/dev/null; wait $probe 2>/dev/null
	[ -s "$T/probe.pid" ] ||
		{ echo "skip: nbdkit cannot load the sanitized filter (LD_PRELOAD=$san)"; exit 77; }
fi
uri() { echo "nbd+unix:///?socket=$T/$1.sock"; }

# start NAME ARGS...: nbdkit in the foreground (in the background of this
# script) on $T/NAME.sock, its stderr in $T/NAME.log, the filter's
# statistics in $T/NAME.stats; returns when it serves
start() {
	local name=$1; shift
	rm -f "$T/$name.sock" "$T/$name.pid" "$T/$name.stats"
	"${NBDKIT[@]}" -f -U "$T/$name.sock" -P "$T/$name.pid" "$@" wbcache-stats="$T/$name.stats" \
		2>"$T/$name.log" &
	local pid=$!
	disown "$pid"   # no "Killed" from the shell after a kill -9
	pids+=("$pid")
	eval "pid_$name=$pid"
	for _ in $(seq 200); do
		[ -s "$T/$name.pid" ] && return 0
		kill -0 "$pid" 2>/dev/null || fail "nbdkit $name did not start: $(cat "$T/$name.log")"
		sleep 0.05
	done
	fail "nbdkit $name did not start in 10 s: $(cat "$T/$name.log")"
}
# stop NAME [SIGNAL]: signal it (TERM) and wait for it to end (60 s at most)
stop() {
	local pid final=0; pid=$(eval echo "\$pid_$1")
	kill -"${2:-TERM}" "$pid" 2>/dev/null
	for _ in $(seq 600); do
		kill -0 "$pid" 2>/dev/null || return 0
		# A sanitizer runtime (ASan's, TSan's) preloaded into nbdkit, built
		# without it, leaves glibc's locale lock broken from the start
		# (plain nbdkit too, with no filter):
		# after an error message (strerror) nbdkit can hang in exit(),
		# after the filter's cleanup.  Its final statistics say the
		# filter is done.
		if [ -n "$san" ] && [ "$(stat_of "$T/$1.stats" final 2>/dev/null)" = 1 ]; then
			final=$((final + 1))
			[ $final -ge 50 ] && { echo "note: nbdkit $1 hung in exit() after the filter's cleanup (sanitizer runtime)"; kill -9 "$pid"; return 0; }
		fi
		sleep 0.1
	done
	fail "nbdkit $1 did not end in 60 s"
}
stat_of() { sed -n "s/^$2=//p" "$1"; }
# a sanitizer's report in any nbdkit's log fails the test
check_logs() {
	! grep -l -E "ERROR: (Address|Thread)Sanitizer|runtime error:|WARNING: ThreadSanitizer" "$T"/*.log ||
		fail "sanitizer report: $(grep -h -A20 -E 'Sanitizer|runtime error' "$T"/*.log | head -40)"
}

# ---- parameters ----------------------------------------------------------
bad() {
	local want=$1; shift
	if "${NBDKIT[@]}" -U "$T/bad.sock" --filter="$FILTER" memory 1M "$@" --run true >"$T/bad.out" 2>&1; then
		fail "accepted: $*"
	fi
	grep -q -- "$want" "$T/bad.out" || fail "$*: no message with '$want': $(cat "$T/bad.out")"
}
bad "wbcache-mem" wbcache-mem=lots
bad "cannot open a cache of .*machine's memory" wbcache-mem=64T
bad "at least 16 pages" wbcache-mem=32K
bad "wbcache-page-size.*power of two" wbcache-page-size=3000
bad "wbcache-page-size.*out of range" wbcache-page-size=2M
bad "wbcache-dirty-ratio.*out of range" wbcache-dirty-ratio=101
bad "dirty_ratio 0 needs dirty_bytes" wbcache-dirty-ratio=0
bad "dirty_bytes must be at least two pages" wbcache-dirty-bytes=4K
bad "wbcache-dirty-background-ratio" wbcache-dirty-background-ratio=-1
bad "wbcache-dirty-expire-centisecs" wbcache-dirty-expire-centisecs=soon
bad "wbcache-on-error.*retry or drop" wbcache-on-error=ignore
bad "wbcache-retry-timeout" wbcache-retry-timeout=never
bad "wbcache-threads.*out of range" wbcache-threads=0
bad "wbcache-max-io.*multiple of the page size" wbcache-max-io=6K
bad "unknown parameter wbcache-colour" wbcache-colour=blue
bad "wbcache-stats: cannot write /nonexistent" wbcache-stats=/nonexistent/dir/wb.stats
bad "wbcache-stats-interval needs wbcache-stats" wbcache-stats-interval=2
# a duration out of range is said to be (it said "'0' is not a duration")
bad "wbcache-stats-interval: '0' is out of range" wbcache-stats="$T/wb.stats" wbcache-stats-interval=0
bad "wbcache-retry-timeout: '400d' is not a duration" wbcache-retry-timeout=400d
bad "wbcache-stats: the path is empty" wbcache-stats=
bad "wbcache-stats: .* is a directory" wbcache-stats="$T"
# the filter twice: one cache per nbdkit (it hung, two caches on one queue)
if "${NBDKIT[@]}" -U "$T/bad.sock" --filter="$FILTER" --filter="$FILTER" memory 1M --run true \
	>"$T/bad.out" 2>&1; then
	fail "accepted: the filter twice"
fi
grep -q "more than once" "$T/bad.out" || fail "the filter twice: $(cat "$T/bad.out")"
# a plugin whose open needs a client connection (the file plugin's dir=
# mode asks for the export name): the filter's shared context opens at
# the first client's open, and the plugin refuses it there; nbdkit served
# on (it crashed at startup, a context opened in .after_fork)
# (plain builds only: --run crashes a TSan nbdkit's child, and the file
# plugin's message, through strerror, hangs an ASan-preloaded nbdkit's
# exit, as the stop below says)
if [ -z "$san" ]; then
	mkdir "$T/fd"
	"${NBDKIT[@]}" -U "$T/fd.sock" --filter="$FILTER" file dir="$T/fd" \
		--run 'nbdinfo "$uri" >/dev/null 2>&1; echo "client done"' >"$T/fd.out" 2>&1; rc=$?
	[ $rc = 0 ] && grep -q "client done" "$T/fd.out" || fail "file dir=: exit $rc: $(cat "$T/fd.out")"
	# the exports listed are the one served: the default (the plugin's
	# list, here foo and bar, named exports the filter then refused)
	"${NBDKIT[@]}" -U "$T/ls.sock" --filter="$FILTER" eval default_export='echo foo' \
		list_exports='echo foo; echo bar' get_size='echo 1048576' \
		pread='dd if=/dev/zero count=$3 iflag=count_bytes status=none' \
		--run 'nbdinfo --list "$uri"' >"$T/ls.out" 2>&1 || fail "list: $(cat "$T/ls.out")"
	[ "$(grep -c '^export=' "$T/ls.out")" = 1 ] && grep -q '^export="foo"' "$T/ls.out" ||
		fail "exports listed: $(cat "$T/ls.out")"
fi
start ok --filter="$FILTER" memory 1M wbcache-mem=8M wbcache-page-size=8K \
	wbcache-dirty-ratio=30 wbcache-dirty-background-ratio=5 wbcache-dirty-expire-centisecs=100 \
	wbcache-on-error=drop wbcache-retry-timeout=250ms wbcache-threads=2 wbcache-max-io=1M
stop ok
"${NBDKIT[@]}" --filter="$FILTER" memory --help 2>&1 | grep -q "wbcache-dirty-background-ratio=" ||
	fail "--help does not list the parameters"
# a relative wbcache-stats path names a file of the directory nbdkit was
# started in, also when nbdkit forks into the background (and changes
# to /: the file was written there, or not at all)
# (plain builds only: a sanitized nbdkit's child, as under --run)
if [ -z "$san" ]; then
	rel=wbc-rel-$$.stats
	(cd "$T" && "${NBDKIT[@]}" -U "$T/rel.sock" -P "$T/rel.pid" --filter="$FILTER" memory 1M \
		wbcache-stats="$rel" wbcache-stats-interval=0.05) >"$T/rel.log" 2>&1 ||
		fail "nbdkit in the background: $(cat "$T/rel.log")"
	for _ in $(seq 100); do [ -s "$T/rel.pid" ] && break; sleep 0.05; done
	[ -s "$T/rel.pid" ] || fail "nbdkit in the background did not start: $(cat "$T/rel.log")"
	pids+=("$(cat "$T/rel.pid")")
	nbdinfo "$(uri rel)" >/dev/null 2>&1 || fail "nbdinfo on nbdkit in the background"
	for _ in $(seq 100); do [ -s "$T/$rel" ] && break; sleep 0.05; done
	kill -TERM "$(cat "$T/rel.pid")"
	if [ ! -s "$T/$rel" ]; then
		[ -e "/$rel" ] && rm -f "/$rel" "/$rel.tmp" && fail "a relative wbcache-stats path was written in /"
		fail "a relative wbcache-stats path was not written (nbdkit in the background)"
	fi
fi
echo "parameters: ok"

# ---- data through the cache, durability ----------------------------------
head -c $((96 << 20)) /dev/urandom >"$T/in.bin"
truncate -s $((96 << 20)) "$T/disk.img"
# the log filter under the cache logs what it asks of the plugin
start data --filter="$FILTER" --filter=log file "$T/disk.img" logfile="$T/plugin.log" \
	wbcache-mem=16M wbcache-stats-interval=0.1
nbdinfo "$(uri data)" >"$T/info.out" || fail "nbdinfo: $(cat "$T/info.out")"
for want in "can_flush: true" "can_fua: true" "can_multi_conn: true" "can_zero: true" "can_trim: false" \
	    "export-size: $((96 << 20))"; do
	grep -q "$want" "$T/info.out" || fail "nbdinfo: no '$want': $(cat "$T/info.out")"
done
nbdcopy --flush "$T/in.bin" "$(uri data)" || fail "nbdcopy in"
cmp "$T/in.bin" "$T/disk.img" || fail "the plugin's file differs after the client's flush"
nbdcopy "$(uri data)" "$T/out.bin" || fail "nbdcopy out"
cmp "$T/in.bin" "$T/out.bin" || fail "reads back different data"
# (the statistics file is written every 100 ms: polled, 60 s, for a busy
# nbdkit, not a sleep)
for _ in $(seq 600); do
	rb=$(stat_of "$T/data.stats" read_in_bytes 2>/dev/null)
	[ "${rb:-0}" -gt 0 ] && break
	sleep 0.1
done
[ "${rb:-0}" -gt 0 ] || fail "no read went to the plugin (read_in_bytes ${rb:-none})"
# every counter of the statistics file is named in nbdkit-wbcache-filter(1)
names=$(sed -n 's/=.*//p' "$T/data.stats")
[ "$(echo "$names" | wc -w)" -ge 20 ] || fail "statistics file: $(cat "$T/data.stats")"
for n in $names; do
	grep -qw -- "$n" man/nbdkit-wbcache-filter.1 ||
		fail "nbdkit-wbcache-filter(1) does not name the statistic $n"
done

cat >"$T/fua.py" <<'EOF'
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
fua = bytes([0xa5]) * (1 << 20)
plain = bytes([0x5a]) * (64 << 10)
h.pwrite(fua, 8 << 20, nbd.CMD_FLAG_FUA)
h.pwrite(plain, 16 << 20)
h.zero(1 << 20, 24 << 20)
h.flush()
assert h.pread(1 << 20, 24 << 20) == bytes(1 << 20), "zeroed range reads non-zero"
h.zero(1 << 20, 32 << 20, nbd.CMD_FLAG_FUA)
h.pwrite(plain, 40 << 20)   # neither FUA nor flushed
print("ok")
EOF
flushes0=$(grep -c " Flush " "$T/plugin.log")
$PY "$T/fua.py" "$(uri data)" >"$T/fua.out" 2>&1 || fail "FUA/zero client: $(cat "$T/fua.out")"
# the file plugin's writes are in the host's page cache at once, so the
# kill below cannot tell a flush from none: the log can (a FUA write, a
# FLUSH and a FUA zero: three flushes of the plugin at least)
flushes=$(( $(grep -c " Flush " "$T/plugin.log") - flushes0 ))
[ "$flushes" -ge 3 ] || fail "the plugin was flushed $flushes times for 2 FUA requests and a FLUSH"
stop data KILL
$PY - "$T/disk.img" <<'EOF' || fail "after kill -9: FUA, flushed and zeroed data not all in the file"
import sys
d = open(sys.argv[1], "rb").read()
M = 1 << 20
assert d[8*M:9*M] == bytes([0xa5]) * M, "FUA write missing"
assert d[16*M:16*M + 65536] == bytes([0x5a]) * 65536, "flushed write missing"
assert d[24*M:25*M] == bytes(M), "flushed zero missing"
assert d[32*M:33*M] == bytes(M), "FUA zero missing"
EOF
# the last write was neither FUA nor flushed: still only in the cache
# (30 s from expiry, far under the background threshold)
if cmp -s -i $((40 << 20)):0 -n 65536 "$T/disk.img" <(head -c 65536 /dev/zero | tr '\0' 'Z'); then
	fail "an unflushed write reached the plugin at once: the filter does not cache writes" \
	     "(last statistics: $(grep -E '^(dirty_bytes|written_back_bytes|page_waits|pauses)=' "$T/data.stats" | tr '\n' ' '))"
fi
echo "data, flush, FUA, zero, kill -9: ok"

# ---- extents see data still in the cache ---------------------------------
start ext --filter="$FILTER" memory 64M wbcache-mem=16M
$PY - "$(uri ext)" <<'EOF' >"$T/ext.out" 2>&1 || fail "extents: $(cat "$T/ext.out")"
import nbd, sys
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(sys.argv[1])
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.pwrite(b"x" * 65536, 1 << 20)          # cached, not yet in the plugin
seen = []
def cb(meta, off, entries, err):
    seen.extend(entries)
    return 0
h.block_status(65536, 1 << 20, cb)
assert seen and seen[1] & 1 == 0 and seen[1] & 2 == 0, "written range reported as a hole: %r" % seen
print("ok")
EOF
stop ext
# ... and not past the range asked: a plugin may describe more (the null
# plugin: one hole to the export's end), and past the range the cache
# holds data the plugin lacks (that hole was passed on, over the data)
start extnull --filter="$FILTER" null 64M wbcache-mem=16M
$PY - "$(uri extnull)" <<'EOF' >"$T/extnull.out" 2>&1 || fail "extents past the range: $(cat "$T/extnull.out")"
import nbd, sys
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(sys.argv[1])
M = 1 << 20
h.pwrite(b"x" * 65536, M + 65536)        # cached, past the range asked
seen = []
h.block_status(65536, M, lambda m, o, e, err: seen.extend(e) or 0)
off = M
for i in range(0, len(seen), 2):
    assert not (seen[i + 1] & 1 and off < M + 2 * 65536 and off + seen[i] > M + 65536), \
        "a hole over data in the cache: %r" % seen
    off += seen[i]
assert off >= M + 65536, "extents short of the range: %r" % seen
print("ok")
EOF
stop extnull
echo "extents: ok"

# ---- dirty data bounded under a slow plugin --------------------------------
# 96 MiB streamed into 16 MiB of cache over a plugin that takes 50 MB/s
start slow --filter="$FILTER" --filter=rate memory 96M rate=400M burstiness=0.1 wbcache-mem=16M \
	wbcache-stats-interval=0.02
nbdcopy --flush "$T/in.bin" "$(uri slow)" &
copier=$!
maxu=0 limit=0 samples=0
while kill -0 $copier 2>/dev/null; do
	if [ -s "$T/slow.stats" ]; then
		read -r d w l < <(awk -F= '$1=="dirty_bytes"{d=$2} $1=="writeback_bytes"{w=$2}
			$1=="limit_bytes"{l=$2} END{print d+0, w+0, l+0}' "$T/slow.stats")
		[ $((d + w)) -gt $maxu ] && maxu=$((d + w))
		limit=$l samples=$((samples + 1))
	fi
	sleep 0.02
done
wait $copier || fail "nbdcopy into the slow plugin"
sleep 0.1
pauses=$(stat_of "$T/slow.stats" pauses)
stop slow
[ $samples -ge 10 ] || fail "only $samples samples of the statistics file"
# slack: what writer threads (nbdkit's, 16 per connection) may have
# copied past the limit between two looks at it
slack=$((1 << 20))
[ $limit -gt 0 ] && [ $maxu -le $((limit + slack)) ] ||
	fail "dirty+writeback reached $maxu bytes, over the limit $limit + $slack"
[ "${pauses:-0}" -gt 0 ] || fail "the writer was never throttled"
echo "bounded: dirty+writeback max $((maxu >> 10)) KiB, limit $((limit >> 10)) KiB, $pauses pauses, $samples samples: ok"

# what the Python clients below share
cat >"$T/nbdtest.py" <<'EOF'
import nbd
def fails(what, f):
    """f() must fail with EIO."""
    try:
        f()
    except nbd.Error as e:
        assert e.errno == "EIO", e
        return
    raise AssertionError(what + " succeeded")
EOF
export PYTHONPATH=$T

# ---- a failing plugin ------------------------------------------------------
truncate -s 0 "$T/disk.img"; truncate -s $((64 << 20)) "$T/disk.img"
touch "$T/inject"
errs=(--filter="$FILTER" --filter=error file "$T/disk.img" error-pwrite-rate=1 error-pwrite=EIO
      error-file="$T/inject" wbcache-mem=64M)
start fault "${errs[@]}" wbcache-retry-timeout=60 wbcache-stats-interval=0.05
cat >"$T/fault.py" <<'EOF'
import nbd, os, sys, time
uri, inject, disk = sys.argv[1:4]
a, b = nbd.NBD(), nbd.NBD()
a.connect_uri(uri)
b.connect_uri(uri)
data = os.urandom(4 << 20)
a.pwrite(data, 1 << 20)                  # taken by the cache
from nbdtest import fails
fails("flush", a.flush)
fails("second flush", a.flush)           # still not written: fails again
fails("flush on another connection", b.flush)
fails("FUA write", lambda: b.pwrite(b"y" * 4096, 0, nbd.CMD_FLAG_FUA))
# (the statistics file is written every 50 ms: polled, for a busy nbdkit)
for _ in range(600):
    st = dict(l.split("=") for l in open(os.path.dirname(disk) + "/fault.stats").read().split())
    if int(st["at_risk_bytes"]) >= 4 << 20 and int(st["write_errors"]) > 0:
        break
    time.sleep(0.05)
assert int(st["at_risk_bytes"]) >= 4 << 20 and int(st["write_errors"]) > 0, st
assert int(st["lost_bytes"]) == 0, st
os.unlink(inject)
# each connection's next FLUSH reports what failed since its previous one
# (once); the one after must succeed
for h in (a, b):
    try:
        h.flush()
    except nbd.Error:
        h.flush()
assert open(disk, "rb").read()[1 << 20:5 << 20] == data, "data not in the file after a good flush"
print("ok")
EOF
$PY "$T/fault.py" "$(uri fault)" "$T/inject" "$T/disk.img" >"$T/fault.out" 2>&1 ||
	fail "failing plugin: $(cat "$T/fault.out")"
stop fault
grep -q "wbcache: flush: Input/output error" "$T/fault.log" || fail "no flush error logged: $(cat "$T/fault.log")"
grep -q "lost" "$T/fault.log" && fail "data lost: $(cat "$T/fault.log")"
echo "failing plugin, recovery: ok"

# FUA writes racing on one connection over a plugin that fails 30% of its
# writes: none acknowledged whose data is not in the plugin's file (the
# connection's one handle told one request of another's failed writeback,
# and the other was acknowledged: 521 of 2,000 in retry mode, 90 lost for
# good with on_error=drop); two FLUSHes in flight over dropped data both
# fail
cat >"$T/fuarace.py" <<'EOF'
import nbd, os, sys
uri, disk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
fd = os.open(disk, os.O_RDONLY)
BS = 4096
counts = {"ok": 0, "failed": 0, "bad": 0}
def done(off, data):
    def f(err):
        if err.value:
            counts["failed"] += 1
            err.value = 0
        elif os.pread(fd, BS, off) != data:
            counts["bad"] += 1
        else:
            counts["ok"] += 1
        return 1
    return f
i = 0
while i < n or h.aio_in_flight() > 0:
    while i < n and h.aio_in_flight() < 16:
        off = (i % 256) * BS
        data = os.urandom(BS)
        h.aio_pwrite(data, off, completion=done(off, data), flags=nbd.CMD_FLAG_FUA)
        i += 1
    h.poll(-1)
print(counts, flush=True)
assert counts["bad"] == 0, "FUA writes acknowledged, not in the plugin"
assert counts["failed"] > 0, "the plugin's faults did not show"
# under retry a sync of the range again writes what failed (one failure
# anywhere failed each FUA write in flight: 94% failed; 36% here); under
# drop the first error stands
if sys.argv[4] == "retry":
    assert counts["failed"] < 0.8 * n, "FUA writes failed for others' errors"
print("ok")
EOF
for mode in retry drop; do
	truncate -s 0 "$T/disk.img"; truncate -s $((64 << 20)) "$T/disk.img"
	start fua$mode --filter="$FILTER" --filter=error file "$T/disk.img" error-pwrite-rate=30% \
		error-pwrite=EIO wbcache-mem=64M wbcache-on-error=$mode wbcache-retry-timeout=1
	$PY "$T/fuarace.py" "$(uri fua$mode)" "$T/disk.img" 600 $mode >"$T/fua$mode.out" 2>&1 ||
		fail "FUA writes racing, on_error=$mode: $(cat "$T/fua$mode.out")"
	stop fua$mode KILL
done
# two FLUSHes in flight at once over dropped data both fail.  The
# plugin fails every write, after a second's delay: the first FLUSH's
# writeback lasts that second, so the second FLUSH has begun before the
# first is told of the loss (one that begins after is told nothing new,
# as a second fsync after an error)
cat >"$T/flushes.py" <<'EOF'
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(os.urandom(1 << 20), 0)
res = []
def fl(err):
    res.append(err.value)
    err.value = 0
    return 1
h.aio_flush(completion=fl)
h.aio_flush(completion=fl)
while h.aio_in_flight() > 0:
    h.poll(-1)
assert len(res) == 2 and all(res), "FLUSHes in flight over dropped data: %s" % res
h.flush()   # told: the next one succeeds
print("ok")
EOF
start flushes --filter="$FILTER" --filter=delay --filter=error file "$T/disk.img" error-pwrite-rate=100% \
	error-pwrite=EIO delay-write=1 wbcache-mem=64M wbcache-on-error=drop
$PY "$T/flushes.py" "$(uri flushes)" >"$T/flushes.out" 2>&1 ||
	fail "two FLUSHes over a loss: $(cat "$T/flushes.out")"
stop flushes KILL
echo "FUA writes racing on one connection, FLUSHes over a loss: ok"

# FUA writes, one at a time, over a plugin whose flush fails half the
# time (nbdkit's log filter between records each flush): none is
# acknowledged when a flush of the plugin failed during it (a sync of its
# range again found its pages clean, wrote nothing, and a flush that then
# succeeded acknowledged it: 17 of 34)
cat >"$T/fuaflush.py" <<'EOF'
import nbd, sys
uri, log = sys.argv[1], sys.argv[2]
h = nbd.NBD()
h.connect_uri(uri)
def flush_errors():
    return sum(1 for l in open(log) if "...Flush" in l and "return=-1" in l)
ok = failed = bad = 0
for i in range(40):
    before = flush_errors()
    try:
        h.pwrite(bytes([i]) * 65536, i * 65536, nbd.CMD_FLAG_FUA)
        ok += 1
        if flush_errors() > before:
            bad += 1
    except nbd.Error:
        failed += 1
print("ok", ok, "failed", failed, "acknowledged after a failed flush", bad)
assert bad == 0, "FUA writes acknowledged though a flush of the plugin failed during them"
assert ok and failed, "the plugin's flush faults did not show"
print("ok")
EOF
truncate -s 0 "$T/disk.img"; truncate -s $((64 << 20)) "$T/disk.img"
# (nbdkit's error filter injects no flush errors: a plugin of the tests'
# own, tests/plugins/flakyflush.c, whose every second flush fails; inside
# nbdkit: a sanitized nbdkit's shell plugins crashed before their exec)
start fuaflush --filter="$FILTER" --filter=log "$PWD/$BUILD/tests/nbdkit-flakyflush-plugin.so" \
	file="$T/disk.img" logfile="$T/fuaflush.plugin.log" wbcache-mem=16M
$PY "$T/fuaflush.py" "$(uri fuaflush)" "$T/fuaflush.plugin.log" >"$T/fuaflush.out" 2>&1 ||
	fail "FUA writes over failing flushes: $(cat "$T/fuaflush.out")"
stop fuaflush KILL
echo "FUA writes over a plugin whose flushes fail: ok"

# at shutdown, a flush of the plugin that fails after what the filter
# wrote back at exit is reported (the engine's close flushed again, that
# one succeeded, and nothing was said: the data may not be in the plugin)
truncate -s 0 "$T/disk.img"; truncate -s $((64 << 20)) "$T/disk.img"
start shutflush --filter="$FILTER" "$PWD/$BUILD/tests/nbdkit-flakyflush-plugin.so" file="$T/disk.img" \
	wbcache-mem=16M
$PY - "$(uri shutflush)" <<'EOF' >"$T/shutflush.out" 2>&1 || fail "shutflush client: $(cat "$T/shutflush.out")"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.flush()                        # the plugin's first flush: it succeeds
h.pwrite(b"S" * (1 << 20), 0)    # written back at exit, then the flush fails
h.shutdown()
EOF
stop shutflush
grep -q "wbcache: flushing the plugin at exit failed" "$T/shutflush.log" ||
	fail "a failed flush of the plugin at exit is not reported: $(cat "$T/shutflush.log")"
echo "a failed flush of the plugin at exit: reported: ok"

# block status while a write is at risk: never a hole where the cache
# holds data the plugin lacks.  Two requests 50 ms apart over a plugin
# whose writes take 300 ms and fail: the second found the first's write in
# flight, was not told it failed, and asked the plugin (hole, zero)
touch "$T/inject-bs"
start bs --filter="$FILTER" --filter=delay --filter=error memory 1M delay-write=300ms \
	error-pwrite-rate=1 error-pwrite=EIO error-file="$T/inject-bs" wbcache-mem=16M
cat >"$T/bs.py" <<'EOF'
import nbd, sys, time
h = nbd.NBD()
h.add_meta_context("base:allocation")
h.connect_uri(sys.argv[1])
h.pwrite(b"\x07" * 4096, 0)
res = {}
def cb(tag):
    def f(metacontext, offset, entries, err):
        res[tag] = list(entries)
        return 0
    return f
c1 = h.aio_block_status(4096, 0, cb(1))
time.sleep(0.05)
c2 = h.aio_block_status(4096, 0, cb(2))
for c in (c1, c2):
    while True:
        try:
            if h.aio_command_completed(c):
                break
        except nbd.Error:
            break   # an error is an honest answer
        h.poll(-1)
for tag, e in res.items():
    for i in range(1, len(e), 2):
        assert not e[i] & 1, "request %d: a hole where the cache holds data: %s" % (tag, res)
assert h.pread(1, 0) == b"\x07"
print("ok", res)
EOF
$PY "$T/bs.py" "$(uri bs)" >"$T/bs.out" 2>&1 || fail "block status at risk: $(cat "$T/bs.out")"
rm -f "$T/inject-bs"
stop bs
echo "block status with data at risk: ok"

# ... nor where data was dropped (on_error=drop): its pages are clean,
# reads still return it from the cache, and the plugin's map had a hole
start dropbs --filter="$FILTER" --filter=error memory 1M error-pwrite-rate=1 error-pwrite=EIO \
	wbcache-mem=16M wbcache-on-error=drop wbcache-dirty-expire-centisecs=5 \
	wbcache-dirty-writeback-centisecs=5 wbcache-stats-interval=0.05
$PY - "$(uri dropbs)" "$T/dropbs.stats" <<'EOF' >"$T/dropbs.out" 2>&1 ||
import nbd, sys, time
uri, stats = sys.argv[1:3]
def lost():
    try:
        return int(dict(l.split("=") for l in open(stats).read().split())["lost_bytes"])
    except (OSError, ValueError, KeyError):
        return 0
h = nbd.NBD()
h.add_meta_context("base:allocation")
h.connect_uri(uri)
h.pwrite(b"\x07" * 65536, 0)
for _ in range(600):
    if lost() >= 65536:
        break
    time.sleep(0.05)
assert lost() >= 65536, "not dropped"
assert h.pread(1, 0) == b"\x07"
for i in range(2):                       # the second: no write error left to tell
    e = []
    h.block_status(65536, 0, lambda m, o, x, err: e.extend(x) or 0)
    for j in range(1, len(e), 2):
        assert not e[j] & 1, "request %d: a hole where the cache holds data: %s" % (i, e)
print("ok")
EOF
	fail "block status over dropped data: $(cat "$T/dropbs.out")"
stop dropbs
echo "block status over dropped data: ok"

# shutdown over a failing plugin: retried until it recovers
cat >"$T/write.py" <<'EOF'
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(bytes([int(sys.argv[3])]) * (2 << 20), int(sys.argv[2]))
EOF
touch "$T/inject"
start close1 "${errs[@]}" wbcache-retry-timeout=60
$PY "$T/write.py" "$(uri close1)" $((8 << 20)) 7 || fail "write before shutdown"
kill -TERM $pid_close1
sleep 1
kill -0 $pid_close1 2>/dev/null || fail "nbdkit ended with its data unwritten: $(cat "$T/close1.log")"
rm -f "$T/inject"
stop close1
$PY -c "import sys; d=open(sys.argv[1],'rb').read(); assert d[8<<20:10<<20] == bytes([7])*(2<<20)" "$T/disk.img" ||
	fail "data retried at shutdown not in the file"
grep -q "lost" "$T/close1.log" && fail "close1: $(cat "$T/close1.log")"

# ... or, past the retry timeout, the loss is logged and counted
touch "$T/inject"
start close2 "${errs[@]}" wbcache-retry-timeout=1
$PY "$T/write.py" "$(uri close2)" $((16 << 20)) 9 || fail "write before shutdown"
stop close2
grep -q "wbcache: 2097152 bytes of written data could not be written to the plugin and are lost" "$T/close2.log" ||
	fail "the loss is not logged: $(cat "$T/close2.log")"
[ "$(stat_of "$T/close2.stats" final)" = 1 ] && [ "$(stat_of "$T/close2.stats" lost_bytes)" = 2097152 ] ||
	fail "final statistics: $(cat "$T/close2.stats")"

# on_error=drop: counted lost at once, FLUSH fails; on every connection
# (multi-conn), also one opened after the loss and one whose FUA write
# took the error first; once each was told, FLUSH succeeds
start drop "${errs[@]}" wbcache-on-error=drop wbcache-stats-interval=0.05 \
	wbcache-dirty-expire-centisecs=5 wbcache-dirty-writeback-centisecs=5
$PY - "$(uri drop)" "$T/inject" "$T/drop.stats" <<'EOF' >"$T/drop.out" 2>&1 || fail "on_error=drop: $(cat "$T/drop.out")"
import nbd, os, sys, time
uri, inject, stats = sys.argv[1:4]
def lost():
    try:
        st = dict(l.split("=") for l in open(stats).read().split())
        return int(st["lost_bytes"])
    except (OSError, ValueError, KeyError):
        return 0
from nbdtest import fails
a = nbd.NBD()
a.connect_uri(uri)
a.pwrite(b"z" * 65536, 0)
for _ in range(600):                     # written back in the background: dropped
    if lost() >= 65536:
        break
    time.sleep(0.05)
assert lost() >= 65536, "not dropped"
os.unlink(inject)                        # the fault ends
b = nbd.NBD()
b.connect_uri(uri)                       # opened after the loss
try:
    a.pwrite(b"y" * 4096, 1 << 20, nbd.CMD_FLAG_FUA)   # may take the error first
except nbd.Error:
    pass
fails("flush after a FUA write took the error", a.flush)
fails("flush on a connection opened after the loss", b.flush)
a.flush()                                # each was told once
b.flush()
c = nbd.NBD()
c.connect_uri(uri)                       # after the loss was told
c.flush()
print("ok")
EOF
[ "$(stat_of "$T/drop.stats" lost_bytes)" -ge 65536 ] || fail "drop: $(cat "$T/drop.stats")"
stop drop
rm -f "$T/inject"
echo "shutdown over a failing plugin, drop: ok"

check_logs
echo "nbdkit filter tests passed"
