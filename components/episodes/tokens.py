"""Prompt token ids for a growing chat, built so each turn extends the previous turn's exact ids.

Why: the ids a response was sampled from are the ids training must score (docs/design.md convention
11), and vLLM's prefix cache only hits when the turn-t prompt starts with the turn-(t-1) prompt
plus the sampled response ids (re-encoding decoded text breaks the match).

How: render the whole chat with the tokenizer's template as text, decode the previous prompt plus
the sampled response (special tokens kept), and when the rendering starts with that text, encode
only the new suffix (the end-of-turn marker, the human's reply, the next assistant header) and
append it to the old ids. When it does not (a template that rewrites history), fall back to
rendering the whole chat afresh; `extend` reports which path it took so callers can count it.
"""

from __future__ import annotations

from typing import Sequence

from components.engines.base import render_chat


class DialogueTokens:
    """Chat-template token ids for one tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def start(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Ids of the opening prompt: the engines' own rendering (template, generation prompt)."""
        return render_chat(self.tokenizer, messages)

    def extend(self, history_ids: list[int], messages: Sequence[dict[str, str]]) -> tuple[list[int], bool]:
        """Ids for `messages` that start with `history_ids` when the template allows it.

        `history_ids` is the previous prompt plus the sampled response ids. Returns (ids, reused).
        """
        full = self.render(messages)
        seen = self.tokenizer.decode(history_ids, skip_special_tokens=False)
        if full.startswith(seen):
            return list(history_ids) + self.encode(full[len(seen) :]), True
        return render_chat(self.tokenizer, messages), False
