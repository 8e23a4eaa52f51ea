"""Deterministic stand-ins for the photos ColBench pages load (picsum.photos id 48, any size).

The same size always gives the same PNG bytes, so a reference page and an agent's page that ask
for the same image get the same pixels and the image adds no noise to their similarity. The image
is a smooth two-colour diagonal gradient with a darker band across its lower third: photo-like
(not a flat block that a page's background could hide), cheap to make at any size.
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np

TOP_LEFT = np.array([96.0, 125.0, 160.0])  # muted blue
BOTTOM_RIGHT = np.array([190.0, 175.0, 150.0])  # warm grey


@lru_cache(maxsize=128)
def placeholder_png(width: int, height: int) -> bytes:
    """A width x height RGB PNG; identical bytes for identical sizes."""
    from PIL import Image

    if width < 1 or height < 1:
        raise ValueError(f"placeholder size must be positive, got {width}x{height}")
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    mix = ((xs + ys) / 2.0)[..., None]
    pixels = TOP_LEFT * (1.0 - mix) + BOTTOM_RIGHT * mix
    band = (ys > 0.62) & (ys < 0.8)
    pixels = np.where(band[..., None], pixels * 0.7, pixels)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), "RGB").save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()
