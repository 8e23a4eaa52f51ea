"""The elicitation task's scripted demonstrations (components/tasks/elicitation/demonstrations.py)."""

from __future__ import annotations

from components.tasks.base import ANSWER_MARKER
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.demonstrations import demonstrations
from components.tasks.elicitation.generate import generate


def test_each_task_is_answered_with_the_values_the_human_gave_and_without_them(tokenizer):
    cfg = ElicitationConfig(train_tasks=8, eval_tasks=4)
    demos = demonstrations(cfg, tokenizer, 3, max_turns=3)
    records = generate(cfg)
    assert [(t.task_id, t.score) for t in demos] == [(r.task_id, s) for r in records[:3] for s in (1.0, 0.0)]
    for traj in demos:
        record = records[traj.task_index]
        question, answer = traj.turns
        assert all(value in question.observation for value in record.slots.values())  # the rules human told them
        assert answer.action.startswith(ANSWER_MARKER)
        assert answer.prompt_ids[: len(question.prompt_ids)] == question.prompt_ids  # one growing chat
        assert tokenizer.decode(answer.response_ids, skip_special_tokens=True) == answer.action
    assert demonstrations(cfg, tokenizer, 3, max_turns=3) == demos  # deterministic
