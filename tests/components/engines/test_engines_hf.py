"""HFEngine on a tiny random Llama (plumbing, seeds, shapes) and on the real default model (text)."""

from __future__ import annotations

import math

import pytest
import torch

from components.engines.base import Engine, SamplingConfig, render_chat
from components.engines.factory import EngineKind, make_engine, resolve_kind, split_openai_model
from components.engines.hf_engine import HFEngine, sample_next

SAMPLE = SamplingConfig(temperature=1.0, max_tokens=12, top_p=1.0)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> HFEngine:
    return HFEngine(tiny_model_dir, max_batch_size=4)


def _prompts(engine: HFEngine) -> list[list[int]]:
    texts = ["Hello there", "A much longer prompt about writing a Python function", "x", "Tell me"]
    return [engine.tokenizer.encode(t) for t in texts]


def test_is_an_engine(tiny):
    assert isinstance(tiny, Engine)
    assert tiny.name == "hf"


def test_same_seed_same_tokens_and_order(tiny):
    prompts = _prompts(tiny) * 2  # 8 requests: two batches of 4
    seeds = list(range(8))
    first = tiny.generate(prompts, SAMPLE, seeds)
    again = tiny.generate(prompts, SAMPLE, seeds)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    # A request's sample depends on its own seed and prompt, not on its position in the batch.
    reversed_out = tiny.generate(prompts[::-1], SAMPLE, seeds[::-1])
    assert [g.token_ids for g in reversed_out[::-1]] == [g.token_ids for g in first]


def test_different_seeds_differ(tiny):
    prompt = _prompts(tiny)[0]
    outs = tiny.generate([prompt] * 4, SAMPLE, [0, 1, 2, 3])
    assert len({tuple(g.token_ids) for g in outs}) > 1


def test_logprobs_and_lengths(tiny):
    outs = tiny.generate(_prompts(tiny), SAMPLE, [5, 6, 7, 8])
    assert len(outs) == 4
    for g in outs:
        assert 0 < len(g.token_ids) <= SAMPLE.max_tokens
        assert len(g.logprobs) == len(g.token_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in g.logprobs)
        if g.finish_reason == "length":
            assert len(g.token_ids) == SAMPLE.max_tokens
        assert "<|im_end|>" not in g.text


def test_max_tokens_respected(tiny):
    outs = tiny.generate(_prompts(tiny), SamplingConfig(temperature=1.0, max_tokens=3), [1, 2, 3, 4])
    assert all(len(g.token_ids) <= 3 for g in outs)


def test_greedy_is_deterministic_and_seed_free(tiny):
    greedy = SamplingConfig(temperature=0.0, max_tokens=8)
    prompts = _prompts(tiny)
    a = tiny.generate(prompts, greedy, [0, 1, 2, 3])
    b = tiny.generate(prompts, greedy, [9, 9, 9, 9])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_logprobs_match_an_unpadded_forward_pass(tiny):
    """Log-probs from a left-padded batch are the raw temperature-1 log-softmax of the sampled
    ids, as an unpadded forward pass of prompt + sample computes them."""
    prompts = _prompts(tiny)
    outs = tiny.generate(prompts, SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=6), [3] * 4)
    for prompt, out in zip(prompts, outs):
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = tiny.model(ids).logits[0, len(prompt) - 1 : -1].float()
        sampled = torch.tensor(out.token_ids)[:, None]
        expected = torch.log_softmax(logits, -1).gather(1, sampled)[:, 0]
        assert torch.allclose(expected, torch.tensor(out.logprobs), atol=1e-4)


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    gens = [torch.Generator().manual_seed(s) for s in range(1)]
    seen = {
        int(sample_next(logits, SamplingConfig(top_p=0.5), [torch.Generator().manual_seed(s)])[0]) for s in range(30)
    }
    assert seen == {0}
    ids, lps = sample_next(logits, SamplingConfig(temperature=0.0), gens)
    assert int(ids[0]) == 0 and abs(float(lps[0]) - math.log(0.6)) < 1e-6


def test_chat_renders_chatml(tiny):
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    ids = render_chat(tiny.tokenizer, conv)
    text = tiny.tokenizer.decode(ids)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    sampling = SamplingConfig(temperature=1.0, max_tokens=4)
    outs = tiny.chat([conv, conv], sampling, [0, 0])
    assert outs[0].token_ids == outs[1].token_ids
    assert tiny.generate([ids], sampling, [0])[0].token_ids == outs[0].token_ids


def test_factory_builds_hf_and_rejects_unknown(tiny_model_dir):
    engine = make_engine("hf", str(tiny_model_dir), max_batch_size=2)
    assert engine.name == "hf"
    with pytest.raises(ValueError, match="unknown engine kind"):
        make_engine("nope", str(tiny_model_dir))
    with pytest.raises(FileNotFoundError):
        make_engine("hf", str(tiny_model_dir / "missing"))
    with pytest.raises(TypeError, match="hf engine"):
        make_engine("hf", str(tiny_model_dir), no_such_option=1)
    assert resolve_kind("auto") in (EngineKind.VLLM, EngineKind.HF)
    assert split_openai_model("http://h:1/v1#big/model") == ("http://h:1/v1", "big/model")
    assert split_openai_model("http://h:1/v1") == ("http://h:1/v1", None)


def test_real_model_stops_on_eos_and_includes_it(prepared_model_dir):
    """On the real model a short factual answer ends on <|im_end|>, which is kept in token_ids."""
    engine = HFEngine(prepared_model_dir)
    eos = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = [{"role": "user", "content": "What is the capital of France?"}]
    out = engine.chat([conv], SamplingConfig(temperature=0.0, max_tokens=40), [0])[0]
    assert out.finish_reason == "stop"
    assert out.token_ids[-1] == eos and len(out.logprobs) == len(out.token_ids)
    assert "Paris" in out.text and "<|im_end|>" not in out.text
