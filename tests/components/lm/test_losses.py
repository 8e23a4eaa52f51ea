"""Losses and log-prob reductions against hand-computed values and their defining properties."""

import math

import pytest
import torch

from components.lm.logprobs import masked_mean, per_turn_logprobs, token_logprobs
from components.lm.losses import bradley_terry_loss, dpo_loss


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_dpo_loss_hand_computed():
    losses, chosen, rejected = dpo_loss(t(-1.0, -2.0), t(-3.0, -1.0), t(-2.0, -2.0), t(-2.0, -2.0), beta=0.1)
    # pair 0: logratios +1 and -1 -> margin 0.2; pair 1: 0 and +1 -> margin -0.1
    assert losses.tolist() == pytest.approx([-math.log(1 / (1 + math.exp(-0.2))), -math.log(1 / (1 + math.exp(0.1)))])
    assert chosen.tolist() == pytest.approx([0.1, 0.0]) and rejected.tolist() == pytest.approx([-0.1, 0.1])


def test_dpo_prefers_chosen_and_rewards_are_detached():
    policy_chosen = t(-1.0, -1.0).requires_grad_()
    ref = t(-1.0, -1.0)
    better, chosen_r, rejected_r = dpo_loss(policy_chosen + 1.0, t(-1.0, -1.0), ref, ref, beta=0.5)
    worse, _, _ = dpo_loss(policy_chosen - 1.0, t(-1.0, -1.0), ref, ref, beta=0.5)
    assert (better < worse).all()
    assert not chosen_r.requires_grad and not rejected_r.requires_grad
    better.sum().backward()
    assert (policy_chosen.grad < 0).all()  # raising the chosen log-prob lowers the loss


def test_dpo_equal_policies_give_log2():
    x = t(-4.0, -2.5, -7.0)
    losses, _, _ = dpo_loss(x, x, x, x, beta=0.1)
    assert losses.tolist() == pytest.approx([math.log(2)] * 3)


def test_bradley_terry_hand_computed_and_monotone():
    losses = bradley_terry_loss(t(2.0, 0.0, -1.0), t(0.0, 0.0, 1.0))
    assert losses.tolist() == pytest.approx([math.log(1 + math.exp(-2)), math.log(2), math.log(1 + math.exp(2))])
    assert losses[0] < losses[1] < losses[2]


def test_masked_mean_ignores_masked_and_is_zero_when_fully_masked():
    values = t(1.0, 2.0, 3.0, 100.0).reshape(1, 4).repeat(2, 1)
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    out = masked_mean(values, mask)
    assert out.tolist() == [2.0, 0.0] and not torch.isnan(out).any()


def test_token_logprobs_match_log_softmax():
    logits = torch.tensor([[[0.0, math.log(3.0)], [math.log(2.0), 0.0]]])
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert out.tolist()[0] == pytest.approx([math.log(0.75), math.log(2 / 3)])


def test_per_turn_mean_and_sum_batch_and_missing_turns():
    logps = t(-1.0, -2.0, -3.0, -4.0, -5.0, -6.0).reshape(2, 3)
    turns = torch.tensor([[-1, 0, 1], [0, 0, -1]])
    mean, total = per_turn_logprobs(logps, turns, num_turns=2)
    assert total.tolist() == [[-2.0, -3.0], [-9.0, 0.0]]
    assert mean.tolist() == [[-2.0, -3.0], [-4.5, 0.0]]
