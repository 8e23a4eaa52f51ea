"""Training in more than one process (components/training/{launch,distributed,sharding}.py): the stage
command relaunches itself under `accelerate launch` when `cluster.train_processes` > 1; with ddp the
processes split each global batch and sum their gradients, with fsdp2 they also shard the model
(FSDP2) and gather it whole for checkpoints; either way 2 processes (gloo, CPU) give the 1-process
loss curve, only rank 0 writes and a resumed 2-process run continues the same curve; a batch that
does not split evenly is refused. zero3 is refused (no DeepSpeed); nothing here runs on a GPU."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.config.cluster import TrainStrategy
from components.config.sections import ConfigError
from components.data.records import Trajectory, TrajectoryPair, Turn, write_jsonl
from components.training import distributed, launch, sharding
from components.training.loop import METRICS_FILE, train
from components.training.models import load_trainable
from tests.conftest import REPO
from tests.training_helpers import EXAMPLES, nll, optim, tokens

STEPS = 6  # 9 pairs, batch 4: batches of 5 and 4 (a short last batch is spread over the others); with 2
# processes and micro-batches of 1, the batch of 5 leaves one process a zero-weight pass; 3 epochs
# Measured 2026-12-04 here (tiny Llama, fp32, lr 1e-3, 6 steps): the 2-process ddp per-step losses
# differed from the 1-process ones by at most 1.2e-7 and the grad norms by 7.2e-7 (float32 sums of
# the same terms in another order). 1e-5 leaves room for other CPUs' kernels and stays far below
# what a wrong split or a mean instead of a sum would give (the loss or grad norm halved at step 1).
TOLERANCE = 1e-5
# fsdp2, measured the same day on the same run: losses within 2.4e-7, written weights within 1.2e-6,
# grad norms within 2.8e-5 (1.2e-5 at step 1; on a 4-sequence batch the sharded gradients matched the
# 1-process ones within 2.4e-7). The norm is
# the float32 norm of sharded gradients: splitting the 1-process gradients in two halves alone moves
# it by 8.8e-5 on the same model (the 3M-entry embedding's float32 sum), and a norm that differs
# moves the clipped update. 1e-4 covers that; the bugs it must catch are far larger (FSDP's default
# averaging reduce-scatter, divide factor left at 2: step-1 grad norm 0.927 instead of 1.855, curves
# 1.5 apart; the tied head sharded apart from the embeddings, on an 8-pair version of this run:
# step-1 grad norm off by 2.6e-3).
FSDP2_TOLERANCE = 1e-4


def dialogue(task: int, sample: int, rng: random.Random) -> Trajectory:
    """A 2-turn trajectory of random token ids (the second prompt extends the first exchange)."""
    first = [rng.randrange(100, 5000) for _ in range(12)]
    replies = [[rng.randrange(100, 5000) for _ in range(6)] for _ in range(2)]
    second = first + replies[0] + [rng.randrange(100, 5000) for _ in range(5)]
    turns = [
        Turn(index=k, action="a", prompt_ids=p, response_ids=r)
        for k, (p, r) in enumerate(zip((first, second), replies))
    ]
    score = 1.0 if sample == 0 else 0.0
    return Trajectory(
        task_id=f"t{task}", task_index=task, run_seed=0, sample=sample, seed=sample, messages=[], turns=turns,
        answer="", answered=True, score=score, success=score == 1.0,
    )  # fmt: skip


def project(tmp_path: Path, model: Path, processes: int, strategy: str = "ddp") -> Path:
    """A params file for a multi-turn DPO actor run on 9 trajectory pairs; returns the params path."""
    rng = random.Random(0)
    trajs = [dialogue(task, sample, rng) for task in range(5) for sample in range(3)]
    rollouts, out = tmp_path / "rollouts", tmp_path / "train"
    rollouts.mkdir(parents=True, exist_ok=True)
    write_jsonl(rollouts / "trajectories.jsonl", trajs)
    pairs = [
        TrajectoryPair(
            task_id=f"t{t}",
            task_index=t,
            chosen=f"{t}/0/0",
            rejected=f"{t}/0/{s}",
            chosen_score=1.0,
            rejected_score=0.0,
        )
        for t, s in [(t, s) for t in range(4) for s in (1, 2)] + [(4, 1)]
    ]
    (out / "pairs").mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "pairs" / "pairs.jsonl", pairs)
    optim_ = dict(
        lr=1e-3, epochs=3, batch_size=4, micro_batch_size=1, warmup_ratio=0.0, checkpoint_every=2, keep_checkpoints=2
    )
    params = {
        "train": {"model": str(model), "trajectories": str(rollouts), "out_dir": str(out)},
        "actor": {"algo": "mtdpo", "optim": optim_},
        "cluster": {"train_processes": processes, "train_strategy": strategy},
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def run_actor(params: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWEETFLOW_PARAMS": str(params), "OMP_NUM_THREADS": "1"}
    env.pop(launch.MARKER, None)
    proc = subprocess.run(
        [sys.executable, "-m", "components.stages.actor"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def curves(out: Path) -> dict[str, list[float]]:
    """The per-step loss and grad norm of a run's metrics file."""
    rows = [json.loads(line) for line in (out / "actor" / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # one row per step: rank 0 alone writes
    return {key: [r[key] for r in rows] for key in ("loss", "grad_norm")}


def largest_difference(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    return max(abs(x - y) for key in a for x, y in zip(a[key], b[key]))


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """The same actor training in 1 process, in 2 (ddp) and in 2 sharded (fsdp2), about 15, 30 and 40 s
    here: (tmp, params, outputs), keyed 1, 2 and "fsdp2"."""
    tmp = tmp_path_factory.mktemp("train-processes")
    layouts = {1: (1, "ddp"), 2: (2, "ddp"), "fsdp2": (2, "fsdp2")}
    params = {key: project(tmp / str(key), tiny_model_dir, n, strategy) for key, (n, strategy) in layouts.items()}
    return tmp, params, {key: run_actor(path) for key, path in params.items()}


def test_two_processes_give_the_one_process_loss_curve(runs):
    tmp, _, procs = runs
    assert "data parallel" not in procs[1].stderr  # 1 process: no relaunch
    assert "data parallel over 2 processes" in procs[2].stderr
    one, two = curves(tmp / "1" / "train"), curves(tmp / "2" / "train")
    assert largest_difference(one, two) < TOLERANCE, (one, two)
    assert one["loss"][-1] < one["loss"][0]  # it trained
    actor = tmp / "2" / "train" / "actor"
    assert json.loads(procs[2].stdout.strip().splitlines()[-1]) == json.loads((actor / "metrics.json").read_text())
    assert (actor / "model" / "model.safetensors").exists()
    assert sorted(p.name for p in (actor / "checkpoints").iterdir()) == ["step-4", "step-6"]


def test_a_two_process_run_resumes_from_its_checkpoint_on_the_same_curve(runs):
    tmp, params, _ = runs
    actor = tmp / "2" / "train" / "actor"
    before = curves(tmp / "2" / "train")
    shutil.rmtree(actor / "checkpoints" / "step-6")  # as if killed between the step-4 and step-6 checkpoints
    shutil.rmtree(actor / "model")
    again = run_actor(params[2])
    assert "resuming from" in again.stderr and "step 4 of 6" in again.stderr
    assert largest_difference(curves(tmp / "2" / "train"), before) < TOLERANCE
    assert (actor / "model" / "model.safetensors").exists()


def weights(folder: Path) -> dict:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def test_fsdp2_gives_the_one_process_curves_and_model(runs):
    tmp, _, procs = runs
    assert "fsdp2 (sharded) over 2 processes" in procs["fsdp2"].stderr
    one, sharded = curves(tmp / "1" / "train"), curves(tmp / "fsdp2" / "train")
    assert largest_difference(one, sharded) < FSDP2_TOLERANCE, (one, sharded)
    actors = {key: tmp / str(key) / "train" / "actor" for key in (1, "fsdp2")}
    expected, written = weights(actors[1] / "model"), weights(actors["fsdp2"] / "model")
    assert expected.keys() == written.keys()
    assert max((expected[k] - written[k]).abs().max().item() for k in expected) < TOLERANCE
    for step in ("step-4", "step-6"):  # whole HF folders, gathered by rank 0: what 1 process writes
        assert contents(actors[1] / "checkpoints" / step) == contents(actors["fsdp2"] / "checkpoints" / step)


def contents(folder: Path) -> tuple[list[str], list[str]]:
    """A checkpoint folder's file names and the tensor names of its model.safetensors."""
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as fh:
        return sorted(p.name for p in folder.iterdir()), sorted(fh.keys())


def test_a_fsdp2_run_resumes_from_its_gathered_checkpoint_on_the_same_curve(runs):
    tmp, params, _ = runs
    actor = tmp / "fsdp2" / "train" / "actor"
    before, model = curves(tmp / "fsdp2" / "train"), weights(actor / "model")
    shutil.rmtree(actor / "checkpoints" / "step-6")
    shutil.rmtree(actor / "model")
    again = run_actor(params["fsdp2"])
    assert "resuming from" in again.stderr and "step 4 of 6" in again.stderr
    assert largest_difference(curves(tmp / "fsdp2" / "train"), before) < FSDP2_TOLERANCE
    resumed = weights(actor / "model")
    assert max((model[k] - resumed[k]).abs().max().item() for k in model) < TOLERANCE


def test_a_global_batch_that_does_not_split_evenly_is_refused(toy_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: 3)
    cfg = optim(batch_size=4, micro_batch_size=2)
    with pytest.raises(ValueError, match=r"batch_size \(4\) must be a multiple of .*\(2 x 3 = 6\)"):
        train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path, {}, tokens)


def test_each_process_takes_every_world_th_micro_batch(monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    assert distributed.share(range(0, 8, 2)) == [2, 6]
    assert [distributed.missing_passes(n) for n in (1, 2, 3, 4)] == [1, 0, 1, 0]  # rank 0 holds the odd one
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    assert [distributed.missing_passes(n) for n in (1, 2, 3, 4)] == [0, 0, 0, 0]


def test_a_process_other_than_rank_0_trains_but_writes_nothing(toy_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    cfg = optim()
    history = train(load_trainable(str(toy_model_dir), cfg), EXAMPLES, nll, cfg, tmp_path, {}, tokens)
    assert len(history) == 6
    assert list(tmp_path.iterdir()) == []  # no metrics file, no checkpoint


def test_zero3_is_refused_with_what_to_do(monkeypatch):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: object())  # as if installed
    with pytest.raises(ConfigError, match="does not shard through DeepSpeed"):
        launch.check_strategy(TrainStrategy.zero3)
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install deepspeed"):
        launch.check_strategy(TrainStrategy.zero3)
    launch.check_strategy(TrainStrategy.ddp)
    launch.check_strategy(TrainStrategy.fsdp2)
    for strategy in TrainStrategy:
        assert launch.config_file(strategy).exists()


def cluster_params(tmp_path: Path, monkeypatch, processes: int) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"train_processes": processes, "train_strategy": "ddp"}}))
    monkeypatch.setenv("SWEETFLOW_PARAMS", str(path))
    monkeypatch.delenv(launch.MARKER, raising=False)


def test_the_stage_relaunches_under_accelerate_only_with_more_than_one_process(tmp_path, monkeypatch):
    launched = []

    def fake_run(command, env):
        launched.append((command, env))
        return subprocess.CompletedProcess(command, 3)

    monkeypatch.setattr(launch.subprocess, "run", fake_run)
    cluster_params(tmp_path, monkeypatch, 1)
    launch.train_processes("components.stages.actor", [], optim(batch_size=4, micro_batch_size=1))
    assert launched == []  # 1 process: the stage goes on in this process

    cluster_params(tmp_path, monkeypatch, 2)
    with pytest.raises(SystemExit) as exit_:
        launch.train_processes("components.stages.actor", ["--x"], optim(batch_size=4, micro_batch_size=1))
    assert exit_.value.code == 3  # accelerate's status
    ((command, env),) = launched
    assert command[1:4] == ["-m", "accelerate.commands.launch", "--config_file"]
    assert command[4] == str(REPO / "configs" / "accelerate" / "ddp.yaml")
    assert command[5:] == [
        "--num_processes",
        "2",
        "--main_process_port",
        "0",
        "--module",
        "components.stages.actor",
        "--x",
    ]
    assert env[launch.MARKER] == "1"  # the launched processes train instead of relaunching
    assert env[sharding.STRATEGY] == "ddp"  # and know whether to shard


def test_a_batch_that_does_not_split_over_the_processes_fails_before_launching(tmp_path, monkeypatch):
    monkeypatch.setattr(launch.subprocess, "run", lambda *a, **k: pytest.fail("launched"))
    cluster_params(tmp_path, monkeypatch, 3)
    with pytest.raises(SystemExit, match=r"batch_size \(4\) must be a multiple .*\(1 x 3 = 3\)"):
        launch.train_processes("components.stages.actor", [], optim(batch_size=4, micro_batch_size=1))
