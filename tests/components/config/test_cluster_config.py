"""The `cluster` section: placement settings are validated at load time with messages that name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from components.config.cluster import Backend, ClusterConfig, StageResources


def test_defaults_run_everything_here_one_engine_one_training_process():
    cfg = ClusterConfig()
    assert cfg.backend == Backend.local and cfg.address is None
    assert (cfg.rollout_engines, cfg.tensor_parallel, cfg.train_processes) == (1, 1, 1)
    assert cfg.resources_for("critic") == StageResources(cpus=1, gpus=0)


def test_a_stage_gets_its_own_resources_else_the_default():
    cfg = ClusterConfig(resources={"default": {"cpus": 2}, "critic": {"cpus": 1, "gpus": 1}})
    assert cfg.resources_for("critic").gpus == 1
    assert cfg.resources_for("rollouts") == StageResources(cpus=2, gpus=0)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"address": "auto"}, "backend is local"),
        ({"backend": "ray", "address": "auto", "local_cpus": 2}, "local_cpus sizes a local Ray cluster"),
        ({"backend": "slurm"}, "backend"),
        ({"resources": {"default": {"cpus": 0}}}, "cpus"),
        ({"train_processes": 0}, "train_processes"),
        ({"rollout_engines": 2}, "rollout_engines 2 shares a step's episodes between engines on a Ray cluster"),
    ],
)
def test_contradictions_and_unknown_names_are_refused(values, message):
    with pytest.raises(ValidationError, match=message):
        ClusterConfig(**values)


def test_an_unknown_stage_name_in_resources_is_refused_with_the_known_ones():
    """The stage names live in the catalogue (above config/): a run's parameters are checked against it."""
    from components.config.sections import ConfigError
    from flows.planning.profiles import validate

    with pytest.raises(ConfigError, match="cluster.resources: unknown stage.*critc.*stages: .*critic"):
        validate({"cluster": {"resources": {"critc": {"gpus": 1}}}})
    assert validate({"cluster": {"resources": {"critic": {"gpus": 1}}}})["cluster"].resources_for("critic").gpus == 1


def test_single_step_commands_take_cluster_settings_only(tmp_path, monkeypatch):
    from components.config.sections import ConfigError
    from flows.planning.step_commands import cluster_settings, stages_doc

    assert cluster_settings(["cluster.backend=ray", "cluster.resources.critic.gpus=1"]) == {
        "backend": "ray",
        "resources": {"critic": {"gpus": 1}},
    }
    with pytest.raises(ConfigError, match="-S data.source=hub: single-step commands take -S for the cluster"):
        cluster_settings(["data.source=hub"])
    doc = stages_doc(["eval_zero_shot"], "elicitation", {"cluster": {"backend": "ray"}})
    assert doc["cluster"]["backend"] == "ray" and doc["cluster"]["rollout_engines"] == 1
