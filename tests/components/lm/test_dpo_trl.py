"""Cross-check of `components.lm.losses.dpo_loss` against TRL's DPO loss, on the same tensors.

TRL is the reference DPO implementation most users trust, so agreeing with it on the loss and on
the logged implicit rewards (chosen, rejected, margins, accuracies) guards our loss against sign,
beta-placement and reduction mistakes that hand-computed tests might share with the code.

Route: in trl 1.16 the DPO loss is not a standalone function but the body of
`DPOTrainer._compute_loss(model, inputs, return_outputs)`. Building a real trainer needs a model,
datasets and an Accelerator, so instead we create the object with `object.__new__` (no __init__)
and set only the attributes `_compute_loss` reads, with the values __init__ takes from a DPOConfig
for plain sigmoid DPO with precomputed reference log-probs. The `model` passed in is a stub that
plays the fused LM head TRL installs with `add_fused_lm_head`: it returns per-token log-probs
chosen by the test, zeroed where TRL's labels are -100 (as the real head does), so TRL's masking
and summation run for real on the same per-token values our side reduces with
`per_turn_logprobs`. If TRL renames one of these attributes the test fails loudly
(AttributeError), which is the signal to re-read `inspect.getsource(DPOTrainer._compute_loss)`.
"""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from components.lm.logprobs import per_turn_logprobs
from components.lm.losses import dpo_loss

dpo_trainer = pytest.importorskip("trl.trainer.dpo_trainer")

PAIRS, SEQ, PROMPT = 5, 12, 3


def _batch(gen):
    """[chosen rows; rejected rows] (TRL's layout) with varying completion lengths and right padding."""
    rows = 2 * PAIRS
    lengths = torch.randint(2, SEQ - PROMPT + 1, (rows,), generator=gen)
    pos = torch.arange(SEQ)
    attention_mask = (pos < PROMPT + lengths[:, None]).long()
    completion_mask = attention_mask * (pos >= PROMPT).long()
    input_ids = torch.randint(1, 50, (rows, SEQ), generator=gen) * attention_mask
    # Per-token log-probs of token t+1 (shape SEQ-1, as the fused head returns), non-zero everywhere:
    # only the mask may decide which of them count.
    token_logps = -3.0 * torch.rand(rows, SEQ - 1, generator=gen) - 0.01
    return input_ids, attention_mask, completion_mask, token_logps


class _FusedHeadStub:
    """Stands in for `model(..., labels=labels, fused_lm_head=True)` after `add_fused_lm_head`."""

    training = True

    def __init__(self, token_logps):
        self.token_logps = token_logps

    def __call__(self, *, labels, fused_lm_head, **_):
        assert fused_lm_head
        keep = labels[:, 1:] != -100  # the real head zeroes every per-token field there
        zeros = torch.zeros_like(self.token_logps)
        return SimpleNamespace(
            log_probs=self.token_logps * keep, entropy=zeros, mean_logits=zeros, is_top1=keep, aux_loss=None
        )


def _trl_dpo(model, inputs, beta):
    """TRL's sigmoid-DPO loss and logged metrics, via `_compute_loss` on a trainer built without __init__."""
    trainer = object.__new__(dpo_trainer.DPOTrainer)
    identity = lambda x: x  # noqa: E731 - single process: gathering is the identity
    trainer.__dict__.update(
        model=model,
        accelerator=SimpleNamespace(device=torch.device("cpu"), gather=identity, gather_for_metrics=identity),
        beta=beta,
        loss_types=["sigmoid"],
        loss_weights=[1.0],
        f_divergence_type="reverse_kl",
        precompute_ref_logps=True,
        ld_alpha=None,
        use_weighting=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    loss = trainer._compute_loss(model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def _ours(token_logps, completion_mask, ref_chosen, ref_rejected, beta):
    # Log-prob of token t+1 counts when t+1 is a completion token; one "turn" per row = the completion.
    turn_index = torch.where(completion_mask[:, 1:].bool(), 0, -1)
    _, sums = per_turn_logprobs(token_logps, turn_index, num_turns=1)
    chosen, rejected = sums[:, 0].chunk(2)
    return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_loss_matches_trl(beta):
    gen = torch.Generator().manual_seed(1234)
    input_ids, attention_mask, completion_mask, token_logps = _batch(gen)
    ref_chosen = -3.0 * torch.rand(PAIRS, generator=gen) * completion_mask[:PAIRS].sum(1)
    ref_rejected = -3.0 * torch.rand(PAIRS, generator=gen) * completion_mask[PAIRS:].sum(1)
    inputs = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        completion_mask=completion_mask,
        ref_chosen_logps=ref_chosen,
        ref_rejected_logps=ref_rejected,
    )

    trl_loss, metrics = _trl_dpo(_FusedHeadStub(token_logps), inputs, beta)
    losses, chosen_r, rejected_r = _ours(token_logps, completion_mask, ref_chosen, ref_rejected, beta)

    torch.testing.assert_close(trl_loss, losses.mean())
    ours = {
        "rewards/chosen": chosen_r.mean(),
        "rewards/rejected": rejected_r.mean(),
        "rewards/margins": (chosen_r - rejected_r).mean(),
        "rewards/accuracies": (chosen_r > rejected_r).float().mean(),
    }
    for key, value in ours.items():
        assert metrics[key] == pytest.approx(value.item(), rel=1e-5, abs=1e-6), key
    assert 0.0 < metrics["rewards/accuracies"] < 1.0  # the data exercise both orderings

    # The check has teeth: a slightly wrong beta, or summing the prompt/padding tokens too, disagrees.
    wrong_beta, *_ = _ours(token_logps, completion_mask, ref_chosen, ref_rejected, beta * 1.05)
    no_mask, *_ = _ours(token_logps, torch.ones_like(completion_mask), ref_chosen, ref_rejected, beta)
    for wrong in (wrong_beta, no_mask):
        with pytest.raises(AssertionError):
            torch.testing.assert_close(trl_loss, wrong.mean())
