"""The prepared default model folder: loads, is ChatML with eos <|im_end|>, keeps rope_theta, talks."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch

from components.data import model_prepare


def test_folder_is_complete_and_plain(prepared_model_dir):
    assert model_prepare.is_complete(prepared_model_dir)
    manifest = json.loads((prepared_model_dir / model_prepare.MANIFEST).read_text())
    assert manifest["source_sha256"] == model_prepare.file_sha256(model_prepare.find_gguf())
    config = json.loads((prepared_model_dir / "config.json").read_text())
    assert config["rope_theta"] == 100000.0
    assert config["rope_parameters"]["rope_theta"] == 100000.0
    assert "quantization_config" not in config
    assert config["eos_token_id"] == config["pad_token_id"] == 2
    generation = json.loads((prepared_model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2
    assert (prepared_model_dir / "model.safetensors").is_file()
    assert not list(prepared_model_dir.parent.glob(f".{prepared_model_dir.name}.tmp-*"))


def test_tokenizer_is_chatml_with_im_end(prepared_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir)
    assert tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.eos_token_id == 2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_loads_and_answers_greedily(prepared_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir)
    model = AutoModelForCausalLM.from_pretrained(prepared_model_dir)
    assert model.config.rope_parameters["rope_theta"] == 100000.0
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=False,
    )
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert "Paris" in answer


def test_second_run_is_a_fast_no_op(prepared_model_dir):
    stamp = (prepared_model_dir / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert model_prepare.run(prepared_model_dir) == prepared_model_dir
    assert time.perf_counter() - start < 5
    assert (prepared_model_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_incomplete_folder_is_not_complete(tmp_path, prepared_model_dir):
    (tmp_path / "config.json").write_text("{}")
    assert not model_prepare.is_complete(tmp_path)
    manifest = json.loads((prepared_model_dir / model_prepare.MANIFEST).read_text())
    (tmp_path / model_prepare.MANIFEST).write_text(json.dumps(manifest))
    assert not model_prepare.is_complete(tmp_path)  # listed files are missing
    assert not model_prepare.is_complete(prepared_model_dir, source_sha256="0" * 64)


def test_resolve_model(prepared_model_dir, monkeypatch):
    assert model_prepare.resolve_model(str(prepared_model_dir)) == str(prepared_model_dir.resolve())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model_prepare.resolve_model(str(prepared_model_dir / "nope"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="unreachable"):
        model_prepare.resolve_model("someorg/some-model-that-is-not-cached")
    assert time.perf_counter() - start < 10
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_resolve_model_probes_the_hub_once_and_goes_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(model_prepare, "_hub_reachable", lambda *a, **k: False)
    with pytest.raises(FileNotFoundError, match="unreachable"):
        model_prepare.resolve_model("someorg/some-model-that-is-not-cached")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert not model_prepare._hub_reachable("host.invalid", timeout=2)


def test_tiny_model_is_seeded_complete_and_made_once(tiny_model_dir, prepared_model_dir, tmp_path):
    from components.data import tiny_model

    assert model_prepare.is_complete(tiny_model_dir, tiny_model.recipe_sha256(prepared_model_dir))
    again = tiny_model.run(tmp_path / "tiny-llama", prepared_model_dir)
    weights = (again / "model.safetensors").read_bytes()
    assert weights == (tiny_model_dir / "model.safetensors").read_bytes()  # seed 0: the same weights
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert tiny_model.run(again, prepared_model_dir) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(FileNotFoundError, match="not a prepared model folder"):
        tiny_model.run(tmp_path / "other", tmp_path / "no-model")
