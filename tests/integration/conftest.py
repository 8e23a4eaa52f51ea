"""Integration fixtures: one Prefect test server (its own SQLite database) for the session, and a
project folder of its own per test (the working directory, with its own MLflow store)."""

import os

import pytest

from components.config.sections import DataConfig
from components.data.records import write_jsonl
from tests import synthetic_dialogues as world
from tests.conftest import DEFAULT_MODEL_DIR, TASKS_FILE, git_dvc_init, git_dvc_project
from tests.pipeline_helpers import offline_run_sets


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def vllm_engine(prepared_model_dir):
    """A vLLM engine on the default model, built once per test module (skipped where vLLM does not
    import), with a 2 GB KV cache on both cores unless the environment says otherwise."""
    from components.engines.factory import vllm_available

    for key, value in {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}.items():
        os.environ.setdefault(key, value)

    if not vllm_available():
        pytest.skip("vLLM is not importable here")
    from components.engines.vllm_engine import VLLMEngine

    built = VLLMEngine(prepared_model_dir, max_model_len=4096)
    yield built
    built.close()


@pytest.fixture
def project_dir(tmp_path, monkeypatch):
    """tmp_path as the working directory, with MLflow pointed at a store of its own inside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


@pytest.fixture
def workdir(project_dir):
    """project_dir as a git + DVC project, for tests on the prepared default model and the ColBench
    tasks (skipped without them)."""
    if not DEFAULT_MODEL_DIR.exists() or not TASKS_FILE.exists():
        pytest.skip("run `make model data` first")
    return git_dvc_init(project_dir)


@pytest.fixture
def overrides(project_dir, tiny_model_dir):
    """A git+DVC project with the world's tasks and scored offline rollouts; the smoke profile's -S list."""
    from transformers import AutoTokenizer

    git_dvc_project(project_dir)
    tasks = world.make_world(24, seed=1)
    write_jsonl(project_dir / "world" / "tasks.jsonl", tasks.tasks)
    trajs = world.rollouts(AutoTokenizer.from_pretrained(tiny_model_dir), tasks, 3, 2, seed=2)
    sets = {
        "task.name": "colbench-backend",
        "data.backend_tasks": "world/tasks.jsonl",
        "pairs.min_chosen_score": 1.0,
        **offline_run_sets(project_dir, trajs, DataConfig(), tiny_model_dir),
    }
    return [f"{k}={v}" for k, v in sets.items()]
