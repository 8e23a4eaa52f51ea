"""The registry gate on a real MLflow sqlite store: candidate always, champion only when better."""

from __future__ import annotations

import pytest

from components.tracking import registry
from components.tracking import store as tracking


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import mlflow

    root = tmp_path_factory.mktemp("registry")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    with mlflow.start_run(experiment_id=tracking.experiment_id("it-registry", root)) as run:
        pass
    yield root, run.info.run_id
    mlflow.set_tracking_uri(previous)


def actor(root, name):
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_gate_promotes_only_a_better_actor(store):
    root, run_id = store
    name = "actor-gate"
    first = registry.gate(actor(root, "a1"), run_id, {"success_rate": 0.1, "tests_passed": 0.3}, name)
    assert first.promoted and first.reason == "no champion yet"
    worse = registry.gate(actor(root, "a2"), run_id, {"success_rate": 0.05, "tests_passed": 0.9}, name)
    assert not worse.promoted and worse.champion == first.version
    tie = registry.gate(actor(root, "a3"), run_id, {"success_rate": 0.1, "tests_passed": 0.3}, name)
    assert not tie.promoted  # a tie keeps the champion
    better = registry.gate(actor(root, "a4"), run_id, {"success_rate": 0.1, "tests_passed": 0.4}, name)
    assert better.promoted and better.champion == better.version
    client = registry._client()
    assert client.get_model_version_by_alias(name, "candidate").version == better.version
    assert client.get_model_version_by_alias(name, "champion").version == better.version
    assert client.get_model_version(name, worse.version).source == str((root / "a2").resolve())
    assert client.get_model_version(name, worse.version).tags["success_rate"] == "0.05"


def test_metrics_without_scores_are_refused(store):
    root, run_id = store
    with pytest.raises(ValueError, match="lack tests_passed"):
        registry.register(actor(root, "b1"), run_id, {"success_rate": 0.2}, "actor-refused")
    assert registry.current_champion("actor-refused") is None


def test_a_folder_gated_again_is_not_registered_twice(store):
    root, run_id = store
    name = "actor-regate"
    champion = registry.gate(actor(root, "c1"), run_id, {"success_rate": 0.5, "tests_passed": 0.5}, name)
    second = registry.gate(actor(root, "c2"), run_id, {"success_rate": 0.1, "tests_passed": 0.1}, name)
    again = registry.gate(root / "c1", run_id, {"success_rate": 0.5, "tests_passed": 0.5}, name)
    assert again.version == champion.version and not again.promoted and "already registered" in again.reason
    client = registry._client()
    assert len(client.search_model_versions(f"name = '{name}'")) == 2
    assert client.get_model_version_by_alias(name, "candidate").version == champion.version
    assert client.get_model_version_by_alias(name, "champion").version == champion.version
    assert second.version != champion.version
