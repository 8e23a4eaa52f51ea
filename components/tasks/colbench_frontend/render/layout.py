"""What a rendered page shows, as data: its visible elements' boxes, colours and text.

Collected in the browser with the screenshot (render/browser.py) by LAYOUT_JS, read by
the offline designer simulator (components/tasks/colbench_frontend/simulator.py), which compares a page
with the reference the way a person looking at both would: colours, blocks, text.

An element is kept when it is displayed, visible and at least MIN_SIDE px on both sides; its
`text` is its own text (not its children's), cut to 80 characters; at most MAX_ELEMENTS elements,
in document order. Colours are `(r, g, b)`; a transparent background is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIN_SIDE = 4
MAX_ELEMENTS = 400

LAYOUT_JS = """() => {
  const rgb = (c) => { const m = c.match(/rgba?\\(([\\d.]+), ([\\d.]+), ([\\d.]+)(?:, ([\\d.]+))?\\)/);
    if (!m || (m[4] !== undefined && parseFloat(m[4]) < 0.1)) return null;
    return [Math.round(+m[1]), Math.round(+m[2]), Math.round(+m[3])]; };
  const out = [];
  const body = document.body;
  for (const el of body ? body.querySelectorAll('*') : []) {
    if (out.length >= %d) break;
    const r = el.getBoundingClientRect();
    if (r.width < %d || r.height < %d) continue;
    const s = getComputedStyle(el);
    if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0) continue;
    const own = Array.from(el.childNodes).filter(n => n.nodeType === 3)
      .map(n => n.textContent.trim()).filter(t => t).join(' ');
    out.push({tag: el.tagName.toLowerCase(), x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
      bg: rgb(s.backgroundColor), color: rgb(s.color), size: parseFloat(s.fontSize) || 0,
      text: own.replace(/\\s+/g, ' ').slice(0, 80)});
  }
  const html = document.documentElement;
  return {bg: (body && rgb(getComputedStyle(body).backgroundColor)) || rgb(getComputedStyle(html).backgroundColor),
    width: html.scrollWidth, height: Math.max(html.scrollHeight, body ? body.scrollHeight : 0), elements: out};
}""" % (MAX_ELEMENTS, MIN_SIDE, MIN_SIDE)


@dataclass(frozen=True)
class Element:
    tag: str
    x: float
    y: float
    w: float
    h: float
    bg: tuple[int, int, int] | None
    color: tuple[int, int, int] | None
    size: float
    text: str


@dataclass(frozen=True)
class PageLayout:
    bg: tuple[int, int, int] | None
    width: int
    height: int
    elements: list[Element] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict) -> "PageLayout":
        elements = [
            Element(**{**e, "bg": _colour(e.get("bg")), "color": _colour(e.get("color"))})
            for e in data.get("elements", [])
        ]
        return cls(_colour(data.get("bg")), int(data.get("width", 0)), int(data.get("height", 0)), elements)

    def to_json(self) -> dict:
        return {
            "bg": self.bg,
            "width": self.width,
            "height": self.height,
            "elements": [e.__dict__ for e in self.elements],
        }

    def texts(self) -> list[str]:
        """The page's own texts, in document order, without repeats."""
        return list(dict.fromkeys(e.text for e in self.elements if e.text))


def blank_layout(width: int, height: int) -> PageLayout:
    """The layout of a page that shows nothing (a failed render)."""
    return PageLayout((255, 255, 255), width, height, [])


def _colour(value) -> tuple[int, int, int] | None:
    return tuple(int(v) for v in value) if value else None


def normalise_text(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()
