"""What an episode stage plays with: the agent engine, the simulator (sharing the agent's engine
unless it has a model of its own) and the driver, built from the stage's configs, and their release.
Used by components/episodes/play.py (one engine in the stage's process) and components/cluster/episodes.py
(one per Ray actor)."""

from __future__ import annotations

import logging
from typing import Any

from components.config.schema import section_of
from components.config.sections import DriverKind, EpisodeSection, EpisodeStageConfig, OpenAIRetries, SimulatorKind
from components.engines.base import Engine, StreamingEngine
from components.engines.factory import EngineKind, make_engine, resolve_kind
from components.engines.served import served_engine
from components.episodes.async_driver import AsyncEpisodeDriver
from components.episodes.driver import EpisodeConfig, EpisodeDriver, TurnSampler
from components.episodes.simulators import make_simulator
from components.tasks.base import Task

log = logging.getLogger(__name__)


def engine_for(
    kind: str,
    model: str,
    seed: int,
    max_model_len: int,
    openai: dict[str, Any] | None = None,
    tensor_parallel: int = 1,
) -> Engine:
    """Build an engine; vLLM also gets the episode's context budget and its GPUs (`tensor_parallel`),
    an OpenAI client `openai` options. A vLLM engine is the run's one engine when the pipeline
    started one that serves `model` (components/engines/served.py)."""
    resolved = resolve_kind(kind)
    if resolved == EngineKind.VLLM and (served := served_engine(model, seed, openai or {})):
        return served
    options = (
        {"max_model_len": max_model_len, "tensor_parallel_size": tensor_parallel} if resolved == EngineKind.VLLM else {}
    )
    if resolved == EngineKind.OPENAI:
        options.update(openai or {})
    return make_engine(kind, model, seed=seed, **options)


def openai_options(cfg: OpenAIRetries) -> dict[str, Any]:
    """The stage's retry settings for OpenAI engines; their final error names the setting to raise."""
    section = section_of(type(cfg))
    return {
        "max_retries": cfg.openai_retries,
        "backoff_s": cfg.openai_backoff_s,
        "retry_setting": f"{section}.openai_retries" if section else "openai_retries",
    }


def build_driver(
    cfg: EpisodeStageConfig, episode: EpisodeSection, seed: int, task: Task, gpus: int = 1
) -> EpisodeDriver | AsyncEpisodeDriver:
    """The agent engine (built once; vLLM on `gpus` GPUs), the simulator (sharing the agent engine
    unless told not to), and the driver `episode.driver` names (async needs an engine that streams;
    else sync, logged)."""
    if cfg.simulator == SimulatorKind.llm:  # before any engine is built
        task.check_simulator_engine(resolve_kind(cfg.simulator_engine or cfg.engine).value)
    openai = openai_options(cfg)
    agent = engine_for(cfg.engine, cfg.model, seed, episode.max_model_len, openai, gpus)
    sim_engine = None
    if cfg.simulator == SimulatorKind.llm:
        sim_kind = cfg.simulator_engine or cfg.engine
        sim_engine = (
            agent
            if cfg.simulator_model is None
            else engine_for(sim_kind, cfg.simulator_model, seed, episode.max_model_len, openai, gpus)
        )
    max_chars = task.reply_cut(episode.sim_max_chars)
    simulator = make_simulator(cfg.simulator, task, sim_engine, episode.sim_max_tokens, max_chars)
    ep_cfg = EpisodeConfig(
        max_turns=episode.max_turns,
        temperature=episode.temperature,
        max_tokens=episode.max_tokens,
        max_model_len=episode.max_model_len,
    )
    if episode.driver == DriverKind.async_:
        if isinstance(agent, StreamingEngine):
            return AsyncEpisodeDriver(agent, simulator, ep_cfg, task)
        log.warning(
            "episode.driver is async but the %s engine cannot stream requests: running the sync driver"
            " (same records; one agent batch per turn)",
            agent.name,
        )
    return EpisodeDriver(agent, simulator, ep_cfg, task)


def sampled_driver(
    cfg: EpisodeStageConfig, episode: EpisodeSection, seed: int, task: Task, gpus: int, sampler: TurnSampler
) -> EpisodeDriver:
    """`build_driver`'s turn-synchronous driver with the turn hook `sampler` (e.g. best-of-N): the
    per-arrival driver has no such hook, so `episode.driver: async` runs sync here (logged)."""
    if episode.driver == DriverKind.async_:
        log.warning("episode.driver is async but %s needs the sync driver: running it", type(sampler).__name__)
    driver = build_driver(cfg, episode.model_copy(update={"driver": DriverKind.sync}), seed, task, gpus)
    driver.sampler = sampler
    return driver


def close_engines(driver: EpisodeDriver | AsyncEpisodeDriver) -> None:
    """Release the agent engine and the simulator's own engine when it has one."""
    sim_engine = getattr(driver.simulator, "engine", None)
    driver.agent.close()
    if sim_engine is not None and sim_engine is not driver.agent:
        sim_engine.close()
