"""The official ColBench backend rules applied to an answer before it is run.

Reads/writes nothing. Mirrors the official scorer (ALGORITHMS.md, "ColBench"):
- a leading `I WANT TO ANSWER:` marker is removed (the episode protocol's answer prefix);
- markdown code fences are stripped. Departure: when the answer holds a fenced block, the
  content of the first fenced block is kept and the prose around it dropped (the official code
  only deletes the fence markers, which leaves surrounding prose to fail as a SyntaxError);
- code containing any of `BANNED` scores 0 without being run. This is kept as the official rule
  although our sandbox makes it unnecessary, so that scores stay comparable with the paper.
"""

from __future__ import annotations

import re

ANSWER_MARKER = "I WANT TO ANSWER:"
BANNED = ("import os", "from os", "import sys", "from sys", "sudo", "transformers", "exit(", "quit(", "argparse")
_FENCED = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)
_FENCE_LINE = re.compile(r"^\s*```[^\n]*$", re.M)


def strip_marker(text: str) -> str:
    """Remove a leading answer marker (and the whitespace around it)."""
    text = text.strip()
    if text.startswith(ANSWER_MARKER):
        text = text[len(ANSWER_MARKER) :].strip()
    return text


def strip_fences(text: str) -> str:
    """Keep the first fenced block's content if there is one, else drop stray fence lines."""
    match = _FENCED.search(text)
    if match:
        return match.group(1).strip("\n")
    return _FENCE_LINE.sub("", text).strip("\n")


def banned_substring(code: str) -> str | None:
    """The first banned substring found in `code`, or None."""
    return next((word for word in BANNED if word in code), None)


def prepare_answer(answer: str) -> tuple[str, str | None]:
    """(code to run, None) or (code, reason it scores 0 without running)."""
    code = strip_fences(strip_marker(answer))
    word = banned_substring(code)
    if word is not None:
        return code, f"banned substring {word!r} (official ColBench rule)"
    if not code.strip():
        return code, "empty answer"
    return code, None
