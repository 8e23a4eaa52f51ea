"""Where the pipeline's steps run (params.yaml section `cluster`): in this process (`local`) or on a
Ray cluster (`ray`), and how many engines and training processes each step uses.

Reads and writes nothing. Defaults equal params.yaml's `cluster` section. The flows read `backend`,
`address`, `local_cpus` and `resources` to pick Prefect's task runner (flows/runtime/cluster.py); the
episode stages read `rollout_engines` and `tensor_parallel`, the training stages `train_processes`
and `train_strategy`.

Placement never changes what a step computes, so this section is not part of a run's identity (its
folder name) and no stage declares it as a DVC param: switching `backend` re-runs nothing.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from components.config.sections import _Section, load_section, params_file

DEFAULT_RESOURCES = "default"  # the `resources` entry of every stage not named there


class Backend(str, Enum):
    local = "local"  # every step in a process group of this machine, one after the other
    ray = "ray"  # every step as a task on a Ray cluster (prefect-ray's RayTaskRunner)


class TrainStrategy(str, Enum):
    ddp = "ddp"  # data parallel, a full copy per process (tested on CPU with gloo; not run on GPUs)
    fsdp2 = "fsdp2"  # PyTorch FSDP2, sharded by the loop (training/sharding.py; tested on CPU with gloo only)
    zero3 = "zero3"  # DeepSpeed ZeRO-3 (pip install deepspeed): config ships; refused (the loop does not use it)


class EngineScope(str, Enum):
    run = "run"  # one vLLM server for the whole run, every sampling step's model reloaded into it
    step = "step"  # every sampling step builds its own engine in its own process (steps on other machines)


class StageResources(_Section):
    """What Ray reserves for one step's task (the step's own processes run inside that reservation)."""

    cpus: float = Field(1.0, gt=0, description="CPUs reserved for the step")
    gpus: float = Field(0.0, ge=0, description="GPUs reserved for the step (fractions share a GPU)")


class ClusterConfig(_Section):
    """Placement of the steps; see the module docstring."""

    backend: Backend = Field(Backend.local, description="local: this machine, step by step | ray: a Ray cluster")
    address: str | None = Field(
        None,
        description="ray: the address of a running cluster (auto, HOST:6379 or ray://HOST:10001); "
        "null: start a local Ray cluster for the run and stop it after",
    )
    local_cpus: int | None = Field(
        None, ge=1, description="ray, address null: CPUs the local cluster offers (null: all of this machine's)"
    )
    resources: dict[str, StageResources] = Field(
        default_factory=lambda: {DEFAULT_RESOURCES: StageResources()},
        description="ray: per stage name (components/stages/catalogue.py), what its task reserves; "
        "`default` for every stage not named (a training stage with train_processes N should reserve "
        "what its N processes use)",
    )
    rollout_engines: int = Field(1, ge=1, le=64, description="vLLM engines (data parallel) sharing a step's episodes")
    tensor_parallel: int = Field(1, ge=1, le=64, description="GPUs per vLLM engine (tensor parallel)")
    engine_scope: EngineScope = Field(
        EngineScope.step,
        description="step: each sampling step builds its own engine | run: one vLLM server per pipeline run "
        "(backend local, no GPU) serves every sampling step, a trained actor's merged weights reloaded into it; "
        "about 1.2x faster on 2 cores, but the server batches requests as they arrive, so records differ from run "
        "to run (README 'One engine per run')",
    )
    preload_stages: bool = Field(
        True,
        description="backend local, a run of two stages or more: its stage processes fork from one process that "
        "has imported torch and transformers (components/stages/handover.py; about 5 s less per step) | false: "
        "each stage process imports them itself",
    )
    train_processes: int = Field(
        1, ge=1, le=1024, description="training processes; above 1 the step relaunches under `accelerate launch`"
    )
    train_strategy: TrainStrategy = Field(
        TrainStrategy.ddp,
        description="train_processes > 1: ddp (a whole model per process) | fsdp2 (weights, gradients and "
        "optimizer state sharded over the processes) — both CPU: gloo, GPU: nccl | zero3 (config ships in "
        "configs/accelerate; refused)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ClusterConfig":
        if self.backend == Backend.local and self.address is not None:
            raise ValueError(f"address {self.address!r} is set but backend is local: set backend ray to use it")
        if self.local_cpus is not None and self.address is not None:
            raise ValueError("local_cpus sizes a local Ray cluster; it does not apply with an address")
        if self.rollout_engines > 1 and self.backend == Backend.local:
            raise ValueError(
                f"rollout_engines {self.rollout_engines} shares a step's episodes between engines on a Ray "
                "cluster: set backend ray (one engine plays them all with backend local)"
            )
        return self

    def resources_for(self, stage: str) -> StageResources:
        """The reservation of `stage`: its own entry, else `default`, else one CPU."""
        return self.resources.get(stage) or self.resources.get(DEFAULT_RESOURCES) or StageResources()


def cluster_section() -> ClusterConfig:
    """The stage's `cluster` section (the defaults when its params file has none)."""
    return load_section(ClusterConfig, "cluster", path=params_file())
