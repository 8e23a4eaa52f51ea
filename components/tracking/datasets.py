"""A step's DVC-versioned input files as MLflow dataset inputs, so that the runs table's Dataset column
says which data version each run read.

Reads the dvc.lock beside a run's generated dvc.yaml (DVC writes it when the stage runs: every dep
with its md5) and the project's DVC config (the default remote). A stage's data inputs are its
locked deps that are files and not code (`.py`): task files, trajectories, pairs, candidates; model
folders are left out (they are models, not data). Each becomes a dataset named by its path, whose
digest is the DVC md5 and whose source is `dvc` with the path, the md5 and the remote's URL: two
runs that read different versions of a file show different digests.
"""

from __future__ import annotations

import configparser
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class DataInput:
    """One versioned input file of a stage."""

    path: str  # relative to the project root, as dvc.lock names it
    md5: str
    size: int | None
    remote: str | None  # the DVC remote's URL, where `dvc push` keeps it


def default_remote(project: Path = Path(".")) -> str | None:
    """The URL of the project's default DVC remote (.dvc/config, then .dvc/config.local), or None; a
    local remote's path made absolute (DVC reads it relative to .dvc/)."""
    parser = configparser.ConfigParser()
    parser.read([project / ".dvc" / "config", project / ".dvc" / "config.local"])
    name = parser.get("core", "remote", fallback=None)
    url = parser.get(f"'remote \"{name}\"'", "url", fallback=None) if name else None
    if url is None or "://" in url:
        return url
    return str((project / ".dvc" / url).resolve())


def stage_inputs(lock: Path, stage: str, remote: str | None = None) -> list[DataInput]:
    """The data files `stage` read as dvc.lock recorded them ([] when the lock or the stage is absent)."""
    if not lock.exists():
        return []
    entry = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(stage) or {}
    out, seen = [], set()
    for dep in entry.get("deps", []):
        path, md5 = dep["path"], str(dep.get("md5") or "")
        if path.endswith(".py") or not md5 or md5.endswith(".dir") or path in seen:
            continue
        seen.add(path)
        out.append(DataInput(path, md5, dep.get("size"), remote))
    return out


def _dvc_source() -> Any:
    """The MLflow dataset source class of a DVC-tracked file (built on first use: importing MLflow is slow)."""
    from mlflow.data.dataset_source import DatasetSource

    class DvcSource(DatasetSource):
        def __init__(self, path: str, md5: str, remote: str | None):
            self.path, self.md5, self.remote = path, md5, remote

        @staticmethod
        def _get_source_type() -> str:
            return "dvc"

        def load(self, **kwargs):
            raise NotImplementedError(f"fetch it with `dvc pull {self.path}` (md5 {self.md5})")

        @staticmethod
        def _can_resolve(raw_source: Any) -> bool:
            return False

        @classmethod
        def _resolve(cls, raw_source: Any) -> "DvcSource":
            raise NotImplementedError

        def to_dict(self) -> dict[str, Any]:
            return {"path": self.path, "md5": self.md5, "remote": self.remote}

        @classmethod
        def from_dict(cls, source_dict: dict[Any, Any]) -> "DvcSource":
            return cls(source_dict["path"], source_dict["md5"], source_dict.get("remote"))

    return DvcSource


def log_inputs(inputs: list[DataInput], context: str, run_id: str | None = None) -> None:
    """Each input as a dataset input of run `run_id` (default: the active run), tagged with `context`."""
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    source = _dvc_source()
    entries = []
    for item in inputs:
        dataset = MetaDataset(source(item.path, item.md5, item.remote), name=item.path, digest=item.md5)
        tags = {"mlflow.data.context": context, "dvc.size": json.dumps(item.size)}
        entries.append(DatasetInput(dataset._to_mlflow_entity(), [InputTag(k, v) for k, v in tags.items()]))
    if entries:
        mlflow.MlflowClient().log_inputs(run_id or mlflow.active_run().info.run_id, datasets=entries)


def outside(inputs: list[DataInput], folder: Path) -> list[DataInput]:
    """The inputs that do not lie under `folder` (a run's own outputs): the project's data files."""
    inside = Path(folder).resolve()
    return [i for i in inputs if not Path(i.path).resolve().is_relative_to(inside)]
