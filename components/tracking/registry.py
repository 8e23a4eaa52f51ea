"""The model registry gate: register an evaluated actor, promote it only when it beats the champion.

Every evaluated actor becomes a version of the registered model (default `sweetflow-actor`) whose
source is its HF folder, tagged with its eval metrics, and takes the alias `candidate`. It also
takes `champion` when there is no champion yet, or when its success rate on the eval split is
higher than the champion's (equal success: higher tests passed). A tie keeps the champion, so a
re-run of the same model never churns the alias. Uses the project's MLflow store
(components.tracking.store.configure).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODEL_NAME = "sweetflow-actor"
CANDIDATE, CHAMPION = "candidate", "champion"
KEYS = ("success_rate", "tests_passed")


@dataclass(frozen=True)
class GateResult:
    version: str
    promoted: bool
    champion: str  # the champion's version after the gate
    reason: str


def _client():
    from mlflow import MlflowClient

    return MlflowClient()


def _score(tags_or_metrics: dict) -> tuple[float, float]:
    return tuple(float(tags_or_metrics[k]) for k in KEYS)


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

    missing = [k for k in KEYS if k not in metrics]
    if missing:
        raise ValueError(f"cannot register {model_dir}: eval metrics lack {', '.join(missing)}")
    client = _client()
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="SWEET-RL actors evaluated on ColBench's eval split")
    version = client.create_model_version(
        name, source=str(Path(model_dir).resolve()), run_id=run_id, tags={k: str(float(metrics[k])) for k in KEYS}
    ).version
    client.set_registered_model_alias(name, CANDIDATE, version)
    return version


def registered_version(model_dir: Path, name: str = MODEL_NAME):
    """The version already registered for this model folder, or None."""
    source = str(Path(model_dir).resolve())
    found = [v for v in _client().search_model_versions(f"name = '{name}'") if v.source == source]
    return max(found, key=lambda v: int(v.version), default=None)


def gate(model_dir: Path, run_id: str, metrics: dict, name: str = MODEL_NAME) -> GateResult:
    """Register the evaluated actor as `candidate`; make it `champion` only if it beats the champion.

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
