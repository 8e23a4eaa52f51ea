"""The tiny model: a randomly initialised 2-layer Llama (hidden 64, about 3M parameters with the 49k
vocabulary; seed 0) with the default model's tokenizer, ChatML chat template and eos ids, as a plain
Hugging Face folder.

Reads:  the prepared default model's folder (its tokenizer; `python -m components.data.model_prepare`).
Writes: `out_dir/` (default `models/tiny-llama`): `config.json`, `generation_config.json`,
        `model.safetensors`, the tokenizer files and, last, `sweetflow_manifest.json`.

It generates in milliseconds per token and its outputs are noise: it checks wiring (the `tiny`
profile, the tests' pipelines), not learning. Built as the default model is (model_prepare.build:
lock, temporary sibling, manifest last); the manifest's sha256 covers the recipe below and the
default model's source, so a changed recipe rebuilds the folder and an unchanged one is a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from components.data.model_prepare import DEFAULT_OUT, EOS_TOKEN, MANIFEST, build, is_complete

TINY_OUT = Path("models/tiny-llama")
SEED = 0
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
}


def recipe_sha256(tokenizer_dir: Path) -> str:
    """sha256 of the shape, the seed and the tokenizer folder's source (its manifest's sha256)."""
    source = json.loads((tokenizer_dir / MANIFEST).read_text())["source_sha256"]
    recipe = {"shape": SHAPE, "seed": SEED, "tokenizer_source_sha256": source}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def run(out_dir: Path = TINY_OUT, tokenizer_dir: Path = DEFAULT_OUT) -> Path:
    """The tiny model at `out_dir` on the tokenizer of the prepared model `tokenizer_dir` (no-op when
    already complete)."""
    tokenizer_dir = Path(tokenizer_dir)
    if not is_complete(tokenizer_dir):
        raise FileNotFoundError(
            f"{tokenizer_dir} is not a prepared model folder; run `python -m components.data.model_prepare` "
            "(or `sweetflow model prepare`) first"
        )
    sha = recipe_sha256(tokenizer_dir)
    return build(Path(out_dir), f"tiny-llama on {tokenizer_dir.name}", sha, lambda dest: _make(tokenizer_dir, dest))


def _make(tokenizer_dir: Path, dest: Path) -> None:
    """Initialise the model from SEED (the caller's torch RNG untouched) and save it with the tokenizer."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    bos = tokenizer.bos_token_id
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, **SHAPE)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TINY_OUT, help="output folder")
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_OUT, help="the prepared default model's folder")
    args = parser.parse_args(argv)
    print(run(args.out, args.tokenizer))


if __name__ == "__main__":
    main()
