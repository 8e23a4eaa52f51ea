"""Fully sharded training (`cluster.train_strategy: fsdp2`): PyTorch FSDP2 (`fully_shard`) applied by
the training loop (training/loop.py) in each process that `accelerate launch` started
(training/launch.py; accelerate only launches, it wraps nothing).

Reads and writes nothing. `shard` splits every parameter of the model along dim 0 over the
processes (each decoder layer is one all-gather unit, the root holds the rest: embeddings, final
norm, tied head, value heads); forward and backward all-gather a layer's weights just in time, and
every backward reduce-scatters the gradients, so each process keeps only its shard of the weights,
gradients and AdamW state (with fp32 master copies of bf16 weights: training/precision.py).

Gradient scale: each micro-batch's loss is weighted by its share of the *global* batch
(training/loop.py), so the 1-process gradient is the *sum* over processes of their gradients.
FSDP's reduce-scatter averages by default (divides by the number of processes); `shard` sets the
divide factor to 1 and asks for plain SUM collectives (gloo has neither AVG nor PREMUL_SUM), so the
reduced shard is that sum. Nothing else sums gradients on top (distributed.sum_gradients is the
ddp path). Every process must run as many forward/backward passes per step (a pass all-gathers and
reduce-scatters): the loop gives a process without a micro-batch a zero-weight pass.

Checkpoints stay whole: `whole_states` gathers the model (torch.distributed.checkpoint's full state
dict, on CPU) and the optimizer state (each DTensor's full tensor, one at a time) to rank 0, which
writes an HF folder and `trainer_state.pt` as in the 1-process loop; `shard_like_params` cuts a
whole optimizer state back into this process's shards on resume. Whole optimizer state rather than
per-rank files: the checkpoint does not depend on the number of processes, and the optimizer's
parameters may be fp32 master copies that torch.distributed.checkpoint cannot map to the model's
names. Cost: rank 0 holds the whole state in CPU memory while writing.
"""

from __future__ import annotations

import os
from types import MethodType

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor, distribute_tensor

from components.lm import forward
from components.training import distributed

STRATEGY = "SWEETFLOW_TRAIN_STRATEGY"  # set by training/launch.py in the processes it starts
FSDP2 = "fsdp2"


def active() -> bool:
    """Whether this process trains a sharded model (fsdp2 with more than one process)."""
    return distributed.world() > 1 and os.environ.get(STRATEGY) == FSDP2


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's transformer layers: the modules transformers keeps whole (`_no_split_modules`)."""
    names = set(model._no_split_modules or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules) to shard by")
    return layers


def shard(model) -> None:
    """Shard `model` in place over all processes: each decoder layer, then the root (embeddings, final
    norm, LM head, tied or not); reductions sum. The loss functions reach the model through
    components/lm/forward.py's `scored_logits` (the decoder, then the head), not its forward, so that
    function becomes a method of the model that runs inside the root's gather/release hooks."""
    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    setattr(model, forward.SCORED_LOGITS, MethodType(forward.scored_logits, model))
    register_fsdp_forward_method(model, forward.SCORED_LOGITS)
    for module in model.modules():
        if isinstance(module, FSDPModule):  # the setters are per module, not recursive
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def is_sharded(model) -> bool:
    return any(isinstance(p, DTensor) for p in model.parameters())


def clip_gradients(params: list[torch.Tensor], max_norm: float) -> float:
    """Scale the gradients to a global L2 norm of at most `max_norm`; return the norm before. Works on
    whole and on sharded (DTensor) gradients: the norm of the shards is reduced over the processes."""
    norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm.item()


def _whole(value):
    """`value` (a state dict tree) with every DTensor gathered whole onto CPU on rank 0 (collective: every
    process walks the same tree in the same order); other processes get None in its place."""
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_whole(v) for v in value)
    if isinstance(value, DTensor):
        full = value.full_tensor()
        return full.cpu() if distributed.is_main() else None
    return value


def whole_states(model, optimizer) -> tuple[dict | None, dict | None]:
    """(model state dict, optimizer state dict), whole, on rank 0; (None, None) on the other processes.
    Every process must call it."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    aliases = {n for n, _ in model.named_parameters(remove_duplicate=False)} - dict(model.named_parameters()).keys()
    model_state = {k: v for k, v in model_state.items() if k not in aliases}  # a tied head: saved once, as whole
    optimizer_state = _whole(optimizer.state_dict())
    return (model_state, optimizer_state) if distributed.is_main() else (None, None)


def shard_like_params(state: dict, model) -> dict:
    """A whole optimizer state (every process holds the same) cut into this process's shards: every
    tensor of one or more dims is per-parameter state (AdamW moments, fp32 master weights) and is
    sharded as the parameters are (FSDP2: dim 0 over the one mesh); scalars (`step`) stay whole."""
    like = next(p for p in model.parameters() if isinstance(p, DTensor))

    def cut(value):
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(cut(v) for v in value)
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return distribute_tensor(value.to(like.device), like.device_mesh, like.placements)
        return value

    return cut(state)
