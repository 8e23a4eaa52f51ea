"""On the default 135M model, critic training changes the weights and ranks held-out pairs better
than the untrained critic does (issue 26, item 6).

Controlled set, on real elicitation tasks: per task, two dialogues with one question each, answered
by the rules simulator, then the same closing answer. The chosen one asks about one of the task's
slots (the human reveals its value), the rejected one asks something off-topic (the human is not
sure); their scores are the task's exact turn values of those questions (1/3 and 0). The critic is
trained on the production path (critic stage, c in its input, `ranking.baseline: actor` as the
default profile ranks) on three quarters of the tasks and measured on the pairs of the other
quarter, which it never saw, against the untrained critic (the base model reading c).
"""

from __future__ import annotations

import json
import random

import pytest

from components.config.training import Baseline, CriticConfig, OptimConfig, RankingConfig
from components.data.records import TrajectoryPair, write_jsonl
from components.data.split import Split
from components.lm.critic_quality import pair_figures
from components.stages import critic as critic_train
from components.stages.critic_quality import trajectory_margins
from components.stages.ranking import RankingModels
from components.tasks.elicitation import generate as elicitation_generate
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.task import DOMAINS, ElicitationRecord, ElicitationTask, rules_reply
from tests.synthetic_dialogues import dialogue

pytestmark = [pytest.mark.integration, pytest.mark.manual]  # 14 critic steps on 135M: minutes
OFF_TOPIC = ["Do you have any pets?", "How is the weather today?", "What is your favourite movie?"]
CLOSING = "I WANT TO ANSWER: I will book it for you now."
HELDOUT = 0.25


def controlled_pairs(task: ElicitationTask, records: list[ElicitationRecord], indices: list[int], tokenizer, seed=0):
    """Per task, (slot question, off-topic question) trajectories and their pair, valued exactly."""
    rng = random.Random(seed)
    trajs, pairs = [], []
    for i in indices:
        record = records[i]
        slot = rng.choice(DOMAINS[record.domain].slots)
        questions = [f"What {slot.keywords[0]} would you like?", rng.choice(OFF_TOPIC)]
        values = [task.turn_value(record, [], q, last_turn=False) for q in questions]
        assert values == [1 / len(record.slots), 0.0], (record, questions, values)
        opening = [m["content"] for m in task.agent_messages(record, max_turns=3)]
        for sample, (question, value) in enumerate(zip(questions, values)):
            reply = rules_reply(record, question)
            trajs.append(dialogue(tokenizer, record.task_id, i, opening, [question], [reply], CLOSING, value, sample))
        chosen, rejected = trajs[-2], trajs[-1]
        pairs.append(TrajectoryPair(task_id=record.task_id, task_index=i, chosen=chosen.key, rejected=rejected.key,
                                    chosen_score=chosen.score, rejected_score=rejected.score))  # fmt: skip
    return trajs, pairs


def test_critic_training_beats_the_untrained_critic_on_heldout_pairs(prepared_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    cfg = ElicitationConfig(file=tmp_path / "tasks.jsonl", train_tasks=64, eval_tasks=8)
    elicitation_generate.run(cfg)
    task = ElicitationTask({"elicitation": cfg})
    records, train = task.load(Split.train)
    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir)
    trajs, pairs = controlled_pairs(task, records, train, tokenizer)
    write_jsonl(tmp_path / "trajectories.jsonl", trajs)
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    critic = CriticConfig(
        model=str(prepared_model_dir),
        heldout_fraction=HELDOUT,
        optim=OptimConfig(lr=1e-3, epochs=2, batch_size=8, micro_batch_size=8, checkpoint_every=1000),
    )
    result = critic_train.run(critic, tmp_path / "trajectories.jsonl", tmp_path / "pairs.jsonl", task, tmp_path / "c")
    trained_dir = tmp_path / "c/model"

    base = load_file(prepared_model_dir / "model.safetensors")
    after = load_file(trained_dir / "model.safetensors")
    changed = sum(not torch.equal(base[k], after[k]) for k in base)
    models = RankingModels(critic=str(trained_dir), reference=str(prepared_model_dir), actor=str(prepared_model_dir))
    margins = trajectory_margins(
        critic, RankingConfig(baseline=Baseline.actor), models, pairs, {t.key: t for t in trajs}, task, records,
        tokenizer, tmp_path / "quality",
    )  # fmt: skip
    figures = {name: pair_figures(m["heldout"], critic.tie_tolerance) for name, m in margins.items()}
    print(json.dumps({"critic": result.metrics, "changed_tensors": changed, "heldout": figures}, indent=2))

    assert changed > 0  # the LoRA update, merged, moved the attention weights
    assert figures["trained"]["n"] >= 10
    assert figures["trained"]["accuracy"] > figures["untrained"]["accuracy"]
    assert figures["trained"]["accuracy"] >= 0.8 and figures["learned"]["accuracy"] >= 0.8
