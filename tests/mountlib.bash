# Shared by the mount test scripts (sourced, not run): a scratch directory
# with BACKING_DIR ($bk) and MOUNTPOINT ($mt), and mounting the way users
# do: `wbcache mount` in its default (background) mode, which returns once
# the mount is up; `wbcache umount`, which returns once the daemon ended.
# Skips (77) where FUSE cannot be used here.
BUILD=${WBCACHE_BUILD:-build/release}
W=$(realpath "$BUILD/wbcache")
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skip: $*"; exit 77; }
[ -e /dev/fuse ] || { echo "skip: no /dev/fuse"; exit 77; }
command -v fusermount3 >/dev/null || { echo "skip: no fusermount3 (apt-get install fuse3)"; exit 77; }

top=$(mktemp -d /var/tmp/wbc-mount-XXXXXX)
chmod 755 "$top"
bk=$top/backing mt=$top/mnt
mkdir -p "$bk" "$mt"
pid=
# a sanitizer build's reports from the daemon (which has no terminal) and
# the commands land here; any makes the test fail
for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
	export "$v=${!v:+${!v}:}log_path=$top/sanitizer"
done
# mounted DIR: something is mounted on DIR (read from the mount table:
# `mountpoint -q` says no for a FUSE mount whose daemon is gone)
mounted() { awk -v d="$1" '$2 == d {f = 1} END {exit !f}' /proc/self/mounts; }
extra_cleanup() { :; }
cleanup() {
	local rc=$?
	extra_cleanup
	if mounted "$mt"; then
		fusermount3 -u "$mt" 2>/dev/null || fusermount3 -uz "$mt" 2>/dev/null
	fi
	[ -n "$pid" ] && wait_gone "$pid" 600
	if compgen -G "$top/sanitizer.*" >/dev/null; then
		echo "FAIL: sanitizer reports:" >&2
		head -n 60 "$top"/sanitizer.* >&2
		rc=1
	fi
	rm -rf "$top"
	exit $rc
}
trap cleanup EXIT

# alive PID: the process runs (a zombie has ended: the daemon is not our
# child, and the init of a container may not reap it)
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit $3 == "Z" ? 0 : 1}' "/proc/$1/stat" 2>/dev/null; }
# kill_wait WHAT PID...: SIGKILL them; each must be gone within 10 s
kill_wait() {
	local what=$1 d
	shift
	kill -9 "$@"
	for d in "$@"; do
		for _ in $(seq 100); do alive "$d" || break; sleep 0.1; done
		alive "$d" && fail "$what survived SIGKILL for 10 s (state $(awk '{print $3}' /proc/$d/stat))"
	done
	wait "$@" 2>/dev/null
}
# wait_gone PID [TENTHS]: wait until the process has ended
wait_gone() {
	local i
	for i in $(seq "${2:-600}"); do
		alive "$1" || return 0
		sleep 0.1
	done
	return 1
}

# term_during_inval OPTS WHAT: mount with OPTS over the store $bk; a direct
# write over the store, filled, pauses with a dirty mapped page in its
# range and a read-only open through the kernel's cache; SIGTERM, then the
# store freed: the daemon must end (the write's invalidation of the
# kernel's pages sends the mapped page's write-back, which nothing served
# any more: it waited for ever).  WHAT: said when it hangs.
term_during_inval() {
	local tp dev
	do_mount "$1"
	head -c 65536 /dev/zero >"$mt/inv"
	sync
	head -c $((16 << 20)) /dev/zero >"$bk/filler" 2>/dev/null
	python3 - "$mt/inv" "$pid" "$bk/filler" <<'PY' &
import mmap, os, sys, threading, time, signal
p, pid, filler = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = os.open(p, os.O_RDONLY)             # through the kernel's page cache
os.pread(r, 16, 0)
w = os.open(p, os.O_WRONLY)             # direct, invalidating r's pages
m = os.open(p, os.O_RDWR)
mm = mmap.mmap(m, 65536)
def wr():
    try:
        os.pwrite(w, b"D" * (4 << 20), 0)   # pauses on the full store
    except OSError:
        pass
threading.Thread(target=wr, daemon=True).start()
time.sleep(3)
mm[0:4096] = b"m" * 4096                 # a dirty mapped page in its range
os.kill(pid, signal.SIGTERM)
time.sleep(2)
os.unlink(filler)                        # the write goes on
time.sleep(60)
os._exit(0)
PY
	tp=$!
	if ! wait_gone "$pid" 900; then
		# a hung daemon: its connection aborted so that cleanup can end
		mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections
		dev=$(awk -v m="$mt" '$5 == m {print $3}' /proc/self/mountinfo)
		[ -n "$dev" ] && echo 1 >"/sys/fs/fuse/connections/${dev#*:}/abort"
		kill -9 $tp 2>/dev/null
		fail "the daemon still ran 90 s after SIGTERM ($2)"
	fi
	pid=
	kill -9 $tp 2>/dev/null
	wait $tp 2>/dev/null
	mounted "$mt" && fusermount3 -u "$mt"
	return 0
}

# daemon_pid: the pid of the daemon serving $mt
daemon_pid() { awk '/^DaemonPid:/ {print $2}' <("$W" stat "$mt"); }

# do_mount [OPTS]: mount in the default mode; returns when it is up.
# WBCACHE_TEST_MOUNT_OPTS: options added to every do_mount (uring=1 runs
# the mount tests over io_uring)
do_mount() {
	local o=${1:-}
	[ -n "${WBCACHE_TEST_MOUNT_OPTS:-}" ] && o=${o:+$o,}$WBCACHE_TEST_MOUNT_OPTS
	"$W" mount "$bk" "$mt" ${o:+-o "$o"} 2>"$top/mount.log"
	local rc=$?
	if [ $rc -ne 0 ]; then
		# FUSE itself refused (libfuse's and fusermount3's words), not
		# any EPERM: one of the daemon's own was skipped as "FUSE not
		# usable"
		grep -Eq "fuse:? device not found|failed to open /dev/fuse|(fuse|fusermount3?): mount failed: Operation not permitted" \
			"$top/mount.log" && skip "FUSE not usable: $(cat "$top/mount.log")"
		fail "mount exited $rc: $(cat "$top/mount.log")"
	fi
	mountpoint -q "$mt" || fail "wbcache mount returned before the mount was up"
	pid=$(daemon_pid)
	[ -n "$pid" ] || fail "no daemon pid in wbcache stat"
}

# fg_up PID LOG: a foreground daemon (PID, its stderr in LOG) started in
# the background is mounted within 60 s, or killed and the test fails
fg_up() {
	for _ in $(seq 600); do mountpoint -q "$mt" && return 0; sleep 0.1; done
	kill -9 "$1"
	fail "the foreground mount did not come up in 60 s: $(cat "$2")"
}

# do_umount [SIGNAL]: wbcache umount (or the signal to the daemon); returns
# its status once the daemon has ended
do_umount() {
	local rc=0
	if [ -n "${1:-}" ]; then
		kill -"$1" "$pid"
	else
		"$W" umount "$mt" 2>"$top/umount.log"; rc=$?
		[ $rc -eq 0 ] || return $rc
	fi
	wait_gone "$pid" 600 || fail "the daemon did not end"
	mounted "$mt" && fail "still mounted after the daemon ended"
	pid=
	return $rc
}
