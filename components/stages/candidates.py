"""Sample N candidate actions per turn state from the actor (SWEET-RL step 4).

Reads: scored rollouts (`trajectories.jsonl`). Writes `out_dir/candidates.jsonl` (one
TurnCandidates per state: the state's exact prompt ids and N sampled actions with their token
ids) and `candidates_metrics.json`. A state is the history before an agent turn; the states are
all turns of a `fraction` of the trajectories (authors: 10%, against DPO over-fitting), chosen
by a hash of the seed and the trajectory key so the choice does not depend on file order.
Sampling goes through the engine layer (vLLM by default: the N copies of a state share its
prefix cache), with one seed per (state, candidate). States are appended in chunks as they are
sampled; a re-run skips the states already written.
Run as `python -m components.stages.candidates [--config JSON]`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from components.config.training import CandidatesConfig, TrainLayout
from components.data.records import Candidate, Trajectory, TurnCandidates, read_jsonl, read_resumable, write_jsonl
from components.data.split import hashed_below
from components.engines.base import SamplingConfig
from components.episodes.build import engine_for, openai_options
from components.episodes.driver import derive_seed
from components.stages.cli import stage_cli
from components.stages.result import StageResult

log = logging.getLogger(__name__)
CHUNK_STATES = 32  # states per generate call: the unit of crash-safe progress


@dataclass(frozen=True)
class State:
    """A turn state: the trajectory and turn it comes from, and its exact prompt ids."""

    traj: Trajectory
    turn: int

    @property
    def prompt_ids(self) -> list[int]:
        return self.traj.turns[self.turn].prompt_ids


def select_states(trajs: list[Trajectory], fraction: float, seed: int, max_prompt: int) -> list[State]:
    """Every turn state of the selected trajectories whose prompt leaves room for a candidate."""
    return [
        State(t, turn.index)
        for t in trajs
        if hashed_below(f"{seed}/{t.key}", fraction)
        for turn in t.turns
        if len(turn.prompt_ids) <= max_prompt
    ]


def sample_chunk(engine, states: list[State], cfg: CandidatesConfig) -> list[TurnCandidates]:
    """N candidates for each state in one generate call, one seed per (state, candidate)."""
    prompts = [s.prompt_ids for s in states for _ in range(cfg.per_state)]
    seeds = [derive_seed(cfg.seed, s.traj.key, s.turn, j) for s in states for j in range(cfg.per_state)]
    gens = engine.generate(prompts, SamplingConfig(temperature=cfg.temperature, max_tokens=cfg.max_tokens), seeds)
    return [
        TurnCandidates(
            task_id=s.traj.task_id,
            task_index=s.traj.task_index,
            trajectory=s.traj.key,
            turn=s.turn,
            prompt_ids=s.prompt_ids,
            candidates=[
                Candidate(text=g.text, response_ids=g.token_ids)
                for g in gens[i * cfg.per_state : (i + 1) * cfg.per_state]
            ],
        )
        for i, s in enumerate(states)
    ]


def run(cfg: CandidatesConfig, model: str, trajectories: Path, max_model_len: int, out_dir: Path) -> StageResult:
    """Sample the candidates from the actor `model`; see the module docstring for the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "candidates.jsonl"
    states = select_states(
        list(read_jsonl(trajectories, Trajectory)), cfg.fraction, cfg.seed, max_model_len - cfg.max_tokens
    )
    if not states:
        raise ValueError(
            f"no turn state selected from {trajectories} (fraction {cfg.fraction}): "
            "raise candidates.fraction or collect more rollouts"
        )
    done = {(s.trajectory, s.turn) for s in read_resumable(path, TurnCandidates)}
    todo = [s for s in states if (s.traj.key, s.turn) not in done]
    log.info("%d turn states selected, %d already sampled", len(states), len(states) - len(todo))
    tokens, started, engine_s = 0, time.perf_counter(), 0.0
    if todo:
        engine = engine_for(cfg.engine, model, cfg.seed, max_model_len, openai_options(cfg))
        engine_s = time.perf_counter() - started
        try:
            for start in tqdm(range(0, len(todo), CHUNK_STATES), desc="candidate states", unit="chunk"):
                sampled = sample_chunk(engine, todo[start : start + CHUNK_STATES], cfg)
                write_jsonl(path, sampled, append=True)
                tokens += sum(len(c.response_ids) for s in sampled for c in s.candidates)
        finally:
            engine.close()
    elapsed = time.perf_counter() - started
    metrics = {
        "states": len(states),
        "sampled_now": len(todo),
        "candidates_per_state": cfg.per_state,
        "seconds": elapsed,
        "engine_seconds": engine_s,
        "tokens_per_s": tokens / elapsed if todo else 0.0,
    }
    (out_dir / "candidates_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"candidates": path}, metrics=metrics)


def main() -> None:

    sections, _ = stage_cli("components.stages.candidates")
    train_cfg = sections["train"]
    result = run(
        sections["candidates"],
        train_cfg.model,
        train_cfg.trajectories / "trajectories.jsonl",
        sections["episode"].max_model_len,
        TrainLayout(train_cfg.out_dir).candidates.parent,
    )
    print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
