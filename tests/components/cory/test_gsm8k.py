"""GSM8K rows, gold answers, the last-number reward on tricky completions, and CORY's prompts."""

import json
from pathlib import Path

import pytest

from components.cory.gsm8k import (
    GSM8KRow,
    extract_last_number,
    gold_answer,
    load_gsm8k,
    observer_prompt,
    pioneer_prompt,
    query_prompt,
    reward,
)
from components.data.records import RecordError
from tests.conftest import REPO

TEST_FILE = REPO / "data" / "gsm8k" / "test.jsonl"


@pytest.mark.parametrize(
    "completion, gold",
    [
        ("She makes 9 * 2 = $18 every day.\n#### 18", "18"),
        ("The total is 1,234 apples.", "1234"),  # thousands commas in the completion
        ("The total is 1234 apples.", "1,234"),  # ... and in the gold answer
        ("It costs $1,080,000.", "1,080,000"),
        ("The temperature drops to -5 degrees.", "-5"),
        ("The temperature drops to \u22125 degrees.", "-5"),  # unicode minus
        ("He lost -$7 overall.", "-7"),
        ("The answer is 5.0", "5"),  # decimals compare numerically
        ("The answer is 5", "5.00"),
        ("Each costs 0.50 dollars", ".5"),
        ("Each costs .5 dollars", "0.50"),
        ("So it weighs 18kg", "18"),  # units glued to the number
        ("So the answer is 18 dollars", "18"),
        ("The discount is 18%", "18"),
        ("The answer is 18.", "18"),  # sentence-final period
        ("The answer is 18.\n", "18"),
        ("Answer: (18)!", "18"),
        ("Answer: **18**", "18"),
        ("3 + 4 = 7, then 7 * 2 = 14, so 14.", "14"),  # only the last number counts
        ("12.5 + 0.25 = 12.75", "12.75"),
        ("1,234.50 in total", "1234.5"),
        ("10-5=5", "5"),
    ],
)
def test_reward_one_for_matching_last_number(completion, gold):
    assert reward(completion, gold) == 1.0


@pytest.mark.parametrize(
    "completion, gold",
    [
        ("The answer is 18, not 20.", "18"),  # last number is 20
        ("I think it is 18 or maybe 19", "18"),
        ("There is no number here.", "18"),  # no number -> 0
        ("", "18"),
        ("The answer is 1.8", "18"),
        ("The answer is 18.5", "18"),  # a real decimal is not 18
        ("The answer is 5", "-5"),  # sign matters
        ("Now 10-5", "-5"),  # binary minus, not a sign
        ("It was sold on 12.03.2024", "12.03"),  # date: the last number is 2024
        ("1,2,3", "123"),  # a list, not thousands groups
    ],
)
def test_reward_zero_otherwise(completion, gold):
    assert reward(completion, gold) == 0.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,234.50 kg", "1234.5"),
        ("from 12.03.2024", "2024"),
        ("version 1.2.3.", "3"),
        ("x = \u22120.50", "-0.5"),
        ("0.0", "0"),
        ("-0", "0"),
        ("100", "100"),
        ("3/4", "4"),
        ("nothing", None),
        ("costs $18.", "18"),
        ("I have 18.The rest", "18"),
    ],
)
def test_extract_last_number_canonical(text, expected):
    assert extract_last_number(text) == expected


def test_reward_rejects_a_non_numeric_gold():
    with pytest.raises(ValueError, match="not a single number"):
        reward("18", "eighteen")


def test_gold_answer_after_marker_and_errors():
    assert gold_answer("Janet sells 9 eggs.\n#### 18") == "18"
    assert gold_answer("x\n####  1,080 \n") == "1,080"
    with pytest.raises(ValueError, match="####"):
        gold_answer("no marker 18")
    with pytest.raises(ValueError, match="nothing after"):
        gold_answer("work\n####   ")


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_load_gsm8k_reads_rows_and_limit(tmp_path):
    rows = [{"question": f"q{i}?", "answer": f"work\n#### {i},000"} for i in range(1, 5)]
    path = _write(tmp_path / "ok.jsonl", rows)
    loaded = load_gsm8k(path)
    assert [r.question for r in loaded] == ["q1?", "q2?", "q3?", "q4?"]
    assert loaded[1].gold == "2,000" and isinstance(loaded[0], GSM8KRow)
    assert len(load_gsm8k(path, limit=2)) == 2 and load_gsm8k(path, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k(path, limit=-1)


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"question": "q?", "answer": "no gold marker"}, "answer"),
        ({"question": "q?", "answer": "#### eighteen"}, "answer"),
        ({"question": "", "answer": "#### 3"}, "question"),
        ({"answer": "#### 3"}, "question"),
    ],
)
def test_load_gsm8k_names_file_line_and_field_of_a_bad_row(tmp_path, bad, field):
    good = {"question": "q?", "answer": "#### 1"}
    path = _write(tmp_path / "bad.jsonl", [good, bad])
    with pytest.raises(RecordError, match=rf"bad\.jsonl:2: field '{field}'"):
        load_gsm8k(path)


def test_load_gsm8k_names_line_of_invalid_json(tmp_path):
    path = _write(tmp_path / "broken.jsonl", [{"question": "q?", "answer": "#### 1"}, "{not json"])
    with pytest.raises(RecordError, match=r"broken\.jsonl:2: not valid JSON"):
        load_gsm8k(path)


@pytest.mark.skipif(not TEST_FILE.exists(), reason="data/gsm8k/test.jsonl not pulled")
def test_gold_answers_of_real_test_rows():
    rows = load_gsm8k(TEST_FILE)
    assert len(rows) == 1319
    assert rows[0].gold == "18" and rows[1].gold == "3"
    # every worked solution's own "#### <gold>" line earns reward 1 against its gold answer
    assert all(reward(r.answer, r.gold) == 1.0 for r in rows)
    with_commas = [r for r in rows if "," in r.gold]
    assert with_commas and all(reward(r.gold.replace(",", ""), r.gold) == 1.0 for r in with_commas)


def test_prompts_follow_the_paper_format():
    q = "How many eggs?  "
    assert pioneer_prompt(q) == "Question: How many eggs?\nAnswer:"
    assert query_prompt(q) == pioneer_prompt(q)
    observer = observer_prompt(q, " She has 9 eggs. #### 9\n")
    assert observer == "Question: How many eggs?\nReference: She has 9 eggs. #### 9\nAnswer:"
    assert observer.index("Question:") < observer.index("Reference:") < observer.index("Answer:")
