"""On the default 135M model, PPO and each CORY agent raise the held-out reward of the reviews task.

The reviews profile's settings (components/cory/reviews.py; params.yaml profile `reviews`) with
its six iterations, on openers generated into tmp_path: the stage itself, with the vLLM engine. The
base model continues neutral openers with near-neutral text (VADER compound about 0.06); after the
profile's iterations each agent alone, on the same 32 held-out openers, must score higher on its
sampled answers, paired by opener (bootstrap interval above 0): the goal, on one seed;
benchmarks/cory.py measures it over seeds (README: which agents reach it).
"""

from __future__ import annotations

import numpy as np
import pytest

from components.config.cory import CoryConfig
from components.config.prompt_tasks import ReviewsConfig
from components.cory import state
from components.cory.reviews import ReviewsTask
from components.cory.reviews_generate import run as generate
from components.episodes.metrics import bootstrap_ci
from components.stages.cory import run
from flows.planning.profiles import resolve

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.manual]  # ~4 + 6.5 minutes on 2 cores


def _gain(out_dir, agent: str) -> tuple[float, tuple[float, float]]:
    rows = state.read_rows(out_dir / state.PROMPTS)
    last = max(r["iteration"] for r in rows)
    base = {r["prompt"]: r["sampled_reward"] for r in rows if r["iteration"] == 0}
    final = {r["prompt"]: r["sampled_reward"] for r in rows if r["iteration"] == last and r["agent"] == agent}
    diff = np.array([final[p] - base[p] for p in base])
    return float(diff.mean()), bootstrap_ci(diff, 4000)


@pytest.mark.parametrize("algo, agents", [("ppo", ["agent0"]), ("cory", ["agent0", "agent1"])])
def test_each_agent_beats_the_base_model_on_held_out_openers(prepared_model_dir, tmp_path, algo, agents):
    doc = resolve("reviews")
    reviews = ReviewsConfig(**doc["reviews"] | {"file": tmp_path / "openers.jsonl"})
    generate(reviews)
    cfg = CoryConfig(**doc["cory"] | {"algo": algo, "model": str(prepared_model_dir), "out_dir": tmp_path / "run"})
    run(cfg, ReviewsTask(reviews))
    for agent in agents:
        gain, (low, _) = _gain(cfg.out_dir, agent)
        assert low > 0, f"{algo} {agent}: sampled reward gain {gain:.3f}, interval low {low:.3f}"
