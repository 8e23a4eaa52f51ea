"""`sweetflow render`: a page rendered exactly as the ColBench frontend scorer and designer see it.
Registers itself on flows.cli.app's `app`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from flows.cli.app import SERVICES, app, fail


@app.command("render", rich_help_panel=SERVICES)
def render(
    html: Path = typer.Option(..., help="HTML file (a page, or a message holding one)"),
    out: Path = typer.Option(..., help="PNG to write (full page, cut at the settings' max height)"),
) -> None:
    """Render a page offline (params.yaml `frontend`: local Tailwind, placeholder images, no network);
    prints {"out", "width", "height", "failed", "elements"}."""
    from components.config.sections import load_section
    from components.tasks.colbench_frontend.config import FrontendConfig
    from components.tasks.colbench_frontend.render.browser import Renderer, RenderSettings
    from components.tasks.colbench_frontend.render.routes import WebAssets
    from components.tasks.colbench_frontend.task import extract_html

    if not html.is_file():
        fail(f"{html} not found")
    text = html.read_text(errors="replace")
    cfg = load_section(FrontendConfig, "frontend")
    try:
        assets = WebAssets(cfg.assets_dir)
        with Renderer(assets, pages=1, settings=RenderSettings(timeout_s=cfg.render_timeout_s)) as renderer:
            (snapshot,) = renderer.snapshot_many([extract_html(text) or text])
    except FileNotFoundError as exc:  # no Chromium, or no Tailwind files: the message says how
        fail(str(exc))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(snapshot.png)
    from PIL import Image

    width, height = Image.open(out).size
    summary = {"out": str(out), "width": width, "height": height, "failed": snapshot.failed}
    typer.echo(json.dumps(summary | {"elements": len(snapshot.layout.elements)}))
