"""Critic-guided best-of-N at evaluation (components/episodes/best_of.py): the selection hook on a
scripted agent with an oracle ranker, the critic's score on a tiny model, and the refused options."""

from __future__ import annotations

import json
import random

import pytest

from components.config.sections import EpisodeSection, EvalConfig
from components.data.records import Trajectory, read_jsonl
from components.data.split import Split
from components.engines.base import Generation
from components.episodes import build
from components.episodes.best_of import BestOfN, CriticRanker, candidate_seed, check_best_of, critic_information
from components.episodes.driver import EpisodeJob
from components.episodes.episode import Episode, EpisodeSteps
from components.lm.sequences import reference_prefix
from components.lm.shared_prefix import continuation_means
from components.stages import evaluate
from components.tasks.base import ANSWER_MARKER
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.domains import DOMAINS
from components.tasks.elicitation.generate import run as generate_tasks
from components.tasks.elicitation.task import ElicitationTask
from components.training.models import load_frozen, train_device_dtype
from tests.factories import make_meeting


class OracleRanker:
    """Scores a candidate by its exact value under the rules simulator (Task.turn_value)."""

    def __init__(self, task, max_turns: int) -> None:
        self.task, self.max_turns = task, max_turns

    def scores(self, episodes, candidates):
        return [
            [self.task.turn_value(ep.job.task, ep.dialogue, g.text, len(ep.turns) + 1 == self.max_turns) for g in group]
            for ep, group in zip(episodes, candidates)
        ]


class EqualRanker:
    def scores(self, episodes, candidates):
        return [[0.0] * len(group) for group in candidates]


@pytest.fixture
def elicitation(tmp_path):
    cfg = ElicitationConfig(file=tmp_path / "tasks.jsonl", train_tasks=6, eval_tasks=12)
    generate_tasks(cfg)
    return ElicitationTask({"elicitation": cfg})


def guessing_script(task):
    """A fake agent that answers at once with one value per slot, drawn from its request's seed."""
    domains = {r.request: r.domain for r in task.records(Split.eval)}

    def script(prompt: str, seed: int) -> str:
        domain = next(d for request, d in domains.items() if request in prompt)
        rng = random.Random(seed)
        return f"{ANSWER_MARKER} " + ", ".join(rng.choice(s.values) for s in DOMAINS[domain].slots)

    return script


def evaluation(tmp_path, monkeypatch, engine, task, sampler, name):
    monkeypatch.setattr(build, "engine_for", lambda *args, **kwargs: engine)
    cfg = EvalConfig(engine="hf", limit=None, bootstrap_samples=200, out_dir=tmp_path / name)
    episode = EpisodeSection(max_turns=2, max_tokens=32, temperature=1.0)
    metrics = evaluate.run(cfg, episode, task, cfg.out_dir, sampler).metrics
    return metrics, list(read_jsonl(cfg.out_dir / "trajectories.jsonl", Trajectory))


def test_best_of_n_with_an_oracle_ranker_beats_plain_sampling(tmp_path, monkeypatch, tokenizer, scripted, elicitation):
    script = guessing_script(elicitation)
    plain_engine, best_engine = scripted(tokenizer, script), scripted(tokenizer, script)
    plain, plain_trajs = evaluation(tmp_path, monkeypatch, plain_engine, elicitation, BestOfN(1), "plain")
    best, best_trajs = evaluation(
        tmp_path, monkeypatch, best_engine, elicitation, BestOfN(8, OracleRanker(elicitation, 2), "oracle"), "best"
    )
    assert best["mean_score"] > plain["mean_score"] + 0.2, (best["mean_score"], plain["mean_score"])
    assert best["mean_score_ci_low"] <= best["mean_score"] <= best["mean_score_ci_high"]
    assert best["best_of"] == 8 and best["critic"] == "oracle" and best["ranked_states"] == 12
    assert 0 <= best["critic_score_spread_min"] <= best["critic_score_spread_mean"] <= best["critic_score_spread_max"]
    assert plain["best_of"] == 1 and plain["critic"] is None and "critic_score_spread_mean" not in plain
    saved = json.loads((tmp_path / "best" / "metrics.json").read_text())
    assert saved["best_of"] == 8 and saved["mean_score"] == best["mean_score"]
    # one engine call per turn for the whole batch: 12 episodes x 8 candidates, every seed its own
    assert [len(b) for b in best_engine.batches] == [96] and len(set(best_engine.seeds[0])) == 96
    # candidate 0 is the plain sample; the kept turn keeps its own candidate's exact ids
    assert best_engine.seeds[0][::8] == plain_engine.seeds[0]
    for traj, prompts in zip(best_trajs, (best_engine.batches[0][i * 8] for i in range(12))):
        turn = traj.turns[0]
        assert turn.prompt_ids == prompts and len(turn.response_logprobs) == len(turn.response_ids)
        assert tokenizer.decode(turn.response_ids, skip_special_tokens=True) == turn.action
    assert all(b.score >= p.score for b, p in zip(best_trajs, plain_trajs))  # the oracle never loses a task


def test_best_of_one_and_tied_candidates_send_what_plain_sampling_sends(
    tmp_path, monkeypatch, tokenizer, scripted, elicitation
):
    script = guessing_script(elicitation)
    _, default = evaluation(tmp_path, monkeypatch, scripted(tokenizer, script), elicitation, None, "default")
    _, one = evaluation(tmp_path, monkeypatch, scripted(tokenizer, script), elicitation, BestOfN(1), "one")
    tied = BestOfN(4, EqualRanker(), "equal")
    _, ties = evaluation(tmp_path, monkeypatch, scripted(tokenizer, script), elicitation, tied, "ties")
    assert [t.turns for t in default] == [t.turns for t in one] == [t.turns for t in ties]
    assert tied.kept == [0] * 12 and tied.metrics()["kept_first_rate"] == 1.0


def test_candidate_seeds_are_derived_per_episode_turn_and_candidate():
    job = EpisodeJob(0, make_meeting(), run_seed=3)
    ep = Episode(job=job, messages=[], prompt_ids=[1])
    seeds = [candidate_seed(ep, k) for k in range(4)]
    assert seeds[0] == EpisodeSteps.agent_seed(ep) and len(set(seeds)) == 4
    other = Episode(job=EpisodeJob(0, make_meeting(), run_seed=4), messages=[], prompt_ids=[1])
    assert not set(seeds) & {candidate_seed(other, k) for k in range(4)}


def test_critic_score_is_critic_with_c_minus_actor_without_c(tiny_model_dir):
    from transformers import AutoTokenizer

    task = ElicitationTask({})
    record = make_meeting()
    ep = Episode(job=EpisodeJob(0, record, 0), messages=[], prompt_ids=[11, 12, 13, 14])
    group = [Generation(text="a", token_ids=[20, 21, 22]), Generation(text="b", token_ids=[30]), Generation(text="")]
    ranker = CriticRanker(str(tiny_model_dir), str(tiny_model_dir), task, beta=0.1, max_batch=2)
    scores = ranker.scores([ep], [group])[0]
    assert ranker._models[0] is ranker._models[1]  # the same folder loads once
    model = load_frozen(str(tiny_model_dir), *train_device_dtype())
    prefix = reference_prefix(AutoTokenizer.from_pretrained(tiny_model_dir), critic_information(task, record))
    ids = [g.token_ids for g in group]
    with_c, without = (
        continuation_means(model, prefix + ep.prompt_ids, ids),
        continuation_means(model, [11, 12, 13, 14], ids),
    )
    expected = [0.1 * (c - a) for c, a in zip(with_c, without)]
    assert scores == pytest.approx(expected, abs=1e-5) and scores[2] == 0.0
    assert critic_information(task, record) == task.training_info(record)


@pytest.mark.parametrize(
    "n, critic, message",
    [
        (0, None, "at least 1"),
        (-2, "base", "at least 1"),
        (4, None, "needs --critic"),
        (1, "base", "refused with --best-of 1"),
        (4, "/nonexistent/critic", "not an HF model folder"),
    ],
)
def test_bad_best_of_options_are_refused(n, critic, message):
    with pytest.raises(ValueError, match=message):
        check_best_of(n, critic)


def test_a_folder_without_config_json_is_not_a_critic(tmp_path):
    with pytest.raises(ValueError, match="not an HF model folder"):
        check_best_of(4, str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    check_best_of(4, str(tmp_path))
    check_best_of(4, "base")
    check_best_of(1, None)
