#!/usr/bin/env bash
# Security of a root mount with allow_other, as other users see it:
# set-user-ID and set-group-ID bits (and a file capability) cleared when
# an unprivileged user writes, truncates or opens with O_TRUNC (kept for root, and S_ISGID kept
# without group execute for a member of the file's group, as the kernel does); files and directories made
# in a set-group-ID directory take its group (directories its bit too);
# the creator's umask is the one that counts, not the daemon's; POSIX
# ACLs enforced, set through the mount, default ACLs applied; an O_CREAT
# open of an existing file the kernel did not know checks the caller's
# permission; a new file keeps its set-user-ID bit.
# Needs root (allow_other, setpriv to another user); skips otherwise.
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skip: needs root"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: no setpriv"; exit 77; }
. tests/mountlib.bash
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# the system's python: one under root's home is not another user's to run
py=/usr/bin/python3; [ -x "$py" ] || py=$(command -v python3)

do_mount allow_other
mode() { stat -c %a "$1"; }

# ---- kill-priv: write, truncate, O_TRUNC by another user
for f in w t o r n; do
	echo data >"$mt/$f"; chmod 6777 "$mt/$f"
done
echo more | as_nobody tee -a "$mt/w" >/dev/null || fail "append as nobody"
[ "$(mode "$mt/w")" = 777 ] || fail "write by nobody left mode $(mode "$mt/w")"
[ "$(mode "$bk/w")" = 777 ] || fail "backing mode after write: $(mode "$bk/w")"
as_nobody truncate -s 2 "$mt/t" || fail "truncate as nobody"
[ "$(mode "$mt/t")" = 777 ] || fail "truncate by nobody left mode $(mode "$mt/t")"
as_nobody sh -c "echo x >'$mt/o'" || fail "O_TRUNC open as nobody"
[ "$(mode "$mt/o")" = 777 ] || fail "O_TRUNC by nobody left mode $(mode "$mt/o")"
echo root >>"$mt/r"
[ "$(mode "$mt/r")" = 6777 ] || fail "write by root cleared the bits: $(mode "$mt/r")"
# S_ISGID without group execute (the kernel's rule): stays for a member
# of the file's group, goes for a caller outside it
chmod 2666 "$mt/n"; chgrp 65534 "$mt/n"
echo more | as_nobody tee -a "$mt/n" >/dev/null || fail "append as nobody (2666, its group)"
[ "$(mode "$mt/n")" = 2666 ] || fail "S_ISGID without g+x, a member: mode $(mode "$mt/n")"
echo data >"$mt/n2"; chmod 2666 "$mt/n2"
echo more | as_nobody tee -a "$mt/n2" >/dev/null || fail "append as nobody (2666)"
[ "$(mode "$mt/n2")" = 666 ] || fail "S_ISGID without g+x, not a member: mode $(mode "$mt/n2")"
grep -q more "$mt/w" || fail "the write itself"

# ---- a file capability goes when another user writes (not when root does)
echo data >"$mt/cap"; chmod 777 "$mt/cap"
setcap() { python3 -c '
import os, struct, sys
# vfs_cap_data revision 2, effective, CAP_NET_BIND_SERVICE permitted
os.setxattr(sys.argv[1], "security.capability", struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0))' "$1"; }
hascap() { python3 -c '
import os, sys
sys.exit(0 if "security.capability" in os.listxattr(sys.argv[1]) else 1)' "$1"; }
if setcap "$bk/cap" 2>/dev/null; then
	echo more >>"$mt/cap"
	hascap "$bk/cap" || fail "a write by root removed the file capability"
	echo more | as_nobody tee -a "$mt/cap" >/dev/null || fail "append as nobody (cap)"
	hascap "$bk/cap" && fail "a write by nobody kept the file capability"
	setcap "$mt/cap" || fail "setting a file capability through the mount"
	as_nobody truncate -s 1 "$mt/cap" || fail "truncate as nobody (cap)"
	hascap "$bk/cap" && fail "a truncate by nobody kept the file capability"
fi

# ---- chown to the same owner and group (-1, -1) clears the set-id bits
# of a file, as any chown (ext4: chown_common's ATTR_KILL_SUID), by its
# owner or by root; the kernel sends the file system a SETATTR of nothing
chown_keep() { "$py" -c 'import os, sys; os.chown(sys.argv[1], -1, -1)' "$1"; }
echo data >"$mt/cn"; chown 65534:65534 "$mt/cn"; chmod 6755 "$mt/cn"
as_nobody "$py" -c 'import os, sys; os.chown(sys.argv[1], -1, -1)' "$mt/cn" ||
	fail "chown -1 -1 as the owner"
[ "$(mode "$mt/cn")" = 755 ] || fail "chown -1 -1 by the owner left mode $(mode "$mt/cn")"
echo data >"$mt/cr0"; chmod 6755 "$mt/cr0"
chown_keep "$mt/cr0" || fail "chown -1 -1 as root"
[ "$(mode "$mt/cr0")" = 755 ] || fail "chown -1 -1 by root left mode $(mode "$mt/cr0")"
echo data >"$mt/cr1"; chmod 2745 "$mt/cr1"
chown_keep "$mt/cr1"
[ "$(mode "$mt/cr1")" = 2745 ] || fail "chown -1 -1 by root cleared S_ISGID without g+x: $(mode "$mt/cr1")"
mkdir "$mt/cd"; chmod 2755 "$mt/cd"; chown_keep "$mt/cd"
[ "$(mode "$mt/cd")" = 2755 ] || fail "chown -1 -1 cleared a directory's S_ISGID: $(mode "$mt/cd")"

# ---- trusted.* names are listed to root only, as the backing file system
# lists them (the daemon, root, listed them to every caller)
echo data >"$mt/tx"
if setfattr -n trusted.wbctest -v 1 "$mt/tx" 2>/dev/null && setfattr -n user.wbctest -v 1 "$mt/tx"; then
	names=$(as_nobody "$py" -c 'import os, sys; print(sorted(os.listxattr(sys.argv[1])))' "$mt/tx")
	[ "$names" = "['user.wbctest']" ] || fail "listxattr as nobody: $names"
	names=$("$py" -c 'import os, sys; print(sorted(os.listxattr(sys.argv[1])))' "$mt/tx")
	[ "$names" = "['trusted.wbctest', 'user.wbctest']" ] || fail "listxattr as root: $names"
fi

# ---- set-group-ID directories
mkdir "$mt/g"; chgrp 100 "$mt/g"; chmod 2777 "$mt/g"
as_nobody touch "$mt/g/f" || fail "create as nobody"
as_nobody mkdir "$mt/g/sub" || fail "mkdir as nobody"
[ "$(stat -c %g "$mt/g/f")" = 100 ] || fail "file in a setgid dir has group $(stat -c %g "$mt/g/f")"
[ "$(stat -c %u "$mt/g/f")" = 65534 ] || fail "file owner $(stat -c %u "$mt/g/f")"
[ "$(stat -c %g "$bk/g/sub")" = 100 ] || fail "subdirectory group $(stat -c %g "$bk/g/sub")"
[ $(( 0$(mode "$bk/g/sub") & 02000 )) != 0 ] || fail "subdirectory lost the setgid bit: $(mode "$bk/g/sub")"
as_nobody touch "$mt/plain" 2>/dev/null   # root dir 755: refused
[ -e "$bk/plain" ] && fail "nobody created a file in a 755 directory"

# ---- an open with O_CREAT of a name the kernel believes absent (its
# negative entry is stale: the file was made in the backing directory)
# opens the file only with the caller's permission: the kernel checks
# nothing of a CREATE's file, the daemon does
mkdir "$mt/cr"; chmod 1777 "$mt/cr"
as_nobody stat "$mt/cr/secret" >/dev/null 2>&1   # the negative entry, cached
echo "root's secret" >"$bk/cr/secret"; chmod 600 "$bk/cr/secret"
got=$(as_nobody "$py" -c '
import os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    print("opened:", os.read(fd, 100))
except OSError as e:
    print(e.errno)' "$mt/cr/secret")
[ "$got" = 13 ] || fail "O_CREAT over another user's 0600 file (stale negative entry): $got"
as_nobody stat "$mt/cr/trunc" >/dev/null 2>&1
echo "keep me" >"$bk/cr/trunc"; chmod 644 "$bk/cr/trunc"
as_nobody sh -c "echo x >'$mt/cr/trunc'" 2>/dev/null && fail "O_CREAT|O_TRUNC over a 0644 file of root's"
[ "$(cat "$bk/cr/trunc")" = "keep me" ] || fail "a refused O_TRUNC cut the file: $(cat "$bk/cr/trunc")"
as_nobody stat "$mt/cr/open" >/dev/null 2>&1
echo "for all" >"$bk/cr/open"; chmod 666 "$bk/cr/open"
as_nobody sh -c "echo more >>'$mt/cr/open'" || fail "O_CREAT|O_APPEND over a 0666 file refused"
[ "$(cat "$mt/cr/open")" = "for all
more" ] || fail "append through a stale negative entry: $(cat "$mt/cr/open")"

# ---- a new file's set-user-ID bit stays (the daemon's chown to the
# creator clears it, as any chown)
as_nobody "$py" -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o4755))' \
	"$mt/cr/suid" || fail "create 04755 as nobody"
[ "$(mode "$bk/cr/suid")" = 4755 ] || fail "a new 04755 file of nobody's: mode $(mode "$bk/cr/suid")"
# ... and one made by mknod (the chown cleared it), a FIFO's too
as_nobody "$py" -c 'import os, sys; os.mknod(sys.argv[1], 0o104755); os.mkfifo(sys.argv[2], 0o4644)' \
	"$mt/cr/msuid" "$mt/cr/mfifo" || fail "mknod 04755 as nobody"
[ "$(mode "$bk/cr/msuid")" = 4755 ] && [ "$(stat -c %u "$bk/cr/msuid")" = 65534 ] ||
	fail "mknod 04755 as nobody: mode $(mode "$bk/cr/msuid"), owner $(stat -c %u "$bk/cr/msuid")"
[ "$(mode "$bk/cr/mfifo")" = 4644 ] || fail "mkfifo 04644 as nobody: mode $(mode "$bk/cr/mfifo")"

# ---- the creator's umask
(umask 002; touch "$mt/u"; mkdir "$mt/ud")
[ "$(mode "$bk/u")" = 664 ] || fail "umask 002 file: $(mode "$bk/u")"
[ "$(mode "$bk/ud")" = 775 ] || fail "umask 002 directory: $(mode "$bk/ud")"
(umask 077; touch "$mt/u2")
[ "$(mode "$bk/u2")" = 600 ] || fail "umask 077 file: $(mode "$bk/u2")"

# ---- POSIX ACLs, as the backing file system has them: enforced (a named
# user refused where the mode alone would let it read, and let in where
# the mode alone would not), set through the mount too; a default ACL
# gives new entries its modes (the umask does not count there)
setacl() {   # setacl PATH access|default TAG:ID:PERM... (u U g G m o)
	python3 - "$@" <<'EOF'
import os, struct, sys
path, kind = sys.argv[1:3]
tags = {"u": 1, "U": 2, "g": 4, "G": 8, "m": 0x10, "o": 0x20}
ents = sorted((tags[t], int(p, 8), int(i) if i else 0xffffffff)
              for t, i, p in (e.split(":") for e in sys.argv[3:]))
os.setxattr(path, "system.posix_acl_" + kind,
            struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in ents))
EOF
}
if setacl "$bk" access u::7 g::5 o::5 2>/dev/null; then
	echo secret >"$bk/acl1"; chmod 644 "$bk/acl1"
	setacl "$bk/acl1" access u::6 U:65534:0 g::4 m::4 o::4
	as_nobody cat "$mt/acl1" >/dev/null 2>&1 && fail "an ACL's refusal not enforced"
	echo shared >"$mt/acl2"; chmod 640 "$mt/acl2"
	setacl "$mt/acl2" access u::6 U:65534:6 g::4 m::6 o::0 || fail "setting an ACL through the mount"
	[ "$(as_nobody cat "$mt/acl2" 2>&1)" = shared ] || fail "an ACL's grant not enforced"
	echo more | as_nobody tee -a "$mt/acl2" >/dev/null || fail "an ACL's write grant"
	mkdir "$mt/dacl"
	setacl "$mt/dacl" default u::7 g::7 o::5 || fail "setting a default ACL through the mount"
	(umask 022; touch "$mt/dacl/f"; mkdir "$mt/dacl/d")
	[ "$(mode "$bk/dacl/f")" = 664 ] && [ "$(mode "$bk/dacl/d")" = 775 ] ||
		fail "default ACL: file $(mode "$bk/dacl/f"), directory $(mode "$bk/dacl/d") (expected 664, 775)"
else
	echo "note: the backing file system takes no ACLs: not tested"
fi

do_umount || fail "umount: $(cat "$top/umount.log")"
[ "$(mode "$bk/w")" = 777 ] && [ "$(cat "$bk/w")" = "data
more" ] || fail "after unmount: $(mode "$bk/w") $(cat "$bk/w")"
echo "mount security tests passed"
