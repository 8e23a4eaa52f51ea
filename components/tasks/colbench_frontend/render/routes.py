"""What the offline renderer answers for each request a page makes (render/browser.py).

ColBench frontend pages load Tailwind from a CDN and photos from picsum.photos; no page may reach
the network or the host. Every request goes through `answer(url)`:
- Tailwind 2 compiled CSS from jsdelivr or unpkg (`.../tailwindcss@2.x/dist/tailwind(.min).css`,
  what every reference page links): the local copy of 2.2.19;
- the Tailwind Play CDN (`https://cdn.tailwindcss.com`, any path or query: an agent's page may ask
  for it, as v3): the local v3.4.10 build with its first-party plugins;
- picsum.photos (`/id/N/W/H`, `/W/H`, `/W`, suffixes such as `-estate` ignored) and
  via.placeholder.com (`/W` or `/WxH`): a deterministic placeholder of that size
  (components/tasks/colbench_frontend/render/placeholder.py); sizes are clamped to [1, MAX_SIDE];
- anything else: aborted (None), so a page sees a failed load, never a hang or the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from components.tasks.colbench_frontend.render.placeholder import placeholder_png

MAX_SIDE = 4096
DEFAULT_SIDE = 200
TAILWIND_CSS = "tailwind-2.2.19.min.css"
TAILWIND_PLAY = "tailwind-play-3.4.10.js"
_TAILWIND2_PATH = re.compile(r"^/(?:npm/)?tailwindcss@\^?~?2[^/]*/dist/tailwind(?:\.min)?\.css$")
_SIZES = re.compile(r"^/(?:id/\d+/)?(\d+)(?:/(\d+))?")
_VIA_SIZES = re.compile(r"^/(\d+)(?:x(\d+))?")


@dataclass(frozen=True)
class Answer:
    body: bytes
    content_type: str


class WebAssets:
    """The local stylesheet and script files (written by scripts/web_assets.sh)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        missing = [name for name in (TAILWIND_CSS, TAILWIND_PLAY) if not (self.folder / name).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{self.folder} lacks {', '.join(missing)}: run `bash scripts/web_assets.sh {self.folder}`"
                " (or `make install`) to fetch the Tailwind files pages are rendered with"
            )
        self.tailwind_css = (self.folder / TAILWIND_CSS).read_bytes()
        self.tailwind_play = (self.folder / TAILWIND_PLAY).read_bytes()


def _side(text: str | None, default: int) -> int:
    return min(max(int(text), 1), MAX_SIDE) if text else default


def _size(pattern: re.Pattern[str], path: str) -> tuple[int, int]:
    match = pattern.match(path)
    if not match:
        return DEFAULT_SIDE, DEFAULT_SIDE
    width = _side(match.group(1), DEFAULT_SIDE)
    return width, _side(match.group(2), width)


def answer(url: str, assets: WebAssets) -> Answer | None:
    """The local answer to a page's request, or None to abort it."""
    parts = urlsplit(url)
    if parts.scheme != "https" and parts.scheme != "http":
        return None
    host = parts.hostname or ""
    if host == "cdn.tailwindcss.com":
        return Answer(assets.tailwind_play, "application/javascript")
    if host in ("cdn.jsdelivr.net", "unpkg.com") and _TAILWIND2_PATH.match(parts.path):
        return Answer(assets.tailwind_css, "text/css")
    if host in ("picsum.photos", "fastly.picsum.photos"):
        return Answer(placeholder_png(*_size(_SIZES, parts.path)), "image/png")
    if host == "via.placeholder.com":
        return Answer(placeholder_png(*_size(_VIA_SIZES, parts.path)), "image/png")
    return None
