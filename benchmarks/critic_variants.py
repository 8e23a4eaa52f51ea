"""Which critic settings make SWEET-RL's critic rank turns by their value? Critic variants on one run's data.

Takes a SWEET-RL pipeline iteration (`runs/pipeline/<run>/iter-1`: its params.yaml, rollouts and
candidates) and, for each variant (a name and `section.key=value` overrides of that iteration's
parameters), runs the real stages on the same rollouts (or on others: `train.trajectories=FOLDER`):
trajectory pairs, critic, candidates (only when the variant changes a `candidates.*` key or the
rollouts; else the iteration's candidates are reused), ranking,
turn pairs and critic quality. Reports per variant the critic's training summary and its quality
figures (components/stages/critic_quality.py): held-out pair accuracy, turn-value agreement of the
trained / untrained / learned scorers with 95% intervals, turn pairs right / wrong / tie.
The evaluation split is never read: every figure comes from training-split tasks.
Writes benchmarks/results/critic_variants.json (and work folders under runs/critic-variants/).
Usage: python benchmarks/critic_variants.py --iteration runs/pipeline/<run>/iter-1
           --variant as-run --variant lr3e-3:critic.optim.lr=3e-3,critic.optim.epochs=3 ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

STAGES = (
    ("components.stages.pairs", "trajectory"),
    ("components.stages.critic",),
    ("components.stages.candidates",),
    ("components.stages.ranking",),
    ("components.stages.pairs", "turn"),
    ("components.stages.critic_quality",),
)


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """`name:a.b=1,c.d=x` -> (name, {"a.b": 1, "c.d": "x"}); values are read as YAML."""
    name, _, sets = text.partition(":")
    overrides = {}
    for item in filter(None, sets.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"variant {name}: '{item}' is not section.key=value")
        overrides[key.strip()] = _number(yaml.safe_load(value))
    return name, overrides


def _number(value: object) -> object:
    """YAML reads 1e-3 as a string (it wants 1.0e-3): take it as the number meant."""
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def variant_params(iteration: Path, name: str, overrides: dict[str, object], root: Path) -> tuple[Path, Path]:
    """The variant's params.yaml (the iteration's, its training under its own folder) and that folder."""
    doc = yaml.safe_load((iteration / "params.yaml").read_text())
    folder = root / name
    doc["train"]["out_dir"] = str(folder / "train")
    for dotted, value in overrides.items():
        node = doc
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder / "params.yaml", folder / "train"


def sampling_key(overrides: dict[str, object]) -> str:
    """What the candidates depend on among the overrides: variants that agree on it share candidates."""
    return json.dumps({k: v for k, v in overrides.items() if k.startswith("candidates.") or k == "train.trajectories"})


def run_variant(iteration: Path, name: str, overrides: dict[str, object], root: Path, sampled: dict[str, Path]) -> dict:
    """One variant's stages; `sampled` maps a sampling key to candidates already sampled (the iteration's
    under no override), and gains this variant's when it had to sample."""
    params, train = variant_params(iteration, name, overrides, root)
    key = sampling_key(overrides)
    resample = key not in sampled
    if not resample:
        (train / "candidates").mkdir(parents=True, exist_ok=True)
        shutil.copy(sampled[key], train / "candidates/candidates.jsonl")
        baseline = sampled[key].parent.parent / "ranking/baseline_means.jsonl"
        doc = yaml.safe_load(params.read_text())
        if doc["ranking"]["baseline"] == "actor" and baseline.exists():  # the actor without c: the same means
            (train / "ranking").mkdir(parents=True, exist_ok=True)
            shutil.copy(baseline, train / "ranking/baseline_means.jsonl")
    env = os.environ | {"SWEETFLOW_PARAMS": str(params)}
    seconds = {}
    for stage in STAGES:
        if stage[0].endswith("candidates") and not resample:
            continue
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", *stage], env=env, check=True, stdout=subprocess.DEVNULL)
        seconds[" ".join(stage).rsplit(".", 1)[1]] = round(time.perf_counter() - started, 1)
    sampled[key] = train / "candidates/candidates.jsonl"
    critic = json.loads((train / "critic/metrics.json").read_text())
    quality = json.loads((train / "critic_quality/metrics.json").read_text())
    print(f"\n## {name} {overrides}\n{(train / 'critic_quality/quality.md').read_text()}", flush=True)
    return {"overrides": overrides, "seconds": seconds, "critic": critic, "quality": quality}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iteration", type=Path, required=True, help="a SWEET-RL run's iter-1 folder")
    parser.add_argument("--variant", action="append", default=[], help="name:section.key=value,...")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/critic_variants.json"))
    args = parser.parse_args()
    if not (args.iteration / "train/candidates/candidates.jsonl").exists():
        raise SystemExit(f"{args.iteration} holds no train/candidates/candidates.jsonl: pass a SWEET-RL iteration")
    root = Path("runs/critic-variants") / args.iteration.parent.name
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    sampled = {sampling_key({}): args.iteration / "train/candidates/candidates.jsonl"}
    for text in args.variant or ["as-run"]:
        name, overrides = parse_variant(text)
        result[f"{args.iteration.parent.name}/{name}"] = run_variant(args.iteration, name, overrides, root, sampled)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # after each variant: nothing lost on a crash


if __name__ == "__main__":
    main()
