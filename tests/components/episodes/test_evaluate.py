"""Evaluation bookkeeping: which episodes remain after a crash, and when earlier episodes are reused."""

import json

from components.config.sections import DataConfig, EpisodeSection, EvalConfig
from components.episodes.play import episode_fingerprint, pending_jobs, reset_if_config_changed
from components.tasks.colbench_backend.task import ColbenchBackend
from tests.factories import make_task, make_trajectory


def done(task_index, run_seed):
    return make_trajectory(task_index, run_seed)


def test_pending_jobs_skip_finished_episodes_for_every_seed():
    tasks = [make_task(f"f{i}") for i in range(4)]
    jobs = pending_jobs(tasks, [0, 2, 3], [0, 1], [done(0, 0), done(3, 1), done(1, 0)])
    assert [(j.task_index, j.run_seed) for j in jobs] == [(2, 0), (3, 0), (0, 1), (2, 1)]
    assert len({j.seed for j in jobs}) == 4


def test_episodes_of_another_configuration_are_not_reused(tmp_path):
    cfg, episode, data = EvalConfig(), EpisodeSection(), ColbenchBackend({"data": DataConfig()})
    (tmp_path / "trajectories.jsonl").write_text(json.dumps({"old": 1}) + "\n")
    reset_if_config_changed(tmp_path, episode_fingerprint(cfg, episode, data))
    assert (tmp_path / "trajectories.jsonl").exists()  # first fingerprint: nothing to compare with
    reset_if_config_changed(tmp_path, episode_fingerprint(cfg.model_copy(update={"limit": 3}), episode, data))
    assert (tmp_path / "trajectories.jsonl").exists()  # the limit does not change an episode
    other = episode_fingerprint(cfg, episode.model_copy(update={"temperature": 0.5}), data)
    reset_if_config_changed(tmp_path, other)
    assert not (tmp_path / "trajectories.jsonl").exists()
