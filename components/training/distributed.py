"""Data-parallel training over torch.distributed: which micro-batches a process runs, the gradient
and metric sums across processes, and who writes.

Reads and writes nothing. The processes are started by `accelerate launch` (training/launch.py),
which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; `join` opens the process
group from them (gloo on CPU, nccl on GPU, one GPU per process). Without them there is one process
and every function here is a no-op, so a 1-process run is exactly the single-process loop.

Every process holds the whole global batch of a step and runs every `world`-th of its micro-batches
(`share`); each micro-batch's loss is weighted by its share of the *global* batch, as in the
1-process loop, so the all-reduced *sum* of the gradients (`sum_gradients`) and of the losses
(`sum_metrics`) is the 1-process gradient and loss, up to the order of float additions. Every
process then clips and steps the same summed gradient, so the copies stay equal. Only rank 0
(`is_main`) writes files.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def join() -> None:
    """Open the process group of a launched process (environment set by `accelerate launch`)."""
    if dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # "cuda" then means this process's GPU
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def check_batch(batch_size: int, micro_batch_size: int, processes: int | None = None) -> None:
    """Each of the `processes` (default: this group's) must get as many micro-batches of a full global batch."""
    processes = world() if processes is None else processes
    if batch_size % (micro_batch_size * processes):
        raise ValueError(
            f"optim.batch_size ({batch_size}) must be a multiple of optim.micro_batch_size x training processes "
            f"({micro_batch_size} x {processes} = {micro_batch_size * processes}): every process takes an equal "
            "share of a step's micro-batches (change the batch, the micro-batch or cluster.train_processes)"
        )


def share(items: Sequence[T]) -> list[T]:
    """This process's share of `items` (every world-th, from its rank): all of them with one process."""
    return list(items[rank() :: world()])


def missing_passes(n: int) -> int:
    """How many fewer of `n` micro-batches this process's share holds than the largest share (0 or 1:
    a short last batch), so that every process can run as many forward/backward passes."""
    return -(-n // world()) - len(range(rank(), n, world()))


def sum_gradients(params: Sequence[torch.Tensor]) -> None:
    """Replace every gradient by its sum over the processes (a missing one counts as zeros: a parameter
    this process's passes did not reach)."""
    if world() == 1:
        return
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)


def sum_metrics(loss: float, metrics: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The loss and each metric summed over the processes (each holds its micro-batches' weighted share)."""
    if world() == 1:
        return loss, metrics
    parts: list = [None] * world()
    dist.all_gather_object(parts, (loss, metrics))
    keys = sorted({k for _, m in parts for k in m})
    return sum(part_loss for part_loss, _ in parts), {k: sum(m.get(k, 0.0) for _, m in parts) for k in keys}


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


@contextmanager
def main_first() -> Iterator[None]:
    """Run the block on rank 0 first, then on the others (which then find what rank 0 cached)."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()
