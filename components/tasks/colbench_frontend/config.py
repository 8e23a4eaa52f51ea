"""Configuration of the ColBench frontend design task (params.yaml section `frontend`).

Reads and writes nothing. Defaults equal params.yaml's `frontend` section. The task
(components/tasks/colbench_frontend/task.py) reads `tasks`, renders pages offline with
components/tasks/colbench_frontend/render (Chromium, local Tailwind files in `assets_dir`) and scores them with
components/tasks/colbench_frontend/visual.py.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from components.config.sections import _Section


class FrontendConfig(_Section):
    """The frontend tasks, how their pages are rendered and how designs are compared."""

    tasks: Path = Field(Path("data/colbench/frontend_test.jsonl"), description="ColBench frontend tasks (DVC-tracked)")
    eval_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of tasks in the eval split (by hash)")
    split_salt: str = Field("sweetflow-v1", min_length=1, description="salt of the split hash")
    metric: str = Field(
        "auto",
        pattern="^(auto|clip|layout)$",
        description="design similarity: clip (the benchmark's; needs local weights in clip_model) | layout "
        "(offline colour-layout agreement) | auto (clip when its weights are there, else layout)",
    )
    clip_model: Path = Field(
        Path("models/clip-vit-base-patch32"), description="local folder of openai/clip-vit-base-patch32"
    )
    success_threshold: float = Field(
        0.95, gt=0.0, le=1.0, description="a design counts as a success when its similarity reaches this"
    )
    designer_view: str = Field(
        "html",
        pattern="^(html|screenshots)$",
        description="what the llm designer is given: html (the reference page's HTML and the dialogue, for "
        "text-only engines) | screenshots (the protocol: the two rendered pages as images, for a vision "
        "model behind an OpenAI-compatible endpoint, --simulator-engine openai)",
    )
    sim_max_chars: int = Field(1000, ge=1, description="the simulated designer's reply cut (ColBench frontend: 1000)")
    assets_dir: Path = Field(Path("vendor/web"), description="local Tailwind files (scripts/web_assets.sh)")
    render_pages: int = Field(2, ge=1, le=32, description="pages rendered at once (one Chromium)")
    render_timeout_s: float = Field(10.0, gt=0.0, le=120.0, description="time limit per page")
    render_cache: Path | None = Field(
        Path("data/cache/render"), description="screenshot cache by content hash (None = no cache)"
    )
