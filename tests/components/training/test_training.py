"""The shared training loop: schedule, accumulation, checkpoints, exact resume; critic scores."""

from __future__ import annotations

import json

import pytest
import torch

from components.lm.advantage import Normalize, trajectory_scores, turn_advantages
from components.lm.sequences import action_sequence
from components.training import checkpoint
from components.training.loop import METRICS_FILE, epoch_batches, resume_point, total_steps, train
from components.training.models import load_trainable
from tests.training_helpers import EXAMPLES, nll, optim, tokens


def test_loop_lowers_the_loss_follows_the_schedule_and_keeps_the_newest_checkpoint(toy_model_dir, tmp_path):
    cfg = optim(epochs=4)
    model = load_trainable(str(toy_model_dir), cfg)
    history = train(model, EXAMPLES, nll, cfg, tmp_path, {"x": 1}, tokens)
    assert len(history) == total_steps(len(EXAMPLES), cfg) == 12
    assert history[-1]["loss"] < history[0]["loss"]
    lrs = [r["lr"] for r in history]
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-2) and lrs[-1] < lrs[4]  # warm-up, then decay
    assert {"grad_norm", "tokens_per_s", "nll", "epoch"} <= set(history[0])
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-12"]
    saved = json.loads((tmp_path / "checkpoints" / "step-12" / "train_config.json").read_text())
    assert saved == {"x": 1, "examples_sha256": saved["examples_sha256"]} and len(saved["examples_sha256"]) == 64
    rows = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == list(range(1, 13))


def test_resume_after_a_crash_gives_the_uninterrupted_result(toy_model_dir, tmp_path):
    cfg = optim()
    torch.manual_seed(0)
    straight = train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path / "a", {}, tokens)

    calls = {"n": 0}

    def crashing(model, part):
        calls["n"] += 1
        if calls["n"] == 9:  # step 5 of 6 (two micro-batches per step): after the step-4 checkpoint
            raise RuntimeError("killed")
        return nll(model, part)

    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, crashing, cfg, tmp_path / "b", {}, tokens)
    resume = checkpoint.latest(tmp_path / "b")
    assert resume.name == "step-4"
    resumed = train(load_trainable(str(toy_model_dir), cfg, resume), EXAMPLES, nll, cfg, tmp_path / "b", {}, tokens)
    assert [r["step"] for r in resumed] == list(range(1, 7))
    for a, b in zip(straight, resumed):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5) and a["lr"] == pytest.approx(b["lr"])


def test_checkpoints_of_other_data_or_config_are_not_resumed(toy_model_dir, tmp_path):
    cfg = optim()
    train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path, {"lr": 1}, tokens)
    assert resume_point(tmp_path, {"lr": 1}, EXAMPLES).name == "step-6"
    assert resume_point(tmp_path, {"lr": 1}, EXAMPLES[::-1]) is None  # other data: deleted, not resumed
    assert not (tmp_path / "checkpoints").exists()
    history = train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path, {"lr": 2}, tokens)
    assert [r["step"] for r in history] == list(range(1, 7))  # started afresh, history not mixed


def test_lora_trains_only_adapters(toy_model_dir, tmp_path):
    cfg = optim(lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, epochs=1)
    model = load_trainable(str(toy_model_dir), cfg)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    history = train(model, EXAMPLES, nll, cfg, tmp_path, {}, tokens)
    assert len(history) == 3
    assert (checkpoint.latest(tmp_path) / "adapter_config.json").exists()


def test_critic_scores_per_turn_and_joint():
    crit = torch.tensor([[-2.0, -6.0, 0.0]])
    ref = torch.tensor([[-4.0, -9.0, 0.0]])
    counts = torch.tensor([[2.0, 3.0, 0.0]])  # third turn absent
    torch.testing.assert_close(turn_advantages(crit, ref, counts, 0.1), torch.tensor([[0.1, 0.1, 0.0]]))
    torch.testing.assert_close(trajectory_scores(crit, ref, counts, 0.1, Normalize.per_turn), torch.tensor([0.2]))
    torch.testing.assert_close(trajectory_scores(crit, ref, counts, 0.1, Normalize.joint), torch.tensor([0.1]))


@pytest.mark.parametrize("scope", ["action", "sequence"])
def test_the_actor_nll_term_covers_the_chosen_action_or_the_whole_chosen_sequence(toy_model_dir, scope):
    from transformers import AutoModelForCausalLM

    from components.config.training import NllScope
    from components.stages.actor import DpoExample, dpo_loss_fn

    model = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32)
    prompt, chosen, rejected = [5, 9, 11, 13], [7, 8, 21], [7, 30]
    example = DpoExample(action_sequence(prompt, chosen), action_sequence(prompt, rejected), -5.0, -4.0)
    _, metrics = dpo_loss_fn(0.1, 0.01, 0, NllScope(scope))(model, [example])
    ids = torch.tensor([prompt + chosen])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    predicted = logps[len(prompt) - 1 :] if scope == "action" else logps  # action: its 3 tokens; sequence: 6
    assert metrics["nll"] == pytest.approx(-predicted.mean().item(), rel=1e-5)
    _, other = dpo_loss_fn(0.1, 0.01, 0, NllScope.action)(model, [example])
    assert metrics["dpo_loss"] == pytest.approx(other["dpo_loss"])  # the scope changes the NLL term only


@pytest.mark.parametrize(
    ("n", "batch", "sizes"),
    [(41, 8, [9, 8, 8, 8, 8]), (12, 8, [6, 6]), (16, 8, [8, 8]), (9, 8, [9]), (3, 8, [3]), (13, 4, [5, 4, 4])],
)
def test_a_short_last_batch_is_never_a_step_of_its_own(n, batch, sizes):
    bounds = epoch_batches(n, batch)
    assert [end - start for start, end in bounds] == sizes
    assert bounds[0][0] == 0 and bounds[-1][1] == n and all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert total_steps(n, optim(batch_size=batch, epochs=2)) == 2 * len(sizes)


def test_evaluate_runs_after_each_update_and_joins_the_row(toy_model_dir, tmp_path):
    cfg = optim(epochs=1)
    held = EXAMPLES[:2]
    seen = []

    def evaluate(model):
        seen.append(model.training)
        return {"heldout_nll": nll(model, held)[0].item()}

    history = train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path, {}, tokens, evaluate)
    assert seen == [False] * len(history) and all("heldout_nll" in r for r in history)
    assert history[-1]["heldout_nll"] < history[0]["heldout_nll"]  # measured after each update: it learns them
    assert [r["examples"] for r in history] == [4, 4, 4]
