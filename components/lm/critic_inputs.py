"""What SWEET-RL's critic reads and what it says about a dialogue.

`critic_info`: the training-time information c the critic is shown, by `critic.information`: the
task's training-time information (`Task.training_info`, e.g. ColBench backend's hidden
information: the paper's), its reference answer only (the authors' c) or nothing (the ablation of
the critic without c); the actor never sees it.
`critic_sequence`: a trajectory's stored token ids behind the reference prefix built from c (no
prefix when c is None).
`dialogue_advantages`: the critic's per-turn advantages of whole dialogues (eq. 1), for held-out
checks and `render_advantages`, the per-turn advantage view of sample dialogues kept in MLflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from components.config.training import Information
from components.data.records import Trajectory
from components.lm.advantage import turn_advantages
from components.lm.forward import turn_logprob_sums
from components.lm.sequences import TokenSequence, collate, dialogue_sequence, reference_prefix, with_prefix

if TYPE_CHECKING:
    from components.tasks.base import Task


def task_of(task_id: str, task_index: int, tasks: Sequence[Any]) -> Any:
    """The task a record names; its id must match (else the tasks file is not the rollouts' one)."""
    if task_index >= len(tasks) or tasks[task_index].task_id != task_id:
        raise ValueError(
            f"a record names task {task_id} at line {task_index}, which the tasks file does not "
            "hold: pass the tasks file the rollouts were made from"
        )
    return tasks[task_index]


def critic_info(task: "Task", record: Any, information: Information) -> str | None:
    """The c the critic sees for `record` (None: no c, the critic reads the dialogue alone)."""
    if information == Information.full:
        return task.training_info(record)
    if information == Information.answer:
        return task.reference_answer(record)
    return None


def info_prefix(tokenizer, info: str | None) -> list[int]:
    """Token ids of the critic's prefix for c (none without c)."""
    return [] if info is None else reference_prefix(tokenizer, info)


def critic_sequence(traj: Trajectory, info: str | None, tokenizer) -> TokenSequence:
    """The trajectory's token ids behind the reference prefix of the training-time information `info`."""
    return with_prefix(dialogue_sequence(traj), info_prefix(tokenizer, info))


@torch.no_grad()
def dialogue_advantages(
    critic,
    seqs: Sequence[TokenSequence],
    ref_sums: Sequence[list[float]],
    beta: float,
    pad_id: int,
    batch_size: int = 8,
) -> list[list[float]]:
    """Per-turn advantages A(o_t, a_t, c) of each sequence under the trained `critic`."""
    out: list[list[float]] = []
    critic.eval()
    for start in range(0, len(seqs), batch_size):
        part = list(seqs[start : start + batch_size])
        batch = collate(part, pad_id)
        sums = turn_logprob_sums(critic, batch).cpu()
        ref = pad_sums(ref_sums[start : start + batch_size], batch.num_turns)
        adv = turn_advantages(sums, ref, batch.counts, beta)
        out += [adv[i, : s.num_turns].tolist() for i, s in enumerate(part)]
    return out


def pad_sums(rows: Sequence[list[float]], width: int) -> torch.Tensor:
    """Per-turn sums of several sequences as a (B, width) tensor, zero-padded."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def render_advantages(items: Sequence[tuple[str, Trajectory, list[float]]]) -> str:
    """Markdown: per dialogue, each agent turn's advantage beside the start of its action."""
    lines = [
        "# Critic advantages per agent turn",
        "",
        "A(o_t, a_t, c) = beta * mean token log-ratio (critic vs its frozen initial copy, both seeing c).",
        "",
    ]
    for title, traj, adv in items:
        lines += [
            f"## {title}: trajectory {traj.key}, score {traj.score}",
            "",
            "| turn | advantage | action |",
            "|---:|---:|---|",
        ]
        for turn, a in zip(traj.turns, adv):
            action = " ".join(turn.action.split())[:120].replace("|", "\\|")
            lines.append(f"| {turn.index} | {a:+.4f} | {action} |")
        lines.append("")
    return "\n".join(lines)
