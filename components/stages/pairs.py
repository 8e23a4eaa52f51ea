"""Preference pairs for SWEET-RL and the multi-turn DPO baseline (docs/algorithms.md, SWEET-RL 2 and 6).

- Trajectory pairs (step 2), by `rule`:
  - `best` (ColBench backend, elicitation): per task, chosen = a best-scoring trajectory, kept only
    when its score reaches `min_chosen_score` (the authors' scripts use 1.0: only tasks solved at
    least once); rejected = every trajectory of that task with a strictly lower score;
  - `gap` (ColBench frontend, whose similarities are never exactly 1): per task, every two
    trajectories whose scores differ by at least `min_gap` (the authors' frontend script: 0.1),
    the higher one chosen;
  - `auto`: the task's own rule (`Task.pair_rule`).
- Turn pairs (step 6): for one turn state with N critic-ranked candidates, up to `per_state` pairs,
  each made of one candidate from the upper half and one from the lower half of the ranking
  (the middle one of an odd N is left out); the higher-ranked candidate is chosen. Pairs with
  equal scores carry no preference and are skipped. `pairing: best_worse` (an option of the
  authors' script) pairs the best-ranked candidate with each of the `per_state` lowest instead.

Stages: `python -m components.stages.pairs trajectory [--config JSON]` reads scored rollouts
(`trajectories.jsonl`) and writes `pairs.jsonl` (TrajectoryPair); `python -m components.stages.pairs turn
[--config JSON]` reads critic-ranked candidates (`ranked.jsonl`) and writes `turn_pairs.jsonl` (TurnPair).
Each also writes a small metrics JSON.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from components.config.training import PairRule, PairsConfig, TrainLayout, TurnPairing
from components.data.records import Trajectory, TrajectoryPair, TurnCandidates, TurnPair, read_jsonl, write_jsonl
from components.stages.cli import stage_cli
from components.stages.result import StageResult


def _by_task(trajs: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """The scored trajectories grouped by task, in first-seen task order."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        if traj.score is None:
            raise ValueError(f"trajectory of task {traj.task_id} (seed {traj.run_seed}) is not scored")
        by_task[traj.task_id].append(traj)
    return list(by_task.values())


def trajectory_pairs(trajs: Sequence[Trajectory], min_chosen_score: float = 1.0) -> list[tuple[Trajectory, Trajectory]]:
    """Rule `best`: (chosen, rejected) trajectory pairs, grouped by task in first-seen task order."""
    pairs = []
    for group in _by_task(trajs):
        chosen = max(group, key=lambda t: (t.score, -t.run_seed, -t.sample))
        if chosen.score < min_chosen_score:
            continue
        pairs.extend((chosen, t) for t in group if t.score < chosen.score)
    return pairs


def gap_pairs(trajs: Sequence[Trajectory], min_gap: float = 0.1) -> list[tuple[Trajectory, Trajectory]]:
    """Rule `gap`: every two trajectories of a task at least `min_gap` apart, the higher chosen."""
    pairs = []
    for group in _by_task(trajs):
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if abs(a.score - b.score) >= min_gap:
                    pairs.append((a, b) if a.score > b.score else (b, a))
    return pairs


def resolve_rule(cfg: PairsConfig, task_name: str) -> PairRule:
    """The rule applied: `pairs.rule`, or the task's own when it is `auto`."""
    if cfg.rule != PairRule.auto:
        return cfg.rule
    from components.tasks.registry import task_class

    return PairRule(task_class(task_name).pair_rule)


def rule_pairs(cfg: PairsConfig, rule: PairRule, trajs: Sequence[Trajectory]) -> list[tuple[Trajectory, Trajectory]]:
    if rule == PairRule.gap:
        return gap_pairs(trajs, cfg.min_gap)
    return trajectory_pairs(trajs, cfg.min_chosen_score)


def turn_pairs(
    scores: Sequence[float], per_state: int, rng: random.Random, pairing: TurnPairing = TurnPairing.halves
) -> list[tuple[int, int]]:
    """(chosen, rejected) candidate indices. `halves`: random draws of one from the upper half and one
    from the lower half; `best_worse`: the best-ranked against each of the `per_state` lowest."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if pairing == TurnPairing.best_worse:
        return [(order[0], w) for w in order[::-1][:per_state] if scores[order[0]] > scores[w]]
    half = len(order) // 2
    upper, lower = order[:half], order[len(order) - half :]
    candidates = [(u, w) for u in upper for w in lower if scores[u] > scores[w]]
    return rng.sample(candidates, min(per_state, len(candidates)))


def pair_records(pairs: Sequence[tuple[Trajectory, Trajectory]]) -> list[TrajectoryPair]:
    return [
        TrajectoryPair(
            task_id=c.task_id,
            task_index=c.task_index,
            chosen=c.key,
            rejected=r.key,
            chosen_score=c.score,
            rejected_score=r.score,
        )
        for c, r in pairs
    ]


def run_trajectory(cfg: PairsConfig, trajectories: Path, out_dir: Path, rule: PairRule = PairRule.best) -> StageResult:
    """pairs.jsonl from scored rollouts (pairs by `rule`), with pairs_metrics.json."""
    trajs = list(read_jsonl(trajectories, Trajectory))
    rows = pair_records(rule_pairs(cfg, rule, trajs))
    path = out_dir / "pairs.jsonl"
    write_jsonl(path, rows)
    metrics = {
        "trajectories": len(trajs),
        "tasks": len({t.task_id for t in trajs}),
        "pairs": len(rows),
        "tasks_with_pairs": len({p.task_id for p in rows}),
        "best_score": max((t.score or 0.0 for t in trajs), default=0.0),
        "rule": rule.value,
    }
    (out_dir / "pairs_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"pairs": path}, metrics=metrics)


def state_turn_pairs(
    state: TurnCandidates, per_state: int, rng: random.Random, pairing: TurnPairing = TurnPairing.halves
) -> list[TurnPair]:
    scores = [c.score for c in state.candidates]
    if any(s is None for s in scores):
        raise ValueError(f"candidates of trajectory {state.trajectory} turn {state.turn} are not ranked")
    return [
        TurnPair(
            task_id=state.task_id,
            trajectory=state.trajectory,
            turn=state.turn,
            prompt_ids=state.prompt_ids,
            chosen_ids=state.candidates[c].response_ids,
            rejected_ids=state.candidates[r].response_ids,
            chosen_score=scores[c],
            rejected_score=scores[r],
        )
        for c, r in turn_pairs(scores, per_state, rng, pairing)
        if state.candidates[c].response_ids and state.candidates[r].response_ids
    ]


def run_turn(cfg: PairsConfig, ranked: Path, out_dir: Path) -> StageResult:
    """turn_pairs.jsonl from critic-ranked candidates, with turn_pairs_metrics.json."""
    rng = random.Random(cfg.seed)
    states = list(read_jsonl(ranked, TurnCandidates))
    rows = [pair for state in states for pair in state_turn_pairs(state, cfg.per_state, rng, cfg.pairing)]
    path = out_dir / "turn_pairs.jsonl"
    write_jsonl(path, rows)
    margins = [p.chosen_score - p.rejected_score for p in rows]
    metrics = {
        "states": len(states),
        "turn_pairs": len(rows),
        "mean_score_margin": sum(margins) / len(margins) if margins else 0.0,
    }
    (out_dir / "turn_pairs_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"turn_pairs": path}, metrics=metrics)


def main() -> None:
    from components.tasks.registry import task_sections

    sections, args = stage_cli("components.stages.pairs", task_sections)
    kind = args[0] if args else None
    if kind not in ("trajectory", "turn"):
        raise SystemExit("usage: python -m components.stages.pairs trajectory|turn")
    cfg, train_cfg = sections["pairs"], sections["train"]
    layout = TrainLayout(train_cfg.out_dir)
    if kind == "trajectory":
        layout.pairs.parent.mkdir(parents=True, exist_ok=True)
        rule = resolve_rule(cfg, sections["task"].name)
        result = run_trajectory(cfg, train_cfg.trajectories / "trajectories.jsonl", layout.pairs.parent, rule)
    else:
        result = run_turn(cfg, layout.ranking_dir / "ranked.jsonl", layout.ranking_dir)
    print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
