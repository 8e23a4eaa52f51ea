"""Cancelling a served pipeline run mid-step, as the Prefect UI's Cancel does, measured end to end.

Starts a real Prefect server (its own PREFECT_HOME and port) and `sweetflow serve` of the pipeline,
triggers a smoke run (`prefect deployment run`), waits for the step named by `--step` to start
(its banner in the runner's output) plus `--delay` seconds, cancels the flow run
(`prefect flow-run cancel`), then reports: the seconds until no process of the step is left, the
run's final state, and any process started since the trigger still alive (engine core, DVC,
stage). The server and runner are stopped at the end.
Writes benchmarks/results/served_cancel.json.
Usage: python benchmarks/served_cancel.py [--step rollouts] [--delay 10] [--port 4391]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from interrupts import leftovers, lines_of  # benchmarks/ is this script's folder

BIN = Path(sys.executable).parent
RUN_ID = re.compile(r"UUID\s*│?\s*([0-9a-f-]{36})|id\W+([0-9a-f-]{36})", re.I)


def prefect(args: list[str], env: dict) -> str:
    return subprocess.run([str(BIN / "prefect"), *args], env=env, capture_output=True, text=True, timeout=120).stdout


def wait_for(pattern: re.Pattern, lines, deadline: float) -> str | None:
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except Exception:
            continue
        if line is None:
            return None
        if pattern.search(line):
            return line
    return None


def state_of(run_id: str, env: dict) -> str:
    found = re.search(r"state_type\W+(?:StateType\.)?(\w+)", prefect(["flow-run", "inspect", run_id], env))
    return found.group(1) if found else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", default="rollouts")
    parser.add_argument("--delay", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=4391)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="prefect-home-")
    api = f"http://127.0.0.1:{args.port}/api"
    env = dict(os.environ, PREFECT_HOME=home, PREFECT_API_URL=api, PREFECT_RUNNER_POLL_FREQUENCY="2")
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--port", str(args.port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runner = None
    try:
        for _ in range(120):
            if _healthy(api):
                break
            time.sleep(1)
        name = f"cancel-{int(time.time())}"
        runner = subprocess.Popen(
            [str(BIN / "sweetflow"), "serve", "--cron", "0 2 1 1 *", "--name", name, "--api-url", api],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines = lines_of(runner)
        time.sleep(20)  # the runner registers the deployment and starts polling
        params = {"profile": "smoke", "overrides": [f"eval.experiment={name}"]}
        triggered = time.time()
        out = prefect(["deployment", "run", f"sweetflow-pipeline/{name}", "-p", f"params={json.dumps(params)}"], env)
        run_id = next(g for g in RUN_ID.search(out).groups() if g)
        banner = wait_for(re.compile(rf"==> .* \[{args.step}\]"), lines, time.monotonic() + 1200)
        time.sleep(args.delay)
        step_procs = [p for p in psutil.process_iter(["create_time", "cmdline"]) if _is_step(p, triggered)]
        cancelled = time.monotonic()
        prefect(["flow-run", "cancel", run_id], env)
        gone_s = None
        while time.monotonic() - cancelled < 90:
            if not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in step_procs):
                gone_s = round(time.monotonic() - cancelled, 1)
                break
            time.sleep(0.2)
        time.sleep(5)
        result = {
            "step": args.step,
            "banner_seen": banner,
            "delay_s": args.delay,
            "step_processes": len(step_procs),
            "step_gone_after_cancel_s": gone_s,
            "final_state": state_of(run_id, env),
            "left": leftovers(triggered),  # the server and the runner started before the trigger
        }
    finally:
        for proc in (runner, server):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    out_path = Path("benchmarks/results/served_cancel.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _healthy(api: str) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(f"{api}/health", timeout=2).status == 200
    except OSError:
        return False


def _is_step(proc: psutil.Process, since: float) -> bool:
    """A process of the running step: DVC's repro, the stage, or the engine under it."""
    try:
        cmd = " ".join(proc.info["cmdline"] or [])
        return proc.info["create_time"] >= since and any(w in cmd for w in ("dvc", "components.stages", "VLLM"))
    except (psutil.Error, TypeError):
        return False


if __name__ == "__main__":
    main()
