"""The engine interface every generator implements (vLLM, OpenAI-compatible HTTP, transformers).

Two entry points:
- `generate`: token level. Prompts are token-id lists; each result carries the exact sampled token
  ids and their log-probs, which training later uses (docs/design.md convention 11).
- `chat`: message level. Each engine renders the chat template itself (local engines) or sends
  the messages to a server (OpenAI-compatible). Used by the LLM human simulator.

Streaming (`StreamingEngine`, engines that can: vLLM, OpenAI-compatible): `submit` one request
(token ids, or `submit_chat` a conversation) under a caller's key, and `collect` blocks until at
least one submitted request has finished and returns those as (key, Generation), in the order
they finished. The per-arrival episode driver (components/episodes/async_driver.py) uses it; a
`generate`/`chat` call while streamed requests are in flight is refused (it would take their
outputs). The transformers engine does not stream.

Seeding: `seeds[i]` is the seed of request i, derived by the caller from the run seed, so the
same run seed gives the same samples regardless of batch composition where the engine allows it.
"""

from __future__ import annotations

from collections.abc import Hashable
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


@runtime_checkable
class StreamingEngine(Engine, Protocol):
    """An engine that takes requests one by one and hands each back as soon as it is done."""

    def submit(self, key: Hashable, prompt: list[int], sampling: SamplingConfig, seed: int) -> None: ...

    def submit_chat(self, key: Hashable, conversation: list[Message], sampling: SamplingConfig, seed: int) -> None: ...

    def collect(self) -> list[tuple[Hashable, Generation]]:
        """Block until one or more submitted requests finish; return them (an engine error raises)."""
        ...

    def in_flight(self) -> int:
        """Requests submitted and not yet collected."""
        ...

    def cancel(self) -> None:
        """Drop every request in flight (after an error, so the engine can be used again)."""
        ...


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
