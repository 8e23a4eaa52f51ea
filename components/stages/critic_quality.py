"""How good the run's SWEET-RL critic is (issue 26): measured in every SWEET-RL run, after the turn pairs.

Reads: the scored rollouts (`trajectories.jsonl`), their trajectory pairs (`pairs.jsonl`), the ranked
candidates and the means the ranking step computed (`ranked.jsonl`, `critic_means.jsonl`,
`baseline_means.jsonl`), the turn pairs (`turn_pairs.jsonl`), the tasks file, the trained critic and
its reference pass (`reference_logprobs.jsonl`: the frozen reference's sums of the same dialogues,
not recomputed), its base model (the frozen reference) and the actor. Writes to out_dir
`metrics.json` and `quality.md` (the same figures as a table); its log-prob caches there are redone
on every run.

Four scorers are measured, each a difference of two mean log-probs times beta (components/lm/advantage.py):
- `trained`: the ranking as used, the trained critic with c minus the ranking baseline
  (`ranking.baseline`: the frozen reference with c, or the actor without c); with `ranking.critic:
  untrained` the ranking's critic is the base model, so `trained` equals `untrained` and `learned` is 0;
- `untrained`: the same formula with the untrained critic (the frozen base model with c): what the
  base model's reading of c alone gives (identically 0, all ties, under baseline `reference`);
- `learned`: the trained critic minus its frozen reference, both with c: what training added;
- `random`: seeded Gaussian scores, the chance level with its own interval.
Figures (components/lm/critic_quality.py): Bradley-Terry pair accuracy on the held-out pairs (tasks
of `critic.heldout_fraction` the critic never trained on) and on its training pairs; agreement with
the task's exact turn value (Task.turn_value; absent when the task has none) over every ranked
state's candidates, with 95% intervals over states, and the trained and learned scorers' agreement
minus the untrained one's, paired over the same comparisons (`..._minus_untrained`, with its interval;
per state in `agreement.jsonl`, for pooling runs); the turn pairs' right / wrong / tie shares.
Ties: scores within `critic.tie_tolerance`. Run as `python -m components.stages.critic_quality`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from components.config.training import REFERENCE_LOGPROBS, Baseline, CriticConfig, RankingConfig, TrainLayout
from components.data.records import Trajectory, TrajectoryPair, TurnCandidates, TurnPair, read_jsonl
from components.data.split import Split
from components.lm.advantage import trajectory_scores
from components.lm.critic_inputs import critic_info, critic_sequence, info_prefix, task_of
from components.lm.critic_quality import agreement, pair_figures, share_difference, state_agreement, turn_pair_classes
from components.lm.forward import frozen_reference_sums
from components.lm.sequences import TokenSequence, dialogue_sequence
from components.stages.cli import stage_cli
from components.stages.critic import held_out
from components.stages.ranking import RankingModels, StateMeans, candidate_means, ranking_models, state_key
from components.stages.result import StageResult
from components.tasks.base import Task
from components.tasks.registry import task_from_sections, task_sections

SCORERS = ("trained", "untrained", "learned", "random")


def _views(scorer: str, crit, ref, base):
    """The two log-prob views whose difference is the scorer's (random: None)."""
    return {"trained": (crit, base), "untrained": (ref, base), "learned": (crit, ref)}.get(scorer)


def _counts(seq: TokenSequence) -> list[float]:
    return [float(seq.turn_index.count(t)) for t in range(seq.num_turns)]


def trajectory_margins(
    critic: CriticConfig,
    ranking: RankingConfig,
    models: RankingModels,
    pairs: list[TrajectoryPair],
    trajs: dict[str, Trajectory],
    task: Task,
    records: list,
    tokenizer,
    out_dir: Path,
) -> dict[str, dict[str, list[float]]]:
    """scorer -> {"heldout": margins, "train": margins} of the trajectory pairs (chosen minus rejected);
    `records`: the task's training-split records."""
    keys = sorted({k for p in pairs for k in (p.chosen, p.rejected)})
    info = {
        k: critic_info(task, task_of(trajs[k].task_id, trajs[k].task_index, records), critic.information) for k in keys
    }
    with_c = [critic_sequence(trajs[k], info[k], tokenizer) for k in keys]
    pad, dtype, bs = tokenizer.pad_token_id, critic.optim.dtype, critic.ref_batch_size
    crit = frozen_reference_sums(models.critic, dtype, with_c, out_dir / "critic_sums.jsonl", pad, bs)
    ref = frozen_reference_sums(models.reference, dtype, with_c, out_dir / "reference_sums.jsonl", pad, bs)
    base = ref
    if ranking.baseline == Baseline.actor:
        plain = [dialogue_sequence(trajs[k]) for k in keys]
        base = frozen_reference_sums(models.actor, dtype, plain, out_dir / "actor_sums.jsonl", pad, bs)
    counts = [_counts(s) for s in with_c]
    rng = np.random.default_rng(0)
    score: dict[str, dict[str, float]] = {"random": dict(zip(keys, rng.normal(size=len(keys)).tolist()))}
    for name in SCORERS[:3]:
        a, b = _views(name, crit, ref, base)
        score[name] = {
            k: float(trajectory_scores(*_padded([a[i], b[i], counts[i]]), critic.beta, critic.normalize)[0])
            for i, k in enumerate(keys)
        }
    out: dict[str, dict[str, list[float]]] = {}
    for name, by_key in score.items():
        split = {"heldout": [], "train": []}
        for p in pairs:
            split["heldout" if held_out(p.task_id, critic.heldout_fraction) else "train"].append(
                by_key[p.chosen] - by_key[p.rejected]
            )
        out[name] = split
    return out


def _padded(rows: list[list[float]]) -> list[torch.Tensor]:
    return [torch.tensor([row], dtype=torch.float32) for row in rows]


def candidate_scores(
    critic: CriticConfig,
    ranking: RankingConfig,
    models: RankingModels,
    states: list[TurnCandidates],
    task: Task,
    records: list,
    tokenizer,
    ranking_dir: Path,
    out_dir: Path,
) -> dict[str, list[list[float]]]:
    """scorer -> per state, each candidate's score; the ranking step's means are reused."""
    crit = cached_means(ranking_dir / "critic_means.jsonl", states)
    base = cached_means(ranking_dir / "baseline_means.jsonl", states)
    ref = base
    if ranking.baseline == Baseline.actor:

        def with_c(state: TurnCandidates) -> list[int]:
            record = task_of(state.task_id, state.task_index, records)
            return info_prefix(tokenizer, critic_info(task, record, critic.information)) + state.prompt_ids

        ref = candidate_means(models.reference, states, with_c, ranking.max_batch, out_dir / "reference_means.jsonl")
    rng = np.random.default_rng(0)
    out = {"random": [rng.normal(size=len(s.candidates)).tolist() for s in states]}
    for name in SCORERS[:3]:
        a, b = _views(name, crit, ref, base)
        out[name] = [[critic.beta * (x - y) for x, y in zip(sa, sb)] for sa, sb in zip(a, b)]
    return out


def cached_means(path: Path, states: list[TurnCandidates]) -> list[list[float]]:
    """The ranking step's per-candidate means of every state (it wrote them; nothing is recomputed)."""
    known = {r.state: r.means for r in read_jsonl(path, StateMeans)}
    missing = [state_key(s) for s in states if state_key(s) not in known]
    if missing:
        raise ValueError(
            f"{path} lacks the means of {len(missing)} ranked states (first: {missing[0]}): re-run ranking"
        )
    return [known[state_key(s)] for s in states]


def candidate_values(
    states: list[TurnCandidates], trajs: dict[str, Trajectory], task: Task, records: list, max_turns: int
) -> list[list[float]] | None:
    """Each state's candidates' exact turn values (None: the task gives none)."""
    values = []
    for state in states:
        traj = trajs[state.trajectory]
        record = task_of(state.task_id, state.task_index, records)
        history = [(t.action, t.observation) for t in traj.turns[: state.turn]]
        last = state.turn >= max_turns - 1
        row = [task.turn_value(record, history, c.text, last) for c in state.candidates]
        if any(v is None for v in row):
            return None
        values.append(row)
    return values


def turn_pair_values(
    pairs: list[TurnPair], states: list[TurnCandidates], values: list[list[float]]
) -> tuple[list[float], list[float]]:
    """The exact values of each turn pair's chosen and rejected candidate."""
    by_ids = {
        (state_key(s), tuple(c.response_ids)): v for s, row in zip(states, values) for c, v in zip(s.candidates, row)
    }
    chosen = [by_ids[(state_key(p), tuple(p.chosen_ids))] for p in pairs]
    rejected = [by_ids[(state_key(p), tuple(p.rejected_ids))] for p in pairs]
    return chosen, rejected


def agreement_differences(
    states: list[TurnCandidates], values: list[list[float]], scores: dict, tol: float, path: Path
) -> dict[str, float]:
    """Trained and learned agreement minus untrained, paired by state; each state's counts to `path`."""
    per = {n: [state_agreement(v, s, tol) for v, s in zip(values, scores[n])] for n in SCORERS}
    counts = np.array([n for _, n in per["untrained"]], dtype=float)
    agree = {n: np.array([a for a, _ in rows], dtype=float) for n, rows in per.items()}
    with path.open("w") as out:
        for i, state in enumerate(states):
            row = {"state": state_key(state), "comparisons": int(counts[i])} | {n: agree[n][i] for n in SCORERS}
            out.write(json.dumps(row) + "\n")
    metrics = {}
    for name in ("trained", "learned"):
        diff = share_difference(agree[name], agree["untrained"], counts)
        key = f"turn_value_agreement_{name}_minus_untrained"
        metrics |= {key: diff["difference"], f"{key}_low": diff["low"], f"{key}_high": diff["high"]}
    return metrics


def _flat(figures: dict[str, dict[str, float]], prefix: str, main_key: str) -> dict[str, float]:
    """{prefix}_{scorer} = the main figure, {prefix}_{scorer}_{other} = the rest."""
    out = {}
    for scorer, numbers in figures.items():
        for key, value in numbers.items():
            out[f"{prefix}_{scorer}" if key == main_key else f"{prefix}_{scorer}_{key}"] = value
    return out


def run(
    critic: CriticConfig,
    ranking: RankingConfig,
    models: RankingModels,
    layout: TrainLayout,
    trajectories: Path,
    task: Task,
    max_turns: int,
    out_dir: Path,
) -> StageResult:
    """Measure the critic; see the module docstring for the files written."""
    from transformers import AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    for cache in out_dir.glob("*.jsonl"):  # log-probs of models that may have changed under the same path
        cache.unlink()
    if ranking.critic.trains:  # the critic step's reference pass: the same dialogues under critic.model
        shutil.copyfile(layout.critic_dir / REFERENCE_LOGPROBS, out_dir / "reference_sums.jsonl")
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(models.critic)
    trajs = {t.key: t for t in read_jsonl(trajectories, Trajectory)}
    pairs = list(read_jsonl(layout.pairs, TrajectoryPair))
    states = list(read_jsonl(layout.ranking_dir / "ranked.jsonl", TurnCandidates))
    records = task.records(Split.train)
    tol = critic.tie_tolerance
    margins = trajectory_margins(critic, ranking, models, pairs, trajs, task, records, tokenizer, out_dir)
    metrics: dict[str, float | str] = {"tie_tolerance": tol, "ranking_baseline": ranking.baseline.value}
    for split in ("heldout", "train"):
        figures = {name: pair_figures(m[split], tol) for name, m in margins.items()}
        metrics |= _flat(figures, f"{split}_pair_accuracy", "accuracy")
    scores = candidate_scores(critic, ranking, models, states, task, records, tokenizer, layout.ranking_dir, out_dir)
    values = candidate_values(states, trajs, task, records, max_turns)
    if values is not None:
        figures = {name: agreement(values, scores[name], tol) for name in SCORERS}
        metrics |= _flat(figures, "turn_value_agreement", "agreement")
        metrics |= agreement_differences(states, values, scores, tol, out_dir / "agreement.jsonl")
        metrics["states_without_value"] = sum(max(row) == 0 for row in values)
        chosen, rejected = turn_pair_values(
            list(read_jsonl(layout.ranking_dir / "turn_pairs.jsonl", TurnPair)), states, values
        )
        metrics |= {f"turn_pairs_{k}": v for k, v in turn_pair_classes(chosen, rejected).items()}
    metrics["seconds"] = time.perf_counter() - started
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (out_dir / "quality.md").write_text(quality_table(metrics))
    return StageResult(paths={"metrics": out_dir / "metrics.json"}, metrics=metrics)


def _accuracy_cell(m: dict, key: str) -> str:
    return f"{m[key]:.3f} ({m[key + '_n']})" if key in m else "none (0)"


def quality_table(m: dict) -> str:
    """The critic-quality figures as a markdown table, one row per scorer."""
    lines = [
        "# Critic quality",
        "",
        f"Ranking baseline: {m['ranking_baseline']}; ties: scores within {m['tie_tolerance']:g} (half right).",
        "",
        "| scorer | held-out pair accuracy (n) | training pair accuracy (n) "
        "| turn-value agreement [95% CI] (comparisons) |",
        "|---|---|---|---|",
    ]
    for name in SCORERS:
        held, train = (_accuracy_cell(m, f"{split}_pair_accuracy_{name}") for split in ("heldout", "train"))
        agree = "n/a"
        if f"turn_value_agreement_{name}" in m:
            agree = (
                f"{m[f'turn_value_agreement_{name}']:.3f} [{m[f'turn_value_agreement_{name}_low']:.3f}, "
                f"{m[f'turn_value_agreement_{name}_high']:.3f}] ({m[f'turn_value_agreement_{name}_comparisons']})"
            )
        lines.append(f"| {name} | {held} | {train} | {agree} |")
    if "turn_pairs_n" in m:
        lines += [
            "",
            f"Turn pairs against the exact value ({m['turn_pairs_n']}): right {m['turn_pairs_right']:.3f}, "
            f"wrong {m['turn_pairs_wrong']:.3f}, tie {m['turn_pairs_tie']:.3f}; ranked states where no candidate "
            f"is worth anything: {m['states_without_value']}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    sections, _ = stage_cli("components.stages.critic_quality", task_sections)
    critic, train_cfg = sections["critic"], sections["train"]
    layout = TrainLayout.of(train_cfg)
    models = ranking_models(sections["ranking"], critic, train_cfg)
    result = run(
        critic,
        sections["ranking"],
        models,
        layout,
        train_cfg.trajectories / "trajectories.jsonl",
        task_from_sections(sections),
        sections["episode"].max_turns,
        layout.quality_dir,
    )
    print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
