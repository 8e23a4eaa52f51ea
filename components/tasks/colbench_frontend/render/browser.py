"""Offline page rendering for ColBench frontend: HTML in, full-page PNG screenshot out.

One long-lived headless Chromium (the Debian package, driven by Playwright; no `playwright
install`) with a pool of pages, so a page costs a `set_content` and a screenshot, not a browser
start. The browser runs in Playwright's asyncio API on a thread of its own; `render_many` spreads a
batch over the pool's pages and may be called from any thread.

Pages are untrusted code (an agent wrote them). They run in Chromium's processes, never in ours,
and every request goes through `components.tasks.colbench_frontend.render.routes.answer`: Tailwind and picsum images are
answered from local files, everything else is aborted; as a second fence the browser resolves no
host name (`--host-resolver-rules`), service workers are blocked, and a page's origin is
`about:blank`, from which Chromium loads no `file:` URL.

Each page gets `timeout_s`: a page that never finishes loading (a script that loops, a request
that never ends) is cut at the limit; its page is closed and replaced, and it renders as a blank
page (white, the viewport's size), as does any page Chromium fails on, so a bad page scores as an
empty design instead of stopping the step. Full-page screenshots are cut at `max_height` pixels.
Each page is also described as data (its visible elements' boxes, colours and text:
components/tasks/colbench_frontend/render/layout.py) for the offline designer simulator. Snapshots are cached by the
SHA-256 of the HTML and the rendering settings when `cache_dir` is set (written atomically);
identical pages in one batch are rendered once.

Departure from the authors' code: they render with Firefox (Selenium) at its default window and
give a failed render a black 224x224 image; here Chromium at a fixed 1280x800 viewport, and a
failed render is a white page of the viewport's size.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from components.tasks.colbench_frontend.render.layout import LAYOUT_JS, PageLayout, blank_layout
from components.tasks.colbench_frontend.render.routes import WebAssets, answer

CACHE_VERSION = 1  # bump when what a cached snapshot holds changes
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",  # runs as root here; pages are fenced by the routes and flags below instead
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


@dataclass(frozen=True)
class Snapshot:
    """A rendered page: its screenshot and what it shows (components/tasks/colbench_frontend/render/layout.py)."""

    png: bytes
    layout: PageLayout
    failed: bool = False


@dataclass(frozen=True)
class RenderSettings:
    """What a screenshot depends on besides the HTML (part of the cache key)."""

    width: int = 1280
    height: int = 800
    max_height: int = 4096
    timeout_s: float = 10.0


def find_chromium() -> str:
    """The Chromium executable, or a FileNotFoundError saying how to install it."""
    for path in (os.environ.get("SWEETFLOW_CHROMIUM"), *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if path and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        "no Chromium found for page rendering: install it with `apt-get install chromium fonts-liberation`"
        " (make install does so when run as root), or set SWEETFLOW_CHROMIUM to its path"
    )


def blank_png(settings: RenderSettings) -> bytes:
    """What a page that fails to render looks like: white, the viewport's size."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (settings.width, settings.height), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    os.replace(part, path)


class Renderer:
    """A headless Chromium with `pages` pages; use as a context manager or call `close()`."""

    def __init__(
        self,
        assets: WebAssets,
        *,
        pages: int = 2,
        settings: RenderSettings = RenderSettings(),
        cache_dir: Path | None = None,
    ) -> None:
        if pages < 1:
            raise ValueError(f"pages must be >= 1, got {pages}")
        self.assets, self.settings, self.pages = assets, settings, pages
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.stats = {"rendered": 0, "cached": 0, "failed": 0}
        self._blank = Snapshot(blank_png(settings), blank_layout(settings.width, settings.height), failed=True)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sweetflow-renderer", daemon=True)
        self._thread.start()
        try:
            self._call(self._start(find_chromium()))
        except BaseException:
            self.close()
            raise

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _start(self, executable: str) -> None:
        from playwright.async_api import async_playwright

        self._playwright = await async_playwright().start()
        self._browser = await self._playwright.chromium.launch(
            executable_path=executable, args=list(CHROMIUM_ARGS), headless=True
        )
        self._context = await self._browser.new_context(
            viewport={"width": self.settings.width, "height": self.settings.height},
            service_workers="block",
            accept_downloads=False,
        )
        await self._context.route("**/*", self._route)
        await self._context.route_web_socket("**/*", lambda socket: socket.close())
        self._pool: asyncio.Queue = asyncio.Queue()
        for _ in range(self.pages):
            self._pool.put_nowait(await self._context.new_page())

    async def _route(self, route) -> None:
        local = answer(route.request.url, self.assets)
        if local is None:
            await route.abort("blockedbyclient")
        else:
            await route.fulfill(status=200, body=local.body, content_type=local.content_type)

    # --- rendering -----------------------------------------------------------------------------
    def render(self, html: str) -> bytes:
        return self.render_many([html])[0]

    def render_many(self, htmls: Sequence[str]) -> list[bytes]:
        """PNG bytes for each page, in order; never raises for a bad page (blank instead)."""
        return [snapshot.png for snapshot in self.snapshot_many(htmls)]

    def snapshot_many(self, htmls: Sequence[str]) -> list[Snapshot]:
        """Screenshot and layout of each page, in order; identical pages are rendered once."""
        if self._loop.is_closed():
            raise RuntimeError("the renderer is closed")
        unique = list(dict.fromkeys(htmls))
        done = dict(zip(unique, self._call(self._render_all(unique))))
        return [done[html] for html in htmls]

    async def _render_all(self, htmls: list[str]) -> list[Snapshot]:
        return list(await asyncio.gather(*(self._render_cached(html) for html in htmls)))

    def _cache_path(self, html: str) -> Path | None:
        if self.cache_dir is None:
            return None
        key = json.dumps([CACHE_VERSION, html, asdict(self.settings)], sort_keys=True).encode()
        return self.cache_dir / f"{hashlib.sha256(key).hexdigest()}.png"

    async def _render_cached(self, html: str) -> Snapshot:
        path = self._cache_path(html)
        if path is not None and path.is_file() and path.with_suffix(".json").is_file():
            self.stats["cached"] += 1
            return Snapshot(path.read_bytes(), PageLayout.from_json(json.loads(path.with_suffix(".json").read_text())))
        snapshot = await self._render_pooled(html)
        if path is not None and not snapshot.failed:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path.with_suffix(".json"), json.dumps(snapshot.layout.to_json()).encode())
            _write_atomic(path, snapshot.png)  # last: a .png is only ever beside its .json
        return snapshot

    async def _render_pooled(self, html: str) -> Snapshot:
        page = await self._pool.get()
        try:
            snapshot = await asyncio.wait_for(self._shoot(page, html), self.settings.timeout_s)
            self.stats["rendered"] += 1
            return snapshot
        except Exception:  # timeout, a crashed page, a Playwright error: a blank design
            self.stats["failed"] += 1
            page = await self._replace(page)
            return self._blank
        finally:
            self._pool.put_nowait(page)

    async def _shoot(self, page, html: str) -> Snapshot:
        await page.set_content(html, wait_until="load")
        layout = PageLayout.from_json(await page.evaluate(LAYOUT_JS))
        height = min(max(layout.height, self.settings.height), self.settings.max_height)
        clip = {"x": 0, "y": 0, "width": self.settings.width, "height": height}
        png = await page.screenshot(full_page=True, clip=clip, type="png", animations="disabled")
        return Snapshot(png, layout)

    async def _replace(self, page):
        try:
            await asyncio.wait_for(page.close(run_before_unload=False), 5)
        except Exception:  # a hung renderer: the new page gets a process of its own
            pass
        return await self._context.new_page()

    # --- lifetime ------------------------------------------------------------------------------
    async def _stop(self) -> None:
        browser, playwright = getattr(self, "_browser", None), getattr(self, "_playwright", None)
        if browser is not None:
            await browser.close()
        if playwright is not None:
            await playwright.stop()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> "Renderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
