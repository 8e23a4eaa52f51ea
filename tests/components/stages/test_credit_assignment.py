"""Proof that SWEET-RL's critic assigns credit to the one turn that decides success, and that
actor DPO on critic-ranked turn pairs moves the actor towards that turn (issue 3, item 6).

World (tests/synthetic_dialogues.py): every episode asks three questions drawn from four, then
answers; it succeeds iff it asked the task's deciding question. Critic trained on the production
path (pairs -> reference pass -> Bradley-Terry training loop) with the tiny 2-layer model; then
measured on HELD-OUT tasks whose dialogues ask the deciding question exactly once among three.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.config.sections import DataConfig
from components.config.training import ActorConfig, Algo, CriticConfig, OptimConfig, PairsConfig, RankingConfig
from components.data.records import Candidate, TurnCandidates, TurnPair, read_jsonl, write_jsonl
from components.lm.critic_inputs import critic_sequence, dialogue_advantages
from components.lm.forward import reference_sums
from components.lm.sequences import action_sequence
from components.stages import actor as actor_train
from components.stages import critic as critic_train
from components.stages import pairs, ranking
from components.stages.actor import ActorInputs
from components.tasks.colbench_backend.task import ColbenchBackend
from components.training.models import load_frozen
from tests import synthetic_dialogues as world
from tests.synthetic_dialogues import DISTRACTORS

pytestmark = pytest.mark.integration
QUESTIONS = 3


def heldout_accuracy(critic_dir: Path, base_dir: Path, tokenizer, beta: float, tmp: Path) -> dict[str, float]:
    """Top-1 and pairwise accuracy of the deciding turn's advantage among the question turns."""
    import torch

    test_world = world.make_world(48, seed=3)
    dialogues = world.one_decider(tokenizer, test_world, QUESTIONS, seed=4)
    seqs = [critic_sequence(t, test_world.tasks[t.task_index].hidden_information, tokenizer) for t, _ in dialogues]
    base = load_frozen(str(base_dir), torch.device("cpu"), torch.float32)
    ref = reference_sums(base, str(base_dir), seqs, tmp / "heldout_ref.jsonl", tokenizer.pad_token_id)
    critic = load_frozen(str(critic_dir), torch.device("cpu"), torch.float32)
    adv = dialogue_advantages(critic, seqs, ref, beta, tokenizer.pad_token_id)
    top1 = pairwise = 0
    for (_, at), a in zip(dialogues, adv):
        questions = a[:QUESTIONS]
        others = [x for k, x in enumerate(questions) if k != at]
        top1 += all(questions[at] > x for x in others)
        pairwise += sum(questions[at] > x for x in others)
    n = len(dialogues)
    return {"top1": top1 / n, "pairwise": pairwise / (n * (QUESTIONS - 1)), "n": n}


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """The synthetic rollouts, their pairs and a critic trained on them (once per module)."""
    from transformers import AutoTokenizer

    tmp = tmp_path_factory.mktemp("credit")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    train_world = world.make_world(64, seed=1)
    trajs = world.rollouts(tokenizer, train_world, per_task=4, questions=QUESTIONS, seed=2)
    write_jsonl(tmp / "trajectories.jsonl", trajs)
    write_jsonl(tmp / "tasks.jsonl", train_world.tasks)
    pairs.run_trajectory(PairsConfig(), tmp / "trajectories.jsonl", tmp)
    cfg = CriticConfig(
        model=str(tiny_model_dir),
        beta=0.1,
        heldout_fraction=0.0,  # every pair trains: this world's held-out check is its own (below)
        optim=OptimConfig(lr=3e-3, epochs=3, batch_size=8, micro_batch_size=8, checkpoint_every=1000),
    )
    task = ColbenchBackend({"data": DataConfig(backend_tasks=tmp / "tasks.jsonl")})
    result = critic_train.run(cfg, tmp / "trajectories.jsonl", tmp / "pairs.jsonl", task, tmp / "critic")
    return {
        "tmp": tmp,
        "tokenizer": tokenizer,
        "world": train_world,
        "trajs": trajs,
        "critic": cfg,
        "critic_dir": tmp / "critic",
        "metrics": result.metrics,
    }


def test_critic_ranks_the_deciding_turn_first_on_heldout_dialogues(trained, tiny_model_dir):
    cfg, tmp = trained["critic"], trained["tmp"]
    before = heldout_accuracy(tiny_model_dir, tiny_model_dir, trained["tokenizer"], cfg.beta, tmp)
    after = heldout_accuracy(trained["critic_dir"] / "model", tiny_model_dir, trained["tokenizer"], cfg.beta, tmp)
    print(
        json.dumps({"critic_training": trained["metrics"], "heldout_before": before, "heldout_after": after}, indent=2)
    )
    assert trained["metrics"]["final_loss"] < trained["metrics"]["first_loss"]
    assert before["top1"] == 0.0  # the untrained critic equals its reference: every advantage is 0
    assert after["top1"] >= 0.8 and after["pairwise"] >= 0.85  # chance: 1/3 and 1/2


def candidate_states(trained) -> list[TurnCandidates]:
    """The question-turn states of an eighth of the training episodes, all four questions as candidates."""
    tokenizer, eos = trained["tokenizer"], trained["tokenizer"].convert_tokens_to_ids("<|im_end|>")
    options = DISTRACTORS + ["{topic}"]
    states = []
    for traj in trained["trajs"][::8]:
        topic = trained["world"].topics[traj.task_index]
        texts = [o if o != "{topic}" else world.deciding(topic) for o in options]
        for turn in traj.turns[:QUESTIONS]:
            states.append(
                TurnCandidates(
                    task_id=traj.task_id,
                    task_index=traj.task_index,
                    trajectory=traj.key,
                    turn=turn.index,
                    prompt_ids=turn.prompt_ids,
                    candidates=[
                        Candidate(text=t, response_ids=tokenizer.encode(t, add_special_tokens=False) + [eos])
                        for t in texts
                    ],
                )
            )
    return states


def heldout_margins(actor_dir: Path, base_dir: Path, tokenizer, tmp: Path) -> list[float]:
    """Per held-out pair (deciding vs a distractor at the first turn): the gain of the actor's
    log-prob margin over the initial actor's, log pi(chosen) - log pi(rejected)."""
    import torch

    test_world = world.make_world(32, seed=5)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    seqs = []
    for i, (task, topic) in enumerate(zip(test_world.tasks, test_world.topics)):
        prompt = world.episode(tokenizer, task, i, [], 0).turns[0].prompt_ids
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False) + [eos]  # noqa: E731
        for distractor in DISTRACTORS:
            seqs += [
                action_sequence(prompt, encode(world.deciding(topic))),
                action_sequence(prompt, encode(distractor)),
            ]
    sums = {}
    for name, path in (("base", base_dir), ("actor", actor_dir)):
        model = load_frozen(str(path), torch.device("cpu"), torch.float32)
        sums[name] = [
            s[0] for s in reference_sums(model, name, seqs, tmp / f"margin_{name}.jsonl", tokenizer.pad_token_id)
        ]
    gain = [a - b for a, b in zip(sums["actor"], sums["base"])]
    return [gain[i] - gain[i + 1] for i in range(0, len(gain), 2)]


def test_actor_dpo_on_critic_ranked_pairs_raises_the_deciding_action(trained, tiny_model_dir):
    tmp, critic = trained["tmp"], trained["critic"]
    write_jsonl(tmp / "candidates.jsonl", candidate_states(trained))
    models = ranking.RankingModels(
        critic=str(trained["critic_dir"] / "model"), reference=str(tiny_model_dir), actor=str(tiny_model_dir)
    )
    task = ColbenchBackend({"data": DataConfig(backend_tasks=tmp / "tasks.jsonl")})
    ranking.run(RankingConfig(), models, critic.beta, tmp / "candidates.jsonl", task, tmp / "ranking")
    pairs.run_turn(PairsConfig(per_state=4), tmp / "ranking" / "ranked.jsonl", tmp / "ranking")
    turn_pairs = list(read_jsonl(tmp / "ranking" / "turn_pairs.jsonl", TurnPair))
    tokenizer = trained["tokenizer"]
    deciding_rejected = sum("should I use" in tokenizer.decode(p.rejected_ids) for p in turn_pairs) / len(turn_pairs)
    actor_cfg = ActorConfig(
        algo=Algo.sweet, optim=OptimConfig(lr=1e-3, epochs=1, batch_size=8, micro_batch_size=8, checkpoint_every=1000)
    )
    result = actor_train.run(
        actor_cfg, str(tiny_model_dir), ActorInputs(turn_pairs=tmp / "ranking" / "turn_pairs.jsonl"), tmp / "actor"
    )
    margins = heldout_margins(tmp / "actor" / "model", tiny_model_dir, tokenizer, tmp)
    report = {
        "turn_pairs": len(turn_pairs),
        "turn_pairs_with_deciding_rejected": deciding_rejected,
        "actor_training": result.metrics,
        "heldout_pairs": len(margins),
        "heldout_mean_margin_gain": sum(margins) / len(margins),
        "heldout_share_margin_up": sum(m > 0 for m in margins) / len(margins),
    }
    print(json.dumps(report, indent=2))
    assert deciding_rejected == 0.0  # the critic never ranks the deciding question in the lower half
    assert report["heldout_mean_margin_gain"] > 0.5 and report["heldout_share_margin_up"] >= 0.9
