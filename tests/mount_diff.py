#!/usr/bin/env python3
"""Differential test of the wbcache mount against a local directory.

Usage: mount_diff.py REF MNT SEED NOPS [EXPLICIT]

EXPLICIT: a file for --compare (and EXPLICIT.log, every step's result).
To minimise a difference: DIFF_RECORD=FILE records each step's random
state; DIFF_STEPS=FILE (a pickle of (steps, chosen, states) from it)
replays only those steps.

Runs the same seeded random sequence of file-system operations under REF
(a local directory) and MNT (the mount), comparing every result (value or
errno) and the data read.  Prints each difference; exit status 1 if any.
`mount_diff.py --compare REF BACKING` compares the trees after unmount.
"""
import ctypes
import errno
import os
import random
import stat
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                           ctypes.c_long]
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
FL_KEEP_SIZE, FL_PUNCH_HOLE, FL_ZERO_RANGE = 1, 2, 0x10
SEEK_DATA, SEEK_HOLE = 3, 4

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


def stat_key(st, explicit):
    k = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink,
         st.st_uid, st.st_gid)
    if not stat.S_ISDIR(st.st_mode):
        k += (st.st_size,)
    if explicit and not stat.S_ISDIR(st.st_mode):
        k += ("mtime", st.st_mtime_ns)
    return k


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
            diffs.append("step %d: %s: ref %r, mount %r" % (self.step, desc, a, b))
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
             self.o_mkfifo, self.o_mmap]
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
        self.both("copy_file_range %s %d -> %s %d len %d" % (ha[3], oa, hb[3], ob, n),
                  lambda i, rt: os.copy_file_range(ha[i], hb[i], n, oa, ob))

    def o_chown(self):
        a = self.pick()
        u, g = self.r.choice([0, 1000, 65534]), self.r.choice([0, 100, 65534])
        fol = self.r.random() < 0.5
        self.both("chown %s %d %d follow %d" % (a, u, g, fol), lambda i, rt: os.chown(
            os.path.join(rt, a), u, g, follow_symlinks=fol))

    def o_mkfifo(self):
        a = self.pick()
        self.both("mkfifo %s" % a, lambda i, rt: os.mkfifo(os.path.join(rt, a), 0o640))

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

    def unchanged(self, h):
        """the mtime of @h's file on the mount, not moved by a read or a
        sync (the ctime is not compared: the engine's writeback may move
        it, a known bug: WBCACHE_KNOWN_BROKEN=ctime in mount_programs)"""
        try:
            return os.fstat(h[1]).st_mtime_ns
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
            if wh not in (SEEK_DATA, SEEK_HOLE) or off >= size:
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
            with open(a[rel], "rb") as fa, open(b[rel], "rb") as fb:
                da, db = fa.read(), fb.read()
            if da != db:
                at = next((i for i in range(min(len(da), len(db))) if da[i] != db[i]),
                          min(len(da), len(db)))
                diffs.append("tree: %s data differs at %d (sizes %d %d)" %
                             (rel, at, len(da), len(db)))
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
