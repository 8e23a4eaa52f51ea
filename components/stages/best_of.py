"""Evaluation with critic-guided best-of-N:
`python -m components.stages.best_of --best-of N [--critic PATH|base] [--model M] [--out DIR]`.

Reads what the evaluation stage reads (components/stages/evaluate.py: the params file's `task`, the
task's sections, `episode`, `eval`) and, for N > 1, `critic` (`model`: the `base` critic; `beta`)
and `ranking` (`max_batch`: candidates per forward pass). Writes what the evaluation writes
(trajectories.jsonl with each kept turn's exact ids and log-probs, scores.jsonl, metrics.json), its
metrics.json also holding best_of, critic and the critic score spread (components/episodes/best_of.py).
`--critic base` is the untrained critic: the frozen `critic.model` reading c; a PATH is a trained
critic's HF folder. N = 1 is plain sampling (no critic loaded; the same episodes as the evaluation).

Not a DVC stage of the catalogue: `sweetflow eval --best-of` runs it in its own process
(flows/runtime/best_of.py), so its output folder may lie anywhere; a re-run resumes its episodes.
"""

from __future__ import annotations

import argparse

from components.config.sections import ConfigError, EvalConfig, load_section
from components.config.training import CriticConfig, RankingConfig
from components.episodes.best_of import BASE_CRITIC, BestOfN, CriticRanker, check_best_of
from components.stages import evaluate
from components.tasks.base import Task
from components.tasks.registry import task_from_sections

EVAL_MODULE = "components.stages.evaluate"  # the catalogue stage whose sections this one reads


def best_of_sampler(n: int, critic: str | None, cfg: EvalConfig, task: Task) -> BestOfN:
    """The driver's turn hook for `--best-of n --critic critic` (ValueError on a bad combination)."""
    check_best_of(n, critic)
    if n == 1:
        return BestOfN(1)
    critic_cfg = load_section(CriticConfig, "critic")
    path = critic_cfg.model if critic == BASE_CRITIC else critic
    ranker = CriticRanker(path, cfg.model, task, critic_cfg.beta, load_section(RankingConfig, "ranking").max_batch)
    return BestOfN(n, ranker, critic)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--best-of", type=int, required=True, help="candidates per agent turn (1: plain sampling)")
    parser.add_argument("--critic", help=f"trained critic folder, or `{BASE_CRITIC}` (critic.model with c)")


def main() -> None:
    sections, cfg, args = evaluate.stage_args(EVAL_MODULE, "eval", _options, prog="python -m components.stages.best_of")
    task = task_from_sections(sections)
    try:
        sampler = best_of_sampler(args.best_of, args.critic, cfg, task)
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    evaluate.print_metrics(evaluate.run(cfg, sections["episode"], task, cfg.out_dir, sampler))


if __name__ == "__main__":
    main()
