"""The single-turn tasks CORY and PPO play: the reviews generator, VADER's reward, the prompts, the
registry's rule for collaborative names, and the sampler's collective reward on a scripted engine."""

import math

import pytest
from pydantic import ValidationError

from components.config.prompt_tasks import GSM8KConfig, ReviewsConfig, SentimentReward
from components.cory import registry
from components.cory.agents import OBSERVER, PIONEER, POLICY
from components.cory.gsm8k import GSM8KTask
from components.cory.reviews import ReviewRecord, ReviewsTask, VaderReward
from components.cory.reviews_generate import generate, run
from components.cory.rollout import cory_samples, ppo_samples
from components.engines.base import SamplingConfig
from tests.cory_helpers import write_gsm8k


def small(tmp_path, **values) -> ReviewsConfig:
    return ReviewsConfig(file=tmp_path / "openers.jsonl", train_openers=40, eval_openers=10, **values)


def test_the_generator_is_deterministic_neutral_short_and_split_by_opener(tmp_path):
    cfg = small(tmp_path)
    first, again = generate(cfg), generate(cfg)
    assert first == again and first != generate(small(tmp_path, seed=1))
    train = [r.opener for r in first if r.split == "train"]
    evaluation = [r.opener for r in first if r.split == "eval"]
    assert (len(train), len(evaluation)) == (40, 10) and not set(train) & set(evaluation)
    assert len(set(train)) == 40
    assert all(2 <= len(o.split()) <= 8 for o in train + evaluation)
    assert VaderReward(SentimentReward.compound)(train + evaluation) == [0.0] * 50
    # the eval split is dealt first: more training openers leave it as it was
    bigger = [r for r in generate(small(tmp_path).model_copy(update={"train_openers": 80})) if r.split == "eval"]
    assert [r.opener for r in bigger] == evaluation


def test_the_generator_writes_the_file_the_task_reads(tmp_path):
    cfg = small(tmp_path, min_words=3, max_words=4)
    assert run(cfg) == {"file": str(cfg.file), "train": 40, "eval": 10}
    task = ReviewsTask(cfg)
    assert len(task.train_rows()) == 40 and all(3 <= len(r.opener.split()) <= 4 for r in task.train_rows())
    assert [r.split for r in task.eval_rows(10)] == ["eval"] * 10
    with pytest.raises(ValueError, match="11 evaluation openers asked for"):
        task.eval_rows(11)


def test_config_contradictions_are_rejected(tmp_path):
    with pytest.raises(ValidationError, match="exceeds max_words"):
        ReviewsConfig(min_words=5, max_words=3)
    with pytest.raises(ValidationError, match="same file"):
        GSM8KConfig(train_file="data/x.jsonl", test_file="data/x.jsonl")


def test_vader_compound_is_the_squashed_valence_sum():
    texts = ["The film is great!!", "great great great great great", "The film is bad.", "The film"]
    compound = VaderReward(SentimentReward.compound)(texts)
    valence = VaderReward(SentimentReward.valence)(texts)
    for c, s in zip(compound, valence):
        assert c == pytest.approx(s / math.sqrt(s * s + 15), abs=1e-4)
    assert valence[1] > 4 and compound[1] < 1  # the sum keeps growing where compound saturates
    assert valence[2] < 0 and valence[3] == 0.0


def test_reviews_prompts_and_reward_score_the_opener_with_its_continuation(tmp_path):
    row = ReviewRecord(id="eval-0", opener="The film opens with", split="eval")
    task = ReviewsTask(small(tmp_path))
    assert task.query_prompt(row) == "The film opens with"
    assert (
        task.observer_prompt(row, " a storm.")
        == 'I can make this sentence "The film opens with a storm." more positive: The film opens with'
    )
    neutral = ReviewsTask(small(tmp_path, observer_template="neutral")).observer_prompt(row, " a storm.")
    assert "The film opens with a storm." in neutral and "positive" not in neutral
    good, bad = task.rewards([row, row], [" a wonderful, beautiful scene", " a terrible, boring scene"])
    assert good > 0.5 and bad < -0.5
    assert task.describe(row) == {"prompt": "The film opens with", "target": "positive sentiment"}


def test_the_registry_gives_collaborative_names_the_default_task():
    assert registry.prompt_task_class("reviews") is ReviewsTask
    assert registry.prompt_task_class("colbench-backend") is GSM8KTask
    assert registry.prompt_task_sections("elicitation") == ("gsm8k",)
    assert GSM8KTask.file_keys() == ("gsm8k.train_file", "gsm8k.test_file")


class LengthTask(GSM8KTask):
    """A reward the test can predict: the answer's length in characters."""

    def rewards(self, rows, answers):
        return [float(len(a)) for a in answers]


def test_both_cory_agents_get_r1_plus_r2_and_the_observer_sees_the_pioneer_answer(tmp_path, tokenizer, scripted):
    train, test = write_gsm8k(tmp_path)
    task = LengthTask(GSM8KConfig(train_file=train, test_file=test))
    rows = task.train_rows()[:3]
    engine = scripted(tokenizer, lambda prompt, seed: f"answer-{seed % 1000}")
    samples = cory_samples(lambda agent: engine, {PIONEER: "agent0", OBSERVER: "agent1"}, task, rows,
                           SamplingConfig(max_tokens=8), False, 0, 1)  # fmt: skip
    pioneers = [s for s in samples if s.role == PIONEER]
    observers = [s for s in samples if s.role == OBSERVER]
    assert [s.agent for s in pioneers] == ["agent0"] * 3 and [s.agent for s in observers] == ["agent1"] * 3
    for p, o in zip(pioneers, observers):
        assert p.correct == len(p.text) and o.correct == len(o.text)
        assert p.task_reward == o.task_reward == p.correct + o.correct
        assert f"Reference: {p.text}" in tokenizer.decode(o.prompt_ids)
    ppo = ppo_samples(lambda agent: engine, {POLICY: "agent0"}, task, rows, SamplingConfig(max_tokens=8), False, 0, 1)
    assert len(ppo) == 6 and all(s.task_reward == s.correct == len(s.text) for s in ppo)
