#!/usr/bin/env bash
# The mount against the FUSE file systems a user would pick instead and the
# kernel, on one backing directory, rounds interleaved (ROUNDS, default 2;
# medians): libfuse 3.14's passthrough_hp (multi-threaded, splice, the
# kernel's FUSE writeback cache) and passthrough_ll -o writeback, built
# from ../shared/peers/libfuse-3.14 into the build folder.
#   dd       dd bs=1M count=SIZE_MB conv=fsync, MB/s
#   fsmark   fs_mark 2 threads x FILES files of 4 KiB, -S 0, files/s
#   randw    fio 4 KiB random writes, psync, RAND_MB file, end_fsync=1, IOPS
#   tar      tar -x of /usr/include (tarred once), entries/s
#   list     ls -lR of /usr/include, extracted once into the backing
#            directory beforehand (caches dropped: every entry looked up),
#            entries/s
#   du       du -s of the same tree (caches dropped), entries/s
# Environment: WBCACHE_BENCH_DIR (/var/tmp/wbp), SIZE_MB (2048), FILES
# (5000), RAND_MB (256), ROUNDS (2; the systems' order reverses every
# other round), MEM (1G: the mount's cache), SYSTEMS
# ("kernel wbcache hp ll"), TESTS ("dd fsmark randw tar list du"), WB_OPTS (more -o
# options for wbcache; WB2_OPTS, when set, adds a second wbcache system
# "wb2" with those options instead, to compare a lever in the same run;
# WB2_BIN runs wb2 with another build's wbcache, e.g. an older commit's).
# For wbcache and wb2 each round also prints the daemon's CPU time (user +
# system, seconds, up to before the unmount's writeback), and the summary
# its medians.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
W=$(realpath "$BUILD/wbcache")
PEERS=../shared/peers/libfuse-3.14
DIR=${WBCACHE_BENCH_DIR:-/var/tmp/wbp}
SIZE_MB=${SIZE_MB:-2048} FILES=${FILES:-5000} RAND_MB=${RAND_MB:-256}
ROUNDS=${ROUNDS:-2} MEM=${MEM:-1G}
for t in fio fs_mark fusermount3 g++ tar; do
	command -v $t >/dev/null || { echo "$t is missing: scripts/install-deps" >&2; exit 1; }
done
[ -d "$PEERS" ] || { echo "no peers at $PEERS" >&2; exit 1; }
mkdir -p "$BUILD/peers"
[ -x "$BUILD/peers/passthrough_hp" ] ||
	g++ -O2 -std=c++17 "$PEERS/passthrough_hp.cc" $(pkg-config --cflags --libs fuse3) -o "$BUILD/peers/passthrough_hp"
[ -x "$BUILD/peers/passthrough_ll" ] ||
	gcc -O2 "$PEERS/passthrough_ll.c" $(pkg-config --cflags --libs fuse3) -o "$BUILD/peers/passthrough_ll"
HP=$(realpath "$BUILD/peers/passthrough_hp") LL=$(realpath "$BUILD/peers/passthrough_ll")

bk=$DIR/b mt=$DIR/m
mkdir -p "$bk" "$mt"
tar cf "$DIR/include.tar" -C /usr include 2>/dev/null
NTAR=$(tar tf "$DIR/include.tar" | wc -l)
mkdir -p "$bk/list" && tar xf "$DIR/include.tar" -C "$bk/list"
peer_pid=
cleanup() {
	mountpoint -q "$mt" && { fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt"; }
	[ -n "$peer_pid" ] && wait "$peer_pid" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
drop_caches() { sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 > /proc/sys/vm/drop_caches || true; }
wait_mounted() { for _ in $(seq 100); do mountpoint -q "$mt" && return 0; sleep 0.1; done; echo "mount failed" >&2; exit 1; }

up() {   # up SYSTEM -> the directory to run in
	case $1 in
	kernel) ;;
	wbcache) "$W" mount "$bk" "$mt" -o "mem=$MEM${WB_OPTS:+,$WB_OPTS}" ;;
	wb2) "${WB2_BIN:-$W}" mount "$bk" "$mt" -o "mem=$MEM${WB2_OPTS:+,$WB2_OPTS}" ;;
	hp) "$HP" "$bk" "$mt" >/dev/null 2>&1 & peer_pid=$!; wait_mounted ;;
	ll) "$LL" -f -o writeback -o source="$bk" "$mt" >/dev/null 2>&1 & peer_pid=$!; wait_mounted ;;
	esac
}
# the CPU seconds the daemon serving $mt has used
daemon_cpu() {
	local pid
	pid=$("$W" stat "$mt" | awk '/^DaemonPid:/ { print $2 }')
	awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / hz }' "/proc/$pid/stat"
}
down() {
	case $1 in
	kernel) sync ;;
	wbcache|wb2) cpu=$(daemon_cpu); "$W" umount "$mt" ;;
	*) fusermount3 -u "$mt"; wait "$peer_pid" 2>/dev/null || true; peer_pid= ;;
	esac
}
dir_of() { [ "$1" = kernel ] && echo "$bk" || echo "$mt"; }

t_dd() {
	dd if=/dev/zero of="$1/dd.out" bs=1M count="$SIZE_MB" conv=fsync 2>&1 |
		awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") t = $(i-1); printf "%d\n", $1 / t / 1e6 }'
	rm -f "$1/dd.out"
}
# The trees fs_mark and tar make stay until the end: on an ext4 without a
# journal, inodes freed in the last 30 s (dirty_expire) are skipped, one
# inode-table look-up each, by every inode allocation of the group, so a
# run after another's rm -rf would pay for it (up to 2x, whoever runs).
t_fsmark() {
	local d=$1/fsm.$r.$sys
	mkdir -p "$d"
	(cd "$DIR" && fs_mark -d "$d" -n "$FILES" -s 4096 -t 2 -S 0 -k -L 1) >"$DIR/fsmark.log" 2>&1 || true
	awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 } END { printf "%d\n", v }' "$DIR/fsmark.log"
}
t_randw() {
	fio --name=rw --directory="$1" --rw=randwrite --bs=4k --size="${RAND_MB}M" --ioengine=psync \
	    --end_fsync=1 --output-format=terse --terse-version=3 2>/dev/null |
		awk -F';' '{ printf "%d\n", $49 }'
	rm -f "$1"/rw.*
}
t_tar() {
	local d=$1/x.$r.$sys s e
	mkdir -p "$d"
	s=$(date +%s.%N); tar xf "$DIR/include.tar" -C "$d"; e=$(date +%s.%N)
	awk -v n="$NTAR" -v s="$s" -v e="$e" 'BEGIN { printf "%d\n", n / (e - s) }'
}

t_list() {
	local s e
	s=$(date +%s.%N); ls -lR "$1/list" >/dev/null; e=$(date +%s.%N)
	awk -v n="$NTAR" -v s="$s" -v e="$e" 'BEGIN { printf "%d\n", n / (e - s) }'
}

t_du() {
	local s e
	s=$(date +%s.%N); du -s "$1/list" >/dev/null; e=$(date +%s.%N)
	awk -v n="$NTAR" -v s="$s" -v e="$e" 'BEGIN { printf "%d\n", n / (e - s) }'
}

declare -A R
SYSTEMS=${SYSTEMS:-kernel wbcache hp ll}
[ -n "${WB2_OPTS:-}${WB2_BIN:-}" ] && WB2_OPTS=${WB2_OPTS:-mem=$MEM} && case " $SYSTEMS " in *" wb2 "*) ;; *) SYSTEMS="$SYSTEMS wb2" ;; esac
TESTS=${TESTS:-dd fsmark randw tar list du}
# the systems' order reverses every other round: a run right after
# another's can be faster or slower for it (the backing file system's
# state), which an even number of rounds then cancels in the medians
REVERSED=$(echo $SYSTEMS | tr ' ' '\n' | tac | tr '\n' ' ')
for r in $(seq "$ROUNDS"); do
	order=$SYSTEMS
	[ $((r % 2)) = 0 ] && order=$REVERSED
	for test in $TESTS; do
		for sys in $order; do
			drop_caches; up $sys
			v=$(t_$test "$(dir_of $sys)")
			cpu=
			down $sys
			R[$test.$sys]+="$v "
			[ -n "$cpu" ] && R[$test.$sys.cpu]+="$cpu "
			echo "round $r $test $sys: $v${cpu:+ (daemon CPU ${cpu}s)}"
		done
	done
done
echo
echo "wbcache mount, FUSE peers and the kernel on $bk, median of $ROUNDS interleaved rounds"
med() { echo ${R[$1]:-} | tr ' ' '\n' | median; }
hdr=$(printf '%-44s %9s %9s %9s %9s' "workload" kernel wbcache hp "ll -o wb")
[ -n "${WB2_OPTS:-}" ] && hdr+=$(printf ' %9s %8s' wb2 "wb2/hp")
printf '%s %8s %8s\n' "$hdr" "wb/hp" "wb/kern"
row() {
	case " $TESTS " in *" $1 "*) ;; *) return ;; esac
	local k w h l line
	k=$(med $1.kernel); w=$(med $1.wbcache); h=$(med $1.hp); l=$(med $1.ll)
	line=$(printf '%-44s %9s %9s %9s %9s' "$2" "$k" "$w" "$h" "$l")
	[ -n "${WB2_OPTS:-}" ] && line+=$(printf ' %9s %7.2fx' "$(med $1.wb2)" "$(ratio "$(med $1.wb2)" "$h")")
	printf '%s %7.2fx %7.2fx\n' "$line" "$(ratio "$w" "$h")" "$(ratio "$w" "$k")"
}
row dd "dd ${SIZE_MB} MiB conv=fsync, MB/s"
row fsmark "fs_mark 2 x $FILES x 4 KiB, -S 0, files/s"
row randw "fio 4 KiB randwrite psync ${RAND_MB}M, IOPS"
row tar "tar -x /usr/include ($NTAR entries), entries/s"
row list "ls -lR /usr/include ($NTAR entries), entries/s"
row du "du -s /usr/include ($NTAR entries), entries/s"
echo
echo "the daemon's CPU seconds per run, medians"
for test in $TESTS; do
	line=$(printf '%-10s' "$test")
	for sys in wbcache wb2; do
		case " $SYSTEMS " in *" $sys "*) line+=$(printf ' %s %6s' "$sys" "$(med $test.$sys.cpu)") ;; esac
	done
	echo "$line"
done
