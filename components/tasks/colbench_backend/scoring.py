"""ColBench backend scoring: run reference and candidate code in the sandbox, compare outside.

Reads: the tasks JSONL (BackendTask records) and an answers JSONL of rows
`{"index": <0-based task line>, "answer": "<code>"}`; the reference-output cache under
`cache_dir` (default `data/cache/scoring`, relative to the working directory).
Writes: a scores JSONL of `ScoreResult` rows (one per answers row, in the same order) and new
reference outputs into the cache (one JSON file per key = sha256 of the reference code, the test
calls, the timeout and the sandbox's Python version and missing modules; outputs that timed out
are never cached, since a slow machine must not freeze a failure).

Scoring follows the official ColBench scorer (facebookresearch/sweet_rl,
sweet_rl/utils/code_utils.py, `check_correctness`; docs/algorithms.md): a banned substring in the raw
answer gives 0, then the marker and fences are stripped (rules.py); for each test call the
reference and the candidate are both executed afresh (the official code re-executes the source
before every call, so no module state survives from one call to the next: ours too, see
server.py); a test passes when the candidate's output equals the reference's and the
reference's is not None (a reference call that raised counts as None, as officially);
score = passed / total; success = score == 1.0.
Departures from the official scorer:
- every program runs in a confined child process (sandbox.py, jail.py), not with in-process
  exec; the 1 s limit covers each test call together with its fresh module execution, as
  officially, but applies to the reference as well (the official reference runs untimed), and
  the program's first execution (the probe reporting its errors) gets 1 s too;
- the code runs as a module with its own globals, so its imports, helper functions, module
  constants and recursive calls work (the official exec binds these names in its calling
  function's local scope, where the defined function cannot see them: NameError, for the
  reference as for the candidate); a task whose reference needs a module absent from the
  sandbox (e.g. bs4 when not installed) has reference outputs None and cannot be passed;
- random seeds are reset before every fresh module execution (officially the process's random
  state runs on across calls, tasks and reference/candidate);
- outputs are encoded inside the child and compared here with Python `==` on rebuilt builtin
  values (wire.py): an object with an always-true `__eq__` or any non-standard type never passes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

from pydantic import BaseModel, Field

from components.data.records import RecordError, ScoreResult, parse_row, write_jsonl
from components.data.tasks import BackendTask, load_backend_tasks
from components.scoring.rules import prepare_answer
from components.scoring.sandbox import Limits, RunResult, SandboxPool
from components.scoring.wire import from_wire, outputs_equal

DEFAULT_CACHE_DIR = Path("data/cache/scoring")
CACHE_VERSION = 2  # 2: fresh module state per test call


class AnswerRow(BaseModel):
    """One row of the answers file."""

    index: int = Field(ge=0)
    answer: str


def calls_of(task: BackendTask) -> list[str]:
    """The task's test call expressions in file order (test1..test10)."""
    return list(task.test_cases.values())


class ReferenceCache:
    """Reference outputs on disk, one JSON file per key; `root=None` keeps them in memory only."""

    def __init__(self, root: Path | None, fingerprint: dict) -> None:
        self.root, self.fingerprint, self.memory = root, fingerprint, {}

    def key(self, task: BackendTask) -> str:
        blob = json.dumps(
            {"v": CACHE_VERSION, "code": task.ground_truth, "calls": calls_of(task), **self.fingerprint}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return Path(self.root) / "backend_refs" / key[:2] / f"{key}.json"

    def get(self, key: str) -> list | None:
        if key in self.memory:
            return self.memory[key]
        if self.root is None or not self._path(key).is_file():
            return None
        try:
            outputs = json.loads(self._path(key).read_text(encoding="utf-8"))["outputs"]
        except (OSError, ValueError, KeyError):
            return None
        self.memory[key] = outputs
        return outputs

    def put(self, key: str, run: RunResult) -> list:
        outputs = list(run.outputs)
        self.memory[key] = outputs
        timed_out = run.exit != "done" or any(e and "Timeout" in e for e in run.errors)
        if self.root is not None and not timed_out:
            path = self._path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(
                json.dumps({"outputs": outputs, "errors": run.errors, "exec_error": run.exec_error}), encoding="utf-8"
            )
            os.replace(tmp, path)
        return outputs


def _compare(index: int, reference: list, run: RunResult) -> ScoreResult:
    """Count the tests whose decoded outputs are equal and whose reference output is not None."""
    total = len(reference)
    passed = 0
    for ref_wire, out_wire in zip(reference, run.outputs):
        ref = from_wire(ref_wire)
        if ref is not None and out_wire is not None and outputs_equal(from_wire(out_wire), ref):
            passed += 1
    error = run.exec_error
    failures = [(i, e) for i, e in enumerate(run.errors) if e]
    if error is None and failures:
        error = f"{len(failures)} test call(s) failed; first: test{failures[0][0] + 1}: {failures[0][1]}"
    if error is None and run.exit not in (None, "done"):
        error = f"sandbox: {run.exit}"
    score = passed / total if total else 0.0
    return ScoreResult(
        index=index, score=score, passed=passed, total=total, success=total > 0 and passed == total, error=error
    )


def score_answers(
    tasks: Sequence[BackendTask],
    answers: Sequence[tuple[int, str]],
    cache_dir: Path | None = None,
    workers: int | None = None,
    limits: Limits | None = None,
    sandboxes: Callable[[int | None, Limits | None], SandboxPool] = SandboxPool,
) -> list[ScoreResult]:
    """Score each (task index, answer) pair; results are in the order of `answers`. `sandboxes`
    builds the fork-servers from (workers, limits): this machine's SandboxPool, or on a Ray cluster
    components/cluster/sandboxes.py's RaySandboxes (one pool per node)."""
    prepared = [(index, *prepare_answer(answer)) for index, answer in answers]
    results: list[ScoreResult | None] = [None] * len(prepared)
    jobs = []
    for pos, (index, code, reason) in enumerate(prepared):
        if not 0 <= index < len(tasks):
            results[pos] = ScoreResult.failed(index, 0, f"task index {index} out of range 0..{len(tasks) - 1}")
        elif reason is not None:
            results[pos] = ScoreResult.failed(index, len(tasks[index].test_cases), reason)
        else:
            jobs.append((pos, index, code))
    if not jobs:
        return results  # type: ignore[return-value]
    with sandboxes(workers, limits) as pool:
        cache = ReferenceCache(DEFAULT_CACHE_DIR if cache_dir is None else Path(cache_dir), _fingerprint(pool))
        with ThreadPoolExecutor(max_workers=pool.workers) as executor:
            references = _references(tasks, {index for _, index, _ in jobs}, cache, pool, executor)
            runs = executor.map(lambda job: pool.run(job[2], calls_of(tasks[job[1]])), jobs)
            for (pos, index, _), run in zip(jobs, runs):
                results[pos] = _compare(index, references[index], run)
    return results  # type: ignore[return-value]


def _fingerprint(pool: SandboxPool) -> dict:
    return {"timeout": pool.limits.timeout_s, "python": list(sys.version_info[:2]), "missing": sorted(pool.missing)}


def _references(
    tasks: Sequence[BackendTask],
    needed: set[int],
    cache: ReferenceCache,
    pool: SandboxPool,
    executor: ThreadPoolExecutor,
) -> dict[int, list]:
    """Reference wire outputs per task index: from the cache, or run in the sandbox."""
    found, todo = {}, []
    for index in sorted(needed):
        key = cache.key(tasks[index])
        outputs = cache.get(key)
        if outputs is None:
            todo.append((index, key))
        else:
            found[index] = outputs
    runs = executor.map(lambda item: pool.run(tasks[item[0]].ground_truth, calls_of(tasks[item[0]])), todo)
    for (index, key), run in zip(todo, runs):
        found[index] = cache.put(key, run)
    return found


def _read_answers(path: Path, n_tasks: int) -> list[tuple[int, str] | ScoreResult]:
    """Parse the answers file; a malformed row becomes a failed ScoreResult plus a warning."""
    rows: list[tuple[int, str] | ScoreResult] = []
    with Path(path).open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = parse_row(line, AnswerRow, where)
                if row.index >= n_tasks:
                    raise RecordError(
                        f"{where}: field 'index': {row.index} is out of range (the tasks file has {n_tasks} tasks)"
                    )
                rows.append((row.index, row.answer))
            except RecordError as exc:
                print(f"warning: malformed answers row: {exc}", file=sys.stderr)
                rows.append(ScoreResult.failed(_raw_index(line), 0, f"malformed answers row: {exc}"))
    return rows


def _raw_index(line: str) -> int:
    try:
        value = json.loads(line).get("index")
    except (ValueError, AttributeError):
        return -1
    return value if type(value) is int else -1


def score_files(
    tasks_path: Path,
    answers_path: Path,
    out_path: Path,
    cache_dir: Path | None = None,
    workers: int | None = None,
    print_summary: bool = True,
) -> dict:
    """The `sweetflow score` contract: write SCORES.jsonl, print and return the summary.

    Summary: n = answers rows (malformed ones count as failures), tests_passed = mean score
    (fraction of tests passed, in [0, 1]), success_rate = fraction of rows with score 1.0.
    """
    tasks = load_backend_tasks(Path(tasks_path))
    rows = _read_answers(Path(answers_path), len(tasks))
    good = [row for row in rows if not isinstance(row, ScoreResult)]
    scored = iter(score_answers(tasks, good, cache_dir=cache_dir, workers=workers))
    results = [row if isinstance(row, ScoreResult) else next(scored) for row in rows]
    write_jsonl(Path(out_path), results)
    n = len(results)
    summary = {
        "n": n,
        "tests_passed": sum(r.score for r in results) / n if n else 0.0,
        "success_rate": sum(r.success for r in results) / n if n else 0.0,
    }
    if print_summary:
        print(json.dumps(summary), flush=True)
    return summary
