"""Fork-server: forks one confined child per candidate and runs its test calls there.

Started by `components.scoring.sandbox.ForkServer` as `python -P -s -S server.py CONFIG_JSON`
(no site-packages, no user site, no script dir on sys.path) with `cwd=/` and an environment
holding only PYTHONHASHSEED=0 (so every server, hence reference and candidate, iterates sets of
strings in the same order, as the official single-process scorer does), which it clears once
started; standard library only (it imports `jail` and `wire` beside it as top-level modules).
It reads and writes no files except the per-candidate jail directories.

Channels (all pipes, created by the scorer):
- stdin (control in): one JSON header per job `{"id", "size", "limits": {"cpu_s"}, "backstop"}`,
  or `{"kill": id}`. The other limits come once, in the config (`jail.apply_shared_limits`).
- stdout (control out): `{"ready", "caps", "missing"}` once, then per job
  `{"id", "exit": description}` when the child has been reaped.
- `jobs_fd` (read by the child only): the job body `{"nonce", "code", "calls", "timeout",
  "max_chars"}`, `size` bytes written by the scorer right after the header.
- `results_fd` (written by the child only): JSON lines tagged with the nonce, read by the scorer.
The server itself never holds candidate code, reference code or outputs, so a child that reads
its own (copy-on-write) memory finds nothing of other jobs there.

The child: confinement (jail.py); the code is compiled and executed once as a probe (its
error, if any, is the program's exec error and no call runs); then every test call runs on fresh
module state, as in the official scorer (which re-executes the code before each call): a new
namespace, the random seeds reset, the module code executed again, the call evaluated, its output
encoded by wire.py and the namespace cleared. Each of these steps (probe, and each call with its
fresh module) runs under a 1 s ITIMER_REAL timer, re-firing every 50 ms if the code swallows the
exception. State outside the namespace (attributes set on imported modules or on `builtins`)
still carries over between the calls of one child, as it does in the official process.
Lines: {"k": "exec", "err", "caps"}, {"k": "test", "i", "out"} or {"k": "test", "i", "err"},
{"k": "done"}.
"""

import builtins
import gc
import json
import os
import select
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jail  # noqa: E402  (top-level: this file runs as a script under -P -s -S)
import wire  # noqa: E402


class SandboxTimeout(BaseException):
    """Raised by the timer inside the child; BaseException so `except Exception` misses it."""


def _on_alarm(signum, frame):
    raise SandboxTimeout("test call exceeded its time limit")


def _describe(exc: BaseException) -> str:
    name = wire._type_name(exc)
    arg = exc.args[0] if type(exc.args) is tuple and exc.args else None
    return f"{name}: {arg[:300]}" if type(arg) is str else name


def _send(fd: int, nonce: str, msg: dict) -> None:
    msg["n"] = nonce
    data = (wire.COMPACT.encode(msg) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _timed(fn, timeout: float):
    """Run fn() under the timer; return (value, None) or (None, error description)."""
    signal.setitimer(signal.ITIMER_REAL, timeout, 0.05)
    try:
        return fn(), None
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything
        signal.setitimer(signal.ITIMER_REAL, 0)
        return None, _describe(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _read_body(fd: int, size: int) -> dict:
    data = bytearray()
    while len(data) < size:  # blocking: the scorer writes it right after the header
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return json.loads(bytes(data))


def _fresh_module(code, namespace: dict) -> dict:
    """Fill an empty `namespace` by executing `code` on reset random seeds."""
    _seed()
    namespace.update({"__name__": "__sandbox__", "__builtins__": builtins})
    exec(code, namespace)
    return namespace


def _load(source: str):
    """Compile the program and execute it once (the probe); return its code object."""
    code = compile(source, "<candidate>", "exec")
    _fresh_module(code, {}).clear()
    return code


def _call(code, call: str, max_chars: int) -> str:
    """One test call on fresh module state; the namespace is cleared before the timer stops
    (destructors count against the call, as when the official scorer's exec scope ends)."""
    namespace: dict = {}
    try:
        value = eval(compile(call, "<test>", "eval"), _fresh_module(code, namespace))
        return wire.dumps_output(value, max_chars)
    finally:
        namespace.clear()


def _run_tests(body: dict, out_fd: int, caps: dict) -> None:
    nonce, timeout, max_chars = body["nonce"], float(body["timeout"]), int(body["max_chars"])
    code, err = _timed(lambda: _load(body["code"]), timeout)
    _send(out_fd, nonce, {"k": "exec", "err": err, "caps": caps})
    if err is None:
        for i, call in enumerate(body["calls"]):
            text, err = _timed(lambda call=call: _call(code, call, max_chars), timeout)
            if err is None:
                msg = '{"k":"test","i":%d,"out":%s,"n":"%s"}\n' % (i, text, nonce)
                data = msg.encode()
                while data:
                    data = data[os.write(out_fd, data) :]
            else:
                _send(out_fd, nonce, {"k": "test", "i": i, "err": err})
    _send(out_fd, nonce, {"k": "done"})


def _seed() -> None:
    """Same random state for every fresh module, so reruns and reference/candidate runs agree."""
    import random

    random.seed(0)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(0)


def _child(ctx: dict, header: dict, jail_dir: str) -> None:
    """Runs in the forked child; never returns."""
    status, out_fd, nonce = 0, None, ""
    try:
        keep = (ctx["results_fd"], ctx["jobs_fd"])
        cpu_s = int(header["limits"]["cpu_s"])
        caps, (out_fd, jobs_fd) = jail.confine_child(jail_dir, keep, ctx["devnull"], cpu_s)
        signal.signal(signal.SIGALRM, _on_alarm)
        gc.disable()  # a short-lived child: the rlimits bound what cycles could leak
        body = _read_body(jobs_fd, int(header["size"]))
        os.close(jobs_fd)
        nonce = body["nonce"]
        _run_tests(body, out_fd, caps)
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the child must not return
        status = 70
        try:
            _send(out_fd, nonce, {"k": "crash", "err": _describe(exc)})
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


class _Control:
    """Line-oriented reader of the control pipe (stdin), usable together with select."""

    def __init__(self) -> None:
        self.buf = b""

    def line(self, timeout: float | None):
        while b"\n" not in self.buf:
            ready, _, _ = select.select([0], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(0, 65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _reply(msg: dict) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def _exit_description(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _supervise(ctl: _Control, job_id: int, pid: int, backstop: float) -> str:
    """Wait for the child to exit, or for a kill order, or for the backstop; reap it."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            if ctl.buf:
                ready = [0]
            else:
                ready, _, _ = select.select([0, pidfd], [], [], backstop)
            if not ready:
                break
            if pidfd in ready:
                return _exit_description(os.waitpid(pid, 0)[1])
            try:
                msg = ctl.line(0.5)
            except EOFError:  # the scorer is closing: stop the child, then exit
                break
            if msg is not None and msg.get("kill") == job_id:
                break
    finally:
        os.close(pidfd)
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    return _exit_description(os.waitpid(pid, 0)[1]) + " (stopped by the scorer)"


def _run_job(ctx: dict, ctl: _Control, header: dict, counter: int) -> None:
    jail_dir = os.path.join(ctx["jail_root"], f"j{counter}")
    os.mkdir(jail_dir, 0o700)
    if os.geteuid() == 0:
        os.chown(jail_dir, jail.NOBODY, jail.NOBODY)
    pid = ctx["fork"]()
    if pid == 0:
        _child(ctx, header, jail_dir)
    description = _supervise(ctl, header["id"], pid, float(header.get("backstop", 60)))
    try:
        os.rmdir(jail_dir)  # the common case: the program left no files
    except OSError:
        shutil.rmtree(jail_dir, ignore_errors=True)
    _reply({"id": header["id"], "exit": description})


def _preload(cfg: dict) -> list[str]:
    """Import what candidates may import: a chrooted child cannot import anything new."""
    sys.path.extend(cfg.get("paths", []))
    os.environ.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    missing = []
    for name in cfg.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - optional packages may be absent
            missing.append(name)
    os.environ.clear()
    return missing


def main() -> None:
    cfg = json.loads(sys.argv[1])
    caps = jail.isolate_server(cfg["jail_root"], int(cfg.get("tmpfs_mb", 256)))
    missing = _preload(cfg)
    ctx = {
        "jail_root": cfg["jail_root"],
        "results_fd": int(cfg["results_fd"]),
        "jobs_fd": int(cfg["jobs_fd"]),
        "devnull": os.open(os.devnull, os.O_RDWR),
    }
    caps["root"] = os.geteuid() == 0
    caps["seccomp_arch"] = jail.seccomp_program(os.getpid()) is not None
    as_base = jail.address_space_now() + 64 * 2**20  # + slack for what the child maps
    jail.apply_shared_limits(as_base=as_base, **cfg["limits"])
    ctx["fork"] = jail.fork_function()
    gc.collect()
    gc.freeze()  # children then leave the pre-imported objects' pages alone (fewer COW copies)
    _reply({"ready": True, "caps": caps, "missing": missing})
    ctl = _Control()
    counter = 0
    while True:
        try:
            header = ctl.line(None)
        except EOFError:
            return
        if "kill" in header:  # a kill order for a job that already ended
            continue
        counter += 1
        _run_job(ctx, ctl, header, counter)


if __name__ == "__main__":
    main()
