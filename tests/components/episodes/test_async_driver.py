"""The per-arrival episode driver against the turn-synchronous one, on a fake streaming engine.

The fake engine answers from a script of (prompt text, seed), so an answer depends only on the
request; each streamed request finishes after a latency drawn from its seed (virtual time), so
requests end out of order and episodes of different lengths overlap. Same jobs and seeds must
give the same records as the sync driver; `on_done` gets each episode while others still run.
"""

from __future__ import annotations

import logging
import re

import pytest

from components.config.sections import DataConfig, DriverKind, EpisodeSection, EpisodeStageConfig
from components.data.split import Split
from components.engines.base import StreamingEngine
from components.episodes import build, play
from components.episodes.async_driver import AsyncEpisodeDriver
from components.episodes.driver import EpisodeConfig, EpisodeDriver, EpisodeJob
from components.episodes.simulators import LLMSimulator
from components.tasks.base import ANSWER_MARKER
from components.tasks.colbench_backend.simulator import RetrievalSimulator
from components.tasks.colbench_backend.task import ColbenchBackend
from tests.factories import make_task
from tests.scripted_engine import ScriptedEngine

BACKEND = ColbenchBackend({"data": DataConfig()})


def varied(prompt: str, seed: int) -> str:
    """Task f<i> asks i % 4 questions (so some hit a 3-turn cap), each of a length drawn from the seed."""
    replies = prompt.count("<|im_start|>user") - 1
    if replies >= int(re.search(r"def f(\d+)", prompt).group(1)) % 4:
        return f"{ANSWER_MARKER}\ndef add(a, b):\n    return a + b  # {seed % 97}"
    return "How should I combine the numbers? " + "Please say more. " * (seed % 5)


def human(prompt: str, seed: int) -> str:
    """The LLM simulator's script: greedy, so it depends on the text only."""
    return f"Add them; you asked {prompt.count('combine')} times."


class StreamingScripted(ScriptedEngine):
    """ScriptedEngine plus a stream: request i finishes at virtual time submit time + latency(seed)."""

    def __init__(self, tokenizer, script, sim_script=human, fail_after: int | None = None):
        super().__init__(tokenizer, script)
        self.sim_script, self.fail_after = sim_script, fail_after
        self.clock, self.queue, self.collected, self.cancelled = 0, [], 0, 0

    def chat(self, conversations, sampling, seeds):  # the LLM simulator's sync path
        return [self._one(self.sim_script, self._render(c), sampling) for c in conversations]

    def _render(self, conversation):
        return self.tokenizer.encode(
            self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        )

    def _one(self, script, prompt, sampling, seed=0):
        return ScriptedEngine(self.tokenizer, script).generate([prompt], sampling, [seed])[0]

    def submit(self, key, prompt, sampling, seed):
        self.batches.append([list(prompt)])
        self.seeds.append([seed])
        done_at = self.clock + 1 + (seed * 7919) % 13
        self.queue.append((done_at, len(self.queue), key, self._one(self.script, prompt, sampling, seed)))

    def submit_chat(self, key, conversation, sampling, seed):
        done_at = self.clock + 1 + (seed * 31) % 5
        self.queue.append(
            (done_at, len(self.queue), key, self._one(self.sim_script, self._render(conversation), sampling))
        )

    def collect(self):
        if self.fail_after is not None and self.collected == self.fail_after:
            raise RuntimeError("engine core died")
        self.collected += 1
        self.clock = min(q[0] for q in self.queue)
        out = sorted(q for q in self.queue if q[0] == self.clock)
        self.queue = [q for q in self.queue if q[0] != self.clock]
        return [(key, gen) for _, _, key, gen in out]

    def in_flight(self):
        return len(self.queue)

    def cancel(self):
        self.cancelled += len(self.queue)
        self.queue = []


def jobs(count: int = 12) -> list[EpisodeJob]:
    return [EpisodeJob(i, make_task(f"f{i}"), run_seed=3, sample=i % 2) for i in range(count)]


def dumps(trajs) -> list[dict]:
    return [t.model_dump() for t in sorted(trajs, key=lambda t: (t.task_index, t.run_seed, t.sample))]


def both(tokenizer, simulator_for, cfg: EpisodeConfig, job_list):
    """(sync trajectories, async trajectories, async engine, on_done calls with the in-flight count)."""
    sync_engine = StreamingScripted(tokenizer, varied)
    sync = EpisodeDriver(sync_engine, simulator_for(sync_engine), cfg, BACKEND).run(job_list, progress=False)
    engine = StreamingScripted(tokenizer, varied)
    seen = []
    driver = AsyncEpisodeDriver(engine, simulator_for(engine), cfg, BACKEND)
    got = driver.run(job_list, on_done=lambda t: seen.append((t.task_index, engine.in_flight())), progress=False)
    return sync, got, engine, seen


def test_same_records_as_the_sync_driver_as_each_finishes(tokenizer):
    cfg = EpisodeConfig(max_turns=3, max_tokens=64)
    sync, got, engine, seen = both(tokenizer, lambda e: RetrievalSimulator(), cfg, jobs())
    assert isinstance(engine, StreamingEngine)
    assert dumps(got) == dumps(sync)
    assert [t.task_index for t in got] == list(range(12))  # returned in job order
    assert sorted(i for i, _ in seen) == list(range(12))  # on_done once per episode ...
    assert [i for i, _ in seen] != list(range(12))  # ... in the order they ended
    assert any(in_flight > 0 for _, in_flight in seen)  # while other requests were still running
    assert {len(t.turns) for t in got} == {1, 2, 3}  # varied lengths, turn cap included
    assert any(not t.answered for t in got)


def test_same_records_with_the_llm_simulator_on_the_shared_engine(tokenizer):
    cfg = EpisodeConfig(max_turns=4, max_tokens=64)
    sync, got, engine, _ = both(tokenizer, lambda e: LLMSimulator(engine=e, task=BACKEND), cfg, jobs(8))
    assert dumps(got) == dumps(sync)
    assert any(t.turns[0].observation.startswith("Add them") for t in got if len(t.turns) > 1)


def test_engine_error_propagates_and_cancels_requests_in_flight(tokenizer):
    engine = StreamingScripted(tokenizer, varied, fail_after=2)
    seen = []
    driver = AsyncEpisodeDriver(engine, RetrievalSimulator(), EpisodeConfig(max_turns=3), BACKEND)
    with pytest.raises(RuntimeError, match="engine core died"):
        driver.run(jobs(), on_done=seen.append, progress=False)
    assert engine.cancelled > 0 and engine.in_flight() == 0
    assert len(seen) < 12  # episodes written before the error stay written


def test_a_full_context_ends_the_episode_as_in_the_sync_driver(tokenizer):
    cfg = EpisodeConfig(max_turns=10, max_tokens=200, max_model_len=400)
    sync, got, _, _ = both(tokenizer, lambda e: RetrievalSimulator(), cfg, jobs(4))
    assert dumps(got) == dumps(sync)


def test_an_engine_that_cannot_stream_is_refused(tokenizer):
    with pytest.raises(TypeError, match="cannot stream"):
        AsyncEpisodeDriver(ScriptedEngine(tokenizer, varied), RetrievalSimulator(), EpisodeConfig(), BACKEND)


@pytest.mark.parametrize(
    ("kind", "engine_class", "driver_class"),
    [
        (DriverKind.sync, StreamingScripted, EpisodeDriver),
        (DriverKind.async_, StreamingScripted, AsyncEpisodeDriver),
        (DriverKind.async_, ScriptedEngine, EpisodeDriver),  # no stream: sync, with a warning
    ],
)
def test_build_driver_picks_the_driver(tokenizer, monkeypatch, caplog, kind, engine_class, driver_class):
    monkeypatch.setattr(build, "engine_for", lambda *args, **kwargs: engine_class(tokenizer, varied))
    cfg = EpisodeStageConfig(engine="hf", split=Split.all)
    with caplog.at_level(logging.WARNING, logger="components.episodes.build"):
        driver = build.build_driver(cfg, EpisodeSection(driver=kind), 0, BACKEND)
    assert type(driver) is driver_class
    warned = "cannot stream" in caplog.text
    assert warned == (kind == DriverKind.async_ and driver_class is EpisodeDriver)


def test_the_driver_setting_is_not_part_of_the_episode_fingerprint():
    cfg = EpisodeStageConfig()
    sync = play.episode_fingerprint(cfg, EpisodeSection(driver=DriverKind.sync), BACKEND)
    assert sync == play.episode_fingerprint(cfg, EpisodeSection(driver=DriverKind.async_), BACKEND)
    assert sync != play.episode_fingerprint(cfg, EpisodeSection(driver="async", max_tokens=128), BACKEND)
    assert EpisodeSection.model_validate({"driver": "async"}).driver is DriverKind.async_
    with pytest.raises(ValueError, match="driver"):
        EpisodeSection.model_validate({"driver": "parallel"})
