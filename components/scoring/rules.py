"""The official ColBench backend rules applied to an answer before it is run.

Reads/writes nothing. The official scorer (facebookresearch/sweet_rl,
sweet_rl/utils/code_utils.py, `check_correctness`) gets the answer with the episode's
`I WANT TO ANSWER:` marker already split off; it gives score 0 if the raw answer contains any
of `BANNED`, then keeps what lies between the first "```python" and the next fence, or else
between the first two fences (all that follows the first fence if nothing closes it).
Ours:
- a banned substring anywhere in the raw answer, prose around the code included, scores 0
  without running; checked before anything is stripped, as officially (kept although our
  sandbox makes it unnecessary, so that scores stay comparable with the paper);
- a leading `I WANT TO ANSWER:` marker is removed (the episode already cut the answer after it);
- fences: the content of the first fenced block is kept and the prose around it dropped, as
  officially. Departures: the opening fence's whole line is dropped whatever its language tag
  (officially a tag other than "python", e.g. "py" or "Python", stays as a first code line and
  the program fails); with no opening fence, stray fence lines are deleted and the code kept
  (officially only the text after a lone closing fence is run, usually nothing).
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
    """(code to run, None) or (code, reason it scores 0 without running).

    Banned substrings are looked for in the raw answer, before the marker and fences are
    stripped, as the official scorer does."""
    word = banned_substring(answer)
    code = strip_fences(strip_marker(answer))
    if word is not None:
        return code, f"banned substring {word!r} (official ColBench rule)"
    if not code.strip():
        return code, "empty answer"
    return code, None
