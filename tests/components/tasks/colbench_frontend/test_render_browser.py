"""The offline renderer on a real headless Chromium: styles applied, placeholders drawn, no request
leaving the page, no local file read, a hung page cut at the limit, broken HTML not fatal, cache."""

from __future__ import annotations

import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from components.tasks.colbench_frontend.render.browser import Renderer, RenderSettings
from components.tasks.colbench_frontend.render.placeholder import placeholder_png
from components.tasks.colbench_frontend.render.routes import WebAssets
from tests.conftest import REPO

ASSETS = REPO / "vendor" / "web"
TIMEOUT_S = 3.0
GREEN, RED = (0, 128, 0), (255, 0, 0)


@pytest.fixture(scope="module")
def renderer():
    with Renderer(WebAssets(ASSETS), pages=2, settings=RenderSettings(timeout_s=TIMEOUT_S)) as built:
        yield built


def _pixel(png: bytes, x: int, y: int) -> tuple[int, int, int]:
    return Image.open(io.BytesIO(png)).convert("RGB").getpixel((x, y))


def test_tailwind_2_stylesheet_and_play_cdn_are_applied(renderer):
    v2 = (
        '<html><link href="https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css" rel="stylesheet">'
        '<body class="m-0"><div class="bg-red-500 w-24 h-24"></div></body></html>'
    )
    v3 = (
        '<html><script src="https://cdn.tailwindcss.com"></script>'
        '<body class="m-0"><div class="bg-blue-600 w-24 h-24"></div></body></html>'
    )
    unstyled = '<html><body class="m-0"><div class="bg-red-500 w-24 h-24"></div></body></html>'
    pages = renderer.render_many([v2, v3, unstyled])
    assert _pixel(pages[0], 40, 40) == (239, 68, 68)  # Tailwind 2 red-500
    assert _pixel(pages[1], 40, 40) == (37, 99, 235)  # Tailwind 3 blue-600
    assert _pixel(pages[2], 40, 40) == (255, 255, 255)  # the classes alone do nothing


def test_picsum_images_are_the_local_placeholder(renderer):
    page = renderer.render('<html><body style="margin:0"><img src="https://picsum.photos/id/48/300/200"></body></html>')
    expected = Image.open(io.BytesIO(placeholder_png(300, 200))).convert("RGB")
    for x, y in ((10, 10), (150, 150), (290, 190)):
        assert _pixel(page, x, y) == expected.getpixel((x, y))


def test_no_request_leaves_the_page(renderer):
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        page = renderer.render(
            f'<html><body><img src="{base}/img.png"><link rel="stylesheet" href="{base}/s.css">'
            f'<iframe src="{base}/frame"></iframe><script>fetch("{base}/fetch").catch(() => 0);'
            f'new WebSocket("ws://127.0.0.1:{server.server_port}/ws");'
            f'navigator.sendBeacon("{base}/beacon", "x");</script></body></html>'
        )
        time.sleep(0.5)
    finally:
        server.shutdown()
    assert page and hits == []


def test_a_page_cannot_read_local_files(renderer, tmp_path):
    secret = tmp_path / "secret.html"
    secret.write_text('<body style="background: rgb(255,0,0); margin: 0">secret</body>')
    script = (
        f'fetch("file://{secret}").then(() => document.body.style.background = "rgb(255,0,0)")'
        '.catch(() => document.body.style.background = "rgb(0,128,0)")'
    )
    page = renderer.render(
        f'<html><body style="margin:0"><iframe src="file://{secret}" style="width:300px;height:200px;border:0">'
        f"</iframe><script>{script}</script></body></html>"
    )
    time.sleep(0.2)
    assert _pixel(page, 600, 600) == GREEN  # the fetch failed (the script ran)
    assert _pixel(page, 150, 100) != RED  # the frame shows no file


def test_a_page_that_never_finishes_loading_is_cut_at_the_limit(renderer):
    failed = renderer.stats["failed"]
    start = time.monotonic()
    page = renderer.render("<html><body><script>while (true) {}</script></body></html>")
    elapsed = time.monotonic() - start
    assert _pixel(page, 10, 10) == (255, 255, 255) and Image.open(io.BytesIO(page)).size == (1280, 800)
    assert renderer.stats["failed"] == failed + 1
    assert elapsed < TIMEOUT_S + 8
    after = renderer.render_many(['<body style="background: rgb(0,128,0)"></body>'] * 3)  # the pool recovered
    assert all(_pixel(png, 5, 5) == GREEN for png in after)


def test_broken_html_renders_and_tall_pages_are_cut(renderer):
    broken = renderer.render("<div><p>unclosed <b>bold <table><tr><td>cell")
    assert Image.open(io.BytesIO(broken)).size == (1280, 800)
    tall = renderer.render('<body style="margin:0"><div style="height: 20000px"></div></body>')
    assert Image.open(io.BytesIO(tall)).size == (1280, RenderSettings().max_height)


def test_screenshots_are_cached_by_content(tmp_path):
    html = '<body style="background: rgb(0,128,0)">cached</body>'
    with Renderer(WebAssets(ASSETS), pages=1, cache_dir=tmp_path) as first:
        png = first.render(html)
    with Renderer(WebAssets(ASSETS), pages=1, cache_dir=tmp_path) as second:
        assert second.render(html) == png
        assert second.stats == {"rendered": 0, "cached": 1, "failed": 0}
    assert len(list(tmp_path.glob("*.png"))) == 1
