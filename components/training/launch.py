"""Start a training stage's processes: with `cluster.train_processes` above 1, the stage command
(`python -m components.stages.critic`, `... actor`: what dvc.yaml runs) relaunches itself under
`accelerate launch --num_processes N --config_file configs/accelerate/<train_strategy>.yaml` and
exits with its status; each launched process (marked by $SWEETFLOW_TRAIN_PROCESS, so it does not
relaunch again) joins the process group (training/distributed.py). With 1 process nothing happens.

Reads the params file's `cluster` section (components/config/cluster.py) and the shipped accelerate
configs (configs/accelerate/README.md); writes nothing. accelerate only starts the processes; the
loop splits the work itself. Strategies (passed to the processes as $SWEETFLOW_TRAIN_STRATEGY):
`ddp` runs the data-parallel loop of training/loop.py; `fsdp2` the same loop on a model the loop
shards with PyTorch FSDP2 (training/sharding.py); both tested on CPU with gloo, neither run on GPUs.
`zero3` ships its accelerate config but the loop does not shard through DeepSpeed, so it is refused
with a message rather than run as something it is not; it also needs `pip install deepspeed`.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

from components.config.cluster import ClusterConfig, TrainStrategy, cluster_section
from components.config.sections import ConfigError
from components.config.training import OptimConfig
from components.training import distributed, sharding

MARKER = "SWEETFLOW_TRAIN_PROCESS"  # set in the launched processes: they train, they do not relaunch
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "accelerate"


def config_file(strategy: TrainStrategy) -> Path:
    return CONFIGS / f"{strategy.value}.yaml"


def check_strategy(strategy: TrainStrategy) -> None:
    """Refuse what cannot run here, with what to do about it."""
    if strategy == TrainStrategy.zero3 and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            "cluster.train_strategy zero3 needs DeepSpeed, which is not installed: `pip install deepspeed` "
            "(GPU machines), or set cluster.train_strategy ddp"
        )
    if strategy == TrainStrategy.zero3:
        raise ConfigError(
            f"cluster.train_strategy zero3: the training loop does not shard through DeepSpeed yet "
            f"({config_file(strategy)} is shipped for when it does); set cluster.train_strategy fsdp2 "
            "(sharded: PyTorch FSDP2) or ddp (each process holds the whole model)"
        )


def accelerate_command(module: str, args: list[str], cluster: ClusterConfig) -> list[str]:
    """`accelerate launch` of `python -m module args` in `cluster.train_processes` processes (free port)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file(cluster.train_strategy)),
        "--num_processes",
        str(cluster.train_processes),
        "--main_process_port",
        "0",
        "--module",
        module,
        *args,
    ]


def train_processes(module: str, args: list[str], optim: OptimConfig) -> None:
    """Call first in a training stage's `main`: relaunch `module` under accelerate (and exit with its
    status) when the params ask for more than one training process, after checking that `optim`'s
    batch splits evenly over them; in a launched process, join the process group (left at exit);
    processes other than rank 0 log warnings and errors only."""
    if os.environ.get(MARKER):
        distributed.join()
        atexit.register(distributed.leave)
        if not distributed.is_main():
            logging.getLogger().setLevel(logging.WARNING)  # one copy of the step's info lines: rank 0's
        return
    try:
        cluster = cluster_section()
        if cluster.train_processes > 1:
            check_strategy(cluster.train_strategy)
            distributed.check_batch(optim.batch_size, optim.micro_batch_size, cluster.train_processes)
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if cluster.train_processes == 1:
        return
    command = accelerate_command(module, args, cluster)
    env = {**os.environ, MARKER: "1", sharding.STRATEGY: cluster.train_strategy.value}
    raise SystemExit(subprocess.run(command, env=env).returncode)
