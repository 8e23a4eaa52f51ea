"""Generate the reviews task's openers: `python -m components.cory.reviews_generate`.

Reads: params `reviews` (components/config/prompt_tasks.py). Writes: `reviews.file` (JSONL of
components/cory/reviews.py ReviewRecord, the train rows then the eval rows; written to a temporary
file, then renamed) and prints one JSON line of counts.

A stand-in for the first 2-8 tokens of IMDB reviews (the authors' queries), which do not ship
offline: review beginnings from a small grammar of neutral parts (a subject such as "The film", a
verb such as "takes place in", an object such as "a small town in the north"), each cut to every
length from `min_words` to `max_words` words (words, not model tokens, so the file does not depend
on a tokenizer). Only openers VADER scores exactly 0 are kept, so every bit of sentiment in a rewarded
text is the model's. Distinct openers are shuffled with a seeded `random.Random` and dealt to the
eval split first, then to train, so no opener is in both and the eval split does not change when
`train_openers` does. The same seed gives a byte-identical file.
"""

from __future__ import annotations

import itertools
import json
import random

from components.config.prompt_tasks import ReviewsConfig, SentimentReward
from components.config.sections import load_section
from components.cory.reviews import ReviewRecord, VaderReward
from components.data.records import replace_jsonl

SUBJECTS = (
    "The film", "This movie", "The story", "The plot", "The director", "The cast", "This sequel",
    "The opening scene", "The second half", "The main character", "Her performance", "His character",
    "The soundtrack", "The script", "The ending", "This documentary", "The remake", "The first act",
    "The new version", "The novel it adapts",
)  # fmt: skip
VERBS = (
    "is about", "takes place in", "follows", "opens with", "was shot in", "tells the story of",
    "centers on", "was released in", "starts in", "is set in", "moves between", "begins with",
    "returns to", "deals with", "introduces",
)  # fmt: skip
OBJECTS = (
    "a small town in the north", "two brothers and their father", "the summer of 1987",
    "a family on a long road trip", "an old house by the sea", "three friends after school",
    "a detective and her partner", "the city at night", "a train station in winter",
    "a farm in the middle of the country", "the last week of the year", "a boat on the river",
    "a teacher and her students", "the years after the war", "a small shop on a busy street",
)  # fmt: skip


def candidates(cfg: ReviewsConfig) -> list[str]:
    """Every distinct opener the grammar gives, cut to each allowed length, in a fixed order."""
    seen: dict[str, None] = {}
    for parts in itertools.product(SUBJECTS, VERBS, OBJECTS):
        words = " ".join(parts).split()
        for n in range(cfg.min_words, min(cfg.max_words, len(words)) + 1):
            seen.setdefault(" ".join(words[:n]), None)
    return list(seen)


def generate(cfg: ReviewsConfig) -> list[ReviewRecord]:
    """The train openers then the eval openers, deterministic from `cfg.seed`; all VADER-neutral."""
    texts = candidates(cfg)
    pool = [text for text, score in zip(texts, VaderReward(SentimentReward.compound)(texts)) if score == 0.0]
    random.Random(f"reviews-{cfg.seed}").shuffle(pool)
    need = cfg.eval_openers + cfg.train_openers
    if len(pool) < need:
        raise ValueError(f"the grammar gives {len(pool)} neutral openers; {need} asked for (train + eval)")
    dealt = {"eval": pool[: cfg.eval_openers], "train": pool[cfg.eval_openers : need]}
    return [
        ReviewRecord(id=f"{split}-{i}", opener=text, split=split)
        for split in ("train", "eval")
        for i, text in enumerate(dealt[split])
    ]


def run(cfg: ReviewsConfig) -> dict:
    """Write the openers to `cfg.file` atomically; return the counts."""
    replace_jsonl(cfg.file, generate(cfg))
    return {"file": str(cfg.file), "train": cfg.train_openers, "eval": cfg.eval_openers}


def main() -> None:
    print(json.dumps(run(load_section(ReviewsConfig, "reviews"))))


if __name__ == "__main__":
    main()
