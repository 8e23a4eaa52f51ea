"""The reviews task: continue a neutral movie-review opener; reward = the sentiment of the whole text.

Reads `reviews.file` (JSONL of `ReviewRecord`, written by components/cory/reviews_generate.py: train
rows then held-out eval rows, no opener in both) and, with `reviews.reward_model`, a Hugging Face
sequence classifier. Writes nothing.

This is the IMDB setting of Ma et al. 2024 (CORY, sec. 5.1) and of the authors' public code
(imdb_train/cory.py), offline: there the query is the first 2-8 tokens of an IMDB review and the
reward the positive logit of a distilbert-imdb classifier on query + response. Neither review text
nor a sentiment model ships offline here, so the openers are a seeded stand-in for IMDB review
beginnings (every one neutral: VADER scores it 0) and the reward is VADER's (Hutto & Gilbert 2014,
the `vadersentiment` package, a rule-based lexicon) unless a classifier is given.

Which VADER number (`reviews.reward`): `compound` (default) is the valence sum s squashed to
s / sqrt(s^2 + 15), in [-1, 1]; `valence` is s itself (with VADER's punctuation emphasis), unbounded
like a classifier logit. We default to compound: the paper's classifier logit is bounded in practice
(a distilbert logit rarely leaves [-5, 5]), while s grows without limit with every positive word
repeated, which hands PPO a reward it can raise by degenerate repetition, not by better text; and a
bounded reward keeps the KL penalty (eta) on a known scale. `valence` is there for the closer
analogue of an unsquashed logit.

Prompts (`chat_template: false` in the reviews profile: the model continues raw text, as GPT-2 did):
the pioneer sees the opener q; the observer, with the authors' template, sees
`I can make this sentence "<q + a1>" more positive: <q>` and continues q; with `neutral`,
`Another continuation of "<q + a1>": <q>`, which shows the pioneer's text without asking for
sentiment (to tell what the cooperation gives from what the instruction gives).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.config.prompt_tasks import ObserverTemplate, ReviewsConfig, SentimentReward
from components.cory.tasks import PromptTask
from components.data.records import read_jsonl

POSITIVE_TARGET = "positive sentiment"  # what the reward asks for (samples.jsonl `target`)


class ReviewRecord(BaseModel):
    """One review opener: its id, text and split."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1)
    opener: str = Field(min_length=1, description="the neutral start of a review the model continues")
    split: Literal["train", "eval"]


def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    class Valence(SentimentIntensityAnalyzer):
        """VADER, also keeping the valence sum it squashes into the compound score."""

        def score_valence(self, sentiments, text):
            total = float(sum(sentiments))
            emphasis = self._punctuation_emphasis(text)
            self.last_sum = total + emphasis if total > 0 else total - emphasis if total < 0 else 0.0
            return super().score_valence(sentiments, text)

    return Valence()


class VaderReward:
    """VADER's compound score (in [-1, 1]) or its valence sum, per text."""

    def __init__(self, kind: SentimentReward) -> None:
        self.kind = kind
        self.analyzer = _vader()

    def __call__(self, texts: Sequence[str]) -> list[float]:
        out = []
        for text in texts:
            scores = self.analyzer.polarity_scores(text)
            out.append(float(scores["compound"]) if self.kind == SentimentReward.compound else self.analyzer.last_sum)
        return out


class ClassifierReward:
    """A Hugging Face sequence classifier's logit of the positive class, per text (the paper's reward)."""

    def __init__(self, model: str, positive_label: int, batch_size: int = 16) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model).eval()
        if positive_label >= self.model.config.num_labels:
            raise ValueError(f"positive_label {positive_label} but {model} has {self.model.config.num_labels} labels")
        self.positive, self.batch_size = positive_label, batch_size

    def __call__(self, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        with self.torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[start : start + self.batch_size]), padding=True, truncation=True, return_tensors="pt"
                )
                out += self.model(**batch).logits[:, self.positive].float().tolist()
        return out


class ReviewsTask(PromptTask):
    """Continue a neutral review opener; the reward is the sentiment of opener + continuation."""

    name = "reviews"
    sections = ("reviews",)
    record_keys = ("reviews.file",)
    binary = False
    generator = "reviews_openers"
    cfg: ReviewsConfig

    def _rows(self, split: str) -> list[ReviewRecord]:
        return [r for r in read_jsonl(self.cfg.file, ReviewRecord) if r.split == split]

    def train_rows(self) -> list[ReviewRecord]:
        return self._rows("train")

    def eval_rows(self, limit: int) -> list[ReviewRecord]:
        rows = self._rows("eval")[:limit]
        if len(rows) < limit:
            raise ValueError(f"{limit} evaluation openers asked for but {self.cfg.file} holds {len(rows)}")
        return rows

    def query_prompt(self, row: ReviewRecord) -> str:
        return row.opener

    def observer_prompt(self, row: ReviewRecord, pioneer_answer: str) -> str:
        shown = row.opener + pioneer_answer
        if self.cfg.observer_template == ObserverTemplate.authors:
            return f'I can make this sentence "{shown}" more positive: {row.opener}'
        return f'Another continuation of "{shown}": {row.opener}'

    @cached_property
    def scorer(self):
        if self.cfg.reward_model:
            return ClassifierReward(self.cfg.reward_model, self.cfg.positive_label)
        return VaderReward(self.cfg.reward)

    def rewards(self, rows: Sequence[ReviewRecord], answers: Sequence[str]) -> list[float]:
        return self.scorer([row.opener + answer for row, answer in zip(rows, answers, strict=True)])

    def describe(self, row: ReviewRecord) -> dict[str, str]:
        return {"prompt": row.opener, "target": POSITIVE_TARGET}
