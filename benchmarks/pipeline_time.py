"""Benchmark: one pipeline run with an engine per sampling step vs with the run's one engine.

Runs `sweetflow run --profile P --baselines B` (default: `make run`'s pipeline) in this project, once
with `cluster.engine_scope=step` and once with `run`, alternating which goes first over --repeats;
the engine scope is not part of a run's identity, so both write the same run folder, which is
moved to runs/bench/pipeline_time/<scope>-<i>/ after each run (and a folder already there before
the first, to runs/bench/pipeline_time/before/) so that no step is skipped: the same seed,
episodes, tokens and optimizer steps both ways. Writes benchmarks/results/pipeline_time.json (and
prints a table):

- per run: wall time in all and per step (from the moment the console announces a step to the
  next one's: the step, its tracking and the registry gate), vLLM engine start-ups (the engine's
  "Initializing a V1 LLM engine" line in the steps' logs and the run engine's log), and the share of
  wall time spent generating (the episode stages' `rollout_seconds` and candidates' `seconds`, less
  the `engine_seconds` of building or reaching an engine) or training (the training stages'
  `seconds`, model loading included);
- per scope: the median of each figure over the repeats, and the speed-up of `run` over `step`;
- per repeat and records file (trajectories, candidates): how many records are identical both ways
  (the server batches requests as they arrive, and bf16 results depend on the batch: README
  "Determinism"); and per scope, how many are identical between its first run and each later one
  (whether the scope gives the same records run after run).

The task's records stage runs in each run, restored from DVC's run cache (its lock moves with the
run folder; a second or less); the per-step table shows it apart.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
STEP_LINE = re.compile(r"^==> (.+?) \[(\w+)\]\s+(\S+)")
ENGINE_START = "Initializing a V1 LLM engine"
TRAINING = ("critic", "actor")
KEPT = REPO / "runs" / "bench" / "pipeline_time"


def run_pipeline(scope: str, run_dir: Path, profile: str, baselines: str) -> dict:
    """One `sweetflow run`, timed step by step from its console."""
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", profile]
    cmd += (["--baselines", baselines] if baselines else []) + ["-S", f"cluster.engine_scope={scope}"]
    started = time.monotonic()
    marks: list[tuple[float, str, str]] = []
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        sys.stdout.write(line)
        if match := STEP_LINE.match(line.strip()):
            marks.append((time.monotonic() - started, match.group(2), match.group(3)))
    wall = time.monotonic() - started
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    ends = [t for t, _, _ in marks[1:]] + [wall]
    steps = [
        {"stage": stage, "folder": _short(Path(folder), run_dir), "s": round(end - t, 1)}
        for (t, stage, folder), end in zip(marks, ends)
    ]
    work = work_seconds(run_dir)
    return {
        "scope": scope,
        "wall_s": round(wall, 1),
        "steps": steps,
        "engine_startups": sum(p.read_text(errors="replace").count(ENGINE_START) for p in run_dir.rglob("*.log")),
        **work,
        "work_share": round((work["generate_s"] + work["train_s"]) / wall, 3),
    }


def _short(folder: Path, run_dir: Path) -> str:
    """A step's folder inside the run folder (`data` for the project's data stages)."""
    folder = (REPO / folder).resolve()
    return str(folder.relative_to(run_dir.resolve())) if folder.is_relative_to(run_dir.resolve()) else "data"


def work_seconds(run_dir: Path) -> dict:
    """Seconds spent generating and training, from the steps' metrics files."""
    generate = train = 0.0
    for metrics_file in run_dir.rglob("*metrics.json"):
        metrics = json.loads(metrics_file.read_text())
        if not isinstance(metrics, dict):
            continue
        if "rollout_seconds" in metrics:  # an evaluation or rollouts step
            generate += metrics["rollout_seconds"] - metrics.get("engine_seconds", 0.0)
        elif metrics_file.name == "candidates_metrics.json":
            generate += metrics["seconds"] - metrics.get("engine_seconds", 0.0)
        if metrics_file.parent.name in TRAINING:
            train += float(metrics.get("seconds", 0.0))
    return {"generate_s": round(generate, 1), "train_s": round(train, 1)}


def same_records(step_dir: Path, run_dir: Path) -> dict[str, str]:
    """Per records file of the run: identical records (lines) both ways, of all."""
    out = {}
    for mine in sorted(step_dir.rglob("*.jsonl")):
        if mine.name not in ("trajectories.jsonl", "candidates.jsonl"):
            continue
        theirs = run_dir / mine.relative_to(step_dir)
        a, b = mine.read_text().splitlines(), theirs.read_text().splitlines() if theirs.exists() else []
        out[str(mine.relative_to(step_dir))] = f"{sum(x == y for x, y in zip(a, b))}/{max(len(a), len(b))}"
    return out


def same_across_repeats(repeats: int) -> dict[str, dict[int, dict[str, str]]]:
    """Per scope and later repeat: identical records between its first run and that one."""
    return {
        scope: {i: same_records(KEPT / f"{scope}-0", KEPT / f"{scope}-{i}") for i in range(1, repeats)}
        for scope in ("step", "run")
    }


def summarize(runs: list[dict]) -> dict:
    """Medians per scope and the speed-up of the run's engine over an engine per step."""
    out: dict = {}
    for scope in ("step", "run"):
        mine = [r for r in runs if r["scope"] == scope]
        out[scope] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("wall_s", "engine_startups", "generate_s", "train_s", "work_share")
        }
    out["speedup"] = round(out["step"]["wall_s"] / out["run"]["wall_s"], 3)
    return out


def table(runs: list[dict]) -> str:
    """Per step (stage and folder), seconds in each run."""
    keys = list(dict.fromkeys((s["folder"], s["stage"]) for r in runs for s in r["steps"]))
    head = "| step | " + " | ".join(f"{r['scope']} {i // 2 + 1}" for i, r in enumerate(runs)) + " |"
    rows = [head, "|---|" + "---:|" * len(runs)]
    for folder, stage in keys:
        cells = [
            next((f"{s['s']:.0f}" for s in r["steps"] if (s["folder"], s["stage"]) == (folder, stage)), "")
            for r in runs
        ]
        rows.append(f"| {folder} {stage} | " + " | ".join(cells) + " |")
    rows.append("| **all** | " + " | ".join(f"**{r['wall_s']:.0f}**" for r in runs) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="default")
    parser.add_argument("--baselines", default="mtdpo,rft", help="comma-separated, '' for none")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT / "pipeline_time.json")
    args = parser.parse_args()
    from flows.planning.plan import plan_run

    run_dir = plan_run("sweet", args.profile).run_dir
    if KEPT.exists():
        raise SystemExit(f"{KEPT} exists: remove it to measure afresh")
    if run_dir.exists():
        KEPT.mkdir(parents=True)
        shutil.move(run_dir, KEPT / "before")
    runs = []
    for i in range(args.repeats):
        for scope in ("step", "run") if i % 2 == 0 else ("run", "step"):
            runs.append(run_pipeline(scope, run_dir, args.profile, args.baselines) | {"repeat": i})
            KEPT.mkdir(parents=True, exist_ok=True)
            shutil.move(run_dir, KEPT / f"{scope}-{i}")
    same = {i: same_records(KEPT / f"step-{i}", KEPT / f"run-{i}") for i in range(args.repeats)}
    result = {
        "profile": args.profile,
        "baselines": args.baselines,
        "runs": runs,
        "summary": summarize(runs),
        "same_records": same,
        "same_across_repeats": same_across_repeats(args.repeats),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(runs))
    print(json.dumps({key: result[key] for key in ("summary", "same_records", "same_across_repeats")}, indent=2))


if __name__ == "__main__":
    main()
