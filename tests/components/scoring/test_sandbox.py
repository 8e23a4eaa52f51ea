"""The sandbox against hostile programs: each one must fail harmlessly, and the scorer must
survive it and still score a good answer afterwards. Runs the programs through the sandbox
directly (no banned-substring filter), so every confinement layer is exercised."""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path

import pytest

from components.data.tasks import BackendTask
from components.scoring.jail import seccomp_program
from components.scoring.sandbox import Limits, SandboxPool
from components.tasks.colbench_backend.scoring import score_answers
from tests.conftest import REPO

ROOT = os.geteuid() == 0
REPO_DATA = REPO / "data"
GOOD = "def add(a, b):\n    return a + b\n"
GOOD_CALLS = ["add(1, 2)", "add('a', 'b')", "add([1], [2])"]


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2, limits=Limits(timeout_s=1.0, grace_s=1.0, mem_mb=256)) as p:
        yield p


def _server_pids(pool: SandboxPool) -> list[int]:
    return sorted(s.proc.pid for s in pool._all)


def _assert_healthy(pool: SandboxPool, pids_before: list[int]) -> None:
    for _ in range(2):  # both servers
        run = pool.run(GOOD, GOOD_CALLS)
        assert run.errors == [None, None, None]
        assert run.outputs == [3, "ab", {"t": "list", "v": [1, 2]}]
    assert _server_pids(pool) == pids_before, "a fork-server died"
    assert all(s.proc.poll() is None for s in pool._all)


def _hostile(pool: SandboxPool, code: str, calls: list[str]):
    pids = _server_pids(pool)
    start = time.monotonic()
    run = pool.run(code, calls)
    elapsed = time.monotonic() - start
    _assert_healthy(pool, pids)
    return run, elapsed


def test_layers_active_as_root(pool):
    if not ROOT:
        pytest.skip("the namespaces, chroot and uid switch need root")
    assert pool.capabilities["netns"] and pool.capabilities["mountns"]
    run = pool.run(GOOD, GOOD_CALLS)
    assert run.caps == {"chroot": True, "setuid": True, "seccomp": seccomp_program(1) is not None}


def test_infinite_loop_times_out_per_call(pool):
    code = "def f():\n    while True:\n        pass\n"
    run, elapsed = _hostile(pool, code, ["f()", "1 + 1"])
    assert "Timeout" in run.errors[0] and run.outputs[1] == 2
    assert elapsed < 4


def test_the_call_timer_covers_the_fresh_module_execution(pool):
    """Each call re-executes the module, all under the call's 1 s (official: one alarm around
    exec and eval): 0.4 s of module code plus a 0.7 s call times out, the module alone does not."""
    code = (
        "import time\ndef spin(s):\n    end = time.monotonic() + s\n    while time.monotonic() < end:\n"
        "        pass\n    return s\nspin(0.4)\n"
    )
    run, _ = _hostile(pool, code, ["spin(0)", "spin(0.7)"])
    assert run.exec_error is None and run.outputs[0] == 0
    assert run.outputs[1] is None and "Timeout" in run.errors[1]


def test_loop_that_swallows_the_timeout_is_still_stopped(pool):
    code = (
        "def f():\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass\n"
    )
    run, elapsed = _hostile(pool, code, ["f()", "f()"])
    assert run.outputs == [None, None] and elapsed < 8


def test_memory_bomb(pool):
    code = "def f():\n    x = bytearray(4 * 1024**3)\n    return len(x)\ndef g():\n    return [0] * 10**9\n"
    run, _ = _hostile(pool, code, ["f()", "g()"])
    assert run.outputs == [None, None]
    assert all("MemoryError" in e for e in run.errors)


def test_fork_bomb_and_subprocess(pool):
    code = (
        "import os, subprocess\n"
        "def f():\n    while True:\n        os.fork()\n"
        "def g():\n    return subprocess.run(['/bin/true']).returncode\n"
        "def h():\n    return os.system('true')\n"
    )
    run, _ = _hostile(pool, code, ["f()", "g()", "h()"])
    assert run.outputs[:2] == [None, None]
    assert run.outputs[2] != 0  # system() could not fork
    assert all(e for e in run.errors[:2])


def test_threads_are_refused(pool):
    code = "import threading\ndef f():\n    threading.Thread(target=lambda: None).start()\n    return 1\n"
    run, _ = _hostile(pool, code, ["f()"])
    if ROOT:
        assert run.outputs == [None] and "RuntimeError" in run.errors[0]


def test_writes_outside_the_jail_do_not_land(pool, tmp_path):
    tag = secrets.token_hex(6)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(open_dir, 0o777)  # only the jail, not permissions, keeps the write out
    targets = [f"/tmp/sweetflow_x_{tag}", str(REPO_DATA / f"pwned_{tag}"), str(open_dir / "x"), f"/dev/shm/x_{tag}"]
    code = (
        "def w(p):\n    try:\n        with open(p, 'w') as fh:\n            fh.write('pwned')\n"
        "        return 'written'\n    except Exception as e:\n        return type(e).__name__\n"
    )
    run, _ = _hostile(pool, code, [f"w({t!r})" for t in targets] + ["w('local.txt')"])
    for target in targets:
        assert not os.path.exists(target), target
    assert run.outputs[-1] == "written"  # its private temp dir is writable


def test_reads_outside_the_jail_fail(pool):
    code = "def r(p):\n    with open(p) as fh:\n        return fh.read()[:20]\n"
    run, _ = _hostile(pool, code, ["r('/etc/passwd')", f"r({str(Path(__file__))!r})"])
    if ROOT:
        assert run.outputs == [None, None]


def test_network_is_unreachable(pool):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = (
        "import socket\ndef f(port):\n    s = socket.create_connection(('127.0.0.1', port), 0.5)\n"
        "    s.sendall(b'leak')\n    return 'connected'\n"
    )
    try:
        run, _ = _hostile(pool, code, [f"f({port})"])
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert run.outputs == [None]


def test_exit_calls(pool):
    code = "import os, sys\ndef a():\n    sys.exit(3)\ndef b():\n    raise SystemExit\ndef c():\n    os._exit(0)\n"
    run, _ = _hostile(pool, code, ["a()", "b()", "1", "c()", "2"])
    assert run.outputs == [None, None, 1, None, None]
    assert "SystemExit" in run.errors[0] and run.errors[3] is None
    assert run.exit and "exit status 0" in run.exit


@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getppid(), 9)",
        "os.killpg(os.getpgid(os.getppid()), 9)",
        "os.kill(-1, 9)",
        "os.kill(1, 15)",
        "os.setpgid(0, os.getppid())",
    ],
)
def test_cannot_signal_the_scorer(pool, attack):
    code = f"import os\ndef f():\n    {attack}\n    return 'sent'\n"
    run, _ = _hostile(pool, code, ["f()"])
    assert run.outputs == [None]


def test_huge_outputs(pool):
    code = (
        "def p():\n    for _ in range(10**6):\n        print('x' * 1000)\n    return 1\n"
        "def big():\n    return 'x' * 50_000_000\n"
    )
    run, _ = _hostile(pool, code, ["p()", "big()"])
    assert run.outputs[1] == {"t": "x", "v": "output too large"}


def test_flooding_the_result_pipe(pool):
    code = "import os\ndef f():\n    while True:\n        os.write(3, b'x' * 65536)\n"
    run, elapsed = _hostile(pool, code, ["f()"])
    assert run.outputs == [None] and elapsed < 4


def test_deep_recursion(pool):
    code = "import sys\ndef f(n):\n    return f(n + 1)\ndef g():\n    sys.setrecursionlimit(10**7)\n    return f(0)\n"
    run, _ = _hostile(pool, code, ["f(0)", "g()"])
    assert run.outputs == [None, None] and "RecursionError" in run.errors[0]


def test_import_tricks_are_contained(pool):
    tag = secrets.token_hex(6)
    code = (
        f"def f():\n    return __import__('o' + 's').system('touch /tmp/trick_{tag}')\n"
        "def g():\n    import importlib\n"
        f"    return importlib.import_module('sub' + 'process').call(['touch', '/tmp/trick2_{tag}'])\n"
        "def h():\n    import importlib\n    return importlib.import_module('shutil').which('sh')\n"
    )
    run, _ = _hostile(pool, code, ["f()", "g()", "h()"])
    assert not os.path.exists(f"/tmp/trick_{tag}") and not os.path.exists(f"/tmp/trick2_{tag}")
    assert run.outputs[1:] == [None, None]


def test_environment_is_empty(pool):
    code = (
        "def f():\n    return dict(__import__('os').environ)\n"
        "def g():\n    return open('/proc/self/environ', 'rb').read()\n"
    )
    run, _ = _hostile(pool, code, ["f()", "g()"])
    assert run.outputs[0] == {"t": "dict", "v": []}
    if ROOT:
        assert run.outputs[1] is None


def test_only_the_result_pipe_is_open_even_for_high_inherited_fds():
    """The server runs under the children's fd limit (32): fds it inherited above that number
    must still be closed in the child."""
    junk = [os.open(os.devnull, os.O_RDONLY) for _ in range(64)]  # the pool's pipes land above 64
    try:
        with SandboxPool(workers=1) as high:
            assert min(high._all[0].jobs_w, high._all[0].results_r) > 64
            code = (
                "import os\ndef f():\n    out = []\n    for fd in range(4096):\n        try:\n"
                "            os.fstat(fd)\n            out.append(fd)\n        except OSError:\n"
                "            pass\n    return out\n"
            )
            run = high.run(code, ["f()"])
    finally:
        for fd in junk:
            os.close(fd)
    assert run.outputs == [{"t": "list", "v": [0, 1, 2, 3]}]  # /dev/null x3 and the results pipe


def test_forged_done_then_spin_does_not_hurt_the_next_candidate(pool):
    code = (
        "import os, sys\nframe = sys._getframe()\nwhile 'nonce' not in frame.f_locals:\n"
        "    frame = frame.f_back\n"
        'os.write(3, (\'{"k":"done","n":"%s"}\\n\' % frame.f_locals[\'nonce\']).encode())\n'
        "while True:\n    pass\n"
    )
    pids = _server_pids(pool)
    run = pool.run(code, ["1"])
    assert run.outputs == [None]
    start = time.monotonic()
    _assert_healthy(pool, pids)  # the spinning child is stopped, the same server goes on
    assert time.monotonic() - start < 5


def test_a_dead_server_is_replaced(pool):
    victim = pool._all[0]
    victim.proc.kill()
    victim.proc.wait()
    for _ in range(pool.workers):  # idle servers are taken in turn: one of these gets the victim
        run = pool.run(GOOD, GOOD_CALLS)
        assert run.outputs[0] == 3
    assert victim not in pool._all


def test_no_module_state_carries_over_between_calls(pool):
    code = (
        "import random\nseen = []\ncount = 0\n"
        "def f(x, acc=[]):\n    global count\n    count += 1\n    seen.append(x)\n    acc.append(x)\n"
        "    return [count, len(seen), len(acc), random.random()]\n"
    )
    run = pool.run(code, ["f(1)", "f(2)", "f(3)"])
    assert run.errors == [None, None, None]
    first = run.outputs[0]
    assert first["v"][:3] == [1, 1, 1] and run.outputs == [first] * 3  # random seeds reset too


def test_always_equal_object_cannot_pass(tmp_path):
    task = BackendTask(
        problem_description="add",
        ground_truth=GOOD,
        hidden_information=GOOD,
        test_cases={"test1": "add(1, 2)", "test2": "add(2, 2)"},
    )
    liars = [
        "class A:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
        "def add(a, b):\n    return A()\n",
        "class S(int):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return S(0)\n",
        "class L(list):\n    def __eq__(self, o):\n        return True\n"
        "    def __iter__(self):\n        return iter([a + b])\n"
        "def add(a, b):\n    return L()\n",
    ]
    results = score_answers([task], [(0, code) for code in liars] + [(0, GOOD)], workers=1, cache_dir=tmp_path)
    assert [r.passed for r in results] == [0, 0, 0, 2]
