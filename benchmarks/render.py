"""Benchmark: offline page rendering and visual scoring for ColBench frontend.

Reads: data/colbench/frontend_test.jsonl (the first --n reference pages) and vendor/web (the local
Tailwind files). Writes: benchmarks/results/render.json (and prints it).

- pool: one long-lived Chromium with --pages pages (colbench_frontend/render/browser.py Renderer), no cache:
  pages rendered per second over the --n pages.
- fresh: a new browser per page (what a renderer without a pool pays), over the first --fresh pages.
  Both figures are the best of --repeat interleaved runs; the ratio pool/fresh is reported.
- scoring: `layout_similarity` pairs per second on the rendered pages (one process).
- metric sanity: for each page, its similarity to a blank page, to a small edit of itself (the
  first `text-3xl` one size smaller and the first `p-4` doubled) and to the next reference page,
  under `layout` and under greyscale SSIM (the metric first tried and dropped: see
  components/tasks/colbench_frontend/visual.py), with how often each ordering holds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from components.tasks.colbench_frontend.render.browser import Renderer
from components.tasks.colbench_frontend.render.routes import WebAssets
from components.tasks.colbench_frontend.visual import layout_similarity

REPO = Path(__file__).resolve().parents[1]
BLANK = "<html><body></body></html>"


def ssim(png_a: bytes, png_b: bytes, width: int = 320) -> float:
    """Greyscale SSIM (Gaussian window 11, sigma 1.5) at `width` px, shorter page padded white."""
    from PIL import Image

    greys = []
    for png in (png_a, png_b):
        image = Image.open(io.BytesIO(png)).convert("L")
        height = max(1, round(image.height * width / image.width))
        greys.append(np.asarray(image.resize((width, height), Image.BILINEAR), dtype=np.float32))
    rows = max(g.shape[0] for g in greys)
    x, y = (
        torch.from_numpy(np.pad(g, ((0, rows - g.shape[0]), (0, 0)), constant_values=255.0))[None, None] for g in greys
    )
    offsets = torch.arange(11, dtype=torch.float32) - 5
    line = torch.exp(-(offsets**2) / (2 * 1.5**2))
    window = ((line / line.sum())[:, None] * (line / line.sum())[None, :])[None, None]
    mu_x, mu_y = F.conv2d(x, window), F.conv2d(y, window)
    var_x, var_y = F.conv2d(x * x, window) - mu_x**2, F.conv2d(y * y, window) - mu_y**2
    cov = F.conv2d(x * y, window) - mu_x * mu_y
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    value = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return float(value.mean().clamp(0.0, 1.0))


def edit(page: str) -> str:
    return page.replace("text-3xl", "text-xl", 1).replace("p-4", "p-8", 1)


def pool_rate(assets: WebAssets, pages: list[str], n_pages: int) -> tuple[float, float, list[bytes]]:
    start = time.perf_counter()
    with Renderer(assets, pages=n_pages) as renderer:
        started = time.perf_counter()
        pngs = renderer.render_many(pages)
        done = time.perf_counter()
    return len(pages) / (done - started), started - start, pngs


def fresh_rate(assets: WebAssets, pages: list[str]) -> float:
    start = time.perf_counter()
    for page in pages:
        with Renderer(assets, pages=1) as renderer:
            renderer.render(page)
    return len(pages) / (time.perf_counter() - start)


def sanity(metric, refs: list[bytes], edits: list[bytes], blank: bytes) -> dict:
    n = len(refs)
    to_blank = [metric(r, blank) for r in refs]
    to_edit = [metric(r, e) for r, e in zip(refs, edits)]
    to_other = [metric(refs[i], refs[(i + 1) % n]) for i in range(n)]
    return {
        "mean_vs_blank": round(statistics.mean(to_blank), 3),
        "mean_vs_edit": round(statistics.mean(to_edit), 3),
        "mean_vs_other_page": round(statistics.mean(to_other), 3),
        "edit_above_blank": f"{sum(e > b for e, b in zip(to_edit, to_blank))}/{n}",
        "other_page_above_blank": f"{sum(o > b for o, b in zip(to_other, to_blank))}/{n}",
        "self": round(min(metric(r, r) for r in refs), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=30, help="reference pages")
    parser.add_argument("--fresh", type=int, default=8, help="pages rendered with a fresh browser each")
    parser.add_argument("--pages", type=int, default=2, help="the pool's pages")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    records = [json.loads(line) for line, _ in zip((REPO / "data/colbench/frontend_test.jsonl").open(), range(args.n))]
    refs = [r["ground_truth"] for r in records]
    assets = WebAssets(REPO / "vendor/web")
    pool, fresh, start_s = [], [], []
    for _ in range(args.repeat):
        rate, started, pngs = pool_rate(assets, refs, args.pages)
        pool.append(rate)
        start_s.append(started)
        fresh.append(fresh_rate(assets, refs[: args.fresh]))
    with Renderer(assets, pages=args.pages) as renderer:
        edits = renderer.render_many([edit(r) for r in refs])
        blank = renderer.render(BLANK)
    start = time.perf_counter()
    pairs = [(pngs[i], pngs[(i + 1) % len(pngs)]) for i in range(len(pngs))] * 3
    for a, b in pairs:
        layout_similarity(a, b)
    scoring_rate = len(pairs) / (time.perf_counter() - start)
    result = {
        "pages": args.n,
        "cpu": os.cpu_count(),
        "pool_pages_per_s": round(max(pool), 2),
        "pool_browser_start_s": round(statistics.median(start_s), 2),
        "fresh_browser_pages_per_s": round(max(fresh), 2),
        "pool_vs_fresh": round(max(pool) / max(fresh), 1),
        "layout_pairs_per_s": round(scoring_rate, 1),
        "metric_sanity": {
            "layout": sanity(layout_similarity, pngs, edits, blank),
            "ssim": sanity(ssim, pngs, edits, blank),
        },
    }
    out = REPO / "benchmarks/results/render.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
