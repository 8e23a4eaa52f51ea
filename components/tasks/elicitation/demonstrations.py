"""Scripted, scored demonstrations of the elicitation task, for a run whose own agent never scores
(the `tiny` profile's random-weight model): `rollouts.offline` naming `FILE` makes the run write it
before its first step when it is missing (flows/runtime/inputs.py; the task names this module).

For each of the first `n_tasks` training tasks of the params' `elicitation` section (the records
the generator stage writes, train rows first, so a record's index is its line), two dialogues: one
question naming every slot, the rules human's reply, then an answer with the values it gave (score
1.0) or without them (score 0.0), scored by the task. Token ids as the rollout driver builds them
(components/episodes/scripted.py), on the actor's tokenizer. Deterministic: the same section,
tokenizer and sizes give the same file.
"""

from __future__ import annotations

from pathlib import Path

from components.data.records import Trajectory, replace_jsonl
from components.episodes.scripted import scripted_trajectory
from components.tasks.base import ANSWER_MARKER, Task
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.domains import DOMAINS
from components.tasks.elicitation.generate import generate
from components.tasks.elicitation.task import AGENT_SYSTEM_PROMPT, NOT_SURE, rules_reply, score_one

FILE = Path("data/elicitation/demonstrations.jsonl")


def demonstrations(cfg: ElicitationConfig, tokenizer, n_tasks: int, max_turns: int) -> list[Trajectory]:
    """Two scored dialogues (the values given, none given) for each of the first `n_tasks` training tasks."""
    trajs = []
    for index, record in enumerate([r for r in generate(cfg) if r.split == "train"][:n_tasks]):
        question = f"Which {', '.join(s.keywords[0] for s in DOMAINS[record.domain].slots)} do you want?"
        opening = (AGENT_SYSTEM_PROMPT.format(max_turns=max_turns), record.request)
        for sample, answer in enumerate([", ".join(record.slots.values()), NOT_SURE]):
            score = score_one(index, record, answer).score
            reply = rules_reply(record, question)
            trajs.append(
                scripted_trajectory(
                    tokenizer, record.task_id, index, opening, [question], [reply], f"{ANSWER_MARKER} {answer}",
                    score, sample,
                )
            )  # fmt: skip
    return trajs


def write(task: Task, model: str, n_tasks: int, max_turns: int) -> Path:
    """`demonstrations` of the task's `elicitation` section on `model`'s tokenizer, written to `FILE`
    (through a temporary file)."""
    from transformers import AutoTokenizer

    trajs = demonstrations(task.configs["elicitation"], AutoTokenizer.from_pretrained(model), n_tasks, max_turns)
    replace_jsonl(FILE, trajs)
    return FILE
