#!/usr/bin/env bash
# wbcache run on a rados device (the Ceph test cluster, tests/ceph.h's:
# tests/run passes it in WBCACHE_CEPH_DIR, else one is started here): dd
# and randwrite with --fsync-every run and report the transport, and leave
# no object behind (fsmark's 40 with --keep); randwrite's writeback CPU
# counts the backend's completion thread and says librados' own threads
# are not included; bad specs exit 2 with a message.  wbcache
# rados-unlock breaks a lock another client holds on a file (taken here
# with `rados lock get`, as a cache that died would have left it), says
# whose, and says "not locked" after.
set -u
cd "$(dirname "$0")/.."
BUILD=${WBCACHE_BUILD:-build/release}
W=$BUILD/wbcache
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -n "${WBCACHE_CEPH_SKIP:-}" ] && { echo "$WBCACHE_CEPH_SKIP"; exit 77; }
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/tsan-ceph.supp"
dir=${WBCACHE_CEPH_DIR:-}
own=
if [ -z "$dir" ]; then
	own=$(mktemp -d /var/tmp/wbc-radosrun-XXXXXX)
	out=$(scripts/ceph-test-cluster start "$own/c" 2>&1)
	rc=$?
	[ $rc = 77 ] && { rmdir "$own" 2>/dev/null; echo "no Ceph test cluster: $(echo "$out" | tail -n1)"; exit 77; }
	[ $rc = 0 ] || fail "ceph-test-cluster: $out"
	dir=$own/c
	trap 'scripts/ceph-test-cluster stop "$dir"; rm -rf "$own"' EXIT
fi
conf=$dir/ceph.conf
spec="rados:wbc/run$$,conf=$conf"

out=$($W run dd --dev "$spec" --size 64M --quiet) || fail "dd: $out"
echo "$out" | grep -E "^dd:|transport"
echo "$out" | grep -q "device 0 transport.* now: window" || fail "dd: no transport line"
out=$($W run dd --dev "$spec,object_size=1M" --threads 2 --size 32M --quiet) || fail "dd, 2 threads: $out"
out=$($W run randwrite --dev "$spec" --file-size 16M --time 1 --fsync-every 256K --quiet) ||
	fail "randwrite: $out"
echo "$out" | grep -E "^randwrite:|fsyncs"
echo "$out" | grep -q "^fsyncs: " || fail "randwrite: no fsync line"
# writeback's CPU counts the backend's completion thread (issuing and
# completing a librados operation per page here costs well over 1 us of
# it; without it the figure read 0.00 to 0.03), and names librados' own threads
# as not included
line=$(echo "$out" | grep "^writeback CPU") || fail "randwrite: no writeback CPU line"
echo "$line"
echo "$line" | grep -q "; not included: librados' own threads, [0-9.]* s$" ||
	fail "randwrite: librados' threads not named"
us=$(echo "$line" | sed -n 's/.* s: \([0-9.]*\) us per page written back.*/\1/p')
awk -v u="$us" 'BEGIN { exit !(u >= 1) }' ||
	fail "randwrite: writeback CPU ${us:-?} us per page (the completion thread not counted?)"
# the runs' objects are gone (not --keep); --keep leaves them
# objs: the count of this script's objects, or a word of the failure (in
# a pipeline into grep -c, a failed listing counted 0: no object left)
objs() {
	local l
	l=$(timeout 120 rados -c "$conf" -p wbc ls) || { echo "(rados ls failed)"; return; }
	grep -c "^run$$/" <<<"$l"
}
[ "$(objs)" = 0 ] || fail "objects left by runs without --keep: $(objs)"
out=$($W run fsmark --dev "$spec" --files 20 --file-size 8K --threads 2 --quiet) || fail "fsmark: $out"
[ "$(objs)" = 0 ] || fail "objects left by fsmark: $(objs)"
out=$($W run fsmark --dev "$spec" --files 20 --file-size 8K --threads 2 --quiet --keep) ||
	fail "fsmark --keep: $out"
[ "$(objs)" = 40 ] || fail "fsmark --keep: $(objs) objects, expected 40"
rados -c "$conf" -p wbc ls | grep "^run$$/" | xargs -r -n 50 rados -c "$conf" -p wbc rm

expect_err() {   # expect_err WHAT ARGS... : exit 2 and a message on stderr
	local what=$1; shift
	msg=$($W "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	[ -n "$msg" ] || fail "$what: no message"
	echo "$what: $msg"
}
expect_err "bad rados option" run dd --dev "$spec,object_size=huge" --quiet
expect_err "no pool" run dd --dev "rados:nosuchpool,conf=$conf" --quiet
expect_err "rados-unlock usage" rados-unlock "$spec"

# a lock left by another client: broken by the command
obj="run$$/held.0000000000000000"
rados -c "$conf" -p wbc lock get "$obj" wbcache --lock-cookie deadcache --lock-type exclusive ||
	fail "rados lock get"
out=$($W rados-unlock "$spec" held) || fail "rados-unlock: $out"
echo "rados-unlock: $out"
echo "$out" | grep -q "fenced client.* and broke its lock (cookie deadcache)" || fail "rados-unlock said: $out"
out=$($W rados-unlock "$spec" held) || fail "rados-unlock again: $out"
echo "$out" | grep -q "not locked" || fail "rados-unlock again said: $out"
msg=$($W rados-unlock "$spec" nosuchfile 2>&1); rc=$?
[ $rc = 1 ] || fail "rados-unlock of a missing file: exit $rc"
echo "missing file: $msg"
echo "rados_run: ok"
