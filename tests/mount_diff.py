#!/usr/bin/env python3
"""Differential test of the wbcache mount against a local directory.

Usage: mount_diff.py REF MNT SEED NOPS [EXPLICIT]

EXPLICIT: a file for --compare (and EXPLICIT.log, every step's result).
To minimise a difference: DIFF_RECORD=FILE records each step's random
state; DIFF_STEPS=FILE (a pickle of (steps, chosen, states) from it)
replays only those steps.  DIFF_NO_CONC=1: not the concurrent workloads
that follow the sequence (conc(): run on each tree, each side checked
for what any order of its threads allows; then the ref's cc/ is made the
mount's, for --compare).

Runs the same seeded random sequence of file-system operations under REF
(a local directory) and MNT (the mount), comparing every result (value or
errno) and the data read.  Prints each difference; exit status 1 if any.
`mount_diff.py --compare REF BACKING` compares the trees after unmount.
"""
import ctypes
import errno
import mmap
import os
import random
import stat
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                           ctypes.c_long]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(Timespec), ctypes.c_int]
libc.futimens.argtypes = [ctypes.c_int, ctypes.POINTER(Timespec)]
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
AT_SYMLINK_NOFOLLOW = 0x100
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
FL_KEEP_SIZE, FL_PUNCH_HOLE, FL_ZERO_RANGE = 1, 2, 0x10
SEEK_DATA, SEEK_HOLE = 3, 4
PAST_EXT4 = (1 << 44) - 4096    # ext4's largest file (4 KiB blocks)

diffs = []


def call(f, *a):
    try:
        return ("ok", f(*a))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def c_call(f, *a):
    r = f(*a)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def renameat2(old, new, flags):
    return c_call(libc.renameat2, AT_FDCWD, old.encode(), AT_FDCWD,
                  new.encode(), flags)


def fallocate(fd, mode, off, ln):
    return c_call(libc.fallocate, fd, mode, off, ln)


def utimens(path_or_fd, at, mt, follow=True):
    """utimensat/futimens; @at, @mt: ns, or UTIME_NOW/UTIME_OMIT"""
    ts = (Timespec * 2)()
    for i, t in enumerate((at, mt)):
        if t in (UTIME_NOW, UTIME_OMIT):
            ts[i].tv_sec, ts[i].tv_nsec = 0, t
        else:
            ts[i].tv_sec, ts[i].tv_nsec = divmod(t, 10 ** 9)
    if isinstance(path_or_fd, int):
        return c_call(libc.futimens, path_or_fd, ts)
    return c_call(libc.utimensat, AT_FDCWD, path_or_fd.encode(), ts,
                  0 if follow else AT_SYMLINK_NOFOLLOW)


libc.opendir.restype = ctypes.c_void_p
libc.opendir.argtypes = [ctypes.c_char_p]
libc.readdir.restype = ctypes.c_void_p
libc.readdir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.telldir.argtypes = [ctypes.c_void_p]
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.rewinddir.argtypes = [ctypes.c_void_p]
libc.closedir.argtypes = [ctypes.c_void_p]


def readdir(dp):
    """the next name of a directory stream (struct dirent's d_name at
    19), None at its end"""
    ctypes.set_errno(0)
    e = libc.readdir(dp)
    if not e:
        if ctypes.get_errno():
            raise OSError(ctypes.get_errno(), "readdir")
        return None
    return ctypes.string_at(e + 19).decode()


def stat_key(st, explicit):
    k = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink,
         st.st_uid, st.st_gid)
    if not stat.S_ISDIR(st.st_mode):
        k += (st.st_size,)
    if explicit and not stat.S_ISDIR(st.st_mode):
        k += ("mtime", st.st_mtime_ns)
    return k


def short(x, other):
    """@x for a message: bytes long or unlike @other's, by their length
    and where they first differ"""
    def sh(v, o):
        if isinstance(v, bytes) and len(v) > 64:
            at = next((i for i in range(min(len(v), len(o))) if v[i] != o[i]),
                      min(len(v), len(o))) if isinstance(o, bytes) else 0
            return "<%d bytes, first difference at %d: %r>" % (len(v), at, v[at:at + 16])
        if isinstance(v, (tuple, list)):
            o = o if isinstance(o, (tuple, list)) and len(o) == len(v) else [None] * len(v)
            return "(" + ", ".join(sh(a, b) for a, b in zip(v, o)) + ")"
        return repr(v)
    return sh(x, other)


def same_file(ha, hb):
    """two handles of one file: a splice from it to itself moves pages of
    the page cache that it writes over as it goes (ext4's result is not
    a copy's), unlike a mount's copies"""
    try:
        return os.fstat(ha[0]).st_ino == os.fstat(hb[0]).st_ino
    except OSError:
        return False


class Run:
    def __init__(self, ref, mnt, seed):
        self.roots = (ref, mnt)
        self.r = random.Random(seed)
        self.fds = []          # [ref_fd, mnt_fd, flags, desc]
        self.explicit = {}     # ref inode -> mtime set explicitly
        self.step = 0
        self.log = []
        self.replay = None     # step -> handle chosen (a replay of some steps)
        self.chosen = {}
        self.states = {}

    def names(self):
        return ["f%d" % i for i in range(6)] + ["d0", "d1", "d0/f0",
                "d0/f1", "d0/s", "d1/f2", "d0/s/f3", "l0", "l1", "d1/l2"]

    def pick(self):
        return self.r.choice(self.names())

    def both(self, desc, f, cmp=None):
        """f(root_index, root) on each tree; compare results"""
        res = [None, None]
        for i in (0, 1):
            res[i] = call(f, i, self.roots[i])
        a, b = res
        same = cmp(a, b) if cmp else a == b
        self.log.append("%d %s -> %r" % (self.step, desc, a))
        if not same:
            diffs.append("step %d: %s: ref %s, mount %s" % (self.step, desc, short(a, b), short(b, a)))
        return a, b

    def touched(self, ref_fd=None, path=None):
        # data changed: mtime no longer the explicit one
        try:
            st = os.fstat(ref_fd) if ref_fd is not None else os.stat(path)
            self.explicit.pop(st.st_ino, None)
        except OSError:
            pass

    def op(self):
        r = self.r
        ops = [self.o_open] * 6 + [self.o_close] * 3 + [self.o_pwrite] * 6 + \
            [self.o_pread] * 4 + [self.o_write] * 2 + [self.o_read] * 2 + \
            [self.o_ftruncate] * 2 + [self.o_truncate, self.o_fsync,
             self.o_rename, self.o_rename2, self.o_link, self.o_unlink,
             self.o_mkdir, self.o_rmdir, self.o_symlink, self.o_readlink,
             self.o_chmod, self.o_utime, self.o_fstat, self.o_listdir,
             self.o_seek, self.o_fallocate, self.o_xattr, self.o_fchmod,
             self.o_futime, self.o_pwritev, self.o_copy, self.o_chown,
             self.o_mkfifo, self.o_mmap, self.o_utimens, self.o_mmapw,
             self.o_mmaptrunc, self.o_sendfile, self.o_splice, self.o_dio,
             self.o_dirstream, self.o_asuser]
        ops += [self.o_stat] * 3
        r.choice(ops)()

    def fd(self):
        x = self.r.random()
        if self.replay is not None:
            want = self.replay.get(self.step)
            k = [h[3] for h in self.fds].index(want) if want in [h[3] for h in self.fds] else None
        else:
            k = int(x * len(self.fds)) if self.fds else None
        self.chosen[self.step] = self.fds[k][3] if k is not None else None
        return k

    def o_open(self):
        p = self.pick()
        acc = self.r.choice([os.O_RDONLY, os.O_WRONLY, os.O_RDWR, os.O_RDWR])
        fl = acc
        for f in (os.O_CREAT, os.O_EXCL, os.O_TRUNC, os.O_APPEND, os.O_CREAT,
                  os.O_NOFOLLOW, os.O_DSYNC, os.O_SYNC):
            if self.r.random() < 0.25:
                fl |= f
        if self.r.random() < 0.1:
            fl |= os.O_DIRECTORY
        if acc == os.O_RDONLY and fl & os.O_TRUNC:
            fl &= ~os.O_TRUNC   # unspecified by POSIX
        mode = self.r.choice([0o644, 0o600, 0o444, 0o755])
        try:
            if stat.S_ISFIFO(os.stat(os.path.join(self.roots[0], p)).st_mode):
                fl |= os.O_NONBLOCK     # not waiting for the other end
        except OSError:
            pass
        new = not os.path.lexists(os.path.join(self.roots[0], p))
        if fl & os.O_TRUNC:
            self.touched(path=os.path.join(self.roots[0], p))
        a, b = self.both("open %s %o %o" % (p, fl, mode),
                         lambda i, rt: os.open(os.path.join(rt, p), fl, mode),
                         lambda a, b: a[0] == b[0] and (a[0] == "ok" or a == b))
        if a[0] == "ok" and new:
            self.touched(a[1])      # a new file (its inode number reused)
        if a[0] == "ok" and b[0] == "ok":
            self.fds.append([a[1], b[1], fl, "%s@%d" % (p, self.step)])
        else:
            for x in (a, b):
                if x[0] == "ok":
                    os.close(x[1])

    def o_close(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds.pop(k)
        self.both("close %s" % h[3], lambda i, rt: os.close(h[i]))

    def data(self, n):
        return self.r.randbytes(n)

    def size(self):
        return self.r.choice([1, 7, 100, 512, 4096, 4097, 8191, 65536,
                              200000, 1 << 20])

    def off(self):
        if self.r.random() < 0.02:      # large sparse offsets
            return self.r.choice([(1 << 32) + 5, (1 << 40) + 4095,
                                  (1 << 44) - 4096 - 3, (1 << 44) - 3])
        return self.r.choice([0, 1, 4095, 4096, 5000, 65536, 100000,
                              1 << 20, (1 << 20) + 3, 3 << 20, 7 << 20,
                              self.r.randrange(8 << 20)])

    def o_pwrite(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        buf, off = self.data(self.size()), self.off()
        self.touched(h[0])
        self.both("pwrite %s len %d off %d" % (h[3], len(buf), off),
                  lambda i, rt: os.pwrite(h[i], buf, off))

    def o_write(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        buf = self.data(self.size())
        self.touched(h[0])
        self.both("write %s len %d" % (h[3], len(buf)),
                  lambda i, rt: (os.write(h[i], buf), os.lseek(h[i], 0, os.SEEK_CUR)))

    def o_pwritev(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        bufs = [self.data(self.size()) for _ in range(self.r.randrange(1, 4))]
        off = self.off()
        fl = self.r.choice([0, os.RWF_APPEND, os.RWF_DSYNC, os.RWF_SYNC,
                            os.RWF_APPEND | os.RWF_DSYNC])
        self.touched(h[0])
        self.both("pwritev %s lens %r off %d flags %x" % (h[3], [len(b) for b in bufs], off, fl),
                  lambda i, rt: (os.pwritev(h[i], bufs, off, fl), os.lseek(h[i], 0, os.SEEK_CUR)))

    def o_copy(self):
        a, b = self.fd(), self.fd()
        if a is None:
            return
        ha, hb = self.fds[a], self.fds[b]
        n, oa, ob = self.size(), self.off(), self.off()
        self.touched(hb[0])
        # nothing to copy to past the largest file: ext4 says EFBIG, the
        # kernel's FUSE (its own largest file) 0 without asking the mount
        self.both("copy_file_range %s %d -> %s %d len %d" % (ha[3], oa, hb[3], ob, n),
                  lambda i, rt: os.copy_file_range(ha[i], hb[i], n, oa, ob),
                  lambda a, b: a == b or (a == ("err", "EFBIG") and b == ("ok", 0)
                                          and ob >= PAST_EXT4))

    def o_chown(self):
        a = self.pick()
        u, g = self.r.choice([0, 1000, 65534]), self.r.choice([0, 100, 65534])
        fol = self.r.random() < 0.5
        self.both("chown %s %d %d follow %d" % (a, u, g, fol), lambda i, rt: os.chown(
            os.path.join(rt, a), u, g, follow_symlinks=fol))

    def o_mkfifo(self):
        a = self.pick()
        self.both("mkfifo %s" % a, lambda i, rt: os.mkfifo(os.path.join(rt, a), 0o640))
        self.touched(path=os.path.join(self.roots[0], a))   # a reused inode number

    def o_mmap(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        import mmap

        def rd(i, rt):
            st = os.fstat(h[i])
            if not stat.S_ISREG(st.st_mode) or not st.st_size:
                return None
            with mmap.mmap(h[i], min(st.st_size, 1 << 20), prot=mmap.PROT_READ) as mm:
                return mm[:]
        self.both("mmap read %s" % h[3], rd)

    def o_utimens(self):
        """utimensat/futimens with UTIME_NOW and UTIME_OMIT"""
        r = self.r
        fol = True
        if r.random() < 0.5:
            k = self.fd()
            if k is None:
                return
            h = self.fds[k]
            tgt, desc = (lambda i: h[i]), h[3]
        else:
            a = self.pick()
            tgt, desc = (lambda i: os.path.join(self.roots[i], a)), a
            fol = r.random() < 0.5

        def st(i):
            x = tgt(i)
            return os.fstat(x) if isinstance(x, int) else os.stat(x, follow_symlinks=fol)
        at = r.choice([UTIME_NOW, UTIME_OMIT, self.times()])
        mt = r.choice([UTIME_NOW, UTIME_OMIT, UTIME_OMIT, self.times()])
        before = call(st, 1)
        t0 = time.time_ns()
        a_, _ = self.both("utimens %s %s %s follow %d" % (desc, at, mt, fol),
                          lambda i, rt: utimens(tgt(i), at, mt, fol))
        t1 = time.time_ns()
        if a_[0] != "ok":
            return
        sa, sb = call(st, 0), call(st, 1)
        if sa[0] != "ok" or sb[0] != "ok":
            return
        sa, sb = sa[1], sb[1]
        if mt == UTIME_NOW:
            self.explicit.pop(sa.st_ino, None)
            # (a file system's clock is coarse: a tick before)
            for side, x in (("ref", sa), ("mount", sb)):
                if not t0 - 50 * 10 ** 6 <= x.st_mtime_ns <= t1:
                    diffs.append("step %d: UTIME_NOW: %s mtime %d not in [%d, %d]"
                                 % (self.step, side, x.st_mtime_ns, t0, t1))
        elif mt == UTIME_OMIT:
            if before[0] == "ok" and sb.st_mtime_ns != before[1].st_mtime_ns:
                diffs.append("step %d: UTIME_OMIT moved the mtime on the mount: %d -> %d"
                             % (self.step, before[1].st_mtime_ns, sb.st_mtime_ns))
        else:
            self.explicit[sa.st_ino] = mt
            if sb.st_mtime_ns != mt:
                diffs.append("step %d: mtime on the mount %d, not %d"
                             % (self.step, sb.st_mtime_ns, mt))
        if at not in (UTIME_NOW, UTIME_OMIT) and sb.st_atime_ns != at:
            diffs.append("step %d: atime on the mount %d, not %d"
                         % (self.step, sb.st_atime_ns, at))

    def reg_fd(self):
        """an open descriptor of a non-empty regular file (its handle,
        size), or None"""
        k = self.fd()
        if k is None:
            return None
        h = self.fds[k]
        try:
            st = os.fstat(h[0])
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or not st.st_size:
            return None
        return h, st.st_size

    def o_mmapw(self):
        """a shared writable mapping written, msync'd or not, unmapped;
        then the data read through a new open of the file"""
        x = self.reg_fd()
        if x is None:
            return
        h, size = x
        ln = min(size, 1 << 20)
        off = self.r.randrange(ln)
        buf = self.data(min(self.size(), ln - off))
        sync = self.r.random() < 0.5
        self.touched(h[0])

        def f(i, rt):
            with mmap.mmap(h[i], ln) as mm:
                mm[off:off + len(buf)] = buf
                if sync:
                    mm.flush()
            fd = os.open("/proc/self/fd/%d" % h[i], os.O_RDONLY)
            try:
                return os.pread(fd, len(buf), off) == buf
            finally:
                os.close(fd)
        self.both("mmap write %s len %d off %d msync %d" % (h[3], len(buf), off, sync), f)

    def o_mmaptrunc(self):
        """a truncate of a mapped file (dirtied through the mapping where
        it may be): the mapping's page past the new end reads zeros, and
        what was beyond it is gone"""
        x = self.reg_fd()
        if x is None:
            return
        h, size = x
        ln = min(size, 1 << 20)
        nl = self.r.choice([0, 1, 100, 4095, 4096, 5000, ln // 2, ln - 1])
        pat = self.data(ln) if self.r.random() < 0.5 else None
        self.touched(h[0])

        def f(i, rt):
            acc = h[2] & os.O_ACCMODE
            w = pat is not None and acc == os.O_RDWR and not h[2] & os.O_APPEND
            with mmap.mmap(h[i], ln, prot=mmap.PROT_READ | (mmap.PROT_WRITE if w else 0)) as mm:
                if w:
                    mm[:] = pat
                if acc == os.O_RDONLY:
                    os.truncate("/proc/self/fd/%d" % h[i], nl)
                else:
                    os.ftruncate(h[i], nl)
                end = min(ln, -(-nl // mmap.PAGESIZE) * mmap.PAGESIZE)
                return mm[:end]
        self.both("mmap truncate %s map %d to %d written %d" % (h[3], ln, nl, pat is not None), f)

    def o_sendfile(self):
        a, b = self.fd(), self.fd()
        if a is None:
            return
        ha, hb = self.fds[a], self.fds[b]
        n, off = self.size(), self.r.choice([None, self.off()])
        if same_file(ha, hb):
            return
        self.touched(hb[0])

        def f(i, rt):
            x = os.sendfile(hb[i], ha[i], off, n)
            return (x, os.lseek(ha[i], 0, os.SEEK_CUR), os.lseek(hb[i], 0, os.SEEK_CUR))
        # from past the largest file: ext4 says EOVERFLOW, the kernel's
        # FUSE (its own largest file) reads the end of the file
        self.both("sendfile %s %s -> %s len %d" % (ha[3], off, hb[3], n), f,
                  lambda a, b: a == b or (a == ("err", "EOVERFLOW") and b[0] == "ok"
                                          and off is not None and off + n > PAST_EXT4))

    def o_splice(self):
        a, b = self.fd(), self.fd()
        if a is None:
            return
        ha, hb = self.fds[a], self.fds[b]
        n = min(self.size(), 65536)     # a pipe's room: no wait
        oa, ob = self.off(), self.off()
        if same_file(ha, hb):
            return
        self.touched(hb[0])

        def f(i, rt):
            pr, pw = os.pipe()
            try:
                m = os.splice(ha[i], pw, n, offset_src=oa)
                out = 0
                while out < m:
                    out += os.splice(pr, hb[i], m - out, offset_dst=ob + out)
                return m
            finally:
                os.close(pr)
                os.close(pw)
        self.both("splice %s %d -> %s %d len %d" % (ha[3], oa, hb[3], ob, n), f)

    def o_dio(self):
        """an O_DIRECT open: aligned writes and reads"""
        p = self.pick()
        r = self.r
        fl = os.O_RDWR | os.O_DIRECT | (os.O_CREAT if r.random() < 0.5 else 0)
        n = r.choice([4096, 8192, 65536, 1 << 20])
        wo = r.choice([None, 0, 4096, 65536, 1 << 20, r.randrange(2048) * 4096])
        ro = r.choice([0, 4096, 65536, 1 << 20, r.randrange(2048) * 4096])
        wbuf = mmap.mmap(-1, n)
        wbuf[:] = self.data(n)
        new = not os.path.lexists(os.path.join(self.roots[0], p))

        def f(i, rt):
            rbuf = mmap.mmap(-1, n)
            fd = os.open(os.path.join(rt, p), fl, 0o644)
            try:
                w = os.pwritev(fd, [wbuf], wo) if wo is not None else None
                got = os.preadv(fd, [rbuf], ro)
                return (w, rbuf[:got])
            finally:
                os.close(fd)
                rbuf.close()
        if wo is not None:
            self.touched(path=os.path.join(self.roots[0], p))
        a, _ = self.both("O_DIRECT %s %o write %d at %s read at %d" % (p, fl, n, wo, ro), f)
        if a[0] == "ok" and new:
            self.touched(path=os.path.join(self.roots[0], p))
        wbuf.close()

    def o_dirstream(self):
        """a directory stream open while entries are made and removed:
        no name twice in a pass, every name that stayed listed once;
        after rewinddir, the directory as it is now; telldir/seekdir"""
        d = self.r.choice(["", "d0", "d1"])
        r = self.r
        first = r.randrange(4)
        acts = [(r.choice(["f%d" % j for j in range(6)] + ["n%d" % j for j in range(3)]),
                 r.choice(["create", "unlink", "rename"])) for _ in range(r.randrange(1, 5))]

        def f(i, rt):
            dp = libc.opendir(os.path.join(rt, d).encode())
            if not dp:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
            try:
                before = set(os.listdir(os.path.join(rt, d)))
                seen = [readdir(dp) for _ in range(first)]
                pos = libc.telldir(dp)
                nxt = readdir(dp)
                libc.seekdir(dp, pos)
                again = readdir(dp)
                for nm, what in acts:
                    q = os.path.join(rt, d, nm)
                    try:
                        if what == "create":
                            os.close(os.open(q, os.O_CREAT | os.O_WRONLY | os.O_NONBLOCK, 0o644))
                        elif what == "unlink":
                            os.unlink(q)
                        else:
                            os.rename(q, os.path.join(rt, d, "n%d" % (len(nm) % 3)))
                    except OSError:
                        pass
                after = set(os.listdir(os.path.join(rt, d)))
                seen.append(again)
                while seen[-1] is not None:
                    seen.append(readdir(dp))
                seen = [x for x in seen[:-1] if x not in (".", "..", None)]
                bad = []
                if nxt != again:
                    bad.append("seekdir to telldir: %r, then %r" % (nxt, again))
                if len(set(seen)) != len(seen):
                    bad.append("a name twice: %r" % seen)
                if (before & after) - set(seen):
                    bad.append("names missing: %r" % sorted((before & after) - set(seen)))
                if set(seen) - (before | after):
                    bad.append("names never there: %r" % sorted(set(seen) - (before | after)))
                libc.rewinddir(dp)
                full = []
                while True:
                    x = readdir(dp)
                    if x is None:
                        break
                    if x not in (".", ".."):
                        full.append(x)
                if sorted(full) != sorted(after):
                    bad.append("after rewinddir %r, not %r" % (sorted(full), sorted(after)))
                return sorted(x for x in after if not x.startswith(".wbcache")), bad
            finally:
                libc.closedir(dp)
        a, b = self.both("dirstream %s first %d %r" % (d, first, acts), f)
        for side, x in (("ref", a), ("mount", b)):
            if x[0] == "ok" and x[1][1]:
                diffs.append("step %d: dirstream %s on %s: %s" % (self.step, d, side, x[1][1]))
        for nm, what in acts:
            if what == "create":
                self.touched(path=os.path.join(self.roots[0], d, nm))

    def o_asuser(self):
        """another user (uid 65534, gid 100) at work: through a descriptor
        root opened (no permission asked; a write or a truncate clears
        the set-id bits), or by name (the modes checked)"""
        r = self.r
        k = self.fd()
        h = self.fds[k] if k is not None else None
        p = self.pick()
        what = r.choice(["pwrite", "ftruncate", "open_r", "open_w", "open_trunc", "truncate"])
        if h is None and what in ("pwrite", "ftruncate"):
            return
        buf, off = self.data(r.choice([1, 100, 5000])), self.off() % (1 << 22)
        ln = r.choice([0, 1, 5000])

        def f(i, rt):
            rd, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rd)
                try:
                    os.setgroups([])
                    os.setgid(100)
                    os.setuid(65534)
                    q = os.path.join(rt, p)
                    if what == "pwrite":
                        res = os.pwrite(h[i], buf, off)
                    elif what == "ftruncate":
                        res = os.ftruncate(h[i], ln)
                    elif what == "truncate":
                        res = os.truncate(q, ln)
                    else:
                        fl = {"open_r": os.O_RDONLY, "open_w": os.O_WRONLY,
                              "open_trunc": os.O_WRONLY | os.O_TRUNC}[what]
                        os.close(os.open(q, fl | os.O_NONBLOCK))
                        res = None
                    out = repr(("ok", res))
                except OSError as e:
                    out = repr(("err", errno.errorcode.get(e.errno, e.errno)))
                os.write(wr, out.encode())
                os._exit(0)
            os.close(wr)
            with os.fdopen(rd, "rb") as fo:
                out = fo.read().decode()
            os.waitpid(pid, 0)
            st = os.fstat(h[i]) if h is not None else os.lstat(os.path.join(rt, p))
            return out, stat.S_IMODE(st.st_mode)
        if what in ("pwrite", "ftruncate"):
            self.touched(h[0])
        elif what in ("open_trunc", "truncate"):
            self.touched(path=os.path.join(self.roots[0], p))
        self.both("as uid 65534: %s %s len %d off %d (%s)" % (what, h[3] if h else p, len(buf), off, p), f)

    def unchanged(self, h):
        """the mtime and ctime of @h's file on the mount, not moved by a
        read or a sync (writeback, or the mtime put back at an fsync,
        moved the ctime)"""
        try:
            st = os.fstat(h[1])
            return st.st_mtime_ns, st.st_ctime_ns
        except OSError:
            return None

    def o_pread(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        n, off = self.size(), self.off()
        t0 = self.unchanged(h)
        self.both("pread %s len %d off %d" % (h[3], n, off),
                  lambda i, rt: os.pread(h[i], n, off))
        if self.unchanged(h) != t0:
            diffs.append("step %d: pread %s moved the times on the mount: %r -> %r"
                         % (self.step, h[3], t0, self.unchanged(h)))

    def o_read(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        n = self.size()
        self.both("read %s len %d" % (h[3], n),
                  lambda i, rt: (os.read(h[i], n), os.lseek(h[i], 0, os.SEEK_CUR)))

    def o_seek(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        if not stat.S_ISREG(os.fstat(h[0]).st_mode):
            return      # a directory's offsets are the file system's own
        off = self.off()
        wh = self.r.choice([os.SEEK_SET, os.SEEK_END, os.SEEK_CUR, SEEK_DATA,
                            SEEK_HOLE])

        size = os.fstat(h[0]).st_size

        def cmp(a, b):
            if a == ("err", "EINVAL") and b[0] == "ok" and b[1] >= PAST_EXT4:
                return True     # the kernel's FUSE takes any position
            if wh not in (SEEK_DATA, SEEK_HOLE) or off >= size or a == b:
                return a == b
            # a file system may report all of a file as data (Linux's
            # generic_file_llseek): within the file the answer must lie
            # between the local one and that
            if b[0] != "ok":
                return False
            if wh == SEEK_DATA:
                return off <= b[1] <= (a[1] if a[0] == "ok" else size)
            return a[0] == "ok" and a[1] <= b[1] <= size

        self.both("lseek %s %d %d" % (h[3], off, wh),
                  lambda i, rt: os.lseek(h[i], off, wh), cmp)
        # keep the positions the same
        pos = os.lseek(h[0], 0, os.SEEK_CUR)
        try:
            os.lseek(h[1], pos, os.SEEK_SET)
        except OSError:
            pass

    def o_ftruncate(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        ln = self.r.choice([0, 1, 4096, 5000, 100000, 3 << 20, self.off()])
        self.touched(h[0])
        self.both("ftruncate %s %d" % (h[3], ln),
                  lambda i, rt: os.ftruncate(h[i], ln))

    def o_truncate(self):
        p = self.pick()
        ln = self.r.choice([0, 3, 4096, 70000, self.off()])
        self.touched(path=os.path.join(self.roots[0], p))
        self.both("truncate %s %d" % (p, ln),
                  lambda i, rt: os.truncate(os.path.join(rt, p), ln))

    def o_fsync(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        f = self.r.choice([os.fsync, os.fdatasync])
        t0 = self.unchanged(h)
        self.both("%s %s" % (f.__name__, h[3]), lambda i, rt: f(h[i]))
        if self.unchanged(h) != t0:
            diffs.append("step %d: %s %s moved the times on the mount: %r -> %r"
                         % (self.step, f.__name__, h[3], t0, self.unchanged(h)))

    def o_fallocate(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        off, ln = self.off(), self.r.choice([1, 4096, 10000, 1 << 20])
        mode = self.r.choice([-1, 0, FL_KEEP_SIZE,
                              FL_PUNCH_HOLE | FL_KEEP_SIZE, FL_ZERO_RANGE,
                              FL_ZERO_RANGE | FL_KEEP_SIZE])
        self.touched(h[0])
        if mode < 0:
            self.both("posix_fallocate %s %d %d" % (h[3], off, ln),
                      lambda i, rt: os.posix_fallocate(h[i], off, ln))
        else:
            self.both("fallocate %s %x %d %d" % (h[3], mode, off, ln),
                      lambda i, rt: fallocate(h[i], mode, off, ln))

    def o_fstat(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        ex = os.fstat(h[0]).st_ino in self.explicit
        self.both("fstat %s" % h[3], lambda i, rt: stat_key(os.fstat(h[i]), ex))

    def o_stat(self):
        p = self.pick()
        try:
            ex = os.lstat(os.path.join(self.roots[0], p)).st_ino in self.explicit
        except OSError:
            ex = False
        self.both("lstat %s" % p,
                  lambda i, rt: stat_key(os.lstat(os.path.join(rt, p)), ex))

    def o_rename(self):
        a, b = self.pick(), self.pick()
        self.both("rename %s %s" % (a, b), lambda i, rt: os.rename(
            os.path.join(rt, a), os.path.join(rt, b)))

    def o_rename2(self):
        a, b = self.pick(), self.pick()
        fl = self.r.choice([RENAME_NOREPLACE, RENAME_EXCHANGE])
        self.both("renameat2 %s %s %d" % (a, b, fl), lambda i, rt: renameat2(
            os.path.join(rt, a), os.path.join(rt, b), fl))

    def o_link(self):
        a, b = self.pick(), self.pick()
        self.both("link %s %s" % (a, b), lambda i, rt: os.link(
            os.path.join(rt, a), os.path.join(rt, b), follow_symlinks=False))

    def o_unlink(self):
        a = self.pick()
        self.both("unlink %s" % a, lambda i, rt: os.unlink(os.path.join(rt, a)))

    def o_mkdir(self):
        a = self.pick()
        self.both("mkdir %s" % a, lambda i, rt: os.mkdir(os.path.join(rt, a), 0o755))
        self.touched(path=os.path.join(self.roots[0], a))

    def o_rmdir(self):
        a = self.pick()
        self.both("rmdir %s" % a, lambda i, rt: os.rmdir(os.path.join(rt, a)))

    def o_symlink(self):
        a = self.pick()
        t = self.r.choice(["f0", "d0", "d0/../f1", "nowhere", "d0/f0", "d1/../d0"])
        self.both("symlink %s -> %s" % (a, t),
                  lambda i, rt: os.symlink(t, os.path.join(rt, a)))
        try:
            self.explicit.pop(os.lstat(os.path.join(self.roots[0], a)).st_ino, None)
        except OSError:
            pass

    def o_readlink(self):
        a = self.pick()
        self.both("readlink %s" % a,
                  lambda i, rt: os.readlink(os.path.join(rt, a)))

    def o_chmod(self):
        a = self.pick()
        m = self.r.choice([0o644, 0o600, 0o444, 0o755, 0o4755, 0o2755, 0o1777])
        self.both("chmod %s %o" % (a, m),
                  lambda i, rt: os.chmod(os.path.join(rt, a), m))

    def o_fchmod(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        m = self.r.choice([0o644, 0o600, 0o444, 0o755])
        self.both("fchmod %s %o" % (h[3], m), lambda i, rt: os.fchmod(h[i], m))

    def times(self):
        t = self.r.randrange(10 ** 9, 2 * 10 ** 9) * 10 ** 9 + \
            self.r.choice([0, 123456789, 999999999])
        return t

    def o_utime(self):
        a = self.pick()
        t = self.times()
        p0 = os.path.join(self.roots[0], a)
        fol = self.r.random() < 0.5
        a_, _ = self.both("utime %s %d follow %d" % (a, t, fol), lambda i, rt: os.utime(
            os.path.join(rt, a), ns=(t, t), follow_symlinks=fol))
        if a_[0] == "ok":
            try:
                st = os.stat(p0, follow_symlinks=fol)
                self.explicit[st.st_ino] = t
            except OSError:
                pass

    def o_futime(self):
        k = self.fd()
        if k is None:
            return
        h = self.fds[k]
        t = self.times()
        a_, _ = self.both("futime %s %d" % (h[3], t),
                          lambda i, rt: os.utime(h[i], ns=(t, t)))
        if a_[0] == "ok":
            self.explicit[os.fstat(h[0]).st_ino] = t

    def o_listdir(self):
        a = self.r.choice(["", "d0", "d1", "d0/s", "f0"])
        self.both("listdir %s" % a, lambda i, rt: sorted(
            n for n in os.listdir(os.path.join(rt, a))
            if not n.startswith(".wbcache")))

    def o_xattr(self):
        a = self.pick()
        nm = self.r.choice(["user.a", "user.b", "user.long"])
        p = lambda rt: os.path.join(rt, a)
        k = self.r.randrange(4)
        if k == 0:
            v = self.data(self.r.choice([0, 5, 300]))
            fl = self.r.choice([0, os.XATTR_CREATE, os.XATTR_REPLACE])
            self.both("setxattr %s %s %d %d" % (a, nm, len(v), fl),
                      lambda i, rt: os.setxattr(p(rt), nm, v, fl, follow_symlinks=False))
        elif k == 1:
            self.both("getxattr %s %s" % (a, nm),
                      lambda i, rt: os.getxattr(p(rt), nm, follow_symlinks=False))
        elif k == 2:
            self.both("listxattr %s" % a, lambda i, rt: sorted(
                x for x in os.listxattr(p(rt), follow_symlinks=False)
                if x.startswith("user.")))
        else:
            self.both("removexattr %s %s" % (a, nm),
                      lambda i, rt: os.removexattr(p(rt), nm, follow_symlinks=False))

    def finish(self):
        for h in self.fds:
            self.both("close %s" % h[3], lambda i, rt: os.close(h[i]))
        self.fds = []


# ---- concurrency: the same workloads of several threads and processes
# on each tree; results differ with the timing, so each side's are
# checked against what any order allows (each side must pass)

def conc(root, seed):
    """run the workloads under @root/cc; a list of what went wrong"""
    r = random.Random(seed)
    d = os.path.join(root, "cc")
    os.mkdir(d)
    bad = []
    P = lambda n: os.path.join(d, n)

    def threads(*fs):
        errs = []

        def wrap(f):
            try:
                f()
            except Exception as e:     # reported, not lost with the thread
                errs.append("%s: %r" % (f.__name__, e))
        ts = [threading.Thread(target=wrap, args=(f,)) for f in fs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        bad.extend(errs)

    # O_APPEND from several processes (one of them truncating to 0 now
    # and then in the second file): whole records, each writer's in order
    for name, trunc in (("app", False), ("app2", True)):
        lens = [[r.randrange(1, 3000) for _ in range(40)] for _ in range(3)]
        kids = []
        for w in range(3 + trunc):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    fd = os.open(P(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    if w == 3:
                        for _ in range(20):
                            os.ftruncate(fd, 0)
                            time.sleep(0.001)
                    else:
                        for i, n in enumerate(lens[w]):
                            rec = b"<%d:%d:" % (w, i) + bytes([97 + (w * 7 + i) % 26]) * n + b">"
                            if os.write(fd, rec) != len(rec):
                                code = 2
                    os.close(fd)
                except OSError:
                    code = 3
                os._exit(code)
            kids.append(pid)
        for pid in kids:
            if os.waitpid(pid, 0)[1]:
                bad.append("%s: an appender failed" % name)
        with open(P(name), "rb") as f:
            data = f.read()
        last = [-1] * 3
        recs = data.split(b">")
        if recs[-1] != b"":
            bad.append("%s: does not end with a whole record" % name)
        for rec in recs[:-1]:
            try:
                w, i, body = rec[1:].split(b":", 2)
                w, i = int(w), int(i)
                ok = rec[:1] == b"<" and body == bytes([97 + (w * 7 + i) % 26]) * lens[w][i] \
                    and i > last[w]
            except (ValueError, IndexError):
                ok = False
            if not ok:
                bad.append("%s: a torn or misplaced record %r" % (name, rec[:40]))
                break
            last[w] = i
        if not trunc and len(data) != sum(len(b"<%d:%d:>" % (w, i)) + n
                                          for w in range(3) for i, n in enumerate(lens[w])):
            bad.append("%s: %d bytes" % (name, len(data)))

    # writers of disjoint ranges within pages (no update lost), a reader
    # (each byte one its owner wrote) and fsyncs
    S, K, N = 1000, 16, 15
    fd = os.open(P("disj"), os.O_RDWR | os.O_CREAT, 0o644)

    def writer(t):
        def w():
            for n in range(N):
                v = bytes([t * N + n + 1]) * S
                for k in range(K):
                    os.pwrite(fd, v, (k * 4 + t) * S)
        w.__name__ = "writer%d" % t
        return w

    def disj_reader():
        for _ in range(20):
            b = os.pread(fd, 4 * K * S, 0)
            for j, x in enumerate(b):
                t = (j // S) % 4
                if x and not t * N < x <= (t + 1) * N:
                    bad.append("disj: byte %d is %d" % (j, x))
                    return

    def syncer():
        for _ in range(10):
            os.fsync(fd)
    threads(writer(0), writer(1), writer(2), writer(3), disj_reader, syncer)
    want = b"".join(bytes([t * N + N]) * S for _ in range(K) for t in range(4))
    got = os.pread(fd, len(want) + 1, 0)
    if got != want:
        at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                  min(len(got), len(want)))
        bad.append("disj: an update lost at %d (size %d)" % (at, len(got)))
    os.close(fd)

    # a writer, a truncater and a reader of one file: zeros or the data
    fd = os.open(P("trunc"), os.O_RDWR | os.O_CREAT, 0o644)
    ops = [(r.randrange(1 << 20), r.randrange(1, 65536)) for _ in range(100)]
    cuts = [r.randrange(1 << 20) for _ in range(60)]

    def twriter():
        for off, n in ops:
            os.pwrite(fd, b"W" * n, off)

    def truncater():
        for c in cuts:
            os.ftruncate(fd, c)

    def treader():
        for off, n in ops[:80]:
            b = os.pread(fd, n, off)
            if b.strip(b"\0W"):
                bad.append("trunc: read other bytes at %d" % off)
                return
    threads(twriter, truncater, treader)
    st = os.fstat(fd)
    if os.pread(fd, st.st_size, 0).strip(b"\0W"):
        bad.append("trunc: other bytes in the file")
    os.close(fd)

    # renames (exchanges, and away and back) under readers by name:
    # one file's data whole, or ENOENT while it is away
    A, B = b"A" * 70000, b"B" * 5000
    for n, v in (("r0", A), ("r1", B)):
        with open(P(n), "wb") as f:
            f.write(v)

    def renamer():
        for i in range(100):
            if i % 3:
                renameat2(P("r0"), P("r1"), RENAME_EXCHANGE)
            else:
                os.rename(P("r0"), P("r2"))
                os.rename(P("r2"), P("r0"))

    def rreader():
        for i in range(100):
            try:
                with open(P("r%d" % (i % 2)), "rb") as f:
                    b = f.read()
            except FileNotFoundError:
                continue
            if b not in (A, B):
                bad.append("rename: read %d bytes, not one file's" % len(b))
                return
    threads(renamer, rreader, rreader)

    # writes through an open file renamed over (and through a hard link
    # of it, the other half): all in the file, none in its replacements
    fd = os.open(P("v"), os.O_RDWR | os.O_CREAT, 0o644)
    os.link(P("v"), P("vl"))
    fd2 = os.open(P("vl"), os.O_RDWR)

    def vwriter(f, half):
        def w():
            for i in range(100):
                os.pwrite(f, bytes([65 + half + 2 * (i % 10)]) * 3000, (2 * i + half) * 3000)
        return w

    def vrenamer():
        for i in range(40):
            with open(P("vt"), "wb") as f:
                f.write(b"x" * i)
            os.rename(P("vt"), P("v" if i % 2 else "vl"))
    threads(vwriter(fd, 0), vwriter(fd2, 1), vrenamer)
    want = b"".join(bytes([65 + (j % 2) + 2 * ((j // 2) % 10)]) * 3000 for j in range(200))
    if os.pread(fd, len(want) + 1, 0) != want or os.pread(fd2, 10, 0) != want[:10]:
        bad.append("renamed over: the open file's data")
    os.close(fd)
    os.close(fd2)

    # a shared writable mapping and pwrite on alternate pages of a file,
    # at once: each page its writer's last data
    PG = mmap.PAGESIZE
    fd = os.open(P("mm"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 64 * PG)
    mm = mmap.mmap(fd, 64 * PG)

    def mwriter():
        for n in range(20):
            for k in range(0, 64, 2):
                mm[k * PG:(k + 1) * PG] = bytes([n + 1]) * PG

    def pwriter():
        for n in range(20):
            for k in range(1, 64, 2):
                os.pwrite(fd, bytes([n + 101]) * PG, k * PG)
    threads(mwriter, pwriter)
    mm.flush()
    mm.close()
    want = b"".join(bytes([20 if k % 2 == 0 else 120]) * PG for k in range(64))
    if os.pread(fd, len(want), 0) != want:
        bad.append("mmap and pwrite: a page lost its writer's data")
    os.close(fd)

    # listings while other entries come and go: every stable name once
    os.mkdir(P("big"))
    stable = {"s%03d" % i for i in range(150)}
    for n in stable:
        os.close(os.open(os.path.join(P("big"), n), os.O_CREAT | os.O_WRONLY, 0o644))

    def churn():
        for i in range(200):
            q = os.path.join(P("big"), "t%d" % (i % 37))
            if os.path.exists(q):
                os.unlink(q)
            else:
                os.close(os.open(q, os.O_CREAT | os.O_WRONLY, 0o644))

    def lister():
        for _ in range(15):
            ls = os.listdir(P("big"))
            if len(ls) != len(set(ls)) or stable - set(ls):
                bad.append("readdir: %d names, %d distinct, %d stable missing"
                           % (len(ls), len(set(ls)), len(stable - set(ls))))
                return
    threads(churn, lister, lister)
    return bad


def conc_settle(ref, mnt, explicit):
    """the ref's cc/ made the mount's (its data was up to the timing):
    the trees compare after unmount; none of its inode numbers (reused)
    has an explicit mtime"""
    for d, dirs, files in os.walk(os.path.join(mnt, "cc")):
        rd = os.path.join(ref, os.path.relpath(d, mnt))
        for n in os.listdir(rd):
            if not os.path.exists(os.path.join(d, n)):
                os.unlink(os.path.join(rd, n))
        for n in files:
            with open(os.path.join(d, n), "rb") as f, open(os.path.join(rd, n), "wb") as g:
                g.write(f.read())
        for n in os.listdir(rd) + ["."]:
            explicit.pop(os.lstat(os.path.join(rd, n)).st_ino, None)


def walk(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(".wbcache"):
                continue
            out[rel] = p
    return out


def extents(fd, size):
    """the data ranges of a file (SEEK_DATA/SEEK_HOLE)"""
    out, pos = [], 0
    while pos < size:
        try:
            d = os.lseek(fd, pos, SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, SEEK_HOLE)
        out.append((d, h))
        pos = h
    return out


def data_differs(pa, pb):
    """where the data of two files differs (None: the same), reading the
    data ranges of either (a sparse file of terabytes)"""
    fa, fb = os.open(pa, os.O_RDONLY), os.open(pb, os.O_RDONLY)
    try:
        sa, sb = os.fstat(fa).st_size, os.fstat(fb).st_size
        for s, e in sorted(extents(fa, sa) + extents(fb, sb)):
            s = min(s, sa, sb)
            e = min(e, max(sa, sb))
            while s < e:
                n = min(e - s, 1 << 20)
                da, db = os.pread(fa, n, s), os.pread(fb, n, s)
                if da != db:
                    return s + next((i for i in range(min(len(da), len(db)))
                                     if da[i] != db[i]), min(len(da), len(db)))
                s += n
        return None if sa == sb else min(sa, sb)
    finally:
        os.close(fa)
        os.close(fb)


def compare_trees(ref, bk, explicit):
    a, b = walk(ref), walk(bk)
    for rel in sorted(set(a) | set(b)):
        if rel not in a or rel not in b:
            diffs.append("tree: %s only in %s" % (rel, "ref" if rel in a else "backing"))
            continue
        sa, sb = os.lstat(a[rel]), os.lstat(b[rel])
        ex = sa.st_ino in explicit
        ka, kb = stat_key(sa, ex), stat_key(sb, ex)
        if ka != kb:
            diffs.append("tree: %s stat ref %r backing %r" % (rel, ka, kb))
        if stat.S_ISREG(sa.st_mode) and stat.S_ISREG(sb.st_mode):
            at = data_differs(a[rel], b[rel])
            if at is not None:
                diffs.append("tree: %s data differs at %d (sizes %d %d)" %
                             (rel, at, sa.st_size, sb.st_size))
        if stat.S_ISLNK(sa.st_mode) and stat.S_ISLNK(sb.st_mode):
            if os.readlink(a[rel]) != os.readlink(b[rel]):
                diffs.append("tree: %s link target" % rel)
        xa = sorted((x, os.getxattr(a[rel], x, follow_symlinks=False))
                    for x in os.listxattr(a[rel], follow_symlinks=False) if x.startswith("user."))
        xb = sorted((x, os.getxattr(b[rel], x, follow_symlinks=False))
                    for x in os.listxattr(b[rel], follow_symlinks=False) if x.startswith("user."))
        if xa != xb:
            diffs.append("tree: %s xattrs differ" % rel)


def main():
    if sys.argv[1] == "--compare":
        ref, bk, exfile = sys.argv[2:5]
        with open(exfile) as f:
            explicit = {int(x) for x in f.read().split()}
        compare_trees(ref, bk, explicit)
    else:
        ref, mnt, seed, nops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        run = Run(ref, mnt, seed)
        paranoid = True     # each step: fstat of every open descriptor
        only = None
        if os.environ.get("DIFF_STEPS"):
            # replay only these steps of the sequence (for minimising)
            import pickle
            with open(os.environ["DIFF_STEPS"], "rb") as f:
                only, run.replay, states = pickle.load(f)
        for run.step in range(nops):
            if only is not None:
                if run.step not in only:
                    continue
                run.r.setstate(states[run.step])
            elif os.environ.get("DIFF_RECORD"):
                run.states[run.step] = run.r.getstate()
            run.op()
            if paranoid:
                for h in run.fds:
                    a = call(lambda: os.fstat(h[0]).st_size)
                    b = call(lambda: os.fstat(h[1]).st_size)
                    if a != b:
                        diffs.append("step %d: after it %s size ref %r mount %r"
                                     % (run.step, h[3], a, b))
                if diffs:
                    break
        run.finish()
        if not diffs and only is None and not os.environ.get("DIFF_NO_CONC"):
            for side, root in (("ref", ref), ("mount", mnt)):
                for b in conc(root, seed):
                    diffs.append("concurrent, %s: %s" % (side, b))
            conc_settle(ref, mnt, run.explicit)
        if os.environ.get("DIFF_RECORD"):
            import pickle
            with open(os.environ["DIFF_RECORD"], "wb") as f:
                pickle.dump((run.chosen, run.states), f)
        if len(sys.argv) > 5:
            with open(sys.argv[5], "w") as f:
                f.write(" ".join(str(i) for i in run.explicit))
            with open(sys.argv[5] + ".log", "w") as f:
                f.write("\n".join(run.log) + "\n")
    for d in diffs[:40]:
        print(d)
    if len(diffs) > 40:
        print("... %d differences in all" % len(diffs))
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
