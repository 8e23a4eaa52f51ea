"""ColBench frontend: the page taken as the answer, the offline designer's replies, and scores on
real reference pages rendered offline."""

from __future__ import annotations

import json

import pytest

from components.episodes.simulators import SimRequest
from components.tasks.colbench_frontend.config import FrontendConfig
from components.tasks.colbench_frontend.simulator import LOOKS_RIGHT, NO_PAGE, colour_name
from components.tasks.colbench_frontend.task import ColbenchFrontend, extract_html
from tests.conftest import REPO


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frontend")
    lines = (REPO / "data/colbench/frontend_test.jsonl").open().readlines()[:2]
    (folder / "tasks.jsonl").write_text("".join(lines))
    cfg = FrontendConfig(tasks=folder / "tasks.jsonl", assets_dir=REPO / "vendor/web", render_cache=None)
    built = ColbenchFrontend({"frontend": cfg})
    yield built
    built.close()


@pytest.fixture(scope="module")
def record(task):
    return task.records(task_split_all())[0]


def task_split_all():
    from components.data.split import Split

    return Split.all


def test_extract_html_takes_the_page_out_of_a_message():
    assert extract_html("Here:\n<html><body>x</body></html>\nthanks") == "<html><body>x</body></html>"
    assert extract_html("only <body class='a'>b</body> here") == "<body class='a'>b</body>"
    assert extract_html("What colour do you like?") is None


def test_the_answer_is_the_latest_page_shown(task):
    first, second = "<html><body>one</body></html>", "<html><body>two</body></html>"
    assert task.final_answer([f"draft {first}", f"draft {second}", "I WANT TO ANSWER: as above"]) == second
    assert task.final_answer([f"draft {first}", f"I WANT TO ANSWER: {second}"]) == second
    assert task.final_answer(["no page", "I WANT TO ANSWER: nothing"]) == "nothing"


def test_metric_key_names_the_metric_and_reply_cut_is_the_tasks(task):
    assert task.score_alias == "similarity_layout"
    assert task.reply_cut(400) == 1000


def _reply(task, record, message: str) -> str:
    return task.offline_simulator("visual", 1000).reply([SimRequest(record, [(message, None)])])[0]


def test_the_designer_describes_the_wanted_page_when_shown_none(task, record):
    reply = _reply(task, record, "What style do you like?")
    assert reply.startswith(NO_PAGE)
    assert "background" in reply and "Healthcare Provider" in reply
    assert len(reply) <= 1000


def test_the_designer_says_what_differs_and_when_it_is_right(task, record):
    assert _reply(task, record, f"Draft:\n{record.ground_truth}") == LOOKS_RIGHT
    recoloured = record.ground_truth.replace('class="bg-gray-100"', 'class="bg-red-500"', 1)
    assert "background should be very light grey, not red" in _reply(task, record, recoloured)
    no_heading = record.ground_truth.replace("Healthcare Provider</h1>", "</h1>", 1)
    assert "Missing: 'Healthcare Provider'" in _reply(task, record, no_heading)
    assert "I don't want: 'Welcome'" in _reply(task, record, "<html><body><p>Welcome</p></body></html>")


def test_scores_order_the_reference_an_edit_and_a_blank_page(task, record):
    edited = record.ground_truth.replace("text-3xl", "text-xl", 1)
    reference, edit, blank = task.score(
        [record], [(0, record.ground_truth), (0, edited), (0, "<html><body></body></html>")]
    )
    assert reference.score == 1.0 and reference.success
    assert 1.0 > edit.score > blank.score > 0.0
    assert not blank.success and blank.total == 1
    (text,) = task.score([record], [(0, "Healthcare Provider: a clean design, green header.")])
    assert text.score == 0.0 and "no page" in text.error


def test_colour_names():
    assert colour_name((255, 255, 255)) == "white" and colour_name(None) == "white"
    assert colour_name((240, 70, 70)) == "red" and colour_name((30, 60, 140)) == "dark blue"


def test_records_are_the_frontend_rows(task):
    rows = [json.loads(line) for line in task.tasks_file(task_split_all()).open()]
    assert [r.problem_description for r in task.records(task_split_all())] == [r["problem_description"] for r in rows]


def test_the_llm_designer_gets_both_screenshots_from_an_openai_endpoint(record, tmp_path):
    import base64
    import io

    from PIL import Image

    from components.engines.openai_engine import OpenAIEngine
    from components.episodes.simulators import LLMSimulator
    from tests.openai_server import FakeServer, start_server, stop_server

    cfg = FrontendConfig(
        tasks=tmp_path / "unused.jsonl", assets_dir=REPO / "vendor/web", render_cache=None, designer_view="screenshots"
    )
    task = ColbenchFrontend({"frontend": cfg})
    with pytest.raises(ValueError, match="vision model"):
        task.check_simulator_engine("vllm")
    task.check_simulator_engine("openai")
    server, url = start_server()
    try:
        designer = LLMSimulator(OpenAIEngine(url, max_retries=0), task, max_tokens=64, max_chars=1000)
        draft = "<html><body><h1>Mine</h1></body></html>"
        replies = designer.reply([SimRequest(record, [(f"Here: {draft}", None)]), SimRequest(record, [("hi", None)])])
        calls = [call["messages"] for call in FakeServer.calls[-2:]]  # sent concurrently: any order
        none = next(m for m in calls if "not shown a page" in json.dumps(m))
        shown = next(m for m in calls if m is not none)
    finally:
        stop_server(server)
        task.close()
    assert all(0 < len(r) <= 1000 for r in replies)
    images = [[c for c in m[0]["content"] if c["type"] == "image_url"] for m in (shown, none)]
    assert [len(i) for i in images] == [2, 1]  # the draft and the reference; the reference alone
    png = base64.b64decode(images[0][0]["image_url"]["url"].split(",", 1)[1])
    assert Image.open(io.BytesIO(png)).size[0] == 1280
