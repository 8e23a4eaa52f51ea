"""The Prefect and MLflow UIs driven in headless Chromium (Playwright on Debian's `chromium`): what
the browser test (tests/flows/test_ui_browser.py) and the docs' screenshots (scripts/screenshots.py)
click and read. Every step saves a screenshot into the folder given, so a failed check leaves the page
it failed on.

Both UIs poll their APIs without end, so pages are awaited by the text they must show, never by
network idleness.
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from components.tasks.colbench_frontend.render.browser import find_chromium
from flows.tracking.links import runs_page

ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")  # root here; only loopback pages
WAIT_MS = 60_000  # the longest a page may take to show what it must (2 busy cores, a cold server)
ENDED = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}  # a flow run's final state types


def sweetflow(args: list[str], project: Path, env: dict, log: Path) -> subprocess.Popen:
    """`sweetflow args` started in `project`, in a session of its own (end it with
    flows.runtime.processes.end_group), its output to `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "sweetflow"), *args],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def poll(what: str, timeout_s: float, probe: Callable[[], object]):
    """`probe()` every second until it returns something other than None (returned); AssertionError
    naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (found := probe()) is not None:
            return found
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def prefect_first(url: str, path: str, body: dict, pick: Callable[[dict], bool] = lambda found: True) -> dict | None:
    """The first object a Prefect API filter endpoint (`deployments/filter`, ...) returns that `pick`
    accepts; None when there is none yet."""
    import httpx

    return next((found for found in httpx.post(f"{url}/api/{path}", json=body, timeout=10).json() if pick(found)), None)


def run_from_form(pages: "Pages", prefect_url: str, profile: str, overrides: list[str], timeout_s: float) -> dict:
    """The (one) served deployment run from its page's Custom run form with `profile` and `overrides`;
    the new flow run as the API returns it once it has ended (whatever its state)."""
    import httpx

    deployment = poll("a deployment registered", 120, lambda: prefect_first(prefect_url, "deployments/filter", {}))
    runs = {"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}, "sort": "EXPECTED_START_TIME_DESC"}
    earlier = {run["id"] for run in httpx.post(f"{prefect_url}/api/flow_runs/filter", json=runs, timeout=10).json()}
    pages.custom_run(prefect_url, deployment["id"], profile, overrides)

    def ended(run: dict) -> bool:
        return run["id"] not in earlier and run["state_type"] in ENDED

    return poll("the run ended", timeout_s, lambda: prefect_first(prefect_url, "flow_runs/filter", runs, ended))


class Pages:
    """One browser tab on both UIs; `shot(name)` saves the page as `<shots>/<name>.png`."""

    def __init__(self, page, shots: Path):
        self.page, self.shots = page, shots
        shots.mkdir(parents=True, exist_ok=True)

    def shot(self, name: str, full_page: bool = False) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def see(self, text: str, name: str, exact: bool = False):
        """Wait until `text` shows on the page; screenshot `name` either way (raises on a timeout)."""
        found = self.page.get_by_text(text, exact=exact).first
        try:
            found.wait_for(state="visible", timeout=WAIT_MS)
        finally:
            self.shot(name)
        return found

    # Prefect

    def custom_run(self, prefect_url: str, deployment_id: str, profile: str, overrides: list[str]) -> None:
        """The deployment's page: Run > Custom run, the profile and overrides typed into the form, Submit."""
        page = self.page
        page.goto(f"{prefect_url.rstrip('/')}/deployments/deployment/{deployment_id}")
        page.get_by_role("button", name="Run", exact=True).click(timeout=WAIT_MS)
        page.get_by_text("Custom run").click()
        self._form_field("Profile (Optional)").locator("textarea").fill(profile)
        listed = self._form_field("Overrides (Optional)")
        for override in overrides:
            listed.get_by_role("button", name="Add item").click()
            listed.locator("input, textarea").last.fill(override)
        self.shot("prefect-custom-run-form", full_page=True)
        page.get_by_role("button", name="Submit").click()
        self.see("scheduled to start", "prefect-run-submitted")

    def _form_field(self, label: str):
        prop = self.page.locator(".schema-form-property", has=self.page.get_by_text(label, exact=True)).last
        prop.wait_for(timeout=WAIT_MS)
        return prop

    def flow_run(self, prefect_url: str, flow_run_id: str, task_name: str) -> None:
        """The flow run's page, showing its state and the step task `task_name` in its graph/list."""
        self.page.goto(f"{prefect_url.rstrip('/')}/flow-runs/flow-run/{flow_run_id}")
        self.see("Completed", "prefect-flow-run", exact=True)
        self.see(task_name, "prefect-flow-run-task")

    # MLflow

    def mlflow_runs(self, mlflow_url: str, experiment_id: str, run_name: str, dataset: str) -> None:
        """The experiment's runs table (the view sweetflow's links open), the run listed with its dataset."""
        self.page.goto(runs_page(mlflow_url, experiment_id))
        self.close_assistant()
        self.see(run_name[:20], "mlflow-runs-table")
        self.see(dataset, "mlflow-runs-dataset")

    def mlflow_artifact(self, mlflow_url: str, experiment_id: str, run_id: str, path: str, text: str) -> None:
        """A run's artifact rendered in its Artifacts tab, showing `text`."""
        base = runs_page(mlflow_url, experiment_id, run_id)
        page, query = base.split("?")
        self.page.goto(f"{page}/artifacts/{path}?{query}")
        self.close_assistant()
        self.see(text, f"mlflow-artifact-{Path(path).stem}")

    def mlflow_trace(self, mlflow_url: str, experiment_id: str, run_id: str, feedback: str, span: str) -> None:
        """A run's Traces tab (episodes grouped by task session); the first task's session opened from
        its request, showing the `feedback` of its first episode; that episode's full trace opened,
        showing its span `span`."""
        base = runs_page(mlflow_url, experiment_id, run_id)
        page, query = base.split("?")
        self.page.goto(f"{page}/traces?{query}")
        self.close_assistant()
        self.see("Request", "mlflow-traces", exact=True)
        first = self.page.locator("[role=row]", has=self.page.locator("[role=cell]")).first
        first.locator("[role=cell]").nth(2).locator("a").first.click()
        self.see(f"{feedback}:", "mlflow-trace-session")
        self.page.get_by_text("Turn 1", exact=True).first.hover()
        self.page.get_by_role("button", name="View full trace").first.click(force=True)
        self.see(span, "mlflow-trace-spans", exact=True)

    def close_assistant(self) -> None:
        """Close MLflow 3's assistant side panel (open by default, a third of the page) when it shows."""
        panel = self.page.get_by_text("MLflow Assistant").first
        try:
            panel.wait_for(timeout=15_000)
        except Exception:  # noqa: BLE001 - no panel in this version or view: nothing to close
            return
        close = self.page.locator("button[aria-label='Close']").first
        if close.count():
            close.click()


def _log_failed(response, log: Path) -> None:
    """A request the UIs' pages made that failed (4xx/5xx), with the start of its body, appended to `log`."""
    if response.status >= 400:
        with open(log, "a") as out:
            out.write(f"{response.status} {response.request.method} {response.url}\n  {response.text()[:500]}\n")


@contextmanager
def browser(shots: Path, width: int = 1600, height: int = 1000) -> Iterator[Pages]:
    """Headless Chromium with one tab, as `Pages` saving screenshots into `shots` (and the requests
    that failed into `shots/http-errors.log`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=find_chromium(), args=list(ARGS), headless=True)
        try:
            page = chromium.new_page(viewport={"width": width, "height": height})
            page.on("response", lambda response: _log_failed(response, shots / "http-errors.log"))
            yield Pages(page, shots)
        finally:
            chromium.close()
