#!/usr/bin/env bash
# `make install` into a scratch DESTDIR, then the example program built
# from outside the tree with `pkg-config --cflags --libs wbcache` only,
# against the shared library and (--static) the archive: it runs and copies
# a file; it defines its own iput() without a clash; the example backend
# (examples/dirstore.c, on the installed wbcache_backend.h) builds, writes
# its files and checks them; neither library
# exports anything but wbc_*; the soname carries the major version; the
# man pages and the nbdkit filter (in nbdkit's filter directory under
# PREFIX) are installed; make uninstall removes every file again.  (The release build makes the shared library:
# other builds skip.)
set -u
cd "$(dirname "$0")/.."
BUILD=${WBCACHE_BUILD:-build/release}
[ "$BUILD" = build/release ] || { echo "skip: the shared library is built in the release build"; exit 77; }
command -v pkg-config >/dev/null || { echo "skip: no pkg-config"; exit 77; }
top=$(mktemp -d /var/tmp/wbc-install-XXXXXX)
trap 'rm -rf "$top"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
dest=$top/root prefix=/opt/wbcache
make -s install PREFIX=$prefix DESTDIR="$dest" >"$top/make.log" 2>&1 || fail "make install: $(tail -5 "$top/make.log")"
lib=$dest$prefix/lib
for f in bin/wbcache include/wbcache.h include/wbcache_backend.h lib/libwbcache.a lib/libwbcache.so lib/pkgconfig/wbcache.pc lib/pkgconfig/wbcache-static.pc \
	 share/man/man1/wbcache.1 share/man/man8/wbcache-mount.8 \
	 share/man/man3/libwbcache.3 share/man/man3/wbcache_backend.3 share/man/man3/wbc_pwrite.3 \
	 share/man/man1/nbdkit-wbcache-filter.1 \
	 lib/$(cc -print-multiarch)/nbdkit/filters/nbdkit-wbcache-filter.so; do
	[ -e "$dest$prefix/$f" ] || fail "not installed: $f"
done
[ "$(objdump -p "$lib/libwbcache.so" | awk '/SONAME/ {print $2}')" = libwbcache.so.0 ] || fail "soname"
others=$(nm -D --defined-only "$lib/libwbcache.so" | awk '$2 != "A" && $3 !~ /^wbc_/ {print $3}')
[ -z "$others" ] || fail "the shared library exports: $others"
others=$(nm -g --defined-only "$lib/libwbcache.a" | awk 'NF == 3 && $3 !~ /^wbc_/ {print $3}')
[ -z "$others" ] || fail "the archive exports: $(echo $others | head -c 300)"
# exactly the functions the installed headers declare: no internal wbc_ helper
declared=$(grep -ho 'wbc_[a-z0-9_]*(' "$dest$prefix"/include/wbcache*.h | tr -d '(' | sort -u)
for l in "$lib/libwbcache.so" "$lib/libwbcache.a"; do
	case $l in *.so) got=$(nm -D --defined-only "$l" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u) ;;
		   *) got=$(nm -g --defined-only "$l" | awk 'NF == 3 {print $3}' | sort -u) ;; esac
	extra=$(comm -13 <(echo "$declared") <(echo "$got"))
	[ -z "$extra" ] || fail "$(basename "$l") exports what no public header declares: $extra"
	[ "$(echo "$got" | grep -c .)" -ge 30 ] || fail "$(basename "$l") exports too little: $got"
done

export PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cflags=$(pkg-config --cflags wbcache) libs=$(pkg-config --libs wbcache) static=$(pkg-config --libs wbcache-static)
cp examples/wbcopy.c "$top/"
(cd "$top" && cc -Wall -Wextra -Werror $cflags wbcopy.c $libs -o wbcopy-shared) || fail "build against the shared library"
(cd "$top" && cc -Wall -Wextra -Werror $cflags wbcopy.c $static -o wbcopy-static) ||
	fail "build against the archive (pkg-config --libs wbcache-static: $static)"
mkdir "$top/out"
head -c 3000000 /dev/urandom >"$top/in"
LD_LIBRARY_PATH=$lib "$top/wbcopy-shared" "$top/out" a <"$top/in" >"$top/a.log" || fail "wbcopy (shared): $(cat "$top/a.log")"
"$top/wbcopy-static" "$top/out" b <"$top/in" >"$top/b.log" || fail "wbcopy (static): $(cat "$top/b.log")"
cmp "$top/in" "$top/out/a" && cmp "$top/in" "$top/out/b" || fail "copies differ"
grep -q "^wbcache $(sed -n 's/^#define WBCACHE_VERSION "\(.*\)"/\1/p' include/wbcache.h): 3000000 bytes copied" "$top/a.log" ||
	fail "wbc_version / report: $(cat "$top/a.log")"
ldd "$top/wbcopy-static" | grep -q libwbcache && fail "the static build links the shared library"
# a read that fails is a failed copy (a directory for input)
"$top/wbcopy-static" "$top/out" c <"$top/out" >"$top/c.log" 2>&1 && fail "wbcopy: a failed read exits 0"
grep -q "wbcopy: read: Is a directory" "$top/c.log" || fail "wbcopy, a failed read: $(cat "$top/c.log")"

# a backend of the user's own, written against the installed
# wbcache_backend.h only (examples/dirstore.c), as a user builds it
cp examples/dirstore.c examples/dirstore.h examples/dirstore_main.c "$top/"
(cd "$top" && cc -Wall -Wextra -Werror $cflags dirstore_main.c dirstore.c $libs -o dirstore-demo) ||
	fail "build the example backend against the installed library"
mkdir "$top/store"
LD_LIBRARY_PATH=$lib "$top/dirstore-demo" "$top/store" 16 100 >"$top/d.log" 2>&1 ||
	fail "dirstore-demo: $(cat "$top/d.log")"
grep -q "^dirstore-demo: 16 MiB in .* MB/s (.* batches, .* I/Os, [1-9][0-9]* flushes)" "$top/d.log" ||
	fail "dirstore-demo report: $(cat "$top/d.log")"
[ "$(stat -c %s "$top/store/file3")" = $((4 << 20)) ] || fail "dirstore-demo's files"
for bad in 12abc "" -1 99999999999999999999; do
	LD_LIBRARY_PATH=$lib "$top/dirstore-demo" "$top/store" "$bad" >"$top/d.log" 2>&1
	[ $? = 2 ] && grep -q "MiB must be" "$top/d.log" || fail "dirstore-demo MiB '$bad': $(cat "$top/d.log")"
done

# make uninstall takes back every file make install put there
make -s uninstall PREFIX=$prefix DESTDIR="$dest" >"$top/make.log" 2>&1 || fail "make uninstall: $(tail -5 "$top/make.log")"
left=$(find "$dest" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $(echo $left | head -c 300)"
echo "install tests passed"
