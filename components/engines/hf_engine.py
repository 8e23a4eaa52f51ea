"""transformers engine: the fallback generator and the one the fast tests use.

Reads: a local Hugging Face model folder (weights, tokenizer with a chat template), or uses a
model already in memory (`HFEngine.from_model`: CORY generates with the weights it trains).
Writes: nothing.

A hand-written sampling loop over a left-padded batch with a KV cache, where every row samples
with its own `torch.Generator` seeded from `seeds[i]`: rows are batched (up to `max_batch_size`)
and each request's random stream depends only on its own seed, not on its batch neighbours.

Conventions shared by every engine (see also vllm_engine.py, openai_engine.py):
- `token_ids` are the sampled ids. When generation stops on an end-of-sequence id, that id IS
  included (it was sampled) with its log-prob, and `finish_reason` is "stop"; when `max_tokens`
  is reached, `finish_reason` is "length" and the last id is not an eos id.
- `logprobs[j]` is the log-prob of `token_ids[j]` under the model's own distribution at
  temperature 1, before temperature and top-p: log_softmax(raw logits). This is vLLM's default
  `logprobs_mode="raw_logprobs"`, and the quantity a policy-gradient / DPO loss recomputes.
- `text` is the decoded `token_ids` with special tokens skipped (so no `<|im_end|>`).
- temperature == 0 means greedy (argmax); the seed is then irrelevant.
- `chat` renders the tokenizer's chat template with add_generation_prompt=True (`render_chat`)
  and calls `generate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from components.engines.base import Generation, SamplingConfig, TemplateChat


def eos_token_ids(tokenizer, generation_config=None) -> set[int]:
    """Every id that ends a generation: the tokenizer's eos plus generation_config's eos ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    extra = getattr(generation_config, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif extra:
        ids.update(int(t) for t in extra)
    return ids


def sample_next(
    logits: torch.Tensor, sampling: SamplingConfig, generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return (ids [B], raw log-probs of those ids [B]).

    `logits` is [B, V] float32. Greedy when temperature == 0; otherwise temperature scaling, then
    nucleus (top-p) filtering, then a multinomial draw with the row's own generator.
    """
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    if sampling.temperature <= 0:
        ids = logits.argmax(dim=-1)
    else:
        probs = torch.softmax(logits / sampling.temperature, dim=-1)
        if sampling.top_p < 1.0:
            probs = _top_p_filter(probs, sampling.top_p)
        ids = torch.stack([torch.multinomial(probs[row], 1, generator=gen)[0] for row, gen in enumerate(generators)])
    return ids, raw_logprobs.gather(1, ids[:, None])[:, 0]


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set whose mass reaches top_p (the top token always stays)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum(dim=-1, keepdim=True)


class HFEngine(TemplateChat):
    """Batched sampling with transformers; per-request seeds; fp32 on CPU by default."""

    name = "hf"

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        max_batch_size: int = 16,
        seed: int = 0,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        loaded = AutoModelForCausalLM.from_pretrained(str(model), dtype=getattr(torch, dtype))
        loaded.to(device).eval()
        self._attach(loaded, AutoTokenizer.from_pretrained(str(model)), max_batch_size, seed)

    @classmethod
    def from_model(cls, model, tokenizer, *, max_batch_size: int = 16, seed: int = 0) -> "HFEngine":
        """An engine over a model already in memory, used as it is (its device, dtype and mode):
        a training loop generates with the weights it is updating, with no copy or reload. The
        caller puts the model in eval mode (and, for PEFT, picks the adapter) before generating."""
        engine = cls.__new__(cls)
        engine._attach(model, tokenizer, max_batch_size, seed)
        return engine

    def _attach(self, model, tokenizer, max_batch_size: int, seed: int) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.device = next(model.parameters()).device
        self.max_batch_size = max_batch_size
        self.seed = seed  # unused: every request carries its own seed
        self.eos_ids = eos_token_ids(self.tokenizer, self.model.generation_config)
        self.max_len = int(getattr(self.model.config, "max_position_embeddings", None) or 1 << 30)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        results: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            stop = start + self.max_batch_size
            results.extend(self._generate_batch(prompts[start:stop], sampling, seeds[start:stop]))
        return results

    def close(self) -> None:
        self.model = None

    @torch.inference_mode()
    def _generate_batch(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        if max(len(p) for p in prompts) >= self.max_len:
            raise ValueError(f"a prompt has >= {self.max_len} tokens (the model's context length)")
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        sampled: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        done = [False] * batch
        cache = None
        for _ in range(min(sampling.max_tokens, self.max_len - width)):  # stop at the context end
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
            ids, lps = sample_next(out.logits[:, -1, :].float().cpu(), sampling, generators)
            for row in range(batch):
                if done[row]:
                    continue
                sampled[row].append(int(ids[row]))
                logprobs[row].append(float(lps[row]))
                done[row] = int(ids[row]) in self.eos_ids
            if all(done):
                break
            input_ids = ids.masked_fill(torch.tensor(done), self.pad_id)[:, None].to(self.device)
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=self.device)], 1)
            positions = positions[:, -1:] + 1
        return [self._result(ids, lps) for ids, lps in zip(sampled, logprobs)]

    def _result(self, token_ids: list[int], logprobs: list[float]) -> Generation:
        stopped = bool(token_ids) and token_ids[-1] in self.eos_ids
        return Generation(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="stop" if stopped else "length",
        )
