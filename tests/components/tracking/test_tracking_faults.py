"""The MLflow store failing: a tracking server that does not answer is refused before any work; a
locked store or a full disk under the artifact store ends tracking with a TrackingError that says
nothing is lost and how to log it (a real sqlite store, real loopback servers, a real file-size limit)."""

from __future__ import annotations

import http.server
import os
import resource
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.tracking import store as tracking
from flows.cli.commands import app
from tests.processes import free_port


@pytest.fixture
def answering_server():
    """A loopback HTTP server that answers every request with 404 (an answer all the same)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_server_that_does_not_answer_is_named_with_what_to_do():
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(tracking.TrackingError, match="does not answer") as err:
        tracking.check_reachable(uri, timeout_s=2)
    assert uri in str(err.value) and "unset MLFLOW_TRACKING_URI" in str(err.value)


def test_any_http_answer_counts_and_local_stores_are_not_probed(answering_server):
    tracking.check_reachable(answering_server)
    tracking.check_reachable("sqlite:////nonexistent/folder/mlflow.db")


def test_eval_with_a_dead_tracking_server_stops_before_any_step(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    out = Path("runs") / f"test-dead-tracking-{os.getpid()}"  # inside the project, as DVC needs
    result = CliRunner().invoke(app, ["eval", "--task", "elicitation", "--limit", "1", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "does not answer" in result.output and not out.exists()


def test_a_locked_store_fails_with_what_is_kept_and_how_to_log_it(mlflow_store):
    import mlflow

    root, experiment = mlflow_store
    holder = sqlite3.connect(root / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, or one hung mid-write
    try:
        with pytest.raises(tracking.TrackingError) as err, tracking.store_errors():
            mlflow.start_run(experiment_id=experiment, run_name="locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "database is locked" in str(err.value) and tracking.RERUN_HINT in str(err.value)


ARTIFACT_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import mlflow
    from components.tracking import store as tracking
    from components.tracking.nested import log_nested_run

    root = Path(sys.argv[1])
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    experiment = tracking.experiment_id("it-faults", root)
    try:
        with tracking.store_errors(disk=True):
            log_nested_run(experiment, None, "full disk", {}, {"n": 1}, {}, files=[root / "big.bin"])
    except tracking.TrackingError as exc:
        print(exc)
    """
)


def test_a_full_disk_under_the_artifact_store_fails_with_what_is_kept(mlflow_store):
    """A file-size limit stands in for a full disk: the artifact's copy fails (EFBIG, as ENOSPC
    would) while the small writes to the store itself go through."""
    root, _ = mlflow_store
    big = root / "big.bin"
    big.write_bytes(b"x" * (4 << 20))
    limit = 2 << 20
    assert (root / "mlflow.db").stat().st_size < limit // 2  # the store's own writes fit under it

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, "-c", ARTIFACT_WRITER, str(root)], capture_output=True, text=True, preexec_fn=limited
    )
    assert proc.returncode == 0, proc.stderr
    assert "MLflow tracking failed (OSError" in proc.stdout and tracking.RERUN_HINT in proc.stdout
    assert big.stat().st_size == 4 << 20  # the step's own output is untouched
