"""Rank each turn state's candidate actions by the trained critic's advantage (SWEET-RL step 5).

Reads: `candidates.jsonl` (components.stages.candidates, or `train.candidates`: another run's), the
tasks file (for the training-time information c), the trained critic (`ranking.critic: untrained`:
the base model `critic.model`, the ablation without critic training) and the baseline model.
Writes `out_dir/ranked.jsonl` (the same TurnCandidates with each candidate's `score`) and
`ranking_metrics.json`.

score(a) = beta * (mean_l log pi_critic(a^l | c, o_t, a^<l) - mean_l log pi_base(a^l | ...)), c being
what `critic.information` shows the critic (components/lm/critic_inputs.critic_info), with
`baseline: reference` (the paper): pi_base = the frozen initial critic, also given c; or
`baseline: actor` (the authors' code): pi_base = the actor's own log-prob, without c.
The N candidates of a state share their prompt, so each model scores them with
components.lm.shared_prefix (one pass over the prompt, candidates batched on its KV cache). One
model is in memory at a time: the baseline pass runs first and its means are cached per state in
`baseline_means.jsonl` (a re-run resumes after the states already there), then the critic pass,
whose means go to `critic_means.jsonl` (the critic-quality step reads both).
Run as `python -m components.stages.ranking [--config JSON]`.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pydantic import BaseModel
from tqdm.auto import tqdm

from components.config.training import Baseline, CriticConfig, Information, RankingConfig, TrainConfig, TrainLayout
from components.data.records import Candidate, TurnCandidates, TurnPair, read_jsonl, read_resumable, write_jsonl
from components.data.split import Split
from components.lm.critic_inputs import critic_info, info_prefix, task_of
from components.lm.shared_prefix import continuation_logprobs
from components.stages.cli import stage_cli
from components.stages.result import StageResult
from components.tasks.base import Task
from components.tasks.registry import task_from_sections, task_sections
from components.training.models import load_frozen, train_device_dtype

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankingModels:
    critic: str  # the trained critic
    reference: str  # the frozen initial critic (baseline=reference)
    actor: str  # the actor that sampled the candidates (baseline=actor)


class StateMeans(BaseModel):
    state: str
    means: list[float]


def state_key(state: TurnCandidates | TurnPair) -> str:
    """A turn state's key: its trajectory and turn (a turn pair names the state it was drawn from)."""
    return f"{state.trajectory}#{state.turn}"


def candidate_means(
    model_path: str,
    states: list[TurnCandidates],
    prefix_of: Callable[[TurnCandidates], list[int]],
    max_batch: int,
    cache: Path | None = None,
) -> list[list[float]]:
    """Mean log-prob of every candidate of every state under one model (cached per state if `cache`)."""
    known = {r.state: r.means for r in read_resumable(cache, StateMeans)} if cache else {}
    todo = [s for s in states if state_key(s) not in known]
    if todo:
        model = load_frozen(model_path, *train_device_dtype())
        for state in tqdm(todo, desc=f"scoring with {Path(model_path).name}", unit="state"):
            logps = continuation_logprobs(
                model, prefix_of(state), [c.response_ids for c in state.candidates], max_batch
            )
            row = StateMeans(state=state_key(state), means=[float(lp.mean()) if len(lp) else 0.0 for lp in logps])
            known[row.state] = row.means
            if cache:
                write_jsonl(cache, [row], append=True)
        del model
        gc.collect()
    return [known[state_key(s)] for s in states]


def rank(
    states: list[TurnCandidates], critic_means: list[list[float]], base_means: list[list[float]], beta: float
) -> list[TurnCandidates]:
    """The states with every candidate's advantage filled in."""
    return [
        s.model_copy(
            update={
                "candidates": [
                    Candidate(text=c.text, response_ids=c.response_ids, score=beta * (cm - bm))
                    for c, cm, bm in zip(s.candidates, crit, base)
                ]
            }
        )
        for s, crit, base in zip(states, critic_means, base_means)
    ]


def run(
    cfg: RankingConfig,
    models: RankingModels,
    beta: float,
    candidates: Path,
    task: Task,
    out_dir: Path,
    information: Information = Information.full,
) -> StageResult:
    """Score and rank; see the module docstring for the files written."""
    from transformers import AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    states = list(read_jsonl(candidates, TurnCandidates))
    tasks = task.records(Split.train)
    tokenizer = AutoTokenizer.from_pretrained(models.critic)
    prefixes = {}

    def with_c(state: TurnCandidates) -> list[int]:
        if state.task_index not in prefixes:
            record = task_of(state.task_id, state.task_index, tasks)
            prefixes[state.task_index] = info_prefix(tokenizer, critic_info(task, record, information))
        return prefixes[state.task_index] + state.prompt_ids

    if cfg.baseline == Baseline.reference:
        base = candidate_means(models.reference, states, with_c, cfg.max_batch, out_dir / "baseline_means.jsonl")
    else:
        base = candidate_means(
            models.actor, states, lambda s: s.prompt_ids, cfg.max_batch, out_dir / "baseline_means.jsonl"
        )
    critic = candidate_means(models.critic, states, with_c, cfg.max_batch, out_dir / "critic_means.jsonl")
    ranked = rank(states, critic, base, beta)
    path = out_dir / "ranked.jsonl"
    write_jsonl(path, ranked)
    spreads = [max(c.score for c in s.candidates) - min(c.score for c in s.candidates) for s in ranked]
    metrics = {
        "states": len(ranked),
        "candidates": sum(len(s.candidates) for s in ranked),
        "mean_score_spread": sum(spreads) / max(len(spreads), 1),
        "seconds": time.perf_counter() - started,
    }
    (out_dir / "ranking_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"ranked": path}, metrics=metrics)


def ranking_models(ranking: RankingConfig, critic: CriticConfig, train_cfg: TrainConfig) -> RankingModels:
    """The ranking's models: as critic the critic stage's model, or with `ranking.critic: untrained`
    the base model `critic.model` (no critic was trained); the reference is always `critic.model`."""
    trained = TrainLayout.of(train_cfg).critic_model
    return RankingModels(
        critic=str(trained) if ranking.critic.trains else critic.model, reference=critic.model, actor=train_cfg.model
    )


def main() -> None:
    sections, _ = stage_cli("components.stages.ranking", task_sections)
    critic, train_cfg = sections["critic"], sections["train"]
    layout = TrainLayout.of(train_cfg)
    models = ranking_models(sections["ranking"], critic, train_cfg)
    result = run(
        sections["ranking"],
        models,
        critic.beta,
        layout.candidates,
        task_from_sections(sections),
        layout.ranking_dir,
        critic.information,
    )
    print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
