"""Visual similarity: a page against itself is the maximum, a blank page lower, a small edit in
between (on a real reference page rendered offline); the metric is resolved, never guessed."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from components.tasks.colbench_frontend.render.browser import Renderer
from components.tasks.colbench_frontend.render.routes import WebAssets
from components.tasks.colbench_frontend.visual import ClipSimilarity, Metric, layout_similarity, resolve_metric
from tests.conftest import REPO


def _png(colour: tuple[int, int, int], size=(1280, 800), box=None) -> bytes:
    image = Image.new("RGB", size, colour)
    if box is not None:
        image.paste((20, 40, 200), box)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_layout_orders_self_edit_blank_on_a_reference_page():
    record = json.loads((REPO / "data/colbench/frontend_test.jsonl").open().readline())
    page = record["ground_truth"]
    edited = page.replace("text-3xl", "text-xl", 1).replace("p-4", "p-8", 1)
    assert edited != page
    with Renderer(WebAssets(REPO / "vendor/web"), pages=1) as renderer:
        ref, edit, blank = renderer.render_many([page, edited, "<html><body></body></html>"])
    assert layout_similarity(ref, ref) == 1.0
    assert 1.0 > layout_similarity(ref, edit) > layout_similarity(ref, blank)
    assert layout_similarity(ref, edit) == pytest.approx(layout_similarity(edit, ref))


def test_layout_sees_blocks_and_heights():
    white, boxed = _png((255, 255, 255)), _png((255, 255, 255), box=(0, 0, 640, 400))
    assert layout_similarity(white, boxed) < layout_similarity(white, white) == 1.0
    taller = _png((255, 255, 255), size=(1280, 1600), box=(0, 800, 1280, 1600))
    assert 0.0 < layout_similarity(white, taller) < 1.0  # the extra rows are compared with white


def test_metric_resolution(tmp_path):
    assert resolve_metric("auto", None) is Metric.LAYOUT
    assert resolve_metric("auto", tmp_path) is Metric.LAYOUT
    assert resolve_metric("layout", tmp_path) is Metric.LAYOUT
    with pytest.raises(FileNotFoundError, match="layout"):
        resolve_metric("clip", tmp_path)
    with pytest.raises(ValueError):
        resolve_metric("pixels", None)


def test_clip_from_a_local_folder(tmp_path):
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    config = CLIPConfig(
        text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 224,
            "patch_size": 32,
        },
        projection_dim=16,
    )
    CLIPModel(config).save_pretrained(tmp_path)
    CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}).save_pretrained(tmp_path)
    assert resolve_metric("auto", tmp_path) is Metric.CLIP
    clip = ClipSimilarity(tmp_path)
    a, b = _png((255, 255, 255)), _png((255, 255, 255), box=(0, 0, 1280, 400))
    assert clip(a, a) == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= clip(a, b) < 1.0
