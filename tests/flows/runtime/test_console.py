"""flows/runtime/console.py: a step's child output goes whole to its log; the console gets bars, warnings,
errors and the result line (everything with --verbose); the CLI's --verbose and quiet logging."""

from __future__ import annotations

import io
import logging
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.runtime import console
from flows.runtime.console import VERBOSE_ENV, compact_result, run_logged
from tests.processes import alive

CHATTY = textwrap.dedent("""
    import json, logging, sys, time, warnings
    from tqdm import tqdm
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("vllm.engine")
    for i in range(3):
        print(f"INFO 12-03 08:00:0{i} [core.py:{i}] engine chatter {i}", file=sys.stderr, flush=True)
    log.info("Automatically detected platform cpu.")
    print("wrote runs/x/trajectories.jsonl")
    for _ in tqdm(range(5), desc="episodes", mininterval=0, ncols=60):
        time.sleep(0.01)
    log.warning("KV cache is small")
    log.warning("KV cache is small")
    warnings.warn("this call is deprecated", UserWarning)
    print(json.dumps({"success_rate": 0.123456, "n": 4, "per_task": {"a": 1}}))
""")

FAILING = textwrap.dedent("""
    import sys
    for i in range(50):
        print(f"INFO step chatter {i}", file=sys.stderr)
    def boom():
        raise ValueError("the simulator endpoint is gone")
    boom()
""")


def _run(tmp_path: Path, script: str, **kw):
    env = dict(os.environ)
    env.pop(VERBOSE_ENV, None)
    return run_logged([sys.executable, "-c", script], tmp_path / "logs" / "step.log", env, **kw)


def test_quiet_console_shows_bar_warnings_and_result_and_the_log_keeps_everything(tmp_path, capsys):
    result = _run(tmp_path, CHATTY)
    out = capsys.readouterr().out
    assert result.returncode == 0
    assert "chatter" not in out and "detected platform" not in out and "wrote runs" not in out
    bar_lines = [line for line in out.splitlines() if "episodes" in line]
    assert len(bar_lines) == 1 and "100%" in bar_lines[0] and "5/5" in bar_lines[0]  # final state only
    assert "\r" not in out  # not a terminal: no in-place updates
    assert out.count("KV cache is small") == 1 and "1 repeated warning line(s)" in out
    assert "UserWarning: this call is deprecated" in out
    assert "  result: success_rate 0.1235, n 4" in out and "per_task" not in out
    log = result.log_path.read_text()
    assert result.log_path == tmp_path / "logs" / "step.log"
    assert log.startswith("===== ") and " run: " in log.splitlines()[0]
    for text in (
        "engine chatter 0",
        "engine chatter 2",
        "Automatically detected platform cpu",
        "wrote runs",
        "episodes:  40%",
        '"per_task": {"a": 1}',
        "===== exit 0 after",
    ):
        assert text in log
    assert len(log.splitlines()[0]) < 2000 and log.split("=====\n", 1)[1].count("KV cache is small") == 2


def test_known_engine_chatter_and_per_source_repeats_stay_in_the_log(tmp_path, capsys):
    script = textwrap.dedent("""
        import sys
        for name in ("embed_tokens", "norm"):
            print(f"WARNING 12-03 22:33:52 [utils.py:333] Attempted to load weight {name}.weight", file=sys.stderr)
        print("WARNING 12-03 22:33:35 [cpu.py:224] Triton is not installed. triton-cpu is expected", file=sys.stderr)
        for n in (1, 2):
            print(f"WARNING 12-03 22:33:53 [engine.py:77] request {n} was cut at max_model_len", file=sys.stderr)
    """)
    result = _run(tmp_path, script)
    out = capsys.readouterr().out
    assert "Attempted to load weight" not in out and "Triton is not installed" not in out
    assert out.count("was cut at max_model_len") == 1 and "request 1 was cut" in out  # one per source line
    log = result.log_path.read_text()
    assert "norm.weight" in log and "Triton is not installed" in log and "request 2 was cut" in log


def test_failure_prints_the_log_tail_and_its_path(tmp_path, capsys):
    result = _run(tmp_path, FAILING)
    captured = capsys.readouterr()
    assert result.returncode == 1
    # the traceback reaches the console as it happens, chatter does not
    assert "Traceback (most recent call last)" in captured.out
    assert "ValueError: the simulator endpoint is gone" in captured.out
    assert "step chatter" not in captured.out
    # then the last 30 lines of the log, and where the whole log is
    assert f"the last 30 lines of {result.log_path}" in captured.err
    assert f"full log: {result.log_path}" in captured.err
    assert "step chatter 49" in captured.err and "step chatter 20" not in captured.err
    assert "ValueError: the simulator endpoint is gone" in captured.err
    assert "===== exit 1 after" in result.log_path.read_text()


def test_a_step_that_fills_the_disk_is_told_so(tmp_path, capsys):
    """A file-size limit stands in for a full disk: the write fails with EFBIG as it would with ENOSPC."""
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
        with open({str(tmp_path / "records.jsonl")!r}, "wb") as fh:
            fh.write(b"x" * (1 << 17))
    """)
    result = _run(tmp_path, script)
    err = capsys.readouterr().err
    assert result.returncode == 1 and "File too large" in err
    assert f"the disk is full (or a file-size or quota limit was hit) under {tmp_path}" in err
    assert "run the same command again" in err


LOG_FILLER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from flows.runtime.console import run_logged
    chatty = "import sys\\nfor i in range(4000): print('INFO line', i, 'x' * 60, file=sys.stderr)\\nprint('done')"
    result = run_logged([sys.executable, "-c", chatty], Path(sys.argv[1]), verbose=False, show=["done"])
    print("exit", result.returncode, "last", result.tail[-1])
""")


def test_a_log_write_that_fails_ends_the_logging_not_the_step(tmp_path):
    """The log file hits a file-size limit (a full disk) part way: the step runs to its end."""
    log = tmp_path / "step.log"

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    proc = subprocess.run(
        [sys.executable, "-c", LOG_FILLER, str(log)], capture_output=True, text=True, preexec_fn=limited, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout and "exit 0 last done" in proc.stdout
    assert log.stat().st_size <= 1 << 16


def test_verbose_echoes_everything_but_hidden_lines(tmp_path, capsys):
    result = _run(
        tmp_path,
        CHATTY + "print('To track the changes with git, run: git add dvc.lock')\n",
        verbose=True,
        hide=("To track the changes with git",),
    )
    out = capsys.readouterr().out
    assert result.returncode == 0
    for text in ("engine chatter 0", "detected platform", "wrote runs", "episodes:  40%", '"per_task": {"a": 1}'):
        assert text in out
    assert out.count("KV cache is small") == 2
    assert "git add dvc.lock" not in out and "git add dvc.lock" in result.log_path.read_text()


def test_verbose_comes_from_the_environment(tmp_path, capsys):
    env = dict(os.environ, **{VERBOSE_ENV: "1"})
    run_logged([sys.executable, "-c", "import sys; print('INFO chatter', file=sys.stderr)"], tmp_path / "v.log", env)
    assert "INFO chatter" in capsys.readouterr().out


def test_log_appends_one_header_per_attempt_and_watch_and_show(tmp_path, capsys):
    script = "print(\"Stage 'rollouts' didn't change, skipping\"); print('Updating lock file')"
    first = _run(tmp_path, script, watch=("didn't change, skipping", "never printed"))
    second = _run(
        tmp_path, "print('second attempt')", watch=("didn't change, skipping",), show=("didn't change, skipping",)
    )
    out = capsys.readouterr().out
    assert first.seen == {"didn't change, skipping"} and second.seen == set()
    assert out.count("didn't change, skipping") == 0  # only echoed when asked to show it
    third = _run(tmp_path, script, show=("didn't change, skipping",))
    assert "  Stage 'rollouts' didn't change, skipping" in capsys.readouterr().out and third.returncode == 0
    log = first.log_path.read_text()
    assert log.count(" run: ") == 3 and log.count("===== exit 0") == 3
    assert log.index("Updating lock file") < log.index("second attempt")


def test_bar_updates_in_place_on_a_terminal(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    script = (
        "import time, logging\nfrom tqdm import tqdm\nlogging.basicConfig(level=logging.INFO)\n"
        "for i in tqdm(range(3), desc='train', mininterval=0, ncols=60):\n"
        "    time.sleep(0.05)\n    logging.warning('loss spiked') if i == 1 else None\n"
    )
    result = _run(tmp_path, script, out=tty)
    text = tty.getvalue()
    assert result.returncode == 0
    assert text.count("\rtrain") == 0 and text.count("\r  train") >= 3  # redrawn in place, indented
    assert "\r\x1b[K  WARNING:root:loss spiked\n" in text  # lifted off the bar, which is redrawn
    assert text.rstrip("\n").splitlines()[-1].lstrip("\r").startswith("  train: 100%")


def test_compact_result():
    assert (
        compact_result('{"success_rate": 0.5, "ok": true, "model": "m", "n": 3}')
        == "result: success_rate 0.5, ok true, model m, n 3"
    )
    assert compact_result("not json {") is None and compact_result("[1, 2]") is None
    many = "{" + ", ".join(f'"k{i}": {i}' for i in range(15)) + "}"
    assert compact_result(many).endswith("k11 11, ... (+3 in the log)")


def test_interrupt_sends_sigterm_to_the_whole_group(tmp_path, capsys):
    """Ctrl-C (or the CLI's SIGTERM -> SystemExit) while a step runs stops the child and its own
    children (an engine's workers), not just the direct child."""
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(f'grandchild {p.pid}', flush=True)\ntime.sleep(60)\n"
    )

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        with pytest.raises(Stop):
            _run(tmp_path, script)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    log = (tmp_path / "logs" / "step.log").read_text()
    assert "interrupted; process group sent SIGTERM" in log
    pid = int(log.split("=====\n", 1)[1].split("grandchild ")[1].split()[0])
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


# -- the CLI: --verbose, and a quiet Prefect console otherwise --------------------------------


@pytest.fixture
def logging_restored(monkeypatch):
    from prefect.logging.handlers import PrefectConsoleHandler

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    monkeypatch.delenv("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", raising=False)
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL", raising=False)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    consoles = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    if not consoles:  # `from prefect import flow` puts it there, unless other handlers came first (pytest's)
        consoles = [PrefectConsoleHandler(stream=io.StringIO())]
        root.addHandler(consoles[0])
    levels = [h.level for h in consoles]
    sigterm = signal.getsignal(signal.SIGTERM)
    yield consoles
    root.handlers[:] = handlers
    root.setLevel(level)
    for h, lvl in zip(consoles, levels):
        h.setLevel(lvl)
    signal.signal(signal.SIGTERM, sigterm)


def test_verbose_flag_sets_the_env_var(logging_restored):
    from typer.testing import CliRunner

    from flows.cli.commands import app

    result = CliRunner().invoke(app, ["--verbose", "score", "--help"])
    assert result.exit_code == 0 and os.environ.get(VERBOSE_ENV) == "1"
    assert "--verbose" in CliRunner().invoke(app, ["--help"]).output


def test_setup_keeps_libraries_and_prefect_console_at_warning(logging_restored):
    from flows.cli.app import setup

    setup()
    assert logging.getLogger().level == logging.WARNING
    assert os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] == "WARNING"
    assert all(h.level == logging.WARNING for h in logging_restored)


def test_setup_verbose_shows_info(logging_restored, monkeypatch):
    from flows.cli.app import setup

    monkeypatch.setenv(VERBOSE_ENV, "1")
    setup()
    assert logging.getLogger().level == logging.INFO
    assert "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL" not in os.environ
    assert all(h.level == logging.NOTSET for h in logging_restored)


def test_echo_bypasses_prefect_print_logging(capsys):
    console.echo("== iter 1 rollouts ==")
    assert capsys.readouterr().out == "== iter 1 rollouts ==\n"
