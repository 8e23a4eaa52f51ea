"""MLflow tracking: the local store, runs with provenance tags, readable dialogue samples.

Store: sqlite at mlflow/mlflow.db and artifacts under mlflow/artifacts (both git-ignored), unless
MLFLOW_TRACKING_URI points elsewhere (e.g. a team server). Every run is tagged with the git commit
and the hash of dvc.lock when present.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from components.data.records import Trajectory

STORE_DIR = Path("mlflow")
CODE_ROOT = Path(__file__).resolve().parents[1]  # the checkout this code runs from
REACH_TIMEOUT_S = 10.0
RERUN_HINT = (
    "Nothing a step wrote is lost: its outputs stay on disk and DVC has recorded every finished step. "
    "Run the same command again when the store answers: the finished steps are skipped and logged then."
)


class TrackingError(RuntimeError):
    """The MLflow store did not answer or refused a write; the message says what is kept and what to do."""


def configure(root: Path = Path(".")) -> str:
    """Point MLflow at the project store (or MLFLOW_TRACKING_URI) and return the tracking URI;
    TrackingError at once when a tracking server does not answer (MLflow itself would retry each
    request for minutes, after the steps have run)."""
    import mlflow

    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        store = (root / STORE_DIR).resolve()
        store.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{store / 'mlflow.db'}"
        create_once(uri, store / ".create.lock")
    check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    return uri


def create_once(uri: str, lock: Path) -> None:
    """Open the project's sqlite store under an exclusive file lock, so that its tables are created
    (MLflow migrates a new store on first use) by one process at a time: two runs starting together
    on a new project both migrated it, and one failed ("table _alembic_tmp_experiments already exists")."""
    import fcntl

    from mlflow import MlflowClient

    with open(lock, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)


def check_reachable(uri: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """TrackingError when `uri` is an HTTP(S) tracking server that gives no answer (any HTTP response
    counts as one: a proxy's 404 or a 401 is the server's business, not an outage)."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as exc:
        raise TrackingError(
            f"the MLflow tracking server {uri} (MLFLOW_TRACKING_URI) does not answer "
            f"({type(exc).__name__}: {_first_line(exc)}): start it, or unset MLFLOW_TRACKING_URI to track "
            f"into the project's own store {STORE_DIR}/mlflow.db"
        ) from exc


def store_error_types(disk: bool = False) -> tuple[type[BaseException], ...]:
    """The exceptions of an MLflow store (a REST store wraps its HTTP failures in MlflowException, a
    SQL store lets SQLAlchemy's through), and OSError with `disk` (a local artifact store's copy on a
    full disk)."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    return (MlflowException, SQLAlchemyError) + ((OSError,) if disk else ())


@contextmanager
def store_errors(disk: bool = False) -> Iterator[None]:
    """The MLflow store's failures (OSError too with `disk`) raised as TrackingError, whose message
    says that the steps' outputs are kept and how they get logged."""
    try:
        yield
    except store_error_types(disk) as exc:
        raise TrackingError(f"MLflow tracking failed ({type(exc).__name__}: {_first_line(exc)}). {RERUN_HINT}") from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the MLflow UI opens on its runs


def experiment_id(name: str, root: Path = Path(".")) -> str:
    """The experiment's id, creating it with artifacts under mlflow/artifacts/ when new. It is marked a
    model-training experiment (EXPERIMENT_KIND) unless it says otherwise: MLflow 3's UI opens other
    experiments on the GenAI overview, empty here although every step's runs are in it."""
    import mlflow
    from mlflow.exceptions import MlflowException

    found = mlflow.get_experiment_by_name(name)
    if found is None:
        artifacts = (root / STORE_DIR / "artifacts").resolve()
        artifacts.mkdir(parents=True, exist_ok=True)
        try:
            return mlflow.create_experiment(name, artifact_location=artifacts.as_uri(), tags=dict([EXPERIMENT_KIND]))
        except MlflowException as exc:  # another run created it meanwhile
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            found = mlflow.get_experiment_by_name(name)
    if EXPERIMENT_KIND[0] not in found.tags:
        mlflow.MlflowClient().set_experiment_tag(found.experiment_id, *EXPERIMENT_KIND)
    return found.experiment_id


def provenance_tags(root: Path = Path(".")) -> dict[str, str]:
    """The code's git commit (and dirty flag), and the sha256 of the project's dvc.lock if any."""
    tags: dict[str, str] = {}
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CODE_ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        tags["git_commit"] = proc.stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=CODE_ROOT, capture_output=True, text=True
        ).stdout.strip()
        tags["git_dirty"] = str(bool(dirty)).lower()
    lock = root / "dvc.lock"
    if lock.exists():
        tags["dvc_lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    return tags


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> flat `a.b` keys with string values (MLflow params)."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = str(value)
    return flat


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics dict (nested dicts flattened with `.`)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in numeric(value).items()})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def render_dialogue(traj: Trajectory) -> str:
    """One episode as markdown: request, each agent turn and human reply, answer and score."""
    lines = [
        f"### task {traj.task_index} (`{traj.task_id}`), seed {traj.run_seed}",
        f"score {traj.score} ({traj.passed}/{traj.total}), success {traj.success}, "
        f"answered {traj.answered}, turns {len(traj.turns)}",
        "",
    ]
    for msg in traj.messages:
        if msg["role"] == "system":
            continue
        who = {"user": "Human", "assistant": "Agent"}[msg["role"]]
        lines += [f"**{who}:**", "", "```", msg["content"], "```", ""]
    if traj.error:
        lines += [f"_scorer: {traj.error}_", ""]
    return "\n".join(lines)


def render_dialogues(trajs: Iterable[Trajectory]) -> str:
    return "\n---\n\n".join(render_dialogue(t) for t in trajs)
