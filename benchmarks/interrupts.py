"""The interrupt matrix, measured on the smoke pipeline: every step interrupted once, as a user would.

`sweetflow run --profile smoke` is started in a session of its own (as a terminal runs it) and,
a few seconds after each step's banner (`==> label [stage]`), interrupted: SIGINT or SIGTERM to the
whole process group (a terminal's Ctrl-C, `timeout`, a supervisor) or to the main process alone.
Then the same command is run again, which skips the finished steps and resumes the interrupted
one, and is interrupted in its next step, until a run ends on its own. For each interrupt: the
step the command names in its one-line message, its exit status, the seconds from the signal to
the exit, and every process started since the launch that is still alive afterwards (an engine
core, DVC, a stage, Prefect's API server). Finally the run folder's records are checked: no
episode duplicated, every training step logged once.

A fresh run folder each time (the folder is named by a hash of the parameters: `--fresh` sets a
harmless parameter to the current time). Nothing else should run on the machine meanwhile: the
leftover check counts any new Python, vLLM, DVC or Prefect process.
Writes benchmarks/results/interrupts-<algo>-<signal>-<to>.json.
Usage: python benchmarks/interrupts.py [--algo sweet|cory] [--signal INT|TERM] [--to group|main]
       [--delay 6] [--between]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

BANNER = re.compile(r"^==> (.+) \[(\w+)\]")
RESULT = re.compile(r"^\s+result: ")
INTERRUPTED = re.compile(r"^sweetflow: interrupted \((\w+)\)(?: during step (.+?) \[(\w+)\])?")
RUN_FOLDER = re.compile(r"^pipeline run (\S+) ")
OURS = ("python", "VLLM", "EngineCore", "prefect", "dvc", "uvicorn")
FRESH = {"sweet": "eval.experiment", "cory": "cory.seed"}


def lines_of(proc: subprocess.Popen) -> queue.Queue:
    """The command's output lines (stdout and stderr merged), as they come; None at the end."""
    out: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            out.put(line.rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def leftovers(since: float) -> list[str]:
    """Processes started since `since` (but this one) that are alive and look like the pipeline's."""
    found = []
    for proc in psutil.process_iter(["pid", "create_time", "cmdline", "status"]):
        info = proc.info
        if info["pid"] == os.getpid() or info["create_time"] < since or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = " ".join(info["cmdline"] or [])
        if any(word in cmd for word in OURS):
            found.append(f"{info['pid']}: {cmd[:160]}")
    return found


def attempt(cmd: list[str], done: set[str], args: argparse.Namespace) -> dict:
    """One run of `cmd`, interrupted in the first step not in `done` (or between two steps with
    `args.between`); the row of the matrix, or the finished run's summary when nothing was left."""
    launched = time.time()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, bufsize=1
    )
    out, row, fire_at, stage, sent, tail = lines_of(proc), {}, None, None, None, []
    while True:
        try:
            line = out.get(timeout=0.2)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if found := RUN_FOLDER.match(line):
            row["run_dir"] = found.group(1)
        tail = (tail + [line])[-40:] if line else tail
        if (found := BANNER.match(line)) and sent is None:  # a step that ended before its signal is not retried
            stage = found.group(2)
            fire_at = time.monotonic() + args.delay if stage not in done and not args.between else None
        if RESULT.match(line) and args.between and sent is None and stage not in done:
            fire_at = time.monotonic()
        if found := INTERRUPTED.match(line):
            row["message"], row["step"] = line, found.group(3) or "between steps"
        if fire_at is not None and sent is None and time.monotonic() >= fire_at:
            sig = signal.SIGINT if args.signal == "INT" else signal.SIGTERM
            os.killpg(proc.pid, sig) if args.to == "group" else proc.send_signal(sig)
            sent, row["banner"] = time.monotonic(), stage
            done.add(stage)
    proc.wait()
    row |= {"exit": proc.returncode, "wall_s": round(time.time() - launched, 1)}
    if sent is not None:
        row["exit_s"] = round(time.monotonic() - sent, 1)
        time.sleep(1)  # a process stopping at the command's exit gets a moment
        row["left"] = leftovers(launched - 1)
    elif proc.returncode != 0:
        row["output_tail"] = tail
    return row


def records(run_dir: Path) -> dict:
    """Per records file of the run: rows and unique rows (episodes by key, training steps by step);
    per step log: how often the stage was executed and how often DVC skipped it."""
    from components.data.records import Trajectory, read_jsonl

    found = {}
    for path in sorted(run_dir.rglob("trajectories.jsonl")):
        keys = [t.key for t in read_jsonl(path, Trajectory)]
        found[str(path.relative_to(run_dir))] = {"rows": len(keys), "unique": len(set(keys))}
    for path in sorted(run_dir.rglob("train_metrics.jsonl")):
        steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]
        found[str(path.relative_to(run_dir))] = {"rows": len(steps), "once_each_in_order": steps == sorted(set(steps))}
    for path in sorted(run_dir.rglob("logs/*.log")):  # a finished step is skipped, never executed again
        text = path.read_text(errors="replace")
        found[str(path.relative_to(run_dir))] = {
            "executions": text.count("\nRunning stage '"),
            "skipped": text.count("didn't change, skipping"),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sweet", choices=sorted(FRESH))
    parser.add_argument("--signal", default="INT", choices=["INT", "TERM"])
    parser.add_argument("--to", default="group", choices=["group", "main"])
    parser.add_argument("--delay", type=float, default=6.0, help="seconds after a step's banner")
    parser.add_argument("--between", action="store_true", help="interrupt right after a step's result line")
    parser.add_argument("--max-runs", type=int, default=20)
    args = parser.parse_args()
    fresh = f"{FRESH[args.algo]}={int(time.time()) if args.algo == 'cory' else f'interrupts-{int(time.time())}'}"
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--algo", args.algo, "--profile", "smoke"]
    cmd += ["-S", fresh]
    done: set[str] = set()
    rows = []
    for _ in range(args.max_runs):
        rows.append(attempt(cmd, done, args))
        print(json.dumps(rows[-1]), flush=True)
        if "exit_s" not in rows[-1]:
            break
    run_dir = next((Path(r["run_dir"]) for r in rows if "run_dir" in r), None)
    result = {
        "command": " ".join(cmd[1:]),
        "signal": f"SIG{args.signal}",
        "to": args.to,
        "when": "between steps" if args.between else f"{args.delay} s after a step's banner",
        "interrupts": rows[:-1],
        "final_run": rows[-1],
        "records": records(run_dir) if run_dir else {},
        "cpu": os.cpu_count(),
    }
    out = Path("benchmarks/results") / f"interrupts-{args.algo}-{args.signal.lower()}-{args.to}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
