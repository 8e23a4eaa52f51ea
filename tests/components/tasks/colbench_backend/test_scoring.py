"""Scoring rules, output comparison, the score_files contract and the reference cache."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from components.data.tasks import BackendTask
from components.scoring.rules import BANNED, prepare_answer, strip_fences, strip_marker
from components.scoring.sandbox import SandboxPool
from components.scoring.wire import Unserialisable, from_wire, outputs_equal, to_wire
from components.tasks.colbench_backend import scoring as backend
from components.tasks.colbench_backend.scoring import ScoreResult, score_answers, score_files
from tests.conftest import REPO

REF = "def f(x):\n    if x < 0:\n        return None\n    if x == 99:\n        raise ValueError(x)\n    return x * 2\n"


def _task(code: str = REF, calls=("f(1)", "f(2)", "f(3)", "f(-1)")) -> BackendTask:
    return BackendTask(
        problem_description="double it. The signature of the function is: def f(x)",
        ground_truth=code,
        hidden_information=code,
        test_cases={f"test{i + 1}": c for i, c in enumerate(calls)},
    )


# --- rules ----------------------------------------------------------------------------------
def test_marker_and_fences_are_stripped():
    answer = "I WANT TO ANSWER:\nHere you go:\n```python\ndef f(x):\n    return x\n```\nDone."
    assert strip_marker(answer).startswith("Here you go")
    assert strip_fences(strip_marker(answer)) == "def f(x):\n    return x"
    assert strip_fences("```\ndef g():\n    pass\n```") == "def g():\n    pass"
    assert strip_fences("def g():\n    pass\n```") == "def g():\n    pass"
    assert strip_fences("def h():\n    return 1") == "def h():\n    return 1"
    assert prepare_answer("```py\ndef f(x):\n    return x\n")[0] == "def f(x):\n    return x"


@pytest.mark.parametrize("word", BANNED)
def test_banned_substrings_score_zero(word):
    code, reason = prepare_answer(f"def f(x):\n    # {word}\n    return x * 2\n")
    assert reason and word in reason


@pytest.mark.parametrize(
    "answer",
    [
        "No need for import os here:\n```python\ndef f(x):\n    return x * 2\n```",
        "```python\ndef f(x):\n    return x * 2\n```\nI could also have used import os.",
    ],
)
def test_banned_substring_in_the_prose_around_the_code_scores_zero(answer, tmp_path, monkeypatch):
    """Checked on the raw answer as officially; before, only the fenced code was checked."""
    code, reason = prepare_answer(answer)
    assert code == "def f(x):\n    return x * 2" and "'import os'" in reason
    monkeypatch.setattr(backend, "SandboxPool", lambda *a, **k: pytest.fail("must not start a sandbox"))
    result = score_answers([_task()], [(0, answer)], cache_dir=tmp_path)[0]
    assert result.score == 0.0 and "banned" in result.error


def test_banned_and_empty_answers_are_not_run(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("must not start a sandbox")

    monkeypatch.setattr(backend, "SandboxPool", boom)
    results = score_answers(
        [_task()],
        [(0, "import sys\ndef f(x):\n    return 2 * x"), (0, "  "), (3, "def f(x): pass")],
        cache_dir=tmp_path,
    )
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert "banned" in results[0].error and results[1].error == "empty answer"
    assert "out of range" in results[2].error and results[0].total == 4


# --- wire format and equality ---------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -5,
        2**100,
        1.5,
        "s",
        [1, [2, (3,)]],
        (1, "a"),
        {"k": [1]},
        {(1, 2): {3}},
        {1, 2},
        frozenset({"a"}),
        b"\x00\xff",
        bytearray(b"ab"),
        1 + 2j,
        range(1, 9, 2),
        float("inf"),
        [],
        (),
    ],
)
def test_wire_roundtrip(value):
    decoded = from_wire(json.loads(json.dumps(to_wire(value))))
    assert decoded == value and type(decoded) in (type(value), frozenset, bytes)


def test_equality_follows_python_rules_on_rebuilt_values():
    eq = lambda a, b: outputs_equal(from_wire(to_wire(a)), from_wire(to_wire(b)))  # noqa: E731
    assert eq(1, 1.0) and eq(True, 1) and eq({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert eq({3, 1, 2}, {1, 2, 3}) and not eq([1, 2], (1, 2)) and not eq([1, 2], [2, 1])
    assert not eq(float("nan"), float("nan"))
    marker = from_wire(to_wire(object()))
    assert isinstance(marker, Unserialisable) and marker != marker


def test_malformed_wire_data_never_equals():
    for bad in ([1, 2], {"t": "list"}, {"t": "nope", "v": 1}, {"t": "dict", "v": [[[1], 2]]}):
        assert not outputs_equal(from_wire(bad), from_wire(bad))


# --- score arithmetic -------------------------------------------------------------------------
def test_score_arithmetic_and_none_reference(tmp_path):
    task = _task(calls=("f(1)", "f(2)", "f(3)", "f(-1)", "f(99)"))  # f(-1) -> None, f(99) raises
    answers = [
        (0, REF),  # itself: 3/5 (the None and the raising reference can never pass)
        (0, "def f(x):\n    return None if x < 0 else (7 if x == 3 else x * 2)\n"),  # 2/5
        (0, "def f(x):\n    return x * 2.0\n"),  # 2.0 == 2 -> 3/5
        (0, "```python\ndef f(x):\n    return [x]\n```"),  # 0/5
        (0, "def f(x) return"),  # SyntaxError
    ]
    results = score_answers([task], answers, cache_dir=tmp_path, workers=2)
    assert [r.passed for r in results] == [3, 2, 3, 0, 0]
    assert all(r.total == 5 for r in results)
    assert results[0].score == pytest.approx(0.6) and not results[0].success
    assert "SyntaxError" in results[4].error


def test_success_needs_every_test(tmp_path):
    task = _task(calls=("f(1)", "f(2)"))
    results = score_answers([task], [(0, REF), (0, "def f(x):\n    return 2 if x == 1 else 0\n")], cache_dir=tmp_path)
    assert results[0].success and results[0].score == 1.0
    assert not results[1].success and math.isclose(results[1].score, 0.5)


def test_helpers_and_module_imports_work(tmp_path):
    code = "import math\ndef _h(x):\n    return math.floor(x) * 2\ndef f(x):\n    return _h(x)\n"
    assert score_answers([_task(calls=("f(1)", "f(2)"))], [(0, code)], cache_dir=tmp_path)[0].success


COUNTER = "seen = []\ndef f(x):\n    seen.append(x)\n    return len(seen)\n"
ONE = "def f(x):\n    return 1\n"


@pytest.mark.parametrize(("reference", "candidate"), [(ONE, COUNTER), (COUNTER, ONE), (COUNTER, COUNTER)])
def test_each_test_call_sees_fresh_module_state(tmp_path, reference, candidate):
    """Reference and candidate are executed afresh for every call, as officially: a module-level
    list no longer carries over (before, a counter returned 1, 2, 3: 1 test of 3 against ONE)."""
    result = score_answers([_task(reference, calls=("f(1)", "f(2)", "f(3)"))], [(0, candidate)], cache_dir=tmp_path)
    assert result[0].passed == 3 and result[0].success


# --- reference cache --------------------------------------------------------------------------
def test_reference_outputs_are_cached(tmp_path, monkeypatch):
    tasks = [_task(), _task(REF.replace("x * 2", "x * 3"))]
    answers = [(0, REF), (1, REF), (1, REF)]
    first = score_answers(tasks, answers, cache_dir=tmp_path)
    assert len(list((tmp_path / "backend_refs").rglob("*.json"))) == 2
    runs = []
    original = SandboxPool.run
    monkeypatch.setattr(SandboxPool, "run", lambda self, code, calls: runs.append(code) or original(self, code, calls))
    second = score_answers(tasks, answers, cache_dir=tmp_path)
    assert len(runs) == 3  # the candidates only; both references came from the cache
    assert [r.passed for r in first] == [r.passed for r in second] == [3, 0, 0]


def test_timed_out_references_are_not_cached(tmp_path):
    slow = "def f(x):\n    while x > 1:\n        pass\n    return x\n"
    score_answers([_task(slow, calls=("f(1)", "f(2)"))], [(0, slow)], cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))


# --- the score_files / CLI contract -----------------------------------------------------------
def _write_files(tmp_path: Path) -> tuple[Path, Path]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(_task(calls=c).model_dump_json() + "\n" for c in [("f(1)", "f(2)"), ("f(3)", "f(-1)")]))
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        "\n".join(
            [
                json.dumps({"index": 0, "answer": "I WANT TO ANSWER:\n```python\n" + REF + "```"}),
                "{not json",
                json.dumps({"index": 1}),
                json.dumps({"index": 7, "answer": REF}),
                json.dumps({"index": 1, "answer": REF}),
            ]
        )
        + "\n"
    )
    return tasks, answers


def test_score_files_contract_with_malformed_rows(tmp_path, capsys):
    tasks, answers = _write_files(tmp_path)
    out = tmp_path / "scores.jsonl"
    summary = score_files(tasks, answers, out, cache_dir=tmp_path / "cache")
    captured = capsys.readouterr()
    rows = [ScoreResult.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [r.index for r in rows] == [0, -1, 1, 7, 1]
    assert [r.score for r in rows] == [1.0, 0.0, 0.0, 0.0, 0.5]
    assert all(r.error for r in rows[1:4]) and rows[0].error is None
    for line_no in (2, 3, 4):
        assert f"{answers}:{line_no}" in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1]) == summary
    assert summary == {"n": 5, "tests_passed": pytest.approx(0.3), "success_rate": pytest.approx(0.2)}


def test_module_cli(tmp_path):
    tasks, answers = _write_files(tmp_path)
    out = tmp_path / "scores.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.scoring",
            "--tasks",
            str(tasks),
            "--answers",
            str(answers),
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--workers",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["n"] == 5
    assert len(out.read_text().splitlines()) == 5


def test_numpy_programs_run_on_a_heavy_server(tmp_path):
    pytest.importorskip("numpy")
    ref = "import numpy as np\ndef f(x):\n    return np.float64(x) / 2\ndef g(n):\n    return np.arange(n)\n"
    task = _task(ref, calls=("f(3)", "g(3)"))
    answers = [(0, ref), (0, "def f(x):\n    return x / 2\ndef g(n):\n    return list(range(n))\n")]
    results = score_answers([task], answers, cache_dir=tmp_path)
    assert [r.passed for r in results] == [2, 1]  # a plain float equals np.float64; a list is no array
