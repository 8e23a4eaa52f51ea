"""What the pipeline tests share (tests/flows/test_pipeline_*.py): the SWEET-RL iteration's
stages, short optimiser settings, the -S settings of a smoke run on offline rollouts and the tiny
model, and scored offline rollouts of the elicitation task."""

from __future__ import annotations

from pathlib import Path

from components.data.records import Trajectory, write_jsonl
from components.data.split import in_eval

OPTIM = {"lr": 1e-3, "epochs": 1, "max_steps": 3, "batch_size": 2, "micro_batch_size": 1, "checkpoint_every": 1}
SWEET_STAGES = [
    "rollouts",
    "train_pairs",
    "critic",
    "candidates",
    "ranking",
    "turn_pairs",
    "critic_quality",
    "actor",
    "eval_actor",
]


def offline_run_sets(project_dir: Path, trajs: list[Trajectory], split, tiny_model_dir: Path) -> dict:
    """Write the trajectories of `split`'s training tasks as world/trajectories.jsonl (the evaluation's
    tasks must not be trained on: rollouts.offline refuses them); the -S settings a smoke run on them
    and the tiny model (hf engine, short budgets) takes, whatever its task."""
    train = [t for t in trajs if not in_eval(t.task_id, split.eval_fraction, split.split_salt)]
    assert 0 < len(train) < len(trajs)
    write_jsonl(project_dir / "world" / "trajectories.jsonl", train)
    return {
        "rollouts.offline": "world/trajectories.jsonl",
        "train.model": str(tiny_model_dir),
        "critic.model": str(tiny_model_dir),
        "eval.engine": "hf",
        "rollouts.engine": "hf",
        "candidates.engine": "hf",
        "episode.max_model_len": 1024,
        "critic.optim": OPTIM,
        "actor.optim": OPTIM,
    }


def elicitation_offline(project_dir: Path, tokenizer, n_tasks: int, max_turns: int) -> str:
    """Scored trajectories of the first `n_tasks` training tasks a run on params.yaml's `elicitation`
    section generates, two per task: a question naming every slot, the rules human's reply, then the
    values it gave (score 1) or none (score 0). Written as world/trajectories.jsonl; its path returned
    (a `rollouts.offline` value)."""
    from components.tasks.base import ANSWER_MARKER
    from components.tasks.elicitation.config import ElicitationConfig
    from components.tasks.elicitation.domains import DOMAINS
    from components.tasks.elicitation.generate import generate
    from components.tasks.elicitation.task import AGENT_SYSTEM_PROMPT, rules_reply, score_one
    from tests.synthetic_dialogues import dialogue

    trajs = []
    for index, record in enumerate([r for r in generate(ElicitationConfig()) if r.split == "train"][:n_tasks]):
        question = f"Which {', '.join(s.keywords[0] for s in DOMAINS[record.domain].slots)} do you want?"
        opening = [AGENT_SYSTEM_PROMPT.format(max_turns=max_turns), record.request]
        for sample, answer in enumerate([", ".join(record.slots.values()), "I am not sure."]):
            score = score_one(index, record, answer).score
            trajs.append(
                dialogue(tokenizer, record.task_id, index, opening, [question], [rules_reply(record, question)],
                         f"{ANSWER_MARKER} {answer}", score, sample)
            )  # fmt: skip
    path = project_dir / "world" / "trajectories.jsonl"
    write_jsonl(path, trajs)
    return str(path.relative_to(project_dir))
