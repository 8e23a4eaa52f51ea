"""fp32 master weights for training a model whose weights are bf16 (what DeepSpeed's and FSDP's bf16
mixed precision keep; the authors trained SWEET-RL with DeepSpeed bf16).

Reads/writes nothing. Why: an AdamW step changes a weight by about lr, and a bf16 weight w (8
mantissa bits) stays unchanged when less than half its spacing is added: for lr 2e-7 (the authors')
that is every |w| above ~3e-5, i.e. essentially the whole model. `MasterAdamW` keeps an fp32 copy
of every trainable parameter that is not fp32, steps AdamW on the copies (the bf16 gradients are
upcast first) and writes the rounded copies back into the model, so the forward and backward
passes stay bf16 while small updates accumulate in fp32 until they show in the bf16 weights.
Parameters that are already fp32 (LoRA adapters, which PEFT upcasts; value heads) are stepped in
place, so on an fp32 model it is exactly `torch.optim.AdamW`.

The copies are part of `state_dict()`, so a checkpoint resumes the exact fp32 weights. Gradients
are still accumulated over micro-batches in the model's dtype (DeepSpeed accumulates them in fp32
when asked to); the update precision is what decides whether tiny learning rates apply at all.
"""

from __future__ import annotations

import torch

MASTERS_KEY = "fp32_master_weights"


def needs_master(param: torch.Tensor) -> bool:
    return param.dtype != torch.float32


class MasterAdamW(torch.optim.AdamW):
    """AdamW over fp32 master copies of the given (possibly bf16) parameters."""

    def __init__(self, params, **kwargs) -> None:
        self.model_params = [p for p in params]
        self.masters = [p.detach().float().clone() if needs_master(p) else p for p in self.model_params]
        super().__init__(self.masters, **kwargs)

    @property
    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(model parameter, its master) for every parameter that has a separate fp32 copy."""
        return [(p, m) for p, m in zip(self.model_params, self.masters) if m is not p]

    @torch.no_grad()
    def step(self, closure=None):
        for param, master in self.pairs:
            master.grad = None if param.grad is None else param.grad.float()
        loss = super().step(closure)
        for param, master in self.pairs:
            param.copy_(master)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.model_params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()
        super().zero_grad(set_to_none)

    def state_dict(self) -> dict:
        state = super().state_dict()
        state[MASTERS_KEY] = [master.detach().clone() for _, master in self.pairs]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        saved = state.pop(MASTERS_KEY, [])
        pairs = self.pairs
        if len(saved) != len(pairs):
            raise ValueError(f"checkpoint holds {len(saved)} fp32 master weights, this model needs {len(pairs)}")
        super().load_state_dict(state)
        with torch.no_grad():
            for (param, master), value in zip(pairs, saved):
                master.copy_(value)
                param.copy_(master)


def adamw(params, master_weights: bool, **kwargs) -> torch.optim.AdamW:
    """The optimizer every training path uses: `MasterAdamW` when `master_weights`, else plain AdamW
    (which loses updates smaller than a bf16 weight's spacing; kept to measure that cost)."""
    return MasterAdamW(params, **kwargs) if master_weights else torch.optim.AdamW(params, **kwargs)
