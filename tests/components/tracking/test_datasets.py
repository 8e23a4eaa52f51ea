"""A step's DVC-versioned inputs as MLflow dataset inputs (components/tracking/datasets.py)."""

from __future__ import annotations

import json

import yaml

from components.tracking.datasets import default_remote, log_inputs, stage_inputs

LOCK = {
    "schema": "2.0",
    "stages": {
        "critic": {
            "deps": [
                {"path": "components/stages/critic.py", "hash": "md5", "md5": "c0de", "size": 10},
                {"path": "data/elicitation/tasks.jsonl", "hash": "md5", "md5": "a" * 32, "size": 64946},
                {"path": "models/base", "hash": "md5", "md5": "b" * 32 + ".dir", "size": 5, "nfiles": 7},
                {"path": "runs/x/iter-1/rollouts/trajectories.jsonl", "hash": "md5", "md5": "c" * 32, "size": 9},
            ]
        }
    },
}


def test_the_data_a_stage_read_comes_from_its_lock_without_code_or_models(tmp_path):
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
    inputs = stage_inputs(tmp_path / "dvc.lock", "critic", "/store")
    assert [(i.path, i.md5, i.size) for i in inputs] == [
        ("data/elicitation/tasks.jsonl", "a" * 32, 64946),
        ("runs/x/iter-1/rollouts/trajectories.jsonl", "c" * 32, 9),
    ]
    assert stage_inputs(tmp_path / "dvc.lock", "actor") == [] and stage_inputs(tmp_path / "none.lock", "critic") == []


def test_the_default_remote_is_read_from_the_dvc_config_and_made_absolute(tmp_path):
    (tmp_path / ".dvc").mkdir()
    assert default_remote(tmp_path) is None
    config = "[core]\n    remote = shared\n['remote \"shared\"']\n    url = ../store\n"
    (tmp_path / ".dvc" / "config").write_text(config)
    assert default_remote(tmp_path) == str((tmp_path / "store").resolve())
    (tmp_path / ".dvc" / "config.local").write_text("['remote \"shared\"']\n    url = s3://bucket/dvc\n")
    assert default_remote(tmp_path) == "s3://bucket/dvc"


def test_inputs_fill_the_runs_dataset_column_with_the_dvc_digest_and_source(mlflow_store, tmp_path):
    import mlflow

    _, experiment = mlflow_store
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
    with mlflow.start_run(experiment_id=experiment) as run:
        log_inputs(stage_inputs(tmp_path / "dvc.lock", "critic", "/store"), context="critic")
    logged = mlflow.get_run(run.info.run_id).inputs.dataset_inputs
    by_name = {d.dataset.name: d for d in logged}
    tasks = by_name["data/elicitation/tasks.jsonl"]
    assert tasks.dataset.digest == "a" * 32 and tasks.dataset.source_type == "dvc"
    source = {"path": "data/elicitation/tasks.jsonl", "md5": "a" * 32, "remote": "/store"}
    assert json.loads(tasks.dataset.source) == source
    assert {t.key: t.value for t in tasks.tags}["mlflow.data.context"] == "critic"
    assert set(by_name) == {"data/elicitation/tasks.jsonl", "runs/x/iter-1/rollouts/trajectories.jsonl"}
