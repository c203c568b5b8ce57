#!/usr/bin/env bash
# The example backend (examples/dirstore.c) as a user builds it, outside
# the tree against an installed copy of the library (`make install
# DESTDIR=...`, `pkg-config --cflags --libs wbcache`: the shared library),
# against the same code built in the tree (linked with the archive): both
# write SIZE_MB MiB through a 64 MiB cache into a directory on tmpfs
# (/dev/shm: the file system's cost out of the way), alternating, ROUNDS
# rounds; medians and their ratio.  (Release build only: it makes the
# shared library.)
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${WBCACHE_BUILD:-build/release}
SIZE_MB=${SIZE_MB:-512}
ROUNDS=${ROUNDS:-5}
[ "$BUILD" = build/release ] || { echo "example.sh: needs the release build" >&2; exit 1; }
top=$(mktemp -d /var/tmp/wbc-example-XXXXXX)
store=$(mktemp -d /dev/shm/wbc-example-XXXXXX)
trap 'rm -rf "$top" "$store"' EXIT
make -s install PREFIX=/opt/wbcache DESTDIR="$top/root" >"$top/make.log" 2>&1 ||
	{ tail -5 "$top/make.log"; exit 1; }
lib=$top/root/opt/wbcache/lib
export PKG_CONFIG_SYSROOT_DIR=$top/root PKG_CONFIG_PATH=$lib/pkgconfig
cp examples/dirstore.c examples/dirstore.h examples/dirstore_main.c "$top/"
(cd "$top" && cc -O2 -Wall -Wextra -Werror $(pkg-config --cflags wbcache) dirstore_main.c dirstore.c \
	$(pkg-config --libs wbcache) -o dirstore-demo)
run() { rm -f "$store"/*; LD_LIBRARY_PATH=$lib "$1" "$store" "$SIZE_MB" |
	sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p'; }
i=() o=()
for r in $(seq "$ROUNDS"); do
	i+=("$(run "$BUILD/examples/dirstore-demo")")
	o+=("$(run "$top/dirstore-demo")")
	echo "round $r: built in ${i[-1]} MB/s, built outside ${o[-1]} MB/s"
done
I=$(printf '%s\n' "${i[@]}" | median)
O=$(printf '%s\n' "${o[@]}" | median)
echo
echo "dirstore example, $SIZE_MB MiB into tmpfs through a 64 MiB cache, median of $ROUNDS rounds"
printf '%-52s %8s\n' "build" "MB/s"
printf '%-52s %8s\n' "in the tree (archive)" "$I"
printf '%-52s %8s  %.2fx\n' "outside, installed shared library, pkg-config" "$O" \
	"$(ratio "$O" "$I")"
