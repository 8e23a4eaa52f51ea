"""Candidate sampling (state choice, seeds, resume) and ranking (advantage, order) without models."""

from __future__ import annotations

import pytest

from components.config.training import CandidatesConfig, PairsConfig
from components.data.records import Candidate, Turn, TurnCandidates, TurnPair, read_jsonl, write_jsonl
from components.engines.base import Generation
from components.stages import candidates, pairs
from components.stages.ranking import rank
from tests.factories import make_trajectory


def traj(i, turns=2):
    return make_trajectory(
        task_index=i,
        run_seed=0,
        score=0.0,
        task_id=f"t{i}",
        sample=0,
        turns=[Turn(index=k, action="q", prompt_ids=[1] * (10 + k), response_ids=[2]) for k in range(turns)],
    )


class EchoEngine:
    """Returns the request seed as the candidate text; records the calls."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling, seeds):
        self.calls.append(len(prompts))
        return [Generation(text=str(s), token_ids=[s % 50 + 3], logprobs=[-1.0]) for s in seeds]

    def close(self):
        pass


def test_state_choice_is_a_stable_fraction_of_trajectories_independent_of_order():
    trajs = [traj(i) for i in range(400)]
    chosen = {s.traj.key for s in candidates.select_states(trajs, 0.1, 0, max_prompt=100)}
    assert 20 <= len(chosen) <= 60  # about 10% of 400 trajectories
    assert chosen == {s.traj.key for s in candidates.select_states(trajs[::-1], 0.1, 0, max_prompt=100)}
    assert chosen != {s.traj.key for s in candidates.select_states(trajs, 0.1, 1, max_prompt=100)}
    short = candidates.select_states(trajs, 0.1, 0, max_prompt=10)  # turn 1's 11-token prompt does not fit
    assert len(short) == len(chosen) and {s.turn for s in short} == {0}
    assert len(candidates.select_states(trajs, 1.0, 0, max_prompt=100)) == 800  # every turn of every trajectory


def test_sampling_gives_n_distinctly_seeded_candidates_per_state_and_resumes(tmp_path, monkeypatch):
    engine = EchoEngine()
    monkeypatch.setattr(candidates, "engine_for", lambda *a, **k: engine)
    monkeypatch.setattr(candidates, "CHUNK_STATES", 3)
    write_jsonl(tmp_path / "trajectories.jsonl", [traj(i) for i in range(4)])
    cfg = CandidatesConfig(fraction=1.0, per_state=4, max_tokens=8)
    result = candidates.run(cfg, "model", tmp_path / "trajectories.jsonl", 512, tmp_path)
    states = list(read_jsonl(tmp_path / "candidates.jsonl", TurnCandidates))
    assert result.metrics["states"] == len(states) == 8 and engine.calls == [12, 12, 8]
    assert all(len({c.text for c in s.candidates}) == 4 for s in states)
    assert states[0].prompt_ids == [1] * 10 and states[1].prompt_ids == [1] * 11
    again = candidates.run(cfg, "model", tmp_path / "trajectories.jsonl", 512, tmp_path)
    assert again.metrics["sampled_now"] == 0 and engine.calls == [12, 12, 8]  # nothing re-sampled


def test_rank_scores_beta_times_the_mean_difference_and_turn_pairs_follow_it(tmp_path):
    state = TurnCandidates(
        task_id="t",
        task_index=0,
        trajectory="0/0/0",
        turn=1,
        prompt_ids=[1, 2],
        candidates=[Candidate(text=str(i), response_ids=[10 + i]) for i in range(4)],
    )
    ranked = rank([state], critic_means=[[-1.0, -2.0, -0.5, -3.0]], base_means=[[-1.0, -1.0, -1.0, -1.0]], beta=0.1)
    scores = [c.score for c in ranked[0].candidates]
    assert scores == pytest.approx([0.0, -0.1, 0.05, -0.2])
    write_jsonl(tmp_path / "ranked.jsonl", ranked)
    pairs.run_turn(PairsConfig(per_state=4), tmp_path / "ranked.jsonl", tmp_path)
    turn_pairs = [
        (p.chosen_ids[0] - 10, p.rejected_ids[0] - 10) for p in read_jsonl(tmp_path / "turn_pairs.jsonl", TurnPair)
    ]
    assert sorted(turn_pairs) == [(0, 1), (0, 3), (2, 1), (2, 3)]  # upper half {2, 0} vs lower half {1, 3}
