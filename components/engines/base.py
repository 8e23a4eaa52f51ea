"""The engine interface every generator implements (vLLM, OpenAI-compatible HTTP, transformers).

Two entry points:
- `generate`: token level. Prompts are token-id lists; each result carries the exact sampled token
  ids and their log-probs, which training later uses (DESIGN.md convention 11).
- `chat`: message level. Each engine renders the chat template itself (local engines) or sends
  the messages to a server (OpenAI-compatible). Used by the LLM human simulator.

Seeding: `seeds[i]` is the seed of request i, derived by the caller from the run seed, so the
same run seed gives the same samples regardless of batch composition where the engine allows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings for one batch of requests."""

    temperature: float = 1.0
    max_tokens: int = 256
    top_p: float = 1.0


@dataclass
class Generation:
    """One completed request."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # one per token id (sampled token's log-prob)
    finish_reason: str = "stop"  # "stop" (eos / stop string) or "length"


Message = dict  # {"role": "system"|"user"|"assistant", "content": str}


@runtime_checkable
class Engine(Protocol):
    """A text generator. `tokenizer` is a Hugging Face tokenizer (None only for chat-only engines)."""

    name: str
    tokenizer: object | None

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]: ...

    def chat(
        self, conversations: Sequence[list[Message]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]: ...

    def close(self) -> None: ...


def render_chat(tokenizer, conversation: Sequence[Message]) -> list[int]:
    """Prompt token ids of a conversation: the chat template with the assistant header appended."""
    ids = tokenizer.apply_chat_template(
        list(conversation), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding on some versions
        ids = ids["input_ids"]
    return [int(t) for t in ids]


class TemplateChat:
    """`chat` for engines that hold a tokenizer: render the chat template, then `generate`."""

    def chat(
        self, conversations: Sequence[list[Message]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        prompts = [render_chat(self.tokenizer, conv) for conv in conversations]
        return self.generate(prompts, sampling, seeds)
