"""bf16 training at the authors' learning rate (2e-7) moves the weights as fp32 training does, thanks
to fp32 master weights (components/training/precision.py); stepping the bf16 weights does not.

Training is configured as on a GPU (`dtype: bfloat16`, full fine-tuning, constant lr 2e-7) and runs
on CPU, where bf16 works too. Tolerances, measured on the toy model (60 steps):
- the master weights' update equals the fp32 run's within 5% (relative L2; measured 1.1%), while
  plain bf16 changes 0.2% of the weights and its update is unrelated to fp32's (cosine 0.05);
- the step losses follow the fp32 run's within 5e-3 (bf16 forward noise: measured 1.5e-3);
- the fp32 loss of the trained weights drops as much as the fp32 run's (within 10%).
"""

from __future__ import annotations

import pytest
import torch

from components.training import checkpoint
from components.training.loop import train
from components.training.models import load_trainable
from components.training.precision import MASTERS_KEY, MasterAdamW, adamw
from tests.training_helpers import EXAMPLES, nll, optim, tokens

LR = 2e-7


def trained_weights(model, final) -> dict[str, torch.Tensor]:
    """name -> fp32 weight after training: the master copy for bf16 parameters (the final checkpoint's
    optimizer state holds them, in the order of the trainable parameters), else the parameter itself."""
    state = torch.load(final / checkpoint.STATE_FILE, weights_only=False)["optimizer"]
    masters = iter(state.get(MASTERS_KEY, []))
    return {
        n: (next(masters, p) if p.dtype != torch.float32 else p).detach().float().clone()
        for n, p in model.named_parameters()
    }


@torch.no_grad()
def full_loss(model_dir, weights, examples) -> float:
    """The fp32 model's mean loss over `examples`, with `weights` put in (None: as initialised)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for name, value in (weights or {}).items():
        model.get_parameter(name).copy_(value)
    return nll(model, list(examples))[0].item()


def gpu_like(**over):
    values = {"lr": LR, "epochs": 20, "warmup_ratio": 0.0, "min_lr_ratio": 1.0, "checkpoint_every": 10**6}
    return optim(**(values | over))


def run(model_dir, out, **over):
    cfg = gpu_like(**over)
    model = load_trainable(str(model_dir), cfg)
    start = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    history = train(model, EXAMPLES, nll, cfg, out, {}, tokens)
    weights = trained_weights(model, checkpoint.latest(out))
    delta = torch.cat([(weights[n] - start[n]).flatten() for n in start])
    return [r["loss"] for r in history], weights, delta


@pytest.fixture(scope="module")
def runs(toy_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    return {
        "fp32": run(toy_model_dir, root / "fp32", dtype="float32"),
        "master": run(toy_model_dir, root / "master", dtype="bfloat16"),
        "plain": run(toy_model_dir, root / "plain", dtype="bfloat16", master_weights=False),
    }


def relative_error(delta, reference):
    return ((delta - reference).norm() / reference.norm()).item()


def test_bf16_with_master_weights_moves_the_weights_as_fp32_does(runs):
    _, _, fp32 = runs["fp32"]
    _, _, master = runs["master"]
    _, _, plain = runs["plain"]
    assert (fp32 != 0).float().mean() > 0.5
    assert (master != 0).float().mean() == pytest.approx((fp32 != 0).float().mean().item(), abs=0.01)
    assert relative_error(master, fp32) < 0.05
    # the defect it fixes: stepping bf16 weights at lr 2e-7 leaves almost all of them unchanged
    assert (plain != 0).float().mean() < 0.01 and relative_error(plain, fp32) > 0.9


def test_bf16_loss_curve_follows_fp32(runs, toy_model_dir):
    fp32_curve, fp32_weights, _ = runs["fp32"]
    master_curve, master_weights, _ = runs["master"]
    _, plain_weights, _ = runs["plain"]
    assert len(master_curve) == len(fp32_curve) == 60
    assert max(abs(a - b) for a, b in zip(master_curve, fp32_curve)) < 5e-3
    before = full_loss(toy_model_dir, None, EXAMPLES)
    fp32_drop = before - full_loss(toy_model_dir, fp32_weights, EXAMPLES)
    assert fp32_drop > 1e-3
    assert before - full_loss(toy_model_dir, master_weights, EXAMPLES) == pytest.approx(fp32_drop, rel=0.1)
    assert before - full_loss(toy_model_dir, plain_weights, EXAMPLES) < 0.2 * fp32_drop


def test_resume_restores_the_master_weights(toy_model_dir, tmp_path):
    cfg = gpu_like(dtype="bfloat16", epochs=2, checkpoint_every=2)
    straight = train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path / "a", {}, tokens)
    assert [r["step"] for r in straight] == list(range(1, 7))
    calls = {"n": 0}

    def crashing(model, part):
        calls["n"] += 1
        if calls["n"] == 9:
            raise RuntimeError("killed")
        return nll(model, part)

    with pytest.raises(RuntimeError):
        train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, crashing, cfg, tmp_path / "b", {}, tokens)
    resume = checkpoint.latest(tmp_path / "b")
    model = load_trainable(str(toy_model_dir), cfg, resume)
    train(model, EXAMPLES, nll, cfg, tmp_path / "b", {}, tokens)
    a = torch.load(checkpoint.latest(tmp_path / "a") / checkpoint.STATE_FILE, weights_only=False)["optimizer"]
    b = torch.load(checkpoint.latest(tmp_path / "b") / checkpoint.STATE_FILE, weights_only=False)["optimizer"]
    for x, y in zip(a[MASTERS_KEY], b[MASTERS_KEY], strict=True):
        torch.testing.assert_close(x, y)


def test_fp32_parameters_get_no_copy_and_step_exactly_as_adamw():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(8))
    twin = torch.nn.Parameter(weight.detach().clone())
    ours, plain = adamw([weight], True, lr=0.1), adamw([twin], False, lr=0.1)
    assert isinstance(ours, MasterAdamW) and ours.pairs == [] and ours.state_dict()[MASTERS_KEY] == []
    for _ in range(3):
        for param, opt in ((weight, ours), (twin, plain)):
            (param**2).sum().backward()
            opt.step()
            opt.zero_grad()
    torch.testing.assert_close(weight, twin, rtol=0, atol=0)


def test_a_checkpoint_of_another_model_is_refused():
    small = MasterAdamW([torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))], lr=0.1)
    other = MasterAdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="1 fp32 master weights, this model needs 0"):
        other.load_state_dict(small.state_dict())
