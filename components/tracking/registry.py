"""The model registry gate: register an evaluated actor, promote it only when it beats the champion.

Every evaluated actor becomes a version of its task's registered model (`registered_name(task)`:
`sweetflow-actor` for the ColBench backend task, `sweetflow-actor-<task>` for any other) whose
source is its HF folder, tagged with its eval metrics, and takes the alias `candidate`. It also
takes `champion` when there is no champion yet, or when its success rate on the eval split is
higher than the champion's (equal success: higher mean score, the graded score in [0, 1]). One
registered model per task means a champion is only ever compared with actors of the same task.
A tie keeps the champion, so a re-run of the same model never churns the alias. Metrics (and
champions' tags) from before `mean_score` existed carry only `tests_passed`, ColBench backend's
mean score, which stands in for it. Uses the project's MLflow store
(components.tracking.store.configure).

Where the model is: with the project's own store (a local database) the version's source is the
HF folder itself. A tracking server (MLFLOW_TRACKING_URI http(s)://...) refuses local paths as
sources (they could name any file on the server), so there the folder is first logged as the
artifacts `model/` of the evaluation's run and the version's source is `runs:/<run>/model`: the
registry then holds the weights, on the server's artifact store. Either way the version carries
the folder's path in the tag `sweetflow.model_path`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODEL_NAME = "sweetflow-actor"  # the ColBench backend task's model (the name from before there were tasks)
DEFAULT_TASK = "colbench-backend"  # the task of runs and metrics that name none
CANDIDATE, CHAMPION = "candidate", "champion"
PATH_TAG = "sweetflow.model_path"  # the registered HF folder, on every version
MODEL_ARTIFACT = "model"  # a tracking server's copy of the folder, in the evaluation's run
KEYS = ("success_rate", "mean_score")  # compared in this order
LEGACY_SCORE = "tests_passed"  # ColBench backend's mean_score under its older name


def registered_name(task: str) -> str:
    """The registered model of `task`'s actors: `sweetflow-actor` for the ColBench backend (the name
    from before there were tasks), else `sweetflow-actor-<task>`."""
    if not task:
        raise ValueError("registered_name needs a task name")
    return MODEL_NAME if task == DEFAULT_TASK else f"{MODEL_NAME}-{task}"


@dataclass(frozen=True)
class GateResult:
    version: str
    promoted: bool
    champion: str  # the champion's version after the gate
    reason: str


def _client():
    from mlflow import MlflowClient

    return MlflowClient()


def _value(tags_or_metrics: dict, key: str):
    """`key`'s value; `tests_passed` stands in for a missing `mean_score` (older callers and champions)."""
    if key == "mean_score" and key not in tags_or_metrics:
        return tags_or_metrics.get(LEGACY_SCORE)
    return tags_or_metrics.get(key)


def _score(tags_or_metrics: dict) -> tuple[float, float]:
    return tuple(float(_value(tags_or_metrics, k)) for k in KEYS)


def current_champion(name: str = MODEL_NAME):
    """The champion model version, or None when the model or the alias does not exist yet."""
    from mlflow.exceptions import MlflowException

    try:
        return _client().get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None


def register(model_dir: Path, run_id: str, metrics: dict, name: str = MODEL_NAME) -> str:
    """A new version for `model_dir` with alias `candidate`; returns the version."""
    from mlflow.exceptions import MlflowException

    missing = [k for k in KEYS if _value(metrics, k) is None]
    if missing:
        raise ValueError(f"cannot register {model_dir}: eval metrics lack {', '.join(missing)}")
    tags = {k: str(float(_value(metrics, k))) for k in KEYS} | {PATH_TAG: str(Path(model_dir).resolve())}
    if LEGACY_SCORE in metrics:
        tags[LEGACY_SCORE] = str(float(metrics[LEGACY_SCORE]))
    client = _client()
    try:
        client.get_registered_model(name)
    except MlflowException:
        try:
            client.create_registered_model(name, description="sweetflow actors of one task, scored on its eval split")
        except MlflowException as exc:  # another run registered it meanwhile
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
    version = client.create_model_version(name, source=_source(client, model_dir, run_id), run_id=run_id, tags=tags)
    client.set_registered_model_alias(name, CANDIDATE, version.version)
    return version.version


def _source(client, model_dir: Path, run_id: str) -> str:
    """The version's source: the folder (a local store), or its copy in the run (a tracking server)."""
    from mlflow import get_tracking_uri

    folder = str(Path(model_dir).resolve())
    if not get_tracking_uri().startswith(("http://", "https://")):
        return folder
    client.log_artifacts(run_id, folder, MODEL_ARTIFACT)
    return f"runs:/{run_id}/{MODEL_ARTIFACT}"


def registered_version(model_dir: Path, name: str = MODEL_NAME):
    """The version already registered for this model folder, or None."""
    folder = str(Path(model_dir).resolve())
    versions = _client().search_model_versions(f"name = '{name}'")
    found = [v for v in versions if v.tags.get(PATH_TAG) == folder or v.source == folder]
    return max(found, key=lambda v: int(v.version), default=None)


def gate(model_dir: Path, run_id: str, metrics: dict, name: str = MODEL_NAME) -> GateResult:
    """Register the evaluated actor as `candidate`; make it `champion` only if it beats the champion.

    `name` is the task's registered model (`registered_name(task)`; the default is the ColBench
    backend's); `metrics` holds success_rate and mean_score (or, from older callers, tests_passed).

    A folder registered before (a re-run whose evaluation DVC skipped) is not registered again: its
    version becomes `candidate` again and the champion is left as it is."""
    champion = current_champion(name)
    known = registered_version(model_dir, name)
    if known is not None:
        _client().set_registered_model_alias(name, CANDIDATE, known.version)
        return GateResult(
            known.version,
            False,
            champion.version if champion else known.version,
            f"already registered as v{known.version}",
        )
    version = register(model_dir, run_id, metrics, name)
    if champion is None:
        _client().set_registered_model_alias(name, CHAMPION, version)
        return GateResult(version, True, version, "no champion yet")
    new, old = _score(metrics), _score(champion.tags)
    if new > old:
        _client().set_registered_model_alias(name, CHAMPION, version)
        return GateResult(version, True, version, f"beats champion v{champion.version}: {new} > {old}")
    return GateResult(version, False, champion.version, f"does not beat champion v{champion.version}: {new} <= {old}")
