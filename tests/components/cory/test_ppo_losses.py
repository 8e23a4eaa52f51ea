"""PPO pieces of CORY against hand-computed values and their defining properties."""

import math

import pytest
import torch

from components.cory.ppo_losses import (
    full_kl,
    gae,
    kl_penalized_rewards,
    last_token_index,
    masked_token_mean,
    penalized_rewards,
    policy_loss,
    value_loss,
    whiten,
)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def m(*rows):
    return torch.tensor(rows, dtype=torch.bool)


def hand_gae(rewards, values, gamma, lam):
    """Textbook GAE over one unpadded episode, in plain Python."""
    advantages, next_value, next_adv = [0.0] * len(rewards), 0.0, 0.0
    for i in reversed(range(len(rewards))):
        delta = rewards[i] + gamma * next_value - values[i]
        advantages[i] = next_adv = delta + gamma * lam * next_adv
        next_value = values[i]
    return advantages, [a + v for a, v in zip(advantages, values)]


def test_gae_three_tokens_by_hand():
    adv, ret = gae(t([0.1, -0.2, 1.0]), t([0.5, 0.4, 0.3]), m([1, 1, 1]), gamma=1.0, lam=0.95)
    # delta = [0.1+0.4-0.5, -0.2+0.3-0.4, 1.0+0-0.3] = [0, -0.3, 0.7]
    # A2 = 0.7; A1 = -0.3 + 0.95*0.7 = 0.365; A0 = 0 + 0.95*0.365 = 0.34675
    assert adv[0].tolist() == pytest.approx([0.34675, 0.365, 0.7])
    assert ret[0].tolist() == pytest.approx([0.84675, 0.765, 1.0])
    expected_adv, expected_ret = hand_gae([0.1, -0.2, 1.0], [0.5, 0.4, 0.3], 1.0, 0.95)
    assert adv[0].tolist() == pytest.approx(expected_adv) and ret[0].tolist() == pytest.approx(expected_ret)


def test_gae_batch_of_ragged_rows_matches_hand_loop_per_row():
    rewards = t([0.3, -0.1, 0.2, 2.0], [1.0, 0.5, 0.0, 0.0])
    values = t([0.1, 0.2, -0.3, 0.4], [0.7, -0.6, 9.0, 9.0])
    mask = m([1, 1, 1, 1], [1, 1, 0, 0])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    a0, r0 = hand_gae([0.3, -0.1, 0.2, 2.0], [0.1, 0.2, -0.3, 0.4], 0.9, 0.8)
    a1, r1 = hand_gae([1.0, 0.5], [0.7, -0.6], 0.9, 0.8)
    assert adv[0].tolist() == pytest.approx(a0) and ret[0].tolist() == pytest.approx(r0)
    assert adv[1, :2].tolist() == pytest.approx(a1) and ret[1, :2].tolist() == pytest.approx(r1)
    assert adv[1, 2:].tolist() == [0.0, 0.0] and ret[1, 2:].tolist() == [0.0, 0.0]


def test_gae_outputs_are_detached():
    values = t([0.5, 0.4]).requires_grad_()
    adv, ret = gae(t([0.0, 1.0]), values, m([1, 1]))
    assert not adv.requires_grad and not ret.requires_grad


def test_kl_rewards_penalise_every_token_and_add_task_reward_at_last_token():
    logprobs = t([-1.0, -2.0, -3.0, 0.0], [-1.0, 0.0, 0.0, 0.0])
    ref = t([-1.5, -2.0, -2.0, 0.0], [-0.5, 0.0, 0.0, 0.0])
    mask = m([1, 1, 1, 0], [1, 0, 0, 0])
    rewards = kl_penalized_rewards(torch.tensor([2.0, -1.0]), logprobs, ref, mask, eta=0.1)
    # row 0: kl = [0.5, 0, -1] -> [-0.05, 0, 0.1 + 2]; row 1: kl = [-0.5] -> [0.05 - 1]
    assert rewards[0].tolist() == pytest.approx([-0.05, 0.0, 2.1, 0.0])
    assert rewards[1].tolist() == pytest.approx([-0.95, 0.0, 0.0, 0.0])
    assert last_token_index(mask).tolist() == [2, 0]


def test_kl_rewards_eta_zero_is_the_task_reward_alone_and_empty_row_gets_nothing():
    logprobs, ref = torch.randn(3, 4), torch.randn(3, 4)
    mask = m([1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0])
    task = torch.tensor([1.0, 0.5, 7.0])
    rewards = kl_penalized_rewards(task, logprobs.requires_grad_(), ref, mask, eta=0.0)
    assert rewards.tolist() == [[0, 1.0, 0, 0], [0, 0, 0, 0.5], [0, 0, 0, 0]]
    assert not rewards.requires_grad


def test_whiten_masked_values_by_hand():
    x, mask = t([1.0, 2.0, 3.0, 100.0]), m([1, 1, 1, 0])
    sd = math.sqrt(2 / 3)  # population variance of 1, 2, 3
    assert whiten(x, mask)[0].tolist() == pytest.approx([-1 / sd, 0.0, 1 / sd, 0.0], rel=1e-5)
    assert whiten(x, mask, shift_mean=False)[0].tolist() == pytest.approx([2 - 1 / sd, 2.0, 2 + 1 / sd, 0.0], rel=1e-5)
    out = whiten(torch.randn(3, 5) * 4 + 3, torch.ones(3, 5, dtype=torch.bool))
    assert out.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert out.pow(2).mean().item() == pytest.approx(1.0, rel=1e-4)


# (log ratio, advantage) -> (loss, d loss / d logprob, clipped?) for clip = 0.2, one token
@pytest.mark.parametrize(
    "ratio, adv, loss, grad, clipped",
    [
        (1.5, 1.0, -1.2, 0.0, True),  # above 1+clip with A > 0: clipped, no gradient
        (0.5, -1.0, 0.8, 0.0, True),  # below 1-clip with A < 0: clipped, no gradient
        (0.5, 1.0, -0.5, -0.5, False),  # below 1-clip with A > 0: pessimistic unclipped term
        (1.5, -1.0, 1.5, 1.5, False),  # above 1+clip with A < 0: pessimistic unclipped term
        (1.1, 2.0, -2.2, -2.2, False),  # inside the trust region: plain -A * ratio
        (1.0, 2.0, -2.0, -2.0, False),
    ],
)
def test_policy_loss_clipping(ratio, adv, loss, grad, clipped):
    logprobs = torch.tensor([[math.log(ratio) - 1.0]], requires_grad=True)
    out, clipfrac, approx_kl = policy_loss(logprobs, t([-1.0]), t([adv]), m([1]), clip=0.2)
    out.backward()
    assert out.item() == pytest.approx(loss, rel=1e-5)
    assert logprobs.grad.item() == pytest.approx(grad, abs=1e-6)
    assert clipfrac.item() == (1.0 if clipped else 0.0)
    assert approx_kl.item() == pytest.approx(ratio - 1 - math.log(ratio), abs=1e-6)


def test_policy_loss_is_a_token_mean_over_the_batch():
    logprobs = t([math.log(1.5), 0.0, 5.0], [math.log(0.5), 0.0, 0.0]).requires_grad_()
    adv = t([1.0, 3.0, 100.0], [1.0, 0.0, 0.0])
    mask = m([1, 1, 0], [1, 0, 0])
    loss, clipfrac, _ = policy_loss(logprobs, torch.zeros(2, 3), adv, mask, clip=0.2)
    # tokens: (1.5, A=1) -> -1.2 clipped; (1.0, A=3) -> -3; (0.5, A=1) -> -0.5
    assert loss.item() == pytest.approx((-1.2 - 3.0 - 0.5) / 3)
    assert clipfrac.item() == pytest.approx(1 / 3)
    loss.backward()
    assert logprobs.grad[0, 2].item() == 0.0 and logprobs.grad[1, 1:].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "value, old, ret, loss, grad, clipped",
    [
        (1.0, 0.5, 2.0, 0.5 * 1.69, 0.0, True),  # moved past old+0.2: clipped error (0.7-2)^2 larger
        (1.0, 0.5, 0.0, 0.5 * 1.0, 1.0, False),  # unclipped error (1-0)^2 larger than (0.7-0)^2
        (0.6, 0.5, 2.0, 0.5 * 1.96, -1.4, False),  # inside the clip range: both errors equal
    ],
)
def test_value_loss_clipping(value, old, ret, loss, grad, clipped):
    values = torch.tensor([[value]], requires_grad=True)
    out, clipfrac = value_loss(values, t([old]), t([ret]), m([1]), clip=0.2)
    out.backward()
    assert out.item() == pytest.approx(loss, rel=1e-5)
    assert values.grad.item() == pytest.approx(grad, abs=1e-5)
    assert clipfrac.item() == (1.0 if clipped else 0.0)


def test_value_loss_batch_token_mean():
    values = t([1.0, 0.0], [3.0, 0.0])
    loss, _ = value_loss(values, values, t([0.0, 0.0], [1.0, 0.0]), m([1, 1], [1, 0]), clip=0.2)
    assert loss.item() == pytest.approx(0.5 * (1.0 + 0.0 + 4.0) / 3)


def test_padding_does_not_change_any_result():
    torch.manual_seed(0)
    b, n, pad = 2, 3, 4
    logp, old, ref, vals, old_vals = (torch.randn(b, n) for _ in range(5))
    mask = m([1, 1, 1], [1, 1, 0])
    task = torch.tensor([1.0, 0.0])

    def everything(logp, old, ref, vals, old_vals, mask):
        rewards = kl_penalized_rewards(task, logp, ref, mask, eta=0.05)
        adv, ret = gae(rewards, vals, mask)
        adv = whiten(adv, mask)
        return (rewards, adv, ret, *policy_loss(logp, old, adv, mask), *value_loss(vals, old_vals, ret, mask))

    def padded(x, fill):
        return torch.cat([x, torch.full((b, pad), fill)], dim=1)

    short = everything(logp, old, ref, vals, old_vals, mask)
    garbage = [float("nan"), float("inf"), -float("inf"), 1e6, -7.0]
    long = everything(
        *(padded(x, g) for x, g in zip((logp, old, ref, vals, old_vals), garbage)),
        torch.cat([mask, torch.zeros(b, pad, dtype=torch.bool)], dim=1),
    )
    for s, lg in zip(short, long):
        if s.dim() == 2:
            assert torch.allclose(lg[:, :n], s) and (lg[:, n:] == 0).all()
        else:
            assert torch.allclose(lg, s)


def test_fully_masked_batch_gives_zero_not_nan():
    mask = torch.zeros(2, 3, dtype=torch.bool)
    logp = torch.full((2, 3), float("nan")).requires_grad_()
    vals = torch.full((2, 3), float("inf")).requires_grad_()
    rewards = kl_penalized_rewards(torch.tensor([1.0, 1.0]), logp, torch.zeros(2, 3), mask, eta=0.1)
    adv, ret = gae(rewards, vals, mask)
    assert (rewards == 0).all() and (adv == 0).all() and (ret == 0).all()
    assert (whiten(adv, mask) == 0).all()
    p_loss, p_clip, kl = policy_loss(logp, torch.zeros(2, 3), adv, mask)
    v_loss, v_clip = value_loss(vals, torch.zeros(2, 3), ret, mask)
    for x in (p_loss, p_clip, kl, v_loss, v_clip):
        assert x.item() == 0.0
    (p_loss + v_loss).backward()
    assert (logp.grad == 0).all() and (vals.grad == 0).all()
    assert masked_token_mean(torch.ones(0), torch.ones(0, dtype=torch.bool)).item() == 0.0


def test_kl_rewards_reject_a_task_reward_not_one_per_row():
    with pytest.raises(ValueError, match="one per row"):
        kl_penalized_rewards(
            torch.tensor(1.0), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), eta=0.1
        )


def test_full_kl_of_a_tiny_vocabulary_by_hand():
    p, q = [0.5, 0.25, 0.25], [0.25, 0.25, 0.5]
    logits = torch.log(torch.tensor([[p, q]]))  # (B=1, T=2, V=3)
    ref = torch.log(torch.tensor([[q, q]])) + 3.0  # logits are defined up to a constant per position
    kl = full_kl(logits, ref)
    # position 0: 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.25) + 0.25 ln(0.25/0.5) = 0.25 ln 2; position 1: same law, 0
    assert kl.shape == (1, 2)
    assert kl[0].tolist() == pytest.approx([0.25 * math.log(2), 0.0], abs=1e-6)


def test_full_kl_is_the_policy_weighted_direction():
    pi, pi0 = torch.log(torch.tensor([[[0.9, 0.1]]])), torch.log(torch.tensor([[[0.5, 0.5]]]))
    # KL(pi || pi0) = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5); the reverse is 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1)
    assert full_kl(pi, pi0).item() == pytest.approx(0.9 * math.log(1.8) + 0.1 * math.log(0.2), abs=1e-6)
    assert full_kl(pi0, pi).item() == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(5.0), abs=1e-6)


def test_full_kl_is_nonnegative_and_zero_only_for_equal_distributions():
    torch.manual_seed(0)
    a, b = torch.randn(3, 4, 11), torch.randn(3, 4, 11)
    kl = full_kl(a, b)
    assert kl.shape == (3, 4) and (kl > 0).all()
    assert full_kl(a, a + 5.0).abs().max().item() < 1e-6
    assert not full_kl(a.requires_grad_(), b).requires_grad


def test_penalized_rewards_take_any_per_token_kl_and_coefficient():
    kl = t([0.5, 2.0, 1.0], [4.0, 9.0, 9.0])
    mask = m([1, 1, 1], [1, 0, 0])
    rewards = penalized_rewards(torch.tensor([1.0, -2.0]), kl, mask, coef=0.4)
    # row 0: -0.4 * [0.5, 2, 1] + 1 at the last token; row 1: -0.4 * 4 - 2 at its only token
    assert rewards[0].tolist() == pytest.approx([-0.2, -0.8, 0.6])
    assert rewards[1].tolist() == pytest.approx([-3.6, 0.0, 0.0])
    logp, ref = torch.randn(2, 3), torch.randn(2, 3)
    task = torch.tensor([0.5, 1.5])
    assert torch.equal(kl_penalized_rewards(task, logp, ref, mask, 0.1), penalized_rewards(task, logp - ref, mask, 0.1))
