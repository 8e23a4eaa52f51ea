"""Does CORY reach PPO's reward at less KL? CORY and PPO on the reviews task over several seeds.

For each seed, runs `sweetflow run --algo cory` and `--algo ppo` on `--task reviews` (profile
`reviews` unless told otherwise) with `cory.seed` moved to the seed (LoRA and value-head init, the
training draws, sampling; the openers and their held-out split stay those of `reviews.seed`, so
every run is evaluated on the same prompts). From each run's files it reads the held-out evaluation
of every agent alone after every iteration (summary.json: the sampled answers' reward and KL,
entropy, distinct-2) and the per-prompt rewards (iter-1/cory/eval_prompts.jsonl). It reports:
- per seed and agent (cory/agent0, cory/agent1, ppo/agent0): the final iteration's reward gain over
  the base model on the sampled answers, paired by prompt with a bootstrap 95% interval over
  prompts, the final KL, entropy and distinct-2 beside the base model's;
- pooled over seeds: the same gain with each prompt's difference averaged over seeds first, and the
  final KL's mean over seeds with a 95% t-interval;
- CORY minus PPO reward at matched KL: each agent's reward-vs-KL curve (its evaluated iterations,
  KL on x) interpolated linearly at KL levels both curves reach, per seed, and pooled over seeds
  with a t-interval (the paper's frontier claim: positive differences);
- wall time of each command.
Writes benchmarks/results/cory.json (after each run: nothing lost on a crash).
Usage: python benchmarks/cory.py [--seeds 0,1,2] [--profile reviews] [--levels 0.5,1,2,4] [-S section.key=value ...]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from components.episodes.metrics import bootstrap_ci
from components.tracking.frontier import t_interval

ALGOS = ("cory", "ppo")
SHOWN = ("sampled_reward", "sampled_kl", "entropy", "distinct_2")


def run(algo: str, seed: int, profile: str, extra: list[str]) -> tuple[Path, float]:
    """One pipeline run of `algo` on reviews with cory.seed = `seed`; its run folder and wall time."""
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--algo", algo, "--task", "reviews"]
    cmd += ["--profile", profile, *(a for s in [f"cory.seed={seed}", *extra] for a in ("-S", s))]
    params = subprocess.run([cmd[0], "params", *cmd[2:]], capture_output=True, text=True, check=True)
    run_dir = Path(params.stdout.splitlines()[0].rsplit("run folder ", 1)[1])
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return run_dir, time.perf_counter() - start


def prompt_rewards(run_dir: Path) -> dict[tuple[int, str], np.ndarray]:
    """(iteration, agent) -> each held-out prompt's mean sampled reward, in prompt order."""
    rows = [json.loads(line) for line in (run_dir / "iter-1/cory/eval_prompts.jsonl").read_text().splitlines()]
    out: dict[tuple[int, str], list] = {}
    for r in sorted(rows, key=lambda r: r["prompt"]):
        out.setdefault((r["iteration"], r["agent"]), []).append(r["sampled_reward"])
    return {key: np.asarray(values) for key, values in out.items()}


def curve(entries: list[dict], agent: str) -> list[dict]:
    """The agent's evaluated points, base model first: iteration and the SHOWN quantities."""
    return [{"k": e["k"]} | {q: e["metrics"].get(f"{agent}/{q}") for q in SHOWN} for e in entries]


def agent_figures(run_dir: Path, agent: str) -> dict:
    """One run's figures for one agent: gain over the base (paired by prompt), final and base quantities."""
    entries = json.loads((run_dir / "summary.json").read_text())
    rewards = prompt_rewards(run_dir)
    last = entries[-1]["k"]
    diff = rewards[(last, agent)] - rewards[(0, "agent0")]
    points = curve(entries, agent)
    return {
        "gain": float(diff.mean()),
        "gain_ci": bootstrap_ci(diff, 4000),
        "prompt_gains": diff.tolist(),
        "final": points[-1],
        "base": points[0],
        "curve": points,
    }


def at_kl(points: list[dict], level: float) -> float | None:
    """The reward of a curve at KL `level` (linear between its points ordered by KL), None outside it."""
    kl = np.array([p["sampled_kl"] for p in points], dtype=float)
    reward = np.array([p["sampled_reward"] for p in points], dtype=float)
    order = np.argsort(kl)
    if not kl.min() <= level <= kl.max():
        return None
    return float(np.interp(level, kl[order], reward[order]))


def matched(cory: dict, ppo: dict, levels: list[float]) -> dict[str, float | None]:
    """CORY agent's reward minus PPO's at each KL level both reach (None where one does not)."""
    out = {}
    for level in levels:
        a, b = at_kl(cory["curve"], level), at_kl(ppo["curve"], level)
        out[str(level)] = None if a is None or b is None else a - b
    return out


def pooled(seeds: dict, levels: list[float]) -> dict:
    """Per agent: gain paired by prompt (averaged over seeds first) and final KL over seeds; per CORY
    agent and KL level, the matched difference over the seeds that reach it."""
    out: dict = {}
    agents = sorted({name for entry in seeds.values() for name in entry["agents"]})
    for name in agents:
        runs = [entry["agents"][name] for entry in seeds.values() if name in entry["agents"]]
        diff = np.mean([r["prompt_gains"] for r in runs], axis=0)
        kls = np.array([r["final"]["sampled_kl"] for r in runs], dtype=float)
        out[name] = {"seeds": len(runs), "gain": float(diff.mean()), "gain_ci": bootstrap_ci(diff, 4000)}
        out[name]["final_kl"] = over_seeds(kls)
        if name.startswith("cory/"):
            reached = {
                level: [e["matched"][name][level] for e in seeds.values() if e["matched"][name][level] is not None]
                for level in map(str, levels)
            }
            out[name]["minus_ppo_at_kl"] = {level: over_seeds(v) if v else None for level, v in reached.items()}
    return out


def over_seeds(values) -> dict:
    """Mean over seeds with its 95% t-interval (None from one seed), and the number of seeds."""
    stats = t_interval(np.asarray(values, dtype=float))
    return {k: None if math.isnan(v) else v for k, v in zip(("mean", "low", "high"), stats)} | {"seeds": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one CORY and one PPO run each")
    parser.add_argument("--profile", default="reviews")
    parser.add_argument("--levels", default="0.5,1,2,4", help="KL levels (nats per answer) of the matched comparison")
    parser.add_argument("-S", dest="sets", action="append", default=[], help="extra section.key=value overrides")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cory.json"))
    args = parser.parse_args()
    levels = [float(x) for x in args.levels.split(",")]
    result: dict = {"profile": args.profile, "machine": platform.processor() or platform.machine(), "seeds": {}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        entry: dict = {"agents": {}, "wall_s": {}, "run_dirs": {}}
        for algo in ALGOS:
            run_dir, seconds = run(algo, seed, args.profile, args.sets)
            entry["wall_s"][algo], entry["run_dirs"][algo] = seconds, str(run_dir)
            for agent in ("agent0", "agent1") if algo == "cory" else ("agent0",):
                entry["agents"][f"{algo}/{agent}"] = agent_figures(run_dir, agent)
        ppo = entry["agents"]["ppo/agent0"]
        entry["matched"] = {n: matched(a, ppo, levels) for n, a in entry["agents"].items() if n.startswith("cory/")}
        result["seeds"][seed] = entry
        result["pooled"] = pooled(result["seeds"], levels)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["pooled"], indent=2))


if __name__ == "__main__":
    main()
