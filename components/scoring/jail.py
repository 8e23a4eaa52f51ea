"""Kernel-level confinement for one sandboxed candidate (used only inside the fork-server).

Standard library only: the fork-server runs as `python -P -s -S` and imports this file as a
top-level module, so nothing here may import `components.*` or third-party packages.

Two layers:
- `isolate_server()`: once, in the fork-server before it imports anything that starts threads,
  enter a fresh network namespace (no interface but a down loopback) and a private mount
  namespace with a size-limited tmpfs that holds the per-candidate jail directories.
- `apply_shared_limits(...)`: once, in the fork-server, the rlimits all children share.
- `confine_child(...)`: in each forked child, before the candidate runs: new session, rlimits,
  chroot into its private jail directory, drop to uid/gid nobody, no_new_privs and a seccomp
  filter (raw BPF built here with ctypes; no libseccomp needed). Every step that the kernel or
  the privileges refuse is skipped and reported, so the scorer degrades instead of failing;
  `capabilities()` tells which layers are active.

The seccomp filter returns EPERM for: socket/socketpair, fork/vfork, clone without
CLONE_THREAD, execve/execveat, ptrace and cross-process memory access, kill/tkill/tgkill aimed
at any pid other than the caller's own, namespace/mount/chroot calls, bpf, perf, keyrings,
io_uring and module/kexec/reboot calls; clone3 returns ENOSYS (so glibc falls back to clone,
which is then checked). A foreign architecture ABI (x32) kills the process.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
import struct

NOBODY = 65534
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
MS_NOSUID, MS_NODEV = 0x2, 0x4

_ARCH = {  # AUDIT_ARCH value and syscall numbers per machine
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "socketpair": 53,
            "fork": 57,
            "vfork": 58,
            "clone": 56,
            "clone3": 435,
            "execve": 59,
            "execveat": 322,
            "kill": 62,
            "tkill": 200,
            "tgkill": 234,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "rt_sigqueueinfo": 129,
            "rt_tgsigqueueinfo": 297,
            "pidfd_open": 434,
            "pidfd_send_signal": 424,
            "pidfd_getfd": 438,
            "kcmp": 312,
            "personality": 135,
            "reboot": 169,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "kexec_load": 246,
            "acct": 163,
            "swapon": 167,
            "mknod": 133,
            "mknodat": 259,
            "setsid": 112,
            "setpgid": 109,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "socketpair": 199,
            "clone": 220,
            "clone3": 435,
            "execve": 221,
            "execveat": 281,
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240,
            "pidfd_open": 434,
            "pidfd_send_signal": 424,
            "pidfd_getfd": 438,
            "kcmp": 272,
            "personality": 92,
            "reboot": 142,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "kexec_load": 104,
            "acct": 89,
            "swapon": 224,
            "mknodat": 33,
            "setsid": 157,
            "setpgid": 154,
        },
    ),
}
_SPECIAL = {"clone", "clone3", "kill", "tkill", "tgkill"}

_libc = ctypes.CDLL(None, use_errno=True)
_MACHINE = platform.machine()


def _call(name: str, *args) -> None:
    fn = getattr(_libc, name)
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def isolate_server(jail_root: str, tmpfs_mb: int) -> dict[str, bool]:
    """Enter new network and mount namespaces and mount a private tmpfs on `jail_root`."""
    caps = {"netns": False, "mountns": False}
    try:
        _call("unshare", CLONE_NEWNET)
        caps["netns"] = True
    except OSError:
        pass
    try:
        _call("unshare", CLONE_NEWNS)
        _call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        opts = f"size={tmpfs_mb}m,mode=0711".encode()
        _call("mount", b"tmpfs", jail_root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts)
        caps["mountns"] = True
    except OSError:
        pass
    return caps


def fork_function():
    """The cheapest safe way for this process to fork: glibc's fork() when single-threaded.

    `os.fork()` runs Python's at-fork hooks in every child (threading's `_after_fork`, random's
    reseed, ...): about 0.7 ms of CPU and 170 copy-on-write page faults per child in a lite
    fork-server. Those hooks only repair state that other threads could have left behind, so a
    process with one thread (checked here, once its imports are done) may call glibc's fork()
    directly (which still runs the C libraries' pthread_atfork handlers). The child re-seeds
    `random` itself. Falls back to `os.fork` if another thread exists.
    """
    try:
        single = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        single = False
    if not single:
        return os.fork
    raw = _libc.fork
    raw.restype, raw.argtypes = ctypes.c_int, []

    def fork() -> int:
        pid = raw()
        if pid < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"fork: {os.strerror(err)}")
        return pid

    return fork


# --- seccomp (classic BPF over struct seccomp_data) -------------------------------------------
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38


def _assemble(program: list) -> bytes:
    """Resolve label names in (code, jt, jf, k) tuples and pack them as `struct sock_filter`."""
    labels, body = {}, []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(body)
        else:
            body.append(item)
    out = bytearray()
    for pos, (code, jt, jf, k) in enumerate(body):
        jt = labels[jt] - pos - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - pos - 1 if isinstance(jf, str) else jf
        out += struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)
    return bytes(out)


def seccomp_program(pid: int, machine: str | None = None) -> bytes | None:
    """The filter for a child whose own pid is `pid`; None on an unsupported architecture."""
    arch = _ARCH.get(machine or _MACHINE)
    if arch is None:
        return None
    audit_arch, nr = arch
    prog: list = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 0, "kill_process", audit_arch), (_LD_W_ABS, 0, 0, 0)]
    if audit_arch == 0xC000003E:  # x32 ABI numbers carry bit 30
        prog.append((_JGE, "eperm", 0, 0x40000000))
    for name, number in nr.items():
        if name not in _SPECIAL:
            prog.append((_JEQ, "eperm", 0, number))
    prog += [(_JEQ, "enosys", 0, nr["clone3"]), (_JEQ, "clone", 0, nr["clone"])]
    prog += [(_JEQ, "signal", 0, nr[name]) for name in ("kill", "tkill", "tgkill")]
    prog += [
        (_RET, 0, 0, _ALLOW),
        "clone",
        (_LD_W_ABS, 0, 0, 16),
        (_JSET, "allow", "eperm", CLONE_THREAD),
        "signal",
        (_LD_W_ABS, 0, 0, 16),
        (_JEQ, "allow", 0, pid),
        (_JEQ, "allow", "eperm", 0),
        "allow",
        (_RET, 0, 0, _ALLOW),
        "eperm",
        (_RET, 0, 0, _ERRNO | _EPERM),
        "enosys",
        (_RET, 0, 0, _ERRNO | _ENOSYS),
        "kill_process",
        (_RET, 0, 0, _KILL_PROCESS),
    ]
    return _assemble(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PID_SLOT = 0x7FFFFFFE  # placeholder for the child's pid in the filter pre-built at import
_TEMPLATE = seccomp_program(_PID_SLOT)
_SLOTS = (
    []
    if _TEMPLATE is None
    else [i for i in range(0, len(_TEMPLATE), 8) if _TEMPLATE[i + 4 : i + 8] == struct.pack("=I", _PID_SLOT)]
)
_BUFFER = None if _TEMPLATE is None else ctypes.create_string_buffer(_TEMPLATE, len(_TEMPLATE))
_PROG = None if _TEMPLATE is None else _SockFprog(len(_TEMPLATE) // 8, ctypes.cast(_BUFFER, ctypes.c_void_p))


# Resolved once in the fork-server: a lookup in each child costs a dlsym and dirties pages.
_PRCTL = _libc.prctl
_PROG_REF = None if _PROG is None else ctypes.byref(_PROG)


def install_seccomp(pid: int) -> bool:
    """Set no_new_privs and load the filter; False when the kernel or arch does not allow it."""
    if _PROG is None:
        return False
    for offset in _SLOTS:  # the buffer is this (forked) process's own copy
        struct.pack_into("=I", _BUFFER, offset + 4, pid & 0xFFFFFFFF)
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    return _PRCTL(38, 1, 0, 0, 0) == 0 and _PRCTL(22, 2, _PROG_REF, 0, 0) == 0


# --- per-child confinement -------------------------------------------------------------------
def _limit(kind: int, value: int) -> None:
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(kind)
        if hard == resource.RLIM_INFINITY or value <= hard:
            resource.setrlimit(kind, (value, hard))


def address_space_now() -> int:
    """This process's mapped address space in bytes (the base the memory limit is added to)."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def apply_shared_limits(mem_mb: int, fsize_mb: int, nofile: int, as_base: int = 0) -> None:
    """The limits every child gets alike, taken on by the fork-server itself, once: children
    inherit them (as set by fork), which saves each child six setrlimit calls. They do not
    hinder the server: it writes only to pipes, keeps a handful of fds, maps little and dumps
    no core. Address space: `as_base` (the server's own, measured after its imports;
    0 = measure now) + mem_mb; also file size, fds, core, locked memory, message queues.
    """
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with EFBIG instead
    _limit(resource.RLIMIT_AS, (as_base or address_space_now()) + mem_mb * 2**20)
    _limit(resource.RLIMIT_FSIZE, fsize_mb * 2**20)
    _limit(resource.RLIMIT_NOFILE, nofile)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_MEMLOCK, 0)
    _limit(resource.RLIMIT_MSGQUEUE, 0)


def apply_child_limits(cpu_s: int) -> None:
    """The per-child limits: CPU seconds (counted from the fork) and no processes (RLIMIT_NPROC
    counts per uid and is honoured once the uid is not root; the server could not fork under
    it when not run as root, so it is set here)."""
    _limit(resource.RLIMIT_CPU, cpu_s)
    _limit(resource.RLIMIT_NPROC, 0)


def confine_child(jail_dir: str, keep: tuple[int, ...], devnull_fd: int, cpu_s: int) -> tuple[dict, tuple[int, ...]]:
    """Confine the calling (freshly forked) process; return the active layers and kept fds.

    Expects the fork-server to have called `apply_shared_limits` before forking.

    The descriptors in `keep` are moved to 3, 4, ... and every other one is closed;
    stdin/stdout/stderr point to /dev/null, so the candidate never reaches the fork-server's
    control pipes.
    """
    os.setsid()
    moved = [os.dup(fd) for fd in keep]  # dups land above any fd that may still be in use
    for fd in (0, 1, 2):
        os.dup2(devnull_fd, fd)
    kept = tuple(range(3, 3 + len(keep)))
    for src, dst in zip(moved, kept):
        os.dup2(src, dst)
    # Up to the kernel's fd ceiling (nr_open, 2**20 by default), not RLIMIT_NOFILE: the server
    # runs under the children's small fd limit but may have inherited higher-numbered fds.
    os.closerange(3 + len(keep), 2**20)
    apply_child_limits(cpu_s)
    caps = {"chroot": False, "setuid": False, "seccomp": False}
    if os.geteuid() == 0:
        os.chroot(jail_dir)
        caps["chroot"] = True
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        caps["setuid"] = os.getuid() == NOBODY
    os.chdir("/" if caps["chroot"] else jail_dir)
    if os.environ:  # the fork-server already cleared it
        os.environ.clear()
    caps["seccomp"] = install_seccomp(os.getpid())
    return caps, kept
