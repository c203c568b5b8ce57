#!/usr/bin/env bash
# The wbcache command: help, version, the run job, and clear errors with a
# non-zero exit for bad input.
set -u
BUILD=${WBCACHE_BUILD:-build/release}
W=$BUILD/wbcache
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/wbc-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT

$W --help | grep -q "run" || fail "--help does not list run"
$W --version | grep -Eq '^wbcache [0-9]+\.[0-9]+' || fail "--version"
$W run --help | grep -q -- "--dir" || fail "run --help"
# every option run parses (its table in tools/run.c) is in run --help and
# in wbcache(1)
opts=$(grep -o '{ "[a-z-]*", [01], 0, O_' tools/run.c | sed 's/{ "\([a-z-]*\)".*/\1/')
[ "$(echo "$opts" | wc -w)" -ge 20 ] || fail "cannot read run's options from tools/run.c"
help=$($W run --help)
for o in $opts; do
	echo "$help" | grep -q -- "--$o\b" || fail "run --help lacks --$o"
	# roff writes --no-fsync as \-\-no\-fsync
	grep -Eq -- "$(printf '%s' "--$o" | sed 's/-/\\\\-/g')([^a-z\\]|\$)" man/wbcache.1 ||
		fail "wbcache(1) lacks --$o"
done

expect_err() {   # expect_err WHAT ARGS... : exit 2 and a message on stderr
	local what=$1; shift
	out=$($W "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	[ -n "$out" ] || fail "$what: no message"
}
expect_msg() {   # expect_msg WHAT PATTERN ARGS... : exit 2 and PATTERN on stderr
	local what=$1 pat=$2; shift 2
	out=$($W "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	echo "$out" | grep -q -- "$pat" || fail "$what: '$out' lacks '$pat'"
}
expect_err "no command"
expect_err "unknown command" frobnicate
expect_err "unknown option" run --frob
# a character device is no device's storage: said so, and no word of
# O_DIRECT before it
expect_msg "file:/dev/null" "not a regular file or a block device" run dd --dev file:/dev/null
echo "$out" | grep -q O_DIRECT && fail "file:/dev/null: '$out' speaks of O_DIRECT"
expect_err "bad size" run --size 12Q --dir "$dir"
expect_err "bad page size" run --page-size 3000 --dir "$dir"
expect_err "bad ratio" run --dirty-ratio 150 --dir "$dir"
expect_err "bad spec" run --dev bogus:thing
expect_err "bad spec option" run --dev "dir:$dir,qd=0"
# a value that is no number, told as the option's bad value with its
# range (it said "bad option 'uring=x' in device spec (expected key=number)")
expect_msg "dir: uring=x" "bad value for device option uring: 'x' (uring=0|1)" run dd --dev "dir:$dir,uring=x"
expect_msg "dir: qd=x" "bad value for device option qd: 'x' (qd=1..4096)" run dd --dev "dir:$dir,qd=x"
expect_err "stray argument" run extra
# the workload after an option: said so (it was "unexpected argument 'dd'")
expect_msg "workload after an option" "the workload 'dd' comes first" run --dev mem dd
expect_err "mount without directories" mount
expect_err "mount with one directory" mount "$dir"
expect_err "stat without a mount point" stat
expect_err "rados-unlock, no rados: spec" rados-unlock nope db.img
# a configuration that names no monitor: said so (librados' ENOENT was
# "No such file or directory", of no file)
# (glibc's resolver keeps a buffer LeakSanitizer takes for a leak)
out=$(env -u CEPH_ARGS LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/lsan-resolv.supp" \
	$W run dd --dev rados:nopool,conf=/dev/null --size 1M 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "rados: with no monitor: exit $rc, expected 2"
echo "$out" | grep -q "cluster of /dev/null: no monitor address" || fail "rados: with no monitor: '$out'"
expect_msg "rados-unlock, empty NAME" "the NAME is empty" rados-unlock rados:pool ''
# --file without its BACKING_FILE: not a NAME "--file" to break a lock on
expect_msg "rados-unlock --file, no file" "needs a BACKING_FILE" rados-unlock rados:pool --file
expect_err "stat of an empty name" stat ''
# a run whose device keeps failing: the close's retries, up to the
# device's retry_timeout, are said (it waited 30 s without a word)
out=$($W run dd --dev model:err=0+4K,retry_timeout=1 --size 1M --quiet 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "a failing device: exit $rc, expected 1"
echo "$out" | grep -q "retrying the .* at risk .*retry_timeout" || fail "a failing device: '$out'"
# an option is named as one (it said "one MOUNTPOINT only" for `umount -l MNT`)
expect_msg "umount with an option" "unknown option '-l'" umount -l "$dir"
expect_msg "umount of two" "one MOUNTPOINT only" umount "$dir" "$dir"
expect_msg "umount of an empty name" "no MOUNTPOINT" umount ''
expect_msg "mem with an option" "option 'qd=4' (mem takes only" run dd --dev mem,qd=4
expect_msg "one store twice" "given twice" run dd --dev mem --dev stack:0/img --dev stack:0/img
expect_msg "--dir with --dev" "a directory device is --dev dir:PATH" run dd --dev mem --dir "$dir"
# numbers are plain decimals: no sign, space or hex
for v in 0x1 " 0.2" +1; do expect_err "--time '$v'" run dd --dev mem --time "$v"; done
expect_err "--threads +2" run dd --dev mem --threads +2
expect_err "model:lat=0x10" run dd --dev model:lat=0x10
# a model device's latency of a minute or more: refused (lat=1e9, a billion seconds, never ended)
expect_msg "model:lat=1000000000" "lat=TIME<=60s" run dd --dev model:lat=1000000000 --size 1M
expect_err "--version with more" --version --bogus
expect_err "help of no such command" help frob
# the stray argument is the one named (it said 'run' for `help run x`)
expect_msg "help with a stray argument" "unexpected argument 'x'" help run x
# output that cannot be written: exit 1 and why (each exited 0, nothing
# written)
for args in --help "run --help" "lab --list"; do
	out=$($W $args 2>&1 >/dev/full); rc=$?
	[ $rc -eq 1 ] || fail "$args >/dev/full: exit $rc, expected 1"
	# with the reason (run --help, longer than stdio's buffer, said
	# only "failed")
	echo "$out" | grep -q "writing to standard output: No space left on device" ||
		fail "$args >/dev/full: '$out'"
done
$W help run | grep -q -- "--dev" || fail "help run does not show run's help"
$W rados-unlock --help | grep -q "^usage: wbcache rados-unlock" || fail "rados-unlock --help"
$W --help | grep -q "mount BACKING_DIR" || fail "--help does not list mount"
$W mount --help | grep -q "dirty_background_bytes" || fail "mount --help lists no tunables"

out=$($W run --size 16M --bs 64K --mem 4M --dir "$dir") || fail "run failed: $out"
echo "$out"
echo "$out" | grep -q "cache 4 MiB (bg_thresh " || fail "header: $(echo "$out" | head -1)"
# a rate under 10 MB/s with its decimals (a 256 KiB/s device: "= 0 MB/s")
out2=$($W run dd --dev model:bw=256K --size 512K --bs 64K --quiet) || fail "run on 256K/s: $out2"
echo "$out2" | grep -q "in [0-9.]* s = 0\.[0-9][0-9][0-9] MB/s" || fail "a slow rate: $(echo "$out2" | grep ' = ')"
# a cache under 1 MiB in KiB, the cache's own size (it said "cache 0 MiB")
out2=$($W run --size 1M --mem 100000 --dir "$dir" --quiet) || fail "run --mem 100000: $out2"
echo "$out2" | head -1 | grep -q "cache 96 KiB (bg_thresh [0-9.]*, setpoint [0-9.]*, limit [0-9.]* KiB)" ||
	fail "a cache under 1 MiB: $(echo "$out2" | head -1)"
echo "$out" | grep -q "MB/s" || fail "run printed no throughput"
# the engine's user time of a short run: less than a clock tick of it
# is said so (it printed 0.00 us per page)
echo "$out" | grep -q "in user space.*: 0.00 us per page" && fail "user time 0.00: $(echo "$out" | grep 'user space')"
echo "$out" | grep -q "in user space.*: \(under a clock tick: under \)\?[0-9.]* us per page" ||
	fail "no user-space CPU figure: $(echo "$out" | grep 'writeback CPU')"
left=$(ls -A "$dir" | grep -v '^run-trace.csv$\|^run-plot.svg$')
[ -z "$left" ] || fail "run left files behind: $left"
head -1 "$dir/run-trace.csv" | grep -q '^t_s,dirty_mib' || fail "demo trace missing"
# a run over before the sampler's first interval: its one sample's rates
# are over the time since the run began (they were over the microsecond
# since the sampler began: 234,057 MB/s for 64 KiB), and its rate times
# its time is the bytes written back (64 KiB), the ops (16)
$W run dd --dev mem --size 64K --bs 4K --quiet --trace "$dir/short.csv" >/dev/null ||
	fail "a 64 KiB run with a trace"
python3 - "$dir/short.csv" <<'PY' || fail "a short run's trace: $(cat "$dir/short.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows
for r in rows:
    t = float(r["t_s"])
    assert t > 0, r
    # each rate rounded to 0.1 (MB/s, ops/s) in the CSV, t_s to 1 us
    # (a rate of 8,530/s over 1.876 ms: 0.004 ops): 1% (the rates were
    # a thousand times too high)
    assert float(r["dev0_throughput_mbs"]) * t * 1e6 <= 65536 * 1.01 + 0.05e6 * t, r
    assert float(r["ops_per_s"]) * t <= 16 * 1.01 + 0.05 * t, r
PY
grep -q '</svg>' "$dir/run-plot.svg" || fail "demo plot missing"
$W run dd --size 1M --dir "$dir" --keep >/dev/null || fail "run --keep"
[ "$(stat -c %s "$dir"/dd.*)" = 1048576 ] || fail "kept file has the wrong size"

# workloads on model devices, with trace and plot
out=$($W run randwrite --dev model:bw=100M --time 1 --file-size 64M --mem 16M --quiet \
	--trace "$dir/r.csv" --plot "$dir/r.svg") || fail "randwrite: $out"
echo "$out" | grep -q "fairness" || fail "randwrite printed no report"
[ "$(wc -l < "$dir/r.csv")" -ge 5 ] || fail "trace too short"
grep -q "dirty_ratelimit" "$dir/r.svg" || fail "plot has no legend"
# the device rows count what was written back while the writers ran,
# not the layout before them (1 GiB of it once showed a 50 MB/s device
# at 234 MB/s): without a dirty page at the start, at most what the
# writers wrote
out=$($W run randwrite --dev model:bw=100M --time 1 --file-size 128M --mem 16M --quiet \
	--json "$dir/r.json") || fail "randwrite --json: $out"
jb=$(sed -n 's/.*"secs": [0-9.]*, "bytes": \([0-9]*\),.*/\1/p' "$dir/r.json")
dw=$(sed -n 's/.*"spec": "model:bw=100M", "written_bytes": \([0-9]*\),.*/\1/p' "$dir/r.json")
[ -n "$jb" ] && [ -n "$dw" ] || fail "randwrite --json: no bytes / written_bytes: $(cat "$dir/r.json")"
[ "$dw" -le "$jb" ] || fail "device wrote back $dw bytes, more than the writers' $jb: the layout counted"
# a run shorter than one 100 ms sample still has its timeline
for i in 1 2 3; do
	out=$($W run dd --dev mem --size 4K --bs 4K --quiet --trace "$dir/s.csv" --plot "$dir/s.svg" 2>&1) ||
		fail "short run: $out"
	echo "$out" | grep -q "cannot write" && fail "short run: $out"
	# a histogram with no entry says so (the line ended at its colon)
	echo "$out" | grep -q "list-lock holds by time:$" && fail "short run: an empty histogram line: $out"
	[ "$(wc -l < "$dir/s.csv")" -ge 2 ] || fail "short run: a trace without a sample"
	grep -q '</svg>' "$dir/s.svg" || fail "short run: no plot"
done
# sixteen devices, one of them a dir: with a long UTF-8 name: the plot is
# valid XML (a name cut inside a character was not) and every text is on
# the canvas (the legend ran off it)
mkdir "$dir/$(printf 'é%.0s' $(seq 20))"
devs=(--dev "dir:$dir/$(printf 'é%.0s' $(seq 20))"); for i in $(seq 15); do devs+=(--dev mem); done
$W run dd "${devs[@]}" --threads 16 --size 16M --mem 64M --quiet --plot "$dir/p16.svg" >/dev/null ||
	fail "16 devices: exit $?"
python3 - "$dir/p16.svg" <<'PY' || fail "16 devices: the plot"
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1]).documentElement
h = float(d.getAttribute("height"))
ys = [float(t.getAttribute("y")) for t in d.getElementsByTagName("text")]
assert max(ys) < h, (max(ys), h)
PY
# a run given up at its --deadline writes its latency log too
out=$($W run dd --dev model:bw=20M --size 1G --deadline 1 --lat-log "$dir/L" --quiet); rc=$?
[ $rc = 3 ] || fail "--deadline: exit $rc, expected 3: $out"
n=$(sed -n 's/.*: \([0-9.]*\) MiB written, \([0-9]*\) operations; giving up/\2/p' <<<"$out")
[ -n "$n" ] && [ "$n" -gt 0 ] || fail "--deadline: no operations counted: $out"
[ "$(wc -l < "$dir/L")" -ge "$n" ] || fail "--deadline: $(wc -l < "$dir/L") latencies for $n writes"
# --dir: made with its parents; a file there is refused
$W run dd --size 1M --dir "$dir/a/b/c" --quiet >/dev/null || fail "--dir with missing parents"
[ -d "$dir/a/b/c" ] || fail "--dir was not made"
# --dir whose mkdir fails part of the way (a file system out of inodes:
# a/ is made, a/b cannot be): the parents it made are removed again
# (they stayed); root only (the tmpfs)
if [ "$(id -u)" = 0 ] && mkdir "$dir/tiny" && mount -t tmpfs -o size=1M,nr_inodes=2 tmpfs "$dir/tiny" 2>/dev/null; then
	out=$($W run dd --size 1M --dir "$dir/tiny/a/b" --quiet 2>&1 >/dev/null); rc=$?
	left=$(ls -A "$dir/tiny")
	umount "$dir/tiny"
	rmdir "$dir/tiny"
	[ $rc -eq 1 ] || fail "--dir whose mkdir fails: exit $rc, expected 1 ($out)"
	echo "$out" | grep -q "cannot create .*: No space left on device" ||
		fail "--dir whose mkdir fails: '$out'"
	[ -z "$left" ] || fail "--dir whose mkdir fails left: $left"
fi
touch "$dir/plain"
expect_msg "--dir a file" "--dir $dir/plain: not a directory" run --size 1M --dir "$dir/plain"
out=$($W run fsmark --dev mem --threads 2 --files 500 --mem 8M --quiet) || fail "fsmark: $out"
echo "$out" | grep -q "files/s" || fail "fsmark printed no file rate"
out=$($W run jbod --dev model:bw=50M --dev model:bw=100M --time 1 --file-size 16M --mem 16M --quiet) ||
	fail "jbod: $out"
[ "$(echo "$out" | grep -c 'model:bw=')" = 2 ] || fail "jbod report lacks the devices"
out=$($W run randrw --dev model:bw=100M --bs 8K --threads 2 --rwmix 30 --time 1 --file-size 16M \
	--mem 16M --quiet) || fail "randrw: $out"
echo "$out" | grep -Eq "[0-9]+ write IOPS, [0-9]+ read IOPS .*30% writes" || fail "randrw report: $out"
rw=$(echo "$out" | sed -n 's/.* \([0-9]*\) write IOPS, \([0-9]*\) read IOPS.*/\1 \2/p')
[ "${rw% *}" -gt 0 ] && [ "${rw#* }" -gt 0 ] || fail "randrw did not both read and write: $rw"
# a stacked device over a file of the first: the writers write to it,
# and its bytes reach the device under it (each mode); a one-file device
# takes several writers, each in its own region
for m in global local direct; do
	out=$($W run dd --dev model:bw=400M --dev "stack:0/img,stack_throttle=$m" --size 32M \
		--threads 2 --mem 8M --quiet) || fail "stacked $m: $out"
	echo "$out" | grep -Eq '^ +[01] +1 ' || fail "stacked $m: the writers did not write to it: $out"
	echo "$out" | grep -Eq "^ +1 +32\.0 .*stack:0/img" || fail "stacked $m: upper wrote back: $out"
	[ $m = direct ] || echo "$out" | grep -Eq "^ +0 +32\.0 .*model:" ||
		fail "stacked $m: nothing reached the device under it: $out"
done
# a direct stack over a one-file device: the device under it has no
# writer of its own and is not opened for regions (its file is open
# direct: refused, "holds -16 bytes ... Device or resource busy")
truncate -s 10000 "$dir/st.img"
out=$($W run dd --dev "file:$dir/st.img" --dev "stack:0/,stack_throttle=direct" --size 10000 \
	--bs 4096 --quiet 2>&1) || fail "a direct stack over a file: device: $out"
rm -f "$dir/st.img"
# many writers over a stack in the same cache, a tiny cache, and a stack
# over a stack: every page became the stacked device's, dirty, and the
# workers waited for pages only their writes could free (hung: 3 in 3,
# and every time with two levels, before the memalloc reserve; three
# levels in 128 KiB hung when the reserve grew only at the top level's
# first allocation, after the writers had taken the pages above the old)
for args in "--mem 64K --threads 16 --size 4M --dev model:bw=200M --dev stack:0/img" \
	    "--mem 4M --threads 64 --size 64M --dev model:bw=200M --dev stack:0/img" \
	    "--mem 4M --threads 4 --size 64M --dev model:bw=200M --dev stack:0/img --dev stack:1/" \
	    "--mem 128K --threads 4 --size 4M --dev model:bw=200M --dev stack:0/img --dev stack:1/ --dev stack:2/"; do
	out=$(timeout -k 5 240 $W run dd --dirty-ratio 87 $args --quiet 2>&1) ||
		fail "stacked, $args: exit $? (124: hung): $out"
done
# four levels in 16 pages: no reserve gives each level a share of its own
# (hung): refused at the add
expect_msg "four stack levels in 64 KiB" "needs a reserve of 12 of its pages" \
	run dd --dirty-ratio 87 --mem 64K --size 1M --dev model:bw=200M --dev stack:0/img \
	--dev stack:1/ --dev stack:2/ --dev stack:3/
$W run --help | grep -q "stack:N/NAME" || fail "run --help does not name stack:"
# threads on devices, as run --help and wbcache(1) say: thread i on the
# (i mod N)-th device the writers write to (not one a stack: device
# stands on); jbod: --threads on each, device by device
devs_of() { echo "$1" | awk '/^thread  device/ {t=1; next} t && NF == 0 {exit} t {printf "%s ", $2}'; }
out=$($W run dd --dev mem --dev mem --threads 3 --size 3M --mem 8M --quiet) || fail "dd on two devices: $out"
[ "$(devs_of "$out")" = "0 1 0 " ] || fail "dd, 3 threads on 2 devices: $(devs_of "$out")"
out=$($W run dd --dev mem --dev stack:0/img --dev mem --threads 3 --size 3M --mem 8M --quiet) ||
	fail "dd on a stacked device and another: $out"
[ "$(devs_of "$out")" = "1 2 1 " ] || fail "dd, 3 threads beside a stack: $(devs_of "$out")"
out=$($W run jbod --dev mem --dev mem --threads 2 --time 0.3 --file-size 4M --mem 8M --quiet) ||
	fail "jbod on two devices: $out"
[ "$(devs_of "$out")" = "0 0 1 1 " ] || fail "jbod, 2 threads on each of 2 devices: $(devs_of "$out")"
expect_err "stack over no device" run dd --dev stack:3/img
expect_err "bad stack option" run dd --dev mem --dev stack:0/img,stack_throttle=maybe
expect_err "fsmark on one file" run fsmark --dev mem --dev stack:0/img
expect_err "bad rwmix" run randrw --rwmix 101
out=$($W run dd --dev model:bw=200M --size 16M --fsync-every 4M --mem 16M --quiet) || fail "fsync-every: $out"
echo "$out" | grep -q "^fsyncs: 4, p50 " || fail "fsync-every: 16M in 4M steps is 4 fsyncs: $out"
expect_err "bad fsync-every" run dd --fsync-every 0
# an option the workload would ignore is refused, with the workloads it fits
expect_msg "rwmix on dd" "--rwmix does not apply to dd (only to randrw)" run dd --rwmix 50
expect_msg "files on randwrite" "--files does not apply to randwrite" run randwrite --files 10
expect_msg "files on the demonstration" "--files does not apply to dd, the demonstration" run --files 3
expect_msg "size on fsmark" "--size does not apply to fsmark (only to dd)" run fsmark --size 1M
expect_msg "file-size on dd" "--file-size does not apply to dd" run dd --file-size 1M
expect_msg "no-layout on dd" "only to randwrite, jbod, randrw" run dd --no-layout
# randrw reads the laid-out data: without it its reads read past the end
# (0 bytes each, counted as reads); all writes need none
expect_msg "no-layout on randrw" "randrw reads the laid-out files" run randrw --no-layout
$W run randrw --dev mem --no-layout --rwmix 100 --time 0.2 --quiet >/dev/null ||
	fail "randrw --no-layout --rwmix 100 refused"
for o in "--lat-log $dir/lat" "--fsync-every 1M" --no-fsync; do
	expect_msg "$o on fsmark" "does not apply to fsmark" run fsmark $o
done
# an output file that cannot be written is refused before the run
for o in --json --trace --plot --lat-log; do
	expect_msg "$o in a missing directory" "$o $dir/none/x: cannot write it" run dd --dev mem --size 1M $o "$dir/none/x"
done
# ... and a run refused after that check leaves none of them behind
expect_msg "refused with outputs" "at least 16 pages" run dd --dev mem --mem 16K \
	--json "$dir/no.json" --trace "$dir/no.csv" --plot "$dir/no.svg" --lat-log "$dir/no.log"
[ -z "$(ls "$dir"/no.* 2>/dev/null)" ] || fail "a refused run left files: $(ls "$dir"/no.*)"
expect_msg "size 0" "bad value '0' for --size" run dd --size 0
# a bad value says what the option takes (it said "bad value '2G' for --bs"
# alone: the limit was in the man page only)
expect_msg "threads 0" "bad value '0' for --threads (1..1024)" run dd --threads 0
expect_msg "bs 2G" "bad value '2G' for --bs (a size from 1 byte to 1G)" run dd --bs 2G
expect_msg "rwmix 101" "bad value '101' for --rwmix (0..100)" run randrw --rwmix 101
expect_msg "time -1" "bad value '-1' for --time (above 0 " run dd --time -1
expect_msg "mem 1Q" "bad value '1Q' for --mem (a size: " run dd --mem 1Q
expect_msg "page size 2M" "bad value '2M' for --page-size (a power of two from 512 to 1M)" run dd --page-size 2M
$W run -h | grep -q "^usage: wbcache run" || fail "run -h prints no usage"
# a bad cache configuration names its fault
expect_msg "dirty-ratio 0" "dirty_ratio 0 needs dirty_bytes" run dd --dirty-ratio 0
expect_msg "dirty-bytes 1K" "dirty_bytes must be at least two pages" run dd --dirty-bytes 1K
expect_msg "mem 16K" "at least 16 pages" run dd --mem 16K
expect_msg "page size 3000" "power of two" run dd --page-size 3000
expect_err "bad workload" run frobnicate
expect_err "bad model spec" run dd --dev model:bw=fast
expect_err "bad threads" run dd --threads 0
expect_err "bad time" run randwrite --time -1

# a bad option: one line that names it, exit 2 (not the whole usage)
for args in "--frob" "dd --dev" "--quiet=1" "--dirty"; do
	out=$($W run $args 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "run $args: exit $rc, expected 2"
	[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "run $args: more than one line: $out"
	opt=${args#dd }; opt=${opt%=*}
	echo "$out" | grep -q -- "'$opt" || fail "run $args: the message does not name $opt: $out"
done

# no shell: the data directory's name is only a name, whatever it holds
# (--dir, and $WBCACHE_DIR); the run's files go, and nothing else
abs=$(cd "$(dirname "$W")" && pwd)/wbcache
(cd "$dir" && "$abs" run dd --dir "x';touch PWNED;'" --size 1M --mem 16M --quiet >/dev/null) ||
	fail "run with quotes in --dir"
(cd "$dir" && WBCACHE_DIR="y';touch PWNED;'" "$abs" run dd --size 1M --mem 16M --quiet \
	>/dev/null) || fail "run with quotes in WBCACHE_DIR"
[ ! -e "$dir/PWNED" ] || fail "a directory name ran a command"
[ -z "$(ls -A "$dir/x';touch PWNED;'" "$dir/y';touch PWNED;'" | grep -v ':$' | grep .)" ] ||
	fail "run left files behind in a quoted directory"
mkdir "$dir/d" "$dir/outside"
echo keep > "$dir/outside/f"
# links with this run's names (the pid is the shell's, which the run takes
# over; names of a second thread and of another workload, which this run
# does not open), and a name that only carries the pid
sh -c 'ln -s "$1/outside/f" "$1/d/dd.$$.1.0" && ln -s "$1/outside" "$1/d/rand.$$.0.0" &&
	echo keep > "$1/d/notes.$$.0" &&
	exec "$2" run dd --dir "$1/d" --size 1M --mem 16M --quiet' sh "$dir" "$abs" >/dev/null ||
	fail "run with links in its directory"
left=$(ls -A "$dir/d")
case $left in notes.*.0) ;; *) fail "run left its names behind, or removed another's: $left" ;; esac
[ "$(cat "$dir/outside/f")" = keep ] || fail "the clean-up followed a link"

# a dir: device: the run removes its own files from it (--keep: leaves
# them), never the directory's other files
mkdir "$dir/dev"
echo keep > "$dir/dev/mine"
echo keep > "$dir/dev/dd.1.0.0"
$W run randwrite --dev "dir:$dir/dev,qd=4" --time 0.3 --file-size 4M --mem 16M --quiet >/dev/null ||
	fail "randwrite on a dir: device"
[ "$(ls -A "$dir/dev" | sort | tr '\n' ' ')" = "dd.1.0.0 mine " ] ||
	fail "dir: device after the run: $(ls -A "$dir/dev")"
$W run fsmark --dev "dir:$dir/dev" --files 3 --mem 16M --quiet --keep >/dev/null ||
	fail "fsmark --keep on a dir: device"
[ "$(ls -A "$dir/dev" | grep -c '^fsm\.[0-9]*\.0\.[0-2]$')" = 3 ] ||
	fail "--keep did not keep the files on a dir: device: $(ls -A "$dir/dev")"

# a store that fails every write (on_error=retry, the default): the run
# ends with the error and a non-zero exit once retry_timeout is over; what
# it could not write is reported lost (the command's own timeout is only
# a watchdog)
out=$(timeout 120 $W run dd --dev model:errp=1,retry_timeout=1 --size 256M --mem 64M --quiet 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "run on a dead store: exit $rc, expected 1: $out"
echo "$out" | grep -q "a writer failed: Input/output error" || fail "no writer error: $out"
echo "$out" | grep -q "MiB of written data lost" || fail "no loss reported: $out"
$W run --help | grep -q "retry_timeout" || fail "run --help does not name retry_timeout"
# outputs: one that cannot be written is an error of the run (exit 1, the
# option named); two outputs to one file are refused; a bad --dir too
# fsmark on a device of one file: refused, and the file not made
expect_msg "fsmark on file:" "fsmark needs a device of files" run fsmark --dev "file:$dir/onefile"
[ -e "$dir/onefile" ] && fail "a refused fsmark run made its file:"
# one file under two paths: the devices would write over each other
touch "$dir/f1"
expect_msg "one file twice" "given twice" run dd --dev "file:$dir/f1" --dev "file:$dir//f1"
# SIGINT: the run stops, reports, removes its files, exits 130 (they
# stayed, gigabytes, under a name no later run removes)
mkdir "$dir/intr"
$W run dd --dev "dir:$dir/intr" --time 60 --mem 16M --quiet --json "$dir/intr.json" >"$dir/intr.out" 2>&1 &
rpid=$!
for _ in $(seq 200); do [ -n "$(ls "$dir/intr")" ] && break; sleep 0.1; done
[ -n "$(ls "$dir/intr")" ] || fail "SIGINT: the run made no file in 20 s"
kill -INT $rpid
wait $rpid; rc=$?
[ $rc = 130 ] || fail "SIGINT: exit $rc, expected 130: $(cat "$dir/intr.out")"
grep -q "^dd: 1 thread" "$dir/intr.out" || fail "SIGINT: no report: $(cat "$dir/intr.out")"
[ -z "$(ls "$dir/intr")" ] || fail "SIGINT: files left: $(ls "$dir/intr")"
grep -q '"finished": false' "$dir/intr.json" || fail "SIGINT: the JSON says finished"
# ... and says at once that it writes back before exiting (it went silent
# until its final fsync ended: minutes on a slow device)
grep -Eq "^wbcache: SIGINT: stopping; writing back [0-9]+ MiB before exiting \(another SIGINT ends it" \
	"$dir/intr.out" || fail "SIGINT: no line on the writeback: $(cat "$dir/intr.out")"
# ... and during the layout, before any sample, the line says what is
# dirty (it said "writing back 0 MiB" with the cache full of the layout)
$W run randwrite --dev model:bw=20M --file-size 256M --mem 64M --time 1 >"$dir/li.out" 2>&1 &
rpid=$!
for _ in $(seq 100); do grep -q "^wbcache run randwrite" "$dir/li.out" && break; sleep 0.1; done
sleep 1
kill -INT $rpid
wait $rpid; rc=$?
[ $rc = 130 ] || fail "SIGINT in the layout: exit $rc, expected 130: $(cat "$dir/li.out")"
grep -Eq "^wbcache: SIGINT: stopping; writing back [1-9][0-9]* MiB" "$dir/li.out" ||
	fail "SIGINT in the layout: the MiB written back: $(cat "$dir/li.out")"
# ... and while its header waits on a full pipe (its reader slow): the
# handler is in place before the header (a SIGINT then killed the run,
# its devices' files left, no writeback)
python3 - "$W" "$dir/hdr" <<'PY' || fail "SIGINT while the header waits on a full pipe"
import fcntl, os, signal, subprocess, sys, time
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)            # F_SETPIPE_SZ: one page
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"x" * 4096)      # full: the header's write waits
except BlockingIOError:
    pass
os.set_blocking(w, True)
os.makedirs(sys.argv[2])
p = subprocess.Popen([sys.argv[1], "run", "dd", "--dev", "dir:" + sys.argv[2], "--size", "64M"],
                     stdout=w, stderr=subprocess.PIPE)
os.close(w)
# the run waits in its header's write (its wchan [anon_]pipe_write), or
# already past it: then the pipe had room after all and this proves
# nothing, said
for _ in range(600):
    try:
        wchan = open("/proc/%d/wchan" % p.pid).read()
    except OSError:
        wchan = ""
    if wchan.endswith("pipe_write") or p.poll() is not None:
        break
    time.sleep(0.1)
assert wchan.endswith("pipe_write"), ("the run never waited on the pipe", wchan, p.poll())
p.send_signal(signal.SIGINT)
time.sleep(0.2)
while os.read(r, 65536):              # the reader comes back
    pass
err = p.stderr.read().decode()
rc = p.wait()
assert rc == 130, ("exit", rc, err)   # -2: killed by the SIGINT
assert "SIGINT: stopping" in err, err
assert not [f for f in os.listdir(sys.argv[2]) if not f.startswith(".")], os.listdir(sys.argv[2])
PY
# a report into a pipe whose reader has gone (| head -1): not killed by
# SIGPIPE (exit 141, files left, no writeback, no trace) but exit 1 after
# the clean-up, the trace written
closed_pipe() {   # closed_pipe CMD...: CMD's stdout a pipe with no reader
	python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w)
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)' "$@"
}
mkdir "$dir/pipe"
out=$(closed_pipe $W run dd --dev "dir:$dir/pipe" --size 8M --threads 2 --no-fsync \
	--trace "$dir/pipe.csv" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "report into a closed pipe: exit $rc, expected 1: $out"
echo "$out" | grep -q "writing the report: Broken pipe" || fail "closed pipe: '$out'"
[ -z "$(ls "$dir/pipe")" ] || fail "closed pipe: files left: $(ls "$dir/pipe")"
head -1 "$dir/pipe.csv" | grep -q '^t_s,' || fail "closed pipe: no trace"

# the report to a full disk: exit 1
$W run dd --dev mem --size 64K --bs 4K --mem 1M --quiet >/dev/full 2>/dev/null && fail "report to /dev/full: exit 0"
# --json -: the JSON alone on stdout (the report on stderr), no file "-";
# the other outputs refuse "-"
wabs=$(realpath "$W")
(cd "$dir" && "$wabs" run dd --size 64K --bs 4K --mem 1M --dev mem --json - 2>/dev/null) >"$dir/stdout.json" ||
	fail "--json -: exit $?"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["bytes"] == 65536, d' \
	"$dir/stdout.json" || fail "--json -: stdout is not the JSON: $(head -c 300 "$dir/stdout.json")"
[ -e "$dir/-" ] && fail "--json - wrote a file named -"
# the JSON's secs to the microsecond: its rates are its bytes and ops over
# it (a run of 4 KiB said "secs": 0.000 beside "mb_per_s": 5.90)
$W run dd --dev mem --size 4K --bs 4K --mem 1M --quiet --json "$dir/sec.json" >/dev/null ||
	fail "a 4 KiB run with --json"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
s = j["secs"]
assert s > 0, j
assert abs(j["bytes"] / s / 1e6 - j["mb_per_s"]) <= 0.01 * j["mb_per_s"] + 0.01, (s, j["bytes"], j["mb_per_s"])
assert abs(j["ops"] / s - j["ops_per_s"]) <= 0.01 * j["ops_per_s"] + 0.1, (s, j["ops"], j["ops_per_s"])' \
	"$dir/sec.json" || fail "--json secs against its rates: $(head -c 200 "$dir/sec.json")"
expect_msg "--trace -" "only --json writes to stdout" run dd --dev mem --trace -
out=$($W run dd --size 64K --bs 4K --mem 1M --quiet --dev mem --json /dev/full 2>&1); rc=$?
[ $rc -eq 1 ] || fail "--json /dev/full: exit $rc, expected 1"
echo "$out" | grep -q -- "--json /dev/full: cannot write it" || fail "--json /dev/full: $out"
expect_msg "same output twice" "name the same file" run dd --size 64K --mem 1M --dev mem \
	--trace "$dir/x" --plot "$dir/x"
expect_msg "empty --dir" "bad value '' for --dir" run dd --size 64K --mem 1M --dir ''
# a comma in --dir: refused before anything is made (dir:DIR took it for
# device options: "x,y" made, then "bad option 'y'"; x,direct=0 wrote
# into x)
expect_msg "--dir with a comma" "a comma cannot be in" run dd --size 64K --mem 1M --dir "$dir/cx,y"
expect_msg "--dir with an option" "a comma cannot be in" run dd --size 64K --mem 1M \
	--dir "$dir/cz,direct=0"
[ ! -e "$dir/cx,y" ] && [ ! -e "$dir/cz" ] || fail "a refused --dir was made"
# a run refused after DIR was made (a bad cache size, a bad device, an
# output it cannot write) removes the directories it made: each left them
expect_msg "refused run, DIR made" "at least 16 pages" run dd --size 64K --mem 1K --dir "$dir/rm/a/b"
[ ! -e "$dir/rm" ] || fail "a run refused for --mem left --dir's directories"
WBCACHE_DIR="$dir/rd" expect_msg "refused demonstration" "unknown device spec" run --dev bogus:thing
[ ! -e "$dir/rd" ] || fail "a demonstration refused for its --dev left \$WBCACHE_DIR"
mkdir "$dir/keep"
expect_msg "refused run, DIR there" "cannot write it" run dd --size 64K --mem 1M \
	--dir "$dir/keep" --json "$dir/nodir/x.json"
[ -d "$dir/keep" ] || fail "a refused run removed a --dir it had not made"
# nor one it reached through one it made ("NEW/../OLD": OLD was
# removed, empty, as if the run had made it below NEW)
expect_msg "refused run, DIR through a new one" "at least 16 pages" run dd --size 64K --mem 1K \
	--dir "$dir/new1/../keep"
[ -d "$dir/keep" ] || fail "a refused run removed --dir NEW/../OLD, OLD not its own"
rmdir "$dir/keep" "$dir/new1" 2>/dev/null
# one output file under two names: refused (only the strings were compared)
(cd "$dir" && "$wabs" run dd --dev mem --size 64K --mem 1M --json a.json --trace ./a.json \
	>/dev/null 2>"$dir/same.err"); rc=$?
[ $rc -eq 2 ] && grep -q "name the same file" "$dir/same.err" ||
	fail "--json a.json --trace ./a.json: exit $rc: $(cat "$dir/same.err")"
[ ! -e "$dir/a.json" ] || fail "a refused run left its output"
# the JSON's total written_bytes counts a stacked device's bytes once (the
# device under it writes them back again: 32 MiB were 64)
$W run dd --dev model:bw=400M --dev stack:0/img --size 32M --mem 16M --quiet \
	--json "$dir/st.json" >/dev/null || fail "stacked run with --json"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["written_bytes"] == j["bytes"] == 32 << 20, (j["written_bytes"], j["bytes"])' \
	"$dir/st.json" || fail "stacked written_bytes: $(head -c 600 "$dir/st.json")"
# a writer's error names the operation, the file and the device
out=$($W run dd --dev dir:/proc --size 1M --quiet 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "dd on dir:/proc: exit $rc"
echo "$out" | grep -q "a writer failed: .*(thread 0 creating file dd\.[0-9.]* on dir:/proc;" ||
	fail "dd on dir:/proc: '$out'"
# the layout message counts the files laid out: not a writer's region of
# a device of one file (it said 2 files for the one file of mem here)
out=$($W run randwrite --dev mem --dev stack:0/img --dev mem --threads 2 --time 0.2 --file-size 8M \
	--mem 16M 2>&1 >/dev/null) || fail "randwrite beside a stack: $out"
echo "$out" | grep -q "^laid out 1 file(s) of 8 MiB" || fail "layout message: $out"
# one stacked device's lower file under two spellings of its number
# (stack:00/img and stack:0/img wrote over each other)
expect_msg "one lower file, two device numbers" "given twice" run dd --dev mem \
	--dev stack:00/img --dev stack:0/img
# fsmark stops at its writer's error: no file counted without its data
# (once the store's writes had failed for retry_timeout it went on making
# the rest of --files, empty, and counted them: 200000 "files" for 820)
out=$(timeout 120 $W run fsmark --dev model:errp=1,retry_timeout=1 --files 200000 --mem 16M \
	--quiet --json "$dir/fe.json" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "fsmark on a dead store: exit $rc, expected 1: $out"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["ops"] * 4096 <= j["bytes"] and j["ops"] < 200000, (j["ops"], j["bytes"])' "$dir/fe.json" ||
	fail "fsmark after a failed write: $(head -c 300 "$dir/fe.json")"
# the live status line fits one row of the terminal: a longer one wraps
# and the \r of each redraw goes back to its last row only (93 columns for
# one device on an 80-column terminal: a new row every 200 ms)
python3 - "$W" <<'PY' || fail "the status line is wider than the terminal"
import fcntl, os, pty, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    os.execv(sys.argv[1], [sys.argv[1], "run", "dd", "--dev", "model:bw=100M", "--dev", "mem",
                           "--time", "0.7", "--mem", "64M"])
out = b""
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    out += b
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0, out
rows = [r.split(b"\n")[0].replace(b"\x1b[K", b"") for r in out.split(b"\r")]
rows = [r for r in rows if b"dirty+wb" in r]
assert rows, out
assert max(len(r) for r in rows) <= 79, [len(r) for r in rows]
# the pause and the first device shown whole on 80 columns, and a device
# that does not fit left out, not cut ("dev0 12" for 1234 MB/s)
assert all(b"| pause " in r and b"| dev0 " in r for r in rows), rows[:3]
assert all(r.rstrip().endswith((b"MB/s", b" ms")) for r in rows), rows[:3]
PY
# a stack over a device of one file names a file it does not have
expect_msg "stack over a stack, with a NAME" "holds only one file" run dd --dev mem \
	--dev stack:0/img --dev stack:1/img2
# a model option's error names the value as given
expect_msg "bad model schedule" "'sched=1s@0%'" run dd --dev 'model:sched=1s@0%'
# --deadline: the JSON has null for what the run did not sum up
$W run dd --size 1G --dev model:bw=10M --mem 16M --quiet --deadline 1 \
	--json "$dir/dl.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 3 ] || fail "--deadline run: exit $rc, expected 3"
grep -q '"finished": false' "$dir/dl.json" && grep -q '"pauses": null' "$dir/dl.json" &&
	grep -q '"fairness": null' "$dir/dl.json" || fail "--deadline JSON: $(cat "$dir/dl.json")"
# dd on a one-file device: the writers' regions do not overlap (64 KiB in
# three regions of 21845 bytes, the last one 21846: 65536 written, not 3 x
# 24 KiB; and not 3 x 21845 either, the byte that did not divide dropped)
$W run dd --dev mem --dev stack:0/img --threads 3 --size 64K --bs 4K --mem 1M --quiet \
	--json "$dir/r.json" >/dev/null || fail "dd, 3 writers on a one-file device"
grep -q '"bytes": 65536,' "$dir/r.json" || fail "dd regions: $(head -c 300 "$dir/r.json")"
# dd --time on a device of many files goes on past its share with whole
# writes (no writes of nothing, counted by millions)
$W run dd --dev mem --time 0.5 --size 1M --bs 64K --mem 16M --quiet --json "$dir/t.json" \
	>/dev/null || fail "dd --time on mem"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["ops"] * 65536 == j["bytes"], (j["ops"], j["bytes"])' "$dir/t.json" ||
	fail "dd --time: operations that wrote nothing"
# the chart's text is escaped (a device named with XML's own characters)
# (a short name: the legend shows 30 characters)
q=/tmp/wbc-q\<\&$$
mkdir -p "$q"
$W run dd --dev "dir:$q" --size 64K --mem 1M --quiet --plot "$dir/q.svg" >/dev/null ||
	fail "run with a plot of a dir: device named with < and &"
rm -rf "$q"
grep -q "wbc-q&lt;&amp;$$" "$dir/q.svg" && ! grep -q 'wbc-q<&' "$dir/q.svg" ||
	fail "SVG text not escaped"
# --json is UTF-8 whatever bytes a device's spec holds (Python refused a
# byte 0xff copied as it was); well-formed UTF-8 is kept
u="/tmp/wbc-u$(printf '\377\303\251')$$"
mkdir -p "$u"
$W run dd --dev mem --dev "dir:$u" --threads 2 --size 64K --mem 1M --quiet \
	--json "$dir/u.json" --plot "$dir/u.svg" >/dev/null || fail "run on a dir: device named with a byte 0xff"
rm -rf "$u"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1], encoding="utf-8"))
assert j["devices"][1]["spec"].startswith("dir:/tmp/wbc-u\ufffd\u00e9"), j["devices"][1]' \
	"$dir/u.json" || fail "--json with a device spec not in UTF-8: $(head -c 300 "$dir/u.json")"
# ... and so is the chart, which says it is UTF-8 (the byte 0xff was
# copied: invalid XML)
python3 -c 'import sys, xml.dom.minidom as m
t = [n.firstChild.data for n in m.parse(sys.argv[1]).getElementsByTagName("text") if n.firstChild]
assert any(x.startswith("dir:/tmp/wbc-u\ufffd\u00e9") for x in t), t' "$dir/u.svg" ||
	fail "--plot with a device spec not in UTF-8: $(grep -a 'wbc-u' "$dir/u.svg" | head -c 300)"
# a run given up at its --deadline whose report cannot be written: 1, said
$W run dd --size 1G --dev model:bw=10M --mem 16M --quiet --deadline 0.3 >/dev/full 2>"$dir/df.err"
rc=$?
[ $rc -eq 1 ] && grep -q "writing the report" "$dir/df.err" ||
	fail "--deadline with the report on a full disk: exit $rc, $(cat "$dir/df.err")"
# fs_mark on a dir: device under a soft descriptor limit of 256 (a
# closed file holds its descriptor until its writeback): run raises the
# soft limit to the hard one (it failed at the 250th file: "Too many
# open files")
if [ "$(ulimit -H -n)" = unlimited ] || [ "$(ulimit -H -n)" -ge 2048 ]; then
	mkdir -p "$dir/fds"
	(ulimit -S -n 256 && $W run fsmark --dev "dir:$dir/fds" --files 1000 --mem 64M --quiet \
		>"$dir/fds.out" 2>&1) || fail "fsmark of 1000 files under ulimit -S -n 256: $(tail -3 "$dir/fds.out")"
fi
# a write that the throttle paused many times counts every pause (a 64 MiB
# write was one pause, its last 10 ms: "pauses: 4, max 10 ms" for a writer
# held back for more than a second).  8 MiB writes through a 3.2 MiB limit
# to a 10 MB/s device: each is paused, whatever the machine's speed (at
# 200 MB/s a writer under ThreadSanitizer was never paused)
$W run dd --dev model:bw=10M,discard=1 --bs 8M --size 32M --mem 16M --quiet \
	--json "$dir/bp.json" >/dev/null || fail "dd --bs 8M"
# (the writer's records against the throttle's own count: 4 calls, the
# records were at most 4 whatever the count)
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["pauses"] == j["throttle_pauses"] and j["pauses"] > 0, (j["pauses"], j["throttle_pauses"])' \
	"$dir/bp.json" || fail "--bs 8M: the pauses counted are not the throttle's: $(grep -o '"[a-z_]*pauses": [0-9]*' "$dir/bp.json" | tr '\n' ' ')"
# the demonstration's trace and plot in DIR, which may be another user's
# (/var/tmp/wbcache by default): a symbolic link there is not followed
# (root's run wrote its CSV over the file the link named)
mkdir "$dir/evil"
echo precious > "$dir/victim"
ln -s "$dir/victim" "$dir/evil/run-trace.csv"
expect_msg "a link in the demonstration's DIR" "a symbolic link, not followed" \
	run --dir "$dir/evil" --size 1M --mem 16M --quiet
[ "$(cat "$dir/victim")" = precious ] || fail "the demonstration wrote through a link in DIR"
# an output over the file of a file: device: refused
echo data > "$dir/img1"
expect_msg "--json on the device's file" "names the file of --dev" \
	run dd --dev "file:$dir/img1" --size 64K --json "$dir/./img1"
# what a close could not write, in bytes below a MiB (it said "0.0 MiB
# lost" of 12 KiB, and of a close whose retries wrote everything)
out=$($W run fsmark --dev model:errn=3,on_error=drop --files 100 --mem 16M --quiet 2>&1) &&
	fail "fsmark with failed writes: exit 0"
echo "$out" | grep -q "(12288 bytes of written data lost)" || fail "12 KiB lost: $out"
# randrw reads the files it laid out from the cache (the last close of the
# layout's handle dropped their pages: every read went to the 1 ms device
# for seconds, 1,000 reads a second)
# (counted: the bytes the device gave the reads, not their rate)
out=$($W run randrw --dev model:lat=1ms --rwmix 0 --file-size 4M --time 0.5 --mem 16M --quiet \
	--json "$dir/rr.json") || fail "randrw, reads only: $out"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["reads"] > 0 and j["read_in_bytes"] * 100 < j["reads"] * 4096, (j["reads"], j["read_in_bytes"])' \
	"$dir/rr.json" || fail "randrw after its layout: the reads went to the device: $(head -c 300 "$dir/rr.json")"
# one-file regions past the largest file: refused (k * --file-size
# wrapped: 8388609T twice made the file 2 TiB, and every write failed)
expect_msg "regions past 2^63" "end past the largest file" \
	run randwrite --dev "file:$dir/wrap" --file-size 8388609T --threads 2 --no-layout
[ "$(stat -c %s "$dir/wrap")" = 0 ] || fail "a refused run resized its file: to $(stat -c %s "$dir/wrap")"
# and said no header first (a run's first line, as if it had started)
hdr=$($W run randwrite --dev "file:$dir/wrap" --file-size 8388609T --threads 2 --no-layout 2>/dev/null)
[ -z "$hdr" ] || fail "a refused run printed: $hdr"
# write latencies below a millisecond are not "0.000 ms"
out=$($W run randwrite --dev mem --file-size 4M --time 0.2 --mem 16M --quiet --lat-log "$dir/ll") ||
	fail "randwrite --lat-log: $out"
echo "$out" | grep -q "^write latency: .* p50 0\.000 ms" && fail "--lat-log: $(echo "$out" | grep latency)"
echo "$out" | grep -Eq "^write latency: [0-9]+ writes, p50 [0-9.]+ [um]s, p99 [0-9.]+ [um]s" ||
	fail "--lat-log: $(echo "$out" | grep latency)"
# fsmark's --time is the most it runs, also with files of many writes
# (a 256 MiB file at 100 MiB/s ran 2.5 s of --time 0.5, and was counted:
# the file cut at the time is not one of fs_mark's)
$W run fsmark --dev model:bw=100M,discard=1 --file-size 256M --files 2 --time 0.5 --mem 16M \
	--quiet --json "$dir/fm.json" >/dev/null || fail "fsmark --time with large files"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert j["ops"] == 0, (j["secs"], j["ops"])' "$dir/fm.json" ||
	fail "fsmark --time 0.5: $(head -c 200 "$dir/fm.json")"
# the default DIR, /var/tmp/wbcache, made first by another user or a link
# there: refused (the run's files went where that user chose; a link
# anywhere as root); with a scratch /var/tmp in a mount namespace
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
	abs=$(cd "$(dirname "$W")" && pwd)/wbcache
	mkdir -p "$dir/vt/elsewhere"
	ln -s elsewhere "$dir/vt/wbcache"   # relative: /var/tmp is another there
	default_run() {
		env -u WBCACHE_DIR unshare -m --propagation private sh -c \
			'mount --bind "$1" /var/tmp && exec "$2" run --size 1M --mem 16M --quiet' \
			sh "$dir/vt" "$abs" 2>&1
	}
	out=$(default_run); rc=$?
	[ $rc = 2 ] && echo "$out" | grep -q "/var/tmp/wbcache: a symbolic link, not a directory of this user's" ||
		fail "a link as the default DIR: exit $rc: $out"
	[ -z "$(ls -A "$dir/vt/elsewhere")" ] || fail "the run wrote through the default DIR's link"
	rm "$dir/vt/wbcache"
	mkdir "$dir/vt/wbcache"
	chown nobody "$dir/vt/wbcache"
	out=$(default_run); rc=$?
	[ $rc = 2 ] && echo "$out" | grep -q "another user's" ||
		fail "another user's default DIR: exit $rc: $out"
	chown root "$dir/vt/wbcache"
	out=$(default_run) || fail "the default DIR, root's: $out"
	[ -e "$dir/vt/wbcache/run-trace.csv" ] || fail "the default DIR, root's: no trace"
fi
echo "cli: ok"
