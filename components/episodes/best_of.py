"""Critic-guided best-of-N at evaluation: at each agent turn N candidate actions are sampled from the
actor and the one a critic ranks highest is sent to the human (the critic analysis of SWEET-RL, Zhou
et al. 2025, and the authors' `scripts/rank_best_of_n.py`, which use N = 16).

Reads: the actor engine's samples; for `CriticRanker`, a critic and the actor as transformers models
(frozen; one copy when both are the same folder). Writes nothing: `BestOfN` is the episode driver's
turn hook (driver.py `TurnSampler`), so the rest of the protocol is the driver's, and a kept turn
records its own exact prompt/response token ids and log-probs.

Sampling: ONE `generate` call per turn for the whole batch, each live episode's prompt repeated N
times, at the episode's temperature and max_tokens. Candidate k's seed is the plain sample's
`derive_seed(episode seed, "turn", t)` for k = 0 and `derive_seed(episode seed, "turn", t,
"candidate", k)` after, so N = 1 is plain sampling token for token, and candidate 0 of best-of-N is
the action plain sampling would have sent.

Score of candidate a at state o (the `actor` ranking baseline of components/stages/ranking.py, the
authors' code): beta * (mean_l log pi_critic(a^l | c, o, a^<l) - mean_l log pi_actor(a^l | o, a^<l)),
the critic reading the reference prefix of c (components/lm/sequences.py) before the state's prompt
ids, the actor the prompt ids alone; each model scores a state's N candidates on one KV cache
(components/lm/shared_prefix.py). The highest score is kept, ties going to the earlier candidate.
What c holds is `critic_information`'s one line. Departure from the authors' script: N, the
temperature and the token budget are the run's (the default profile: 24-token turns at 0.7).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol, Sequence

from components.engines.base import Engine, Generation, SamplingConfig
from components.episodes.episode import Episode, EpisodeSteps, derive_seed
from components.tasks.base import Task

BASE_CRITIC = "base"  # `--critic base`: the untrained critic, the frozen base model (params critic.model) with c


def critic_information(task: Task, record: Any) -> str:
    """SWEET-RL's c as the critic sees it here: the task's training-time information."""
    return task.training_info(record)


def candidate_seed(ep: Episode, k: int) -> int:
    """The seed of candidate k of the episode's next turn (k = 0: the plain sample's seed)."""
    plain = EpisodeSteps.agent_seed(ep)
    return plain if k == 0 else derive_seed(ep.job.seed, "turn", len(ep.turns), "candidate", k)


def check_best_of(n: int, critic: str | None) -> None:
    """ValueError on a combination `--best-of N --critic C` cannot run: N < 1, N > 1 without a
    critic, a critic with N = 1 (refused: plain sampling loads none), a critic path that is not an
    HF model folder."""
    if n < 1:
        raise ValueError(f"--best-of must be at least 1 (1 = plain sampling), got {n}")
    if n > 1 and critic is None:
        raise ValueError(f"--best-of {n} needs --critic PATH|{BASE_CRITIC}: the critic that ranks the candidates")
    if n == 1 and critic is not None:
        raise ValueError(
            f"--critic {critic} is refused with --best-of 1: one candidate is plain sampling and loads no critic"
        )
    if critic not in (None, BASE_CRITIC) and not (Path(critic) / "config.json").is_file():
        raise ValueError(
            f"--critic {critic} is not an HF model folder (no config.json there): give a trained critic's "
            f"folder, e.g. runs/pipeline/<run>/iter-1/train/critic/model, or `{BASE_CRITIC}`"
        )


class Ranker(Protocol):
    """Scores of each episode's candidates (higher = better), one list per episode."""

    def scores(self, episodes: Sequence[Episode], candidates: Sequence[Sequence[Generation]]) -> list[list[float]]: ...


class BestOfN:
    """The driver's turn hook: N candidates per episode in one engine call, the best-ranked kept."""

    def __init__(self, n: int, ranker: Ranker | None = None, critic: str | None = None) -> None:
        if n < 1 or (n > 1 and ranker is None):
            raise ValueError(f"best-of-{n} needs n >= 1 and, for n > 1, a ranker")
        self.n, self.ranker, self.critic = n, ranker, critic
        self.spreads: list[float] = []  # per ranked state: best minus worst candidate score
        self.kept: list[int] = []  # per ranked state: the index of the kept candidate
        self.ranking_seconds = 0.0  # time in the ranker (the rest of a turn is the engine's)

    def sample(self, agent: Engine, episodes: Sequence[Episode], sampling: SamplingConfig) -> list[Generation]:
        prompts = [ep.prompt_ids for ep in episodes for _ in range(self.n)]
        seeds = [candidate_seed(ep, k) for ep in episodes for k in range(self.n)]
        gens = agent.generate(prompts, sampling, seeds)
        groups = [gens[i * self.n : (i + 1) * self.n] for i in range(len(episodes))]
        if self.n == 1:
            return [group[0] for group in groups]
        start = time.perf_counter()
        ranked = self.ranker.scores(episodes, groups)
        self.ranking_seconds += time.perf_counter() - start
        return [self._keep(group, scores) for group, scores in zip(groups, ranked)]

    def _keep(self, group: Sequence[Generation], scores: Sequence[float]) -> Generation:
        best = max(range(len(scores)), key=scores.__getitem__)  # the first maximum: ties by candidate order
        self.spreads.append(max(scores) - min(scores))
        self.kept.append(best)
        return group[best]

    def identity(self) -> dict:
        """Best-of-N episodes are not plain ones (N = 1 is: nothing to add)."""
        return {"best_of": {"n": self.n, "critic": self.critic}} if self.n > 1 else {}

    def metrics(self) -> dict:
        """best_of, critic, and over the states ranked in this run the critic score spread (best minus
        worst candidate: mean, min, max), how often the plain sample (candidate 0) was kept and the
        seconds spent ranking."""
        out: dict[str, Any] = {"best_of": self.n, "critic": self.critic}
        if self.spreads:
            out |= {
                "ranked_states": len(self.spreads),
                "critic_score_spread_mean": sum(self.spreads) / len(self.spreads),
                "critic_score_spread_min": min(self.spreads),
                "critic_score_spread_max": max(self.spreads),
                "kept_first_rate": self.kept.count(0) / len(self.kept),
                "ranking_seconds": self.ranking_seconds,
            }
        return out


class CriticRanker:
    """beta * (critic mean log-prob with c - actor mean log-prob without c) of each candidate. The
    models load on first use (fp32 on CPU, bf16 on a GPU); one copy when critic and actor are the
    same folder (`--critic base` on the base model)."""

    def __init__(self, critic: str, actor: str, task: Task, beta: float, max_batch: int) -> None:
        self.critic_path, self.actor_path, self.task = critic, actor, task
        self.beta, self.max_batch = beta, max_batch
        self._models: tuple[Any, Any, Any] | None = None
        self._prefixes: dict[str, list[int]] = {}  # task id -> reference prefix ids

    def _load(self) -> tuple[Any, Any, Any]:
        if self._models is None:
            from transformers import AutoTokenizer

            from components.training.models import load_frozen, train_device_dtype

            device, dtype = train_device_dtype()
            critic = load_frozen(self.critic_path, device, dtype)
            same = _same_model(self.critic_path, self.actor_path)
            actor = critic if same else load_frozen(self.actor_path, device, dtype)
            self._models = (critic, actor, AutoTokenizer.from_pretrained(self.critic_path))
        return self._models

    def _prefix(self, ep: Episode, tokenizer) -> list[int]:
        from components.lm.sequences import reference_prefix

        key = ep.job.task.task_id
        if key not in self._prefixes:
            self._prefixes[key] = reference_prefix(tokenizer, critic_information(self.task, ep.job.task))
        return self._prefixes[key]

    def scores(self, episodes: Sequence[Episode], candidates: Sequence[Sequence[Generation]]) -> list[list[float]]:
        from components.lm.shared_prefix import continuation_means

        critic, actor, tokenizer = self._load()
        out = []
        for ep, group in zip(episodes, candidates):
            ids = [list(g.token_ids) for g in group]
            with_c = continuation_means(critic, self._prefix(ep, tokenizer) + ep.prompt_ids, ids, self.max_batch)
            without = continuation_means(actor, ep.prompt_ids, ids, self.max_batch)
            out.append([self.beta * (c - a) for c, a in zip(with_c, without)])
        return out


def _same_model(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve() if Path(a).exists() and Path(b).exists() else a == b
