#!/usr/bin/env bash
# `wbcache mount` with the tools people use: shell tools, dd, fio
# --verify=crc32c, fs_mark.  Checks data read back through the mount and in
# BACKING_DIR (after fsync, after unmount by fusermount3 and by SIGTERM);
# rename, unlink and truncate of files with dirty data; bad options; errnos
# of the backing file system; no escape out of BACKING_DIR through symlinks;
# permissions; a write error at unmount gives exit status 1, also one in
# the daemon's last writeback (a write after umount's sync).
# Skips (77) where FUSE cannot be used here.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
out=$top/outside
mkdir -p "$out"
extra_cleanup() {
	mountpoint -q "$top/tiny" 2>/dev/null && umount -l "$top/tiny"
	mountpoint -q "$top/backing/bound" 2>/dev/null && umount -l "$top/backing/bound"
	mountpoint -q "$top/backing/sub" 2>/dev/null && umount -l "$top/backing/sub"
	mountpoint -q "$bk" 2>/dev/null && umount -l "$bk"   # the read-only bind
	return 0
}

# ---- bad options: clear message, non-zero exit, nothing mounted
for bad in "bogus=1" "dirty_ratio=150" "mem=12Q" "qd=0" "on_error=maybe" "dirty_bytes" "mem=1T" \
	   "noflush=2" "entry_timeout=-1" "attr_timeout=x" "threads=0" "clone_fd=yes" "direct_io=maybe" \
	   "writeback_cache=1" "allow_root,allow_other" "allow_other,allow_root"; do
	msg=$("$W" mount "$bk" "$mt" -o "$bad" 2>&1); rc=$?
	[ $rc -eq 2 ] || fail "-o $bad: exit $rc, not 2"
	[ -n "$msg" ] || fail "-o $bad: no message"
	mounted "$mt" && fail "-o $bad mounted anyway"
done
# each names what is wrong (the range, the missing value; qd's listed the
# device's uring=, which -o uring= is not)
# (a tunable's listed the experiments' switches, which -o does not take)
# (a rados option by its -o name, with what -o takes: it was the backend's
# own, "timeout=", with options -o does not pass; a flag given a value:
# "unknown option"; a number with a sign: taken)
for c in "dirty_ratio=150|(0..100)" "threads=0|(1..1024)" "mem=|'mem' has no value" "qd=0|(qd=1..4096)" "bogus|unknown option 'bogus'" "on_error=x|on_error=retry|drop" \
	 "backend=rados:p,rados_timeout=1000000|bad option 'rados_timeout=1000000' with backend=rados (rados_conf=PATH" \
	 "allow_other=1|option 'allow_other' takes no value" "dirty_ratio=+5|bad value for dirty_ratio: '+5'"; do
	msg=$("$W" mount "$bk" "$mt" -o "${c%%|*}" 2>&1)
	case $msg in *"${c#*|}"*) ;; *) fail "-o ${c%%|*}: '$msg' does not say '${c#*|}'" ;; esac
	case $msg in *uring*|*chunk=*) fail "-o ${c%%|*}: '$msg' names uring= or chunk=" ;; esac
done
# a device option given again: the later one wins, as in mount(8) (the
# device refuses a key given twice: such a mount failed)
"$W" mount "$bk" "$mt" -o qd=4 -o qd=8,min_ratio=5 -o min_ratio=7 2>"$top/rep.log" ||
	fail "-o qd twice: $(cat "$top/rep.log")"
"$W" umount "$mt" || fail "umount after -o qd twice"
# default_permissions, common in fstab lines of FUSE file systems: always
# on here, accepted (it was refused as an unknown option)
"$W" mount "$bk" "$mt" -o default_permissions 2>"$top/rep.log" ||
	fail "-o default_permissions: $(cat "$top/rep.log")"
"$W" umount "$mt" || fail "umount after -o default_permissions"
# a bad option with a mount mount.fuse3 made (-o drop_privileges: the
# mount point is /dev/fd/N): the way to clear that mount is said (it was
# for every other error but not for a bad option)
msg=$("$W" mount "$bk" /dev/fd/9 -o bogus=1 2>&1 9</dev/null); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "mount.fuse3 made for /dev/fd/9 is not served" ||
	fail "a bad option with /dev/fd/9: exit $rc: $msg"
# a refused cache configuration says which value is at fault
msg=$("$W" mount "$bk" "$mt" -o dirty_ratio=0 2>&1)
echo "$msg" | grep -q "dirty_ratio 0 needs dirty_bytes" || fail "-o dirty_ratio=0: '$msg'"
msg=$("$W" mount "$bk" "$mt" -o mem=32K 2>&1)
echo "$msg" | grep -q "at least 16 pages" || fail "-o mem=32K: '$msg'"
"$W" mount "$top/nonexistent" "$mt" 2>/dev/null && fail "missing backing dir accepted"
# a command line that is not whole: one line that says what is missing
for args in "$bk" "$bk $mt -o"; do
	msg=$("$W" mount $args 2>&1); rc=$?
	[ $rc -eq 2 ] && [ "$(echo "$msg" | wc -l)" = 1 ] || fail "mount $args: exit $rc: $msg"
done
: >"$top/plain"
msg=$("$W" mount "$top/plain" "$mt" 2>&1)
[ "$msg" = "wbcache mount: $top/plain: not a directory" ] || fail "a file as BACKING_DIR: $msg"
"$W" mount "$bk" "$top/nonexistent" 2>/dev/null && fail "missing mount point accepted"

# ---- write, read back, verify; data in BACKING_DIR after fsync
do_mount "mem=64M,dirty_writeback_centisecs=0,dirty_expire_centisecs=360000,dirty_background_bytes=48M,dirty_bytes=56M"
head -c 3000000 /dev/urandom >"$top/model"
cp "$top/model" "$mt/a" || fail "cp into the mount"
cmp "$top/model" "$mt/a" || fail "read back differs"
[ "$(stat -c %s "$mt/a")" = 3000000 ] || fail "size through the mount: $(stat -c %s "$mt/a")"
echo hello >"$mt/small"; [ "$(cat "$mt/small")" = hello ] || fail "small file"
dd if="$top/model" of="$mt/synced" bs=64k conv=fsync status=none || fail "dd conv=fsync"
cmp "$top/model" "$bk/synced" || fail "backing file differs after fsync"
# stats show the dirty data and list counts
"$W" stat "$mt" >"$top/stat" || fail "wbcache stat"
grep -q '^BdiReclaimable: *[1-9]' "$top/stat" || fail "stat shows no dirty data: $(cat "$top/stat")"
grep -q '^b_dirty: *[1-9]' "$top/stat" || fail "stat shows no dirty files"
"$W" stat "$top" 2>/dev/null && fail "stat of a non-mount succeeded"
"$W" stat "$mt" --json | python3 -c 'import json, sys; json.load(sys.stdin)' ||
	fail "wbcache stat MOUNTPOINT --json (options after the mount point)"
"$W" stat --json "$mt" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["BdiReclaimable_kB"] > 0 and d["DaemonPid"] > 0 and d["b_dirty"] > 0, d
' || fail "wbcache stat --json"

# ---- truncate with dirty data
head -c 100000 /dev/urandom >"$top/t"; cp "$top/t" "$mt/t"
truncate -s 1000 "$mt/t"; truncate -s 1000 "$top/t"
truncate -s 70000 "$mt/t"; truncate -s 70000 "$top/t"
cmp "$top/t" "$mt/t" || fail "truncate down and up"
[ "$(stat -c %s "$mt/t")" = 70000 ] || fail "size after truncate"

# ---- rename with dirty data: the data follows the file
cp "$top/model" "$mt/r1"; mkdir "$mt/dir"
mv "$mt/r1" "$mt/dir/r2" || fail "rename"
cmp "$top/model" "$mt/dir/r2" || fail "data after rename"
# rename over a file with dirty data: the victim's data is dropped
head -c 200000 /dev/zero | tr '\0' 'V' >"$mt/victim"
echo replaced >"$mt/src"; mv "$mt/src" "$mt/victim"
[ "$(cat "$mt/victim")" = replaced ] || fail "rename over a file"

# ---- unlink with dirty data: dropped, never written, not under a reused name
head -c 4000000 /dev/zero | tr '\0' 'U' >"$mt/gone"
before=$(awk '/^BdiReclaimable/ {print $2}' <("$W" stat "$mt"))
rm "$mt/gone" || fail "unlink"
# (dropped when the kernel forgets the file, which rm does not wait for:
# polled, 60 s)
for _ in $(seq 600); do
	after=$(awk '/^BdiReclaimable/ {print $2}' <("$W" stat "$mt"))
	[ "$after" -le $((before - 3900)) ] && break
	sleep 0.1
done
[ "$after" -le $((before - 3900)) ] || fail "unlinked data still dirty: $before -> $after kB"
echo new >"$mt/gone"   # the name again: a new file, only its own data
[ "$(cat "$mt/gone")" = new ] || fail "reused name shows old data"

# ---- the kernel forgets a file whose data is still in the cache (dentries
# and inodes dropped): looked up again, it shows its full size and data
if [ -w /proc/sys/vm/drop_caches ]; then
	cp "$top/model" "$mt/forgotten"
	sync_before=$(stat -c %s "$bk/forgotten")
	m_forgot=$(stat -c %.9Y "$mt/forgotten")
	echo 2 >/proc/sys/vm/drop_caches
	# forgotten with its data in the cache: kept as is, nothing written
	for _ in $(seq 50); do
		"$W" stat "$mt" | awk '/^ForgottenCached:/ { exit $2 >= 1 ? 0 : 1 }' && break
		sleep 0.1
	done
	[ "$(stat -c %s "$mt/forgotten")" = 3000000 ] || fail "size after forget: $(stat -c %s "$mt/forgotten") (backing had $sync_before)"
	cmp "$top/model" "$mt/forgotten" || fail "data after forget"
fi

# ---- metadata and errnos of the backing file system
mkdir "$mt/d2" && touch "$mt/d2/f"
rmdir "$mt/d2" 2>"$top/err" && fail "rmdir of a non-empty dir"
grep -q "not empty" "$top/err" || fail "rmdir errno: $(cat "$top/err")"
mkdir "$mt/d2" 2>"$top/err" && fail "mkdir over an existing dir"
grep -q "File exists" "$top/err" || fail "mkdir errno: $(cat "$top/err")"
ln "$mt/d2/f" "$mt/hard" && [ "$(stat -c %h "$mt/hard")" = 2 ] || fail "hard link"
chmod 600 "$mt/hard"; [ "$(stat -c %a "$bk/d2/f")" = 600 ] || fail "chmod"
touch -d "2001-02-03 04:05:06" "$mt/hard"
[ "$(stat -c %Y "$bk/d2/f")" = "$(date -d "2001-02-03 04:05:06" +%s)" ] || fail "utimens"
ls "$mt" | grep -q '^dir$' || fail "readdir"
df "$mt" >/dev/null || fail "statfs"
if command -v setfattr >/dev/null && setfattr -n user.probe -v 1 "$bk/small" 2>/dev/null; then
	setfattr -n user.k -v v "$mt/small" || fail "setxattr"
	[ "$(getfattr --only-values -n user.k "$mt/small")" = v ] || fail "xattr round trip"
	getfattr -d "$mt/small" | grep -q 'user.k="v"' || fail "listxattr"
	setfattr -x user.k "$mt/small" || fail "removexattr"
	getfattr -n user.k "$mt/small" 2>/dev/null && fail "xattr still there"
	[ "$(getfattr --only-values -n user.k "$bk/small" 2>/dev/null)" = "" ] || fail "xattr on the backing file"
fi
mkfifo "$mt/fifo" && [ -p "$bk/fifo" ] || fail "mknod (fifo)"
rm "$mt/fifo"

# ---- permissions (default_permissions): another user is refused a 0600 file
chmod 644 "$mt/small"; chmod 600 "$mt/t"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
	setpriv --reuid=65534 --regid=65534 --clear-groups cat "$mt/t" >/dev/null 2>&1 &&
		fail "another user read a 0600 file"
fi

# ---- no escape out of BACKING_DIR through symlinks
echo secret >"$out/target"; chmod 644 "$out/target"
ln -s "$out/target" "$bk/abs"; ln -s ../outside/target "$bk/rel"
snap() { stat -c '%a %Y %s %h' "$out/target"; ls -A "$out"; }
s0=$(snap)
[ "$(readlink "$mt/abs")" = "$out/target" ] || fail "readlink"
chown -h 1:1 "$mt/abs" 2>/dev/null; touch -h -d 2000-01-01 "$mt/rel" 2>/dev/null
setfattr -h -n user.x -v 1 "$mt/abs" 2>/dev/null
mv "$mt/abs" "$mt/abs2" && rm "$mt/abs2" "$mt/rel" || fail "rename/unlink of symlinks"
[ "$(snap)" = "$s0" ] || fail "an operation on a symlink reached the file outside"
[ -z "$(ls -A "$out" | grep -v '^target$')" ] || fail "files appeared outside"
[ "$(stat -c %U "$out/target")" = "$(id -un)" ] || fail "outside file changed owner"
# ... nor through another file system mounted inside it (root: file
# handles, decoded on the backing directory's file system, where one of
# another names some other inode): it is not entered (EXDEV)
if [ "$(id -u)" = 0 ] && mkdir "$bk/sub" && mount -t tmpfs -o size=1M tmpfs "$bk/sub" 2>/dev/null; then
	echo inner >"$bk/sub/x"
	msg=$(stat "$mt/sub" 2>&1) && fail "a file system mounted in BACKING_DIR was entered: $msg"
	echo "$msg" | grep -q "Invalid cross-device link" || fail "a mount inside BACKING_DIR: '$msg'"
	cat "$mt/sub/x" >/dev/null 2>&1 && fail "a file on a mount inside BACKING_DIR was read"
	# a create (O_TRUNC) of a name the kernel believed absent (a negative
	# entry) that is now a file of that other file system, bound there:
	# refused, and that file not cut (the daemon's open truncated it
	# before it found it was not to be entered)
	stat "$mt/bound" >/dev/null 2>&1
	if touch "$bk/bound" && mount --bind "$bk/sub/x" "$bk/bound"; then
		(echo new >"$mt/bound") 2>/dev/null && fail "a create opened a file of a mount inside BACKING_DIR"
		[ "$(cat "$bk/sub/x")" = inner ] || fail "a refused create truncated a file of a mount inside BACKING_DIR"
		umount "$bk/bound"
	fi
	rm -f "$bk/bound"
	umount "$bk/sub"
	rmdir "$bk/sub"
fi

# ---- fio verify (sequential and random) and fs_mark against the mount
if command -v fio >/dev/null; then
	for rw in write randwrite; do
		fio --name=v-$rw --directory="$mt" --rw=$rw --bs=16k --size=16M --verify=crc32c --verify_state_save=0 \
		    --do_verify=1 --output="$top/fio-$rw.log" >/dev/null 2>&1 || fail "fio $rw verify: $(tail -5 "$top/fio-$rw.log")"
		grep -q "err= 0" "$top/fio-$rw.log" || fail "fio $rw reported errors"
	done
fi
if command -v fs_mark >/dev/null; then
	mkdir "$mt/fsm"
	(cd "$top" && fs_mark -d "$mt/fsm" -n 300 -s 4096 -t 2 -S 1 -k) >"$top/fsmark.log" 2>&1 ||
		fail "fs_mark: $(tail -5 "$top/fsmark.log")"
	n=$(find "$mt/fsm" -type f 2>"$top/find.err" | wc -l)
	[ "$n" = 600 ] || fail "fs_mark files missing: $n through the mount ($(cat "$top/find.err")), \
$(find "$mt/fsm" -type f | wc -l) again, $(find "$bk/fsm" -type f | wc -l) in BACKING_DIR; fs_mark: $(tail -4 "$top/fsmark.log")"
fi

# ---- unmount by fusermount3: everything written back, exit 0
# the backing directory given for the mount point: said so
msg=$("$W" umount "$bk" 2>&1) && fail "wbcache umount BACKING_DIR succeeded"
echo "$msg" | grep -q "BACKING_DIR of the one at $mt" || fail "wbcache umount BACKING_DIR: $msg"
msg=$("$W" stat "$bk" 2>&1) && fail "wbcache stat BACKING_DIR succeeded"
echo "$msg" | grep -q "BACKING_DIR of the one at $mt" || fail "wbcache stat BACKING_DIR: $msg"
# a directory inside the mount, not its root: said so, with the mount
# point to give (it said "not a wbcache mount")
msg=$("$W" stat "$mt/d2" 2>&1) && fail "wbcache stat of a directory in the mount succeeded"
echo "$msg" | grep -q "inside the one at $mt" || fail "wbcache stat of a directory in the mount: $msg"
msg=$("$W" umount "$mt/d2" 2>&1) && fail "wbcache umount of a directory in the mount succeeded"
echo "$msg" | grep -q "inside the one at $mt" || fail "wbcache umount of a directory in the mount: $msg"
do_umount || fail "unmount exit status $?: $(cat "$top/mount.log")"
cmp "$top/model" "$bk/a" || fail "backing file differs after unmount"
[ -z "${m_forgot:-}" ] || [ "$(stat -c %.9Y "$bk/forgotten")" = "$m_forgot" ] ||
	fail "a forgotten file's mtime not put back at unmount"
cmp "$top/model" "$bk/dir/r2" || fail "renamed file not written back"
cmp "$top/t" "$bk/t" || fail "truncated file not written back"
[ "$(cat "$bk/gone")" = new ] || fail "reused name written with old data"
[ "$(cat "$bk/victim")" = replaced ] || fail "rename victim"
grep -q U "$bk/gone" && fail "unlinked data written"

# ---- more files than the daemon may hold descriptors (root: file handles);
# the foreground mode (-f), ended by SIGTERM with a directory open
if [ "$(id -u)" = 0 ]; then
	( ulimit -n 256; exec "$W" mount "$bk" "$mt" -f ) 2>"$top/mount.log" &
	fgpid=$!
	fg_up "$fgpid" "$top/mount.log"
	pid=$(daemon_pid)
	[ "$pid" = "$fgpid" ] || fail "foreground: the daemon is $pid, not the process started ($fgpid)"
	mkdir "$mt/many"
	for i in $(seq 1500); do echo "$i" >"$mt/many/$i" || fail "file $i with 256 descriptors"; done
	n=$(ls /proc/$pid/fd | wc -l)
	[ "$n" -lt 256 ] || fail "the daemon holds $n descriptors"
	[ "$(cat "$mt/many/777")" = 777 ] || fail "file content with few descriptors"
	# ended by SIGTERM while a program holds a directory open: the
	# handle the kernel never releases is freed at exit (a sanitizer
	# build's leak check fails the exit status otherwise)
	exec 3<"$mt/many"
	do_umount TERM || fail "SIGTERM with a directory open"
	exec 3<&-
	wait "$fgpid" || fail "foreground mount exit status $? (SIGTERM): $(tail -5 "$top/mount.log")"
	[ "$(ls "$bk/many" | wc -l)" = 1500 ] && [ "$(cat "$bk/many/1500")" = 1500 ] ||
		fail "many files not written back"
fi

# ---- a second mount on a wbcache mount is refused; after the daemon
# is killed, a mount there is refused with the way out, and wbcache
# umount clears the dead mount (exit 1: what was cached is lost)
do_mount ""
msg=$("$W" mount "$bk" "$mt" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "a wbcache mount already" || fail "a mount stacked: $rc $msg"
[ "$(grep -c " $mt fuse.wbcache " /proc/self/mounts)" = 1 ] || fail "two mounts stacked on $mt"
kill -9 "$pid"; wait_gone "$pid" 100 || fail "the daemon survived kill -9"
msg=$("$W" mount "$bk" "$mt" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "fusermount3 -u" || fail "a mount on a dead one: $rc $msg"
# named as users name it: relative, through "./", a trailing slash
msg=$(cd "$(dirname "$mt")" && "$W" umount "./$(basename "$mt")/" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$msg" | grep -q "daemon had ended" || fail "umount of a dead mount: $rc $msg"
mounted "$mt" && fail "the dead mount is still there after wbcache umount"
pid=

# ---- a daemon still writing back after its unmount (fusermount3 -u
# returns at once; stopped here: a slow or failing store) keeps its
# BACKING_DIR: a new mount of it waits for its end (it mounted at once,
# read what was not yet written, and the old daemon's writeback then
# overwrote what the new mount wrote)
do_mount "dirty_expire_centisecs=360000,dirty_writeback_centisecs=0"
printf 'OLD-DATA-OF-THE-FIRST-MOUNT\n' >"$mt/lock"
old=$pid
kill -STOP "$old"
timeout 20 fusermount3 -u "$mt" || { kill -CONT "$old"; fail "fusermount3 -u with the daemon stopped"; }
"$W" mount "$bk" "$mt" 2>"$top/lock.log" &
mpid=$!
# its word of the wait (or its mount, or its end): polled, 60 s, not a
# sleep (a sanitizer build on a loaded machine took longer than 2 s)
for _ in $(seq 600); do
	grep -q "still writing it back; waiting" "$top/lock.log" && break
	mounted "$mt" && break
	kill -0 "$mpid" 2>/dev/null || break
	sleep 0.1
done
if mounted "$mt"; then
	kill -CONT "$old"; wait "$mpid"
	fail "a second daemon mounted the backing directory the first still writes back"
fi
grep -q "still writing it back; waiting" "$top/lock.log" || { kill -CONT "$old"; fail "no word of the wait: $(cat "$top/lock.log")"; }
kill -CONT "$old"
wait "$mpid" || fail "the mount after the first daemon's end: exit $?: $(cat "$top/lock.log")"
wait_gone "$old" 600 || fail "the first daemon did not end"
pid=$(daemon_pid)
[ "$(cat "$mt/lock")" = OLD-DATA-OF-THE-FIRST-MOUNT ] || fail "the new mount read '$(cat "$mt/lock")'"
echo NEW >"$mt/lock"
do_umount || fail "wbcache umount after the wait"
[ "$(cat "$bk/lock")" = NEW ] || fail "the new mount's write was overwritten: '$(cat "$bk/lock")'"

# ---- the caller of a background mount gone (Ctrl-C, a timeout) before
# the mount was up: told it failed, it finds nothing mounted later (the
# daemon went on and mounted).  The starting daemon is held (SIGSTOP)
# while its caller is killed; tried a few times (the start may be done
# before it is caught)
caught=
for try in 1 2 3 4 5; do
	"$W" mount "$bk" "$mt" -o mem=$((64 << try))M 2>/dev/null &
	mpid=$! child=
	for _ in $(seq 2000); do
		child=$(cat "/proc/$mpid/task/$mpid/children" 2>/dev/null) && [ -n "$child" ] && break
	done
	child=${child%% *}
	[ -n "$child" ] && kill -STOP "$child" 2>/dev/null || { wait "$mpid"; child=; }
	if [ -n "$child" ] && ! mounted "$mt"; then
		kill -9 "$mpid"; wait "$mpid" 2>/dev/null
		kill -CONT "$child"
		wait_gone "$child" 600 || fail "the daemon of an interrupted mount went on"
		mounted "$mt" && fail "an interrupted mount was left mounted"
		caught=1
		break
	fi
	[ -n "$child" ] && kill -CONT "$child"
	wait "$mpid" 2>/dev/null
	mounted "$mt" && { pid=$(daemon_pid); do_umount || fail "umount (interrupt try $try)"; }
done
[ -n "$caught" ] || echo "note: the start of a mount was never caught before it was up"

# ---- unmount by SIGTERM writes back too
do_mount "dirty_writeback_centisecs=0"
cp "$top/model" "$mt/term"
do_umount TERM || fail "SIGTERM unmount exit status"
cmp "$top/model" "$bk/term" || fail "not written back at SIGTERM"

# ---- a read-only mount: writes refused, wbcache umount works
do_mount "ro"
echo x 2>/dev/null >"$mt/rofile" && fail "a write on a read-only mount"
cmp "$top/model" "$mt/a" || fail "read on a read-only mount"
do_umount || fail "wbcache umount of a read-only mount: $(cat "$top/umount.log")"
# ... and a read-only backing directory: a writable open gets EROFS, as
# there (the daemon cannot write it)
mount --bind "$bk" "$bk" && mount -o remount,bind,ro "$bk" || fail "a read-only bind mount"
do_mount ""
msg=$(sh -c "echo x >>'$mt/a'" 2>&1) && fail "append over a read-only backing directory"
echo "$msg" | grep -q "Read-only file system" || fail "over a read-only backing directory: '$msg'"
do_umount || fail "wbcache umount over a read-only backing directory"
umount "$bk" || fail "the read-only bind mount"

# ---- with auto_unmount (a helper that lives as long as the mount), a
# caller that captures the output still gets it back at once
out=$(timeout 20 "$W" mount "$bk" "$mt" -o auto_unmount 2>&1); rc=$?
[ $rc = 0 ] || fail "mount -o auto_unmount with captured output: exit $rc: $out"
pid=$(daemon_pid)
do_umount || fail "wbcache umount (auto_unmount)"

# ---- the FUSE options: no FLUSH, nothing kept by the kernel, 2 workers
# with their own descriptors; a name made beside the mount is seen at once
do_mount "noflush=1,entry_timeout=0,attr_timeout=0,negative_timeout=0,threads=2,idle_threads=1,clone_fd=1"
[ -e "$mt/beside" ] && fail "a name not yet made"
echo made >"$bk/beside"
[ "$(cat "$mt/beside" 2>/dev/null)" = made ] || fail "a name made beside the mount not seen (timeouts 0)"
cp "$top/model" "$mt/opts" && cmp "$top/model" "$mt/opts" || fail "write and read back with noflush, 2 workers"
# a file written back counts its blocks once (it counted the data it had
# in the cache at its last close on top of the backing file's blocks;
# attr_timeout=0: each stat asks)
head -c 4M /dev/urandom >"$mt/wb"
b_cached=$(stat -c %b "$mt/wb")
getfattr -n user.wbcache.sync "$mt" >/dev/null 2>&1 || fail "sync through the xattr"
b_after=$(stat -c %b "$mt/wb") b_bk=$(stat -c %b "$bk/wb")
[ "$b_cached" -ge 8192 ] && [ "$b_after" -ge 8192 ] && [ "$b_after" -le $((b_bk + 64)) ] ||
	fail "4 MiB: $b_cached blocks cached, $b_after once written back (the backing file: $b_bk)"
do_umount || fail "wbcache umount (FUSE options)"
cmp "$top/model" "$bk/opts" || fail "not written back (FUSE options)"

# ---- a mount point given through a symbolic link: wbcache umount of the
# link unmounts (fusermount3 refused the link: exit 1, still mounted)
ln -s "$mt" "$top/mtlink"
"$W" mount "$bk" "$top/mtlink" 2>"$top/mount.log" || fail "mount through a link: $(cat "$top/mount.log")"
mountpoint -q "$mt" || fail "mount through a link: not mounted"
pid=$(daemon_pid)
"$W" umount "$top/mtlink" 2>"$top/umount.log" || fail "umount of the link: $(cat "$top/umount.log")"
wait_gone "$pid" 60 || fail "the daemon did not end"
mountpoint -q "$mt" && fail "umount of the link: still mounted"
pid=

# ---- a write error at unmount is reported with exit status 1
mkdir "$top/tiny"
if mount -t tmpfs -o size=1M tmpfs "$top/tiny" 2>/dev/null; then
	bk=$top/tiny
	do_mount "mem=16M,dirty_writeback_centisecs=0,dirty_background_bytes=15M,dirty_bytes=15M"
	head -c 4000000 /dev/zero >"$mt/big" || fail "write into the cache"
	do_umount && fail "wbcache umount reported no error for a full backing file system"
	grep -q "writeback failed" "$top/umount.log" || fail "no message: $(cat "$top/umount.log")"
	mountpoint -q "$mt" || fail "unmounted although the data could not be written"
	# space again: the data goes out and umount succeeds
	mount -o remount,size=8M "$top/tiny" || fail "remount of the tmpfs"
	do_umount || fail "wbcache umount after space was freed: $(cat "$top/umount.log")"
	[ "$(stat -c %s "$top/tiny/big")" = 4000000 ] || fail "data not written once space was freed"
	# a write after umount's sync (here by a fusermount3 that writes
	# first) fails in the daemon's last writeback: umount says so, exit 1
	do_mount "mem=32M,retry_timeout=1,dirty_writeback_centisecs=0,dirty_background_bytes=30M,dirty_bytes=30M"
	mkdir "$top/wrap"
	printf '#!/bin/sh\nhead -c 12000000 /dev/zero >"%s/late" || exit 9\nexec %s "$@"\n' \
		"$mt" "$(command -v fusermount3)" >"$top/wrap/fusermount3"
	chmod +x "$top/wrap/fusermount3"
	PATH="$top/wrap:$PATH" "$W" umount "$mt" 2>"$top/umount.log"; rc=$?
	[ $rc = 1 ] || fail "wbcache umount: exit $rc for a failed last writeback: $(cat "$top/umount.log")"
	grep -q "unmounted, but the writeback at the daemon's end failed: .*bytes lost" "$top/umount.log" ||
		fail "no message: $(cat "$top/umount.log")"
	wait_gone "$pid" 60 || fail "the daemon did not end"
	mountpoint -q "$mt" && fail "still mounted"
	pid=
	umount "$top/tiny"
fi

# ---- the daemon's report comes from the daemon alone: another process
# (here nobody's) that sends a failure to umount's socket while it waits
# is not heard (it was: exit 1, "forged"), nor one that sends success
do_mount "mem=16M"
echo data >"$mt/f"
mkdir -p "$top/wrap2"
printf '#!/bin/sh\nsleep 1\nexec %s "$@"\n' "$(command -v fusermount3)" >"$top/wrap2/fusermount3"
chmod +x "$top/wrap2/fusermount3"
PATH="$top/wrap2:$PATH" "$W" umount "$mt" 2>"$top/umount.log" &
upid=$!
sysPY=/usr/bin/python3; [ -x $sysPY ] || sysPY=python3
setpriv --reuid=65534 --regid=65534 --clear-groups $sysPY - <<'PY' 2>"$top/forger.err" &
import socket, time
end = time.time() + 3
while time.time() < end:
    for line in open("/proc/net/unix").read().split("\n"):
        f = line.split()
        if len(f) >= 8 and f[7].startswith("@wbcache-umount-"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.sendto(b"1 forged by another process", "\0" + f[7][1:])
            except OSError:
                pass
            s.close()
    time.sleep(0.05)
PY
fpid=$!
wait $upid; rc=$?
wait $fpid
[ $rc = 0 ] || fail "umount heard another process's report: exit $rc: $(cat "$top/umount.log")"
wait_gone "$pid" 60 || fail "the daemon did not end"
pid=
[ "$(cat "$bk/f")" = data ] || fail "not written back"
echo "mount tests passed"
