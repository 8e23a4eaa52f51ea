"""Loading the model a training loop updates, and saving what it produced.

- `train_device_dtype`: bf16 on a GPU, fp32 on CPU (`dtype: auto`), or as configured.
- `load_trainable`: the base model (all weights trainable) or, with `optim.lora`, the frozen base
  with fresh PEFT LoRA adapters; from a checkpoint folder when resuming.
- `save_model`: an HF folder written atomically (tmp folder, then rename). LoRA adapters are
  merged into the base first, so every stage downstream (vLLM, eval) loads a plain model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from components.config.training import OptimConfig


def train_device_dtype(dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """The device, and `dtype` (auto: bf16 on a GPU, fp32 on CPU)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        return device, torch.bfloat16 if device.type == "cuda" else torch.float32
    return device, getattr(torch, dtype)


def load_frozen(path: str, device: torch.device, dtype: torch.dtype):
    """A model for scoring only: eval mode, no gradients."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    model.requires_grad_(False)
    return model.eval()


def load_trainable(base: str, optim: OptimConfig, checkpoint: Path | None = None):
    """The model to train, resumed from `checkpoint` (an HF folder or a PEFT adapter) when given."""
    from transformers import AutoModelForCausalLM

    device, dtype = train_device_dtype(optim.dtype)
    if optim.lora is None:
        model = AutoModelForCausalLM.from_pretrained(checkpoint or base, dtype=dtype)
    else:
        from peft import LoraConfig, PeftModel, get_peft_model

        model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
        if checkpoint is not None:
            model = PeftModel.from_pretrained(model, checkpoint, is_trainable=True)
        else:
            lora = optim.lora
            model = get_peft_model(
                model,
                LoraConfig(
                    r=lora.r,
                    lora_alpha=lora.alpha,
                    lora_dropout=lora.dropout,
                    target_modules=lora.target_modules,
                    task_type="CAUSAL_LM",
                ),
            )
    if optim.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    return model.to(device).train()


def save_model(model, tokenizer, out: Path, config: dict) -> Path:
    """Write an HF folder (LoRA merged) with the resolved config beside it, atomically."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "train_config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
