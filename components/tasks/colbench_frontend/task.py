"""ColBench frontend design behind the task interface (docs/algorithms.md; the authors' design environment).

Reads: the tasks file of params `frontend` (data/colbench/frontend_test.jsonl, DVC-tracked, split by
hash), and renders pages offline (render/: Chromium, local Tailwind, placeholder images).
The agent sees only the short description. Each turn it may show a draft page (HTML with Tailwind
inside `<html>`); the simulated human compares the rendered draft with the rendered reference and
says how they differ (reply cut to `frontend.sim_max_chars`, 1000). A message with
`I WANT TO ANSWER:` ends the episode. As in the authors' environment, the design scored is the
latest page the agent showed in any turn (its answer's page when the answer holds one). An answer
without a page (`<html>` or `<body>`) scores 0: the authors score it as a black image, and text
rendered on white would otherwise look much like a plain reference page (measured: the default
model's gibberish scored 0.53-0.97 under `layout`, one above the success threshold). The score is the visual
similarity of the two screenshots (components/tasks/colbench_frontend/visual.py: `clip` with local weights, else
`layout`); the metric's name is part of the score's metric key (`similarity_layout` or
`similarity_clip`, beside `mean_score`), so numbers of different metrics never share a column.
`success` is a similarity of at least `frontend.success_threshold`. The critic's training-time
information c is the reference HTML.

The `llm` designer: with `frontend.designer_view: screenshots` (the protocol) it gets one message
holding the agent's rendered page (or a line saying there is none) and the rendered reference as
images, as the authors send them, and must be a vision model behind an OpenAI-compatible endpoint;
with `html` (the default, for the text-only local engines) it gets the reference page's HTML as
its hidden information and the dialogue. Offline, the `visual` simulator
(components/tasks/colbench_frontend/simulator.py) compares the rendered pages' layouts instead.
Prompts are our own wording of the protocol.
"""

from __future__ import annotations

import atexit
import base64
import re
from pathlib import Path
from typing import Sequence

from components.data.records import ScoreResult
from components.data.split import Split, select
from components.data.tasks import FrontendTask
from components.tasks.base import ANSWER_MARKER, Dialogue, Task, chat_for_simulator
from components.tasks.colbench_frontend.render.layout import PageLayout

AGENT_SYSTEM_PROMPT = (
    "You are a web designer working with a client who wants a web page. Their request is short and "
    "leaves out what only they can see in their mind. In each message you may show one draft page: "
    "complete HTML inside an <html> tag, styled with Tailwind CSS classes (load it with "
    '<script src="https://cdn.tailwindcss.com"></script>). The client sees your draft rendered and '
    "tells you how it differs from the page they want. For images use only "
    "https://picsum.photos/id/48/W/H with W and H the width and height. You have at most {max_turns} "
    "messages. When the page is right, reply with '" + ANSWER_MARKER + "' followed by the final HTML."
)
SIMULATOR_PROMPT = (
    "You are a client who asked a web designer for a web page. Your request was:\n{problem}\n\n"
    "The page you have in mind, as HTML only you know:\n{hidden}\n\n"
    "The designer's messages come to you as user messages and may contain a draft page as HTML. "
    "Say briefly how the draft differs from the page you have in mind, most important differences "
    "first (layout, colours, sizes, text); if there is no draft, describe what you want. Never show HTML."
)
VISION_PROMPT = (
    "You are a client who asked a web designer for a web page: {problem}\n"
    "You will see the designer's current page, then the page you have in mind. Say briefly how the "
    "designer's page differs from yours, the most visible differences first, concretely (e.g. the "
    "header should be taller, the text centred, the background dark blue)."
)
_HTML = re.compile(r"<html.*?>.*?</html>", re.DOTALL | re.IGNORECASE)
_BODY = re.compile(r"<body.*?>.*?</body>", re.DOTALL | re.IGNORECASE)


def extract_html(message: str) -> str | None:
    """The page in a message: its first `<html>...</html>`, else its first `<body>...</body>`."""
    match = _HTML.search(message) or _BODY.search(message)
    return match.group(0) if match else None


def _image(png: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


class ColbenchFrontend(Task):
    name = "colbench-frontend"
    record = FrontendTask
    sections = ("frontend",)
    file_key = "frontend.tasks"
    offline_simulators = ("visual",)
    pair_rule = "gap"  # similarities are never exactly 1: pairs by score gap, as the authors' frontend script

    def __init__(self, configs) -> None:
        from components.tasks.colbench_frontend.visual import resolve_metric

        super().__init__(configs)
        cfg = self.configs["frontend"]
        self.metric = resolve_metric(cfg.metric, cfg.clip_model)
        self.score_alias = f"similarity_{self.metric.value}"
        self._renderer = None
        self._similarity = None

    # --- records and split -----------------------------------------------------------------------
    def tasks_file(self, split: Split) -> Path:
        return self.configs["frontend"].tasks

    def split_indices(self, records: Sequence[FrontendTask], split: Split) -> list[int]:
        cfg = self.configs["frontend"]
        return select(records, split, cfg.eval_fraction, cfg.split_salt)

    # --- the agent and the human -----------------------------------------------------------------
    def agent_messages(self, record: FrontendTask, max_turns: int) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": AGENT_SYSTEM_PROMPT.format(max_turns=max_turns)},
            {"role": "user", "content": record.problem_description},
        ]

    def final_answer(self, actions: Sequence[str]) -> str:
        for action in reversed(actions):
            page = extract_html(action)
            if page is not None:
                return page
        return super().final_answer(actions)

    def reply_cut(self, episode_cut: int) -> int:
        return self.configs["frontend"].sim_max_chars

    def simulator_messages(self, record: FrontendTask, dialogue: Dialogue) -> list[dict]:
        if self.configs["frontend"].designer_view == "screenshots":
            return self._screenshot_messages(record, extract_html(dialogue[-1][0]))
        system = SIMULATOR_PROMPT.format(problem=record.problem_description, hidden=record.ground_truth)
        return chat_for_simulator(system, dialogue)

    def _screenshot_messages(self, record: FrontendTask, draft: str | None) -> list[dict]:
        """The protocol's designer input: one message with the two rendered pages as images (the
        authors send the images alone, without the dialogue's text)."""
        pages = [record.ground_truth] + ([draft] if draft is not None else [])
        shots = self.renderer().snapshot_many(pages)
        content = [{"type": "text", "text": VISION_PROMPT.format(problem=record.problem_description)}]
        if draft is None:
            content.append({"type": "text", "text": "The designer has not shown a page yet."})
        else:
            content += [{"type": "text", "text": "The designer's current page:"}, _image(shots[1].png)]
        content += [{"type": "text", "text": "The page you have in mind:"}, _image(shots[0].png)]
        return [{"role": "user", "content": content}]

    def check_simulator_engine(self, engine_kind: str) -> None:
        if self.configs["frontend"].designer_view == "screenshots" and engine_kind != "openai":
            raise ValueError(
                "frontend.designer_view screenshots sends images: the llm designer must be a vision model behind "
                "an OpenAI-compatible endpoint (--simulator-model URL --simulator-engine openai), not "
                f"'{engine_kind}'; or set frontend.designer_view=html"
            )

    def offline_simulator(self, kind: str, max_chars: int):
        from components.tasks.colbench_frontend.simulator import VisualSimulator

        if kind != "visual":
            raise ValueError(f"task {self.name} has no offline simulator '{kind}' (it has: visual)")
        return VisualSimulator(self, max_chars=max_chars)

    def dialogue_layouts(self, requests: Sequence) -> list[tuple[PageLayout | None, PageLayout]]:
        """(the page the agent just showed, or None; the reference page) for each simulator request."""
        drafts = [extract_html(r.dialogue[-1][0]) for r in requests]
        shots = self._snapshots([r.task.ground_truth for r in requests] + [d for d in drafts if d is not None])
        return [
            (shots[d].layout if d is not None else None, shots[r.task.ground_truth].layout)
            for r, d in zip(requests, drafts)
        ]

    # --- scoring and training --------------------------------------------------------------------
    def score(self, records: Sequence[FrontendTask], answers: Sequence[tuple[int, str]]) -> list[ScoreResult]:
        in_range = [0 <= i < len(records) for i, _ in answers]
        pages = [extract_html(a) if ok else None for (_, a), ok in zip(answers, in_range)]
        shown = [(i, page) for (i, _), page in zip(answers, pages) if page is not None]
        shots = self._snapshots([records[i].ground_truth for i, _ in shown] + [page for _, page in shown])
        results = []
        for (index, _), ok, page in zip(answers, in_range, pages):
            if not ok:
                results.append(ScoreResult.failed(index, 1, f"task index {index} out of range ({len(records)} tasks)"))
            elif page is None:
                results.append(ScoreResult.failed(index, 1, "no page (<html> or <body>) in the answer"))
            else:
                results.append(self._score_page(index, shots[page], shots[records[index].ground_truth]))
        return results

    def _score_page(self, index: int, mine, wanted) -> ScoreResult:
        value = min(max(self.similarity(mine.png, wanted.png), 0.0), 1.0)
        success = value >= self.configs["frontend"].success_threshold
        error = "the page failed to render (blank)" if mine.failed else None
        return ScoreResult(index=index, score=value, passed=int(success), total=1, success=success, error=error)

    def similarity(self, png_a: bytes, png_b: bytes) -> float:
        from components.tasks.colbench_frontend.visual import ClipSimilarity, Metric, layout_similarity

        if png_a == png_b:
            return 1.0
        if self.metric is Metric.LAYOUT:
            return layout_similarity(png_a, png_b)
        if self._similarity is None:
            self._similarity = ClipSimilarity(self.configs["frontend"].clip_model)
        return self._similarity(png_a, png_b)

    def training_info(self, record: FrontendTask) -> str:
        return record.ground_truth

    def reference_answer(self, record: FrontendTask) -> str:
        return record.ground_truth

    # --- the renderer ----------------------------------------------------------------------------
    def _snapshots(self, pages: list[str]) -> dict:
        """Each distinct page's snapshot, by its HTML (no browser is started for none)."""
        return dict(zip(pages, self.renderer().snapshot_many(pages))) if pages else {}

    def renderer(self):
        """The task's one Chromium (started on first use, closed at exit or by `close`)."""
        if self._renderer is None:
            from components.tasks.colbench_frontend.render.browser import Renderer, RenderSettings
            from components.tasks.colbench_frontend.render.routes import WebAssets

            cfg = self.configs["frontend"]
            settings = RenderSettings(timeout_s=cfg.render_timeout_s)
            self._renderer = Renderer(
                WebAssets(cfg.assets_dir), pages=cfg.render_pages, settings=settings, cache_dir=cfg.render_cache
            )
            atexit.register(self.close)
        return self._renderer

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
