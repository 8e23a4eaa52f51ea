"""A fake agent engine for driver and episode tests: replies scripted per prompt and seed."""

from __future__ import annotations

from components.engines.base import Generation


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
