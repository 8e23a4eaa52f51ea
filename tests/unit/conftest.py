"""Fixtures for unit tests: the default model's tokenizer and a scripted fake engine."""

from __future__ import annotations

import pytest

from components.engines.base import Generation


@pytest.fixture(scope="session")
def tokenizer(prepared_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(prepared_model_dir)


class ScriptedEngine:
    """A fake agent: `script(prompt_text, seed) -> reply text`; records every batch it gets."""

    name = "scripted"

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.batches: list[list[list[int]]] = []
        self.seeds: list[list[int]] = []

    def generate(self, prompts, sampling, seeds):
        self.batches.append([list(p) for p in prompts])
        self.seeds.append(list(seeds))
        out = []
        for prompt, seed in zip(prompts, seeds):
            text = self.script(self.tokenizer.decode(prompt), seed)[: sampling.max_tokens * 4]
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            out.append(Generation(text=text, token_ids=ids, logprobs=[-0.5] * len(ids)))
        return out

    def chat(self, conversations, sampling, seeds):
        prompts = [
            self.tokenizer.encode(self.tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True))
            for c in conversations
        ]
        return self.generate(prompts, sampling, seeds)

    def close(self):
        pass


@pytest.fixture
def scripted():
    return ScriptedEngine


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory):
    """A 2-layer Llama with a 300-token vocabulary (about 40k parameters), saved as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    out = tmp_path_factory.mktemp("toy-llama")
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server_url():
    """A FakeServer (tests/openai_server.py) for the test module; its base URL."""
    from tests.openai_server import start_server, stop_server

    server, url = start_server()
    yield url
    stop_server(server)


@pytest.fixture
def misbehave():
    """tests/openai_server.py's FakeServer's failure knobs, reset after the test."""
    from tests.openai_server import FakeServer

    yield FakeServer
    FakeServer.failures_left["n"] = FakeServer.drops_left["n"] = 0
    FakeServer.stall_s["s"] = 0.0
