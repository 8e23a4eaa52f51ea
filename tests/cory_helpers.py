"""Helpers shared by the CORY unit tests: a tiny GSM8K, a small CORY config, a reward with signal.

The tiny test model answers with noise, so the real reward is almost always 0 and PPO would see
no signal; `ParityTask` (GSM8K rewarding an answer text of odd length) gives every batch a mix.
"""

from __future__ import annotations

import json
from pathlib import Path

from components.config.cory import CoryConfig
from components.config.prompt_tasks import GSM8KConfig
from components.cory.gsm8k import GSM8KTask

QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 12 eggs. How many eggs are in 2 boxes?", "12 * 2 = 24\n#### 24"),
    ("Sara reads 5 pages a day for 6 days. How many pages does she read?", "5 * 6 = 30\n#### 30"),
    ("A pen costs $2. How much do 9 pens cost?", "2 * 9 = 18\n#### 18"),
    ("There are 20 birds; 8 fly away. How many are left?", "20 - 8 = 12\n#### 12"),
    ("Ben runs 3 miles each day. How far does he run in a week?", "3 * 7 = 21\n#### 21"),
]


def write_gsm8k(folder: Path) -> tuple[Path, Path]:
    """train.jsonl (all six questions) and test.jsonl (the first three) under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS]
    train, test = folder / "train.jsonl", folder / "test.jsonl"
    train.write_text("".join(rows))
    test.write_text("".join(rows[:3]))
    return train, test


def tiny_config(model_dir: Path, tmp_path: Path, **overrides) -> CoryConfig:
    """A CORY config that runs an iteration of the tiny model in about a second."""
    values = {
        "model": str(model_dir),
        "out_dir": tmp_path / "run",
        "iterations": 1,
        "questions_per_iteration": 2,
        "minibatch_size": 2,
        "eval_questions": 2,
        "max_new_tokens": 5,
        "lr": 1e-2,
        "ppo_lr": 1e-2,
        "engine": "hf",
        "save_merged": False,
        "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    values.update(overrides)
    return CoryConfig(**values)


class ParityTask(GSM8KTask):
    """GSM8K whose reward is 1 when the answer's text has an odd length: a mix in every batch."""

    def rewards(self, rows, answers):
        return [float(len(answer) % 2) for answer in answers]


def tiny_task(tmp_path: Path, cls: type[GSM8KTask] = ParityTask) -> GSM8KTask:
    """`cls` on the tiny GSM8K written under tmp_path/gsm8k."""
    train, test = write_gsm8k(tmp_path / "gsm8k")
    return cls(GSM8KConfig(train_file=train, test_file=test))
