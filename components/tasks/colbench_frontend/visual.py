"""Visual similarity of two rendered pages (ColBench frontend scoring; docs/algorithms.md).

The benchmark's metric is `clip`: the cosine similarity of CLIP ViT-B/32 image embeddings
(openai/clip-vit-base-patch32) of the two screenshots. No registry reachable here ships CLIP
weights, so `clip` is used when they are present in a local folder (`frontend.clip_model`), and
the offline default is `layout`: how alike the two pages' colour layouts are, block by block at
four grid sizes (`layout_similarity`). Both give 1 for a page against itself. They are different
scales: a score always carries its metric's name, and numbers of different metrics are never
averaged or compared.

Why `layout` and not SSIM (measured on the first 30 reference pages, rendered offline): a blank
page scored above a different reference page for 28 of 30 pages under greyscale SSIM (mean 0.76
vs 0.63), and a small edit (a heading one size smaller, one padding doubled) below the blank page
for 13 of 30; under `layout` the edit beat the blank page for 30 of 30 (0.986 vs 0.811), and a
different page tied the blank one (0.807, above it for 17 of 30). `python benchmarks/render.py`
prints these numbers.
"""

from __future__ import annotations

import io
from enum import Enum
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

GRIDS = (8, 16, 32, 64)  # blocks across the page width; rows keep the page's aspect


class Metric(str, Enum):
    CLIP = "clip"
    LAYOUT = "layout"


def _blocks(image, across: int) -> np.ndarray:
    """The image as `across` x rows mean colours (box-filtered), rows from its aspect."""
    from PIL import Image

    rows = max(1, round(image.height * across / image.width))
    return np.asarray(image.resize((across, rows), Image.BOX), dtype=np.float32)


def layout_similarity(png_a: bytes, png_b: bytes) -> float:
    """1 - the mean absolute colour difference (0-255 -> 0-1) of the two pages' block averages,
    averaged over GRIDS; the shorter page is padded with white rows. In [0, 1]; 1 = same blocks."""
    from PIL import Image

    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in (png_a, png_b)]
    scores = []
    for across in GRIDS:
        a, b = (_blocks(image, across) for image in images)
        rows = max(a.shape[0], b.shape[0])
        a, b = (np.pad(x, ((0, rows - x.shape[0]), (0, 0), (0, 0)), constant_values=255.0) for x in (a, b))
        scores.append(1.0 - float(np.abs(a - b).mean()) / 255.0)
    return float(np.mean(scores))


class ClipSimilarity:
    """Cosine similarity of CLIP image embeddings, from a local model folder."""

    def __init__(self, folder: Path) -> None:
        from transformers import CLIPImageProcessor, CLIPModel

        self.model = CLIPModel.from_pretrained(str(folder)).eval()
        self.processor = CLIPImageProcessor.from_pretrained(str(folder))

    @torch.no_grad()
    def embed(self, pngs: Sequence[bytes]) -> torch.Tensor:
        from PIL import Image

        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        features = self.model.get_image_features(pixel_values=pixels)
        # transformers 5 returns the vision output with the projected embedding as pooler_output
        features = getattr(features, "pooler_output", features)
        return F.normalize(features, dim=-1)

    def __call__(self, png_a: bytes, png_b: bytes) -> float:
        a, b = self.embed([png_a, png_b])
        return float((a * b).sum())


def clip_available(folder: Path | None) -> bool:
    return folder is not None and (Path(folder) / "config.json").is_file()


def resolve_metric(requested: str, clip_folder: Path | None) -> Metric:
    """`auto` = clip when its weights are in `clip_folder`, else layout; `clip` without them is an error."""
    if requested == "auto":
        return Metric.CLIP if clip_available(clip_folder) else Metric.LAYOUT
    metric = Metric(requested)
    if metric is Metric.CLIP and not clip_available(clip_folder):
        raise FileNotFoundError(
            f"metric clip needs CLIP weights (openai/clip-vit-base-patch32) in {clip_folder}: no registry"
            " reachable here ships them; copy the folder there, or use metric layout (the offline default)"
        )
    return metric
