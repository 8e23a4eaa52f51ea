"""GSM8K for CORY: typed rows, gold answers, the last-number reward and the two agents' prompts.

Reads data/gsm8k/{train,test}.jsonl (DVC-tracked), one {"question", "answer"} object a line, where
the gold answer is the text after "####" at the end of `answer`. Writes nothing.

Reward (Ma et al. 2024, GSM8K setting; docs/algorithms.md "CORY"): r(q, a) = 1 when the LAST number in
the completion a equals the gold answer, else 0. Numbers are compared as `Decimal`s, not strings,
so "5.0" == "5", "0.50" == ".5" and "1,234" == "1234". A number may carry a sign ("-5", "−5"),
thousands commas, a decimal part, and a currency symbol or unit around it ("$18", "18 dollars",
"18%", "18kg"). A period not followed by a digit ("18.") ends a sentence and is not a decimal
point; a run of several dotted groups ("12.03.2024", "1.2.3") is read as separate integers, not
as a decimal. A "-" right after a letter, digit or closing bracket is a binary minus ("10-5"), not
a sign. Fractions ("3/4") are not evaluated: their last number is the denominator. The authors'
released code covers IMDB only, so this reward is ours, written from the paper's description.

Prompts: the pioneer sees the question; the observer sees the question, then "Reference: <pioneer
answer>", then "Answer:" (the paper's GSM8K format). Evaluation uses either agent alone with the
query-only prompt, which is the pioneer prompt. `GSM8KTask` is this as a components/cory/tasks.py
task (params section `gsm8k`: its train and test files).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from itertools import islice
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.config.prompt_tasks import GSM8KConfig
from components.cory.tasks import PromptTask
from components.data.records import read_jsonl

GOLD_MARKER = "####"

_NUMBER = re.compile(
    r"""
    (?P<sign>(?<![\w)\].,])[-\u2212+])?   # a sign only where it cannot be a binary minus
    [$\u20ac\u00a3\u00a5]?                 # optional currency symbol between sign and digits
    (?P<body>
        \d{1,3}(?:,\d{3})+(?:\.\d+)?       # 1,234 and 1,234.56
      | \d+(?:\.\d+)*                      # 18, 18.5, and dotted runs such as 12.03.2024
      | (?<![\w.])\.\d+                    # .5
    )
    """,
    re.VERBOSE,
)


class GSM8KRow(BaseModel):
    """One GSM8K problem: the question and the worked answer ending in "#### <gold>"."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    question: str = Field(min_length=1, description="the word problem")
    answer: str = Field(description="worked solution ending with '#### <gold answer>'")

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question is blank")
        return value

    @field_validator("answer")
    @classmethod
    def _answer_has_numeric_gold(cls, value: str) -> str:
        gold = gold_answer(value)  # raises ValueError with the reason
        if parse_number(gold) is None:
            raise ValueError(f"gold answer after '{GOLD_MARKER}' is not a number: {gold!r}")
        return value

    @property
    def gold(self) -> str:
        """The gold answer text (as written in the file, e.g. "1,080")."""
        return gold_answer(self.answer)


def load_gsm8k(path: Path | str, limit: int | None = None) -> list[GSM8KRow]:
    """The first `limit` rows (all when None) of a GSM8K JSONL file, each validated.

    A bad row raises `components.data.records.RecordError` naming the file, the 1-based line and the
    field (e.g. an answer without "####" or with a non-numeric gold answer).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    return list(islice(read_jsonl(Path(path), GSM8KRow), limit))


def gold_answer(answer_text: str) -> str:
    """The text after the last "####" of a GSM8K answer, stripped; ValueError if there is none."""
    if GOLD_MARKER not in answer_text:
        raise ValueError(f"no '{GOLD_MARKER}' gold answer marker in answer")
    gold = answer_text.rsplit(GOLD_MARKER, 1)[1].strip()
    if not gold:
        raise ValueError(f"nothing after '{GOLD_MARKER}' in answer")
    return gold


def _numbers(text: str) -> list[Decimal]:
    """Every number in `text`, in order, as Decimals (dotted runs split into their integers)."""
    out: list[Decimal] = []
    for match in _NUMBER.finditer(text):
        body = match.group("body").replace(",", "")
        negative = match.group("sign") in ("-", "\u2212")
        if body.count(".") > 1:  # 12.03.2024: a date or version, not a decimal
            parts = [Decimal(p) for p in body.split(".")]
            out.extend([-parts[0] if negative else parts[0], *parts[1:]])
        else:
            value = Decimal(body)
            out.append(-value if negative else value)
    return out


def _canonical(value: Decimal) -> str:
    """Plain decimal text without exponent or trailing zeros: 5.0 -> "5", 0.50 -> "0.5"."""
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


def extract_last_number(text: str) -> str | None:
    """The last number in `text` in canonical form ("1,234.50" -> "1234.5"), or None if none."""
    numbers = _numbers(text)
    return _canonical(numbers[-1]) if numbers else None


def parse_number(text: str) -> Decimal | None:
    """`text` as a Decimal when it holds exactly one number (units and "$" allowed), else None."""
    numbers = _numbers(text)
    return numbers[0] if len(numbers) == 1 else None


def reward(completion: str, gold: str) -> float:
    """1.0 when the last number of `completion` equals `gold` numerically, else 0.0.

    `gold` is a gold answer as `gold_answer` returns it (commas allowed); ValueError if it holds
    no single number, since that is a data error, not a wrong completion.
    """
    target = parse_number(gold)
    if target is None:
        raise ValueError(f"gold answer is not a single number: {gold!r}")
    numbers = _numbers(completion)
    return 1.0 if numbers and numbers[-1] == target else 0.0


def pioneer_prompt(question: str) -> str:
    """The pioneer's prompt: the question alone, then "Answer:"."""
    return f"Question: {question.strip()}\nAnswer:"


def observer_prompt(question: str, pioneer_answer: str) -> str:
    """The observer's prompt: the question, then "Reference: <pioneer answer>", then "Answer:"."""
    return f"Question: {question.strip()}\nReference: {pioneer_answer.strip()}\nAnswer:"


def query_prompt(question: str) -> str:
    """The query-only evaluation prompt for either agent alone (the same as the pioneer's)."""
    return pioneer_prompt(question)


class GSM8KTask(PromptTask):
    """GSM8K word problems; reward 1 when the answer's last number is the gold answer."""

    name = "gsm8k"
    sections = ("gsm8k",)
    record_keys = ("gsm8k.train_file", "gsm8k.test_file")
    binary = True
    cfg: GSM8KConfig

    def train_rows(self) -> list[GSM8KRow]:
        return load_gsm8k(self.cfg.train_file)

    def eval_rows(self, limit: int) -> list[GSM8KRow]:
        rows = load_gsm8k(self.cfg.test_file, limit)
        if len(rows) < limit:
            raise ValueError(f"{limit} evaluation questions asked for but {self.cfg.test_file} holds {len(rows)}")
        return rows

    def query_prompt(self, row: GSM8KRow) -> str:
        return query_prompt(row.question)

    def observer_prompt(self, row: GSM8KRow, pioneer_answer: str) -> str:
        return observer_prompt(row.question, pioneer_answer)

    def rewards(self, rows: Sequence[GSM8KRow], answers: Sequence[str]) -> list[float]:
        return [reward(answer, row.gold) for row, answer in zip(rows, answers, strict=True)]

    def describe(self, row: GSM8KRow) -> dict[str, str]:
        return {"prompt": row.question, "target": row.gold}
