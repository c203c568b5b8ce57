#!/usr/bin/env bash
# wbcache lab --quick: every experiment runs both policies to the end and
# gives its table row, its chart and each run's figures and timeline; the
# runs differ in the switches the experiment names.  Whether an effect
# reproduced is timing (doc/lab.md, make bench), not asserted here; what
# a switch does that timing cannot blur is (chunk's seeks), and a run
# that hung until its --deadline fails its experiment.
# Bad input gets a clear error and exit 2.
set -u
BUILD=${WBCACHE_BUILD:-build/release}
W=$BUILD/wbcache
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/wbc-lab-XXXXXX)
trap 'rm -rf "$dir"' EXIT
names="dirty-list remote stacked jbod chunk"

expect_err() {   # expect_err WHAT ARGS... : exit 2 and a message on stderr
	local what=$1; shift
	out=$($W lab "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	[ -n "$out" ] || fail "$what: no message"
}
expect_err "unknown experiment" nosuch
expect_err "experiment 0" 0
expect_err "unknown option" --frob
expect_err "--out without a directory" --out
expect_err "--out that cannot be made" --out /proc/wbc-lab/x stacked
out=$($W lab --quick --out /proc stacked 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "--out a directory it cannot write into: exit $rc, expected 2"
echo "$out" | grep -q "^wbcache lab: --out /proc: cannot write there: " ||
	fail "--out /proc: '$out'"
# directories it made for an --out it cannot use are removed again (they
# stayed): a file system out of inodes, of 3 (a/ and a/b made, the probe
# write fails) and of 2 (a/ made, a/b cannot be); root only (the tmpfs)
# tiny_out INODES WHAT MESSAGE
tiny_out() {
	mount -t tmpfs -o size=1M,nr_inodes=$1 tmpfs "$dir/tiny" || fail "tmpfs"
	out=$($W lab --quick --out "$dir/tiny/a/b" stacked 2>&1 >/dev/null); rc=$?
	left=$(ls -A "$dir/tiny")
	umount "$dir/tiny"
	[ $rc -eq 2 ] || fail "$2: exit $rc, expected 2 ($out)"
	echo "$out" | grep -q "$3" || fail "$2: '$out'"
	[ -z "$left" ] || fail "$2 left: $left"
}
if [ "$(id -u)" = 0 ] && mkdir "$dir/tiny" && mount -t tmpfs tmpfs "$dir/tiny" 2>/dev/null; then
	umount "$dir/tiny"
	tiny_out 3 "--out where no file can be made" "cannot write there: No space left on device"
	tiny_out 2 "--out whose mkdir fails" "cannot create .*: No space left on device"
fi
touch "$dir/plain"
out=$($W lab --quick --out "$dir/plain" stacked 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "--out a file: exit $rc, expected 2"
[ "$out" = "wbcache lab: --out $dir/plain: not a directory" ] || fail "--out a file: '$out'"

# a run that cannot start (its report's file a directory) says which
# file (it said "chunk run 1 failed (Is a directory): ")
mkdir -p "$dir/nolog/chunk-1.log"
out=$($W lab --quick --out "$dir/nolog" chunk 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "a run that cannot start: exit $rc, expected 1"
echo "$out" | grep -q "^wbcache lab: chunk run 1 failed (cannot start it, its report to $dir/nolog/chunk-1.log: Is a directory)" ||
	fail "a run that cannot start: '$out'"

$W lab --help | grep -q -- "--quick" || fail "lab --help"
list=$($W lab --list) || fail "lab --list failed"
for n in $names; do
	echo "$list" | grep -q "^$n: " || fail "--list lacks $n"
done
# each experiment's runs differ in their switches and only there: run A
# with the old switch replaced by the new one is run B's command (the
# whole --list held "throttle=2011" from stacked's runs, so jbod's runs
# could have lost their switch unseen)
cmd() {   # cmd NAME K: the K-th run's command of experiment NAME
	$W lab --list "$1" | grep ' wbcache run ' | sed -n "$2p" | sed 's/.*\(wbcache run \)/\1/'
}
same_but() {   # same_but NAME A B OLD NEW
	local a b
	a=$(cmd "$1" "$2"); b=$(cmd "$1" "$3")
	[ -n "$a" ] && [ -n "$b" ] || fail "$1: no runs $2 and $3 in --list"
	echo "$a" | grep -q -- "$4" || fail "$1 run $2 lacks $4: $a"
	[ "${a//$4/$5}" = "$b" ] || fail "$1: runs $2 and $3 differ in more than $4 -> $5: '$a' vs '$b'"
}
same_but dirty-list 1 3 dirty_list=list dirty_list=buckets   # writeback off
same_but dirty-list 2 4 dirty_list=list dirty_list=buckets   # writeback running
same_but remote 1 2 file_lock=file,max_inflight=16 file_lock=page
same_but jbod 1 2 throttle=2011 throttle=current
same_but chunk 1 2 chunk=4M chunk=bw
# stacked: run 2 is run 3 with stack_throttle=global; the verdict is run
# 1 (global, 2011 line) against run 3 (local, today's line): two switches
same_but stacked 2 3 stack_throttle=global stack_throttle=local
same_but stacked 1 2 throttle=2011 throttle=current

# a lab stopped by a signal stops its run too (a kill of the lab alone
# left it running up to its --deadline): the run gets SIGTERM and is
# waited for, the table says "interrupted", the exit is 128 + the signal
$W lab --quick --out "$dir/sig" jbod >"$dir/sig.out" 2>&1 &
lpid=$!
# the run under way: its first line logged, then its writers going (a
# run killed in its first milliseconds, before its handler, has no files)
for _ in $(seq 200); do
	cpid=$(pgrep -P $lpid) && [ -s "$dir/sig/jbod-1.log" ] && break
	sleep 0.1
done
[ -n "$cpid" ] && [ -s "$dir/sig/jbod-1.log" ] || fail "SIGTERM: the lab started no run in 20 s"
sleep 0.5
kill -TERM $lpid
wait $lpid; rc=$?
[ $rc -eq 143 ] || fail "lab SIGTERM: exit $rc, expected 143: $(cat "$dir/sig.out")"
if kill -0 $cpid 2>/dev/null; then
	kill -TERM $cpid
	fail "lab SIGTERM: its run $cpid is still running"
fi
grep -Eq "^jbod .* interrupted$" "$dir/sig.out" || fail "lab SIGTERM: no table: $(cat "$dir/sig.out")"
# its standard output closed (a pipe whose reader has gone): no SIGPIPE
# death, no run started into it; exit 1 with the reason
out=$(python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w)
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)' \
	$W lab --quick --out "$dir/pipe" jbod 2>&1); rc=$?
[ $rc -eq 1 ] || fail "lab into a closed pipe: exit $rc, expected 1: $out"
echo "$out" | grep -q "writing the report: Broken pipe" || fail "lab into a closed pipe: '$out'"
[ -z "$(ls "$dir/pipe")" ] || fail "lab into a closed pipe ran: $(ls "$dir/pipe")"

# a run that made no progress until its --deadline (here: stopped for
# it) is not judged as a finished run: the experiment's run failed, exit
# 1 (its figures were judged: chunk's old run "4.96 MB/s", "reproduced",
# exit 0).  The lab's deadline is 60 s with --quick, 3 s here.
WBCACHE_LAB_DEADLINE=3 $W lab --quick --out "$dir/hang" chunk >"$dir/hang.out" 2>&1 &
lpid=$!
cpid=
for _ in $(seq 300); do
	cpid=$(pgrep -P $lpid) && [ -s "$dir/hang/chunk-1.log" ] && break
	sleep 0.1
done
[ -n "$cpid" ] && [ -s "$dir/hang/chunk-1.log" ] || fail "hang: the lab started no run in 30 s"
kill -STOP $cpid
sleep 4   # past the run's --deadline (WBCACHE_LAB_DEADLINE)
kill -CONT $cpid
wait $lpid; rc=$?
[ $rc -eq 1 ] || fail "a run that passed its --deadline: lab exit $rc, expected 1: $(cat "$dir/hang.out")"
grep -Eq "^chunk .* run failed$" "$dir/hang.out" || fail "hang: no 'run failed' row: $(cat "$dir/hang.out")"
grep -q "chunk run 1 failed (did not finish in its --deadline, 3 s)" "$dir/hang.out" ||
	fail "hang: no reason: $(cat "$dir/hang.out")"
[ ! -e "$dir/hang/chunk-2.log" ] || fail "hang: the lab went on to run 2"

# a chart that cannot be written fails the lab (it said "cannot write",
# then "chart: PATH" as if written, and exited 0)
if [ "$BUILD" = build/release ]; then
	mkdir -p "$dir/nochart/chunk.svg"
	$W lab --quick --out "$dir/nochart" chunk >"$dir/nochart.out" 2>&1; rc=$?
	[ $rc -eq 1 ] || fail "a chart that cannot be written: exit $rc, expected 1"
	grep -q "cannot write $dir/nochart/chunk.svg" "$dir/nochart.out" &&
		! grep -q "chart: $dir/nochart/chunk.svg" "$dir/nochart.out" ||
		fail "a chart that cannot be written: $(cat "$dir/nochart.out")"
fi
# every experiment in the plain build; under a sanitizer the three whose
# runs use the most threads (the others' switches, the 2011 throttle and
# the chunk size, have tests of their own there)
run=all
[ "$BUILD" = build/release ] || { names="dirty-list remote stacked"; run=$names; }
out=$($W lab --quick --out "$dir/out" $run 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "lab --quick $run: exit $rc"
for n in $names; do
	echo "$out" | grep -Eq "^$n +.*(reproduced|NOT reproduced)" || fail "no table row for $n"
	echo "$out" | sed -n "/^== $n: /,/^   chart: /p" >"$dir/$n.runs"
	python3 - "$dir/out/$n.svg" "$dir/$n.runs" <<'P' || fail "$n.svg is not a chart of the runs"
import re, sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
lines = d.getElementsByTagName("polyline")
# three panels (throughput, dirty, lock holds) for each run drawn
assert len(lines) >= 6 and len(lines) % 3 == 0, len(lines)
assert all(len(l.getAttribute("points").split()) >= 2 for l in lines)
# each run's label whole in the legend (remote's old run was cut to
# "old: per-file lock, fixed in-flight limi")
texts = {t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild}
labels = re.findall(r"^   (\S.*?) +wbcache run ", open(sys.argv[2]).read(), re.M)
assert len(labels) * 3 == len(lines), (labels, len(lines))
assert all(l in texts for l in labels), [l for l in labels if l not in texts]
# axis ticks in figures and units (remote's IOPS axis read "1e+06")
ticks = [t.firstChild.data for t in d.getElementsByTagName("text")
         if t.firstChild and t.getAttribute("font-size") == "11" and t.getAttribute("text-anchor")]
assert ticks and all(re.fullmatch(r"[0-9.]+[kMGT]?", t) for t in ticks), ticks
# the origin reads 0 (it read "0k" on a k axis, "0M" on an M one)
assert not [t for t in ticks if re.fullmatch(r"0[kMGT]", t)], ticks
P
	for j in "$dir/out/$n"-*.json; do
		python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["secs"] > 0 and d["bytes"] > 0' "$j" ||
			fail "$j: no figures"
	done
	ls "$dir/out/$n"-*.csv >/dev/null 2>&1 || fail "$n: no timelines"
done
# what the chunk switch does, whatever the machine's speed: the model
# disk counts the I/Os that do not continue the one before (seeks); the
# old rule moves to the next file every 4 MiB (1 GiB: about 256 seeks),
# the new one writes a bandwidth's chunk (50 to 119 seen: the estimate
# starts low and a loaded machine slows its rise, so 1.5x is the bound;
# a chunk= that does nothing gives about the same count both ways)
if [ "$BUILD" = build/release ]; then
	s1=$(sed -n 's/^device 0 seeks: \([0-9]*\),.*/\1/p' "$dir/out/chunk-1.log")
	s2=$(sed -n 's/^device 0 seeks: \([0-9]*\),.*/\1/p' "$dir/out/chunk-2.log")
	[ -n "$s1" ] && [ -n "$s2" ] || fail "chunk: no seek counts in its runs' reports"
	[ "$s1" -ge 200 ] || fail "chunk=4M: $s1 seeks for 1 GiB, expected one per 4 MiB (>= 200)"
	[ $((s2 * 3)) -le $((s1 * 2)) ] || fail "chunk=bw: $s2 seeks, chunk=4M $s1: expected 1.5x fewer"
fi
# the table is the runs' measurements: each row's old, new, old/new and
# verdict recomputed from the runs' --json figures with the criterion
# doc/lab.md gives (no figure or verdict of the table comes from
# anywhere else)
echo "$out" >"$dir/table.out"
python3 - "$dir/out" "$dir/table.out" $names <<'P' || fail "the table does not follow from the runs' figures"
import json, re, sys
d, out, names = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3:]
def j(n, k): return json.load(open(f"{d}/{n}-{k}.json"))
def fmt(v, unit, more):
    g = ">" if more else ""
    return (f"{g}{v / 1000:.0f}k {unit}" if v >= 10000 else f"{g}{v:.0f} {unit}" if v >= 100
            else f"{g}{v:.2f} {unit}")
def row(name):
    if name == "dirty-list":   # runs: old off, old on, new off, new on
        r = [j(name, k) for k in (1, 2, 3, 4)]
        ol = 1 - r[1]["ops_per_s"] / max(r[0]["ops_per_s"], 1)
        nl = 1 - r[3]["ops_per_s"] / max(r[2]["ops_per_s"], 1)
        return r[1]["ops_per_s"], r[3]["ops_per_s"], "files/s", False, False, ol >= 0.2 and nl <= 0.1
    if name == "remote":
        o, n = (x["ops_per_s"] + x["reads_per_s"] for x in (j(name, 1), j(name, 2)))
        return o, n, "IOPS", False, False, n > 0 and o <= 0.8 * n
    if name == "stacked":      # run 1 against run 3, times (lower bounds if unfinished)
        a, b = j(name, 1), j(name, 3)
        om, nm = not a["finished"], not b["finished"]
        return a["secs"], b["secs"], "s", om, nm, b["secs"] > 0 and a["secs"] >= 5 * b["secs"] and not nm
    goal = {"jbod": 1.25, "chunk": 1.5}[name]
    o, n = j(name, 1)["mb_per_s"], j(name, 2)["mb_per_s"]
    return o, n, "MB/s", False, False, n > 0 and o * goal <= n
for name in names:
    o, n, unit, om, nm, rep = row(name)
    m = re.search(rf"^{re.escape(name)} .*$", out, re.M)
    assert m, f"no row for {name}"
    line = m.group(0)
    ratio = (">" if om and not nm else "<" if nm and not om else "") + f"{o / n:.2f}"
    for want in (fmt(o, unit, om), fmt(n, unit, nm)):
        assert want in line, (name, want, line)
    # old/new, then the thread's ratio, then the verdict
    thread = {"dirty-list": 0.70, "remote": 0.72, "stacked": 100, "jbod": 0.70, "chunk": 0.47}[name]
    verdict = "reproduced" if rep else "NOT reproduced"
    assert re.search(rf" {re.escape(ratio)} +{thread:.2f}  {verdict} \(", line), \
        (name, ratio, verdict, line)
P
# what the switches do, in counts rather than timing: dirty_list=list's
# writers file each new file under the list lock (a take a file at
# least), dirty_list=buckets' writers never take it (their inboxes); the
# 2011 throttle's pauses are whole jiffies (1 ms), as its rule says (a
# pause of today's line is any number of nanoseconds)
python3 - "$dir/out" $names <<'P' || fail "a switch did not take its code path"
import json, sys
d, names = sys.argv[1], sys.argv[2:]
def j(n, k): return json.load(open(f"{d}/{n}-{k}.json"))
if "dirty-list" in names:
    for k in (1, 2):
        r = j("dirty-list", k)
        assert r["list_lock_holds"] >= r["ops"], ("list", k, r["list_lock_holds"], r["ops"])
    for k in (3, 4):
        r = j("dirty-list", k)
        # the flusher's takes alone: a few a pass, far fewer than files
        # (under 0.2% of them in the plain build, so half is a safe bound
        # under a sanitizer too)
        assert r["list_lock_holds"] * 2 < r["ops"], ("buckets", k, r["list_lock_holds"], r["ops"])
if "jbod" in names:
    r = j("jbod", 1)
    assert r["pauses"] > 0, r["pauses"]
    # the longest: a pause as the rule chose it (run's percentiles give a
    # call's several pauses their mean; its maximum is always one pause)
    assert r["pause_max_ms"] == round(r["pause_max_ms"]), r["pause_max_ms"]
P
# the chart's longest list-lock hold in an interval is never longer than
# the run's longest (the timeline had the histogram entry's upper bound:
# a 145 ms hold drawn as 268 ms, 171.7 us as 262.14)
for k in 1 2 3 4; do
	python3 - "$dir/out/dirty-list-$k.csv" "$dir/out/dirty-list-$k.json" <<'P' ||
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
mx = json.load(open(sys.argv[2]))["list_lock_max_us"]
top = max(float(r["lock_max_us"]) for r in rows)
assert rows and top <= mx + 0.06, (top, mx)
P
		fail "dirty-list run $k: the timeline's lock hold exceeds the run's longest"
done
# remote's reads find the files in the cache, as doc/lab.md says (the
# layout's last close dropped their pages: the quick runs read nearly all
# of it from the 1 ms model, 10k IOPS where the cached runs do 1M)
for j in "$dir/out/remote-1.json" "$dir/out/remote-2.json"; do
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert d["reads"] > 0 and d["read_in_bytes"] * 100 < d["reads"] * 8192, (d["reads"], d["read_in_bytes"])' "$j" ||
		fail "$j: remote's reads went to the device"
done
# one experiment by number runs that one alone (the plain build only:
# the same runs as above, under a sanitizer they only add time)
if [ "$BUILD" = build/release ]; then
	out=$($W lab --quick --out "$dir/one" 3) || fail "lab 3 failed"
	[ -e "$dir/one/stacked.svg" ] && [ ! -e "$dir/one/jbod.svg" ] || fail "lab 3 ran other experiments"
fi
echo "lab: ok"
