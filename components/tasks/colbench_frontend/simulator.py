"""The offline designer: a deterministic simulated human for ColBench frontend (simulator `visual`).

The protocol's human is a vision-language model that sees the agent's rendered page and the page
it has in mind and says how they differ, most important first (docs/algorithms.md; reply cut to 1000
characters). This one compares the two pages' layouts (components/tasks/colbench_frontend/render/layout.py: visible
elements with boxes, colours and text, read from the same renders the scorer uses) and says, in
this order and as far as the reply cut allows:
1. the page background colour, when it differs;
2. the page's blocks (its full-width elements with a background of their own, top to bottom):
   how many the reference has, and each one whose colour differs, named by position;
3. texts of the reference the agent's page lacks (headings and links first), then texts the agent's
   page shows that the reference does not;
4. the height, when one page is over 1.5 times the other, and the number of images when it differs.
With no HTML in the agent's message it describes the reference in the same terms (background,
blocks, main texts), as a person would describe what they want. Colours are named by the nearest
of a fixed palette. It cannot see images' content, fonts, or spacing finer than these rules,
and never says anything a page does not show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from components.tasks.colbench_frontend.render.layout import Element, PageLayout, normalise_text

PALETTE = {
    "white": (255, 255, 255),
    "very light grey": (243, 244, 246),
    "light grey": (209, 213, 219),
    "grey": (156, 163, 175),
    "dark grey": (55, 65, 81),
    "black": (17, 24, 39),
    "red": (239, 68, 68),
    "orange": (249, 115, 22),
    "yellow": (234, 179, 8),
    "green": (34, 197, 94),
    "dark green": (21, 128, 61),
    "teal": (20, 184, 166),
    "light blue": (147, 197, 253),
    "blue": (59, 130, 246),
    "dark blue": (30, 58, 138),
    "indigo": (99, 102, 241),
    "purple": (168, 85, 247),
    "pink": (236, 72, 153),
    "brown": (146, 64, 14),
}
NO_PAGE = "I can't see a design yet: show me your page as HTML and I'll tell you how it differs from what I want."
LOOKS_RIGHT = "That looks like what I have in mind."
KEY_TAGS = ("h1", "h2", "h3", "a", "button", "nav", "li")


def colour_name(rgb: tuple[int, int, int] | None) -> str:
    if rgb is None:
        return "white"
    return min(PALETTE, key=lambda name: sum((a - b) ** 2 for a, b in zip(PALETTE[name], rgb)))


def blocks(layout: PageLayout) -> list[Element]:
    """Full-width elements with a background of their own, top to bottom, nested ones dropped."""
    wide = [e for e in layout.elements if e.bg is not None and e.w >= 0.9 * max(layout.width, 1)]
    kept: list[Element] = []
    for element in sorted(wide, key=lambda e: (e.y, -e.h)):
        if not any(k.y <= element.y and element.y + element.h <= k.y + k.h + 1 for k in kept):
            kept.append(element)
    return kept


def _ordinal(i: int) -> str:
    return ["first", "second", "third", "fourth", "fifth"][i] if i < 5 else f"{i + 1}th"


def _texts(layout: PageLayout) -> list[str]:
    key = [e.text for e in layout.elements if e.text and e.tag in KEY_TAGS]
    return list(dict.fromkeys(key + layout.texts()))


def describe_wanted(reference: PageLayout) -> list[str]:
    """What a person would say about the page they want, with no page to compare."""
    parts = [f"I want a page with a {colour_name(reference.bg)} background."]
    sections = blocks(reference)
    if sections:
        colours = ", ".join(colour_name(b.bg) for b in sections)
        parts.append(f"From top to bottom it has {len(sections)} coloured blocks: {colours}.")
    texts = _texts(reference)[:6]
    if texts:
        parts.append("It shows: " + "; ".join(f"'{t}'" for t in texts) + ".")
    return parts


def compare(agent: PageLayout, reference: PageLayout) -> list[str]:
    """The differences between the agent's page and the reference, most important first."""
    parts = []
    if colour_name(agent.bg) != colour_name(reference.bg):
        parts.append(f"The page background should be {colour_name(reference.bg)}, not {colour_name(agent.bg)}.")
    theirs, mine = blocks(agent), blocks(reference)
    if len(theirs) != len(mine):
        parts.append(f"I want {len(mine)} coloured full-width blocks from top to bottom; yours has {len(theirs)}.")
    for i, (want, have) in enumerate(zip(mine, theirs)):
        if colour_name(want.bg) != colour_name(have.bg):
            parts.append(f"The {_ordinal(i)} block should be {colour_name(want.bg)}, not {colour_name(have.bg)}.")
    shown = {normalise_text(t) for t in agent.texts()}
    missing = [t for t in _texts(reference) if normalise_text(t) not in shown]
    if missing:
        parts.append("Missing: " + "; ".join(f"'{t}'" for t in missing[:5]) + ".")
    wanted = {normalise_text(t) for t in reference.texts()}
    extra = [t for t in _texts(agent) if normalise_text(t) not in wanted]
    if extra:
        parts.append("I don't want: " + "; ".join(f"'{t}'" for t in extra[:3]) + ".")
    if agent.height > 1.5 * reference.height:
        parts.append("The page should be much shorter.")
    elif reference.height > 1.5 * agent.height:
        parts.append("The page should be much longer.")
    images = [sum(e.tag == "img" for e in page.elements) for page in (reference, agent)]
    if images[0] != images[1]:
        parts.append(f"It should have {images[0]} image(s), not {images[1]}.")
    return parts


def cut_sentences(parts: Sequence[str], max_chars: int) -> str:
    """Whole sentences while they fit `max_chars`; the first one cut if even it does not."""
    reply = ""
    for part in parts:
        candidate = f"{reply} {part}".strip()
        if len(candidate) > max_chars:
            break
        reply = candidate
    return reply or (parts[0][:max_chars] if parts else "")


@dataclass
class VisualSimulator:
    """Compares each agent page with its task's reference (`task.dialogue_layouts` renders both)."""

    task: object  # components/tasks/colbench_frontend.ColbenchFrontend: renders and extracts the pages
    max_chars: int = 1000
    name: str = field(default="visual", init=False)

    def reply(self, requests: Sequence) -> list[str]:
        pairs = self.task.dialogue_layouts(requests)
        replies = []
        for agent, reference in pairs:
            if agent is None:
                parts = [NO_PAGE, *describe_wanted(reference)]
            else:
                parts = compare(agent, reference) or [LOOKS_RIGHT]
            replies.append(cut_sentences(parts, self.max_chars))
        return replies
