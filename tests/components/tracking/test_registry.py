"""The registry gate on a real MLflow sqlite store: candidate always, champion only when better."""

from __future__ import annotations

from pathlib import Path

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
    first = registry.gate(actor(root, "a1"), run_id, {"success_rate": 0.1, "mean_score": 0.3}, name)
    assert first.promoted and first.reason == "no champion yet"
    worse = registry.gate(actor(root, "a2"), run_id, {"success_rate": 0.05, "mean_score": 0.9}, name)
    assert not worse.promoted and worse.champion == first.version
    tie = registry.gate(actor(root, "a3"), run_id, {"success_rate": 0.1, "mean_score": 0.3}, name)
    assert not tie.promoted  # a tie keeps the champion
    better = registry.gate(actor(root, "a4"), run_id, {"success_rate": 0.1, "mean_score": 0.4}, name)
    assert better.promoted and better.champion == better.version
    client = registry._client()
    assert client.get_model_version_by_alias(name, "candidate").version == better.version
    assert client.get_model_version_by_alias(name, "champion").version == better.version
    assert client.get_model_version(name, worse.version).source == str((root / "a2").resolve())
    assert client.get_model_version(name, worse.version).tags["success_rate"] == "0.05"
    assert client.get_model_version(name, worse.version).tags["mean_score"] == "0.9"


def test_older_callers_and_champions_with_tests_passed_only(store):
    """A metrics dict (or a champion's tags) from before mean_score: tests_passed stands in for it."""
    root, run_id = store
    name = "actor-legacy"
    old = registry.gate(actor(root, "l1"), run_id, {"success_rate": 0.2, "tests_passed": 0.5}, name)
    client = registry._client()
    assert client.get_model_version(name, old.version).tags["mean_score"] == "0.5"
    assert client.get_model_version(name, old.version).tags["tests_passed"] == "0.5"
    client.delete_model_version_tag(name, old.version, "mean_score")  # a champion registered before mean_score
    lower = registry.gate(actor(root, "l2"), run_id, {"success_rate": 0.2, "mean_score": 0.4}, name)
    assert not lower.promoted and lower.champion == old.version
    higher = registry.gate(
        actor(root, "l3"), run_id, {"success_rate": 0.2, "mean_score": 0.6, "tests_passed": 0.6}, name
    )
    assert higher.promoted and "(0.2, 0.6) > (0.2, 0.5)" in higher.reason
    # mean_score wins over tests_passed when a caller gives both
    both = registry.gate(actor(root, "l4"), run_id, {"success_rate": 0.2, "mean_score": 0.7, "tests_passed": 0.1}, name)
    assert both.promoted


def test_registered_name_one_model_per_task(store):
    assert registry.registered_name("colbench-backend") == registry.MODEL_NAME == "sweetflow-actor"
    assert registry.registered_name("elicitation") == "sweetflow-actor-elicitation"
    with pytest.raises(ValueError):
        registry.registered_name("")
    root, run_id = store
    # A strong actor of one task does not keep another task's actor from becoming its champion.
    strong = registry.gate(
        actor(root, "t1"), run_id, {"success_rate": 0.9, "mean_score": 0.9}, registry.registered_name("task-a")
    )
    weak = registry.gate(
        actor(root, "t2"), run_id, {"success_rate": 0.1, "mean_score": 0.1}, registry.registered_name("task-b")
    )
    assert strong.promoted and weak.promoted and weak.reason == "no champion yet"
    assert registry.current_champion("sweetflow-actor-task-b").source == str((root / "t2").resolve())


def test_metrics_without_scores_are_refused(store):
    root, run_id = store
    with pytest.raises(ValueError, match="lack mean_score"):
        registry.register(actor(root, "b1"), run_id, {"success_rate": 0.2}, "actor-refused")
    assert registry.current_champion("actor-refused") is None


def test_a_folder_gated_again_is_not_registered_twice(store):
    root, run_id = store
    name = "actor-regate"
    champion = registry.gate(actor(root, "c1"), run_id, {"success_rate": 0.5, "mean_score": 0.5}, name)
    second = registry.gate(actor(root, "c2"), run_id, {"success_rate": 0.1, "mean_score": 0.1}, name)
    again = registry.gate(root / "c1", run_id, {"success_rate": 0.5, "mean_score": 0.5}, name)
    assert again.version == champion.version and not again.promoted and "already registered" in again.reason
    client = registry._client()
    assert len(client.search_model_versions(f"name = '{name}'")) == 2
    assert client.get_model_version_by_alias(name, "candidate").version == champion.version
    assert client.get_model_version_by_alias(name, "champion").version == champion.version
    assert second.version != champion.version


def test_on_a_tracking_server_the_registry_holds_a_copy_of_the_model(tmp_path):
    """A server refuses local folders as sources: the folder goes into the evaluation's run first."""
    import mlflow

    from flows.runtime.services import start_services, ui_services
    from tests.processes import free_port

    _, server = ui_services(tmp_path / "server", mlflow_port=free_port())
    previous = mlflow.get_tracking_uri()
    with start_services([server], tmp_path / "logs"):
        mlflow.set_tracking_uri(server.url.rstrip("/"))
        try:
            with mlflow.start_run(experiment_id=tracking.experiment_id("it-registry-server", tmp_path)) as run:
                pass
            folder = actor(tmp_path, "a1")
            first = registry.gate(folder, run.info.run_id, {"success_rate": 0.1, "mean_score": 0.3}, "on-server")
            version = registry._client().get_model_version("on-server", first.version)
            assert version.source == f"runs:/{run.info.run_id}/model" and first.promoted
            assert version.tags[registry.PATH_TAG] == str(folder.resolve())
            copy = mlflow.artifacts.download_artifacts(
                f"models:/on-server/{first.version}", dst_path=str(tmp_path / "d")
            )
            assert (Path(copy) / "config.json").read_text() == "{}"
            again = registry.gate(folder, run.info.run_id, {"success_rate": 0.1, "mean_score": 0.3}, "on-server")
            assert again.version == first.version and again.reason.startswith("already registered")
        finally:
            mlflow.set_tracking_uri(previous)
