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

expect_err() {   # expect_err WHAT ARGS... : exit 2 and a message on stderr
	local what=$1; shift
	out=$($W "$@" 2>&1 >/dev/null); rc=$?
	[ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
	[ -n "$out" ] || fail "$what: no message"
}
expect_err "no command"
expect_err "unknown command" frobnicate
expect_err "unknown option" run --frob
expect_err "bad size" run --size 12Q --dir "$dir"
expect_err "bad page size" run --page-size 3000 --dir "$dir"
expect_err "bad ratio" run --dirty-ratio 150 --dir "$dir"
expect_err "bad spec" run --dev bogus:thing
expect_err "bad spec option" run --dev "dir:$dir,qd=0"
expect_err "stray argument" run extra

out=$($W run --size 16M --bs 64K --mem 4M --dir "$dir") || fail "run failed: $out"
echo "$out"
echo "$out" | grep -q "MB/s" || fail "run printed no throughput"
[ -z "$(ls -A "$dir")" ] || fail "run left files behind"
$W run --size 1M --dir "$dir" --keep >/dev/null || fail "run --keep"
[ "$(stat -c %s "$dir"/stream.*)" = 1048576 ] || fail "kept file has the wrong size"
echo "cli: ok"
