"""Configuration of the single-turn tasks CORY and PPO play (params.yaml sections `gsm8k`, `reviews`).

Reads and writes nothing. Defaults equal params.yaml's sections. The tasks themselves live in
components/cory/gsm8k.py and components/cory/reviews.py; the reviews generator
(`python -m components.cory.reviews_generate`) writes `reviews.file`. Contradictions (one file for
training and evaluation, a minimum opener length above the maximum) are rejected when loaded.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import Field, model_validator

from components.config.sections import _Section


class GSM8KConfig(_Section):
    """GSM8K (the paper's reasoning setting): DVC-tracked train and test questions."""

    train_file: Path = Field(Path("data/gsm8k/train.jsonl"), description="GSM8K training questions (JSONL)")
    test_file: Path = Field(Path("data/gsm8k/test.jsonl"), description="GSM8K test questions (JSONL)")

    @model_validator(mode="after")
    def _distinct(self) -> GSM8KConfig:
        if self.train_file == self.test_file:
            raise ValueError(
                f"train_file and test_file are the same file ({self.train_file}): the evaluation "
                "would measure training questions"
            )
        return self


class SentimentReward(str, Enum):
    compound = "compound"  # VADER's compound score in [-1, 1] (the default; see components/cory/reviews.py)
    valence = "valence"  # VADER's unbounded valence sum, the quantity compound squashes (logit-like)


class ObserverTemplate(str, Enum):
    authors = "authors"  # 'I can make this sentence "{q+a1}" more positive: {q}' (the authors' IMDB code)
    neutral = "neutral"  # the pioneer's continuation shown as a reference, no instruction about sentiment


class ReviewsConfig(_Section):
    """Review openers continued by the model, rewarded by sentiment (the paper's IMDB setting, offline)."""

    file: Path = Field(
        Path("data/reviews/openers.jsonl"),
        description="the generated openers (JSONL, train and eval rows in one file, split by each row's `split`)",
    )
    seed: int = Field(0, description="generator seed: the same seed gives a byte-identical file")
    train_openers: int = Field(512, ge=1, description="openers of the train split")
    eval_openers: int = Field(64, ge=1, description="openers of the held-out eval split (none shared with train)")
    min_words: int = Field(2, ge=1, description="shortest opener, in words (authors: 2 tokens)")
    max_words: int = Field(8, ge=1, description="longest opener, in words (authors: 8 tokens)")
    reward: SentimentReward = Field(
        SentimentReward.compound, description="compound (VADER's bounded score) | valence (its unbounded sum)"
    )
    reward_model: str | None = Field(
        None,
        description="a Hugging Face sequence classifier (folder or hub id) whose positive-class logit is the "
        "reward instead of VADER (the paper: lvwerra/distilbert-imdb)",
    )
    positive_label: int = Field(1, ge=0, description="reward_model only: the index of its positive class")
    observer_template: ObserverTemplate = Field(
        ObserverTemplate.authors, description="authors (asks for a more positive sentence) | neutral"
    )

    @model_validator(mode="after")
    def _lengths(self) -> ReviewsConfig:
        if self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) exceeds max_words ({self.max_words})")
        return self
