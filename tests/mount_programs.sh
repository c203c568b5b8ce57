#!/usr/bin/env bash
# Real programs through the mount, in its default (background) mode; each
# part mounts afresh, runs its programs on MOUNTPOINT, unmounts with
# `wbcache umount`, then checks the result again in BACKING_DIR:
#   tar         a tree (/usr/include/linux, the project's files, symlinks,
#               hard links, a fifo, odd names and modes) extracted; diff -r
#               and a listing of types, modes, owners, sizes, links, mtimes
#   git         git clone --no-hardlinks of this repository, git fsck
#               --full, checkout of the first commit and back, a commit,
#               git gc, git fsck again; after unmount: fsck, HEAD, status
#   sqlite      two sqlite3 writers at once (rollback journal, small page
#               cache so transactions spill), thousands of inserts in
#               transactions, updates, a rollback; PRAGMA integrity_check;
#               the .dump the same after unmount
#   sqlite_wal  the same in WAL mode (shared writable mmap of the -shm
#               file) with a concurrent reader
#   build       the project (src include tools tests bench fuzz Makefile
#               scripts) copied onto the mount and built with make -j2;
#               the binary runs; after unmount the same bytes, and make
#               has nothing to rebuild (mtimes kept by writeback)
#   rsync       rsync -aH of the tree twice (the second transfers nothing),
#               cp -a, `tar c` of the copy byte-identical to `tar c` of the
#               source, its ctimes unmoved by writeback; after unmount
#               rsync --checksum --dry-run finds no difference
#   dbench      dbench with its Debian loadfile, 2 clients
#   loops       two concurrent create/write/read/rename/delete loops, also
#               on shared names; what they kept is there after unmount;
#               renames across directories after lookups in 7 others
#   fio_ENGINE  fio --verify=crc32c, 2 jobs, random writes of 4-64 KiB
#               over files larger than the cache (psync, libaio, io_uring,
#               mmap); after unmount fio --verify_only on the backing files
#   stress_ng   stress-ng file-system stressors with --verify (hdd, seek,
#               dentry, rename, link, chmod, dir, fallocate, copy-file,
#               symlink); nothing of theirs left after unmount
#   fsx         an fsx-style checker (no fsx in Debian): two processes each
#               doing thousands of random writes (write-only opens, which
#               are direct, and read-write ones, which use the kernel's
#               page cache), reads, mmap reads and writes, truncates,
#               posix_fallocate, copy_file_range, appends, reopens, fsyncs
#               on one file, compared with an in-memory model; after
#               unmount the backing file equals the model
# A part whose program is missing is skipped with the reason (install
# them with scripts/install-deps, as root); exit 77 only if no part ran.
# Sanitizer builds ($BUILD other than build/release) do about a quarter of
# the work.  WBCACHE_PROGRAMS_PARTS="tar git ..." runs only those parts;
# WBCACHE_FSX_SEED repeats an fsx run.  A sanitizer's report from the
# daemon fails the part it came in.
set -u
cd "$(dirname "$0")/.."
. tests/mountlib.bash
repo=$PWD

# Known bugs of the mount: WBCACHE_KNOWN_BROKEN lists parts, or the
# single checks below, whose failure is then reported but does not fail
# the test (a listed one that passes is reported too, so its name can go).
#   rename_ebadf  (loops) rename(2) from one directory to another failing
#          with EBADF (a descriptor of a directory the request holds
#          closed by a cache miss of the other one)
#   ctime  (rsync) a file's ctime moving when the engine writes it back,
#          though nothing changed it (`tar c` of data just written exits
#          1: "file changed as we read it")
KNOWN_BROKEN=${WBCACHE_KNOWN_BROKEN-""}
known() { case " $KNOWN_BROKEN " in *" $1 "*) return 0 ;; esac; return 1; }
# kbroken NAME: the failure in $why is the known bug NAME: report, go on
kbroken() {
	echo "known broken, not counted: $1: $(head -n 6 <<<"$why")"
	case " $hits " in *" $1 "*) ;; *) hits="${hits:+$hits }$1" ;; esac
	all_hits="$all_hits $1"
	why=
}
all_hits=
# guards NAME: a check guarded by NAME runs (to report a listed name that
# no longer fails)
guarded=
guards() { guarded="$guarded $1"; }

case $BUILD in
build/release | */build/release) SCALE=4 ;;
*) SCALE=1 ;;
esac
SCALE=${WBCACHE_PROGRAMS_SCALE:-$SCALE}
PT=240   # seconds any one program may run
# the engine writes back while the programs run
OPTS="mem=64M,dirty_expire_centisecs=200,dirty_writeback_centisecs=50"

# a sanitizer's reports from the daemon (which has no terminal) land here
for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
	export "$v=${!v:+${!v}:}log_path=$top/sanitizer"
done
out=$top/out   # the last command's output
why=           # the current part's failure
plog=/dev/null # the current part's log (all its commands' output)

# x DESC CMD...: runs CMD with a timeout, its output in $out; on failure
# $why says what failed and ends with the output's last lines
x() {
	local desc=$1 rc
	shift
	timeout -k 5 "$PT" "$@" >"$out" 2>&1
	rc=$?
	{ echo "\$ $*"; cat "$out"; } >>"$plog"
	[ $rc -eq 0 ] && return 0
	[ $rc -eq 124 ] && desc="$desc: timed out after ${PT}s"
	why="$desc (exit $rc): $(tail -n 15 "$out")"
	return 1
}
bad() { why=$*; return 1; }
# a part that cannot run here (reason)
unable=
cannot() { unable=$*; return 1; }

# manifest DIR: type, mode, owner, size, links, mtime, target of every entry
manifest() {
	find "$1" \( -type d -printf '%P d %m %U:%G %Ts\n' \) \
		-o -printf '%P %y %m %U:%G %s %n %Ts %l\n' | LC_ALL=C sort
}
# sums DIR: sha256 of every regular file
sums() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum); }

# pumount: wbcache umount, the daemon gone, nothing left mounted
pumount() {
	local e= rc
	if ! alive "$pid"; then
		e="the daemon ended during the part"
		fusermount3 -uz "$mt" 2>/dev/null
	else
		timeout -k 5 300 "$W" umount "$mt" >"$top/umount.log" 2>&1
		rc=$?
		[ $rc -eq 0 ] || e="wbcache umount exited $rc: $(cat "$top/umount.log")"
		if ! wait_gone "$pid" 600; then
			e="${e:+$e; }the daemon did not end after wbcache umount"
			kill -9 "$pid"
			wait_gone "$pid" 100
		fi
		if mountpoint -q "$mt"; then
			e="${e:+$e; }still mounted"
			fusermount3 -uz "$mt" 2>/dev/null
		fi
	fi
	pid=
	[ -z "$e" ] && return 0
	why="${why:+$why; }$e"
	return 1
}

ran=0 nfail=0
report=()
# part NAME "PROGRAMS" MOUNT_OPTS: on_NAME on the mount ($d), then check_NAME
# on the backing directory ($b) after unmount
part() {
	local name=$1 progs=$2 opts=$3 p t0 secs known=0 res
	if [ -n "${WBCACHE_PROGRAMS_PARTS:-}" ]; then
		case " $WBCACHE_PROGRAMS_PARTS " in *" $name "*) ;; *) return 0 ;; esac
	fi
	for p in $progs; do
		if ! command -v "$p" >/dev/null; then
			echo "skip $name: no $p (scripts/install-deps, as root)"
			report+=("$(printf '%-11s skipped (no %s)' "$name" "$p")")
			return 0
		fi
	done
	known "$name" && known=1
	why= unable= hits= plog=$top/$name.log
	: >"$plog"
	t0=$(date +%s.%N)
	do_mount "$opts"
	d=$mt/$name b=$bk/$name
	mkdir "$d" || bad "mkdir on the mount"
	if [ -z "$why" ] && on_"$name" && ! alive "$pid"; then
		why="the daemon ended during the part"
	fi
	pumount
	if compgen -G "$top/sanitizer.*" >/dev/null; then
		why="${why:+$why; }sanitizer reports: $(cat "$top"/sanitizer.* | head -n 40)"
		mkdir -p "$top/reports" && mv "$top"/sanitizer.* "$top/reports/"
	fi
	[ -z "$why" ] && [ -z "$unable" ] && check_"$name"
	secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')
	if [ -n "$unable" ]; then
		res="skipped ($unable)"
		echo "skip $name: $unable"
	elif [ -z "$why" ]; then
		ran=$((ran + 1))
		res=ok
		[ -n "$hits" ] && res="ok but for known broken: $hits"
		[ $known = 1 ] && res="ok, but listed in WBCACHE_KNOWN_BROKEN: remove it"
		echo "ok   $name (${secs}s)${hits:+ but for known broken: $hits}"
	else
		ran=$((ran + 1))
		if [ $known = 1 ]; then
			res="known broken (WBCACHE_KNOWN_BROKEN)"
			echo "known broken, not counted: $name: $why"
		else
			res=FAILED
			nfail=$((nfail + 1))
			echo "FAIL $name: $why" >&2
			cp "$plog" "$repo/$BUILD/test-logs/mount_programs.$name.log" 2>/dev/null &&
				echo "     (its commands and output: $BUILD/test-logs/mount_programs.$name.log)" >&2
		fi
	fi
	report+=("$(printf '%-11s %6ss  %s' "$name" "$secs" "$res")")
	rm -rf "$b"
}

# ---- the tree that tar, rsync and cp copy (on the local file system)
tree=$top/tree
mkdir -p "$tree/proj" "$tree/empty dir" "$tree/odd"
cp -a /usr/include/linux "$tree/" 2>/dev/null || mkdir -p "$tree/linux"
cp -a "$repo"/src "$repo"/include "$repo"/tools "$repo"/tests "$repo"/Makefile "$tree/proj/"
head -c $((SCALE * 1000000)) /dev/urandom >"$tree/odd/random"
: >"$tree/odd/empty"
printf 'x%.0s' $(seq 255) >"$tree/odd/n"; mv "$tree/odd/n" "$tree/odd/$(printf 'n%.0s' $(seq 255))"
echo spaces >"$tree/odd/with spaces and ünïcödé"
echo mode >"$tree/odd/mode0640"; chmod 640 "$tree/odd/mode0640"
echo old >"$tree/odd/old"; touch -d "1999-12-31 23:59:59" "$tree/odd/old"
ln -s random "$tree/odd/symlink"
ln -s does-not-exist "$tree/odd/dangling"
ln "$tree/odd/random" "$tree/odd/hardlink"
mkfifo "$tree/odd/fifo"
touch -d "2005-05-05" "$tree/odd" "$tree/empty dir"

# ---- tar: extract, compare
on_tar() {
	x "tar c of the tree" tar -C "$top" -cf "$top/tree.tar" tree || return
	x "tar x onto the mount" tar -C "$d" -xpf "$top/tree.tar" || return
	x "diff -r after tar x" diff -r --no-dereference -x fifo "$tree" "$d/tree" || return
	manifest "$tree" >"$top/tree.manifest"
	manifest "$d/tree" >"$top/tar.manifest"
	x "types, modes, sizes, links, mtimes after tar x" diff "$top/tree.manifest" "$top/tar.manifest"
}
check_tar() {
	x "diff -r of BACKING_DIR after unmount" diff -r --no-dereference -x fifo "$tree" "$b/tree" || return
	manifest "$b/tree" >"$top/tar.manifest"
	x "types, modes, sizes, links, mtimes in BACKING_DIR" diff "$top/tree.manifest" "$top/tar.manifest"
}

# ---- rsync twice, cp -a, tar c
on_rsync() {
	x "rsync -aH" rsync -aH "$tree/" "$d/rs/" || return
	x "second rsync -aH" rsync -aH --itemize-changes --stats "$tree/" "$d/rs/" || return
	grep -q "^Number of regular files transferred: 0$" "$out" ||
		bad "the second rsync transferred files: $(grep -E '^[<>ch.*][fdLDS]|transferred' "$out" | head -n 20)" || return
	! grep -E '^[<>ch.*][fdLDS]' "$out" >/dev/null ||
		bad "the second rsync changed entries: $(grep -E '^[<>ch.*][fdLDS]' "$out" | head -n 20)" || return
	x "diff -r after rsync" diff -r --no-dereference -x fifo "$tree" "$d/rs" || return
	x "cp -a" cp -a "$tree" "$d/cp" || return
	ctimes "$d/cp" >"$top/ctimes.1"
	guards ctime
	tar -C "$tree" -c --sort=name --numeric-owner -f "$top/src.tar" . || bad "tar c of the source" || return
	if ! x "tar c of the cp -a copy" tar -C "$d/cp" -c --sort=name --numeric-owner -f "$top/cp.tar" .; then
		# only "file changed as we read it" (exit 1): ctime moved
		grep -v "file changed as we read it" "$out" | grep -q . || ! known ctime || kbroken ctime
		[ -z "$why" ] || return 1
	fi
	x "tar c of the cp -a copy on the mount differs from tar c of the source" cmp "$top/src.tar" "$top/cp.tar" || return
	# nothing changed the copy: its ctimes stay at writeback
	getfattr -n user.wbcache.sync "$mt" >/dev/null || bad "getfattr user.wbcache.sync (write everything back)" || return
	sleep 1.1   # the kernel keeps attributes 1 s
	ctimes "$d/cp" >"$top/ctimes.2"
	if ! cmp -s "$top/ctimes.1" "$top/ctimes.2"; then
		why="ctime moved at writeback (before, after, file): $(paste "$top/ctimes.1" "$top/ctimes.2" |
			awk -F'\t' '$1 != $2 {print $1 "\t" $2}' | awk '{print $1, $3, $2}' | head -n 3)"
		known ctime && kbroken ctime
		[ -z "$why" ] || return 1
	fi
}
# ctimes DIR: the ctime of every regular file
ctimes() { find "$1" -type f -printf '%C@ %P\n' | LC_ALL=C sort -k 2; }
check_rsync() {
	x "rsync -c -n after unmount" rsync -aHc --dry-run --itemize-changes --delete "$tree/" "$b/rs/" || return
	[ ! -s "$out" ] || bad "rsync --checksum finds differences in BACKING_DIR: $(head -n 20 "$out")" || return
	x "tar c of the cp -a copy in BACKING_DIR" tar -C "$b/cp" -c --sort=name --numeric-owner -f "$top/cp.tar" . || return
	x "tar c of the cp -a copy in BACKING_DIR differs from the source's" cmp "$top/src.tar" "$top/cp.tar"
}

# ---- git
on_git() {
	git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || cannot "not a git checkout" || return
	local g=(git -C "$d/repo" -c user.name=wbcache -c user.email=wbcache@localhost -c gc.auto=0)
	x "git clone --no-hardlinks" git -c safe.directory="*" clone -q --no-hardlinks "$repo" "$d/repo" || return
	x "git fsck --full after clone" "${g[@]}" fsck --full --no-progress || return
	local first
	first=$("${g[@]}" rev-list --max-parents=0 HEAD | tail -n 1)
	x "git checkout of the first commit" "${g[@]}" checkout -q "$first" || return
	x "git checkout back" "${g[@]}" checkout -q - || return
	x "git status after checkouts" "${g[@]}" status --porcelain || return
	[ ! -s "$out" ] || bad "git status not clean after checkouts: $(head "$out")" || return
	seq 100000 >"$d/repo/numbers"
	echo "a line" >>"$d/repo/README.md"
	x "git add" "${g[@]}" add -A || return
	x "git commit" "${g[@]}" commit -q -m "a commit on the mount" || return
	x "git gc" "${g[@]}" gc -q --prune=now || return
	x "git fsck --full after gc" "${g[@]}" fsck --full --no-progress --strict || return
	x "git status" "${g[@]}" status --porcelain || return
	[ ! -s "$out" ] || bad "git status not clean: $(head "$out")" || return
	head=$("${g[@]}" rev-parse HEAD)
	ncommits=$("${g[@]}" rev-list --count HEAD)
}
check_git() {
	local g=(git -C "$b/repo")
	x "git fsck --full in BACKING_DIR" "${g[@]}" fsck --full --no-progress --strict || return
	[ "$("${g[@]}" rev-parse HEAD)" = "$head" ] || bad "HEAD in BACKING_DIR is not the commit made" || return
	[ "$("${g[@]}" rev-list --count HEAD)" = "$ncommits" ] || bad "history length in BACKING_DIR" || return
	x "git status in BACKING_DIR" "${g[@]}" status --porcelain || return
	[ ! -s "$out" ] || bad "git status in BACKING_DIR not clean: $(head "$out")" || return
	cmp <(seq 100000) "$b/repo/numbers" || bad "committed file in BACKING_DIR"
}

# ---- sqlite3
# writer_sql W ROWS: transactions of 250 inserts, updates, one rollback
writer_sql() {
	awk -v w="$1" -v n="$2" 'BEGIN {
		print "PRAGMA busy_timeout=60000;"
		print "PRAGMA cache_size=20;"
		for (i = 0; i < n; i++) {
			if (i % 250 == 0) print "BEGIN IMMEDIATE;"
			printf "INSERT INTO t(w, k, v) VALUES(%d, %d, hex(randomblob(%d)));\n", w, (i * 7919) % 1000, 20 + i % 300
			if (i % 250 == 249) {
				printf "UPDATE t SET k = k + 1 WHERE w = %d AND id %% 7 = 0;\n", w
				print "COMMIT;"
				if (i % 1000 == 749)
					print "BEGIN IMMEDIATE; DELETE FROM t; INSERT INTO t(w, k, v) VALUES(9, 9, zeroblob(100000)); ROLLBACK;"
			}
		}
		if (n % 250) print "COMMIT;"
	}'
}
sq() { x "$1" sqlite3 -batch -bail "${@:2}"; }
sqlite_common() {
	local mode=$1 rows=$((SCALE * 1000)) db=$d/db
	writer_sql 1 $rows >"$top/w1.sql"
	writer_sql 2 $rows >"$top/w2.sql"
	sq "create the database" "$db" "PRAGMA journal_mode=$mode;" \
		"CREATE TABLE t(id INTEGER PRIMARY KEY, w INTEGER, k INTEGER, v TEXT);" \
		"CREATE INDEX tk ON t(k);" || return
	local p1 p2 p3= rc1 rc2 rc3=0
	sqlite3 -batch -bail "$db" <"$top/w1.sql" >"$top/w1.out" 2>&1 & p1=$!
	sqlite3 -batch -bail "$db" <"$top/w2.sql" >"$top/w2.out" 2>&1 & p2=$!
	if [ "$mode" = WAL ]; then
		{ echo "PRAGMA busy_timeout=60000;"; for _ in $(seq 300); do echo "SELECT count(*) FROM t;"; done; } |
			sqlite3 -batch -bail "$db" >"$top/r.out" 2>&1 & p3=$!
	fi
	wait $p1; rc1=$?
	wait $p2; rc2=$?
	[ -n "$p3" ] && { wait $p3; rc3=$?; }
	cat "$top"/w?.out "$top/r.out" >>"$plog" 2>/dev/null
	[ $rc1 = 0 ] || bad "sqlite3 writer 1 exited $rc1: $(tail -n 5 "$top/w1.out")" || return
	[ $rc2 = 0 ] || bad "sqlite3 writer 2 exited $rc2: $(tail -n 5 "$top/w2.out")" || return
	[ $rc3 = 0 ] || bad "sqlite3 reader exited $rc3: $(tail -n 5 "$top/r.out")" || return
	sq "PRAGMA integrity_check" "$db" "PRAGMA integrity_check;" || return
	[ "$(cat "$out")" = ok ] || bad "PRAGMA integrity_check: $(head "$out")" || return
	sq "count" "$db" "SELECT count(*) FROM t;" || return
	[ "$(cat "$out")" = $((2 * rows)) ] || bad "$(cat "$out") rows, not $((2 * rows))" || return
	sq ".dump" "$db" .dump || return
	sha256sum <"$out" >"$top/dump.sum"
	sq "journal mode" "$db" "PRAGMA journal_mode;" || return
	[ "$(cat "$out")" = "${mode,,}" ] || bad "journal_mode is $(cat "$out"), not $mode"
}
sqlite_check() {
	[ ! -e "$b/db-journal" ] || bad "a hot journal left in BACKING_DIR" || return
	[ ! -s "$b/db-wal" ] || bad "a WAL with frames left in BACKING_DIR after the last connection closed" || return
	sq "PRAGMA integrity_check in BACKING_DIR" "$b/db" "PRAGMA integrity_check;" || return
	[ "$(cat "$out")" = ok ] || bad "PRAGMA integrity_check in BACKING_DIR: $(head "$out")" || return
	sq ".dump in BACKING_DIR" "$b/db" .dump || return
	sha256sum <"$out" | cmp -s - "$top/dump.sum" || bad "the database's content in BACKING_DIR differs from what was read through the mount"
}
on_sqlite() { sqlite_common DELETE; }
check_sqlite() { sqlite_check; }
on_sqlite_wal() { sqlite_common WAL; }
check_sqlite_wal() { sqlite_check; }

# ---- build the project on the mount
# (a sanitizer build of this test builds the release variant, CLI only)
mk() { x "$1" env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$2" "${@:3}" SAN= EXTRA_CFLAGS=; }
on_build() {
	scripts/install-deps --check-or-install >/dev/null 2>&1 ||
		cannot "the build's Debian packages are missing" || return
	local target=all
	[ "$SCALE" -ge 4 ] || target=build/release/wbcache
	mkdir "$d/proj"
	x "copy the project" cp -a src include tools tests bench fuzz Makefile scripts "$d/proj/" || return
	if ! mk "make -j2 $target on the mount" "$d/proj" -j2 "$target"; then
		# a source being edited that does not build is not the mount's fault
		local w=$why
		why=
		mkdir "$top/ref" && cp -a "$d/proj/." "$top/ref/" && rm -rf "$top/ref/build"
		mk "make on the local file system" "$top/ref" -j2 "$target" ||
			{ why=; cannot "the project's sources do not build here either"; return; }
		why=$w
		return 1
	fi
	x "the CLI built on the mount" "$d/proj/build/release/wbcache" mount --help || return
	grep -q "^usage: wbcache mount" "$out" || bad "the CLI built on the mount: $(head -n 3 "$out")" || return
	mk "make -n" "$d/proj" -n "$target" || return
	! grep -q -- " -c \| -o \|ar rcs" "$out" || bad "make would rebuild right after building: $(head "$out")" || return
	sums "$d/proj" >"$top/build.sums"
}
check_build() {
	sums "$b/proj" >"$top/build.sums.bk"
	x "the project's files (sources and build outputs) in BACKING_DIR" diff "$top/build.sums" "$top/build.sums.bk" || return
	x "the CLI in BACKING_DIR" "$b/proj/build/release/wbcache" mount --help || return
	local target=all
	[ "$SCALE" -ge 4 ] || target=build/release/wbcache
	mk "make -n in BACKING_DIR" "$b/proj" -n "$target" || return
	! grep -q -- " -c \| -o \|ar rcs" "$out" || bad "make would rebuild in BACKING_DIR (mtimes moved): $(head "$out")"
}

# ---- dbench
on_dbench() {
	local lf
	for lf in /usr/share/dbench/client.txt /usr/share/dbench4/client.txt ""; do
		[ -e "$lf" ] && break
	done
	[ -n "$lf" ] || cannot "no dbench loadfile (client.txt)" || return
	x "dbench" dbench -t $((SCALE * 2 + 2)) -D "$d" -c "$lf" 2 || return
	grep -q "^Throughput" "$out" || bad "dbench printed no throughput: $(tail -n 10 "$out")" || return
	# (dbench goes on without its start barrier when semget fails)
	! grep -v "failed to create barrier semaphore" "$out" | grep -qi "error\|failed\|unexpected" ||
		bad "dbench: $(grep -v "barrier semaphore" "$out" | grep -i "error\|failed\|unexpected" | head -n 10)"
}
check_dbench() {
	local left
	left=$(find "$b" -type f | head -n 5)
	[ -z "$left" ] || bad "files dbench deleted are in BACKING_DIR after unmount: $left"
}

# ---- two concurrent create/delete loops
on_loops() {
	local n=$((SCALE * 250)) p1 p2 rc1 rc2
	loop() {
		python3 - "$d" "$1" "$n" >"$top/loop$1.out" 2>&1 <<'PY'
import errno, os, sys
d, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(os.path.join(d, "sub"), exist_ok=True)
kept = []
ebadf = 0
def data(i):
    return (f"{w}:{i}\n" * (1 + (i * 37) % 700)).encode()
for i in range(n):
    name = os.path.join(d, f"w{w}-{i % 50}")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data(i))
    os.close(fd)
    with open(name, "rb") as f:
        got = f.read()
    assert got == data(i), f"{name}: read back {len(got)} bytes, wrote {len(data(i))}"
    new = os.path.join(d, "sub", f"w{w}-{i % 50}.r")
    for attempt in range(5):
        try:
            os.rename(name, new)
            break
        except OSError as e:
            # the known bug rename_ebadf: counted, the rename tried again
            if e.errno != errno.EBADF or attempt == 4:
                raise
            ebadf += 1
    assert os.stat(new).st_size == len(data(i)), f"{new}: size after rename"
    if i % 25 == 0:
        keep = os.path.join(d, f"keep-{w}-{i}")
        os.link(new, keep)
        kept.append(i)
    os.unlink(new)
    # shared names: the other loop creates and deletes them too
    s = os.path.join(d, "shared", f"f{i % 5}")
    for op in (lambda: os.mkdir(os.path.join(d, "shared")),
               lambda: open(s, "w").write(f"{w} {i}\n"),
               lambda: os.unlink(s),
               lambda: os.rmdir(os.path.join(d, "shared"))):
        try:
            op()
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY):
                raise
    if i % 100 == 0:
        left = [x for x in os.listdir(d) if x.startswith(f"w{w}-")]
        assert not left, f"names of loop {w} still listed: {left}"
with open(os.path.join(d, f"expect-{w}"), "w") as f:
    f.write(" ".join(map(str, kept)))
if ebadf:
    print(f"loop {w}: rename(2) into sub/ failed with EBADF {ebadf} times of {n}")
    sys.exit(3)
PY
	}
	loop 1 & p1=$!
	loop 2 & p2=$!
	wait $p1; rc1=$?
	wait $p2; rc2=$?
	cat "$top"/loop?.out >>"$plog"
	guards rename_ebadf
	if [ $rc1 = 3 ] || [ $rc2 = 3 ]; then
		why=$(cat "$top"/loop?.out | grep "failed with EBADF")
		known rename_ebadf && kbroken rename_ebadf
		[ -z "$why" ] || return 1
	fi
	[ $rc1 = 0 ] || [ $rc1 = 3 ] || bad "loop 1 exited $rc1: $(tail -n 5 "$top/loop1.out")" || return
	[ $rc2 = 0 ] || [ $rc2 = 3 ] || bad "loop 2 exited $rc2: $(tail -n 5 "$top/loop2.out")" || return
	# rename(2) from one directory to another right after lookups in 7
	# other directories (one request uses two directories' descriptors)
	x "rename across directories after lookups elsewhere" python3 - "$d" <<'PY' 
import errno, os, sys
d = os.path.join(sys.argv[1], "ring")
os.mkdir(d)
for k in range(8):
    os.mkdir(os.path.join(d, f"a{k}"))
fails = []
for i in range(200):
    src = os.path.join(d, f"f{i}")
    open(src, "w").write(f"{i}\n")
    os.mkdir(os.path.join(d, f"to{i}"))
    for k in range(7):
        try:
            os.stat(os.path.join(d, f"a{k}", f"none{i}"))
        except FileNotFoundError:
            pass
    for attempt in range(5):
        try:
            os.rename(src, os.path.join(d, f"to{i}", "f"))
            break
        except OSError as e:
            if attempt == 4:
                raise
            fails.append(f"{i}: {e.strerror}")
    assert open(os.path.join(d, f"to{i}", "f")).read() == f"{i}\n"
if fails:
    print(f"rename(2) failed {len(fails)} times of 200: {fails[:3]}")
    sys.exit(3)
PY
	if [ -n "$why" ]; then
		grep -q "^rename(2) failed .*Bad file descriptor" "$out" && known rename_ebadf && kbroken rename_ebadf
		[ -z "$why" ] || return 1
	fi
	x "check the loops' files on the mount" python3 - "$d" <<'PY'
import os, sys
d = sys.argv[1]
for w in (1, 2):
    for i in map(int, open(os.path.join(d, f"expect-{w}")).read().split()):
        got = open(os.path.join(d, f"keep-{w}-{i}"), "rb").read()
        assert got == (f"{w}:{i}\n" * (1 + (i * 37) % 700)).encode(), f"keep-{w}-{i}"
names = sorted(os.listdir(d))
extra = [n for n in names if not n.startswith(("keep-", "expect-")) and n not in ("sub", "shared", "ring")]
assert not extra, f"unexpected names: {extra}"
assert not os.listdir(os.path.join(d, "sub")), f"left in sub: {os.listdir(os.path.join(d, 'sub'))}"
PY
}
check_loops() {
	x "the loops' files in BACKING_DIR" python3 - "$b" <<'PY'
import os, sys
d = sys.argv[1]
want = set()
for w in (1, 2):
    for i in map(int, open(os.path.join(d, f"expect-{w}")).read().split()):
        want.add(f"keep-{w}-{i}")
        got = open(os.path.join(d, f"keep-{w}-{i}"), "rb").read()
        assert got == (f"{w}:{i}\n" * (1 + (i * 37) % 700)).encode(), f"keep-{w}-{i}: {len(got)} bytes"
        assert os.stat(os.path.join(d, f"keep-{w}-{i}")).st_nlink == 1, f"keep-{w}-{i}: links"
have = {n for n in os.listdir(d) if n.startswith("keep-")}
assert have == want, f"missing {sorted(want - have)[:5]}, extra {sorted(have - want)[:5]}"
assert not os.listdir(os.path.join(d, "sub")), f"left in sub: {os.listdir(os.path.join(d, 'sub'))}"
PY
}

# ---- fio --verify=crc32c: 2 jobs, random writes over files larger than
# the cache, read back and verified; after unmount verified again from the
# backing files (same seeds: fio's randrepeat)
fio_size=$((SCALE * 12))M
fio_args() {
	echo --name=v --ioengine="$1" --iodepth=8 --rw=randwrite --bsrange=4k-64k \
		--size=$fio_size --numjobs=2 --verify=crc32c --verify_fatal=1 \
		--verify_state_save=0 --group_reporting --directory="$2"
}
fio_run() {
	# shellcheck disable=SC2046
	x "fio --ioengine=$1 --verify=crc32c" fio $(fio_args "$1" "$d") --do_verify=1 || return
	! grep -q "verify: bad\|crc32c: verify failed\|err= *[1-9]" "$out" ||
		bad "fio: $(grep "verify\|err=" "$out" | head)"
}
fio_check() {
	# shellcheck disable=SC2046
	x "fio --verify_only on the backing files" fio $(fio_args "$1" "$b") --verify_only || return
	! grep -q "verify: bad\|crc32c: verify failed\|err= *[1-9]" "$out" ||
		bad "fio --verify_only in BACKING_DIR: $(grep "verify\|err=" "$out" | head)"
}
for e in psync libaio io_uring mmap; do
	eval "on_fio_$e() { fio_run $e; }; check_fio_$e() { fio_check $e; }"
done

# ---- stress-ng file-system stressors that verify their data
on_stress_ng() {
	x "stress-ng" stress-ng --temp-path "$d" --timeout 5s --verify --metrics-brief --verbose \
		--hdd 2 --hdd-opts wr-seq,rd-seq --hdd-bytes $((SCALE * 8))M \
		--seek 1 --seek-size $((SCALE * 4))M --dentry 1 --rename 1 --link 1 \
		--chmod 1 --dir 1 --fallocate 1 --fallocate-bytes $((SCALE * 4))M \
		--copy-file 1 --copy-file-bytes 128M --symlink 1 ||
		why="$(grep -E "stress-ng: (fail|error|warn)|signal|kill|terminated by|unsuccessful" "$out" |
			grep -v "process \[[0-9]*\] terminated$" | head -n 20)
$why"
	[ -z "$why" ] || return 1
	! grep -E "failed: [1-9]|fail:|verif.*(fail|error)" "$out" >/dev/null ||
		bad "stress-ng: $(grep -E "failed|fail:|verif" "$out" | head -n 10)"
}
check_stress_ng() {
	local left
	left=$(find "$b" -mindepth 1 | head -n 5)
	[ -z "$left" ] || bad "stress-ng's files are in BACKING_DIR after it removed them: $left"
}

# ---- fsx-style checker
cat >"$top/fsx.py" <<'PY'
"""fsx-style: random operations on one file, checked against a model."""
import errno, mmap, os, random, sys

path, model_path, seed, nops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
MAXSIZE, MAXLEN = 768 * 1024, 96 * 1024
rng = random.Random(seed)
model = bytearray()
log = []
disabled = set()


def fail(msg):
    with open(model_path, "wb") as f:
        f.write(model)
    sys.stderr.write(f"fsx {path} (seed {seed}): {msg}\nlast operations:\n  "
                     + "\n  ".join(log[-30:]) + "\n")
    sys.exit(1)


def compare(got, off, what):
    want = bytes(model[off:off + len(got)]) if off < len(model) else b""
    if got == want:
        return
    n = min(len(got), len(want))
    i = next((i for i in range(n) if got[i] != want[i]), n)
    fail(f"{what}: at {off + i:#x} (read {len(got):#x} bytes from {off:#x}, model size "
         f"{len(model):#x}): got {got[i:i + 8].hex() or 'EOF'}, want {want[i:i + 8].hex() or 'EOF'}")


def pread_all(fd, ln, off):
    parts = []
    while ln > 0:
        b = os.pread(fd, ln, off)
        if not b:
            break
        parts.append(b)
        ln -= len(b)
        off += len(b)
    return b"".join(parts)


def pwrite_all(fd, data, off):
    while data:
        n = os.pwrite(fd, data, off)
        data, off = data[n:], off + n


def resize(n):
    if n < len(model):
        del model[n:]
    else:
        model.extend(bytes(n - len(model)))


def opens(trunc=False):
    # write-only opens are direct; read-write ones use the kernel's page cache
    w = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0), 0o644)
    rw = os.open(path, os.O_RDWR)
    return w, rw


fdw, fdrw = opens(trunc=True)
counts = {}
OPS = ["write"] * 24 + ["read"] * 18 + ["mapread"] * 7 + ["mapwrite"] * 7 + ["truncate"] * 6 + \
      ["fsync"] * 3 + ["falloc"] * 3 + ["copy"] * 5 + ["reopen"] * 3 + ["stat"] * 5 + ["append"] * 4 + \
      ["full"] * 1
for n in range(nops):
    op = rng.choice(OPS)
    if op in disabled:
        op = "read"
    size = len(model)
    counts[op] = counts.get(op, 0) + 1
    if op == "write" or op == "mapwrite":
        off = rng.randrange(MAXSIZE)
        ln = min(rng.randrange(1, MAXLEN + 1), MAXSIZE - off)
        data = rng.randbytes(ln)
        if op == "write":
            fd = rng.choice((fdw, fdrw))
            log.append(f"{n} write {off:#x}+{ln:#x} ({'direct' if fd == fdw else 'cached'})")
            pwrite_all(fd, data, off)
        else:
            log.append(f"{n} mapwrite {off:#x}+{ln:#x}" + (f" (ftruncate to {off + ln:#x} first)" if off + ln > size else ""))
            if off + ln > size:
                os.ftruncate(fdrw, off + ln)
            m = mmap.mmap(fdrw, off + ln, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            m[off:off + ln] = data
            m.flush()
            m.close()
        if off + ln > len(model):
            resize(off + ln)
        model[off:off + ln] = data
    elif op == "read":
        off = rng.randrange(size + 1)
        ln = rng.randrange(MAXLEN)
        log.append(f"{n} read {off:#x}+{ln:#x}")
        compare(pread_all(fdrw, ln, off), off, "read")
    elif op == "mapread":
        if size == 0:
            continue
        off = rng.randrange(size)
        ln = rng.randrange(1, min(MAXLEN, size - off) + 1)
        log.append(f"{n} mapread {off:#x}+{ln:#x}")
        m = mmap.mmap(fdrw, size, mmap.MAP_SHARED, mmap.PROT_READ)
        got = m[off:off + ln]
        m.close()
        compare(got, off, "mapread")
    elif op == "truncate":
        ns = rng.randrange(MAXSIZE)
        fd = rng.choice((fdw, fdrw))
        log.append(f"{n} truncate {size:#x} -> {ns:#x} ({'direct' if fd == fdw else 'cached'} fd)")
        os.ftruncate(fd, ns)
        resize(ns)
    elif op == "fsync":
        fd = rng.choice((fdw, fdrw))
        log.append(f"{n} fsync")
        (os.fsync if rng.random() < 0.5 else os.fdatasync)(fd)
    elif op == "falloc":
        off = rng.randrange(MAXSIZE)
        ln = min(rng.randrange(1, MAXLEN + 1), MAXSIZE - off)
        log.append(f"{n} posix_fallocate {off:#x}+{ln:#x}")
        try:
            os.posix_fallocate(fdrw, off, ln)
        except OSError as e:
            log.append(f"  posix_fallocate: {e}: disabled")
            disabled.add("falloc")
            continue
        if off + ln > len(model):
            resize(off + ln)
    elif op == "copy":
        if size < 2:
            continue
        ln = rng.randrange(1, min(MAXLEN, size // 2) + 1)
        src = rng.randrange(size - ln + 1)
        # a destination not overlapping the source
        choices = [o for o in (rng.randrange(0, max(1, src - ln + 1)) if src >= ln else None,
                               rng.randrange(src + ln, MAXSIZE - ln + 1) if src + ln <= MAXSIZE - ln else None)
                   if o is not None]
        if not choices:
            continue
        dst = rng.choice(choices)
        log.append(f"{n} copy_file_range {src:#x}+{ln:#x} -> {dst:#x}")
        try:
            done = os.copy_file_range(fdrw, fdw, ln, src, dst)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            log.append(f"  copy_file_range: {e}: disabled")
            disabled.add("copy")
            continue
        data = bytes(model[src:src + done])
        if dst + done > len(model):
            resize(dst + done)
        model[dst:dst + done] = data
    elif op == "append":
        ln = rng.randrange(1, MAXLEN // 4)
        if size + ln > MAXSIZE:
            continue
        data = rng.randbytes(ln)
        log.append(f"{n} append {ln:#x} at {size:#x}")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, data)
        os.close(fd)
        model.extend(data)
    elif op == "reopen":
        trunc = rng.random() < 0.1
        log.append(f"{n} reopen" + (" O_TRUNC" if trunc else ""))
        os.close(fdw)
        os.close(fdrw)
        fdw, fdrw = opens(trunc)
        if trunc:
            resize(0)
    elif op == "stat":
        log.append(f"{n} stat")
        for what, st in (("fstat", os.fstat(fdrw)), ("stat", os.stat(path))):
            if st.st_size != len(model):
                fail(f"{what}: size {st.st_size:#x}, model {len(model):#x}")
    if op == "full" or n % 500 == 499:
        log.append(f"{n} full compare")
        with open(path, "rb") as f:
            compare(f.read(), 0, "full read")
        if os.stat(path).st_size != len(model):
            fail("size at full compare")
os.close(fdw)
os.close(fdrw)
with open(path, "rb") as f:
    compare(f.read(), 0, "final read")
with open(model_path, "wb") as f:
    f.write(model)
print(f"fsx {path}: {nops} operations ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))});"
      f" not supported: {' '.join(sorted(disabled)) or 'none'}")
PY
on_fsx() {
	local n=$((SCALE * 2500)) p1 p2 rc1 rc2 seed=${WBCACHE_FSX_SEED:-$RANDOM}
	fsx_seed=$seed
	echo "fsx seeds $seed, $((seed + 1)) (WBCACHE_FSX_SEED=$seed repeats them)"
	python3 "$top/fsx.py" "$d/f1" "$top/f1.model" "$seed" "$n" >"$top/fsx1.out" 2>&1 & p1=$!
	python3 "$top/fsx.py" "$d/f2" "$top/f2.model" $((seed + 1)) "$n" >"$top/fsx2.out" 2>&1 & p2=$!
	wait $p1; rc1=$?
	wait $p2; rc2=$?
	cat "$top"/fsx?.out | tee -a "$plog"
	[ $rc1 = 0 ] || bad "fsx 1 (seed $seed) exited $rc1: $(tail -n 32 "$top/fsx1.out")" || return
	[ $rc2 = 0 ] || bad "fsx 2 (seed $((seed + 1))) exited $rc2: $(tail -n 32 "$top/fsx2.out")"
}
check_fsx() {
	local i
	for i in 1 2; do
		cmp "$top/f$i.model" "$b/f$i" >"$out" 2>&1 ||
			bad "fsx (seed $fsx_seed) file $i in BACKING_DIR differs from the model: $(cat "$out")" || return
	done
}

part tar "tar diff" "$OPTS"
part rsync "rsync tar cmp" "$OPTS"
part git "git" "$OPTS"
part sqlite "sqlite3" "$OPTS"
part sqlite_wal "sqlite3" "$OPTS"
part build "make cc" "mem=64M"
part dbench "dbench" "$OPTS"
part loops "python3" "$OPTS"
for e in psync libaio io_uring mmap; do
	part fio_$e "fio" "mem=$((SCALE * 8))M,dirty_expire_centisecs=100,dirty_writeback_centisecs=50"
done
part stress_ng "stress-ng" "$OPTS"
part fsx "python3" "mem=4M,dirty_expire_centisecs=100,dirty_writeback_centisecs=50"

for k in $KNOWN_BROKEN; do
	case " $guarded " in *" $k "*) ;; *) continue ;; esac
	case " $all_hits " in *" $k "*) ;; *)
		echo "$k is listed in WBCACHE_KNOWN_BROKEN but did not fail: its name can go" ;;
	esac
done
echo
echo "part        seconds  result"
printf '%s\n' "${report[@]}"
[ $ran -gt 0 ] || skip "none of the programs could run"
[ $nfail -eq 0 ] || fail "$nfail part(s) failed"
echo "mount program tests passed"
