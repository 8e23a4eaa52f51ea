"""Train CORY's two agents (or the single-agent PPO baseline) on a single-turn task, evaluating every
iteration.

Run as `python -m components.stages.cory`: reads params sections `cory`, `task` and the section of
the task `task.name` names (components/cory/registry.py: gsm8k | reviews), that task's records
files and the base model. Writes to `cory.out_dir`:
- `eval_initial.json`: the base model's evaluation before any update (both agents start there);
- `iterations.jsonl`: one row per iteration: roles, per-agent train metrics (`train/<agent>/...`:
  task_reward, correct, kl (the KL the penalty used, summed per answer), kl_sampled, kl_full,
  kl_coef, nonscore_reward, score (the task reward after shaping), score_running_mean/std, lr (the
  learning rate in use: cory.lr or cory.ppo_lr), policy_loss, value_loss, clipfrac,
  value_clipfrac, approx_kl, grad_norm, response_tokens, ...), correctness per role (`train/<role>/correct`),
  per-agent evaluation (components/cory/evaluation.py: `eval/<agent>/reward|kl|objective` on
  greedy answers, pass_at_1 on a binary task, `sampled_reward|sampled_kl|sampled_objective|entropy|
  distinct_1|distinct_2` on answers sampled at temperature 1, response_tokens, tokens),
  `no_signal` (every answer of the iteration got the same reward, so the task gave the update
  nothing to follow: logged as a warning that names the way out), tokens generated and seconds
  (total, rollout, update, eval);
- `samples.jsonl`: the first questions' answers of each iteration (prompt, target, answer, reward);
- `eval_prompts.jsonl`: per evaluation (iteration 0: the base model), agent and held-out prompt,
  the greedy answer's reward and the sampled answers' mean reward (for intervals paired by prompt);
- `checkpoint/state.pt` (components.cory.state): resumable after every iteration;
- `metrics.json`: flat final / best numbers; `adapters/<agent>/` (each PEFT adapter) and, with
  `save_merged`, `agents/<agent>/` (merged HF folders that eval and vLLM load);
- `serving/` while running with vLLM: scratch merged weights the engine loads, removed at the end.

Algorithm (Ma et al. 2024, arXiv 2410.06101, sec. 3; docs/algorithms.md "CORY"): each iteration draws
questions, the pioneer answers, the observer answers with the pioneer's answer as reference, both
get r(q,a1) + r(q,a2) and are updated by their own PPO (components.cory.ppo); roles are exchanged
every T iterations (components.cory.agents). `algo: ppo` is the single-agent baseline with the
same number of answers per iteration (components.cory.rollout) and its own learning rate
(`cory.ppo_lr`). `shaping` chooses the paper's reward shaping (default) or the authors' TRL one
(components.cory.shaping). Departures from the paper: LoRA adapters on one frozen base instead of
two full copies; optimizer and shaping state kept across exchanges.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from components.config.cory import CoryConfig
from components.config.sections import ConfigError
from components.config.training import Algo
from components.cory import state
from components.cory.agents import AgentPool, agent_names, roles_at
from components.cory.evaluation import evaluate_agent
from components.cory.ppo import ppo_update
from components.cory.registry import make_prompt_task, prompt_task_sections
from components.cory.rollout import Sample, cory_samples, ppo_samples
from components.cory.serving import PolicyServer, make_server
from components.cory.tasks import PromptTask
from components.engines.base import SamplingConfig
from components.episodes.driver import derive_seed
from components.stages.result import StageResult

log = logging.getLogger(__name__)
SAMPLERS = {Algo.cory: cory_samples, Algo.ppo: ppo_samples}
SAMPLE_QUESTIONS = 2  # questions per iteration whose answers go to samples.jsonl
EVAL_KEYS = ("pass_at_1", "reward", "kl", "objective", "sampled_reward", "sampled_kl", "entropy", "distinct_2")
NO_SIGNAL = (
    "iteration %d: every answer got the same reward (%.3f), so the update follows the KL penalty alone "
    "(exactly zero while the agents equal the base model): the task gives this model no signal. Use a "
    "task whose reward varies across its answers (--task reviews), a stronger model, or more or longer "
    "answers (cory.questions_per_iteration, cory.max_new_tokens)"
)


def draw_questions(n_rows: int, k: int, seed: int, iteration: int) -> list[int]:
    """The iteration's question indices: a seeded draw without replacement, stable on resume."""
    return random.Random(derive_seed(seed, "questions", iteration)).sample(range(n_rows), k)


def evaluate_all(
    cfg: CoryConfig,
    pool: AgentPool,
    server: PolicyServer,
    task: PromptTask,
    rows: Sequence[Any],
    agents: Sequence[str],
) -> tuple[dict[str, dict[str, float]], list[dict]]:
    """Each agent's evaluation metrics, and the per-prompt rows of all of them (tagged with the agent)."""
    sampling = SamplingConfig(temperature=cfg.eval_temperature, max_tokens=cfg.max_new_tokens)
    out = {
        agent: evaluate_agent(
            server,
            pool,
            agent,
            task,
            rows,
            sampling=sampling,
            samples=cfg.eval_samples,
            chat_template=cfg.chat_template,
            eta=cfg.eta,
            seed=cfg.seed,
            chunk=cfg.minibatch_size,
        )
        for agent in agents
    }
    prompts = [{"agent": agent} | row for agent, (_, rows_) in out.items() for row in rows_]
    return {agent: metrics for agent, (metrics, _) in out.items()}, prompts


def run_iteration(
    cfg: CoryConfig,
    pool: AgentPool,
    server: PolicyServer,
    task: PromptTask,
    train_rows: Sequence[Any],
    eval_rows: Sequence[Any],
    iteration: int,
) -> tuple[dict, list[Sample]]:
    """Rollouts, one PPO update per agent, evaluation of each agent; the iteration's row and samples."""
    began = time.perf_counter()
    roles = roles_at(iteration, cfg.algo, cfg.exchange_every)
    drawn = draw_questions(len(train_rows), cfg.questions_per_iteration, cfg.seed, iteration)
    sampling = SamplingConfig(temperature=cfg.temperature, max_tokens=cfg.max_new_tokens)
    samples = SAMPLERS[cfg.algo](
        server.engine_for, roles, task, [train_rows[i] for i in drawn], sampling, cfg.chat_template, cfg.seed, iteration
    )
    rolled = time.perf_counter()
    row: dict = {
        "iteration": iteration,
        "algo": cfg.algo.value,
        "roles": roles,
        "exchanged": iteration > 1 and roles != roles_at(iteration - 1, cfg.algo, cfg.exchange_every),
        "questions": drawn,
        "no_signal": len({s.task_reward for s in samples}) == 1,
    }
    if row["no_signal"]:
        log.warning(NO_SIGNAL, iteration, samples[0].task_reward)
    for agent in pool.agents:
        stats = ppo_update(pool, agent, [s for s in samples if s.agent == agent], cfg, iteration)
        server.updated(agent)
        row |= {f"train/{agent}/{k}": v for k, v in stats.items()}
    for role in roles:
        mine = [s.correct for s in samples if s.role == role]
        row[f"train/{role}/correct"] = sum(mine) / len(mine)
    updated = time.perf_counter()
    evaluated, prompts = evaluate_all(cfg, pool, server, task, eval_rows, list(pool.agents))
    for agent, metrics in evaluated.items():
        row |= {f"eval/{agent}/{k}": v for k, v in metrics.items()}
    done = time.perf_counter()
    row |= {
        "tokens_generated": sum(len(s.response_ids) for s in samples),
        "eval_tokens_generated": sum(row[f"eval/{a}/tokens"] for a in pool.agents),
        "seconds": done - began,
        "seconds_rollout": rolled - began,
        "seconds_update": updated - rolled,
        "seconds_eval": done - updated,
    }
    return row, samples, [{"iteration": iteration} | p for p in prompts]


def sample_rows(
    iteration: int, samples: Sequence[Sample], task: PromptTask, rows: Sequence[Any], drawn: list[int]
) -> list[dict]:
    return [
        {"iteration": iteration, "question": drawn[s.question], "role": s.role, "agent": s.agent}
        | task.describe(rows[drawn[s.question]])
        | {"answer": s.text, "reward": s.correct, "task_reward": s.task_reward}
        for s in samples
        if s.question < SAMPLE_QUESTIONS
    ]


def summarize(rows: list[dict], initial: dict[str, float] | None, agents: Sequence[str]) -> dict[str, float]:
    """Flat numbers for metrics.json: initial, final and best evaluation per agent and their mean."""
    out: dict[str, float] = {"iterations": float(len(rows))}
    keys = [k for k in EVAL_KEYS if not rows or f"eval/{agents[0]}/{k}" in rows[-1]]
    if initial:
        out |= {f"initial_{k}": float(initial[k]) for k in keys if k in initial}
    if not rows:
        return out
    out["no_signal_iterations"] = float(sum(bool(r.get("no_signal")) for r in rows))
    last = rows[-1]
    for key in keys:
        for agent in agents:
            out[f"final_{agent}_{key}"] = last[f"eval/{agent}/{key}"]
        out[f"final_mean_{key}"] = sum(last[f"eval/{a}/{key}"] for a in agents) / len(agents)
    for agent in agents:
        out[f"best_{agent}_reward"] = max(r[f"eval/{agent}/reward"] for r in rows)
        out[f"best_{agent}_objective"] = max(r[f"eval/{agent}/objective"] for r in rows)
        out[f"final_{agent}_train_kl"] = last[f"train/{agent}/kl"]
        out[f"final_{agent}_train_task_reward"] = last[f"train/{agent}/task_reward"]
    out["tokens_generated"] = float(sum(r["tokens_generated"] for r in rows))
    out["seconds_total"] = sum(r["seconds"] for r in rows)
    out["seconds_per_iteration"] = out["seconds_total"] / len(rows)
    return out


def _load_data(cfg: CoryConfig, task: PromptTask) -> tuple[list[Any], list[Any]]:
    train_rows = task.train_rows()
    try:
        eval_rows = task.eval_rows(cfg.eval_questions)
    except ValueError as exc:
        raise ConfigError(f"cory.eval_questions: {exc}") from None
    if len(train_rows) < cfg.questions_per_iteration:
        raise ConfigError(
            f"cory.questions_per_iteration is {cfg.questions_per_iteration} but task {task.name} has "
            f"{len(train_rows)} training rows"
        )
    return train_rows, eval_rows


def _initial_eval(
    cfg: CoryConfig, pool: AgentPool, server: PolicyServer, task: PromptTask, eval_rows, start: int
) -> dict | None:
    """The base model's evaluation (agent0 before any update is the base), computed once."""
    path = cfg.out_dir / state.INITIAL_EVAL
    if path.exists():
        return json.loads(path.read_text())
    if start > 0:
        return None
    evaluated, prompts = evaluate_all(cfg, pool, server, task, eval_rows, ["agent0"])
    initial = evaluated["agent0"]
    state.append_rows(cfg.out_dir / state.PROMPTS, [{"iteration": 0} | p for p in prompts])
    path.write_text(json.dumps(initial, indent=2) + "\n")
    state.save_checkpoint(cfg.out_dir, pool, 0, cfg.fingerprint())
    log.info("initial model: reward %.3f, kl %.3f", initial["reward"], initial["kl"])
    return initial


def _log_row(row: dict, agents: Sequence[str], total: int) -> None:
    roles = " ".join(f"{role}={agent}" for role, agent in row["roles"].items())
    parts = [
        f"{a}: train reward {row[f'train/{a}/task_reward']:.3f} kl {row[f'train/{a}/kl']:.3f} "
        f"ploss {row[f'train/{a}/policy_loss']:.4f} | eval reward {row[f'eval/{a}/reward']:.3f} "
        f"kl {row[f'eval/{a}/kl']:.3f} obj {row[f'eval/{a}/objective']:.3f}"
        for a in agents
    ]
    log.info(
        "iteration %d/%d (%s%s) %.1f s; %s",
        row["iteration"],
        total,
        roles,
        ", roles exchanged" if row["exchanged"] else "",
        row["seconds"],
        "; ".join(parts),
    )


def _save_agents(cfg: CoryConfig, pool: AgentPool) -> dict[str, Path]:
    paths = {"adapters": cfg.out_dir / "adapters"}
    pool.model.save_pretrained(paths["adapters"])
    if cfg.save_merged:
        for agent in pool.agents:
            paths[agent] = pool.export_merged(agent, cfg.model, cfg.out_dir / "agents" / agent)
    return paths


def run(cfg: CoryConfig, task: PromptTask) -> StageResult:
    """Train on `task` for `cfg.iterations` (resuming a killed run); see the module docstring for the files."""
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_rows, eval_rows = _load_data(cfg, task)
    agents = agent_names(cfg.algo)
    pool = AgentPool(cfg, agents)
    start = state.resume(out_dir, pool, cfg.fingerprint())
    server = make_server(
        cfg.engine, cfg.vllm_sync, pool, cfg.model, out_dir / "serving", cfg.seed, cfg.generation_batch_size
    )
    log.info(
        "%s on %s with %s: %d agent(s), iterations %d..%d, engine %s",
        cfg.algo.value,
        task.name,
        cfg.model,
        len(agents),
        start + 1,
        cfg.iterations,
        type(server).__name__,
    )
    try:
        initial = _initial_eval(cfg, pool, server, task, eval_rows, start)
        bar = tqdm(total=cfg.iterations, initial=min(start, cfg.iterations), desc=cfg.algo.value, unit="it")
        for iteration in range(start + 1, cfg.iterations + 1):
            row, samples, prompts = run_iteration(cfg, pool, server, task, train_rows, eval_rows, iteration)
            state.append_rows(out_dir / state.ITERATIONS, [row])
            state.append_rows(out_dir / state.PROMPTS, prompts)
            state.append_rows(
                out_dir / state.SAMPLES, sample_rows(iteration, samples, task, train_rows, row["questions"])
            )
            state.save_checkpoint(out_dir, pool, iteration, cfg.fingerprint())
            bar.update(1)
            bar.set_postfix({f"{a}_reward": f"{row[f'eval/{a}/reward']:.2f}" for a in agents})
            _log_row(row, agents, cfg.iterations)
        bar.close()
    finally:
        server.close()
    rows = state.read_rows(out_dir / state.ITERATIONS)
    metrics = summarize(rows, initial, agents)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    paths = _save_agents(cfg, pool)
    return StageResult(
        paths={"iterations": out_dir / state.ITERATIONS, "metrics": out_dir / "metrics.json", **paths}, metrics=metrics
    )


def main() -> None:
    from components.stages.cli import stage_cli

    sections, _ = stage_cli("components.stages.cory", prompt_task_sections)
    print(json.dumps(run(sections["cory"], make_prompt_task(sections)).metrics))


if __name__ == "__main__":
    main()
