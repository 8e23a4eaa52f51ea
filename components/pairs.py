"""Preference pairs for SWEET-RL and the multi-turn DPO baseline (ALGORITHMS.md, SWEET-RL 2 and 6).

- Trajectory pairs (step 2): per task, chosen = a best-scoring trajectory, kept only when its
  score reaches `min_chosen_score` (the authors' scripts use 1.0: only tasks solved at least once);
  rejected = every trajectory of that task with a strictly lower score.
- Turn pairs (step 6): for one turn state with N critic-ranked candidates, up to `per_state` pairs,
  each made of one candidate from the upper half and one from the lower half of the ranking
  (the middle one of an odd N is left out); the higher-ranked candidate is chosen. Pairs with
  equal scores carry no preference and are skipped.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence

from components.records import Trajectory


def trajectory_pairs(trajs: Sequence[Trajectory], min_chosen_score: float = 1.0
                     ) -> list[tuple[Trajectory, Trajectory]]:
    """(chosen, rejected) trajectory pairs, grouped by task in first-seen task order."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        if traj.score is None:
            raise ValueError(f"trajectory of task {traj.task_id} (seed {traj.run_seed}) is not scored")
        by_task[traj.task_id].append(traj)
    pairs = []
    for group in by_task.values():
        chosen = max(group, key=lambda t: (t.score, -t.run_seed, -t.sample))
        if chosen.score < min_chosen_score:
            continue
        pairs.extend((chosen, t) for t in group if t.score < chosen.score)
    return pairs


def turn_pairs(scores: Sequence[float], per_state: int, rng: random.Random) -> list[tuple[int, int]]:
    """(chosen, rejected) candidate indices: one from the upper half, one from the lower half."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    half = len(order) // 2
    upper, lower = order[:half], order[len(order) - half:]
    candidates = [(u, l) for u in upper for l in lower if scores[u] > scores[l]]
    return rng.sample(candidates, min(per_state, len(candidates)))
