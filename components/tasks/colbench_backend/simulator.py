"""ColBench backend's offline simulated human, `retrieval` (the protocol's own is the `llm` one of
components/episodes/simulators.py).

Deterministic: it splits the hidden information into lines, scores each line by the question's words
it contains (identifiers split on `_` and case, weighted by how rare the word is among the lines),
and answers with the best two lines (two "sentences") in their original order, or "I don't know."
when no line shares a word with the question. How it differs from a human: it quotes the reference
code verbatim instead of describing it, it cannot reason, paraphrase or infer intent, it ignores the
dialogue before the last question, and vague questions ("any other details?") get "I don't know."
It exists so a 135M agent can be run end to end offline, where a 135M model cannot play the human;
published numbers use `llm`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from components.episodes.simulators import DONT_KNOW, SimRequest, cut_reply

_STOP = frozenset(
    "a an the and or of to in on for is are be it this that what which how do does should can "
    "i you we your my with as by if at from def return function python code please "
    "would could will there any other more".split()
)


def words(text: str) -> list[str]:
    """Lower-case word terms; identifiers are split on underscores and camelCase."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return [w.lower() for w in re.findall(r"[A-Za-z]+|\d+", spaced) if w.lower() not in _STOP]


@dataclass
class RetrievalSimulator:
    """Answers from the hidden-information lines that share the most (rare) words with the question."""

    max_chars: int = 400
    max_lines: int = 2
    name: str = field(default="retrieval", init=False)

    def reply(self, requests: Sequence[SimRequest]) -> list[str]:
        return [self._answer(r.task.hidden_information, r.dialogue[-1][0]) for r in requests]

    def _answer(self, hidden: str, question: str) -> str:
        lines = [ln.strip() for ln in hidden.splitlines() if ln.strip()]
        terms = [set(words(ln)) for ln in lines]
        doc_freq = Counter(t for ts in terms for t in ts)
        asked = set(words(question))
        scores = [sum(math.log(1 + len(lines) / doc_freq[t]) for t in asked & ts) for ts in terms]
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        best = sorted(ranked[: self.max_lines])
        if not best:
            return cut_reply(DONT_KNOW, self.max_chars)
        return cut_reply("Here is what I know: " + " ".join(lines[i] for i in best), self.max_chars)
