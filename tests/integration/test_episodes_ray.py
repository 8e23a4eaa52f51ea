"""A step's episodes shared by two engines on a local Ray cluster (`cluster.rollout_engines: 2`,
components/cluster/episodes.py) give the records of one engine playing them all, order aside.

The tiny model on the hf engine (per-request generators, fp32), the ColBench backend tasks with
the offline retrieval simulator: each episode's seeds come from its job, so the engine it lands on
and its batch neighbours change nothing but float rounding in the log-probs.
"""

from __future__ import annotations

import pytest
import yaml

from components.config.sections import DataConfig, EpisodeSection, RolloutsConfig
from components.data.records import Trajectory, read_jsonl
from components.episodes.play import pending_jobs, run_episodes, select_tasks
from components.tasks.colbench_backend import ColbenchBackend
from tests.conftest import TASKS_FILE

pytestmark = pytest.mark.integration


def play(tmp_path, monkeypatch, name: str, cluster: dict, tiny_model_dir, engines: int) -> dict:
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"cluster": cluster}))
    monkeypatch.setenv("SWEETFLOW_PARAMS", str(params))
    cfg = RolloutsConfig(model=str(tiny_model_dir), engine="hf", limit=6, per_task=2, seed=3)
    episode = EpisodeSection(max_turns=2, max_tokens=12, max_model_len=1024)
    task = ColbenchBackend({"data": DataConfig()})
    records, indices = select_tasks(task, cfg)
    jobs = pending_jobs(records, indices, [cfg.seed], [], cfg.per_task)
    out = tmp_path / f"{name}.jsonl"
    metrics = run_episodes(cfg, episode, task, jobs, out, cfg.seed)
    assert metrics["episodes_run"] == len(jobs) == 12 and metrics["engines"] == engines
    return {t.key: t for t in read_jsonl(out, Trajectory)}  # written to the file as each ended


def test_two_engines_on_ray_give_one_engines_records(tmp_path, monkeypatch, tiny_model_dir):
    ray = pytest.importorskip("ray")
    if not TASKS_FILE.exists():
        pytest.skip("run `make data` first")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        shared = play(tmp_path, monkeypatch, "shared", {"backend": "ray", "rollout_engines": 2}, tiny_model_dir, 2)
    finally:
        ray.shutdown()
    alone = play(tmp_path, monkeypatch, "alone", {}, tiny_model_dir, 1)
    assert sorted(shared) == sorted(alone)
    for key, mine in shared.items():
        theirs = alone[key]
        assert mine.messages == theirs.messages and mine.answer == theirs.answer
        assert [(t.prompt_ids, t.response_ids) for t in mine.turns] == [
            (t.prompt_ids, t.response_ids) for t in theirs.turns
        ]
        for a, b in zip(mine.turns, theirs.turns):
            assert a.response_logprobs == pytest.approx(b.response_logprobs, abs=1e-4)
