#!/usr/bin/env bash
# wbcache run on an NBD export (nbdkit's memory plugin, started here): dd
# and randwrite run, one thread or several (each its region of the
# export), and the report shows the transport (window, in flight, RTT);
# regions beyond the export and fsmark (files on a device of one) are
# refused with a message.
set -u
BUILD=${WBCACHE_BUILD:-build/release}
W=$BUILD/wbcache
command -v nbdkit >/dev/null || { echo "nbdkit is not installed"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/wbc-nbdrun-XXXXXX)
nbdkit -f -U "$dir/s" -P "$dir/pid" memory 256M &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do [ -s "$dir/pid" ] && [ -S "$dir/s" ] && break; sleep 0.05; done
[ -S "$dir/s" ] || fail "nbdkit did not come up"
uri="nbd+unix:///?socket=$dir/s"

out=$($W run dd --dev "$uri" --size 64M --quiet) || fail "dd: $out"
echo "$out" | grep -E "^dd:|transport"
echo "$out" | grep -q "device 0 transport.* now: window" || fail "dd: no transport line"
echo "$out" | grep -q "connections 4/4" || fail "dd: not 4 connections"
out=$($W run dd --dev "$uri,window=fixed:8,conns=2" --threads 2 --size 64M --quiet) ||
	fail "dd, 2 threads: $out"
echo "$out" | grep -q "now: window 8.00 MiB.*connections 2/2" ||
	fail "fixed:8 (1 MiB I/Os) is not 8 MiB on 2 connections: $out"
out=$($W run randwrite --dev "$uri" --threads 2 --time 1 --file-size 32M --quiet) ||
	fail "randwrite: $out"
echo "$out" | grep -E "^randwrite:|transport"
echo "$out" | grep -q "transport" || fail "randwrite: no transport line"

expect_err() {   # expect_err WHAT ARGS... : exit 2 and a message on stderr
	local what=$1; shift
	msg=$($W "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	[ -n "$msg" ] || fail "$what: no message"
	echo "$what: $msg"
}
expect_err "beyond the export" run dd --dev "$uri" --size 512M --quiet
expect_err "randwrite beyond" run randwrite --dev "$uri" --threads 3 --file-size 100M --quiet
expect_err "fsmark" run fsmark --dev "$uri" --files 10 --quiet
expect_err "bad nbd option" run dd --dev "$uri,window=huge" --quiet
echo "nbd_run: ok"
