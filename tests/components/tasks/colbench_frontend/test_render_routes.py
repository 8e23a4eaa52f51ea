"""The offline renderer's answers: local Tailwind, deterministic placeholders, nothing else."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from components.tasks.colbench_frontend.render.placeholder import placeholder_png
from components.tasks.colbench_frontend.render.routes import MAX_SIDE, TAILWIND_CSS, TAILWIND_PLAY, WebAssets, answer


@pytest.fixture()
def assets(tmp_path: Path) -> WebAssets:
    (tmp_path / TAILWIND_CSS).write_bytes(b"/* tailwind 2 */")
    (tmp_path / TAILWIND_PLAY).write_bytes(b"/* play cdn */")
    return WebAssets(tmp_path)


def _size(png: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(png)).size


def test_tailwind_urls_get_the_local_files(assets):
    for url in (
        "https://cdn.jsdelivr.net/npm/tailwindcss@2.2.19/dist/tailwind.min.css",
        "https://cdn.jsdelivr.net/npm/tailwindcss@^2/dist/tailwind.min.css",
        "https://unpkg.com/tailwindcss@2.2.7/dist/tailwind.css",
    ):
        assert answer(url, assets).body == b"/* tailwind 2 */", url
    for url in ("https://cdn.tailwindcss.com", "https://cdn.tailwindcss.com/3.4.1?plugins=forms"):
        got = answer(url, assets)
        assert got.body == b"/* play cdn */" and got.content_type == "application/javascript"


@pytest.mark.parametrize(
    "url, size",
    [
        ("https://picsum.photos/id/48/1600/400", (1600, 400)),
        ("https://picsum.photos/id/48/300/200-estate", (300, 200)),
        ("https://picsum.photos/640/480?random=1", (640, 480)),
        ("https://picsum.photos/250", (250, 250)),
        ("https://picsum.photos/id/48/99999/10", (MAX_SIDE, 10)),
        ("https://via.placeholder.com/150x60", (150, 60)),
        ("https://picsum.photos/", (200, 200)),
    ],
)
def test_images_get_placeholders_of_the_requested_size(assets, url, size):
    got = answer(url, assets)
    assert got.content_type == "image/png" and _size(got.body) == size


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/",
        "http://127.0.0.1:8000/secret",
        "https://cdn.jsdelivr.net/npm/jquery@3/dist/jquery.min.js",
        "https://cdn.jsdelivr.net/npm/tailwindcss@3.4.1/dist/tailwind.min.css",
        "file:///etc/passwd",
        "ws://127.0.0.1:9/",
    ],
)
def test_everything_else_is_aborted(assets, url):
    assert answer(url, assets) is None


def test_placeholders_are_deterministic():
    assert placeholder_png(320, 180) == placeholder_png.__wrapped__(320, 180)
    assert placeholder_png(320, 180) != placeholder_png(180, 320)
    with pytest.raises(ValueError):
        placeholder_png(0, 10)


def test_missing_assets_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="scripts/web_assets.sh"):
        WebAssets(tmp_path)
